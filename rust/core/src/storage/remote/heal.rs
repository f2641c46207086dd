//! Healing: what a read made present, remembered per thread (and what the pool's threads read
//! for it, `POOL_READ`) so that a read that finds damage drops it (`invalidate_read`) and reads
//! again; what every read relies on unasked (the pinned
//! ranges) fetched again and checked (`refetch_pinned`, `heal_pinned`); cache files truncated
//! under a reader made whole again (`guard`).

use super::file::RemoteFile;
use super::requests;
use crate::error::{Error, Result};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Instant;
use xxhash_rust::xxh3::xxh3_64;

thread_local! {
    /// What this thread's current read made present, per file (by address): evicted again if
    /// the read finds damage (`invalidate_read`).
    static READ: std::cell::RefCell<Vec<(usize, Range<u64>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// What the pool's threads read for a batch (a batch's search and decoding run on them beside
/// the calling thread, whose `READ` they cannot reach): the most recent `READ_MEMORY` ranges,
/// evicted too by the calling thread's `invalidate_read`. Without them, damage that a pool
/// thread met stayed in the cache, and every attempt met it again. Evicting another batch's
/// ranges as well costs that batch a fetch, never a wrong byte (the cache's protocol).
static POOL_READ: std::sync::Mutex<std::collections::VecDeque<(usize, Range<u64>)>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// Ranges a read remembers for `invalidate_read`, at most (past that, the rest is not evicted
/// again: it is refetched only when its lease runs out).
const READ_MEMORY: usize = 1 << 16;

/// Remembers `ranges` of `file` as made present by this thread's current read (as many as
/// `READ_MEMORY` allows), or on a pool thread, by the batch it works for.
pub(super) fn remember(file: &RemoteFile, ranges: &[Range<u64>]) {
    let me = file as *const RemoteFile as usize;
    if rayon::current_thread_index().is_some() {
        let mut pool = POOL_READ
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for range in ranges.iter().take(READ_MEMORY) {
            if pool.len() == READ_MEMORY {
                pool.pop_front();
            }
            pool.push_back((me, range.clone()));
        }
        return;
    }
    READ.with(|r| {
        let mut read = r.borrow_mut();
        let room = READ_MEMORY.saturating_sub(read.len());
        read.extend(ranges.iter().take(room).map(|range| (me, range.clone())));
    });
}

/// Starts a read on this thread (see `invalidate_read`).
pub fn begin_read() {
    READ.with(|r| r.borrow_mut().clear());
}

/// Evicts from `files` what this thread's read since `begin_read` made present; with
/// `pinned`, also fetches again what is pinned in the files the read touched (every file if it
/// touched none).
pub fn invalidate_read<'a>(
    files: impl Iterator<Item = &'a RemoteFile> + Clone,
    pinned: bool,
) -> Result<()> {
    let mut read = READ.with(|r| std::mem::take(&mut *r.borrow_mut()));
    let pool = std::mem::take(&mut *POOL_READ.lock().unwrap_or_else(|p| p.into_inner()));
    read.extend(pool);
    for file in files.clone() {
        let me = file as *const RemoteFile as usize;
        let ranges: Vec<Range<u64>> = (read.iter())
            .filter(|(at, _)| *at == me)
            .map(|(_, r)| r.clone())
            .collect();
        file.invalidate(&ranges);
        if pinned && (!ranges.is_empty() || read.is_empty()) {
            file.refetch_pinned()?;
        }
    }
    Ok(())
}

/// Milliseconds on a clock of this process (`RemoteFile::guard`).
pub fn guard_clock() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

impl RemoteFile {
    /// Pinned bytes found damaged by `check`: fetched again from the server (`refetch_pinned`)
    /// and checked again, a heal counted when they pass (`Storage::heal_pinned`).
    pub fn heal_pinned(&self, check: &dyn Fn() -> Result<()>) -> Result<()> {
        self.refetch_pinned()?;
        check()?;
        self.remote.stats.heals.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Before a read (`now`: `guard_clock`, read once per read): whether the cache files are
    /// still their length, at most once a millisecond. A data file truncated since (by hand:
    /// docstore never does) is made its size again and what is pinned past the cut fetched
    /// again; reading it through the map as it was would kill the process (SIGBUS). What is
    /// left: a truncation within the millisecond, or during a read, still does (docs/remote.md).
    pub fn guard(&self, now: u64) -> Result<()> {
        if self.guarded.load(Ordering::Relaxed) == now {
            return Ok(());
        }
        if !self.cache.intact()? {
            let lost = self.cache.restore()?;
            let pinned = self
                .pinned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if pinned.iter().any(|r| r.end > lost) {
                self.refetch_pinned()?;
            }
            self.remote.stats.heals.fetch_add(1, Ordering::Relaxed);
        }
        self.guarded.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// Fetches what is pinned (header, schema, dictionary, key fences, common prefix) again
    /// from the server, checks it (the header by its own checksum and the fingerprint it was
    /// opened with, a whole section by its checksum) and writes it over what the cache holds,
    /// present or not: replaced in place, never made a hole, since readers read it unasked.
    /// Bytes the server sends damaged are not written: `Error::Corrupt`.
    pub fn refetch_pinned(&self) -> Result<()> {
        let pinned = self
            .pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let unit = crate::storage::cache::UNIT;
        let most = requests::most(self.remote.options(), unit);
        // Each pinned range's units, fetched into a buffer of their own.
        let buffers: Vec<(Range<u64>, std::sync::Mutex<Vec<u8>>)> = (pinned.iter())
            .map(|r| {
                let bytes = self.cache.bytes_of(&self.cache.units(r));
                let len = (bytes.end - bytes.start) as usize;
                (bytes, std::sync::Mutex::new(vec![0u8; len]))
            })
            .collect();
        let runs = (buffers.iter()).map(|(bytes, _)| bytes.start / unit..bytes.end.div_ceil(unit));
        let requests = requests::split(runs, most, unit, self.size);
        self.get(requests, |range, fetched| {
            for (bytes, buffer) in &buffers {
                if bytes.start <= range.start && range.end <= bytes.end {
                    let at = (range.start - bytes.start) as usize;
                    let mut buffer = buffer.lock().unwrap_or_else(|e| e.into_inner());
                    buffer[at..at + fetched.len()].copy_from_slice(&fetched);
                }
            }
            Ok(())
        })?;
        let mut damaged = None;
        for (range, (bytes, buffer)) in pinned.iter().zip(buffers) {
            let buffer = buffer.into_inner().unwrap_or_else(|e| e.into_inner());
            let at = (range.start - bytes.start) as usize..(range.end - bytes.start) as usize;
            let got = &buffer[at];
            let sound = if *range == self.regions.header {
                // The header opened passed the store's checks (`Declare`): the same bytes do.
                *got == *self.head
            } else {
                // A whole region has its checksum (the common prefix has none: its bytes are
                // checked as keys, by every lookup's check).
                (self.regions.all())
                    .find(|region| region.range == *range)
                    .is_none_or(|region| xxh3_64(got) == region.checksum)
            };
            if sound {
                let units = bytes.start / unit..bytes.end.div_ceil(unit);
                self.cache.write(units, &buffer)?;
            } else {
                damaged = Some(range.clone());
            }
        }
        match damaged {
            Some(r) => Err(Error::corrupt(format!(
                "{} (bytes {}..{}): fetched again from the server, still damaged",
                self.url, r.start, r.end
            ))),
            None => Ok(()),
        }
    }
}
