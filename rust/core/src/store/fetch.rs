//! A remote `Store`'s plan: what a lookup or a batch will read, fetched into the cache before
//! it is read, in as few rounds of concurrent requests as the reads' dependencies allow (the
//! key index blocks a search reads, `fetch_blocks`; doc offsets, then blobs, then keys,
//! `position_rounds`), and rent or buy for the index sections (`rent_or_buy`). A local store
//! has nothing to fetch: `need`, `fetch_search` and the `prefetch_*` calls return at once.

use super::plan::Reads;
use super::search::lower_bound;
use super::{Found, Store, GROUP};
use crate::error::{Error, Result};
use crate::format::Section;
use crate::keys::entry::KeyEntry;
use crate::storage::Storage;
use std::ops::Range;
use std::sync::atomic;
use xxhash_rust::xxh3::xxh3_64;

/// The most blobs a lookup of a long key fetches before it knows which is its own (see
/// `fetch_blocks`).
const SPECULATE: usize = 4;

impl<B: Storage> Store<B> {
    /// Makes bytes `range` of section `s` readable before they are read: nothing to do for a
    /// local store; a remote one fetches what its cache lacks (see `storage`).
    #[inline(always)]
    pub(super) fn need(&self, s: Section, range: Range<usize>) -> Result<()> {
        if self.buf.is_remote() {
            self.need_remote(s, range)?;
        }
        Ok(())
    }

    #[cold]
    fn need_remote(&self, s: Section, range: Range<usize>) -> Result<()> {
        let range = self.in_file(s, range);
        if !range.is_empty() {
            self.buf.ensure_one(range)?;
        }
        Ok(())
    }

    /// Whether entries `range` (of `size` bytes each) of section `s` are readable (always, for a
    /// local store).
    fn present(&self, s: Section, range: Range<u64>, size: usize) -> bool {
        let base = self.ranges[s as usize].start as u64;
        let size = size as u64;
        self.buf
            .is_present(base + range.start * size..base + range.end * size)
    }

    /// Makes every range of `wants` readable, fetching what is missing in one round of
    /// concurrent requests (ranges are clipped to their sections).
    #[cold]
    pub(super) fn fetch(
        &self,
        wants: impl IntoIterator<Item = (Section, Range<usize>)>,
    ) -> Result<()> {
        // Present ranges are only stamped (no allocation: a warm batch passes through here). In
        // groups, their presence bits loaded first, so that the cache misses of a batch overlap
        // rather than queue.
        let mut wants = (wants.into_iter())
            .map(|(s, r)| (s, self.in_file(s, r)))
            .filter(|(_, r)| !r.is_empty());
        let mut group: [(Section, Range<u64>); GROUP] =
            std::array::from_fn(|_| (Section::Data, 0..0));
        let mut missing: Vec<(Section, Range<u64>)> = Vec::new();
        loop {
            let len = (group.iter_mut())
                .map_while(|slot| wants.next().map(|want| *slot = want))
                .count();
            for (_, range) in &group[..len] {
                self.buf.prefetch_check(range);
            }
            for (s, range) in &group[..len] {
                if !self.buf.check(range.clone()) {
                    missing.push((*s, range.clone()));
                }
            }
            if len < GROUP {
                break;
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let _purchase = self.rent_or_buy(&mut missing);
        let mut missing: Vec<Range<u64>> = missing.into_iter().map(|(_, r)| r).collect();
        let asked = missing.clone();
        self.buf.ensure(&mut missing)?;
        // A section fetched whole is checked against its checksum (a small store's index).
        for s in Section::ALL {
            let r = &self.ranges[s as usize];
            let whole = |a: &Range<u64>| a.start <= r.start as u64 && r.end as u64 <= a.end;
            if r.start < r.end
                && asked.iter().any(whole)
                && xxh3_64(self.section(s)) != self.header.section(s).checksum
            {
                return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
            }
        }
        Ok(())
    }

    /// Rent or buy, for the index sections of a remote store: each request for pieces of a
    /// section is taken to cost `request_cost` bytes; once a section's requests have cost its
    /// size, the section comes whole (in this round, in requests of `max_request_bytes`), and
    /// every later read of it is free. So a run of random reads (a DataLoader's epoch) pays at
    /// most twice the cheaper of the two, and a few lookups never download a section. Sections
    /// of at most `MAX_PURCHASE` bytes, and what one `open` buys in all at most an eighth of the
    /// cache's budget (`Storage::begin_purchase`): more would be evicted before it paid off.
    ///
    /// One purchase at a time per cached store, across the node's processes: DataLoader workers
    /// reach the threshold together, and one of them buys while the others rent on.
    fn rent_or_buy(&self, missing: &mut Vec<(Section, Range<u64>)>) -> Option<Purchase<'_, B>> {
        let options = self.buf.remote_options()?;
        if options.request_cost == 0 {
            return None;
        }
        // The requests this round sends for each section: its missing ranges, merged as the
        // remote file merges them (`merge_gap`), not each piece (consecutive positions are one
        // request).
        missing.sort_unstable_by_key(|(s, r)| (*s as usize, r.start));
        let mut requests = [0u64; Section::COUNT];
        let mut end = [0u64; Section::COUNT];
        for (s, r) in missing.iter() {
            let i = *s as usize;
            if requests[i] == 0 || r.start > end[i] + options.merge_gap {
                requests[i] += 1;
            }
            end[i] = end[i].max(r.end);
        }
        const INDEX: [Section; 5] = [
            Section::DocOffsets,
            Section::Keys,
            Section::KeyOffsets,
            Section::KeyIndex,
            Section::KeyRanks,
        ];
        let mut buy = Vec::new();
        for s in INDEX.into_iter().filter(|&s| requests[s as usize] > 0) {
            let section = &self.ranges[s as usize];
            let len = (section.end - section.start) as u64;
            let n = requests[s as usize];
            let rent = self.rent[s as usize].fetch_add(n, atomic::Ordering::Relaxed) + n;
            if rent.saturating_mul(options.request_cost) >= len && len <= MAX_PURCHASE {
                buy.push(s);
            }
        }
        let bytes = buy
            .iter()
            .map(|&s| self.ranges[s as usize].len() as u64)
            .sum();
        let stamp = match buy.is_empty() {
            true => return None,
            false => self.buf.begin_purchase(bytes)?,
        };
        for s in buy {
            // A purchase is earned again from nothing (a section evicted since is rented anew).
            self.rent[s as usize].store(0, atomic::Ordering::Relaxed);
            let section = &self.ranges[s as usize];
            let whole = section.start as u64..section.end as u64;
            missing.retain(|(_, r)| r.end <= whole.start || r.start >= whole.end);
            missing.push((s, whole));
        }
        Some(Purchase(&self.buf, stamp))
    }

    /// Whether the common prefix is readable: always, but for a remote store before its first
    /// lookup.
    fn prefix_present(&self) -> bool {
        // Acquire: the prefix's bytes, which the thread that found them present saw, are seen.
        if self.prefix_fetched.load(atomic::Ordering::Acquire)
            || !self.buf.is_remote()
            || self.common_prefix.is_empty()
        {
            return true;
        }
        let present =
            (self.buf).is_present(self.in_file(Section::Keys, self.common_prefix.clone()));
        if present {
            self.prefix_fetched.store(true, atomic::Ordering::Release);
        }
        present
    }

    /// For a remote store, fetches what searching for `keys` reads that the cache lacks: nothing
    /// when their key index blocks and the common prefix are cached; else, in as few rounds as
    /// `fetch_blocks` can, the missing blocks (guessed from the keys past the prefix's length),
    /// with the prefix (the first lookup after open), and what long keys read.
    pub(super) fn fetch_search(&self, keys: &[&[u8]]) -> Result<()> {
        if !self.buf.is_remote() || self.is_empty() {
            return Ok(());
        }
        let n = self.len();
        // Until the prefix is fetched, keys are searched for as if they had it (those without
        // it fetch a block for nothing, once); then keys without it fetch nothing.
        let prefix = self.prefix_present();
        let target = |key: &[u8]| match prefix {
            true => self.target(key),
            false => self.guess(key),
        };
        let missing = |target: u64| {
            let start = self.block_of(target) * self.block;
            let block = start..(start + self.block).min(n);
            !self.present(Section::KeyIndex, block, self.entry_size)
        };
        if prefix && !keys.iter().any(|k| target(k).is_some_and(missing)) {
            return Ok(());
        }
        // In a batch that misses some blocks, the long keys too, whose keys and blobs the
        // search of the others' blocks prefetches (their own blocks are cached, their runs'
        // keys may not be).
        let short = self.common_prefix.len() + 8;
        self.fetch_blocks(keys.iter().filter_map(|k| {
            let target = target(k)?;
            (missing(target) || k.len() > short).then_some((target, k.len()))
        }))?;
        if !self.prefix_present() && keys.iter().any(|k| k.len() >= self.common_prefix.len()) {
            // No key had a block to fetch the prefix with.
            self.need(Section::Keys, self.common_prefix.clone())?;
        }
        Ok(())
    }

    /// For a remote store, fetches what searching for keys (their targets and lengths) reads, in
    /// as few rounds of concurrent requests as the search allows: the key index block where each
    /// is searched and that block's key offsets (the fences say which: one round); then, for
    /// keys longer than the common prefix plus 8 bytes (told apart by whole keys), the blocks
    /// and keys that `settle` reads: the run of entries sharing the key's prefix, as far as its
    /// gallop probes (more rounds only while a run goes past the blocks fetched so far).
    #[cold]
    fn fetch_blocks(&self, wanted: impl IntoIterator<Item = (u64, usize)>) -> Result<()> {
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        let short = self.header.common_prefix as usize + 8;
        let wanted: Vec<(u64, usize)> = wanted.into_iter().collect();
        let span = |b: u64| (b * self.block) as usize..((b + 1) * self.block).min(n) as usize;
        let mut fetched = std::collections::BTreeSet::new();
        // A block's key offsets come with it only for long keys (short ones never read keys).
        let mut with_offsets = std::collections::BTreeSet::new();
        // The common prefix, which the search compares, comes with the first blocks after open.
        let mut prefix = Some((Section::Keys, self.common_prefix.clone()));
        let mut fetch_blocks = |fetched: &mut std::collections::BTreeSet<u64>,
                                blocks: &mut dyn Iterator<Item = (u64, bool)>|
         -> Result<()> {
            let mut wants: Vec<_> = prefix.take().into_iter().collect();
            for (b, long) in blocks {
                let ranks = span(b);
                if fetched.insert(b) {
                    // And the next block's first two entries: a key past the block's last entry
                    // is settled there, and a run that ends at the block's end is seen to end
                    // (one request still, the ranges touch).
                    wants.push((
                        Section::KeyIndex,
                        ranks.start * self.entry_size..(ranks.end + 2) * self.entry_size,
                    ));
                }
                if long && with_offsets.insert(b) {
                    wants.push((Section::KeyOffsets, ranks.start * 8..ranks.end * 8 + 8));
                }
            }
            self.fetch(wants)
        };
        let first: Vec<(u64, bool)> = (wanted.iter())
            .map(|&(t, len)| (self.block_of(t), len > short))
            .collect();
        fetch_blocks(&mut fetched, &mut first.into_iter())?;
        // Long keys: where `settle` starts its gallop (past the short keys of the run), and how
        // far the gallop probes; blocks it reads that are missing are fetched, and it tries again.
        let index = self.section(Section::KeyIndex);
        let mut long: Vec<(u64, usize, Option<Range<u64>>)> = (wanted.iter())
            .filter(|&&(_, len)| len > short)
            .map(|&(t, len)| (t, len, None))
            .collect();
        for _ in 0..64 {
            let known = |rank: u64| {
                let b = rank / self.block;
                fetched.contains(&b)
                    || (rank % self.block < 2 && b > 0 && fetched.contains(&(b - 1)))
            };
            let mut missing = std::collections::BTreeSet::new();
            for (target, _, run) in long.iter_mut().filter(|(_, _, run)| run.is_none()) {
                let block = self.block_of(*target);
                let ranks = span(block);
                let mut rank = lower_bound(
                    index,
                    self.entry_size,
                    ranks.start as u64..ranks.end as u64,
                    *target,
                );
                let entry = |r: u64| KeyEntry::at(index, r, self.entry_size);
                let mut stuck = None;
                while rank < n {
                    if !known(rank) {
                        stuck = Some(rank);
                        break;
                    }
                    let e = entry(rank);
                    if e.prefix != *target || e.key_len as usize > short {
                        break;
                    }
                    rank += 1;
                }
                let (lo, mut hi, mut step) = (rank, rank, 1);
                while stuck.is_none() && hi < n {
                    if !known(hi) {
                        stuck = Some(hi);
                        break;
                    }
                    if entry(hi).prefix != *target {
                        break;
                    }
                    hi = (lo + step).min(n);
                    step *= 2;
                }
                match stuck {
                    Some(rank) => {
                        missing.insert(rank / self.block);
                    }
                    None => *run = Some(lo..hi),
                }
            }
            if missing.is_empty() {
                break;
            }
            fetch_blocks(&mut fetched, &mut missing.into_iter().map(|b| (b, true)))?;
        }
        // The binary search over whole keys reads the key offsets and keys of the whole run.
        let runs: Vec<Range<u64>> = (long.iter())
            .filter_map(|(_, _, run)| run.clone())
            .collect();
        fetch_blocks(
            &mut fetched,
            &mut runs
                .iter()
                .filter(|r| r.start < r.end)
                // The run's last rank is `end - 1`; its block's key offsets end with `end`'s.
                .flat_map(|r| r.start / self.block..=(r.end.min(n) - 1) / self.block)
                .map(|b| (b, true)),
        )?;
        let keys = runs.iter().filter_map(|r| {
            let start = self.offset(Section::KeyOffsets, r.start) as usize;
            let end = self.offset(Section::KeyOffsets, r.end) as usize;
            (start <= end).then_some((Section::Keys, start..end))
        });
        // Format 3: the blobs of the run's entries as long as the key asked for (at most
        // `SPECULATE` of them, usually one) come in the same round as the keys, so that the
        // lookup reads its document without a third round trip; a few blobs for nothing when
        // the key is not among them. Located by the entries, checked when read.
        let mut blobs = Vec::new();
        if self.header.locates_blobs() {
            for (_, len, run) in &long {
                let Some(run) = run else { continue };
                let candidates: Vec<KeyEntry> = (run.start..run.end.min(n))
                    .map(|r| KeyEntry::at(index, r, self.entry_size))
                    .filter(|e| e.key_len as usize == *len)
                    .take(SPECULATE + 1)
                    .collect();
                if candidates.len() <= SPECULATE {
                    // Clipped to the data section: a damaged location fetches nothing outside it.
                    let data = self.section(Section::Data).len() as u64;
                    blobs.extend(candidates.iter().map(|e| {
                        let start = e.blob_offset.min(data) as usize;
                        let end = e.blob_offset.saturating_add(e.blob_len).min(data) as usize;
                        (Section::Data, start..end)
                    }));
                }
            }
        }
        self.fetch(keys.chain(blobs))
    }

    /// For a remote store, fetches what reading `found` reads (with `keys`, the keys of their
    /// positions too, which a read by position checks its document with).
    pub fn prefetch_reads(&self, found: &[Found], keys: bool) -> Result<()> {
        if self.buf.is_remote() {
            let reads = Reads { blobs: true, keys };
            self.fetch_reads(found.iter().copied(), reads)?;
        }
        Ok(())
    }

    /// For a remote store, fetches the keys of `positions` (key ranks, key offsets, keys: three
    /// rounds of concurrent requests), and in a checked store the blobs that prove them, so
    /// that `key_at` then reads them from the cache. Nothing to do for a local store.
    pub fn prefetch_keys(&self, positions: Range<u64>) -> Result<()> {
        if self.buf.is_remote() {
            let reads = Reads {
                blobs: self.checked(),
                keys: true,
            };
            self.fetch_reads(positions.map(Found::at), reads)?;
        }
        Ok(())
    }

    /// The remote executor of the plan (`plan`): what reading the documents `found` touches,
    /// each round's ranges fetched in one round of concurrent requests (`fetch`).
    #[cold]
    pub(super) fn fetch_reads(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        reads: Reads,
    ) -> Result<()> {
        let mut wants = Vec::new();
        for round in 0..reads.rounds() {
            let before = self.buf.fetched_bytes();
            self.each_touch(found.clone(), round, reads, |s, r| wants.push((s, r)));
            self.fetch(wants.drain(..))?;
            if round == 1 && reads == Reads::BLOBS {
                self.buf
                    .add_data_bytes(self.buf.fetched_bytes().saturating_sub(before));
            }
        }
        Ok(())
    }

    /// Whether reading the records `found` (with `keys`, their keys too) would fetch anything
    /// from a remote store: the plan's rounds looked up in the cache's map, nothing fetched (the
    /// first round with something missing answers, as the next rounds read what it fetches). A
    /// warm batch of a collection asks this of each shard, so that only shards with bytes
    /// missing fetch.
    pub(crate) fn needs_fetch(&self, found: &[Found], keys: bool) -> bool {
        if !self.buf.is_remote() {
            return false;
        }
        let reads = Reads { blobs: true, keys };
        (0..reads.rounds()).any(|round| {
            let mut missing = false;
            self.each_touch(found.iter().copied(), round, reads, |s, r| {
                let range = self.in_file(s, r);
                missing |= !range.is_empty() && !self.buf.is_present(range);
            });
            missing
        })
    }
}

/// A purchase of whole index sections under way (`Store::rent_or_buy`), ended when dropped.
struct Purchase<'b, B: Storage>(&'b B, u64);

impl<B: Storage> Drop for Purchase<'_, B> {
    fn drop(&mut self) {
        self.0.end_purchase(self.1);
    }
}

/// The largest index section `rent_or_buy` fetches whole: a purchase's requests are all in
/// flight at once, each response held whole until written (at most this much memory), and a
/// larger section is rarely read through before the cache evicts it.
const MAX_PURCHASE: u64 = 256 << 20;
