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

/// What a part of a round of `search_fetching` did: keys settled (index, rank), keys still
/// pending, and what their searches lacked.
struct Round {
    settled: Vec<(usize, Option<u64>)>,
    pending: Vec<usize>,
    lack: Lack,
}

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

    /// The ranks of `keys` in a remote store, misses not confirmed: the search (`find`) runs
    /// over what the cache holds and notes what it lacks (`Lack`); what the whole batch lacks
    /// is fetched in one round of concurrent requests, and the searches that stopped resume. So
    /// a batch's search costs the rounds of one key's: one (its block, with the common prefix
    /// after open), or for a long key a second (its run's keys, with their blobs), and one more
    /// each time a run goes past the blocks fetched so far.
    #[cold]
    pub(super) fn search_fetching(&self, keys: &[&[u8]], out: &mut [Option<u64>]) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let mut pending: Vec<usize> = (0..keys.len()).collect();
        for _ in 0..SEARCH_ROUNDS {
            // Until the common prefix is fetched, keys are searched for as if they had it (a key
            // without it fetches a block for nothing, once), and none is settled.
            let prefix = self.prefix_present();
            let mut lack = Lack(Vec::new());
            if !prefix {
                lack.0.push((Section::Keys, self.common_prefix.clone()));
            }
            let mut still = Vec::new();
            for part in self.search_round(keys, &pending, prefix) {
                let part = part?;
                for (i, rank) in part.settled {
                    out[i] = rank;
                }
                still.extend(part.pending);
                lack.0.extend(part.lack.0);
            }
            pending = still;
            if pending.is_empty() {
                return Ok(());
            }
            self.fetch(lack.0)?;
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

    /// One round of `search_fetching` over the keys `pending` (indexes into `keys`), in parts
    /// in key order: what each settles, leaves pending and found lacking (a part stops at its
    /// first error). A large round runs on the pool's threads (a warm batch is all search), its
    /// parts in the order a single pass makes them, so that the round fetches the same.
    fn search_round(&self, keys: &[&[u8]], pending: &[usize], prefix: bool) -> Vec<Result<Round>> {
        let part = |indexes: &[usize]| -> Result<Round> {
            let mut round = Round {
                settled: Vec::new(),
                pending: Vec::new(),
                lack: Lack(Vec::new()),
            };
            if prefix {
                // In lockstep groups, as a local search.
                let mut found = [None; GROUP];
                let mut group: [&[u8]; GROUP] = [&[]; GROUP];
                for indexes in indexes.chunks(GROUP) {
                    for (key, &i) in group.iter_mut().zip(indexes) {
                        *key = keys[i];
                    }
                    self.find_group(&group[..indexes.len()], &mut round.lack, &mut found)?;
                    for (&i, found) in indexes.iter().zip(found) {
                        match found {
                            Some(rank) => round.settled.push((i, rank)),
                            None => round.pending.push(i),
                        }
                    }
                }
                return Ok(round);
            }
            // Searched as if they had the prefix, to fetch their blocks with it; none settled.
            for &i in indexes {
                if let Some(target) = self.guess(keys[i]) {
                    self.find(keys[i], target, &mut round.lack)?;
                }
                round.pending.push(i);
            }
            Ok(round)
        };
        let claim = match pending.len() >= 2 * SEARCH_PART {
            true => crate::runtime::parallel::claim(),
            false => None,
        };
        let Some(claim) = claim else {
            return vec![part(pending)];
        };
        let mut parts: Vec<&[usize]> = pending.chunks(SEARCH_PART).collect();
        claim.map(&mut parts, |_, indexes| part(indexes))
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
