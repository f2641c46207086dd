//! `str` fields made ready for CPython while Python is released.
//!
//! A CPython `str` stores its text as fixed-width code units (1, 2 or 4 bytes, the narrowest
//! that holds its widest character). Turning a field's UTF-8 into those units (validating,
//! counting and transcoding) is most of the cost of a `str`; done here, in the decoding threads,
//! it runs in parallel and leaves the thread holding the GIL only an allocation and a copy.

use docstore_core::error::try_reserve;
use docstore_core::format::record::{self, RawValue};
use docstore_core::{Error, FieldType, RecordBatch, Result, Schema};
use std::ops::Range;

/// Where the code units of a prepared `str` are.
#[derive(Clone, Debug, PartialEq)]
pub enum Units {
    /// ASCII: the field's UTF-8 bytes are already the units.
    Ascii,
    /// Transcoded, in the `Texts` buffer.
    Buffer(Range<usize>),
}

/// A `str` as CPython lays it out: `chars` code points, none above `max_char`, which is exactly
/// the largest code point of its width (127, 255, 0xFFFF or 0x10FFFF), as `PyUnicode_New` wants.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub chars: usize,
    pub max_char: u32,
    pub units: Units,
}

impl Layout {
    /// Bytes per code unit: 1, 2 or 4.
    pub fn width(&self) -> usize {
        match self.max_char {
            0..=0xFF => 1,
            0x100..=0xFFFF => 2,
            _ => 4,
        }
    }

    /// The code units, from the field's UTF-8 bytes or the buffer they were transcoded to.
    pub fn units<'a>(&self, utf8: &'a [u8], buffer: &'a [u8]) -> &'a [u8] {
        match &self.units {
            Units::Ascii => utf8,
            Units::Buffer(range) => &buffer[range.clone()],
        }
    }
}

/// The layout of `utf8` as a `str`, its units appended to `buffer` unless it is ASCII; an error
/// when it is not valid UTF-8, or when memory for its units runs out.
fn layout_of(utf8: &[u8], buffer: &mut Vec<u8>) -> Result<Layout> {
    if is_ascii(utf8) {
        return Ok(Layout {
            chars: utf8.len(),
            max_char: 127,
            units: Units::Ascii,
        });
    }
    let text =
        std::str::from_utf8(utf8).map_err(|_| Error::Corrupt("str field is not UTF-8".into()))?;
    let (chars, widest) = count_and_widest(utf8);
    let start = buffer.len();
    // In valid UTF-8 the largest byte is the lead byte of the widest character, and it alone
    // says the width: C2-C3 start U+0080..U+00FF, up to EF the rest of the BMP, F0-F4 the
    // astral planes.
    let width = match widest {
        0..=0xC3 => 1,
        0xC4..=0xEF => 2,
        _ => 4,
    };
    try_reserve(buffer, chars * width)?;
    let max_char = if width == 1 {
        latin1(utf8, buffer);
        0xFF
    } else if width == 2 {
        for c in text.chars() {
            buffer.extend_from_slice(&(c as u16).to_ne_bytes());
        }
        0xFFFF
    } else {
        for c in text.chars() {
            buffer.extend_from_slice(&(c as u32).to_ne_bytes());
        }
        0x10FFFF
    };
    Ok(Layout {
        chars,
        max_char,
        units: Units::Buffer(start..buffer.len()),
    })
}

/// Whether `bytes` is ASCII: 64 bytes a step, their eight words OR-ed and tested once, where
/// `<[u8]>::is_ascii` tests every word (about 3x the instructions on a passage).
pub(crate) fn is_ascii(bytes: &[u8]) -> bool {
    const HIGH_BITS: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut blocks = bytes.chunks_exact(64);
    for block in &mut blocks {
        let any = (block.chunks_exact(8)).fold(0, |any, word| {
            any | u64::from_ne_bytes(word.try_into().expect("8 bytes"))
        });
        if any & HIGH_BITS != 0 {
            return false;
        }
    }
    blocks.remainder().is_ascii()
}

/// The number of characters of valid UTF-8 (the bytes that are not continuation bytes) and its
/// largest byte, in blocks whose byte-wide counters the compiler vectorises.
fn count_and_widest(utf8: &[u8]) -> (usize, u8) {
    let (mut continuations, mut widest) = (0, 0u8);
    for block in utf8.chunks(128) {
        let (mut count, mut max) = (0u8, 0u8);
        for &b in block {
            count += u8::from((b as i8) < -0x40);
            max = max.max(b);
        }
        continuations += usize::from(count);
        widest = widest.max(max);
    }
    (utf8.len() - continuations, widest)
}

/// Appends the Latin-1 units of `utf8` (valid, every character below U+0100): each run of ASCII
/// copied whole, then one two-byte sequence.
fn latin1(utf8: &[u8], buffer: &mut Vec<u8>) {
    let mut rest = utf8;
    while !rest.is_empty() {
        let ascii = ascii_prefix(rest);
        buffer.extend_from_slice(&rest[..ascii]);
        rest = &rest[ascii..];
        match rest {
            [lead, continuation, tail @ ..] => {
                buffer.push(((lead & 0x03) << 6) | (continuation & 0x3F));
                rest = tail;
            }
            [] => {}
            [_] => unreachable!("valid UTF-8 ends no character after its lead byte"),
        }
    }
}

/// The length of the ASCII run that starts `bytes`, sixteen bytes at a time.
fn ascii_prefix(bytes: &[u8]) -> usize {
    const HIGH_BITS: u128 = u128::from_ne_bytes([0x80; 16]);
    let mut n = 0;
    for block in bytes.chunks_exact(16) {
        let high = u128::from_le_bytes(block.try_into().expect("16 bytes")) & HIGH_BITS;
        if high != 0 {
            // Little-endian: the lowest set bit belongs to the first non-ASCII byte.
            return n + (high.trailing_zeros() / 8) as usize;
        }
        n += 16;
    }
    n + bytes[n..].iter().take_while(|b| b.is_ascii()).count()
}

/// Which fields a lookup converts to Python, by field index.
pub trait Wants {
    fn wants(&self, index: usize) -> bool;
}

/// The prepared `str` fields of the records of one batch, by record and field.
#[derive(Default)]
pub struct Texts {
    buffer: Vec<u8>,
    /// `field_count` entries per record: the layout of each wanted `str` field, else `None`.
    layouts: Vec<Option<Layout>>,
    field_count: usize,
}

impl Texts {
    pub fn clear(&mut self) {
        self.buffer.clear();
        self.layouts.clear();
        self.field_count = 0;
    }

    pub fn capacity_bytes(&self) -> usize {
        self.buffer.capacity() + self.layouts.capacity() * std::mem::size_of::<Option<Layout>>()
    }

    /// Prepares the `str` fields that `wanted` wants (by field index) of every record of `batch`.
    pub fn prepare(
        &mut self,
        schema: &Schema,
        batch: &RecordBatch,
        wanted: &impl Wants,
    ) -> Result<()> {
        self.clear();
        let is_wanted_str =
            |index: usize| wanted.wants(index) && schema.fields[index].ty == FieldType::Str;
        if !(0..schema.len()).any(is_wanted_str) {
            return Ok(());
        }
        self.field_count = schema.len();
        self.layouts.reserve(batch.len() * self.field_count);
        for i in 0..batch.len() {
            for (index, value) in record::raw_fields(schema, batch.get(i)).enumerate() {
                self.layouts.push(match value? {
                    RawValue::Utf8(utf8) if wanted.wants(index) => {
                        Some(layout_of(utf8, &mut self.buffer)?)
                    }
                    _ => None,
                });
            }
        }
        Ok(())
    }

    /// Record `i`'s prepared fields (none if nothing was prepared).
    pub fn record(&self, i: usize) -> RecordTexts<'_> {
        let layouts = self
            .layouts
            .get(i * self.field_count..(i + 1) * self.field_count)
            .unwrap_or(&[]);
        RecordTexts {
            layouts,
            buffer: &self.buffer,
        }
    }
}

/// The prepared `str` fields of one record.
#[derive(Clone, Copy, Default)]
pub struct RecordTexts<'a> {
    layouts: &'a [Option<Layout>],
    buffer: &'a [u8],
}

impl<'a> RecordTexts<'a> {
    /// The layout of field `index` and the buffer its units may be in, if it was prepared.
    pub fn field(&self, index: usize) -> Option<(&'a Layout, &'a [u8])> {
        self.layouts
            .get(index)
            .and_then(Option::as_ref)
            .map(|layout| (layout, self.buffer))
    }
}

/// A record none of whose `str` fields were prepared: `doc::raw_to_python` makes them.
pub fn no_texts() -> RecordTexts<'static> {
    RecordTexts::default()
}
