//! Decode buffers (raw records and their strs made ready for Python) that a calling thread reuses
//! from one batch lookup to the next, and the reads that fill them.
//!
//! Fresh buffers for every call cost more than the decoding they hold: glibc serves allocations
//! over 128 KiB with `mmap`, so every batch of long documents page-faulted (zero-filled) its
//! whole output on first touch and unmapped it afterwards; measured, that ate the gain of
//! decoding on two cores. Each thread keeps the batches of its last call instead.

use crate::text::{Texts, Wants};
use docstore_core::{Collection, Located, RecordBatch};
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// A thread keeps at most this much between calls (a batch of 1024 documents of 8 KB); a larger
/// batch is freed, so that many calling threads never hold much between them.
const KEEP_BYTES: usize = 8 << 20;

/// A single-record lookup prepares its `str`s while Python is released (`Texts::prepare`) only
/// from this many raw bytes on. Below, `doc::raw_to_python` makes them with Python held, in the
/// one walk over the fields that builds the Doc: a second walk and a table of layouts cost more
/// than what they move out of the GIL. That is an ASCII check (~0.1 us for 4 KiB), or for other
/// text CPython's UTF-8 decoder (up to ~9 us for 4 KiB of 2- and 3-byte characters, as fast as
/// preparing them), the same work CPython does under the GIL whenever it decodes text.
const PREPARE_SINGLE_MIN: usize = 4 << 10;

/// The raw records of one chunk of a lookup, and their `str` fields made ready for Python.
#[derive(Default)]
pub struct Decoded {
    pub records: RecordBatch,
    pub texts: Texts,
}

impl Decoded {
    /// The records at `positions`, which `Collection::prefetch_records` fetched (a remote store),
    /// their `str` fields that `wanted` wants made ready for Python.
    pub fn read(
        &mut self,
        store: &Collection,
        positions: &[u64],
        wanted: &impl Wants,
    ) -> docstore_core::Result<()> {
        store.read_prefetched(positions, &mut self.records)?;
        self.texts.prepare(store.schema(), &self.records, wanted)
    }

    /// Like `read`, by key, of keys that `Collection::locate_batch` found (each with what was
    /// found): the position of each key (`None` when absent); only the records of keys found
    /// are read.
    pub fn read_located(
        &mut self,
        store: &Collection,
        items: &[(&[u8], Option<Located>)],
        wanted: &impl Wants,
    ) -> docstore_core::Result<Vec<Option<u64>>> {
        let positions = store.read_located(items, &mut self.records)?;
        self.texts.prepare(store.schema(), &self.records, wanted)?;
        Ok(positions)
    }

    /// Like `read_keys` for one key: its position, `None` when absent. Its `str`s are prepared
    /// only when the record is long (`PREPARE_SINGLE_MIN`).
    pub fn read_key(
        &mut self,
        store: &Collection,
        key: &[u8],
        wanted: &impl Wants,
    ) -> docstore_core::Result<Option<u64>> {
        let position = store.read_one(key, &mut self.records)?;
        self.prepare_single(store, wanted)?;
        Ok(position)
    }

    /// Like `read` for one position, its `str`s prepared as `read_key` prepares them.
    pub fn read_at(
        &mut self,
        store: &Collection,
        pos: u64,
        wanted: &impl Wants,
    ) -> docstore_core::Result<()> {
        store.read_records(&[pos], &mut self.records)?;
        self.prepare_single(store, wanted)
    }

    fn prepare_single(
        &mut self,
        store: &Collection,
        wanted: &impl Wants,
    ) -> docstore_core::Result<()> {
        match self.records.len() == 1 && self.records.get(0).len() < PREPARE_SINGLE_MIN {
            true => {
                self.texts.clear();
                Ok(())
            }
            false => self.texts.prepare(store.schema(), &self.records, wanted),
        }
    }

    pub fn clear(&mut self) {
        self.records.clear();
        self.texts.clear();
    }

    fn capacity_bytes(&self) -> usize {
        self.records.capacity_bytes() + self.texts.capacity_bytes()
    }
}

thread_local! {
    static KEPT: RefCell<Vec<Decoded>> = const { RefCell::new(Vec::new()) };
    static SINGLE: RefCell<Decoded> = RefCell::default();
}

/// Runs `f` on this thread's buffer for single-record lookups, emptied. One borrow: taking and
/// giving back `Batches` moved its list in and out of the thread's slot, ~4% of a lookup. A call
/// nested in `f` (Python code a finalizer runs), or made while the thread is torn down, gets a
/// buffer of its own.
pub fn with_single<R>(f: impl FnOnce(&mut Decoded) -> R) -> R {
    let mut f = Some(f);
    let kept = SINGLE.try_with(|cell| {
        let mut decoded = cell.try_borrow_mut().ok()?;
        decoded.clear();
        let result = (f.take()?)(&mut decoded);
        if decoded.capacity_bytes() > KEEP_BYTES {
            *decoded = Decoded::default();
        }
        Some(result)
    });
    match (kept, f) {
        (Ok(Some(result)), _) => result,
        (_, Some(f)) => f(&mut Decoded::default()),
        (_, None) => unreachable!("`f` is taken only by a call that returns its result"),
    }
}

/// This thread's reusable batches, taken for one call and given back when dropped.
pub struct Batches(Vec<Decoded>);

impl Batches {
    /// The thread's kept batches (none on first use, or while another call of this thread holds
    /// them: each call then simply gets its own).
    pub fn take() -> Batches {
        Batches(
            KEPT.with(|kept| kept.try_borrow_mut().map(|mut v| std::mem::take(&mut *v)))
                .unwrap_or_default(),
        )
    }
}

impl Deref for Batches {
    type Target = Vec<Decoded>;
    fn deref(&self) -> &Vec<Decoded> {
        &self.0
    }
}

impl DerefMut for Batches {
    fn deref_mut(&mut self) -> &mut Vec<Decoded> {
        &mut self.0
    }
}

impl Drop for Batches {
    fn drop(&mut self) {
        let bytes: usize = self.0.iter().map(Decoded::capacity_bytes).sum();
        if bytes <= KEEP_BYTES {
            let batches = std::mem::take(&mut self.0);
            // A thread being torn down has no kept batches any more: nothing to give back to.
            let _ = KEPT.try_with(|kept| {
                if let Ok(mut kept) = kept.try_borrow_mut() {
                    *kept = batches;
                }
            });
        }
    }
}
