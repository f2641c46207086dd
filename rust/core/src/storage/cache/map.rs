//! The map file's word layout: a header of atomic words, one word per segment (generation, last
//! use, the evicting and pinned bits), then the presence bitmap; and the write-generation
//! protocol (`begin_write`, `account`, `clear_segment`) that the writer and the evictor share.

use super::{now, CacheFile};
use crate::runtime::platform;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Presence is kept per unit of this many bytes: a random document costs its size rounded out
/// to units (measured on documents of ~160 bytes: 512-byte units fetched 7x their stored size,
/// 128-byte units 2.1x). The map costs one bit per unit: 2 GiB for a 1 TiB object, allocated
/// as it is used.
pub const UNIT: u64 = 64;
/// Eviction works on segments of this many bytes.
pub const SEGMENT: u64 = 1 << 20;
pub(super) const UNITS_PER_SEGMENT: u64 = SEGMENT / UNIT;
pub(super) const WORDS_PER_SEGMENT: u64 = UNITS_PER_SEGMENT / 64;

pub(super) const MAGIC: &[u8; 8] = b"DSCACHE3";
/// Map header: magic, object size, unit, segment, bytes held (atomic), clock hand (atomic),
/// longest lease (atomic).
pub(super) const MAP_HEADER: u64 = 64;
pub(super) const BYTES_AT: u64 = 24;
pub(super) const HAND_AT: u64 = 32;
/// The longest lease any reader of the entry asked for (atomic, raised at open): what a sweep
/// from another entry honours.
pub(super) const LEASE_AT: u64 = 40;
/// The second a process of the node began fetching whole sections of this entry (atomic; 0:
/// none): one purchase at a time, so that readers reaching the threshold together do not all
/// download the same sections.
pub(super) const PURCHASE_AT: u64 = 48;
/// The store's fingerprint (its header checksum), written when the entry is made: what an open
/// checks the object's header against.
pub(super) const FINGERPRINT_AT: u64 = 56;

/// Segment word: bit 63 = being evicted, bit 62 = pinned, bits 32..62 = generation, bits 0..32 =
/// last use (s).
pub(super) const EVICTING: u64 = 1 << 63;
/// Never evicted: what a reader relies on without a check per read (the header, schema,
/// dictionary and key fences, checked once at open; the common key prefix). Found damaged, its
/// bytes are marked missing in place (`invalidate`) or fetched again and written over
/// (`RemoteFile::refetch_pinned`), never made a hole.
pub(super) const PINNED: u64 = 1 << 62;
pub(super) const GEN_MASK: u64 = 0x3fff_ffff;
/// A writer waits this long for an evictor before taking the segment over (the evictor died).
pub(super) const EVICTOR_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) fn map_len(size: u64) -> u64 {
    let segments = size.div_ceil(SEGMENT);
    MAP_HEADER + segments * 8 + segments * WORDS_PER_SEGMENT * 8
}

impl CacheFile {
    pub(super) fn word(&self, at: u64) -> &AtomicU64 {
        debug_assert!(at + 8 <= self.map.len() as u64 && at.is_multiple_of(8));
        // SAFETY: `at` is 8-aligned inside the live, page-aligned mapping (callers compute it
        // from the layout of `map_len`), and the map's words are only accessed atomically.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(at as usize) as *mut u64) }
    }

    pub(super) fn segment_word(&self, segment: u64) -> &AtomicU64 {
        self.word(MAP_HEADER + segment * 8)
    }

    pub(super) fn bitmap_word(&self, word: u64) -> &AtomicU64 {
        self.word(MAP_HEADER + self.segments * 8 + word * 8)
    }

    pub(super) fn bytes_held(&self) -> &AtomicU64 {
        self.word(BYTES_AT)
    }

    /// Units `first..end` as (word, mask) pairs.
    pub(super) fn masks(units: Range<u64>) -> impl Iterator<Item = (u64, u64)> {
        let mut unit = units.start;
        std::iter::from_fn(move || {
            if unit >= units.end {
                return None;
            }
            let word = unit / 64;
            let lo = unit % 64;
            let hi = (units.end - word * 64).min(64);
            unit = word * 64 + hi;
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            Some((word, mask))
        })
    }

    pub(super) fn segments_of(&self, units: &Range<u64>) -> Range<u64> {
        if units.is_empty() {
            return 0..0;
        }
        units.start / UNITS_PER_SEGMENT..(units.end - 1) / UNITS_PER_SEGMENT + 1
    }

    /// Stamps the segments of `units` for a write and returns their generations: waits for an
    /// evictor at work there (taking over from one that died).
    pub(super) fn begin_write(&self, units: &Range<u64>) -> Vec<u64> {
        let now = u64::from(now());
        self.segments_of(units)
            .map(|segment| {
                let word = self.segment_word(segment);
                let started = std::time::Instant::now();
                loop {
                    let old = word.load(Ordering::Acquire);
                    if old & EVICTING != 0 {
                        if started.elapsed() < EVICTOR_PATIENCE {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                            continue;
                        }
                        // The evictor died half way: finish its work (clear, next generation).
                        self.clear_segment(segment);
                        let next = ((old >> 32) + 1) & GEN_MASK;
                        let _ = word.compare_exchange(
                            old,
                            next << 32 | (old & 0xffff_ffff),
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        );
                        continue;
                    }
                    let new = (old & !0xffff_ffff) | now;
                    // (`PINNED` and the generation are kept.)
                    if word
                        .compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        return (old >> 32) & GEN_MASK;
                    }
                }
            })
            .collect()
    }

    pub(super) fn account(&self, delta: i64) {
        for counter in [self.bytes_held(), self.usage.counter()] {
            if delta >= 0 {
                counter.fetch_add(delta as u64, Ordering::Relaxed);
            } else {
                // Saturating: counters of a cache damaged by hand must not wrap around.
                let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(delta.unsigned_abs()))
                });
            }
        }
    }

    /// Clears a segment's bits and punches its hole; returns the units it held.
    pub(super) fn clear_segment(&self, segment: u64) -> u64 {
        let mut freed = 0;
        for w in 0..WORDS_PER_SEGMENT {
            let word = segment * WORDS_PER_SEGMENT + w;
            freed += u64::from(
                self.bitmap_word(word)
                    .swap(0, Ordering::AcqRel)
                    .count_ones(),
            );
        }
        let start = segment * SEGMENT;
        let len = SEGMENT.min(self.size - start);
        // The range lies inside the file. Where holes cannot be punched (Windows) the bytes
        // stay allocated: the budget counts units present, not the file's allocation.
        platform::punch_hole(&self.data, start, len);
        freed
    }
}
