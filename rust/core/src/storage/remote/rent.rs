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
use crate::format::{Header, Section};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest index section bought whole: a purchase's requests are all in flight at once,
/// each response held whole until written (at most this much memory), and a larger section is
/// rarely read through before the cache evicts it.
const MAX_PURCHASE: u64 = 256 << 20;

/// The sections read piece by piece that a purchase may fetch whole.
const INDEX: [Section; 5] = [
    Section::DocOffsets,
    Section::Keys,
    Section::KeyOffsets,
    Section::KeyIndex,
    Section::KeyRanks,
];

/// A remote file's requests for pieces of each section so far.
#[derive(Default)]
pub(crate) struct Rent([AtomicU64; Section::COUNT]);

impl Rent {
    /// The index sections that a round fetching `missing` (byte ranges of the file, none of
    /// them cached) should buy whole: those whose requests, this round's counted as the file
    /// merges them (`merge_gap`, not each piece), have cost their size.
    pub(crate) fn buys(
        &self,
        header: &Header,
        options: &RemoteOptions,
        missing: &[Range<u64>],
    ) -> Vec<Section> {
        if options.request_cost == 0 {
            return Vec::new();
        }
        let section_of = |r: &Range<u64>| {
            INDEX.into_iter().find(|&s| {
                let e = header.section(s);
                e.offset <= r.start && r.start < e.offset + e.len
            })
        };
        let mut missing: Vec<(Section, Range<u64>)> = (missing.iter())
            .filter_map(|r| section_of(r).map(|s| (s, r.clone())))
            .collect();
        missing.sort_unstable_by_key(|(s, r)| (*s as usize, r.start));
        let mut requests = [0u64; Section::COUNT];
        let mut end = [0u64; Section::COUNT];
        for (s, r) in &missing {
            let i = *s as usize;
            if requests[i] == 0 || r.start > end[i] + options.merge_gap {
                requests[i] += 1;
            }
            end[i] = end[i].max(r.end);
        }
        let mut buy = Vec::new();
        for s in INDEX.into_iter().filter(|&s| requests[s as usize] > 0) {
            let len = header.section(s).len;
            let n = requests[s as usize];
            let rent = self.0[s as usize].fetch_add(n, Ordering::Relaxed) + n;
            if rent.saturating_mul(options.request_cost) >= len && len <= MAX_PURCHASE {
                buy.push(s);
            }
        }
        buy
    }

    /// `sections` were bought: a purchase is earned again from nothing (a section evicted since
    /// is rented anew).
    pub(crate) fn bought(&self, sections: &[Section]) {
        for &s in sections {
            self.0[s as usize].store(0, Ordering::Relaxed);
        }
    }
}
