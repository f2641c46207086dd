//! The key search of a `Store`: the key fences say which block of the key index can hold a
//! key, a lower bound in that block finds its first candidate (8 bytes past the common
//! prefix), and the entries settle it (whole keys compared only for long keys). A batch's
//! searches advance in lockstep. In a checked store a position found is confirmed by its
//! document's check, and a miss by a second search over the keys (`confirm_absent`).

use super::{Found, Store, GROUP};
use crate::error::{Error, Result};
use crate::format::key_entry::{key_prefix, KeyEntry};
use crate::format::{u64_at, Section};
use crate::runtime::prefetch::prefetch;
use crate::storage::Storage;
use std::cmp::Ordering;
use std::ops::Range;

/// The first index in `range` whose value is `>=` target (or the range's end), where value `j`
/// is the u64 at `bytes[j * stride]`.
pub(super) fn lower_bound(bytes: &[u8], stride: usize, range: Range<u64>, target: u64) -> u64 {
    let (mut lo, mut hi) = (range.start, range.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if u64_at(bytes, mid as usize * stride) < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Lower bounds in lockstep: for each target, the first index in `lows[i] .. lows[i] + sizes[i]`
/// whose value is `>=` it (or the end of that range). Value `j` is the u64 at `bytes[j * stride]`.
/// Branch-free, so the searches of a group take the same steps and their cache misses overlap.
fn lower_bounds(
    targets: &[Option<u64>; GROUP],
    lows: &mut [u64; GROUP],
    sizes: &mut [u64; GROUP],
    bytes: &[u8],
    stride: usize,
) {
    let value = |j: u64| u64_at(bytes, j as usize * stride);
    // Common case: every search of the group spans as many entries (the step over the fences
    // always does; the step in the blocks does unless a key falls in the short last block). One
    // shared size then makes each step a load, a compare and a conditional move per key, with
    // no per-key bookkeeping: about half the instructions of the general loop below, which a
    // batch lookup spent ~650 instructions a key in (callgrind, 30k passages, 1024 ids).
    // A missing target searches as 0: its low never moves, and its answer is not used.
    if sizes.iter().all(|&size| size == sizes[0]) {
        let targets = targets.map(|t| t.unwrap_or(0));
        let mut size = sizes[0];
        while size > 1 {
            let half = size / 2;
            for (&target, low) in targets.iter().zip(lows.iter_mut()) {
                let probe = *low + half;
                *low = if value(probe) < target { probe } else { *low };
                prefetch(bytes, (*low + (size - half) / 2) as usize * stride);
            }
            size -= half;
        }
        sizes.fill(size);
    }
    loop {
        let mut active = false;
        for ((target, low), size) in targets.iter().zip(lows.iter_mut()).zip(sizes.iter_mut()) {
            let Some(target) = *target else { continue };
            if *size <= 1 {
                continue;
            }
            active = true;
            let half = *size / 2;
            if value(*low + half) < target {
                *low += half;
            }
            *size -= half;
            prefetch(bytes, (*low + *size / 2) as usize * stride);
        }
        if !active {
            break;
        }
    }
    for (target, low) in targets.iter().zip(lows.iter_mut()) {
        if let Some(target) = *target {
            *low += u64::from(value(*low) < target);
        }
    }
}

impl<B: Storage> Store<B> {
    /// The position of `key`. In a checked store the answer is confirmed (see `confirmed`):
    /// a damaged index raises rather than give another document's position.
    pub fn position(&self, key: &[u8]) -> Result<Option<u64>> {
        self.rank_of(key)?
            .map(|rank| self.confirmed(key, rank))
            .transpose()
    }

    /// Where the key index finds `key`, not confirmed: for a lookup that then reads the
    /// document, whose check proves it is `key`'s (`with_record_of`).
    pub fn locate(&self, key: &[u8]) -> Result<Option<Found>> {
        self.rank_of(key)?
            .map(|rank| self.found_at(rank))
            .transpose()
    }

    /// The rank of `key`: a binary search over the compact prefix array finds the first
    /// candidate, whole keys settle ties. A miss is confirmed in a checked store.
    fn rank_of(&self, key: &[u8]) -> Result<Option<u64>> {
        // Searched over what is at hand, noting what is not (`Lack`): over a local store all of
        // it, so the search ends here; over a remote store's cache it resumes once what it
        // lacked is fetched (`search_fetching`).
        let mut lack = Lack(Vec::new());
        let found = match (self.prefix_present(), self.target(key)) {
            (true, None) => Some(None),
            (true, Some(target)) => self.find(key, target, &mut lack)?,
            (false, _) => None,
        };
        let found = match found {
            Some(found) => found,
            None => {
                let mut out = [None];
                self.search_fetching(&[key], &mut out)?;
                out[0]
            }
        };
        if found.is_none() {
            self.confirm_absent(key)?;
        }
        Ok(found)
    }

    /// The position of the document whose key has `rank`, range-checked.
    pub(crate) fn position_of_rank(&self, rank: u64) -> Result<u64> {
        Ok(self.found_at(rank)?.pos)
    }

    /// What the key index entry of `rank` says: the position of its document (range-checked)
    /// and, in format v3, where its blob lies (checked when it is read, `blob_range`).
    pub(crate) fn found_at(&self, rank: u64) -> Result<Found> {
        let entry = self.entry(rank)?;
        let pos = u64::from(entry.position);
        self.check_position(pos)
            .map_err(|_| Error::corrupt("key position out of range"))?;
        let blob = (self.header.version >= 3).then_some((entry.blob_offset, entry.blob_len));
        Ok(Found { pos, blob })
    }

    /// The position of `key`, found at `rank` by the key index, once the document there passes
    /// its check with `key` (in a checked store): neither a damaged index entry nor a damaged key
    /// that reads as `key` can then hand out another document's position. Comparing with the keys
    /// section instead would trust the very bytes a search of long keys compared.
    fn confirmed(&self, key: &[u8], rank: u64) -> Result<u64> {
        let found = self.found_at(rank)?;
        self.confirm(found, key)?;
        Ok(found.pos)
    }

    /// Proves, in a checked store, that the document `found` is `key`'s: its blob passes its
    /// check with `key` (and from format v3 its position; a collection confirms what its global
    /// index said this way).
    pub fn confirm(&self, found: Found, key: &[u8]) -> Result<()> {
        if self.checked() {
            self.with_body(found, Some(key), |_| Ok(()))?;
        }
        Ok(())
    }

    /// In a checked store, proves that `key`, which the key index did not find, is absent: a
    /// binary search over the whole keys (a structure the index search does not depend on) must
    /// miss it too, and the two keys around where it would be must pass their documents' checks.
    /// Then no damage to the index can have hidden it. Costs a few microseconds, on misses only.
    fn confirm_absent(&self, key: &[u8]) -> Result<()> {
        if !self.checked() || self.is_empty() {
            return Ok(());
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key_of_rank(mid)?.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => {
                    return Err(Error::corrupt(format!(
                        "the key index misses {:?}, which the keys hold: the store is damaged \
                         (run verify())",
                        String::from_utf8_lossy(key)
                    )))
                }
            }
        }
        for rank in [lo.checked_sub(1), Some(lo).filter(|&r| r < self.len())]
            .into_iter()
            .flatten()
        {
            let neighbour = self.key_of_rank(rank)?;
            self.confirm(self.found_at(rank)?, neighbour)?;
        }
        Ok(())
    }

    /// What the search looks for: the 8 bytes of `key` after the common prefix, as in the key
    /// index. `None` when `key` lacks the common prefix (then it is absent). A remote store must
    /// have the prefix fetched (`search_fetching`).
    pub(super) fn target(&self, key: &[u8]) -> Option<u64> {
        let common = &self.section(Section::Keys)[self.common_prefix.clone()];
        self.guess(key).filter(|_| key.starts_with(common))
    }

    /// `target` as far as the prefix's length tells (its bytes unread): where a remote lookup
    /// fetches its block in the round that fetches the prefix too.
    pub(super) fn guess(&self, key: &[u8]) -> Option<u64> {
        let common = self.common_prefix.len();
        (!self.is_empty() && key.len() >= common).then(|| key_prefix(&key[common..]))
    }

    /// The block of the key index where the first entry `>= target` lies (or whose end it is):
    /// the block before the first fence `>= target`.
    pub(super) fn block_of(&self, target: u64) -> u64 {
        let fences = self.section(Section::KeyFences);
        lower_bound(fences, 8, 0..self.len().div_ceil(self.block), target).saturating_sub(1)
    }

    /// Positions of many keys, confirmed as `position`'s. The searches advance in lockstep, each
    /// prefetching what it reads next, so that the cache misses of a group overlap instead of
    /// queuing one after another.
    pub fn positions(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        let ranks = self.ranks(keys)?;
        (ranks.into_iter().zip(keys))
            .map(|(rank, key)| rank.map(|rank| self.confirmed(key, rank)).transpose())
            .collect()
    }

    /// `locate` of many keys.
    pub fn locate_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Found>>> {
        let mut found = Vec::with_capacity(keys.len());
        self.locate_each(keys, |_, f| {
            found.push(f);
            Ok(())
        })?;
        Ok(found)
    }

    /// `locate_many`, each key's result (with its index in `keys`) handed to `each` in order
    /// rather than collected: a caller that makes something of each (`Collection::locate_batch`)
    /// makes one list, not two.
    pub fn locate_each(
        &self,
        keys: &[&[u8]],
        mut each: impl FnMut(usize, Option<Found>) -> Result<()>,
    ) -> Result<()> {
        let ranks = self.ranks(keys)?;
        for (i, rank) in ranks.into_iter().enumerate() {
            each(i, rank.map(|rank| self.found_at(rank)).transpose()?)?;
        }
        Ok(())
    }

    /// Ranks of many keys (see `positions`), misses confirmed.
    fn ranks(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        self.prefetch_index(keys);
        let mut out = vec![None; keys.len()];
        // One search however the bytes come: over a local store everything is at hand and it
        // ends in its first round; over a remote store's cache it resumes round by round.
        self.search_fetching(keys, &mut out)?;
        for (key, rank) in keys.iter().zip(&out) {
            if rank.is_none() {
                self.confirm_absent(key)?;
            }
        }
        Ok(out)
    }

    pub(super) fn entry(&self, rank: u64) -> Result<KeyEntry> {
        let at = rank as usize * self.entry_size;
        self.need(Section::KeyIndex, at..at + self.entry_size)?;
        Ok(KeyEntry::at(
            self.section(Section::KeyIndex),
            rank,
            self.entry_size,
        ))
    }

    /// The rank of `key` (its search target `target`), as `reach` can read the key index: `None`
    /// when it lacks something (`Lack` noted what).
    pub(super) fn find<R: Reach>(
        &self,
        key: &[u8],
        target: u64,
        reach: &mut R,
    ) -> Result<Option<Option<u64>>> {
        let block = self.block_of(target);
        if !reach.block(self, block, self.long(key))? {
            return Ok(None);
        }
        let start = block * self.block;
        let end = (start + self.block).min(self.len());
        let index = self.section(Section::KeyIndex);
        let lo = lower_bound(index, self.entry_size, start..end, target);
        self.settle(key, target, lo, reach)
    }

    /// Whether `key` is told apart from others by whole keys (longer than the common prefix
    /// plus the 8 bytes an entry holds).
    #[inline(always)]
    pub(super) fn long(&self, key: &[u8]) -> bool {
        key.len() > self.header.common_prefix as usize + 8
    }

    /// `find` for at most GROUP keys at once (`out[i]` for `keys[i]`): the fences say which
    /// block (page) of the key index can hold a key, a search in that block finds its first
    /// candidate, and the entries settle it (only keys longer than the common prefix plus 8
    /// bytes are compared with whole keys). The searches advance in lockstep, each prefetching
    /// what it reads next, so that their cache misses overlap instead of queuing. Where `reach`
    /// cannot read a key's block yet (a remote cache), each key is searched alone, as `find`,
    /// noting what it lacks in the same order.
    pub(super) fn find_group<R: Reach>(
        &self,
        keys: &[&[u8]],
        reach: &mut R,
        out: &mut [Option<Option<u64>>],
    ) -> Result<()> {
        let n = self.len();
        // Keys without the common prefix are absent; the others search by their next 8 bytes.
        let mut targets = [None; GROUP];
        for (target, key) in targets.iter_mut().zip(keys) {
            *target = self.target(key); // None in an empty store
        }
        let fences = self.section(Section::KeyFences);
        let index = self.section(Section::KeyIndex);
        // The first block whose fence is >= the target: the first candidate lies in the block
        // before it (or is that block's first entry).
        let blocks = n.div_ceil(self.block);
        let mut lows = [0u64; GROUP];
        let mut sizes = [blocks; GROUP];
        lower_bounds(&targets, &mut lows, &mut sizes, fences, 8);
        for (low, size) in lows.iter_mut().zip(&mut sizes) {
            *low = low.saturating_sub(1); // the block
            *size = self.block.min(n.saturating_sub(*low * self.block));
        }
        let ready = (keys.iter().zip(&targets).zip(&lows)).all(|((key, target), &block)| {
            target.is_none() || reach.ready(self, block, self.long(key))
        });
        for (i, key) in keys.iter().enumerate() {
            out[i] = match targets[i] {
                None => Some(None),
                Some(target) if !ready => self.find(key, target, reach)?,
                Some(_) => {
                    reach.block(self, lows[i], self.long(key))?;
                    lows[i] *= self.block; // the block's first rank
                    continue;
                }
            };
        }
        if !ready {
            return Ok(());
        }
        lower_bounds(&targets, &mut lows, &mut sizes, index, self.entry_size);
        for (i, target) in targets.iter().enumerate().take(keys.len()) {
            if let Some(target) = *target {
                out[i] = self.settle(keys[i], target, lows[i], reach)?;
            }
        }
        Ok(())
    }

    /// Finds `key` among the run of entries whose prefix is `target`, starting at rank `lo`: its
    /// rank (`None` inside when absent; `None` outside when `reach` lacks what it reads next).
    fn settle<R: Reach>(
        &self,
        key: &[u8],
        target: u64,
        lo: u64,
        reach: &mut R,
    ) -> Result<Option<Option<u64>>> {
        let n = self.len();
        let short = self.header.common_prefix as usize + 8;
        let long = key.len() > short;
        let index = self.section(Section::KeyIndex);
        let entry = |rank: u64| KeyEntry::at(index, rank, self.entry_size);
        // Keys that end within the prefix come first in the run, shortest first; for them the
        // prefix and the length are the whole key.
        let mut rank = lo;
        while rank < n {
            if !reach.entry(self, rank, long)? {
                return Ok(None);
            }
            let entry = entry(rank);
            if entry.prefix != target || entry.key_len as usize > short {
                break;
            }
            if entry.key_len as usize == key.len() {
                return Ok(Some(Some(rank)));
            }
            rank += 1;
        }
        if !long {
            return Ok(Some(None));
        }
        // Longer keys: gallop to the end of the run, then compare whole keys.
        let lo = rank;
        let mut hi = lo;
        let mut step = 1;
        while hi < n {
            if !reach.entry(self, hi, long)? {
                return Ok(None);
            }
            if entry(hi).prefix != target {
                break;
            }
            hi = (lo + step).min(n);
            step *= 2;
        }
        if !reach.run(self, key, lo..hi)? {
            return Ok(None);
        }
        self.search_keys(key, lo, hi).map(Some)
    }

    /// Binary search for `key` among ranks `lo..hi` by whole-key comparison: its rank.
    fn search_keys(&self, key: &[u8], mut lo: u64, mut hi: u64) -> Result<Option<u64>> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key_of_rank(mid)?.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(Some(mid)),
            }
        }
        Ok(None)
    }
}

/// How a search reads the key index: fetching what it reads as it reads it (`Fetch`: a local
/// store has nothing to fetch), or, over a remote store's cache, noting what is missing and
/// stopping there (`Lack`), so that the caller fetches what a whole batch lacks in one round of
/// concurrent requests and searches again (`Store::search_fetching`). One search either way:
/// there is no second copy of it to predict what it reads.
pub(super) trait Reach {
    /// Whether `block` would answer true, asked without noting or fetching anything.
    fn ready<B: Storage>(&self, store: &Store<B>, block: u64, long: bool) -> bool;
    /// Whether block `block` of the key index, where a search starts, can be read.
    fn block<B: Storage>(&mut self, store: &Store<B>, block: u64, long: bool) -> Result<bool>;
    /// Whether the entry of `rank` can be read (for a `long` key: see `Store::long`).
    fn entry<B: Storage>(&mut self, store: &Store<B>, rank: u64, long: bool) -> Result<bool>;
    /// Whether the whole keys of ranks `run`, which `key` is compared with, can be read.
    fn run<B: Storage>(&mut self, store: &Store<B>, key: &[u8], run: Range<u64>) -> Result<bool>;
}

/// Reads as it goes: `need` (nothing to do for a local store; a remote one fetches each miss).
pub(super) struct Fetch;

impl Reach for Fetch {
    #[inline(always)]
    fn ready<B: Storage>(&self, _: &Store<B>, _: u64, _: bool) -> bool {
        true
    }

    #[inline(always)]
    fn block<B: Storage>(&mut self, store: &Store<B>, block: u64, _: bool) -> Result<bool> {
        let span = store.block_span(block);
        let size = store.entry_size;
        store.need(Section::KeyIndex, span.start * size..span.end * size)?;
        Ok(true)
    }

    #[inline(always)]
    fn entry<B: Storage>(&mut self, store: &Store<B>, rank: u64, _: bool) -> Result<bool> {
        let at = rank as usize * store.entry_size;
        store.need(Section::KeyIndex, at..at + store.entry_size)?;
        Ok(true)
    }

    #[inline(always)]
    fn run<B: Storage>(&mut self, _: &Store<B>, _: &[u8], _: Range<u64>) -> Result<bool> {
        // `key_of_rank` needs each key it compares.
        Ok(true)
    }
}

/// The most blobs a lookup of a long key fetches before it knows which is its own (see
/// `Lack::run`).
const SPECULATE: usize = 4;

/// Notes what a remote store's cache lacks (ranges of sections) and stops the search there.
pub(super) struct Lack(pub Vec<(Section, Range<usize>)>);

impl Lack {
    /// A block of the key index, fetched whole, with the next block's first two entries (a key
    /// past the block's last entry is settled there, and a run that ends at the block's end is
    /// seen to end: one request still, the ranges touch) and, for long keys, the block's key
    /// offsets (which their comparison of whole keys reads).
    fn add_block<B: Storage>(&mut self, store: &Store<B>, block: u64, long: bool) {
        let span = store.block_span(block);
        let size = store.entry_size;
        self.0
            .push((Section::KeyIndex, span.start * size..(span.end + 2) * size));
        if long {
            self.0
                .push((Section::KeyOffsets, span.start * 8..span.end * 8 + 8));
        }
    }
}

impl Reach for Lack {
    #[inline]
    fn ready<B: Storage>(&self, store: &Store<B>, block: u64, long: bool) -> bool {
        let span = store.block_span(block);
        let size = store.entry_size;
        store.has(Section::KeyIndex, span.start * size..span.end * size)
            && (!long || store.has(Section::KeyOffsets, span.start * 8..span.end * 8 + 8))
    }

    #[inline]
    fn block<B: Storage>(&mut self, store: &Store<B>, block: u64, long: bool) -> Result<bool> {
        let present = self.ready(store, block, long);
        if !present {
            self.add_block(store, block, long);
        }
        Ok(present)
    }

    #[inline]
    fn entry<B: Storage>(&mut self, store: &Store<B>, rank: u64, long: bool) -> Result<bool> {
        let at = rank as usize * store.entry_size;
        let present = store.has(Section::KeyIndex, at..at + store.entry_size);
        if !present {
            self.add_block(store, rank / store.block, long);
        }
        Ok(present)
    }

    /// The key offsets of the run, then its keys, with (format 3) the blobs of the run's
    /// entries as long as `key` (at most `SPECULATE` of them, usually one): they come in the
    /// same round as the keys, so that the lookup reads its document without a third round
    /// trip; a few blobs for nothing when the key is not among them. Located by the entries,
    /// checked when read.
    fn run<B: Storage>(&mut self, store: &Store<B>, key: &[u8], run: Range<u64>) -> Result<bool> {
        if run.is_empty() {
            return Ok(true);
        }
        let offsets = run.start as usize * 8..run.end as usize * 8 + 8;
        if !store.has(Section::KeyOffsets, offsets) {
            let blocks = run.start / store.block..=(run.end - 1) / store.block;
            for block in blocks {
                let span = store.block_span(block);
                self.0
                    .push((Section::KeyOffsets, span.start * 8..span.end * 8 + 8));
            }
            return Ok(false);
        }
        let keys = store.offset(Section::KeyOffsets, run.start) as usize
            ..store.offset(Section::KeyOffsets, run.end) as usize;
        if store.has(Section::Keys, keys.clone()) {
            return Ok(true);
        }
        self.0.push((Section::Keys, keys));
        if store.header.locates_blobs() {
            let index = store.section(Section::KeyIndex);
            let candidates: Vec<KeyEntry> = run
                .map(|r| KeyEntry::at(index, r, store.entry_size))
                .filter(|e| e.key_len as usize == key.len())
                .take(SPECULATE + 1)
                .collect();
            if candidates.len() <= SPECULATE {
                self.0.extend(candidates.iter().map(|e| {
                    let start = e.blob_offset as usize;
                    (
                        Section::Data,
                        start..e.blob_offset.saturating_add(e.blob_len) as usize,
                    )
                }));
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lower_bounds` agrees with `lower_bound` key by key, in groups whose ranges are all as
    /// long (its shared-size path), of different lengths (its general loop), with missing
    /// targets, and at both ends of the values. Ranges are never empty (`find_group`).
    #[test]
    fn lower_bounds_agrees_with_lower_bound() {
        let stride = 16;
        // Runs of equal values: a search must land on the first of a run.
        let values: Vec<u64> = (0..1000u64).map(|i| (i / 3) * 10).collect();
        let mut bytes = vec![0u8; values.len() * stride];
        for (i, v) in values.iter().enumerate() {
            bytes[i * stride..i * stride + 8].copy_from_slice(&v.to_le_bytes());
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..400 {
            let equal = round % 2 == 0;
            let mut targets = [None; GROUP];
            let mut lows = [0u64; GROUP];
            let mut sizes = [0u64; GROUP];
            let shared = 1 + next() % 300;
            for i in 0..GROUP {
                let size = if equal { shared } else { 1 + next() % 300 };
                lows[i] = next() % (values.len() as u64 - size);
                sizes[i] = size;
                targets[i] = match next() % 8 {
                    0 => None,
                    1 => Some(0),
                    2 => Some(u64::MAX),
                    _ => Some(next() % 3400),
                };
            }
            let expected: Vec<Option<u64>> = (0..GROUP)
                .map(|i| {
                    targets[i].map(|t| lower_bound(&bytes, stride, lows[i]..lows[i] + sizes[i], t))
                })
                .collect();
            lower_bounds(&targets, &mut lows, &mut sizes, &bytes, stride);
            let got: Vec<Option<u64>> = (0..GROUP).map(|i| targets[i].map(|_| lows[i])).collect();
            assert_eq!(got, expected, "round {round}");
        }
    }
}
