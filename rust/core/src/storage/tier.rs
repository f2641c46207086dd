//! `StoreFile`: the one type for where a collection's store bytes live, and the one `match`
//! over the tiers. A local file (`Local`: a map, documents read in place or with `pread`) or a
//! remote object behind the node cache (`Cached`). The store reads either through `Storage`,
//! compiled once for both; each method below is one branch on the tier, inlined.

use super::local::{DataAccess, Local};
use super::remote::RemoteFile;
use super::{Plan, Regions, Storage};
use crate::error::{Error, Result};
use memmap2::Mmap;
use std::ops::Range;
use xxhash_rust::xxh3::xxh3_64;

/// What a collection's stores read: a local file, or a remote object behind the node cache.
pub enum StoreFile {
    Local(Local),
    Cached(Cached),
}

/// A remote object behind the node cache: the cache file's map, and the object's own rules
/// (what it fetches, how it heals).
pub struct Cached {
    map: Mmap,
    file: Box<RemoteFile>,
}

impl StoreFile {
    /// A local file mapped, its documents read as `access` says (`file` is what `pread` reads).
    pub fn local(map: Mmap, file: std::fs::File, access: DataAccess) -> StoreFile {
        let file = (access == DataAccess::Pread).then_some(file);
        StoreFile::Local(Local::new(map, file))
    }

    /// A whole file in memory, mapped (a downloaded copy, which `verify` reads).
    pub fn mapped(map: Mmap) -> StoreFile {
        StoreFile::Local(Local::new(map, None))
    }

    pub(crate) fn remote(file: RemoteFile) -> Result<StoreFile> {
        let map = file.map()?;
        Ok(StoreFile::Cached(Cached {
            map,
            file: Box::new(file),
        }))
    }

    /// The remote object behind this file, if it is one: what the collection's `Source` guards
    /// and heals, and what a whole copy is downloaded from.
    pub fn remote_file(&self) -> Option<&RemoteFile> {
        match self {
            StoreFile::Local(_) => None,
            StoreFile::Cached(c) => Some(&c.file),
        }
    }
}

impl AsRef<[u8]> for StoreFile {
    #[inline(always)]
    fn as_ref(&self) -> &[u8] {
        match self {
            StoreFile::Local(l) => l.bytes(),
            StoreFile::Cached(c) => &c.map,
        }
    }
}

impl Cached {
    /// Pins what every read relies on, fetches it in one round and checks it: damaged in the
    /// cache (on its disk, or a bad response cached by any process of the node), it is fetched
    /// again from the server, and refused only if that fails too.
    fn open(&self, regions: &Regions) -> Result<()> {
        let mut pinned: Vec<Range<u64>> = regions.pinned.iter().map(|r| r.range.clone()).collect();
        // Pinned first, so that no eviction can come between the checks and a read.
        self.file.pin(&pinned);
        self.file.ensure(&mut pinned)?;
        let check = || -> Result<()> {
            for region in &regions.pinned {
                let range = region.range.start as usize..region.range.end as usize;
                if xxh3_64(&self.map[range]) != region.checksum {
                    return Err(Error::corrupt(format!("{} checksum mismatch", region.what)));
                }
            }
            Ok(())
        };
        if check().is_err() {
            self.file.heal_pinned(&check)?;
        }
        Ok(())
    }

    fn read_stable<R>(&self, range: Range<u64>, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        if !range.is_empty() {
            self.file.ensure_one(range.clone())?;
        }
        // Copied out of the cache before it is checked and decoded: what is checked is what is
        // decoded, even if the cache evicts meanwhile (a memcpy, no system call).
        let bytes = &self.map[range.start as usize..range.end as usize];
        super::with_copy(
            bytes.len(),
            |buf| {
                buf.copy_from_slice(bytes);
                Ok(())
            },
            f,
        )
    }
}

impl Storage for StoreFile {
    fn open(&self, regions: &Regions) -> Result<()> {
        match self {
            StoreFile::Local(l) => {
                l.open(regions);
                Ok(())
            }
            StoreFile::Cached(c) => c.open(regions),
        }
    }

    #[inline(always)]
    fn stable(&self) -> bool {
        matches!(self, StoreFile::Local(_))
    }

    #[inline(always)]
    fn present(&self, range: Range<u64>) -> bool {
        match self {
            StoreFile::Local(_) => true,
            StoreFile::Cached(c) => c.file.check(range),
        }
    }

    #[inline]
    fn ensure(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        match self {
            StoreFile::Local(_) => {
                ranges.clear();
                Ok(())
            }
            StoreFile::Cached(c) => c.file.ensure(ranges),
        }
    }

    #[inline(always)]
    fn ensure_one(&self, range: Range<u64>) -> Result<()> {
        match self {
            StoreFile::Local(_) => Ok(()),
            StoreFile::Cached(_) if range.is_empty() => Ok(()),
            StoreFile::Cached(c) => c.file.ensure_one(range),
        }
    }

    fn pin(&self, ranges: &[Range<u64>]) {
        if let StoreFile::Cached(c) = self {
            c.file.pin(ranges);
        }
    }

    #[inline(always)]
    fn read_stable<R>(&self, range: Range<u64>, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        match self {
            StoreFile::Local(l) => l.read_stable(range, f),
            StoreFile::Cached(c) => c.read_stable(range, f),
        }
    }

    #[inline(always)]
    fn prefetch(&self, range: Range<u64>) {
        match self {
            StoreFile::Local(l) => l.prefetch(range),
            StoreFile::Cached(c) => {
                super::prefetch_lines(&c.map, range.clone());
                self.prefetch_present(&(range.start..range.start.saturating_add(1)));
            }
        }
    }

    #[inline(always)]
    fn prefetch_present(&self, range: &Range<u64>) {
        if let StoreFile::Cached(c) = self {
            let cache = c.file.cache();
            cache.prefetch_presence(&cache.units(range));
        }
    }

    #[inline(always)]
    fn prepares(&self, len: usize) -> bool {
        match self {
            StoreFile::Local(l) => l.prepares(len),
            StoreFile::Cached(_) => true,
        }
    }

    fn prepare(&self, plan: &dyn Plan) -> Result<()> {
        match self {
            StoreFile::Local(l) => {
                l.advise(plan);
                Ok(())
            }
            StoreFile::Cached(_) => super::fetch_plan(self, plan).map(drop),
        }
    }

    fn load_whole(&self, ranges: &[Range<u64>]) -> Result<u64> {
        match self {
            StoreFile::Local(l) => Ok(l.load_whole(ranges)),
            StoreFile::Cached(_) => super::fetch_missing(self, ranges.iter().cloned()),
        }
    }

    fn load_ahead(&self, plan: &dyn Plan) -> Result<u64> {
        match self {
            StoreFile::Local(l) => Ok(l.load_ahead(plan)),
            StoreFile::Cached(_) => super::fetch_plan(self, plan),
        }
    }

    fn advise(&self, plan: &dyn Plan) {
        if let StoreFile::Local(l) = self {
            l.advise(plan);
        }
    }

    fn looks_cold(&self, plan: &dyn Plan) -> bool {
        match self {
            StoreFile::Local(l) => l.looks_cold(plan),
            StoreFile::Cached(_) => false,
        }
    }

    fn lacks(&self, plan: &dyn Plan) -> bool {
        match self {
            StoreFile::Local(_) => false,
            StoreFile::Cached(_) => super::plan_lacks(self, plan),
        }
    }

    fn data_access(&self) -> DataAccess {
        match self {
            StoreFile::Local(l) => l.data_access(),
            StoreFile::Cached(_) => DataAccess::Mmap,
        }
    }
}
