//! The node-wide cache of remote stores: one sparse file per store, the size of the object, that
//! every process of the node maps and fills; DataLoader workers and DDP ranks read each other's
//! fetches through the page cache, as they would a local file.
//!
//! Layout of a cache directory (`cache_dir`, see docs/remote.md):
//!
//! ```text
//! usage                 8 bytes: the bytes held by every store below (an atomic counter)
//! <key>-<size>/data     sparse, the object's size: fetched bytes at their own offsets
//! <key>-<size>/map      which 64-byte units of `data` hold fetched bytes (a bitmap), and per
//!                       1 MiB segment its generation and last use; its header holds the
//!                       store's fingerprint
//! ```
//!
//! An entry is named by what the client knows of the object (`Remote::cache_key`: its
//! normalised URL, version, ETag, Last-Modified and size), never by what the object says of
//! itself: a mirror serving the genuine header with a forged document gets an entry of its own,
//! not the genuine store's. The store's fingerprint (its header checksum) is kept in the entry and
//! checked at open: an entry whose object now says otherwise is set aside, never read.
//!
//! The directory is the user's own (`check_dir`): made 0700, entries 0700 and files 0600 whatever
//! the umask; a directory another user owns, or may write without the sticky bit, is refused; no
//! file of it is opened through a symbolic link (`O_NOFOLLOW`), and only entries and files this
//! user owns are used (another's, in a shared sticky directory, make this store's cache private).
//! Two shared directories are accepted besides (`Sharing`): a sticky one that every user may write
//! (1777, `/tmp`-like), where each user keeps entries and a `usage` counter of their own, and a
//! group's (setgid and group-writable, not writable by others: 2775, 2770), whose members share
//! entries and counter: made 2770 and 0660 whatever the umask, trusted when of the directory's
//! group, as a user trusts their own processes.
//!
//! Concurrency, between threads and processes alike (everything shared is an atomic word in a
//! shared mapping):
//! - A unit's bit is set only after its bytes are written (`pwrite`), so no reader ever trusts a
//!   half-written unit: a writer killed half way leaves bits unset, and the next writer rewrites
//!   the same bytes. Two writers of one unit write the same bytes.
//! - Eviction works by segment, least recently used first (CLOCK): it flags the segment, clears
//!   its bits, punches a hole (the disk space goes back at once), then bumps its generation.
//!   A segment used within the lease (`lease`, 30 s by default) is never evicted, so bytes a
//!   lookup has just made present stay there while it reads them; a writer stamps the segment
//!   before it writes, and one that finds the generation moved under it clears what it set.
//! - Whatever still slips through (a process stopped for longer than the lease) reads zeros,
//!   which the document checks of format 2 turn into an error that the reader answers by
//!   evicting what it read and fetching again (`Collection`'s retry), never into a document.
//!
//! This file is the `CacheFile` API; beside it, `dir.rs` (the directory's trust, its entries
//! and the `usage` counter), `map.rs` (the map's word layout and the write-generation protocol)
//! and `evict.rs` (CLOCK eviction within the lease, purchases, truncation repair).

mod dir;
mod evict;
mod map;

pub use map::{SEGMENT, UNIT};

use crate::error::{Error, Result};
use crate::runtime::platform;
use dir::{check_dir, create_files, shared_usage, Sharing, Usage};
use map::{EVICTING, GEN_MASK, LEASE_AT, MAP_HEADER, PINNED, UNITS_PER_SEGMENT};
use memmap2::{Mmap, MmapMut};
use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where and how much to cache.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The node-wide directory, or `None` for a private cache (unlinked at once, this process
    /// only: `cache_bytes=0`).
    pub dir: Option<PathBuf>,
    /// The most bytes the directory holds (all stores together), past what the lease protects.
    pub budget: u64,
    /// Seconds a segment stays safe from eviction after its last use.
    pub lease: u32,
}

/// Bytes a private cache (`cache_bytes=0`) keeps, past what the lease protects.
pub const PRIVATE_BUDGET: u64 = 64 << 20;

/// One store's cache: its sparse data file and its map.
pub struct CacheFile {
    data: File,
    map: MmapMut,
    /// The file `map` maps (kept open to check its length: see `intact`).
    map_file: File,
    size: u64,
    segments: u64,
    usage: Usage,
    budget: u64,
    lease: u32,
    /// The cache directory and this entry's name in it (none for a private cache): where the
    /// other entries are, which eviction takes from too.
    entry: Option<(PathBuf, String)>,
    /// Who shares the directory: which of its other entries this one may evict.
    sharing: Sharing,
    /// The second this entry last swept the others (see `evict_others`).
    swept_others: std::sync::atomic::AtomicU32,
}

/// Seconds since the epoch, from the coarse clock (a few ns: every read stamps its segments).
fn now() -> u32 {
    platform::now_seconds()
}

fn io(context: impl std::fmt::Display, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(e.kind(), format!("{context}: {e}")))
}

impl CacheFile {
    /// The cache of the store whose entry is named `key` (see `Remote::cache_key`), with
    /// `fingerprint` and `size` bytes: found in the directory, or made there (under a scratch
    /// name, then renamed: two processes never see half a cache). An entry found there that is
    /// not this user's own, or whose fingerprint differs, is never read: it is set aside and made
    /// anew, or, where it cannot be set aside (another user's, in a sticky directory), this store
    /// gets a private cache.
    pub fn open(config: &CacheConfig, key: &str, fingerprint: u64, size: u64) -> Result<CacheFile> {
        let Some(dir) = &config.dir else {
            return CacheFile::private(config, size);
        };
        let sharing = check_dir(dir)?;
        let usage = shared_usage(dir, sharing)?;
        let name = sharing.entry_name(key, size);
        let target = dir.join(&name);
        for _ in 0..3 {
            match CacheFile::open_existing(&target, size, Some(fingerprint), sharing) {
                Ok(Some((data, (map, map_file)))) => {
                    let entry = Some((dir.clone(), name));
                    let mut file = CacheFile::new(data, map, map_file, size, usage, config, entry);
                    file.sharing = sharing;
                    file.word(LEASE_AT)
                        .fetch_max(u64::from(config.lease), Ordering::Relaxed);
                    return Ok(file);
                }
                Ok(None) => {}
                Err(_) => {
                    // Not an entry this process can trust (damaged, another layout, another
                    // object's, a link, another user's): set aside, never read.
                    let aside =
                        dir.join(format!(".stale-{name}-{}", crate::runtime::process::id()));
                    match std::fs::rename(&target, &aside) {
                        Ok(()) => {
                            let _ = std::fs::remove_dir_all(&aside);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        // Another user's, in a sticky directory: left alone, and not used.
                        Err(_) => return CacheFile::private(config, size),
                    }
                }
            }
            let scratch = tempfile::Builder::new()
                .prefix(".new-")
                .tempdir_in(dir)
                .map_err(|e| io(dir.display(), e))?;
            // Private, or the group's, whatever the umask (`permissions` goes through it).
            platform::set_mode(scratch.path(), sharing.dir_mode())
                .map_err(|e| io(scratch.path().display(), e))?;
            create_files(scratch.path(), size, fingerprint, sharing.file_mode())?;
            let scratch = scratch.keep();
            if std::fs::rename(&scratch, &target).is_err() {
                // Another process made it first: use theirs.
                let _ = std::fs::remove_dir_all(&scratch);
            }
        }
        Err(io(
            target.display(),
            std::io::Error::other("cannot create the cache entry"),
        ))
    }

    /// A cache for this process alone: made in the temporary directory and unlinked at once
    /// (`cache_bytes=0`, or an object that no version, ETag or Last-Modified pins: its bytes
    /// cannot be tied to one version, so no other process may read them).
    pub fn private(config: &CacheConfig, size: u64) -> Result<CacheFile> {
        let scratch = tempfile::Builder::new()
            .prefix("docstore-cache-")
            .tempdir()
            .map_err(|e| io("temporary directory", e))?;
        let (data, (map, map_file)) = create_files(scratch.path(), size, 0, 0o600)?;
        drop(scratch); // unlinks both: the open files live on
        let config = CacheConfig {
            budget: PRIVATE_BUDGET,
            ..config.clone()
        };
        Ok(CacheFile::new(
            data,
            map,
            map_file,
            size,
            Usage::Private(AtomicU64::new(0)),
            &config,
            None,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        data: File,
        map: MmapMut,
        map_file: File,
        size: u64,
        usage: Usage,
        config: &CacheConfig,
        entry: Option<(PathBuf, String)>,
    ) -> CacheFile {
        CacheFile {
            data,
            map,
            map_file,
            size,
            segments: size.div_ceil(SEGMENT),
            usage,
            budget: config.budget,
            lease: config.lease,
            entry,
            sharing: Sharing::Private,
            swept_others: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The data file, mapped read-only: what the reader reads (holes read as zeros, and are
    /// never read: the reader asks `ensure` first).
    pub fn map_data(&self) -> Result<Mmap> {
        // SAFETY: bytes of the data file only ever change from a hole to their one true value
        // (pwrite before the bit is set) or, when evicted under the lease, back to a hole; the
        // reader reads only ranges it made present (see the module's note on concurrency).
        let map = unsafe { Mmap::map(&self.data)? };
        platform::hints::random_access(&map);
        Ok(map)
    }

    /// The units that cover `range` (absolute bytes), clipped to the file.
    pub fn units(&self, range: &Range<u64>) -> Range<u64> {
        let end = range.end.min(self.size);
        range.start / UNIT..end.div_ceil(UNIT)
    }

    /// Byte range of `units`, clipped to the file.
    pub fn bytes_of(&self, units: &Range<u64>) -> Range<u64> {
        units.start * UNIT..(units.end * UNIT).min(self.size)
    }

    /// Runs of units of `units` that are not present, appended to `out`.
    pub fn missing(&self, units: Range<u64>, out: &mut Vec<Range<u64>>) {
        let mut run: Option<Range<u64>> = None;
        for (word, mask) in Self::masks(units.clone()) {
            let bits = self.bitmap_word(word).load(Ordering::Acquire);
            if bits & mask == mask {
                if let Some(r) = run.take() {
                    out.push(r);
                }
                continue;
            }
            for bit in 0..64 {
                if mask >> bit & 1 == 0 {
                    continue;
                }
                let unit = word * 64 + bit;
                if bits >> bit & 1 == 1 {
                    if let Some(r) = run.take() {
                        out.push(r);
                    }
                } else {
                    match &mut run {
                        Some(r) if r.end == unit => r.end = unit + 1,
                        _ => {
                            if let Some(r) = run.replace(unit..unit + 1) {
                                out.push(r);
                            }
                        }
                    }
                }
            }
        }
        out.extend(run);
    }

    /// Marks the segments of `units` as used now (readers do, at most once a second each).
    pub fn touch(&self, units: &Range<u64>) {
        let now = now();
        for segment in self.segments_of(units) {
            let word = self.segment_word(segment);
            let old = word.load(Ordering::Relaxed);
            if old & EVICTING == 0 && (old as u32) < now {
                let _ = word.compare_exchange(
                    old,
                    (old & !0xffff_ffff) | u64::from(now),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Writes `bytes` (the contents of `units`, fetched) and marks them present; then, if the
    /// cache holds more than its budget, evicts.
    pub fn write(&self, units: Range<u64>, bytes: &[u8]) -> Result<()> {
        let range = self.bytes_of(&units);
        debug_assert_eq!(bytes.len() as u64, range.end - range.start);
        let generations = self.begin_write(&units);
        platform::write_all_at(&self.data, bytes, range.start)
            .map_err(|e| io("writing the cache", e))?;
        let mut added = 0u64;
        for (word, mask) in Self::masks(units.clone()) {
            let before = self.bitmap_word(word).fetch_or(mask, Ordering::AcqRel);
            added += u64::from((mask & !before).count_ones());
        }
        // Evicted while writing (a writer stalled past the lease): what it set is not trusted.
        let moved = self
            .segments_of(&units)
            .zip(&generations)
            .any(|(s, &g)| (self.segment_word(s).load(Ordering::Acquire) >> 32) & GEN_MASK != g);
        if moved {
            for (word, mask) in Self::masks(units) {
                self.bitmap_word(word).fetch_and(!mask, Ordering::AcqRel);
            }
            return Ok(());
        }
        self.account(added as i64 * UNIT as i64);
        if self.usage.counter().load(Ordering::Relaxed) > self.budget {
            self.evict();
        }
        Ok(())
    }

    /// The most bytes the cache holds past what the lease protects (`CacheConfig::budget`, or
    /// `PRIVATE_BUDGET` for a private cache).
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Whether this cache is this process's alone (`private`).
    pub fn is_private(&self) -> bool {
        self.entry.is_none()
    }

    /// Bytes this store's cache holds.
    pub fn held(&self) -> u64 {
        self.bytes_held().load(Ordering::Relaxed)
    }

    /// Bytes the whole cache directory holds.
    pub fn usage(&self) -> u64 {
        self.usage.counter().load(Ordering::Relaxed)
    }

    /// Keeps the segments of `units` for good (see `PINNED`).
    pub fn pin(&self, units: &Range<u64>) {
        for segment in self.segments_of(units) {
            self.segment_word(segment)
                .fetch_or(PINNED, Ordering::AcqRel);
        }
    }

    /// The data file, for reads that copy (`pread`) rather than map.
    pub fn data_file(&self) -> &File {
        &self.data
    }

    /// Evicts the segments of `units` whatever their lease: bytes read there were found damaged.
    /// A pinned segment is not evicted (readers read its pinned bytes without asking): the
    /// units of `units` in it are marked missing instead, their bytes left in place until the
    /// next read that needs them fetches them again and writes them over.
    pub fn invalidate(&self, units: &Range<u64>) {
        for segment in self.segments_of(units) {
            if self.evict_segment(segment, true).is_some() {
                continue;
            }
            if self.segment_word(segment).load(Ordering::Acquire) & PINNED == 0 {
                continue; // being evicted by another reader, or evicted since
            }
            let first = segment * UNITS_PER_SEGMENT;
            let mine = units.start.max(first)..units.end.min(first + UNITS_PER_SEGMENT);
            let mut cleared = 0u64;
            for (word, mask) in Self::masks(mine) {
                let before = self.bitmap_word(word).fetch_and(!mask, Ordering::AcqRel);
                cleared += u64::from((before & mask).count_ones());
            }
            self.account(-((cleared * UNIT) as i64));
        }
    }
    /// Bytes `range` of the data file, read with `pread` (a copy: what the mapping may change
    /// under).
    pub fn read(&self, range: Range<u64>) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; (range.end - range.start) as usize];
        platform::read_exact_at(&self.data, &mut buf, range.start)
            .map_err(|e| io("reading the cache", e))?;
        Ok(buf)
    }

    /// Starts loading the first presence word of `units` into the CPU cache: the bitmap of a
    /// large store is larger than the CPU's caches, and a batch checks random places of it.
    #[inline]
    pub fn prefetch_presence(&self, units: &Range<u64>) {
        let at = MAP_HEADER + self.segments * 8 + units.start / 64 * 8;
        crate::runtime::prefetch::prefetch(&self.map[..], at as usize);
    }

    /// Whether every unit of `units` is present.
    pub fn present(&self, units: &Range<u64>) -> bool {
        Self::masks(units.clone())
            .all(|(w, m)| self.bitmap_word(w).load(Ordering::Acquire) & m == m)
    }
}

#[cfg(test)]
mod tests;
