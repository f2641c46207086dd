//! A local store file: a memory map, read in place or, for documents, with `pread`. Every byte
//! is present, so there is nothing to fetch; what this tier does for a batch is ask the page
//! cache for its pages at once when they look uncached (`pagecache`), so that a cold batch's
//! device reads are queued together rather than one fault at a time.

use super::pagecache::{self, ColdCache};
use super::{Plan, Regions};
use crate::error::{Error, Result};
use memmap2::Mmap;
use std::fs::File;
use std::ops::Range;
use std::sync::OnceLock;

/// How documents are read from a store file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataAccess {
    /// Through the memory map: no system call per document. Every page a lookup touches stays
    /// mapped, and the kernel maps its cached neighbours too (fault-around: ~100 KB per random
    /// lookup measured), so a process's RSS and PSS grow towards the file size as it reads.
    #[default]
    Mmap,
    /// With `pread(2)`, through the same shared page cache: one system call per document, and the
    /// process maps only the index. For many long-lived reader processes (DataLoader workers).
    Pread,
}

/// Batches at least this long ask the page cache for all their pages at once when a sample of
/// them is not cached (a hint costs a system call per range: a short batch is not worth one).
const PREFETCH_MIN: usize = 8;

/// A mapped store file, its documents read through the map or with `pread` of `file`.
pub struct Local {
    map: Mmap,
    /// The file documents are read from with `pread`, or `None` to read them through the map.
    file: Option<File>,
    /// Where the documents lie (set at open): what `pread` reads.
    documents: OnceLock<Range<u64>>,
    /// What every read relies on (set at open: the key fences, which every search starts in,
    /// the schema, the dictionary): kept cached, asked for whole (`keep_pinned`).
    pinned: OnceLock<Box<[Range<u64>]>>,
    /// Whether batches find their pages cached.
    cold: ColdCache,
}

impl Local {
    pub fn new(map: Mmap, file: Option<File>) -> Local {
        Local {
            map,
            file,
            documents: OnceLock::new(),
            pinned: OnceLock::new(),
            cold: ColdCache::default(),
        }
    }

    #[inline(always)]
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Notes where the documents lie and asks for what every read relies on, whole: one
    /// sequential read ahead of the device, not a fault per page as the first searches touch it.
    pub fn open(&self, regions: &Regions) {
        let _ = self.documents.set(regions.documents.range.clone());
        let pinned = regions.pinned.iter().map(|r| r.range.clone()).collect();
        let _ = self.pinned.set(pinned);
        for range in self.pinned() {
            pagecache::will_need(&self.map, range.start as usize..range.end as usize);
        }
    }

    fn pinned(&self) -> &[Range<u64>] {
        self.pinned.get().map_or(&[], |p| p)
    }

    /// Asks again, whole, for each pinned region the page cache has lost (by the page in its
    /// middle, where a binary search over it starts). Before a cold batch computes where its
    /// keys' blocks lie: that search over the key fences would otherwise fault them in a page
    /// at a time, one wait per key (at 100M keys the fences are 6.25 MB, and a batch of 1,000
    /// keys touches most of their pages). Whether the batch is cold is its sample's to say: a
    /// region open read once (the schema) may be lost while the index stays warm.
    fn keep_pinned(&self) {
        for range in self.pinned() {
            let (start, end) = (range.start as usize, range.end as usize);
            if start < end && !pagecache::resident(&self.map, start + (end - start) / 2) {
                pagecache::will_need(&self.map, start..end);
            }
        }
    }

    /// The file to `pread` `range` from, when it is documents read that way.
    #[inline(always)]
    fn pread_of(&self, range: &Range<u64>) -> Option<&File> {
        let file = self.file.as_ref()?;
        let documents = self.documents.get()?;
        (documents.start <= range.start && range.end <= documents.end).then_some(file)
    }

    #[inline(always)]
    pub fn read_stable<R>(
        &self,
        range: Range<u64>,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        let Some(file) = self.pread_of(&range) else {
            return f(&self.map[range.start as usize..range.end as usize]);
        };
        // The bounds come from the mapped index, checked as for a mapped read; the bytes from
        // the file, never from the mapping.
        let fill = |buf: &mut [u8]| {
            crate::runtime::platform::read_exact_at(file, buf, range.start).map_err(Error::from)
        };
        super::with_copy((range.end - range.start) as usize, fill, f)
    }

    #[inline(always)]
    pub fn prefetch(&self, range: Range<u64>) {
        // A `pread` store's documents are not read from the map.
        if self.pread_of(&range).is_none() {
            super::prefetch_lines(&self.map, range);
        }
    }

    pub fn prepares(&self, len: usize) -> bool {
        len >= PREFETCH_MIN
    }

    /// When the batch looks uncached (`looks_cold`), asks for all its pages at once, round by
    /// round (a round's places are read from the pages the round before asked for).
    pub fn advise(&self, plan: &dyn Plan) {
        if !self.looks_cold(plan) {
            return;
        }
        for round in 0..plan.rounds() {
            plan.each(round, &mut |range| self.will_need(range));
        }
    }

    /// Whether a batch of `plan` looks uncached, by a sample of its pages (only some batches
    /// sample while the cache looks warm: `ColdCache`). Short batches never do.
    pub fn looks_cold(&self, plan: &dyn Plan) -> bool {
        if plan.reads() < PREFETCH_MIN {
            return false;
        }
        let map = &self.map[..];
        // The pinned regions first: finding the sample may read them (an index plan's sample is
        // where the search of its first key leads).
        let cached = || {
            self.keep_pinned();
            plan.sample().is_none_or(|r| {
                r.start >= map.len() as u64 || pagecache::resident(map, r.start as usize)
            })
        };
        self.cold.is_cold(cached)
    }

    /// Asks the page cache for every range of `plan`, round by round, whether the file looks
    /// cached or not (see `Storage::load_ahead`); returns the bytes asked for.
    pub fn load_ahead(&self, plan: &dyn Plan) -> u64 {
        let mut bytes = 0;
        for round in 0..plan.rounds() {
            plan.each(round, &mut |range| {
                bytes += range.end - range.start;
                self.will_need(range);
            });
        }
        bytes
    }

    /// Reads `ranges` of the map into the page cache and maps their pages: each asked for
    /// whole first (one sequential read ahead of the device), then touched a page at a time,
    /// which waits for the reads. Returns their bytes.
    pub fn load_whole(&self, ranges: &[Range<u64>]) -> u64 {
        let map = &self.map[..];
        let mut bytes = 0;
        for range in ranges {
            let range = range.start as usize..(range.end as usize).min(map.len());
            if range.start < range.end {
                pagecache::will_need(map, range.clone());
                bytes += (range.end - range.start) as u64;
            }
        }
        for range in ranges {
            let range = range.start as usize..(range.end as usize).min(map.len());
            let Some(bytes) = map.get(range) else {
                continue;
            };
            // One byte a page: the fault is what waits for the page and maps it.
            let mut sum = 0u8;
            for at in (0..bytes.len()).step_by(crate::runtime::platform::hints::page_size()) {
                sum ^= bytes[at];
            }
            std::hint::black_box(sum);
        }
        bytes
    }

    /// Asks the page cache for `range` of the file, where documents read with `pread` are read.
    /// Where the OS takes no hint (Windows), reads it (the caller is a background thread).
    fn will_need(&self, range: Range<u64>) {
        #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
        {
            let _ = self.read_stable(range.clone(), |bytes| {
                // Touches a byte a page: the read itself is what loads the cache.
                let sum = bytes.iter().step_by(4096).fold(0u8, |a, &b| a ^ b);
                Ok(std::hint::black_box(sum))
            });
        }
        match self.pread_of(&range) {
            Some(file) => {
                pagecache::will_need_file(file, range.start, (range.end - range.start) as usize)
            }
            None => pagecache::will_need(&self.map, range.start as usize..range.end as usize),
        }
    }

    pub fn data_access(&self) -> DataAccess {
        match self.file {
            Some(_) => DataAccess::Pread,
            None => DataAccess::Mmap,
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::storage::Region;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    const PAGE: usize = 4096;

    /// A batch of `reads` reads whose first lies at `sample` (no rounds: nothing to ask for).
    struct Batch {
        reads: usize,
        sample: Option<Range<u64>>,
    }

    /// A batch that leaves its pages to the regions.
    const BATCH: Batch = Batch {
        reads: PREFETCH_MIN,
        sample: None,
    };

    impl Plan for Batch {
        fn reads(&self) -> usize {
            self.reads
        }
        fn rounds(&self) -> usize {
            0
        }
        fn each(&self, _round: usize, _each: &mut dyn FnMut(Range<u64>)) {}
        fn sample(&self) -> Option<Range<u64>> {
            self.sample.clone()
        }
    }

    fn written(pages: usize) -> std::fs::File {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&vec![7u8; pages * PAGE]).unwrap();
        file.sync_all().unwrap(); // clean pages, which the kernel can drop
        file
    }

    fn evict(file: &std::fs::File) {
        // SAFETY: a plain system call on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
    }

    fn resident_pages(local: &Local, range: Range<usize>) -> usize {
        (range.step_by(PAGE))
            .filter(|&at| pagecache::resident(local.bytes(), at))
            .count()
    }

    /// Whether every page of `range` comes to be cached: `mincore` counts a page once its read
    /// has completed, so this waits for the reads a hint started (a minute at most, for a
    /// loaded machine; a hint never given fails the test then).
    fn all_resident(local: &Local, range: Range<usize>) -> bool {
        let pages = range.len() / PAGE;
        let start = Instant::now();
        while resident_pages(local, range.clone()) < pages {
            if start.elapsed() > Duration::from_secs(60) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn the_pinned_regions_are_asked_for_whole_at_open_and_again_when_a_batch_finds_them_lost() {
        let file = written(64);
        evict(&file);
        // SAFETY: a private temporary file nothing else changes.
        let map = unsafe { Mmap::map(&file).unwrap() };
        let local = Local::new(map, None);
        let (fences, documents) = (8 * PAGE..40 * PAGE, 40 * PAGE..64 * PAGE);
        assert_eq!(resident_pages(&local, fences.clone()), 0);

        let region = |range: Range<usize>| Region {
            what: "a region",
            range: range.start as u64..range.end as u64,
            checksum: 0,
        };
        local.open(&Regions {
            pinned: vec![region(fences.clone())],
            documents: region(documents.clone()),
            ..Regions::default()
        });
        assert!(all_resident(&local, fences.clone()), "asked for at open");
        assert_eq!(resident_pages(&local, documents), 0, "only what is pinned");

        evict(&file); // nothing maps them: the page cache drops them all
        assert_eq!(resident_pages(&local, fences.clone()), 0);
        local.advise(&BATCH);
        assert!(all_resident(&local, fences), "asked for again, whole");
    }

    #[test]
    fn a_batch_looks_cold_when_its_sample_is_uncached_and_never_when_short() {
        let file = written(16);
        evict(&file);
        // SAFETY: a private temporary file nothing else changes.
        let local = Local::new(unsafe { Mmap::map(&file).unwrap() }, None);
        let batch = |reads| Batch {
            reads,
            sample: Some(4 * PAGE as u64..5 * PAGE as u64),
        };
        assert!(
            !local.looks_cold(&batch(PREFETCH_MIN - 1)),
            "too short to sample"
        );
        assert!(local.looks_cold(&batch(PREFETCH_MIN)));
        assert_eq!(local.bytes()[4 * PAGE], 7); // read, so cached
        assert!(!local.looks_cold(&batch(PREFETCH_MIN)));
    }
}
