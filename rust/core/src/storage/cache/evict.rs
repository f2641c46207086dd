//! Eviction (CLOCK over an entry's segments, then the directory's other entries, within the
//! lease), the node's one purchase at a time, and the repair of a data file truncated under its
//! mapping (`intact`, `restore`).

use super::map::{
    EVICTING, GEN_MASK, HAND_AT, LEASE_AT, PINNED, PURCHASE_AT, UNIT, WORDS_PER_SEGMENT,
};
use super::{dir::map_usage, io, now, CacheConfig, CacheFile};
use crate::error::Result;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// A purchase older than this is taken over (its process died, or its network hangs).
pub(super) const PURCHASE_PATIENCE: u64 = 60;
/// An eviction pass looks at this many segments at most.
pub(super) const SWEEP: u64 = 4096;

impl CacheFile {
    /// Evicts one segment: flag, clear and punch, next generation. `force` ignores the lease (a
    /// reader that found damage there). Returns the bytes freed, or `None` if it was not evicted.
    pub(super) fn evict_segment(&self, segment: u64, force: bool) -> Option<u64> {
        let word = self.segment_word(segment);
        let old = word.load(Ordering::Acquire);
        let recent = u64::from(old as u32) + u64::from(self.lease) > u64::from(now());
        if old & (EVICTING | PINNED) != 0 || (!force && recent) {
            return None;
        }
        word.compare_exchange(old, old | EVICTING, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        let freed = self.clear_segment(segment) * UNIT;
        let next = ((old >> 32) + 1) & GEN_MASK;
        // A pin set while the segment was cleared stays (`pin` may come at any time).
        let _ = word.fetch_update(Ordering::Release, Ordering::Relaxed, |now| {
            Some(next << 32 | (old & 0xffff_ffff) | (now & PINNED))
        });
        self.account(-(freed as i64));
        Some(freed)
    }

    /// Evicts until the cache is 1/16 under budget: from this entry first, then from the other
    /// entries of the directory, the longest idle first, so that the budget bounds the whole
    /// directory, stores that no process reads any more included.
    pub(super) fn evict(&self) {
        let target = self.budget - self.budget / 16;
        if !self.sweep(target) {
            self.evict_others(target);
        }
    }

    /// Evicts this entry's segments least recently used first (a clock hand over the segments,
    /// shared by every process) until the cache holds `target` bytes or a pass found nothing
    /// more; returns whether it got there.
    pub(super) fn sweep(&self, target: u64) -> bool {
        let hand = self.word(HAND_AT);
        for _ in 0..SWEEP.min(self.segments) {
            if self.usage.counter().load(Ordering::Relaxed) <= target {
                return true;
            }
            let segment = hand.fetch_add(1, Ordering::Relaxed) % self.segments;
            let holds = (0..WORDS_PER_SEGMENT).any(|w| {
                self.bitmap_word(segment * WORDS_PER_SEGMENT + w)
                    .load(Ordering::Relaxed)
                    != 0
            });
            if holds {
                self.evict_segment(segment, false);
            }
        }
        self.usage.counter().load(Ordering::Relaxed) <= target
    }

    /// Sweeps the directory's other entries, the one whose map changed longest ago first (every
    /// read stamps its segments there), until the cache holds `target` bytes. Their segments
    /// used within the lease and their pinned ones stay, as in any sweep.
    pub(super) fn evict_others(&self, target: u64) {
        let Some((dir, me)) = &self.entry else {
            return;
        };
        // Once a second per open entry at most: with everything else within its lease, every
        // write would list and map the whole directory for nothing.
        let second = now();
        if self.swept_others.swap(second, Ordering::Relaxed) == second {
            return;
        }
        let Ok(listing) = std::fs::read_dir(dir) else {
            return;
        };
        let mut others: Vec<(std::time::SystemTime, PathBuf, u64)> = listing
            .filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().into_string().ok()?;
                // `<key>-<size>`: scratch entries (`.new-...`) and `usage` are not.
                let size = u64::from_str_radix(name.split_once('-')?.1, 16).ok()?;
                let changed = std::fs::symlink_metadata(e.path().join("map"))
                    .ok()?
                    .modified()
                    .ok()?;
                (name != *me).then(|| (changed, e.path(), size))
            })
            .collect();
        others.sort();
        for (_, path, size) in others {
            if self.usage.counter().load(Ordering::Relaxed) <= target {
                return;
            }
            // The same shared counter, mapped once more (a recount per entry was quadratic in
            // the number of entries).
            let (Ok(Some((data, (map, map_file)))), Ok(usage)) = (
                CacheFile::open_existing(&path, size, None, self.sharing),
                map_usage(dir, self.sharing),
            ) else {
                continue;
            };
            let mut other = CacheFile::new(
                data,
                map,
                map_file,
                size,
                usage,
                &CacheConfig {
                    dir: None,
                    budget: self.budget,
                    lease: self.lease,
                },
                None,
            );
            // Its readers' lease, not this one's: they may rely on a longer one.
            other.lease = other
                .lease
                .max(other.word(LEASE_AT).load(Ordering::Relaxed) as u32);
            other.sweep(target);
        }
    }

    /// Claims the entry's purchase (see `PURCHASE_AT`): its stamp, or `None` while another
    /// process's, begun less than `PURCHASE_PATIENCE` seconds ago, is under way.
    pub fn begin_purchase(&self) -> Option<u64> {
        let word = self.word(PURCHASE_AT);
        let (now, begun) = (u64::from(now()).max(1), word.load(Ordering::Acquire));
        if begun != 0 && now.saturating_sub(begun) < PURCHASE_PATIENCE {
            return None;
        }
        (word.compare_exchange(begun, now, Ordering::AcqRel, Ordering::Acquire))
            .ok()
            .map(|_| now)
    }

    /// Ends the purchase claimed with `stamp` (unless another process took it over since).
    pub fn end_purchase(&self, stamp: u64) {
        let word = self.word(PURCHASE_AT);
        let _ = word.compare_exchange(stamp, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Whether the files are still as long as they were made: a file truncated under a mapping
    /// kills its reader with SIGBUS (by someone else: docstore never shortens them).
    pub fn intact(&self) -> Result<bool> {
        let data = self.data.metadata().map_err(|e| io("the cache", e))?.len();
        Ok(data >= self.size && self.map_file_len()? >= self.map.len() as u64)
    }

    pub(super) fn map_file_len(&self) -> Result<u64> {
        Ok(self
            .map_file
            .metadata()
            .map_err(|e| io("the cache", e))?
            .len())
    }

    /// After `intact` said no: a data file truncated is made its size again (its lost bytes
    /// holes, marked missing); returns from which byte the bytes were lost (the caller fetches
    /// what it relies on there again). A truncated map cannot be trusted: an error.
    pub fn restore(&self) -> Result<u64> {
        if self.map_file_len()? < self.map.len() as u64 {
            return Err(io(
                "the cache",
                std::io::Error::other(
                    "a cache map file was truncated while open: open the store again",
                ),
            ));
        }
        let len = self.data.metadata().map_err(|e| io("the cache", e))?.len();
        if len >= self.size {
            return Ok(self.size);
        }
        self.data
            .set_len(self.size)
            .map_err(|e| io("restoring the cache", e))?;
        let lost = len / UNIT..self.size.div_ceil(UNIT);
        let mut cleared = 0u64;
        for (word, mask) in Self::masks(lost.clone()) {
            let before = self.bitmap_word(word).fetch_and(!mask, Ordering::AcqRel);
            cleared += u64::from((before & mask).count_ones());
        }
        self.account(-((cleared * UNIT) as i64));
        Ok(lost.start * UNIT)
    }
}
