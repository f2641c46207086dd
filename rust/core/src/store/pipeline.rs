//! A batch's dependent reads (doc offsets, then blobs, then key ranks, key offsets and keys),
//! overlapped rather than queued: page-cache hints when a mapped file looks cold
//! (`prepare_batch`, `prefetch_index`), then CPU-cache prefetch group by group
//! (`read_pipelined`).

use super::{Found, Store, GROUP, PREFETCH_MIN};
use crate::error::Result;
use crate::format::Section;
use crate::pagecache;
use crate::prefetch::prefetch;
use crate::storage::Storage;

impl<B: Storage> Store<B> {
    /// Starts loading byte `at` of section `s` into the CPU cache, and for a remote store the
    /// presence bits that `need` will check there.
    #[inline(always)]
    fn prefetch(&self, s: Section, at: usize) {
        prefetch(self.section(s), at);
        if self.buf.is_remote() {
            self.buf
                .prefetch_check(&self.in_file(s, at..at.saturating_add(1)));
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

    /// When the blobs `found` look uncached (by a sample), asks for all their pages at once:
    /// first the doc offsets of those the key index did not locate, then the blobs.
    fn prefetch_records(&self, found: impl Iterator<Item = Found> + Clone) {
        let n = self.len();
        let data = self.section(Section::Data);
        let blob = |f: Found| (f.pos < n).then(|| self.blob_range(f).ok()).flatten();
        let Some(first) = found.clone().next() else {
            return;
        };
        if !self
            .cold
            .is_cold(|| blob(first).is_none_or(|r| pagecache::resident(data, r.start)))
        {
            return;
        }
        let offsets = self.section(Section::DocOffsets);
        for f in found.clone().filter(|f| f.pos < n && !self.located(f)) {
            let pos = f.pos as usize;
            pagecache::will_need(offsets, pos * 8..pos * 8 + 16);
        }
        let data_start = self.ranges[Section::Data as usize].start as u64;
        for range in found.filter_map(blob) {
            match &self.data_file {
                Some(file) => {
                    pagecache::will_need_file(file, data_start + range.start as u64, range.len())
                }
                None => pagecache::will_need(data, range),
            }
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
            self.prefetch_records(found.clone());
        }
        if self.buf.is_remote() {
            self.fetch_positions(found, true, keys)?;
        }
        Ok(())
    }
}

/// Runs `read` on each item in order, each item naming its store (one store, or the shards of a
/// collection) and its position there, in groups of `GROUP` whose doc offsets, blobs and (with
/// `keys`) key ranks, key offsets and keys are prefetched into the CPU cache first: three
/// dependent loads each, overlapped across a group rather than queued one after another.
pub(crate) fn read_pipelined<'s, B: Storage + 's, T>(
    items: &[T],
    at: impl Fn(&T) -> (&'s Store<B>, Found),
    keys: bool,
    mut read: impl FnMut(&T) -> Result<()>,
) -> Result<()> {
    // Where a blob starts, as far as a prefetch needs to know (checked when it is read).
    let blob_start = |store: &Store<B>, found: Found| match found.blob {
        Some((offset, _)) if store.header.locates_blobs() => offset as usize,
        _ => store.offset(Section::DocOffsets, found.pos) as usize,
    };
    for group in items.chunks(GROUP) {
        for item in group {
            let (store, found) = at(item);
            let pos = found.pos as usize;
            if !store.located(&found) {
                store.prefetch(Section::DocOffsets, pos.saturating_mul(8));
            }
            if keys {
                store.prefetch(Section::KeyRanks, pos.saturating_mul(4));
            }
        }
        for item in group {
            let (store, found) = at(item);
            let pos = found.pos;
            if pos < store.len() && store.data_file.is_none() {
                store.prefetch(Section::Data, blob_start(store, found));
            }
            if keys && pos < store.len() {
                let rank = store.index_u32(Section::KeyRanks, pos) as usize;
                store.prefetch(Section::KeyOffsets, rank.saturating_mul(8));
            }
        }
        if keys {
            for item in group {
                let (store, Found { pos, .. }) = at(item);
                if pos < store.len() {
                    let rank = store.index_u32(Section::KeyRanks, pos);
                    if rank < store.len() {
                        let key_at = store.offset(Section::KeyOffsets, rank) as usize;
                        store.prefetch(Section::Keys, key_at);
                    }
                }
            }
        }
        for item in group {
            read(item)?;
        }
    }
    Ok(())
}
