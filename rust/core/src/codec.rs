//! Per-document lz4 compression against a dictionary shared by the whole store.
//!
//! Each document is one independent lz4 block, so one document decodes without its neighbours.
//! Short documents barely compress alone; a dictionary trained on the corpus gives every block
//! a 64 KiB history to match against, and lz4's HC mode finds the longer matches. Decoding is the
//! same plain `LZ4_decompress_safe_usingDict` whatever level wrote the block.
//!
//! At the default level (3) with a dictionary, blocks come from docstore's own encoder
//! (`encoder`): lz4 HC's level-3 parse over a read-only index of the dictionary, ~1.35x faster
//! than liblz4's at the same size. Every block it writes is decoded and compared before it is
//! kept; liblz4 compresses the document instead should one ever not round-trip.
//!
//! A stored blob is `varint(raw_len << 1 | compressed)` followed by the lz4 block, or by the raw
//! record when compression would not shrink it.

use crate::encoder::{DictIndex, Encoder};
use crate::error::{try_reserve, Error, Result};
use crate::format::varint;
use std::borrow::Cow;
use std::cell::RefCell;
use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

// liblz4 is compiled and linked by lz4-sys; we declare the (stable, v1.10) streaming functions
// we need ourselves because lz4-sys does not bind them.
use lz4_sys as _;

/// The liblz4 functions docstore calls. Public (hidden) for `benches/floors.rs`, whose floors
/// must call liblz4 itself, not this codec.
#[doc(hidden)]
#[allow(non_snake_case)]
pub mod ffi {
    use std::os::raw::{c_char, c_int};

    #[repr(C)]
    pub struct StreamHC {
        _opaque: [u8; 0],
    }
    #[repr(C)]
    pub struct Stream {
        _opaque: [u8; 0],
    }

    extern "C" {
        pub fn LZ4_createStreamHC() -> *mut StreamHC;
        pub fn LZ4_freeStreamHC(stream: *mut StreamHC) -> c_int;
        pub fn LZ4_resetStreamHC_fast(stream: *mut StreamHC, level: c_int);
        pub fn LZ4_loadDictHC(stream: *mut StreamHC, dict: *const c_char, size: c_int) -> c_int;
        pub fn LZ4_attach_HC_dictionary(work: *mut StreamHC, dict: *const StreamHC);
        pub fn LZ4_compress_HC_continue(
            stream: *mut StreamHC,
            src: *const c_char,
            dst: *mut c_char,
            src_size: c_int,
            dst_capacity: c_int,
        ) -> c_int;

        pub fn LZ4_createStream() -> *mut Stream;
        pub fn LZ4_freeStream(stream: *mut Stream) -> c_int;
        pub fn LZ4_resetStream_fast(stream: *mut Stream);
        pub fn LZ4_loadDict(stream: *mut Stream, dict: *const c_char, size: c_int) -> c_int;
        pub fn LZ4_attach_dictionary(work: *mut Stream, dict: *const Stream);
        pub fn LZ4_compress_fast_continue(
            stream: *mut Stream,
            src: *const c_char,
            dst: *mut c_char,
            src_size: c_int,
            dst_capacity: c_int,
            acceleration: c_int,
        ) -> c_int;

        pub fn LZ4_compressBound(input_size: c_int) -> c_int;
        pub fn LZ4_decompress_safe_usingDict(
            src: *const c_char,
            dst: *mut c_char,
            src_size: c_int,
            dst_capacity: c_int,
            dict: *const c_char,
            dict_size: c_int,
        ) -> c_int;
    }
}

/// lz4's largest block input (LZ4_MAX_INPUT_SIZE); larger records are stored uncompressed.
const MAX_INPUT: usize = 0x7E00_0000;
/// The longest dictionary: a limit of the format (its header check refuses longer), kept there.
pub use crate::format::MAX_DICT_SIZE;
/// Highest lz4 HC level.
pub const MAX_LEVEL: i32 = 12;
/// The level that stores every record as it is: the largest files, and lookups that decode
/// nothing (a record is read straight from the mapped file).
pub const LEVEL_NONE: i32 = -1;
/// The level at which docstore's encoder replaces liblz4's (it ports HC's level-3 parse).
const ENCODER_LEVEL: i32 = 3;
/// The most output room a thread keeps in its decode buffer (beyond the dictionary).
const KEEP_DECODE_BYTES: usize = 16 << 20;
/// lz4's largest expansion: each byte of a block yields at most this many decoded bytes. A literal
/// byte yields itself; a match costs a token and a 2-byte offset for at most 4 + 15 bytes, and
/// each length byte after them (255 meaning "and more") adds at most 255: so a match of `3 + k`
/// bytes yields at most `18 + 255 k < 255 (3 + k)`. Extra literal-length bytes yield nothing.
const MAX_EXPANSION: u64 = 255;
/// A compressed blob that claims more than this is parsed before its output is allocated: its
/// lz4 sequences must add up to exactly the length it claims (`block_len`).
const SCAN_CLAIMS_OVER: usize = 1 << 20;

/// How documents are compressed: `level` 0 is lz4's fast mode, 1..=12 its HC levels,
/// `LEVEL_NONE` none at all.
pub struct Compressor {
    level: i32,
    dict: Arc<DictStreams>,
}

/// The dictionary, loaded once into an lz4 state of each mode (and, at `ENCODER_LEVEL`, indexed
/// for docstore's encoder), then shared read-only by all threads.
struct DictStreams {
    bytes: Box<[u8]>,
    /// xxh3 of `bytes` (as the store's dictionary section checksum): names the dictionary to the
    /// per-thread decode buffer that checks the encoder's blocks.
    id: u64,
    hc: NonNull<ffi::StreamHC>,
    fast: NonNull<ffi::Stream>,
    index: Option<DictIndex>,
}

// SAFETY: after `new` the dictionary states are only read (attached to per-thread working states),
// which lz4 documents as safe; they are freed once, on drop.
unsafe impl Send for DictStreams {}
// SAFETY: as for `Send`: shared references only ever read the states.
unsafe impl Sync for DictStreams {}

impl DictStreams {
    fn new(bytes: &[u8], level: i32) -> DictStreams {
        let bytes: Box<[u8]> = bytes.into();
        // SAFETY: fresh states from lz4; `bytes` is heap memory that outlives both states.
        unsafe {
            let hc = NonNull::new(ffi::LZ4_createStreamHC()).expect("lz4: out of memory");
            let fast = NonNull::new(ffi::LZ4_createStream()).expect("lz4: out of memory");
            // The HC level must be set before the dictionary is loaded.
            ffi::LZ4_resetStreamHC_fast(hc.as_ptr(), level.max(1));
            ffi::LZ4_loadDictHC(hc.as_ptr(), bytes.as_ptr().cast(), bytes.len() as c_int);
            ffi::LZ4_loadDict(fast.as_ptr(), bytes.as_ptr().cast(), bytes.len() as c_int);
            let index =
                (level == ENCODER_LEVEL && !bytes.is_empty()).then(|| DictIndex::new(&bytes));
            DictStreams {
                id: xxh3_64(&bytes),
                bytes,
                hc,
                fast,
                index,
            }
        }
    }
}

impl Drop for DictStreams {
    fn drop(&mut self) {
        // SAFETY: created in `new`, freed only here.
        unsafe {
            ffi::LZ4_freeStreamHC(self.hc.as_ptr());
            ffi::LZ4_freeStream(self.fast.as_ptr());
        }
    }
}

/// Per-thread working states, created once per thread rather than once per document.
struct WorkStreams {
    hc: NonNull<ffi::StreamHC>,
    fast: NonNull<ffi::Stream>,
    encoder: Encoder,
}

impl WorkStreams {
    fn new() -> WorkStreams {
        // SAFETY: plain allocation of fresh lz4 states.
        unsafe {
            WorkStreams {
                hc: NonNull::new(ffi::LZ4_createStreamHC()).expect("lz4: out of memory"),
                fast: NonNull::new(ffi::LZ4_createStream()).expect("lz4: out of memory"),
                encoder: Encoder::new(),
            }
        }
    }
}

impl Drop for WorkStreams {
    fn drop(&mut self) {
        // SAFETY: created in `new`, freed only here.
        unsafe {
            ffi::LZ4_freeStreamHC(self.hc.as_ptr());
            ffi::LZ4_freeStream(self.fast.as_ptr());
        }
    }
}

thread_local! {
    static WORK: RefCell<Option<WorkStreams>> = const { RefCell::new(None) };
}

impl Compressor {
    /// `dict` is cut to its last 64 KiB (all lz4 can reach); `LEVEL_NONE` ignores it.
    pub fn new(level: i32, dict: &[u8]) -> Result<Compressor> {
        if !(LEVEL_NONE..=MAX_LEVEL).contains(&level) {
            return Err(Error::InvalidArgument(format!(
                "compression level must be {LEVEL_NONE} (none), 0 (fast) or 1 to {MAX_LEVEL} \
                 (lz4 HC, smallest at {MAX_LEVEL}), got {level}"
            )));
        }
        let dict = if level == LEVEL_NONE {
            &[]
        } else {
            &dict[dict.len().saturating_sub(MAX_DICT_SIZE)..]
        };
        Ok(Compressor {
            level,
            dict: Arc::new(DictStreams::new(dict, level)),
        })
    }

    pub fn level(&self) -> i32 {
        self.level
    }

    pub fn dictionary(&self) -> &[u8] {
        &self.dict.bytes
    }

    /// Appends the stored blob of `raw` to `out`.
    pub fn compress(&self, raw: &[u8], out: &mut Vec<u8>) {
        if self.level == LEVEL_NONE {
            return put_stored(raw, out);
        }
        let start = out.len();
        varint::put(out, (raw.len() as u64) << 1 | 1);
        let header_len = out.len() - start;
        if raw.len() <= MAX_INPUT {
            let block = out.len();
            let written = WORK.with(|cell| {
                let mut work = cell.borrow_mut();
                let work = work.get_or_insert_with(WorkStreams::new);
                match &self.dict.index {
                    Some(index) if work.encode_checked(index, self.dict.id, raw, out) => {
                        out.len() - block
                    }
                    _ => self.liblz4(work, raw, out),
                }
            });
            if written > 0 && written < raw.len() {
                return;
            }
        }
        // Incompressible (or too large for one lz4 block): store it as it is.
        out.truncate(start);
        put_stored(raw, out);
        debug_assert!(out.len() - start - raw.len() <= header_len);
    }

    /// Appends liblz4's block of `raw` (at most `MAX_INPUT` bytes) to `out`; its length, 0 if
    /// it failed.
    fn liblz4(&self, work: &mut WorkStreams, raw: &[u8], out: &mut Vec<u8>) -> usize {
        // SAFETY: bounded by LZ4_MAX_INPUT_SIZE, so this never fails or overflows.
        let bound = unsafe { ffi::LZ4_compressBound(raw.len() as c_int) } as usize;
        out.reserve(bound);
        // SAFETY: `dst` has `bound` bytes of spare capacity; the dictionary states live in
        // `self.dict` for the whole call; working states are this thread's own.
        let written = unsafe {
            let src = raw.as_ptr().cast::<c_char>();
            let dst = out.as_mut_ptr().add(out.len()).cast::<c_char>();
            let dict_attached = !self.dict.bytes.is_empty();
            if self.level == 0 {
                ffi::LZ4_resetStream_fast(work.fast.as_ptr());
                if dict_attached {
                    ffi::LZ4_attach_dictionary(work.fast.as_ptr(), self.dict.fast.as_ptr());
                }
                ffi::LZ4_compress_fast_continue(
                    work.fast.as_ptr(),
                    src,
                    dst,
                    raw.len() as c_int,
                    bound as c_int,
                    1,
                )
            } else {
                ffi::LZ4_resetStreamHC_fast(work.hc.as_ptr(), self.level);
                if dict_attached {
                    ffi::LZ4_attach_HC_dictionary(work.hc.as_ptr(), self.dict.hc.as_ptr());
                }
                ffi::LZ4_compress_HC_continue(
                    work.hc.as_ptr(),
                    src,
                    dst,
                    raw.len() as c_int,
                    bound as c_int,
                )
            }
        };
        if written <= 0 {
            return 0;
        }
        // SAFETY: lz4 initialised `written` bytes of the reserved capacity.
        unsafe { out.set_len(out.len() + written as usize) };
        written as usize
    }
}

impl WorkStreams {
    /// Appends docstore's encoder's block of `raw` to `out` if liblz4 decodes it back to `raw`;
    /// otherwise leaves `out` as it was and returns false (a bug there must not reach a store).
    fn encode_checked(
        &mut self,
        index: &DictIndex,
        dict_id: u64,
        raw: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        let block = out.len();
        // An assertion of the encoder failing is a bug there too: liblz4 takes over.
        let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.encoder.compress(index, raw, out)
        }));
        if encoded.is_err() {
            self.encoder = Encoder::new();
            out.truncate(block);
            return false;
        }
        let dict = index.dictionary();
        let ok = decoded_after_dict(&out[block..], raw.len(), dict, dict_id, |decoded| {
            decoded == raw
        })
        .unwrap_or(false);
        debug_assert!(
            ok,
            "docstore's lz4 encoder wrote a block that does not round-trip"
        );
        if !ok {
            out.truncate(block);
        }
        ok
    }
}

/// Appends the blob that holds `raw` as it is.
fn put_stored(raw: &[u8], out: &mut Vec<u8>) {
    varint::put(out, (raw.len() as u64) << 1);
    out.extend_from_slice(raw);
}

/// A stored blob split into its parts, lengths checked.
enum Blob<'a> {
    Stored(&'a [u8]),
    Compressed { payload: &'a [u8], raw_len: usize },
}

fn parse(blob: &[u8]) -> Result<Blob<'_>> {
    let mut pos = 0;
    let header = varint::get(blob, &mut pos)?;
    let payload = &blob[pos..];
    let raw_len = header >> 1;
    if header & 1 == 0 {
        if raw_len != payload.len() as u64 {
            return Err(Error::corrupt(
                "stored record length does not match its header",
            ));
        }
        return Ok(Blob::Stored(payload));
    }
    // What it claims sizes the output buffer: bounded by what lz4 can make of the payload, and
    // for the claims worth an allocation, by what the payload does make of itself.
    if raw_len > MAX_INPUT as u64 || raw_len > payload.len() as u64 * MAX_EXPANSION {
        return Err(Error::corrupt(format!(
            "compressed record claims {raw_len} bytes, more than its {} bytes of lz4 can hold",
            payload.len()
        )));
    }
    if raw_len > SCAN_CLAIMS_OVER as u64 && block_len(payload) != Some(raw_len) {
        return Err(Error::corrupt(format!(
            "compressed record claims {raw_len} bytes, which its lz4 block does not hold"
        )));
    }
    Ok(Blob::Compressed {
        payload,
        raw_len: raw_len as usize,
    })
}

/// The number of bytes the lz4 block `payload` decodes to, from its sequences' lengths alone
/// (docs/format.md §6.2), without decoding it: `None` if the block is cut short. Offsets are not
/// checked (the decoder does). Reads each byte of the block once, no output: a fraction of a
/// decode, paid only by records over `SCAN_CLAIMS_OVER`.
fn block_len(payload: &[u8]) -> Option<u64> {
    let mut bytes = payload.iter();
    // A length: `base`, plus each following byte while they are 255.
    let length = |bytes: &mut std::slice::Iter<'_, u8>, base: u8| -> Option<u64> {
        let mut length = u64::from(base);
        if base == 15 {
            loop {
                let byte = *bytes.next()?;
                length += u64::from(byte);
                if byte != 255 {
                    break;
                }
            }
        }
        Some(length)
    };
    let mut total = 0u64;
    loop {
        let token = *bytes.next()?;
        let literals = length(&mut bytes, token >> 4)?;
        let rest = bytes.as_slice();
        bytes = rest.get(usize::try_from(literals).ok()?..)?.iter();
        total += literals;
        if bytes.len() == 0 {
            return Some(total);
        }
        bytes.nth(1)?; // the offset
        total += 4 + length(&mut bytes, token & 15)?;
    }
}

/// lz4-decodes `payload` (`raw_len` bytes once decoded) to `out`, with the dictionary as history.
/// A dictionary lying right before `out` takes lz4's fast path (prefix mode).
///
/// # Safety
/// `out` must have room for `raw_len` bytes and `dict` must point at `dict_len` readable bytes.
pub(crate) unsafe fn lz4_decode(
    payload: &[u8],
    raw_len: usize,
    out: *mut u8,
    dict: *const u8,
    dict_len: usize,
) -> Result<()> {
    // SAFETY: lz4's safe decoder never writes more than `raw_len` bytes at `out` nor reads outside
    // `payload` and the dictionary; the caller guarantees the room.
    let n = unsafe {
        ffi::LZ4_decompress_safe_usingDict(
            payload.as_ptr().cast(),
            out.cast(),
            payload.len() as c_int,
            raw_len as c_int,
            dict.cast(),
            dict_len as c_int,
        )
    };
    if n < 0 || n as usize != raw_len {
        return Err(Error::corrupt("lz4 block does not decode"));
    }
    Ok(())
}

/// Decodes one stored blob back to its raw record.
pub fn decompress<'a>(blob: &'a [u8], dict: &[u8]) -> Result<Cow<'a, [u8]>> {
    let (payload, raw_len) = match parse(blob)? {
        Blob::Stored(raw) => return Ok(Cow::Borrowed(raw)),
        Blob::Compressed { payload, raw_len } => (payload, raw_len),
    };
    decoded_to_vec(payload, raw_len, dict).map(Cow::Owned)
}

/// `payload` lz4-decoded (`raw_len` bytes) into a new vector, with `dict` as history.
fn decoded_to_vec(payload: &[u8], raw_len: usize, dict: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::<u8>::new();
    out.try_reserve_exact(raw_len)
        .map_err(|_| Error::OutOfMemory { bytes: raw_len })?;
    // SAFETY: `out` has room for `raw_len` bytes, all written on success.
    unsafe {
        lz4_decode(
            payload,
            raw_len,
            out.as_mut_ptr(),
            dict.as_ptr(),
            dict.len(),
        )?;
        out.set_len(raw_len);
    }
    Ok(out)
}

/// Dictionaries a thread keeps a copy of for prefix-mode decoding (64 KiB each at most): the
/// shards of a collection each have their own, and a lookup hopping between shards must not copy
/// one per document (measured on 8 shards read at random: 5.5 µs a lookup with a copy each time,
/// 1.9 µs in one file).
const KEPT_DICTIONARIES: usize = 64;
/// Output room a kept copy other than the most recent one holds on to between documents.
const KEEP_ROOM_PER_DICTIONARY: usize = 256 << 10;

/// A thread's decode buffers: `[dictionary | output]` each. Decoding right behind a copy of the
/// dictionary lets lz4 treat it as a prefix of the output, its fast path (no external-dictionary
/// check on every match). Up to `KEPT_DICTIONARIES` copies are kept, least recently used out;
/// past that, a dictionary that is not kept is decoded against where it lies (lz4's external
/// mode) and copied in only when asked for twice in a row, so that many shards read at random
/// never cost a 64 KiB copy per document.
#[derive(Default)]
struct Decoder {
    kept: Vec<Kept>,
    /// The kept copy the last document was decoded behind: the next one almost always is too
    /// (one store, or a run of one shard's documents), and then nothing is looked up.
    current: Option<usize>,
    clock: u64,
    /// The dictionary not kept that was asked for last.
    missed: u64,
    /// Output room for external-mode decoding.
    scratch: Vec<u8>,
}

struct Kept {
    /// Which dictionary (see `decoded_after_dict`).
    id: u64,
    /// When it last became the current copy: between two switches only the current copy is
    /// used, so this orders the copies by their last use.
    last_used: u64,
    buf: Vec<u8>,
}

impl Decoder {
    /// The kept copy of dictionary `id` (`dict`), made the current one, or `None` where it is
    /// decoded against the caller's (external mode).
    fn switch_to(&mut self, id: u64, dict: &[u8]) -> Option<usize> {
        self.clock += 1;
        // The copy used until now keeps little room: many of them stay alive.
        if let Some(previous) = self.current.take() {
            let buf = &mut self.kept[previous].buf;
            if buf.capacity() > buf.len() + KEEP_ROOM_PER_DICTIONARY {
                buf.shrink_to(buf.len() + KEEP_ROOM_PER_DICTIONARY);
            }
        }
        let mut kept = self.kept.iter().position(|k| k.id == id);
        if kept.is_none() && (self.kept.len() < KEPT_DICTIONARIES || self.missed == id) {
            let slot = if self.kept.len() < KEPT_DICTIONARIES {
                self.kept.push(Kept {
                    id,
                    last_used: 0,
                    buf: Vec::new(),
                });
                self.kept.len() - 1
            } else {
                let oldest = (self.kept.iter().enumerate()).min_by_key(|(_, k)| k.last_used);
                oldest.map_or(0, |(i, _)| i)
            };
            let entry = &mut self.kept[slot];
            entry.id = id;
            entry.buf.clear();
            entry.buf.extend_from_slice(dict);
            kept = Some(slot);
        }
        match kept {
            Some(slot) => {
                self.missed = 0;
                self.kept[slot].last_used = self.clock;
                self.current = Some(slot);
            }
            None => self.missed = id,
        }
        kept
    }
}

thread_local! {
    static DECODE: RefCell<Decoder> = RefCell::new(Decoder::default());
}

/// Like `decompress`, but runs `f` on the raw record in a per-thread buffer (no allocation).
/// `dict_id` must identify the dictionary's content (the store uses its checksum).
pub fn decompress_with<R>(
    blob: &[u8],
    dict: &[u8],
    dict_id: u64,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    match parse(blob)? {
        Blob::Compressed { payload, raw_len } if !dict.is_empty() => {
            decoded_after_dict(payload, raw_len, dict, dict_id, f)
        }
        _ => Ok(f(&decompress(blob, dict)?)),
    }
}

/// Runs `f` on `payload` lz4-decoded (`raw_len` bytes) behind this thread's copy of the
/// dictionary named `dict_id` (xxh3 of its content).
fn decoded_after_dict<R>(
    payload: &[u8],
    raw_len: usize,
    dict: &[u8],
    dict_id: u64,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    DECODE.with(|cell| {
        // A decode nested in `f` (it never is in docstore) gets a buffer of its own.
        let Ok(mut guard) = cell.try_borrow_mut() else {
            return Ok(f(&decoded_to_vec(payload, raw_len, dict)?));
        };
        let state = &mut *guard;
        let id = dict_id ^ (dict.len() as u64).rotate_left(32);
        let kept = match state.current {
            Some(slot) if state.kept[slot].id == id => Some(slot),
            _ => state.switch_to(id, dict),
        };
        let (buf, start, history) = match kept {
            Some(slot) => (&mut state.kept[slot].buf, dict.len(), None),
            None => (&mut state.scratch, 0, Some(dict.as_ptr())),
        };
        buf.truncate(start);
        try_reserve(buf, raw_len)?;
        let history = history.unwrap_or(buf.as_ptr());
        // SAFETY: `buf` has room for `raw_len` bytes after `start`; the history is the dictionary,
        // either the copy right before `start` (prefix mode) or the caller's (external mode).
        let result = unsafe {
            lz4_decode(
                payload,
                raw_len,
                buf.as_mut_ptr().add(start),
                history,
                dict.len(),
            )
            .map(|()| f(std::slice::from_raw_parts(buf.as_ptr().add(start), raw_len)))
        };
        release_if_huge(buf, start);
        result
    })
}

/// Frees what a per-thread buffer holds beyond its first `keep` bytes once a rare huge record
/// made it grow past `KEEP_DECODE_BYTES` more: a thread keeps what common records need, not the
/// largest it ever met.
pub(crate) fn release_if_huge(buf: &mut Vec<u8>, keep: usize) {
    if buf.capacity() > keep + KEEP_DECODE_BYTES {
        buf.truncate(keep);
        buf.shrink_to(keep);
    }
}

/// Training reads at most this much of the sample: its time and memory (~6 bytes per sample
/// byte) grow with it, and more than the default first batch (4 MiB) adds little.
pub const MAX_TRAINING_BYTES: usize = 8 << 20;

/// The dictionary for records like `records` (a sample of the corpus): at most `size` bytes
/// (and 64 KiB, all lz4 can use), trained by `dictionary::train` on the first 8 MiB.
/// Deterministic.
pub fn dictionary_for<'a>(records: impl Iterator<Item = &'a [u8]> + Clone, size: usize) -> Vec<u8> {
    let mut budget = MAX_TRAINING_BYTES;
    let records = records.map_while(move |record| {
        let take = record.len().min(budget);
        budget -= take;
        (take > 0 || record.is_empty()).then(|| &record[..take])
    });
    let total: usize = records.clone().map(<[u8]>::len).sum();
    // A dictionary larger than a quarter of the data costs more than it saves.
    let size = size.min(MAX_DICT_SIZE).min(total / 4);
    if size == 0 {
        return Vec::new();
    }
    crate::dictionary::train(records, size)
}

/// Bytes of `docs` compressed one by one at `level` against `dict` (for tests).
#[cfg(test)]
pub(crate) fn compressed_size(docs: &[Vec<u8>], level: i32, dict: &[u8]) -> usize {
    let compressor = Compressor::new(level, dict).unwrap();
    docs.iter()
        .map(|doc| {
            let mut blob = Vec::new();
            compressor.compress(doc, &mut blob);
            blob.len()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(i: usize) -> Vec<u8> {
        format!(
            "document {i}: the quick brown fox jumps over the lazy dog near river bank {}",
            i * 7
        )
        .into_bytes()
    }

    #[test]
    fn round_trips_at_every_level_with_and_without_dictionary() {
        let docs: Vec<Vec<u8>> = (0..500).map(text).collect();
        let dict = dictionary_for(docs.iter().map(Vec::as_slice), 4096);
        assert!(!dict.is_empty());
        for level in [0, 1, 4, 9, 12] {
            for d in [&dict[..], &[][..]] {
                let c = Compressor::new(level, d).unwrap();
                for doc in &docs {
                    let mut blob = Vec::new();
                    c.compress(doc, &mut blob);
                    assert_eq!(&*decompress(&blob, c.dictionary()).unwrap(), &doc[..]);
                }
            }
        }
    }

    #[test]
    fn dictionary_stays_within_its_size_and_a_quarter_of_the_sample() {
        let short: Vec<Vec<u8>> = (0..100_000)
            .map(|i| format!("doc {i} short").into_bytes())
            .collect();
        let long: Vec<Vec<u8>> = (0..500).map(|i| text(i).repeat(40)).collect();
        for records in [&short, &long] {
            let dict = dictionary_for(records.iter().map(Vec::as_slice), MAX_DICT_SIZE);
            assert!(!dict.is_empty() && dict.len() <= MAX_DICT_SIZE);
            let few = dictionary_for(records[..10].iter().map(Vec::as_slice), MAX_DICT_SIZE);
            let total: usize = records[..10].iter().map(Vec::len).sum();
            assert!(few.len() <= total / 4, "{} of {total}", few.len());
        }
        assert_eq!(
            dictionary_for([b"tiny".as_slice()].into_iter(), MAX_DICT_SIZE),
            b"t"
        );
        // Training reads the first MAX_TRAINING_BYTES only, cutting the record that crosses it.
        let huge = vec![b'x'; MAX_TRAINING_BYTES + 1000];
        let first = dictionary_for([&huge[..]].into_iter(), MAX_DICT_SIZE);
        let cut = dictionary_for([&huge[..MAX_TRAINING_BYTES]].into_iter(), MAX_DICT_SIZE);
        assert_eq!(first, cut);
    }

    #[test]
    fn dictionary_shrinks_short_documents() {
        let docs: Vec<Vec<u8>> = (0..2000).map(text).collect();
        let raw: usize = docs.iter().map(Vec::len).sum();
        let size = |dict: &[u8]| compressed_size(&docs, 9, dict);
        let dict = dictionary_for(docs.iter().map(Vec::as_slice), MAX_DICT_SIZE);
        let (plain, with_dict) = (size(&[]), size(&dict));
        assert!(
            with_dict * 2 < plain,
            "dict {with_dict} vs plain {plain} of raw {raw}"
        );
    }

    #[test]
    fn incompressible_and_empty_records_are_stored_raw() {
        let c = Compressor::new(9, b"").unwrap();
        for raw in [vec![], (0..=255u8).collect::<Vec<_>>()] {
            let mut blob = Vec::new();
            c.compress(&raw, &mut blob);
            assert_eq!(blob[0] & 1, 0);
            assert_eq!(&*decompress(&blob, b"").unwrap(), &raw[..]);
        }
    }

    #[test]
    fn corrupt_blobs_are_errors_not_crashes() {
        let c = Compressor::new(9, b"").unwrap();
        let mut blob = Vec::new();
        c.compress(&text(1).repeat(20), &mut blob);
        for cut in 0..blob.len() {
            let _ = decompress(&blob[..cut], b"");
        }
        for i in 0..blob.len() {
            let mut bad = blob.clone();
            bad[i] ^= 0x5a;
            let _ = decompress(&bad, b"");
        }
        assert!(decompress(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0], b"").is_err());
        assert!(Compressor::new(13, b"").is_err());
        assert!(Compressor::new(LEVEL_NONE - 1, b"").is_err());
    }

    /// A compressed blob of `payload` that claims `raw_len` bytes.
    fn claiming(raw_len: u64, payload: &[u8]) -> Vec<u8> {
        let mut blob = Vec::new();
        varint::put(&mut blob, raw_len << 1 | 1);
        blob.extend_from_slice(payload);
        blob
    }

    #[test]
    fn claimed_lengths_are_bounded_by_what_the_payload_holds() {
        // About the densest block there is: one match whose length takes every byte but its
        // token and offset, then the 5 literals lz4 ends a block with; behind a 1-byte dictionary.
        let mut densest = vec![0x0f, 1, 0];
        densest.extend(std::iter::repeat_n(255, 5000));
        densest.extend([254, 0x50, b'a', b'b', b'c', b'd', b'e']);
        let most = block_len(&densest).unwrap();
        assert_eq!(most, 4 + 15 + 255 * 5000 + 254 + 5);
        assert!(most <= densest.len() as u64 * MAX_EXPANSION);
        let blob = claiming(most, &densest);
        assert_eq!(decompress(&blob, b"x").unwrap().len() as u64, most);
        // More than MAX_EXPANSION times the payload: refused before anything is allocated.
        let too_much = claiming(densest.len() as u64 * MAX_EXPANSION + 1, &densest);
        let err = decompress(&too_much, b"x").unwrap_err();
        assert!(err.to_string().contains("more than its"), "{err}");
        // Within it, but not what the sequences add up to: refused before allocating too.
        for claim in [most - 1, most + 1, MAX_INPUT as u64] {
            let payload = if claim == MAX_INPUT as u64 {
                vec![0; MAX_INPUT / 255 + 1]
            } else {
                densest.clone()
            };
            let err = decompress(&claiming(claim, &payload), b"x").unwrap_err();
            assert!(err.to_string().contains("does not hold"), "{claim}: {err}");
        }
        // Genuine records over SCAN_CLAIMS_OVER, at both encoders: their sequences add up, and
        // every cut of their blocks is refused.
        let big = text(3).repeat(SCAN_CLAIMS_OVER / text(3).len() + 100);
        for level in [0, 9] {
            let c = Compressor::new(level, b"").unwrap();
            let mut blob = Vec::new();
            c.compress(&big, &mut blob);
            let Ok(Blob::Compressed { payload, raw_len }) = parse(&blob) else {
                panic!("a compressed blob")
            };
            assert_eq!(block_len(payload), Some(raw_len as u64));
            assert_eq!(&*decompress(&blob, b"").unwrap(), &big[..]);
            for cut in [1, 2, 3, 100, payload.len() / 2] {
                assert!(decompress(&blob[..blob.len() - cut], b"").is_err());
            }
        }
    }

    #[test]
    fn decoding_behind_the_dictionary_matches_plain_decoding() {
        let docs: Vec<Vec<u8>> = (0..200).map(text).collect();
        let dicts = [
            dictionary_for(docs[..100].iter().map(Vec::as_slice), 4096),
            dictionary_for(docs[100..].iter().map(Vec::as_slice), 8192),
        ];
        let compressors: Vec<Compressor> = dicts
            .iter()
            .map(|d| Compressor::new(ENCODER_LEVEL, d).unwrap())
            .collect();
        // Alternate dictionaries (the thread's copy is replaced), nest a decode inside another
        // (it gets its own buffer), and decode one document larger than the buffer keeps.
        for (i, doc) in docs.iter().enumerate() {
            let c = &compressors[i % 2];
            let (dict, id) = (c.dictionary(), xxh3_64(c.dictionary()));
            let mut blob = Vec::new();
            c.compress(doc, &mut blob);
            let got = decompress_with(&blob, dict, id, |raw| {
                let inner = decompress_with(&blob, dict, id, <[u8]>::to_vec).unwrap();
                assert_eq!(inner, raw);
                raw.to_vec()
            });
            assert_eq!(got.unwrap(), &doc[..]);
        }
        let huge = text(7).repeat((KEEP_DECODE_BYTES / text(7).len()) + 2);
        let fast = Compressor::new(0, &dicts[0]).unwrap();
        let mut blob = Vec::new();
        fast.compress(&huge, &mut blob);
        let id = xxh3_64(&dicts[0]);
        assert!(decompress_with(&blob, &dicts[0], id, |raw| raw == &huge[..]).unwrap());
        // The room it needed is given back at once, not kept until some later decode.
        DECODE.with(|cell| {
            let capacity = cell
                .borrow()
                .kept
                .iter()
                .map(|k| k.buf.capacity())
                .max()
                .unwrap_or(0);
            assert!(capacity < dicts[0].len() + KEEP_DECODE_BYTES, "{capacity}");
        });
    }

    #[test]
    fn more_dictionaries_than_a_thread_keeps_decode_right_and_keep_little_room() {
        // Past KEPT_DICTIONARIES the least recently used copy goes; a copy switched away from
        // gives back what a large document made it grow by.
        let n = KEPT_DICTIONARIES + 6;
        let dicts: Vec<Vec<u8>> = (0..n)
            .map(|k| {
                dictionary_for(
                    (0..20)
                        .map(|i| text(k * 20 + i))
                        .collect::<Vec<_>>()
                        .iter()
                        .map(Vec::as_slice),
                    2048,
                )
            })
            .collect();
        let doc = |k: usize| text(k % 40);
        let blob = |k: usize, doc: &[u8]| {
            let mut blob = Vec::new();
            Compressor::new(3, &dicts[k])
                .unwrap()
                .compress(doc, &mut blob);
            blob
        };
        let order = (0..n)
            .chain((0..n).rev())
            .chain((0..3 * n).map(|i| (i * 7) % n));
        for k in order.flat_map(|k| [k, k]) {
            let dict = &dicts[k];
            let got = decompress_with(&blob(k, &doc(k)), dict, xxh3_64(dict), <[u8]>::to_vec);
            assert_eq!(got.unwrap(), doc(k), "dictionary {k}");
        }
        let large = text(3).repeat((4 * KEEP_ROOM_PER_DICTIONARY) / text(3).len());
        for k in [0, 1] {
            let (dict, large_blob) = (&dicts[k], blob(k, &large));
            let got = decompress_with(&large_blob, dict, xxh3_64(dict), |raw| raw == &large[..]);
            assert!(got.unwrap());
        }
        DECODE.with(|cell| {
            let state = cell.borrow();
            assert!(state.kept.len() <= KEPT_DICTIONARIES);
            let first = state
                .kept
                .iter()
                .find(|k| k.id == xxh3_64(&dicts[0]) ^ (dicts[0].len() as u64).rotate_left(32));
            let first = first.expect("dictionary 0 was used second to last: it is kept");
            assert!(first.buf.capacity() <= dicts[0].len() + KEEP_ROOM_PER_DICTIONARY);
        });
    }

    #[test]
    fn documents_of_alternating_dictionaries_decode_right() {
        // A collection reads shards with their own dictionaries in any order: decoded against a
        // dictionary where it lies, or behind the thread's copy of it, the bytes are the same.
        let docs: Vec<Vec<u8>> = (0..60).map(text).collect();
        let dicts: Vec<Vec<u8>> = (0..3)
            .map(|k| dictionary_for(docs[k * 20..k * 20 + 20].iter().map(Vec::as_slice), 4096))
            .collect();
        let blobs: Vec<Vec<u8>> = (docs.iter().enumerate())
            .map(|(i, doc)| {
                let mut blob = Vec::new();
                Compressor::new(3, &dicts[i % 3])
                    .unwrap()
                    .compress(doc, &mut blob);
                blob
            })
            .collect();
        let order = (0..60).chain((0..60).flat_map(|i| [i, i, (i * 7) % 60]));
        for i in order {
            let dict = &dicts[i % 3];
            let got = decompress_with(&blobs[i], dict, xxh3_64(dict), <[u8]>::to_vec).unwrap();
            assert_eq!(got, docs[i], "document {i}");
        }
    }

    #[test]
    fn level_none_stores_records_as_they_are_and_ignores_the_dictionary() {
        let docs: Vec<Vec<u8>> = (0..50).map(text).collect();
        let dict = dictionary_for(docs.iter().map(Vec::as_slice), 4096);
        let c = Compressor::new(LEVEL_NONE, &dict).unwrap();
        assert!(c.dictionary().is_empty());
        for doc in docs.iter().chain([&Vec::new()]) {
            let mut blob = Vec::new();
            c.compress(doc, &mut blob);
            let mut want = Vec::new();
            varint::put(&mut want, (doc.len() as u64) << 1);
            want.extend_from_slice(doc);
            assert_eq!(blob, want);
            // Read in place: no copy, no decoding.
            assert!(matches!(decompress(&blob, b""), Ok(Cow::Borrowed(raw)) if raw == &doc[..]));
        }
    }
}
