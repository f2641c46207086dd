//! Where a store's bytes live, and everything that depends on it: one layer owns the answer.
//!
//! A store reads its file as one slice (`AsRef<[u8]>`) and tells its storage what it is about
//! to read; the storage decides what that costs on its tier (`tier`):
//! - a memory map (`local`), where every byte already is: nothing to fetch; batches that look
//!   cold ask the page cache for their pages at once (`pagecache`);
//! - `pread` of the same file (`local`): documents copied out with a system call, the index
//!   mapped;
//! - a remote object behind the node cache (`remote`, `cache`): a sparse file the size of the
//!   object, whose ranges are fetched before they are read, merged and split into requests
//!   with their retries, rent or buy for index sections (`rent`), counters (`RemoteStats`).
//!
//! So `store/` and `collection/` never ask which tier they read: they say what they read
//! (`Regions` at open, a `Plan` for a batch, a range to read held still) and the tier does
//! what it needs, which for a local file is usually nothing (the null object, as lance's
//! `NoopDataCache`). The one question left to callers is whether a read may wait on the
//! network (`Source`), for Python's GIL.

pub mod cache;
mod local;
pub(crate) mod pagecache;
pub mod remote;
pub mod source;
mod tier;
pub mod url;

use crate::error::{try_reserve, Result};
use memmap2::Mmap;
use std::cell::RefCell;
use std::ops::Range;

pub use local::DataAccess;
pub use remote::{Remote, RemoteOptions, RemoteStats};
pub use source::Source;
pub use tier::StoreFile;

/// What a store declares at open about its bytes, in plain ranges of the file: what its
/// storage pins, checks and may buy, without knowing the store's format.
#[derive(Debug, Clone, Default)]
pub struct Regions {
    /// The header, and its fingerprint (what identifies the file's version).
    pub header: Range<u64>,
    pub fingerprint: Fingerprint,
    /// What every read relies on without asking (schema, dictionary, key fences): kept for
    /// good, fetched and checked at open.
    pub pinned: Vec<Region>,
    /// The index: read piece by piece, and worth buying whole once its pieces have cost its size.
    pub index: Vec<Region>,
    /// Where the documents lie.
    pub documents: Region,
}

impl Regions {
    /// Every region with a checksum: what bytes fetched again are checked against.
    pub fn all(&self) -> impl Iterator<Item = &Region> {
        (self.pinned.iter())
            .chain(&self.index)
            .chain(std::iter::once(&self.documents))
    }
}

/// What a store's first bytes declare, given the file's size: its header decoded and checked,
/// and its regions. The store's own (`store::declare`); a remote file calls it on its open's
/// first bytes, so that storage knows nothing of the format.
pub type Declare = fn(first: &[u8], size: u64) -> Result<Regions>;

/// Which version of a file this is: 8 bytes of its header (little-endian), which another
/// version of the file would not have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint {
    pub at: Range<u64>,
    pub value: u64,
}

impl Fingerprint {
    /// The fingerprint `head` (a file's first bytes) holds, if it reaches that far.
    pub fn of(&self, head: &[u8]) -> Option<u64> {
        let bytes = head.get(self.at.start as usize..self.at.end as usize)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    /// Whether `head` is of the same version (`None` while it is too short to say).
    pub fn matches(&self, head: &[u8]) -> Option<bool> {
        self.of(head).map(|f| f == self.value)
    }
}

/// A range of the file with the xxh3-64 of its bytes, and what it is (for errors).
#[derive(Debug, Clone, Default)]
pub struct Region {
    pub what: &'static str,
    pub range: Range<u64>,
    pub checksum: u64,
}

/// A batch's reads, round by round: each round's ranges (absolute, in the file) are known once
/// the rounds before it are readable (doc offsets, then blobs, then keys). A store writes its
/// plan once (`store/plan.rs`); each tier runs it its own way (`Storage::prepare`).
pub trait Plan {
    /// Reads of the batch (what a tier weighs before hinting).
    fn reads(&self) -> usize;
    /// Rounds of dependent reads.
    fn rounds(&self) -> usize;
    /// Calls `each` with every range round `round` reads.
    fn each(&self, round: usize, each: &mut dyn FnMut(Range<u64>));
    /// Where the batch's first document lies: a tier samples it to see whether the batch is cold.
    fn sample(&self) -> Option<Range<u64>>;
}

/// The bytes of a store file, as one slice, and what a reader needs from where they live. A
/// storage says what is `present` and how to `ensure` the rest; every other method has a
/// default built on those two, right for any storage (bytes in memory, where everything is
/// present, or a test's counting storage that fetches). `StoreFile` implements each for its
/// tiers. `Sync`: one store is searched and read by the pool's threads at once.
pub trait Storage: AsRef<[u8]> + Sync {
    /// The store's regions, declared at open: a tier that fetches pins what every read relies
    /// on, fetches it (one round) and checks it, fetching it again once when it finds damage.
    fn open(&self, regions: &Regions) -> Result<()> {
        let mut pinned: Vec<Range<u64>> = regions.pinned.iter().map(|r| r.range.clone()).collect();
        self.pin(&pinned);
        self.ensure(&mut pinned)
    }

    /// Whether bytes read through `as_ref` stay as they are while the store is open. A cache
    /// that evicts or rewrites does not: what is checked must then be a copy (`read_stable`).
    #[inline(always)]
    fn stable(&self) -> bool {
        true
    }

    /// Whether `range` is readable without fetching; if so, marks it used (a cache keeps what
    /// is used).
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
        match self.present(range.clone()) {
            true => Ok(()),
            false => self.ensure(&mut vec![range]),
        }
    }

    /// Keeps `ranges` readable for good (a cache never evicts them): what a reader reads
    /// without asking.
    fn pin(&self, _ranges: &[Range<u64>]) {}

    /// Runs `f` over bytes `range` of the file, made readable first, and held still while `f`
    /// runs: borrowed where they cannot change, else copied into this thread's buffer. What is
    /// checked is then what is decoded.
    #[inline(always)]
    fn read_stable<R>(&self, range: Range<u64>, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        if !range.is_empty() {
            self.ensure_one(range.clone())?;
        }
        let bytes = &self.as_ref()[range.start as usize..range.end as usize];
        match self.stable() {
            true => f(bytes),
            false => with_copy(
                bytes.len(),
                |buf| {
                    buf.copy_from_slice(bytes);
                    Ok(())
                },
                f,
            ),
        }
    }

    /// Starts loading into the CPU cache the first lines of `range` (what a read of it touches
    /// first), and what `present` of it reads, so that a batch's reads overlap their cache
    /// misses.
    #[inline(always)]
    fn prefetch(&self, range: Range<u64>) {
        prefetch_lines(self.as_ref(), range.clone());
        self.prefetch_present(&(range.start..range.start.saturating_add(1)));
    }

    /// Starts loading into the CPU cache what `present` of `range` reads (a cache's presence
    /// bits), so that a batch's checks overlap their cache misses.
    #[inline(always)]
    fn prefetch_present(&self, _range: &Range<u64>) {}

    /// Whether `prepare` has anything to do for a batch of `len` reads (so that a caller does
    /// not build the plan for nothing).
    #[inline(always)]
    fn prepares(&self, _len: usize) -> bool {
        true
    }

    /// Runs a batch's plan before the batch is read: a cache fetches it round by round (a
    /// round of concurrent requests each); a map that looks cold asks for its pages at once.
    fn prepare(&self, plan: &dyn Plan) -> Result<()> {
        fetch_plan(self, plan).map(drop)
    }

    /// Reads that are likely soon (the index blocks a batch's search starts in): a map that
    /// looks cold asks for their pages; a tier that fetches only what it is asked ignores it.
    fn advise(&self, _plan: &dyn Plan) {}

    /// Whether `plan`'s reads look uncached here (a map samples the page cache), so that its
    /// batch is better searched whole, its reads asked for at once, than chunk by chunk, each
    /// chunk waiting on its own few reads. A tier that fetches says so with `lacks`.
    fn looks_cold(&self, _plan: &dyn Plan) -> bool {
        false
    }

    /// Loads what `plan` reads before it is asked for, whatever this storage guesses is warm
    /// (the caller knows the reads will come: a training loader's next batches): a cache
    /// fetches what it lacks; a map asks the page cache for every range at once. Returns the
    /// bytes it fetched or asked for.
    fn load_ahead(&self, plan: &dyn Plan) -> Result<u64> {
        fetch_plan(self, plan)
    }

    /// Makes `ranges` (a store's index) readable now, read whole: a cache fetches what it
    /// lacks; a map reads them in order and maps their pages. Returns the bytes fetched or read.
    fn load_whole(&self, ranges: &[Range<u64>]) -> Result<u64> {
        fetch_missing(self, ranges.iter().cloned())
    }

    /// Whether running `plan` would fetch anything (nothing is fetched to answer).
    fn lacks(&self, plan: &dyn Plan) -> bool {
        plan_lacks(self, plan)
    }

    /// How documents are read (`DataAccess`).
    fn data_access(&self) -> DataAccess {
        DataAccess::Mmap
    }
}

impl Storage for Mmap {}
impl Storage for Vec<u8> {}
impl Storage for &[u8] {}

/// Makes readable what `plan` reads, round by round: each round's missing ranges fetched in
/// one `ensure` (their presence bits loaded in groups first, so that a warm batch's checks
/// overlap their cache misses). What a fetching tier's `prepare` does. Returns the bytes
/// fetched.
pub(crate) fn fetch_plan<S: Storage + ?Sized>(storage: &S, plan: &dyn Plan) -> Result<u64> {
    let mut wants = Vec::new();
    let mut fetched = 0;
    for round in 0..plan.rounds() {
        plan.each(round, &mut |r| wants.push(r));
        fetched += fetch_missing(storage, wants.drain(..))?;
    }
    Ok(fetched)
}

/// Fetches what of `wants` is missing, in one round (`ensure`); present ranges are only stamped.
/// Returns the bytes of the ranges that were missing.
pub(crate) fn fetch_missing<S: Storage + ?Sized>(
    storage: &S,
    wants: impl IntoIterator<Item = Range<u64>>,
) -> Result<u64> {
    /// Presence checks whose memory loads are started together.
    const GROUP: usize = 16;
    let mut wants = wants.into_iter().filter(|r| !r.is_empty());
    let mut group: [Range<u64>; GROUP] = std::array::from_fn(|_| 0..0);
    let mut missing: Vec<Range<u64>> = Vec::new();
    loop {
        let len = (group.iter_mut())
            .map_while(|slot| wants.next().map(|want| *slot = want))
            .count();
        for range in &group[..len] {
            storage.prefetch_present(range);
        }
        for range in &group[..len] {
            if !storage.present(range.clone()) {
                missing.push(range.clone());
            }
        }
        if len < GROUP {
            break;
        }
    }
    if missing.is_empty() {
        return Ok(0);
    }
    let bytes = missing.iter().map(|r| r.end - r.start).sum();
    storage.ensure(&mut missing)?;
    Ok(bytes)
}

/// Whether any round of `plan` has a range missing (the first such round answers: the next
/// ones read what it would fetch).
pub(crate) fn plan_lacks<S: Storage + ?Sized>(storage: &S, plan: &dyn Plan) -> bool {
    (0..plan.rounds()).any(|round| {
        let mut missing = false;
        plan.each(round, &mut |r| {
            missing |= !r.is_empty() && !storage.present(r)
        });
        missing
    })
}

/// `prefetch` of the cache lines of `range` of `bytes` (at least its first), up to
/// `SPAN_LINES`: a blob is checked and decoded front to back, and the lines after the first
/// would otherwise each wait for memory in turn (the CPU's own prefetcher follows a longer one).
#[inline(always)]
pub(crate) fn prefetch_lines(bytes: &[u8], range: Range<u64>) {
    const LINE: usize = 64;
    const SPAN_LINES: usize = 8;
    let start = range.start as usize;
    if start >= bytes.len() {
        return; // a corrupt offset, which the read that follows reports
    }
    crate::runtime::prefetch::prefetch(bytes, start);
    let last = (range.end as usize).min(start + SPAN_LINES * LINE);
    let mut line = (start / LINE + 1) * LINE;
    while line < last {
        crate::runtime::prefetch::prefetch(bytes, line);
        line += LINE;
    }
}

thread_local! {
    /// Bytes copied out of the file (`pread`) or out of a cache, before they are checked and
    /// decoded: one buffer a thread, reused.
    static STABLE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` over `len` bytes that `fill` writes into this thread's buffer (a fresh one when the
/// thread's is in use: `f` read again from inside `f`). A buffer a rare huge read made grow is
/// given back after.
pub(crate) fn with_copy<R>(
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
    f: impl FnOnce(&[u8]) -> Result<R>,
) -> Result<R> {
    let run = |buf: &mut Vec<u8>| -> Result<R> {
        // Grown (or cut) to `len`, not cleared first: only new room is zeroed.
        try_reserve(buf, len.saturating_sub(buf.len()))?;
        buf.resize(len, 0);
        let result = fill(buf).and_then(|()| f(buf));
        crate::codec::release_if_huge(buf, 0);
        result
    };
    STABLE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => run(&mut buf),
        Err(_) => run(&mut Vec::new()),
    })
}

/// The capacity of this thread's copy buffer (tests: a huge read gives its room back).
#[cfg(test)]
pub(crate) fn copy_capacity() -> usize {
    STABLE.with(|cell| cell.borrow().capacity())
}
