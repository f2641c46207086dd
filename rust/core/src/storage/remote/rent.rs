//! Rent or buy, for the index sections of a remote store: each request for pieces of a section
//! is taken to cost `request_cost` bytes; once a section's requests have cost its size, the
//! section comes whole (in the round that reached it, in requests of `max_request_bytes`), and
//! every later read of it is free. So a run of random reads (a DataLoader's epoch) pays at most
//! twice the cheaper of the two, and a few lookups never download a section. Sections of at
//! most `MAX_PURCHASE` bytes, and what one open store buys in all at most an eighth of the
//! cache's budget (`Remote::claim_purchase`): more would be evicted before it paid off.
//!
//! One purchase at a time per cached store, across the node's processes
//! (`cache::CacheFile::begin_purchase`): DataLoader workers reach the threshold together, and
//! one of them buys while the others rent on. `RemoteFile::ensure` asks `Rent::buys` for each
//! round it fetches.

use super::options::RemoteOptions;
use crate::storage::Region;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest index section bought whole: a purchase's requests are all in flight at once,
/// each response held whole until written (at most this much memory), and a larger section is
/// rarely read through before the cache evicts it.
const MAX_PURCHASE: u64 = 256 << 20;

/// A remote file's requests for pieces of each of its index regions (`Regions::index`) so far.
pub(crate) struct Rent(Box<[AtomicU64]>);

impl Rent {
    /// Rent of a file with `regions` index regions, none paid yet.
    pub(crate) fn new(regions: usize) -> Rent {
        Rent((0..regions).map(|_| AtomicU64::new(0)).collect())
    }

    /// The index regions (positions in `index`) that a round fetching `missing` (byte ranges
    /// of the file, none of them cached) should buy whole: those whose requests, this round's
    /// counted as the file merges them (`merge_gap`, not each piece), have cost their size.
    pub(crate) fn buys(
        &self,
        index: &[Region],
        options: &RemoteOptions,
        missing: &[Range<u64>],
    ) -> Vec<usize> {
        if options.request_cost == 0 {
            return Vec::new();
        }
        let region_of = |r: &Range<u64>| {
            (index.iter()).position(|e| e.range.start <= r.start && r.start < e.range.end)
        };
        let mut missing: Vec<(usize, Range<u64>)> = (missing.iter())
            .filter_map(|r| region_of(r).map(|i| (i, r.clone())))
            .collect();
        missing.sort_unstable_by_key(|(i, r)| (*i, r.start));
        let mut requests = vec![0u64; index.len()];
        let mut end = vec![0u64; index.len()];
        for (i, r) in &missing {
            if requests[*i] == 0 || r.start > end[*i] + options.merge_gap {
                requests[*i] += 1;
            }
            end[*i] = end[*i].max(r.end);
        }
        let mut buy = Vec::new();
        for (i, &n) in requests.iter().enumerate().filter(|(_, &n)| n > 0) {
            let len = index[i].range.end - index[i].range.start;
            let rent = self.0[i].fetch_add(n, Ordering::Relaxed) + n;
            if rent.saturating_mul(options.request_cost) >= len && len <= MAX_PURCHASE {
                buy.push(i);
            }
        }
        buy
    }

    /// `regions` were bought: a purchase is earned again from nothing (a region evicted since
    /// is rented anew).
    pub(crate) fn bought(&self, regions: &[usize]) {
        for &i in regions {
            self.0[i].store(0, Ordering::Relaxed);
        }
    }
}
