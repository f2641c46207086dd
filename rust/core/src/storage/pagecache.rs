//! Hints to the kernel's page cache for batch lookups in a cold cache.
//!
//! A lookup that faults on a page not in the cache waits for one device read; a batch that
//! faults page by page waits for them one after another (queue depth 1). Asking for all the
//! pages of a batch first (`MADV_WILLNEED`, `POSIX_FADV_WILLNEED`) queues the reads together,
//! so the device serves them in parallel. The hints cost a system call per range even when the
//! pages are cached, so callers first check a sample with `mincore`.

use crate::runtime::platform;
use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

#[cfg(test)]
const PAGE: usize = 4096;

/// The pages covering `range` of `map`, as (page-aligned address, length).
fn pages(map: &[u8], range: Range<usize>) -> Option<(*const u8, usize)> {
    let end = range.end.min(map.len());
    if range.start >= end {
        return None;
    }
    let base = map.as_ptr() as usize;
    // The OS's page, not `PAGE`: 16 KiB on Apple silicon, where hints need that alignment.
    let start = (base + range.start) & !(platform::hints::page_size() - 1);
    Some((start as *const u8, base + end - start))
}

/// Whether the page holding byte `at` of the mapping `map` is in the page cache.
pub fn resident(map: &[u8], at: usize) -> bool {
    let Some((addr, _)) = pages(map, at..at + 1) else {
        return true;
    };
    // `addr` is a page of the live mapping `map`.
    platform::hints::resident(addr)
}

/// Asks the kernel to start reading `range` of the file mapping `map` into the page cache.
pub fn will_need(map: &[u8], range: Range<usize>) {
    if let Some((addr, len)) = pages(map, range) {
        // The range lies within the live mapping.
        platform::hints::will_need(addr, len);
    }
}

/// Asks the kernel to start reading `len` bytes at `offset` of `file` into the page cache.
pub fn will_need_file(file: &File, offset: u64, len: usize) {
    platform::hints::will_need_file(file, offset, len);
}

/// Samples in a row that must find their page cached before sampling slows down.
const HOT_STREAK: u32 = 4;
/// Once the cache looks warm, one batch stage in this many samples it.
const SAMPLE_EVERY: u32 = 16;

/// Decides whether a batch stage should prefetch. A sample costs a `mincore` call (~1.6 us on
/// this project's VM, more than decoding a passage), so while samples keep finding the pages
/// cached only one stage in `SAMPLE_EVERY` takes one; a sample that finds a page missing
/// makes every stage sample again.
#[derive(Debug, Default)]
pub struct ColdCache {
    hot_streak: AtomicU32,
    skipped: AtomicU32,
}

impl ColdCache {
    /// Whether to prefetch, given `cached()`: whether a sample page is in the page cache.
    pub fn is_cold(&self, cached: impl FnOnce() -> bool) -> bool {
        let streak = self.hot_streak.load(Ordering::Relaxed);
        if streak >= HOT_STREAK
            && !self
                .skipped
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(SAMPLE_EVERY)
        {
            return false;
        }
        let cached = cached();
        let streak = if cached { streak.saturating_add(1) } else { 0 };
        self.hot_streak.store(streak, Ordering::Relaxed);
        !cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_every_stage_until_the_cache_looks_warm_then_one_in_sample_every() {
        let cache = ColdCache::default();
        let samples = std::cell::Cell::new(0);
        let stage = |cached: bool| {
            cache.is_cold(|| {
                samples.set(samples.get() + 1);
                cached
            })
        };
        assert!(stage(false), "a missing page means prefetch");
        for _ in 0..HOT_STREAK {
            assert!(!stage(true));
        }
        let before = samples.get();
        for _ in 0..SAMPLE_EVERY * 3 {
            assert!(!stage(true));
        }
        assert_eq!(
            samples.get() - before,
            3,
            "one stage in SAMPLE_EVERY samples a warm cache"
        );
        // Evicted: the next sample finds it, and from then on every stage samples again.
        let mut cold_seen = false;
        for _ in 0..SAMPLE_EVERY {
            cold_seen |= stage(false);
        }
        assert!(cold_seen);
        let before = samples.get();
        for _ in 0..5 {
            assert!(stage(false));
        }
        assert_eq!(samples.get() - before, 5);
    }

    #[test]
    fn residency_of_a_mapped_file() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&vec![7u8; 3 * PAGE]).unwrap();
        // SAFETY: a private temporary file nothing else changes.
        let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
        assert_eq!(map[PAGE], 7); // just written: in the page cache
        assert!(resident(&map, PAGE + 5));
        will_need(&map, 0..map.len());
        will_need_file(&file, 0, map.len());
        assert!(resident(&map, 0));
    }
}
