//! One remote store file behind its node cache (`RemoteFile`): opened with one request for its
//! first bytes, which name its cache entry; ranges made present round by round (`ensure`:
//! rent or buy for the index, the sections fetched whole checked), what is missing fetched
//! in merged requests (`requests`); the whole object downloaded for `verify`; what a reader
//! relies on pinned (`pin`).

use super::client::Remote;
use super::heal::remember;
use super::identity::Identity;
use super::requests;
use crate::error::{Error, Result};
use crate::storage::cache::CacheFile;
use crate::storage::{Declare, Regions};
use bytes::Bytes;
use memmap2::Mmap;
use object_store::path::Path as ObjectPath;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// Bytes the first request of an open asks for: the header, the schema and the dictionary (at
/// most 64 KiB) of nearly every store, in one request.
pub const OPEN_PREFIX: u64 = 128 << 10;

/// One remote store file behind its node cache.
pub struct RemoteFile {
    pub(super) remote: Arc<Remote>,
    pub(super) path: ObjectPath,
    pub(super) url: String,
    pub(super) size: u64,
    pub(super) cache: CacheFile,
    /// Where the documents (the data section) lie in the file.
    pub(super) documents: Range<u64>,
    /// The object opened: every later request asks for it, every response must be from it.
    pub(super) pin: Identity,
    /// What the store's first bytes declared (`Declare`): its regions, with their checksums,
    /// and its fingerprint.
    pub(super) regions: Regions,
    /// The header as fetched at open (it passed `declare`'s checks): what the header fetched
    /// again must equal.
    pub(super) head: Box<[u8]>,
    /// What `pin` was asked to keep (byte ranges): what a reader reads without a check per read,
    /// fetched again whole when reads keep failing (`refetch_pinned`).
    pub(super) pinned: std::sync::Mutex<Vec<Range<u64>>>,
    /// The millisecond (`guard`'s clock) the cache files' lengths were last found right.
    pub(super) guarded: AtomicU64,
    /// Requests for pieces of each index region so far (`rent`).
    pub(super) rent: super::rent::Rent,
    /// Its server ignores Range (`Remote::ignores_ranges`): what is missing comes whole
    /// (`fill`), in one GET of the object.
    pub(super) whole: bool,
    /// What this process's threads are fetching (`flight`).
    pub(super) flights: super::flight::Flights,
}

/// A purchase of whole index sections under way (`RemoteFile::ensure`), ended when dropped.
struct Purchase<'c>(&'c CacheFile, u64);

impl Drop for Purchase<'_> {
    fn drop(&mut self) {
        self.0.end_purchase(self.1);
    }
}

impl RemoteFile {
    /// Opens `url`: one request for its first bytes (header, schema, dictionary), which also
    /// gives its size and, through `declare`, its regions and fingerprint, so its cache.
    pub fn open(remote: &Arc<Remote>, url: &str, declare: Declare) -> Result<RemoteFile> {
        let path = remote.path_of(url)?;
        let (first, pin) = remote.head(&path, url, OPEN_PREFIX)?;
        let size = pin.size;
        let regions = declare(&first, size)?;
        let fingerprint = regions.fingerprint.value;
        let head: Box<[u8]> = first[..regions.header.end as usize].into();
        // The entry is named by what the client knows (the URL, the version), not by what the
        // object says of itself (its fingerprint, kept in the entry as a check): see `cache`.
        // Bytes that no validator ties to one version are this process's alone.
        let cache = match pin.pins() {
            true => {
                let key = remote.cache_key(&path, &pin);
                CacheFile::open(&remote.options().cache, &key, fingerprint, size)?
            }
            false => CacheFile::private(&remote.options().cache, size)?,
        };
        let file = RemoteFile {
            remote: remote.clone(),
            path,
            url: url.to_string(),
            size,
            cache,
            documents: regions.documents.range.clone(),
            pin,
            rent: super::rent::Rent::new(regions.index.len()),
            flights: Default::default(),
            regions,
            head,
            pinned: std::sync::Mutex::new(Vec::new()),
            guarded: AtomicU64::new(0),
            whole: remote.ignores_ranges(),
        };
        // What the cache lacks of an object read whole, before the open's own bytes go in: what
        // this open fetches (the warning says whether it found the object there).
        let lacked: u64 = match file.whole {
            true => {
                let mut missing = Vec::new();
                (file.cache).missing(file.cache.units(&(0..size)), &mut missing);
                (missing.iter())
                    .map(|u| file.cache.bytes_of(u))
                    .map(|r| r.end - r.start)
                    .sum()
            }
            false => 0,
        };
        // What the first request brought, whole units only (or all of it at the end of the file).
        let whole = if first.len() as u64 == size {
            file.cache.units(&(0..size))
        } else {
            0..first.len() as u64 / crate::storage::cache::UNIT
        };
        let bytes = file.cache.bytes_of(&whole);
        // The header's segment is pinned: a reader relies on it without a check per read.
        let header = file.regions.header.clone();
        file.pin(std::slice::from_ref(&header));
        if !file.cache.present(&whole) {
            file.cache
                .write(whole, &first[..(bytes.end - bytes.start) as usize])?;
        } else {
            // The header just fetched passed its check and names this entry: a cached header
            // that differs was damaged there (on disk, or by another process's bad response).
            let header = file.cache.units(&header);
            let cached = file.cache.bytes_of(&header);
            let len = (cached.end - cached.start) as usize;
            if file.cache.read(cached)? != first[..len] {
                file.cache.write(header, &first[..len])?;
                remote.stats.heals.fetch_add(1, Ordering::Relaxed);
            }
        }
        if file.whole {
            // A server that ignores Range: the whole object, once, if the cache can hold it.
            let private = match () {
                _ if remote.options().cache.budget == 0 => Some("cache_bytes=0"),
                _ if file.cache.is_private() => Some(
                    "the server gives no ETag or Last-Modified that ties the bytes to a version",
                ),
                _ => None,
            };
            remote.claim_whole(url, size, file.cache.budget(), private)?;
            file.fill(&mut Vec::new())?;
            remote.note_fetched(lacked);
        }
        Ok(file)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn remote(&self) -> &Arc<Remote> {
        &self.remote
    }

    pub fn cache(&self) -> &CacheFile {
        &self.cache
    }

    pub(crate) fn map(&self) -> Result<Mmap> {
        self.cache.map_data()
    }

    /// `fetch` of one range: when it is present (a warm cache), a presence check and a stamp.
    /// A piece read on its own: not counted as rent (`ensure`).
    pub fn ensure_one(&self, range: Range<u64>) -> Result<()> {
        if self.check(range.clone()) {
            return Ok(());
        }
        self.fetch(&mut vec![range])
    }

    /// Makes `ranges` present: what a reader's round asks for (`Storage::ensure`). Besides
    /// `fetch`, rent or buy (`rent`): the index sections whose pieces' requests have cost their
    /// size come whole in this round. A section fetched whole (bought, or a small store's) is
    /// checked against its checksum. Empties `ranges`.
    pub fn ensure(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        ranges.retain(|r| !r.is_empty());
        let mut missing: Vec<Range<u64>> = (ranges.iter())
            .filter(|r| !self.cache.present(&self.cache.units(r)))
            .cloned()
            .collect();
        let index = &self.regions.index;
        let buy = (self.rent).buys(index, &self.remote.options, &missing);
        let whole = |i: usize| index[i].range.clone();
        // One purchase at a time per cached store (ended when this round is).
        let purchase = match buy.is_empty() {
            true => None,
            false => {
                let bytes = buy.iter().map(|&i| whole(i).end - whole(i).start).sum();
                self.begin_purchase(bytes)
                    .map(|stamp| Purchase(&self.cache, stamp))
            }
        };
        if purchase.is_some() {
            self.rent.bought(&buy);
            for &s in &buy {
                let section = whole(s);
                missing.retain(|r| r.end <= section.start || r.start >= section.end);
                missing.push(section.clone());
                ranges.push(section);
            }
        }
        self.fetch(ranges)?;
        // What a reader reads piece by piece, fetched whole this round (bought, or a small
        // store's), and the documents (a one-document store's): checked whole.
        for region in std::iter::once(&self.regions.documents).chain(index) {
            let section = region.range.clone();
            let covers = |r: &Range<u64>| r.start <= section.start && section.end <= r.end;
            if !section.is_empty()
                && missing.iter().any(covers)
                && xxh3_64(&self.cache.read(section)?) != region.checksum
            {
                return Err(Error::corrupt(format!("{} checksum mismatch", region.what)));
            }
        }
        drop(purchase);
        Ok(())
    }

    /// Starts fetching `bytes` of whole sections: a stamp, or `None` when another process of the
    /// node is at it (`cache::CacheFile::begin_purchase`) or this store has bought an eighth of
    /// its cache's budget already (`Remote::claim_purchase`).
    fn begin_purchase(&self, bytes: u64) -> Option<u64> {
        let stamp = self.cache.begin_purchase()?;
        if !self.remote.claim_purchase(bytes) {
            self.cache.end_purchase(stamp);
            return None;
        }
        Some(stamp)
    }

    /// Whether `range` is present; if so, stamps its segments and remembers it as read.
    pub fn check(&self, range: Range<u64>) -> bool {
        let units = self.cache.units(&range);
        if !self.cache.present(&units) {
            return false;
        }
        remember(self, std::slice::from_ref(&range));
        self.cache.touch(&units);
        true
    }

    /// Makes `ranges` present in the cache: what is missing is fetched in one round of
    /// concurrent requests (see the module note). Empties `ranges`.
    pub fn fetch(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        remember(self, ranges);
        if self.whole {
            return self.fill(ranges);
        }
        let mut missing = Vec::new();
        for range in ranges.iter() {
            let units = self.cache.units(range);
            self.cache.missing(units.clone(), &mut missing);
            self.cache.touch(&units);
        }
        ranges.clear();
        if missing.is_empty() {
            return Ok(());
        }
        let unit = crate::storage::cache::UNIT;
        let options = self.remote.options();
        let to_requests =
            |missing| requests::requests(missing, &self.documents, options, unit, self.size);
        // What another thread's requests are fetching (the gaps they merge over included) is
        // waited for, not asked for again (`flight`); what they did not bring (one failed) is
        // fetched after them, here.
        let units = |r: &Range<u64>| r.start / unit..r.end.div_ceil(unit);
        let mut claim = (self.flights).claim(to_requests(missing).iter().map(units).collect());
        if !claim.mine.is_empty() {
            let bytes = |u: &Range<u64>| u.start * unit..(u.end * unit).min(self.size);
            self.request(claim.mine.iter().map(bytes).collect())?;
        }
        let theirs = std::mem::take(&mut claim.theirs);
        if theirs.is_empty() {
            return Ok(());
        }
        claim.land_and_wait();
        let mut missing = Vec::new();
        for units in theirs {
            self.cache.missing(units, &mut missing);
        }
        match missing.is_empty() {
            true => Ok(()),
            false => self.request(to_requests(missing)),
        }
    }

    /// Fetches `requests` (byte ranges of whole cache units) into the cache, in one round of
    /// concurrent requests (see the module note).
    fn request(&self, requests: Vec<Range<u64>>) -> Result<()> {
        let unit = crate::storage::cache::UNIT;
        // Bytes for documents: requests inside the data section (they merge only there).
        let data: u64 = (requests.iter())
            .filter(|r| self.documents.start <= r.start && r.end <= self.documents.end)
            .map(|r| r.end - r.start)
            .sum();
        self.remote
            .stats
            .data_bytes
            .fetch_add(data, Ordering::Relaxed);
        let write = |range: Range<u64>, bytes: &[u8]| {
            let units = range.start / unit..range.end.div_ceil(unit);
            self.cache.write(units, bytes)
        };
        // (An object nothing pins has a private cache, which no other open reads.)
        if self.pin.pins_strongly() || !self.pin.pins() {
            return (self.remote).fetch(&self.path, &self.url, &self.pin, requests, |r, b| {
                write(r, &b)
            });
        }
        // Nothing but Last-Modified (and the size) pins the object, which a replacement may keep:
        // the round's bytes are kept aside until the header, fetched after them, still has the
        // fingerprint this entry was made for; another version's are never written to the cache
        // that later opens of this version read.
        let fetched = std::sync::Mutex::new(Vec::with_capacity(requests.len()));
        (self.remote).fetch(&self.path, &self.url, &self.pin, requests, |r, b| {
            fetched
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((r, b));
            Ok(())
        })?;
        self.fence()?;
        let fetched = fetched.into_inner().unwrap_or_else(|e| e.into_inner());
        fetched.into_iter().try_for_each(|(r, b)| write(r, &b))
    }

    /// `fetch` from a server that ignores Range: whatever of the object the cache lacks comes in
    /// one GET of the whole object (`Remote::fetch_whole`, its header checked against the
    /// fingerprint opened before any byte is written), so that later reads find it all. Each
    /// piece written keeps what came before it within the lease (`touch`): a cache over its
    /// budget evicts this entry's idle segments first, and would evict the start of the object
    /// while its end is still coming. Empties `ranges`.
    fn fill(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        for range in ranges.drain(..) {
            self.cache.touch(&self.cache.units(&range));
        }
        let mut missing = Vec::new();
        self.cache
            .missing(self.cache.units(&(0..self.size)), &mut missing);
        if missing.is_empty() {
            return Ok(());
        }
        let unit = crate::storage::cache::UNIT;
        let most = requests::most(self.remote.options(), unit);
        let requests = requests::split(missing, most, unit, self.size);
        self.get(requests, |range, bytes| {
            let units = range.start / unit..range.end.div_ceil(unit);
            self.cache.write(units, &bytes)?;
            self.cache.touch(&self.cache.units(&(0..range.end)));
            Ok(())
        })
    }

    /// `Remote::fetch` of `ranges` of this file, or `Remote::fetch_whole` from a server that
    /// ignores Range.
    pub(super) fn get(
        &self,
        ranges: Vec<Range<u64>>,
        sink: impl Fn(Range<u64>, Bytes) -> Result<()>,
    ) -> Result<()> {
        let (path, url, pin) = (&self.path, self.url.as_str(), &self.pin);
        match self.whole {
            true => (self.remote).fetch_whole(
                path,
                url,
                pin,
                Some(&self.regions.fingerprint),
                ranges,
                sink,
            ),
            false => self.remote.fetch(path, url, pin, ranges, sink),
        }
    }

    /// Fetches the header again: `Error::Changed` unless it still has the fingerprint opened.
    fn fence(&self) -> Result<()> {
        let header = self.regions.header.clone();
        let got = std::sync::Mutex::new(None);
        (self.remote).fetch(&self.path, &self.url, &self.pin, vec![header], |_, b| {
            *got.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
            Ok(())
        })?;
        let got = got.into_inner().unwrap_or_else(|e| e.into_inner());
        match got {
            Some(b) if self.regions.fingerprint.matches(&b) == Some(true) => Ok(()),
            _ => Err(Error::Changed(format!(
                "{} was replaced since it was opened (its header changed; the server gives no \
                 ETag that would say so): open it again",
                self.url
            ))),
        }
    }

    /// The whole object, downloaded into an unlinked temporary file (concurrent requests of at
    /// most `max_request_bytes`), mapped: what `verify` reads, whatever the cache's budget.
    pub fn download(&self) -> Result<Mmap> {
        let file = tempfile::tempfile().map_err(Error::Io)?;
        file.set_len(self.size)?;
        let step = self.remote.options().max_request;
        let ranges: Vec<Range<u64>> = (0..self.size.div_ceil(step))
            .map(|i| i * step..((i + 1) * step).min(self.size))
            .collect();
        self.get(ranges, |range, bytes| {
            crate::runtime::platform::write_all_at(&file, &bytes, range.start).map_err(Error::Io)
        })?;
        // SAFETY: a private, unlinked file that nothing else can open or change.
        Ok(unsafe { Mmap::map(&file)? })
    }

    /// Keeps what `ranges` cover in the cache for good (see `cache::PINNED`).
    pub fn pin(&self, ranges: &[Range<u64>]) {
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        for range in ranges {
            self.cache.pin(&self.cache.units(range));
            if !range.is_empty() && !pinned.contains(range) {
                pinned.push(range.clone());
            }
        }
    }

    /// Drops what `ranges` cover whatever its lease, pinned or not: bytes read there were found
    /// damaged, and the next read fetches them again (`cache::CacheFile::invalidate`).
    pub fn invalidate(&self, ranges: &[Range<u64>]) {
        for range in ranges {
            self.cache.invalidate(&self.cache.units(range));
        }
    }
}
