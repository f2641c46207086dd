//! The CPU-cache executor of the plan (`plan`): a batch's dependent reads overlapped rather
//! than queued, group by group (`read_pipelined`); and `prepare_batch`, which hands a batch's
//! plan to the storage first (a remote cache fetches it; a cold map asks for its pages), with
//! `prefetch_index` the same for the key index pages a batch's search starts in.

use super::plan::{BatchPlan, Reads};
use super::{Found, Store, GROUP};
use crate::error::Result;
use crate::format::Section;
use crate::storage::{Plan, Storage};
use std::ops::Range;

impl<B: Storage> Store<B> {
    /// Starts loading byte `at` of section `s` into the CPU cache (and what checking that it is
    /// present reads, where the storage checks).
    #[inline(always)]
    fn prefetch(&self, s: Section, at: usize) {
        self.prefetch_span(s, at..at);
    }

    /// `prefetch` of the first cache lines of `range` (see `Storage::prefetch`).
    #[inline(always)]
    fn prefetch_span(&self, s: Section, range: Range<usize>) {
        if range.start >= self.section(s).len() {
            return; // a corrupt offset, which the read that follows reports
        }
        self.buf.prefetch(self.in_file(s, range));
    }

    /// Hands the storage the key index blocks that the searches of `keys` start in, as likely
    /// reads (`Storage::advise`): a map that looks cold asks for them at once, so that their
    /// reads overlap.
    pub(super) fn prefetch_index(&self, keys: &[&[u8]]) {
        self.buf.advise(&IndexPlan { store: self, keys });
    }

    /// Whether the key index blocks that the searches of `keys` start in look uncached
    /// (`Storage::looks_cold`): then the batch is best searched whole, its blocks asked for at
    /// once, rather than chunk by chunk.
    pub(crate) fn index_looks_cold(&self, keys: &[&[u8]]) -> bool {
        self.buf.looks_cold(&IndexPlan { store: self, keys })
    }

    /// Whether `prepare_batch` has anything to do for a batch of `len` records.
    #[inline]
    pub(crate) fn prepares_batch(&self, len: usize) -> bool {
        self.buf.prepares(len)
    }

    /// What a batch of `len` records `found` (with `keys`, their keys too) needs before
    /// `read_pipelined` reads them, done by the storage (`Storage::prepare`): from a remote
    /// store, their bytes fetched in a few rounds of concurrent requests; from a mapped file
    /// that looks uncached, all their pages asked for at once.
    pub(crate) fn prepare_batch(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        len: usize,
        keys: bool,
    ) -> Result<()> {
        let reads = Reads { blobs: true, keys };
        self.buf.prepare(&BatchPlan {
            store: self,
            found,
            len,
            reads,
        })
    }

    /// Loads what reading the records `found` (with `keys`, their keys too) reads, ahead of
    /// the read and whatever the storage guesses is warm (`Storage::load_ahead`); returns the
    /// bytes fetched or asked of the page cache.
    pub(crate) fn load_ahead(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        len: usize,
        keys: bool,
    ) -> Result<u64> {
        let reads = Reads { blobs: true, keys };
        self.buf.load_ahead(&BatchPlan {
            store: self,
            found,
            len,
            reads,
        })
    }

    /// Loads every section but the documents (schema, dictionary, offsets, keys, key index),
    /// each read whole, so that a cold lookup then waits on one read only: its document's.
    /// Returns the bytes fetched or read.
    pub(crate) fn load_index(&self) -> Result<u64> {
        let ranges: Vec<Range<u64>> = (Section::ALL.iter())
            .filter(|&&s| s != Section::Data)
            .map(|&s| self.in_file(s, 0..usize::MAX))
            .filter(|r| !r.is_empty())
            .collect();
        self.buf.load_whole(&ranges)
    }
}

/// The key index blocks that the searches of `keys` start in: one round.
struct IndexPlan<'s, 'k, B> {
    store: &'s Store<B>,
    keys: &'k [&'k [u8]],
}

impl<B: Storage> IndexPlan<'_, '_, B> {
    fn block(&self, key: &[u8]) -> Option<Range<u64>> {
        let store = self.store;
        let bytes = store.block as usize * store.entry_size;
        let at = store.block_of(store.target(key)?) as usize * bytes;
        Some(store.in_file(Section::KeyIndex, at..at + bytes))
    }
}

impl<B: Storage> Plan for IndexPlan<'_, '_, B> {
    fn reads(&self) -> usize {
        self.keys.len()
    }

    fn rounds(&self) -> usize {
        1
    }

    fn each(&self, _round: usize, each: &mut dyn FnMut(Range<u64>)) {
        for range in self.keys.iter().filter_map(|k| self.block(k)) {
            each(range);
        }
    }

    fn sample(&self) -> Option<Range<u64>> {
        self.block(self.keys.first()?)
    }
}

/// The CPU-cache executor of the plan (`plan`): runs `read` on each item in order, each item
/// naming its store (one store, or the shards of a collection) and its position there, in
/// groups of `GROUP` whose rounds are prefetched first (the blob and, with `keys`, the key of
/// each: up to three dependent loads each), overlapped across a group rather than queued one
/// after another.
pub(crate) fn read_pipelined<'s, B: Storage + 's, T>(
    items: &[T],
    at: impl Fn(&T) -> (&'s Store<B>, Found),
    keys: bool,
    mut read: impl FnMut(&T) -> Result<()>,
) -> Result<()> {
    let reads = Reads { blobs: true, keys };
    for group in items.chunks(GROUP) {
        prefetch_round::<0, B, T>(group, &at, reads);
        prefetch_round::<1, B, T>(group, &at, reads);
        if reads.rounds() > 2 {
            prefetch_round::<2, B, T>(group, &at, reads);
        }
        for item in group {
            read(item)?;
        }
    }
    Ok(())
}

/// Starts loading into the CPU cache where the reads of round `ROUND` of `group` begin.
#[inline(always)]
fn prefetch_round<'s, const ROUND: usize, B: Storage + 's, T>(
    group: &[T],
    at: &impl Fn(&T) -> (&'s Store<B>, Found),
    reads: Reads,
) {
    for item in group {
        let (store, found) = at(item);
        // Each of the two touches on its own (not a loop over them): inlined, their sections
        // are constants.
        // With the ends: a blob's next offset lies beside its own, fetched in round 0.
        let [a, b] = store.touches::<ROUND, true>(found, reads);
        if let Some((s, range)) = a {
            store.prefetch_span(s, range);
        }
        if let Some((s, range)) = b {
            store.prefetch(s, range.start);
        }
    }
}
