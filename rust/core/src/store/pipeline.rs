//! Two of the plan's executors (`plan`): a batch's dependent reads overlapped rather than
//! queued, in the page cache (`hint_reads`, when a mapped file looks cold: `prepare_batch`;
//! and the key index pages of a search, `prefetch_index`) and in the CPU cache, group by group
//! (`read_pipelined`). `prepare_batch` also runs the third, a remote store's `fetch_reads`.

use super::plan::Reads;
use super::{Found, Store, GROUP, PREFETCH_MIN};
use crate::error::Result;
use crate::format::Section;
use crate::pagecache;
use crate::prefetch::prefetch;
use crate::storage::Storage;
use std::ops::Range;

impl<B: Storage> Store<B> {
    /// Starts loading byte `at` of section `s` into the CPU cache, and for a remote store the
    /// presence bits that `need` will check there.
    #[inline(always)]
    fn prefetch(&self, s: Section, at: usize) {
        self.prefetch_span(s, at..at);
    }

    /// `prefetch` of the cache lines of `range` (at least its first byte), up to `SPAN_LINES`:
    /// a blob is checked and decoded front to back, and the lines after the first would
    /// otherwise each wait for memory in turn (the CPU's own prefetcher follows a longer one).
    #[inline(always)]
    fn prefetch_span(&self, s: Section, range: Range<usize>) {
        const LINE: usize = 64;
        const SPAN_LINES: usize = 8;
        let section = self.section(s);
        if range.start >= section.len() {
            return; // a corrupt offset, which the read that follows reports
        }
        prefetch(section, range.start);
        let last = range.end.min(range.start + SPAN_LINES * LINE);
        let mut line = (range.start / LINE + 1) * LINE;
        while line < last {
            prefetch(section, line);
            line += LINE;
        }
        if self.buf.is_remote() {
            self.buf
                .prefetch_present(&self.in_file(s, range.start..range.start.saturating_add(1)));
        }
    }

    /// When the key index pages that `keys` need look uncached (by a sample), asks for all of
    /// them at once, so that their reads overlap.
    pub(super) fn prefetch_index(&self, keys: &[&[u8]]) {
        let index = self.section(Section::KeyIndex);
        let page = |key: &[u8]| {
            self.target(key)
                .map(|t| self.block_of(t) as usize * self.block as usize * self.entry_size)
        };
        if !self
            .cold
            .is_cold(|| page(keys[0]).is_none_or(|at| pagecache::resident(index, at)))
        {
            return;
        }
        for at in keys.iter().filter_map(|k| page(k)) {
            pagecache::will_need(index, at..at + self.block as usize * self.entry_size);
        }
    }

    /// The page-cache executor of the plan (`plan`): when the blobs `found` look uncached (by a
    /// sample), asks for all their pages at once, round by round: the doc offsets of those the
    /// key index did not locate, then the blobs (a `pread` store's through its file).
    fn hint_reads(&self, found: impl Iterator<Item = Found> + Clone) {
        let reads = Reads::BLOBS;
        let Some(first) = found.clone().next() else {
            return;
        };
        let [blob, _] = self.touches::<1, false>(first, reads);
        let data = self.section(Section::Data);
        if !self.cold.is_cold(|| {
            blob.is_none_or(|(_, r)| r.start >= data.len() || pagecache::resident(data, r.start))
        }) {
            return;
        }
        let data_start = self.ranges[Section::Data as usize].start as u64;
        for round in 0..reads.rounds() {
            self.each_touch(found.clone(), round, reads, |s, range| {
                match (&self.data_file, s) {
                    (Some(file), Section::Data) => pagecache::will_need_file(
                        file,
                        data_start + range.start as u64,
                        range.len(),
                    ),
                    _ => pagecache::will_need(self.section(s), range),
                }
            });
        }
    }

    /// Whether `prepare_batch` has anything to do for a batch of `len` records.
    pub(crate) fn prepares_batch(&self, len: usize) -> bool {
        (self.mapped && len >= PREFETCH_MIN) || self.buf.is_remote()
    }

    /// What a batch of `len` records `found` needs before `read_pipelined` reads them: from a
    /// remote store, their bytes fetched in a few rounds of concurrent requests; from a mapped
    /// file that looks uncached, all their pages asked for at once.
    pub(crate) fn prepare_batch(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        len: usize,
        keys: bool,
    ) -> Result<()> {
        if self.mapped && len >= PREFETCH_MIN {
            self.hint_reads(found.clone());
        }
        if self.buf.is_remote() {
            self.fetch_reads(found, Reads { blobs: true, keys })?;
        }
        Ok(())
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
            // A `pread` store's blobs are not in the map.
            if s != Section::Data || store.data_file.is_none() {
                store.prefetch_span(s, range);
            }
        }
        if let Some((s, range)) = b {
            store.prefetch(s, range.start);
        }
    }
}
