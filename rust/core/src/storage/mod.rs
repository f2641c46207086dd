//! Where a store's bytes come from: "make these byte ranges of the file readable", under one
//! reader. A local store is a memory map, where every byte already is; a remote store
//! (`remote`) is a memory map of its node-wide cache file (`cache`), a sparse file the size of
//! the object whose ranges are fetched before the reader touches them.
//!
//! The reader (`Store`) reads the file as one slice, as it always has, and asks `ensure` for the
//! ranges it is about to read: free for a local store (an inlined `false` branch), a presence
//! check and, for what is missing, concurrent range requests for a remote one. So every lookup
//! path, integrity check and dataset runs the same code on both.

pub mod cache;
pub mod remote;
pub mod source;
pub mod url;

use crate::error::Result;
use memmap2::Mmap;
use std::ops::Range;

pub use remote::{Remote, RemoteOptions, RemoteStats};
pub use source::Source;

/// The bytes of a store file, as one slice, and a way to make ranges of them readable.
pub trait Storage: AsRef<[u8]> {
    /// Whether ranges must be asked for before they are read (a remote store).
    #[inline(always)]
    fn is_remote(&self) -> bool {
        false
    }

    /// Makes `ranges` (absolute byte ranges of the file) readable through `as_ref`; fetches
    /// what is missing, all at once. A local store has every byte already.
    #[inline(always)]
    fn ensure(&self, _ranges: &mut Vec<Range<u64>>) -> Result<()> {
        Ok(())
    }

    /// `ensure` of one range (no allocation when it is present: the common case).
    #[inline(always)]
    fn ensure_one(&self, _range: Range<u64>) -> Result<()> {
        Ok(())
    }

    /// Keeps `ranges` readable for good (a remote store's cache never evicts them).
    fn pin(&self, _ranges: &[Range<u64>]) {}

    /// Fetches what is pinned again from where the bytes come from, checked, and writes it over
    /// what is there (a remote store's cache, found damaged): whether it could (a local store
    /// cannot).
    fn refetch_pinned(&self) -> Result<bool> {
        Ok(false)
    }

    /// Counts a heal: damage found in cached bytes, gone once they were fetched again.
    fn healed(&self) {}

    /// Whether `range` is readable without fetching (always, for a local store).
    fn is_present(&self, _range: Range<u64>) -> bool {
        true
    }

    /// Starts loading into the CPU cache what `check` of `range` reads (a remote store's
    /// presence bits), so that a batch's checks overlap their cache misses.
    fn prefetch_check(&self, _range: &Range<u64>) {}

    /// `is_present`, and if so marks it used (a remote store's cache keeps what is used).
    fn check(&self, _range: Range<u64>) -> bool {
        true
    }

    /// Bytes fetched so far (a remote store's counter; 0 for a local one).
    fn fetched_bytes(&self) -> u64 {
        0
    }

    /// Counts `bytes` as fetched for documents (blobs), not the index.
    fn add_data_bytes(&self, _bytes: u64) {}

    /// How a remote store is fetched and cached (`None` for a local one).
    fn remote_options(&self) -> Option<&RemoteOptions> {
        None
    }

    /// Starts fetching `bytes` of whole sections of a remote store: its stamp, or `None` when
    /// another process of the node is at it (`cache::CacheFile::begin_purchase`) or the open
    /// store has bought an eighth of its cache's budget already. `end_purchase(stamp)` when done.
    fn begin_purchase(&self, _bytes: u64) -> Option<u64> {
        None
    }

    fn end_purchase(&self, _stamp: u64) {}
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
    fn ensure(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        match &self.remote {
            Some(remote) => remote.ensure(ranges),
            None => Ok(()),
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

    fn refetch_pinned(&self) -> Result<bool> {
        match &self.remote {
            Some(remote) => remote.refetch_pinned().map(|()| true),
            None => Ok(false),
        }
    }

    fn healed(&self) {
        if let Some(remote) = &self.remote {
            (remote.remote().stats.heals).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn is_present(&self, range: Range<u64>) -> bool {
        self.remote
            .as_ref()
            .is_none_or(|r| r.cache().present(&r.cache().units(&range)))
    }

    fn check(&self, range: Range<u64>) -> bool {
        self.remote.as_ref().is_none_or(|r| r.check(range))
    }

    fn prefetch_check(&self, range: &Range<u64>) {
        if let Some(r) = &self.remote {
            r.cache().prefetch_presence(&r.cache().units(range));
        }
    }

    fn fetched_bytes(&self) -> u64 {
        self.remote.as_ref().map_or(0, |r| {
            r.remote()
                .stats
                .bytes
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    fn remote_options(&self) -> Option<&RemoteOptions> {
        self.remote.as_ref().map(|r| r.remote().options())
    }

    fn begin_purchase(&self, bytes: u64) -> Option<u64> {
        let file = self.remote.as_ref()?;
        let stamp = file.cache().begin_purchase()?;
        if !file.remote().claim_purchase(bytes) {
            file.cache().end_purchase(stamp);
            return None;
        }
        Some(stamp)
    }

    fn end_purchase(&self, stamp: u64) {
        if let Some(remote) = &self.remote {
            remote.cache().end_purchase(stamp);
        }
    }

    fn add_data_bytes(&self, bytes: u64) {
        if let Some(remote) = &self.remote {
            (remote.remote().stats.data_bytes)
                .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
