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

use crate::error::{Error, Result};
use crate::platform;
use memmap2::{Mmap, MmapMut};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Presence is kept per unit of this many bytes: a random document costs its size rounded out
/// to units (measured on documents of ~160 bytes: 512-byte units fetched 7x their stored size,
/// 128-byte units 2.1x). The map costs one bit per unit: 2 GiB for a 1 TiB object, allocated
/// as it is used.
pub const UNIT: u64 = 64;
/// Eviction works on segments of this many bytes.
pub const SEGMENT: u64 = 1 << 20;
const UNITS_PER_SEGMENT: u64 = SEGMENT / UNIT;
const WORDS_PER_SEGMENT: u64 = UNITS_PER_SEGMENT / 64;

const MAGIC: &[u8; 8] = b"DSCACHE3";
/// Map header: magic, object size, unit, segment, bytes held (atomic), clock hand (atomic),
/// longest lease (atomic).
const MAP_HEADER: u64 = 64;
const BYTES_AT: u64 = 24;
const HAND_AT: u64 = 32;
/// The longest lease any reader of the entry asked for (atomic, raised at open): what a sweep
/// from another entry honours.
const LEASE_AT: u64 = 40;
/// The second a process of the node began fetching whole sections of this entry (atomic; 0:
/// none): one purchase at a time, so that readers reaching the threshold together do not all
/// download the same sections.
const PURCHASE_AT: u64 = 48;
/// A purchase older than this is taken over (its process died, or its network hangs).
const PURCHASE_PATIENCE: u64 = 60;
/// The store's fingerprint (its header checksum), written when the entry is made: what an open
/// checks the object's header against.
const FINGERPRINT_AT: u64 = 56;

/// Segment word: bit 63 = being evicted, bit 62 = pinned, bits 32..62 = generation, bits 0..32 =
/// last use (s).
const EVICTING: u64 = 1 << 63;
/// Never evicted: what a reader relies on without a check per read (the header, schema,
/// dictionary and key fences, checked once at open; the common key prefix). Found damaged, its
/// bytes are marked missing in place (`invalidate`) or fetched again and written over
/// (`RemoteFile::refetch_pinned`), never made a hole.
const PINNED: u64 = 1 << 62;
const GEN_MASK: u64 = 0x3fff_ffff;
/// A writer waits this long for an evictor before taking the segment over (the evictor died).
const EVICTOR_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);
/// An eviction pass looks at this many segments at most.
const SWEEP: u64 = 4096;

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

/// The `usage` counter: shared by the node, or this process's own.
enum Usage {
    Shared(MmapMut),
    Private(AtomicU64),
}

impl Usage {
    fn counter(&self) -> &AtomicU64 {
        match self {
            // SAFETY: the mapping is at least 8 bytes, page-aligned, lives as long as `self`, and
            // every process only ever accesses these bytes atomically.
            Usage::Shared(map) => unsafe { AtomicU64::from_ptr(map.as_ptr() as *mut u64) },
            Usage::Private(counter) => counter,
        }
    }
}

/// Who may use a cache directory, from its mode (`check_dir`), and so what its entries are made
/// as and which it trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sharing {
    /// This user's own (writable by no one else): entries 0700, files 0600.
    Private,
    /// Writable by every user, with the sticky bit (`/tmp`-like): no user can rename or delete
    /// another's files, nor may trust them. Each user's entries carry their uid in their name
    /// and the counter is `usage.<uid>`: users of one directory never meet each other's files.
    Sticky(u32),
    /// A group's (setgid, writable by the group, not by others): its members share entries and
    /// the counter, made 2770 and 0660 whatever the umask (the setgid bit gives them the
    /// directory's group). An entry or file of that group that others cannot write is trusted
    /// whichever member made it: only members (and root) can write the directory.
    Group(u32),
}

impl Sharing {
    fn dir_mode(self) -> u32 {
        match self {
            Sharing::Group(_) => 0o2770,
            _ => 0o700,
        }
    }

    fn file_mode(self) -> u32 {
        match self {
            Sharing::Group(_) => 0o660,
            _ => 0o600,
        }
    }

    /// The name of the entry `key` of `size` bytes.
    fn entry_name(self, key: &str, size: u64) -> String {
        match self {
            Sharing::Sticky(uid) => format!("{key}u{uid}-{size:x}"),
            _ => format!("{key}-{size:x}"),
        }
    }

    fn usage_name(self) -> String {
        match self {
            Sharing::Sticky(uid) => format!("usage.{uid}"),
            _ => "usage".to_string(),
        }
    }
}

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

fn map_len(size: u64) -> u64 {
    let segments = size.div_ceil(SEGMENT);
    MAP_HEADER + segments * 8 + segments * WORDS_PER_SEGMENT * 8
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
                    let aside = dir.join(format!(".stale-{name}-{}", crate::process::id()));
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

    /// The entry at `dir`: `None` if there is none; an error if it is not one this user can
    /// trust: a link or not a directory, files that are links or not this user's (nor, in a
    /// group's directory, the group's), another size or layout, or (with `fingerprint`) another
    /// store's.
    fn open_existing(
        dir: &Path,
        size: u64,
        fingerprint: Option<u64>,
        sharing: Sharing,
    ) -> Result<Option<(File, (MmapMut, File))>> {
        match std::fs::symlink_metadata(dir) {
            Ok(meta) => trusted(dir, &meta, true, sharing)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(dir.display(), e)),
        }
        let data = match open_trusted(&dir.join("data"), false, sharing) {
            Ok(file) => file,
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let map_file = open_trusted(&dir.join("map"), false, sharing)?;
        if data.metadata()?.len() != size || map_file.metadata()?.len() != map_len(size) {
            return Err(Error::corrupt("cache entry of another size"));
        }
        // (A map made sparse by an older docstore, or copied: see `reserve`.)
        reserve(&map_file, map_len(size))?;
        // SAFETY: the map file is only ever accessed through atomics (and its header, written
        // before the directory was renamed into place, is only read).
        let map = unsafe { MmapMut::map_mut(&map_file)? };
        if &map[..8] != MAGIC
            || crate::format::u64_at(&map, 8) != size
            || crate::format::u32_at(&map, 16) as u64 != UNIT
        {
            return Err(Error::corrupt("not a docstore cache entry"));
        }
        if fingerprint.is_some_and(|f| crate::format::u64_at(&map, FINGERPRINT_AT as usize) != f) {
            // The same URL, version and size, another header: a server that reuses its
            // validators. What the entry holds may be another object's bytes.
            return Err(Error::corrupt("cache entry of another store"));
        }
        Ok(Some((data, (map, map_file))))
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

    fn word(&self, at: u64) -> &AtomicU64 {
        debug_assert!(at + 8 <= self.map.len() as u64 && at.is_multiple_of(8));
        // SAFETY: `at` is 8-aligned inside the live, page-aligned mapping (callers compute it
        // from the layout of `map_len`), and the map's words are only accessed atomically.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(at as usize) as *mut u64) }
    }

    fn segment_word(&self, segment: u64) -> &AtomicU64 {
        self.word(MAP_HEADER + segment * 8)
    }

    fn bitmap_word(&self, word: u64) -> &AtomicU64 {
        self.word(MAP_HEADER + self.segments * 8 + word * 8)
    }

    fn bytes_held(&self) -> &AtomicU64 {
        self.word(BYTES_AT)
    }

    /// Units `first..end` as (word, mask) pairs.
    fn masks(units: Range<u64>) -> impl Iterator<Item = (u64, u64)> {
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

    fn segments_of(&self, units: &Range<u64>) -> Range<u64> {
        if units.is_empty() {
            return 0..0;
        }
        units.start / UNITS_PER_SEGMENT..(units.end - 1) / UNITS_PER_SEGMENT + 1
    }

    /// Stamps the segments of `units` for a write and returns their generations: waits for an
    /// evictor at work there (taking over from one that died).
    fn begin_write(&self, units: &Range<u64>) -> Vec<u64> {
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

    fn account(&self, delta: i64) {
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

    /// Clears a segment's bits and punches its hole; returns the units it held.
    fn clear_segment(&self, segment: u64) -> u64 {
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

    /// Evicts one segment: flag, clear and punch, next generation. `force` ignores the lease (a
    /// reader that found damage there). Returns the bytes freed, or `None` if it was not evicted.
    fn evict_segment(&self, segment: u64, force: bool) -> Option<u64> {
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
    fn evict(&self) {
        let target = self.budget - self.budget / 16;
        if !self.sweep(target) {
            self.evict_others(target);
        }
    }

    /// Evicts this entry's segments least recently used first (a clock hand over the segments,
    /// shared by every process) until the cache holds `target` bytes or a pass found nothing
    /// more; returns whether it got there.
    fn sweep(&self, target: u64) -> bool {
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
    fn evict_others(&self, target: u64) {
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

    /// Keeps the segments of `units` for good (see `PINNED`).
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

    /// Whether the files are still as long as they were made: a file truncated under a mapping
    /// kills its reader with SIGBUS (by someone else: docstore never shortens them).
    pub fn intact(&self) -> Result<bool> {
        let data = self.data.metadata().map_err(|e| io("the cache", e))?.len();
        Ok(data >= self.size && self.map_file_len()? >= self.map.len() as u64)
    }

    fn map_file_len(&self) -> Result<u64> {
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
        crate::prefetch::prefetch(&self.map[..], at as usize);
    }

    /// Whether every unit of `units` is present.
    pub fn present(&self, units: &Range<u64>) -> bool {
        Self::masks(units.clone())
            .all(|(w, m)| self.bitmap_word(w).load(Ordering::Acquire) & m == m)
    }
}

/// Allocates the first `len` bytes of `file` on disk (extending it if shorter): writes through a
/// mapping of them can then never meet a full disk. Filesystems that cannot reserve get a plain
/// extension.
fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    platform::reserve(file, len)
}

/// Makes `data` (sparse, `size` bytes) and `map` (header written, `fingerprint` included) in
/// `dir`: `mode` whatever the umask, never through a link.
fn create_files(
    dir: &Path,
    size: u64,
    fingerprint: u64,
    mode: u32,
) -> Result<(File, (MmapMut, File))> {
    let create = |name: &str| -> Result<File> {
        let path = dir.join(name);
        let file = platform::no_follow(
            File::options().read(true).write(true).create_new(true),
            mode,
        )
        .open(&path)
        .map_err(|e| io(path.display(), e))?;
        platform::set_mode(&path, mode).map_err(|e| io(path.display(), e))?;
        Ok(file)
    };
    let data = create("data")?;
    data.set_len(size).map_err(|e| io(dir.display(), e))?;
    let map_file = create("map")?;
    // Reserved, not sparse: a page of a shared mapping that the disk has no room for kills the
    // process with SIGBUS when first written; here it is an error instead.
    reserve(&map_file, map_len(size)).map_err(|e| io(dir.display(), e))?;
    let mut header = [0u8; MAP_HEADER as usize];
    header[..8].copy_from_slice(MAGIC);
    header[8..16].copy_from_slice(&size.to_le_bytes());
    header[16..20].copy_from_slice(&(UNIT as u32).to_le_bytes());
    header[20..24].copy_from_slice(&(SEGMENT as u32).to_le_bytes());
    let at = FINGERPRINT_AT as usize;
    header[at..at + 8].copy_from_slice(&fingerprint.to_le_bytes());
    platform::write_all_at(&map_file, &header, 0)?;
    // SAFETY: a file this process just made; every later access to its words is atomic.
    let map = unsafe { MmapMut::map_mut(&map_file)? };
    Ok((data, (map, map_file)))
}

/// Refuses what `meta` describes unless it is this user's own or, in a group's directory, of
/// that group and not writable by others (`dir`: a directory, else a regular file), never a
/// link: another user's file could be changed under the readers.
fn trusted(path: &Path, meta: &std::fs::Metadata, dir: bool, sharing: Sharing) -> Result<()> {
    let kind = meta.file_type();
    let what = match dir {
        true => "a directory",
        false => "a regular file",
    };
    if (dir && !kind.is_dir()) || (!dir && !kind.is_file()) {
        return Err(io(
            path.display(),
            std::io::Error::other(format!("not {what} (a link?): not used")),
        ));
    }
    // Windows: no uid; the cache directory's ACL keeps other users out.
    if let Some((uid, me)) = platform::owner(meta).zip(platform::user()) {
        if uid != me && !of_group(meta, sharing) {
            return Err(io(
                path.display(),
                std::io::Error::other(format!(
                    "owned by uid {uid}, not by this user (uid {me}): not used"
                )),
            ));
        }
    }
    Ok(())
}

/// Whether `meta` is of the group whose directory `sharing` is, and not writable by others.
fn of_group(meta: &std::fs::Metadata, sharing: Sharing) -> bool {
    match sharing {
        Sharing::Group(gid) => {
            group_of(meta) == Some(gid) && platform::mode(meta).is_some_and(|m| m & 0o002 == 0)
        }
        _ => false,
    }
}

/// The group that owns what `meta` describes; `None` on Windows.
fn group_of(meta: &std::fs::Metadata) -> Option<u32> {
    #[cfg(unix)]
    return Some(std::os::unix::fs::MetadataExt::gid(meta));
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// Opens a file of the cache for reading and writing, never through a link (`O_NOFOLLOW`), and
/// only if it is a regular file this user may trust (`trusted`; `create`: made if missing, with
/// the directory's file mode whatever the umask, so that a group's members can all write it).
fn open_trusted(path: &Path, create: bool, sharing: Sharing) -> Result<File> {
    let mode = sharing.file_mode();
    let open = |new: bool| {
        platform::no_follow(
            File::options()
                .read(true)
                .write(true)
                .create_new(new)
                .truncate(false),
            mode,
        )
        .open(path)
    };
    let file = match create {
        true => match open(true) {
            Ok(file) => {
                platform::set_mode(path, mode).map_err(|e| io(path.display(), e))?;
                Ok(file)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => open(false),
            Err(e) => Err(e),
        },
        false => open(false),
    }
    .map_err(|e| io(path.display(), e))?;
    trusted(path, &file.metadata()?, false, sharing)?;
    Ok(file)
}

/// Makes `dir` (0700, whatever the umask) if missing, and refuses it unless this user or root
/// owns it, and only they may write it, or others may with the sticky bit (a shared `/tmp`-like
/// directory, where no user can rename or delete another's entries), or its group may with the
/// setgid bit (a group's directory: `Sharing`). A `cache_dir` that is a link is followed: the
/// user named it.
fn check_dir(dir: &Path) -> Result<Sharing> {
    let meta = match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match platform::create_dir_all(dir, 0o700) {
                Ok(()) => {
                    let _ = platform::set_mode(dir, 0o700);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(dir.display(), e)),
            }
            std::fs::metadata(dir).map_err(|e| io(dir.display(), e))?
        }
        Err(e) => return Err(io(dir.display(), e)),
        Ok(meta) => meta,
    };
    let refuse = |why: String| {
        Err(Error::InvalidArgument(format!(
            "cache_dir {}: {why}; another user could change what docstore reads there: give a \
             directory of your own",
            dir.display()
        )))
    };
    if !meta.is_dir() {
        return refuse("not a directory".to_string());
    }
    // Windows has neither uid nor mode bits: there the directory's ACL is what protects it.
    if let Some((uid, me)) = platform::owner(&meta).zip(platform::user()) {
        if uid != me && uid != 0 {
            return refuse(format!(
                "owned by uid {uid}, not by this user (uid {me}) or root"
            ));
        }
    }
    let (Some(mode), Some(me), Some(gid)) =
        (platform::mode(&meta), platform::user(), group_of(&meta))
    else {
        return Ok(Sharing::Private);
    };
    let group = mode & 0o2020 == 0o2020 && mode & 0o002 == 0;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 && !group {
        return refuse(format!(
            "writable by other users (mode {mode:o}) without the sticky bit (nor, writable by \
             its group alone, the setgid bit of a group's directory)"
        ));
    }
    if group && !writable(dir) {
        return Err(Error::InvalidArgument(format!(
            "cache_dir {}: the directory of group {gid} (mode {mode:o}), which this user may \
             not write: not a member of the group? Give a directory of your own",
            dir.display()
        )));
    }
    Ok(match mode {
        _ if group => Sharing::Group(gid),
        _ if mode & 0o022 != 0 => Sharing::Sticky(me),
        _ => Sharing::Private,
    })
}

/// Whether this process may make files in `dir` (`faccessat` with the effective ids and groups).
fn writable(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: a NUL-terminated path that outlives the call; no other pointer is passed.
        let got = unsafe {
            libc::faccessat(
                libc::AT_FDCWD,
                path.as_ptr(),
                libc::W_OK | libc::X_OK,
                libc::AT_EACCESS,
            )
        };
        got == 0
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        true
    }
}

/// The node's `usage` counter, made if missing; recounted from the stores' own counters, so that
/// a store directory deleted by hand stops counting.
fn shared_usage(dir: &Path, sharing: Sharing) -> Result<Usage> {
    let usage = map_usage(dir, sharing)?;
    let mut total = 0u64;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            // The entries this user trusts only, never through a link.
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path);
            if !meta.is_ok_and(|m| trusted(&path, &m, true, sharing).is_ok()) {
                continue;
            }
            let mut held = [0u8; 8];
            if let Ok(file) = open_trusted(&path.join("map"), false, sharing) {
                let mut magic = [0u8; 8];
                if platform::read_exact_at(&file, &mut magic, 0).is_ok()
                    && &magic == MAGIC
                    && platform::read_exact_at(&file, &mut held, BYTES_AT).is_ok()
                {
                    total += u64::from_le_bytes(held);
                }
            }
        }
    }
    usage.counter().store(total, Ordering::Relaxed);
    Ok(usage)
}

/// The directory's shared byte counter, mapped as it is (`shared_usage` also recounts it). A
/// `usage` that is a link, or not a file this user trusts, is replaced, never written through.
fn map_usage(dir: &Path, sharing: Sharing) -> Result<Usage> {
    let path = dir.join(sharing.usage_name());
    let file = match open_trusted(&path, true, sharing) {
        Ok(file) => file,
        Err(_) => {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(path.display(), e)),
            }
            open_trusted(&path, true, sharing)?
        }
    };
    reserve(&file, 8).map_err(|e| io(path.display(), e))?;
    // SAFETY: an 8-byte counter only ever accessed atomically, by every process.
    let map = unsafe { MmapMut::map_mut(&file)? };
    Ok(Usage::Shared(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, budget: u64, lease: u32) -> CacheConfig {
        CacheConfig {
            dir: Some(dir.to_path_buf()),
            budget,
            lease,
        }
    }

    #[test]
    fn damage_in_a_pinned_segment_is_marked_missing_in_place_not_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let size = 2 * SEGMENT;
        let cache = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
        let all = cache.units(&(0..size));
        cache.write(all.clone(), &vec![5u8; size as usize]).unwrap();
        cache.pin(&cache.units(&(0..512)));
        let damaged = cache.units(&(4096..4200));
        cache.invalidate(&damaged);
        assert!(!cache.present(&damaged), "fetched again by the next read");
        assert!(
            cache.present(&cache.units(&(0..4096))),
            "the rest of the segment stays"
        );
        // In place: what a reader reads there unasked is never a hole.
        assert_eq!(&cache.map_data().unwrap()[4096..4200], &[5u8; 104][..]);
        assert_eq!(cache.held(), size - (damaged.end - damaged.start) * UNIT);
        // An unpinned segment is evicted whole, as before.
        let other = cache.units(&(SEGMENT + 10..SEGMENT + 20));
        cache.invalidate(&other);
        assert!(!cache.present(&cache.units(&(SEGMENT..2 * SEGMENT - 1))));
        assert_eq!(cache.held(), SEGMENT - (damaged.end - damaged.start) * UNIT);
    }

    #[test]
    // Windows refuses to truncate a mapped file (ERROR_USER_MAPPED_FILE): this cannot happen there.
    #[cfg(not(windows))]
    fn a_data_file_truncated_under_the_map_is_restored_and_its_lost_bytes_missing() {
        let dir = tempfile::tempdir().unwrap();
        let size = 2 * SEGMENT;
        let cache = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
        let map = cache.map_data().unwrap();
        let all = cache.units(&(0..size));
        cache.write(all.clone(), &vec![5u8; size as usize]).unwrap();
        assert!(cache.intact().unwrap());
        assert_eq!(cache.restore().unwrap(), size, "nothing lost");
        let entry = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.join("data").exists())
            .unwrap();
        let cut = 1000;
        File::options()
            .write(true)
            .open(entry.join("data"))
            .unwrap()
            .set_len(cut)
            .unwrap();
        assert!(!cache.intact().unwrap());
        let lost = cache.restore().unwrap();
        assert_eq!(lost, cut / UNIT * UNIT);
        assert!(cache.intact().unwrap());
        assert!(cache.present(&cache.units(&(0..lost))));
        assert!(!cache.present(&cache.units(&(lost..lost + 1))));
        assert!(!cache.present(&cache.units(&(size - 1..size))));
        assert_eq!(cache.held(), lost);
        // The mapping reads again (zeros where the bytes were lost), no SIGBUS.
        assert_eq!(map[size as usize - 1], 0);
        assert_eq!(map[0], 5);
        // A truncated map is an error (it cannot be trusted), not a crash.
        File::options()
            .write(true)
            .open(entry.join("map"))
            .unwrap()
            .set_len(10)
            .unwrap();
        assert!(!cache.intact().unwrap());
        assert!(cache.restore().is_err());
    }

    #[test]
    fn one_purchase_at_a_time_across_opens_and_a_stale_one_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let a = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, SEGMENT).unwrap();
        let b = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, SEGMENT).unwrap();
        let stamp = a.begin_purchase().unwrap();
        assert!(
            b.begin_purchase().is_none(),
            "another open (process) is buying"
        );
        a.end_purchase(stamp);
        let stamp = b.begin_purchase().unwrap();
        // A purchase begun longer ago than the patience: its process died (or hangs).
        let stale = u64::from(now()) - PURCHASE_PATIENCE - 1;
        b.word(PURCHASE_AT).store(stale, Ordering::Release);
        let taken = a.begin_purchase().unwrap();
        b.end_purchase(stale); // the first owner, late: the new owner's claim stands
        assert!(b.begin_purchase().is_none());
        a.end_purchase(taken);
        assert!(b.begin_purchase().is_some());
        let _ = stamp;
    }

    #[test]
    fn writes_are_present_once_written_and_shared_between_opens() {
        let dir = tempfile::tempdir().unwrap();
        let size = 3 * SEGMENT + 100;
        let a = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
        let units = a.units(&(1000..5000));
        let mut missing = Vec::new();
        a.missing(units.clone(), &mut missing);
        assert_eq!(missing, vec![units.clone()]);
        let range = a.bytes_of(&units);
        a.write(
            units.clone(),
            &vec![9u8; (range.end - range.start) as usize],
        )
        .unwrap();
        assert!(a.present(&units));
        let b = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k7", 7, size).unwrap();
        assert!(b.present(&units), "another open (process) sees the write");
        assert_eq!(&b.map_data().unwrap()[1000..5000], &[9u8; 4000][..]);
        assert_eq!(b.usage(), (units.end - units.start) * UNIT);
        // The tail unit is clipped to the file.
        let tail = a.units(&(size - 10..size));
        assert_eq!(a.bytes_of(&tail), (size - 10) / UNIT * UNIT..size);
        let mut partial = Vec::new();
        a.missing(0..units.end + 5, &mut partial);
        assert_eq!(partial, vec![0..units.start, units.end..units.end + 5]);
    }

    #[test]
    fn evicts_past_the_budget_outside_the_lease_and_punches_holes() {
        let dir = tempfile::tempdir().unwrap();
        let size = 8 * SEGMENT;
        let cache = CacheFile::open(&config(dir.path(), 2 * SEGMENT, 0), "k1", 1, size).unwrap();
        for segment in 0..4 {
            let units = cache.units(&(segment * SEGMENT..(segment + 1) * SEGMENT));
            cache.write(units, &vec![1u8; SEGMENT as usize]).unwrap();
        }
        assert!(cache.usage() <= 2 * SEGMENT, "{}", cache.usage());
        let present = (0..4)
            .filter(|s| cache.present(&cache.units(&(s * SEGMENT..s * SEGMENT + 1))))
            .count();
        assert!(present <= 2);
        let leased = CacheFile::open(&config(dir.path(), SEGMENT, 3600), "k2", 2, size).unwrap();
        for segment in 0..3 {
            let units = leased.units(&(segment * SEGMENT..(segment + 1) * SEGMENT));
            leased.write(units, &vec![1u8; SEGMENT as usize]).unwrap();
        }
        assert!(
            (0..3).all(|s| leased.present(&leased.units(&(s * SEGMENT..s * SEGMENT + 1)))),
            "nothing used within the lease is evicted"
        );
    }

    #[test]
    fn a_sweep_from_another_entry_honours_the_longest_lease_of_its_readers() {
        for (lease, kept) in [(3600, true), (0, false)] {
            let dir = tempfile::tempdir().unwrap();
            let idle =
                CacheFile::open(&config(dir.path(), 1 << 30, lease), "k1", 1, 4 * SEGMENT).unwrap();
            let first = idle.units(&(0..SEGMENT));
            idle.write(first.clone(), &vec![7u8; SEGMENT as usize])
                .unwrap();
            // Stamped in an earlier second than the sweep's, so that a lease of 0 has run out.
            idle.segment_word(0).fetch_sub(1, Ordering::Relaxed);
            let busy =
                CacheFile::open(&config(dir.path(), SEGMENT / 2, 0), "k2", 2, 4 * SEGMENT).unwrap();
            busy.write(busy.units(&(0..SEGMENT)), &vec![9u8; SEGMENT as usize])
                .unwrap();
            assert_eq!(idle.present(&first), kept, "lease {lease}");
        }
    }

    #[test]
    fn an_entry_made_for_another_store_is_set_aside_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let first = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
        let units = first.units(&(0..4096));
        first.write(units.clone(), &[5u8; 4096]).unwrap();
        assert!(
            CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT)
                .unwrap()
                .present(&units)
        );
        // The same key (URL, validators, size), another header: never the first one's bytes.
        let other = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 2, SEGMENT).unwrap();
        assert!(!other.present(&units));
    }

    #[test]
    #[cfg(unix)] // modes and symbolic links as Unix has them
    fn a_cache_dir_others_may_write_is_refused_unless_sticky() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |m| std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(m));
        mode(0o777).unwrap();
        let err = CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT)
            .err()
            .unwrap();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("writable by other users")),
            "{err}"
        );
        mode(0o1777).unwrap();
        CacheFile::open(&config(dir.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
    }

    #[test]
    #[cfg(unix)] // modes as Unix has them
    fn a_groups_directory_gets_entries_its_group_can_write_and_a_sticky_one_per_user_names() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let me = platform::user().unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        let group = tempfile::tempdir().unwrap();
        std::fs::set_permissions(group.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
        let file = CacheFile::open(&config(group.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
        file.write(file.units(&(0..64)), &[1u8; 64]).unwrap();
        let entry = group.path().join(format!("k-{SEGMENT:x}"));
        assert_eq!(mode(&entry), 0o2770);
        for name in ["data", "map"] {
            assert_eq!(mode(&entry.join(name)), 0o660, "{name}");
        }
        assert_eq!(mode(&group.path().join("usage")), 0o660);
        let sticky = tempfile::tempdir().unwrap();
        std::fs::set_permissions(sticky.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        CacheFile::open(&config(sticky.path(), 1 << 30, 30), "k", 1, SEGMENT).unwrap();
        let entry = sticky.path().join(format!("ku{me}-{SEGMENT:x}"));
        assert_eq!(mode(&entry), 0o700);
        assert_eq!(mode(&sticky.path().join(format!("usage.{me}"))), 0o600);
        assert!(!sticky.path().join("usage").exists());
    }

    #[test]
    #[cfg(unix)] // modes and symbolic links as Unix has them
    fn a_usage_link_is_replaced_never_written_through() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious bytes").unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::os::unix::fs::symlink(&victim, cache.join("usage")).unwrap();
        let file = CacheFile::open(&config(&cache, 1 << 30, 30), "k", 1, SEGMENT).unwrap();
        file.write(file.units(&(0..64)), &[1u8; 64]).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious bytes");
        let usage = std::fs::symlink_metadata(cache.join("usage")).unwrap();
        assert!(usage.file_type().is_file());
        assert_eq!(usage.mode() & 0o777, 0o600);
    }
}
