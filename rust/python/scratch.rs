//! Decode buffers (raw records and their strs made ready for Python) that a calling thread reuses
//! from one batch lookup to the next, and the reads that fill them.
//!
//! Fresh buffers for every call cost more than the decoding they hold: glibc serves allocations
//! over 128 KiB with `mmap`, so every batch of long documents page-faulted (zero-filled) its
//! whole output on first touch and unmapped it afterwards; measured, that ate the gain of
//! decoding on two cores. Each thread keeps the batches of its last call instead.

use crate::text::{Texts, Wants};
use docstore_core::{Collection, RecordBatch};
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// A thread keeps at most this much between calls (a batch of 1024 documents of 8 KB); a larger
/// batch is freed, so that many calling threads never hold much between them.
const KEEP_BYTES: usize = 8 << 20;

/// The raw records of one chunk of a lookup, and their `str` fields made ready for Python.
#[derive(Default)]
pub struct Decoded {
    pub records: RecordBatch,
    pub texts: Texts,
}

impl Decoded {
    /// The records at `positions`, their `str` fields that `wanted` wants made ready for Python.
    pub fn read(
        &mut self,
        store: &Collection,
        positions: &[u64],
        wanted: &impl Wants,
    ) -> docstore_core::Result<()> {
        store.read_records(positions, &mut self.records)?;
        self.texts.prepare(store.schema(), &self.records, wanted)
    }

    /// Like `read`, by key: the position of each key (`None` when absent); only the records of
    /// keys found are read.
    pub fn read_keys(
        &mut self,
        store: &Collection,
        keys: &[&[u8]],
        wanted: &impl Wants,
    ) -> docstore_core::Result<Vec<Option<u64>>> {
        let positions = store.read_many(keys, &mut self.records)?;
        self.texts.prepare(store.schema(), &self.records, wanted)?;
        Ok(positions)
    }

    /// Like `read_keys` for one key: its position, `None` when absent.
    pub fn read_key(
        &mut self,
        store: &Collection,
        key: &[u8],
        wanted: &impl Wants,
    ) -> docstore_core::Result<Option<u64>> {
        let position = store.read_one(key, &mut self.records)?;
        self.texts.prepare(store.schema(), &self.records, wanted)?;
        Ok(position)
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

    /// The first batch, emptied: the buffer of a single-record lookup.
    pub fn single(&mut self) -> &mut Decoded {
        if self.0.is_empty() {
            self.0.push(Decoded::default());
        }
        let batch = &mut self.0[0];
        batch.clear();
        batch
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
