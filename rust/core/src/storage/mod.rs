//! Where a store's bytes come from: "make these byte ranges of the file readable", under one
//! reader. A local store is a memory map, where every byte already is; a remote store
//! (`remote`) is a memory map of its node-wide cache file (`cache`), a sparse file the size of
//! the object whose ranges are fetched before the reader touches them.
//!
//! The reader (`Store`) reads the file as one slice, as it always has, and asks for the ranges
//! it is about to read: `present` (is it there?), `ensure` (fetch what is not, in one round),
//! `pin` (keep it for good). Free for a local store (an inlined `false` branch); a presence
//! check and, for what is missing, concurrent range requests for a remote one. So every lookup
//! path, integrity check and dataset runs the same code on both. What a remote store does
//! behind `ensure` is its own: merging and splitting requests and their retries (`remote`),
//! rent or buy for its index sections (`rent`), its counters (`RemoteStats`), the node cache
//! (`cache`).

pub mod cache;
pub mod remote;
pub mod source;
pub mod url;

use crate::error::{Error, Result};
use memmap2::Mmap;
use std::ops::Range;

pub use remote::{Remote, RemoteOptions, RemoteStats};
pub use source::Source;

/// The bytes of a store file, as one slice, and a way to make ranges of them readable: "read
/// these ranges". What a remote store does behind it (purchases of whole sections, counters,
/// retries of requests, its options) is its own (`remote`), not the reader's. `Sync`: one store
/// is searched and read by the pool's threads at once.
pub trait Storage: AsRef<[u8]> + Sync {
    /// Whether ranges must be `ensure`d before they are read (a remote store).
    #[inline(always)]
    fn is_remote(&self) -> bool {
        false
    }

    /// Whether `range` is readable without fetching; if so, marks it used (a remote store's
    /// cache keeps what is used). Always, for a local store.
    #[inline(always)]
    fn present(&self, _range: Range<u64>) -> bool {
        true
    }

    /// Makes `ranges` (absolute byte ranges of the file) readable through `as_ref`; fetches
    /// what is missing, all at once (one round of concurrent requests). Empties `ranges`.
    #[inline(always)]
    fn ensure(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        ranges.clear();
        Ok(())
    }

    /// `ensure` of one range (no allocation when it is present: the common case).
    #[inline(always)]
    fn ensure_one(&self, range: Range<u64>) -> Result<()> {
        match self.is_remote() && !self.present(range.clone()) {
            true => self.ensure(&mut vec![range]),
            false => Ok(()),
        }
    }

    /// Keeps `ranges` readable for good (a remote store's cache never evicts them): what a
    /// reader reads without asking.
    fn pin(&self, _ranges: &[Range<u64>]) {}

    /// Pinned bytes that failed `check` with `error` (damaged in a remote store's cache): fetched
    /// again from where they come from and checked again, a heal counted when they pass. A local
    /// store has nothing to fetch again: `error` stands.
    fn heal_pinned(&self, error: Error, _check: &dyn Fn() -> Result<()>) -> Result<()> {
        Err(error)
    }

    /// Starts loading into the CPU cache what `present` of `range` reads (a remote store's
    /// presence bits), so that a batch's checks overlap their cache misses.
    #[inline(always)]
    fn prefetch_present(&self, _range: &Range<u64>) {}
}

impl Storage for Mmap {}
impl Storage for Vec<u8> {}
impl Storage for &[u8] {}

/// What a collection's stores read: a local file's memory map, or a remote object behind the
/// node cache. One type for both, so the reader is compiled once: `as_ref` is the same slice
/// either way, and only `ensure` looks at which.
pub struct StoreFile {
    map: Mmap,
    remote: Option<Box<remote::RemoteFile>>,
}

impl StoreFile {
    pub fn local(map: Mmap) -> StoreFile {
        StoreFile { map, remote: None }
    }

    pub(crate) fn remote(file: remote::RemoteFile) -> Result<StoreFile> {
        let map = file.map()?;
        Ok(StoreFile {
            map,
            remote: Some(Box::new(file)),
        })
    }

    /// The remote object behind this file, if it is one.
    pub fn remote_file(&self) -> Option<&remote::RemoteFile> {
        self.remote.as_deref()
    }
}

impl AsRef<[u8]> for StoreFile {
    #[inline(always)]
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Storage for StoreFile {
    #[inline(always)]
    fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    #[inline]
    fn present(&self, range: Range<u64>) -> bool {
        self.remote.as_ref().is_none_or(|r| r.check(range))
    }

    #[inline]
    fn ensure(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        match &self.remote {
            Some(remote) => remote.ensure(ranges),
            None => {
                ranges.clear();
                Ok(())
            }
        }
    }

    #[inline]
    fn ensure_one(&self, range: Range<u64>) -> Result<()> {
        match &self.remote {
            Some(remote) => remote.ensure_one(range),
            None => Ok(()),
        }
    }

    fn pin(&self, ranges: &[Range<u64>]) {
        if let Some(remote) = &self.remote {
            remote.pin(ranges);
        }
    }

    fn heal_pinned(&self, error: Error, check: &dyn Fn() -> Result<()>) -> Result<()> {
        match &self.remote {
            Some(remote) => remote.heal_pinned(check),
            None => Err(error),
        }
    }

    fn prefetch_present(&self, range: &Range<u64>) {
        if let Some(r) = &self.remote {
            r.cache().prefetch_presence(&r.cache().units(range));
        }
    }
}
