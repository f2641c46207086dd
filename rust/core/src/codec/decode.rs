//! A stored blob parsed, its claims bounded, and decoded against the dictionary (kept per thread
//! in the layout lz4's fast path wants).

use super::*;

/// A stored blob split into its parts, lengths checked.
pub(super) enum Blob<'a> {
    Stored(&'a [u8]),
    Compressed { payload: &'a [u8], raw_len: usize },
}

pub(super) fn parse(blob: &[u8]) -> Result<Blob<'_>> {
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
pub(super) fn block_len(payload: &[u8]) -> Option<u64> {
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
pub(super) fn decoded_to_vec(payload: &[u8], raw_len: usize, dict: &[u8]) -> Result<Vec<u8>> {
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
pub(super) const KEPT_DICTIONARIES: usize = 64;
/// Output room a kept copy other than the most recent one holds on to between documents.
pub(super) const KEEP_ROOM_PER_DICTIONARY: usize = 256 << 10;

/// A thread's decode buffers: `[dictionary | output]` each. Decoding right behind a copy of the
/// dictionary lets lz4 treat it as a prefix of the output, its fast path (no external-dictionary
/// check on every match). Up to `KEPT_DICTIONARIES` copies are kept, least recently used out;
/// past that, a dictionary that is not kept is decoded against where it lies (lz4's external
/// mode) and copied in only when asked for twice in a row, so that many shards read at random
/// never cost a 64 KiB copy per document.
#[derive(Default)]
pub(super) struct Decoder {
    pub(super) kept: Vec<Kept>,
    /// The kept copy the last document was decoded behind: the next one almost always is too
    /// (one store, or a run of one shard's documents), and then nothing is looked up.
    pub(super) current: Option<usize>,
    pub(super) clock: u64,
    /// The dictionary not kept that was asked for last.
    pub(super) missed: u64,
    /// Output room for external-mode decoding.
    pub(super) scratch: Vec<u8>,
}

pub(super) struct Kept {
    /// Which dictionary (see `decoded_after_dict`).
    pub(super) id: u64,
    /// When it last became the current copy: between two switches only the current copy is
    /// used, so this orders the copies by their last use.
    pub(super) last_used: u64,
    pub(super) buf: Vec<u8>,
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
    pub(super) static DECODE: RefCell<Decoder> = RefCell::new(Decoder::default());
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
pub(super) fn decoded_after_dict<R>(
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
