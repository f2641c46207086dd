//! Documents compressed one by one: liblz4's streams against the dictionary, or docstore's own
//! encoder at its level, every block it writes checked by decoding it back.

use super::decode::decoded_after_dict;
use super::*;

/// How documents are compressed: `level` 0 is lz4's fast mode, 1..=12 its HC levels,
/// `LEVEL_NONE` none at all.
pub struct Compressor {
    level: i32,
    dict: Arc<DictStreams>,
}

/// The dictionary, loaded once into an lz4 state of each mode (and, at `ENCODER_LEVEL`, indexed
/// for docstore's encoder), then shared read-only by all threads.
pub(super) struct DictStreams {
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
pub(super) struct WorkStreams {
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
pub(super) fn put_stored(raw: &[u8], out: &mut Vec<u8>) {
    varint::put(out, (raw.len() as u64) << 1);
    out.extend_from_slice(raw);
}
