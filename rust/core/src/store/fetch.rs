//! What a remote `Store` fetches into its cache before it reads, in as few rounds of concurrent
//! requests as the reads' dependencies allow: a search resumed round by round with what it
//! found lacking (`search_fetching`, over `search::Lack`), and the plan of a batch's reads run
//! round by round (`fetch_reads`, over `plan`). Each round is one `fetch`: presence checks,
//! then one `Storage::ensure`. Over a local store every byte is present: `need` is inlined to
//! nothing, and a search never lacks anything, so it never resumes.

use super::plan::{BatchPlan, Reads};
use super::search::{Fetch, Lack};
use super::{Found, Store, GROUP};
use crate::error::Result;
use crate::format::Section;
use crate::storage::{self, Storage};
use std::ops::Range;
use std::sync::atomic;

/// The most rounds a remote search resumes in (`search_fetching`): past them, the cache evicts
/// faster than a round fetches.
const SEARCH_ROUNDS: usize = 64;

/// Keys per task of a round of `search_fetching` on the pool's threads.
const SEARCH_PART: usize = 64;

impl<B: Storage> Store<B> {
    /// Makes bytes `range` of section `s` readable before they are read: nothing to do for a
    /// local store; a remote one fetches what its cache lacks (see `storage`).
    #[inline(always)]
    pub(super) fn need(&self, s: Section, range: Range<usize>) -> Result<()> {
        self.buf.ensure_one(self.in_file(s, range))
    }

    /// Whether bytes `range` of section `s` are readable without fetching (and if so stamped
    /// as used); always, for a local store.
    #[inline]
    pub(super) fn has(&self, s: Section, range: Range<usize>) -> bool {
        let range = self.in_file(s, range);
        range.is_empty() || self.buf.present(range)
    }

    /// Makes every range of `wants` readable, fetching what is missing in one round of
    /// concurrent requests (ranges are clipped to their sections): one `Storage::ensure`.
    #[cold]
    pub(super) fn fetch(
        &self,
        wants: impl IntoIterator<Item = (Section, Range<usize>)>,
    ) -> Result<()> {
        // Present ranges are only stamped (no allocation: a warm batch passes through here).
        storage::fetch_missing(
            &self.buf,
            wants.into_iter().map(|(s, r)| self.in_file(s, r)),
        )
        .map(drop)
    }

    /// Whether the common prefix is readable: always, but for a remote store before its first
    /// lookup.
    #[inline(always)]
    pub(super) fn prefix_present(&self) -> bool {
        // Acquire: the prefix's bytes, which the thread that found them present saw, are seen.
        self.prefix_fetched.load(atomic::Ordering::Acquire) || self.prefix_arrived()
    }

    #[cold]
    fn prefix_arrived(&self) -> bool {
        let present = (self.buf).present(self.in_file(Section::Keys, self.common_prefix.clone()));
        if present {
            self.prefix_fetched.store(true, atomic::Ordering::Release);
        }
        present
    }

    /// The ranks of `keys`, misses not confirmed, written to `out` (`None` where absent). The
    /// search (`find`) runs over what the storage holds and notes what it lacks (`Lack`): over
    /// a local store nothing, so it ends in its first round, which writes every rank in place;
    /// over a remote store's cache, what the whole batch lacks is fetched in one round of
    /// concurrent requests, and the searches that stopped resume. So a batch's search costs the
    /// rounds of one key's: one (its block, with the common prefix after open), or for a long
    /// key a second (its run's keys, with their blobs), and one more each time a run goes past
    /// the blocks fetched so far.
    pub(super) fn search_fetching(&self, keys: &[&[u8]], out: &mut [Option<u64>]) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let (mut pending, mut lack) = self.search_round(keys, out)?;
        for _ in 1..SEARCH_ROUNDS {
            if pending.is_empty() {
                return Ok(());
            }
            self.fetch(lack.0)?;
            // The keys still pending, searched again as a batch of their own.
            let again: Vec<&[u8]> = pending.iter().map(|&i| keys[i]).collect();
            let mut found = vec![None; again.len()];
            let (still, still_lacks) = self.search_round(&again, &mut found)?;
            for (&i, rank) in pending.iter().zip(found) {
                out[i] = rank;
            }
            pending = still.into_iter().map(|j| pending[j]).collect();
            lack = still_lacks;
        }
        // A cache that evicts what a round fetched before the search reads it: the rest
        // searched fetching as they read.
        for i in pending {
            out[i] = match self.target(keys[i]) {
                Some(target) => self.find(keys[i], target, &mut Fetch)?.flatten(),
                None => None,
            };
        }
        Ok(())
    }

    /// One round of `search_fetching` over `keys`: each rank settled is written to `out` (as
    /// long as `keys`); returns the indexes of the keys left pending and what their searches
    /// lacked. Until the common prefix is fetched, keys are searched for as if they had it (a
    /// key without it fetches a block for nothing, once) and none is settled. A large round
    /// runs in parts on the pool's threads (a warm batch is all search), merged in the order a
    /// single pass makes them, so that the round fetches the same; the first error wins.
    fn search_round(&self, keys: &[&[u8]], out: &mut [Option<u64>]) -> Result<(Vec<usize>, Lack)> {
        let prefix = self.prefix_present();
        // The part of `keys` from index `base`, and its slice of `out`.
        let part = |base: usize, keys: &[&[u8]], out: &mut [Option<u64>]| -> Result<_> {
            let mut pending = Vec::new();
            let mut lack = Lack(Vec::new());
            if !prefix {
                for (i, key) in keys.iter().enumerate() {
                    if let Some(target) = self.guess(key) {
                        self.find(key, target, &mut lack)?;
                    }
                    pending.push(base + i);
                }
                return Ok((pending, lack));
            }
            // In lockstep groups (see `find_group`).
            let mut found = [None; GROUP];
            for (g, (keys, out)) in keys.chunks(GROUP).zip(out.chunks_mut(GROUP)).enumerate() {
                self.find_group(keys, &mut lack, &mut found)?;
                for (i, (out, found)) in out.iter_mut().zip(found).enumerate() {
                    match found {
                        Some(rank) => *out = rank,
                        None => pending.push(base + g * GROUP + i),
                    }
                }
            }
            Ok((pending, lack))
        };
        let claim = match keys.len() >= 2 * SEARCH_PART {
            true => crate::runtime::parallel::claim(),
            false => None,
        };
        let (pending, mut lack) = match claim {
            None => part(0, keys, out)?,
            Some(claim) => {
                let mut parts: Vec<_> = keys
                    .chunks(SEARCH_PART)
                    .zip(out.chunks_mut(SEARCH_PART))
                    .collect();
                let done = claim.map(&mut parts, |k, (keys, out)| {
                    part(k * SEARCH_PART, keys, out)
                });
                let (mut pending, mut lack) = (Vec::new(), Lack(Vec::new()));
                for part in done {
                    let (still, lacks) = part?;
                    pending.extend(still);
                    lack.0.extend(lacks.0);
                }
                (pending, lack)
            }
        };
        if !prefix {
            lack.0
                .insert(0, (Section::Keys, self.common_prefix.clone()));
        }
        Ok((pending, lack))
    }

    /// Fetches what reading `found` reads (with `keys`, the keys of their positions too, which
    /// a read by position checks its document with), round by round: each round's missing
    /// ranges in one round of concurrent requests. Over bytes all present, nothing is fetched
    /// (the collection's `Source` asks this only of fetching stores).
    pub fn prefetch_reads(&self, found: &[Found], keys: bool) -> Result<()> {
        let reads = Reads { blobs: true, keys };
        self.fetch_reads(found.iter().copied(), found.len(), reads)
    }

    /// Fetches the keys of `positions` (key ranks, key offsets, keys: three rounds of concurrent
    /// requests), and in a checked store the blobs that prove them, so that `key_at` then reads
    /// them from the cache.
    pub fn prefetch_keys(&self, positions: Range<u64>) -> Result<()> {
        let reads = Reads {
            blobs: self.checked(),
            keys: true,
        };
        let len = (positions.end - positions.start) as usize;
        self.fetch_reads(positions.map(Found::at), len, reads)
    }

    /// The fetching executor of the plan (`plan`): what reading the documents `found` touches,
    /// each round's missing ranges fetched in one round of concurrent requests.
    fn fetch_reads(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        len: usize,
        reads: Reads,
    ) -> Result<()> {
        let plan = BatchPlan {
            store: self,
            found,
            len,
            reads,
        };
        storage::fetch_plan(&self.buf, &plan).map(drop)
    }

    /// Whether reading the records `found` (with `keys`, their keys too) would fetch anything
    /// (`Storage::lacks`: nothing is fetched to answer). A warm batch of a collection asks this
    /// of each shard, so that only shards with bytes missing fetch.
    pub(crate) fn needs_fetch(&self, found: &[Found], keys: bool) -> bool {
        let plan = BatchPlan {
            store: self,
            found: found.iter().copied(),
            len: found.len(),
            reads: Reads { blobs: true, keys },
        };
        self.buf.lacks(&plan)
    }
}
