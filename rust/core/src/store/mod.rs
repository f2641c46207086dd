//! Read access to a store: constant-time open, binary search over the mapped key index,
//! O(1) access by position. Every offset read from the file is bounds-checked, so a corrupt
//! file yields `Error::Corrupt`, never a crash. In a format v2 store every document read is
//! proved to be the one asked for (`check`), and so is every position and every absence a
//! lookup reports (`confirm_absent`, `confirmed_rank`).

use crate::check;
use crate::codec;
use crate::error::{try_reserve, Error, Result};
use crate::format::{u32_at, u64_at, Header, Section, HEADER_SIZE};
use crate::keys::entry::{key_prefix, KeyEntry};
use crate::pagecache;
use crate::parallel;
use crate::prefetch::prefetch;
use crate::record;
use crate::schema::Schema;
use crate::storage::{remote::RemoteFile, Storage, StoreFile};
use memmap2::{Advice, Mmap};
use rayon::prelude::*;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{self, AtomicBool, AtomicU64};
use xxhash_rust::xxh3::xxh3_64;

/// Raw records read together, in one buffer (one allocation for a whole batch).
#[derive(Debug, Default)]
pub struct RecordBatch {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl RecordBatch {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }

    /// Empties the batch, keeping its buffers for the next one.
    pub fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    /// Bytes the batch's buffers hold (used or not).
    pub fn capacity_bytes(&self) -> usize {
        self.data.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }

    /// Drops the records from `len` on (a batch read again after a failed attempt).
    pub(crate) fn truncate(&mut self, len: usize) {
        self.ends.truncate(len);
        self.data.truncate(self.ends.last().copied().unwrap_or(0));
    }

    pub(crate) fn push(&mut self, raw: &[u8]) -> Result<()> {
        try_reserve(&mut self.data, raw.len())?;
        self.data.extend_from_slice(raw);
        self.ends.push(self.data.len());
        Ok(())
    }
}

/// A copy of a raw record, or `OutOfMemory`.
fn owned(raw: &[u8]) -> Result<Cow<'static, [u8]>> {
    let mut copy = Vec::new();
    try_reserve(&mut copy, raw.len())?;
    copy.extend_from_slice(raw);
    Ok(Cow::Owned(copy))
}

/// A document to read: its position and, when a key index entry gave it (format v3), where its
/// blob lies, so that reading it skips the doc offsets (one dependent read less: one random read
/// locally, one round trip remotely).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub pos: u64,
    /// `(offset in the data section, length)` as a key index entry holds it. A store uses it
    /// only when its own entries locate its blobs (`Header::locates_blobs`); the position's
    /// doc offsets otherwise.
    pub blob: Option<(u64, u64)>,
}

impl Found {
    /// The document at `pos`, located by its doc offsets.
    pub fn at(pos: u64) -> Found {
        Found { pos, blob: None }
    }
}

/// The most blobs a lookup of a long key fetches before it knows which is its own (see
/// `fetch_blocks`).
const SPECULATE: usize = 4;

/// The most keys, and bytes of their blobs, that `keys_in` reads with one `pread`.
const RUN_KEYS: u64 = 4096;
const RUN_BYTES: usize = 1 << 20;

/// Lookups of a batch that advance together (see `positions`).
const GROUP: usize = 16;
/// Batches at least this long ask the page cache for all their pages at once when a sample of
/// them is not cached (see `pagecache`).
const PREFETCH_MIN: usize = 8;

/// The first index in `range` whose value is `>=` target (or the range's end), where value `j`
/// is the u64 at `bytes[j * stride]`.
fn lower_bound(bytes: &[u8], stride: usize, range: Range<u64>, target: u64) -> u64 {
    let (mut lo, mut hi) = (range.start, range.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if u64_at(bytes, mid as usize * stride) < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Lower bounds in lockstep: for each target, the first index in `lows[i] .. lows[i] + sizes[i]`
/// whose value is `>=` it (or the end of that range). Value `j` is the u64 at `bytes[j * stride]`.
/// Branch-free, so the searches of a group take the same steps and their cache misses overlap.
fn lower_bounds(
    targets: &[Option<u64>; GROUP],
    lows: &mut [u64; GROUP],
    sizes: &mut [u64; GROUP],
    bytes: &[u8],
    stride: usize,
) {
    let value = |j: u64| u64_at(bytes, j as usize * stride);
    loop {
        let mut active = false;
        for ((target, low), size) in targets.iter().zip(lows.iter_mut()).zip(sizes.iter_mut()) {
            let Some(target) = *target else { continue };
            if *size <= 1 {
                continue;
            }
            active = true;
            let half = *size / 2;
            if value(*low + half) < target {
                *low += half;
            }
            *size -= half;
            prefetch(bytes, (*low + *size / 2) as usize * stride);
        }
        if !active {
            break;
        }
    }
    for (target, low) in targets.iter().zip(lows.iter_mut()) {
        if let Some(target) = *target {
            *low += u64::from(value(*low) < target);
        }
    }
}

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

/// An open store over any bytes: a memory map in production, a `Vec<u8>` in tests and fuzzing.
pub struct Store<B> {
    buf: B,
    header: Header,
    schema: Schema,
    ranges: [Range<usize>; Section::COUNT],
    /// The file documents are read from with `pread`, or `None` to read them through `buf`.
    data_file: Option<File>,
    /// Whether `buf` maps a file, so that page cache hints apply to it.
    mapped: bool,
    /// A remote store's dictionary, copied at open (see `from_bytes`).
    dictionary: Option<Box<[u8]>>,
    /// The header checksum, taken at open: what `verify` compares a download with, which bytes
    /// damaged in a remote store's cache since must not change.
    fingerprint: u64,
    /// Where the prefix shared by every key lies in the keys section.
    common_prefix: Range<usize>,
    /// Whether a remote store has the common prefix in its cache (pinned there once fetched).
    prefix_fetched: AtomicBool,
    /// Bytes of a key index entry, and entries per block (`Header::key_entry`, `key_block`).
    entry_size: usize,
    block: u64,
    /// Whether batches find their pages cached (see `prefetch_index`).
    cold: pagecache::ColdCache,
    /// A remote store's requests for pieces of each section so far (see `fetch`).
    rent: [AtomicU64; Section::COUNT],
}

thread_local! {
    /// A blob read with `pread`, before it is decoded.
    static BLOB: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Store<Mmap> {
    /// Maps the file read-only. Costs the same for any store size: nothing is read but the header,
    /// the schema and the dictionary.
    pub fn open(path: impl AsRef<Path>) -> Result<Store<Mmap>> {
        Store::open_with(path, DataAccess::Mmap)
    }

    /// Like `open`, reading documents as `access` says (the index is always mapped).
    pub fn open_with(path: impl AsRef<Path>, access: DataAccess) -> Result<Store<Mmap>> {
        let (file, mmap) = map_store_file(path.as_ref())?;
        let mut store = Store::from_bytes(mmap)?;
        store.mapped = true;
        if access == DataAccess::Pread {
            store.data_file = Some(file);
        }
        Ok(store)
    }
}

impl Store<StoreFile> {
    /// `Store::open_with` over a `StoreFile` (what a collection holds).
    pub fn open_local(path: impl AsRef<Path>, access: DataAccess) -> Result<Store<StoreFile>> {
        let (file, mmap) = map_store_file(path.as_ref())?;
        Store::local(file, mmap, access)
    }

    /// `open_local` of a file already opened (a collection opens its files relative to its
    /// directory, which may be replaced meanwhile); `path` names it in errors.
    pub fn open_local_file(
        file: File,
        path: &Path,
        access: DataAccess,
    ) -> Result<Store<StoreFile>> {
        let mmap = map_opened(&file, path)?;
        Store::local(file, mmap, access)
    }

    fn local(file: File, mmap: Mmap, access: DataAccess) -> Result<Store<StoreFile>> {
        let mut store = Store::from_bytes(StoreFile::local(mmap))?;
        store.mapped = true;
        if access == DataAccess::Pread {
            store.data_file = Some(file);
        }
        Ok(store)
    }

    /// A remote store: `file` has fetched the first bytes (header, schema, dictionary); opening
    /// fetches the key fences, which every lookup reads (and the rest of the schema and
    /// dictionary, where they go past the first bytes), in one round.
    pub fn open_remote(file: RemoteFile) -> Result<Store<StoreFile>> {
        Store::from_bytes(StoreFile::remote(file)?)
    }

    /// The remote file behind this store, if it is one.
    pub fn remote_file(&self) -> Option<&RemoteFile> {
        self.buf.remote_file()
    }
}

/// Opens and maps a store file read-only (see `Store::open`).
fn map_store_file(path: &Path) -> Result<(File, Mmap)> {
    // Opening a FIFO for reading blocks until a writer comes: look before opening.
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, socket or device)"
        };
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is {what}", path.display()),
        )));
    }
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mmap = map_opened(&file, path)?;
    Ok((file, mmap))
}

/// Maps an opened store file read-only, once it is known to be a regular file of a header's length.
fn map_opened(file: &File, path: &Path) -> Result<Mmap> {
    if !file.metadata()?.is_file() {
        // Replaced by something else between the two looks.
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        )));
    }
    if file.metadata()?.len() < HEADER_SIZE as u64 {
        // mmap of an empty file fails; report what it is instead.
        let mut start = [0u8; 12];
        let n = std::io::Read::read(&mut &*file, &mut start)?;
        Header::decode(&start[..n], n as u64)?;
        return Err(Error::corrupt(
            "file is shorter than its header (truncated)",
        ));
    }
    // SAFETY: stores are immutable once renamed into place; a store changed underneath a
    // reader is outside the contract (as with any mmapped file).
    let mmap = unsafe { Mmap::map(file)? };
    // Lookups touch one or two pages each: read-ahead would only evict useful pages.
    let _ = mmap.advise(Advice::Random);
    // Open reads the header, the schema and the whole dictionary: one read, not a fault per
    // page, when they are not cached.
    if let Ok(header) = Header::decode(&mmap, mmap.len() as u64) {
        let dictionary = header.section(Section::Dictionary);
        pagecache::will_need(&mmap, 0..(dictionary.offset + dictionary.len) as usize);
    }
    Ok(mmap)
}

impl<B: Storage> Store<B> {
    pub fn from_bytes(buf: B) -> Result<Store<B>> {
        let bytes = buf.as_ref();
        let header = Header::decode(bytes, bytes.len() as u64)?;
        if buf.is_remote() {
            // Pinned first, so that no eviction can come between the checks below and a read.
            let mut ranges = open_ranges(&header);
            buf.pin(&ranges);
            buf.ensure(&mut ranges)?;
            if let Err(e) = check_open_ranges(bytes, &header) {
                // Damaged in the cache (on its disk, or a bad response cached by any process of
                // the node): fetched again from the server, and refused only if that fails too.
                if !buf.refetch_pinned()? {
                    return Err(e);
                }
                check_open_ranges(bytes, &header)?;
                buf.healed();
            }
        }
        let ranges = Section::ALL.map(|s| {
            let entry = header.section(s);
            entry.offset as usize..(entry.offset + entry.len) as usize
        });
        let section = |s: Section| &bytes[ranges[s as usize].clone()];
        // A remote store's dictionary is copied, then checked: the cache file may change under
        // the reader (damaged on disk, rewritten by another process), and a changed dictionary
        // would decode documents to wrong text that their checks (of stored bytes) pass. A local
        // store's file is immutable once sealed, and its dictionary stays where it is mapped
        // (a copy would cost every process 64 KiB of memory per shard).
        let dictionary = buf
            .is_remote()
            .then(|| Box::<[u8]>::from(section(Section::Dictionary)));
        let checked = [
            (Section::Schema, section(Section::Schema)),
            (
                Section::Dictionary,
                dictionary
                    .as_deref()
                    .unwrap_or(section(Section::Dictionary)),
            ),
        ];
        for (s, bytes) in checked {
            if xxh3_64(bytes) != header.section(s).checksum {
                return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
            }
        }
        let schema = Schema::decode(section(Section::Schema))?;
        // Only a collection's global index (no fields) locates blobs elsewhere: on a store with
        // fields the flag would leave its locations unchecked by `verify`.
        if header.locates_shard_blobs() && !schema.fields.is_empty() {
            return Err(Error::corrupt(
                "header flag 0x01 (a collection's global index) on a store with fields",
            ));
        }
        let count = header.count;
        if count >= u64::from(u32::MAX) {
            return Err(Error::corrupt("document count out of range"));
        }
        let expected = [
            (Section::DocOffsets, (count + 1) * 8),
            (Section::KeyOffsets, (count + 1) * 8),
            (Section::KeyIndex, count * header.key_entry() as u64),
            (Section::KeyFences, count.div_ceil(header.key_block()) * 8),
            (Section::KeyRanks, count * 4),
        ];
        for (s, len) in expected {
            if header.section(s).len != len {
                return Err(Error::corrupt(format!(
                    "{} section has the wrong size",
                    s.name()
                )));
            }
        }
        let fingerprint = crate::format::header_checksum(buf.as_ref());
        let mut store = Store {
            buf,
            fingerprint,
            entry_size: header.key_entry(),
            block: header.key_block(),
            header,
            schema,
            ranges,
            data_file: None,
            mapped: false,
            dictionary,
            common_prefix: 0..0,
            prefix_fetched: AtomicBool::new(false),
            cold: Default::default(),
            rent: Default::default(),
        };
        let common = store.header.common_prefix as usize;
        if store.buf.is_remote() {
            // Opening a remote store costs two requests (its first bytes, then the fences): the
            // checks below would cost three more. A truncated object is refused by the header's
            // section table already; damage elsewhere fails the document checks and `verify`.
            if common > store.section(Section::Keys).len() {
                return Err(Error::corrupt("common key prefix longer than the keys"));
            }
            // Pinned now, fetched with the first lookup (`fetch_search`).
            store.common_prefix = 0..common;
            store.buf.pin(&[store.in_file(Section::Keys, 0..common)]);
            return Ok(store);
        }
        // The last offsets close their sections: a cheap check that catches most truncations.
        if store.offset(Section::DocOffsets, count) != store.section(Section::Data).len() as u64
            || store.offset(Section::KeyOffsets, count) != store.section(Section::Keys).len() as u64
        {
            return Err(Error::corrupt("index does not match its data (truncated?)"));
        }
        if count > 0 {
            let first = store.range_at(Section::KeyOffsets, Section::Keys, 0)?;
            if first.len() < common {
                return Err(Error::corrupt(
                    "common key prefix longer than the first key",
                ));
            }
            store.common_prefix = first.start..first.start + common;
        }
        Ok(store)
    }

    fn section(&self, s: Section) -> &[u8] {
        &self.buf.as_ref()[self.ranges[s as usize].clone()]
    }

    /// Makes bytes `range` of section `s` readable before they are read: nothing to do for a
    /// local store; a remote one fetches what its cache lacks (see `storage`).
    #[inline(always)]
    fn need(&self, s: Section, range: Range<usize>) -> Result<()> {
        if self.buf.is_remote() {
            self.need_remote(s, range)?;
        }
        Ok(())
    }

    #[cold]
    fn need_remote(&self, s: Section, range: Range<usize>) -> Result<()> {
        let range = self.in_file(s, range);
        if !range.is_empty() {
            self.buf.ensure_one(range)?;
        }
        Ok(())
    }

    /// Starts loading byte `at` of section `s` into the CPU cache, and for a remote store the
    /// presence bits that `need` will check there.
    #[inline(always)]
    fn prefetch(&self, s: Section, at: usize) {
        prefetch(self.section(s), at);
        if self.buf.is_remote() {
            self.buf
                .prefetch_check(&self.in_file(s, at..at.saturating_add(1)));
        }
    }

    /// Bytes `range` of section `s` as a range of the file, clipped to the section (a range
    /// computed from damaged offsets reaches nothing outside it).
    fn in_file(&self, s: Section, range: Range<usize>) -> Range<u64> {
        let section = &self.ranges[s as usize];
        let start = section.start.saturating_add(range.start).min(section.end);
        let end = section.start.saturating_add(range.end).min(section.end);
        start as u64..end.max(start) as u64
    }

    /// Whether `found` is read where its key index entry locates it (else by its doc offsets).
    fn located(&self, found: &Found) -> bool {
        found.blob.is_some() && self.header.locates_blobs()
    }

    /// Whether entries `range` (of `size` bytes each) of section `s` are readable (always, for a
    /// local store).
    fn present(&self, s: Section, range: Range<u64>, size: usize) -> bool {
        let base = self.ranges[s as usize].start as u64;
        let size = size as u64;
        self.buf
            .is_present(base + range.start * size..base + range.end * size)
    }

    /// Makes every range of `wants` readable, fetching what is missing in one round of
    /// concurrent requests (ranges are clipped to their sections).
    #[cold]
    fn fetch(&self, wants: impl IntoIterator<Item = (Section, Range<usize>)>) -> Result<()> {
        // Present ranges are only stamped (no allocation: a warm batch passes through here). In
        // groups, their presence bits loaded first, so that the cache misses of a batch overlap
        // rather than queue.
        let mut wants = (wants.into_iter())
            .map(|(s, r)| (s, self.in_file(s, r)))
            .filter(|(_, r)| !r.is_empty());
        let mut group: [(Section, Range<u64>); GROUP] =
            std::array::from_fn(|_| (Section::Data, 0..0));
        let mut missing: Vec<(Section, Range<u64>)> = Vec::new();
        loop {
            let len = (group.iter_mut())
                .map_while(|slot| wants.next().map(|want| *slot = want))
                .count();
            for (_, range) in &group[..len] {
                self.buf.prefetch_check(range);
            }
            for (s, range) in &group[..len] {
                if !self.buf.check(range.clone()) {
                    missing.push((*s, range.clone()));
                }
            }
            if len < GROUP {
                break;
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let _purchase = self.rent_or_buy(&mut missing);
        let mut missing: Vec<Range<u64>> = missing.into_iter().map(|(_, r)| r).collect();
        let asked = missing.clone();
        self.buf.ensure(&mut missing)?;
        // A section fetched whole is checked against its checksum (a small store's index).
        for s in Section::ALL {
            let r = &self.ranges[s as usize];
            let whole = |a: &Range<u64>| a.start <= r.start as u64 && r.end as u64 <= a.end;
            if r.start < r.end
                && asked.iter().any(whole)
                && xxh3_64(self.section(s)) != self.header.section(s).checksum
            {
                return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
            }
        }
        Ok(())
    }

    /// Rent or buy, for the index sections of a remote store: each request for pieces of a
    /// section is taken to cost `request_cost` bytes; once a section's requests have cost its
    /// size, the section comes whole (in this round, in requests of `max_request_bytes`), and
    /// every later read of it is free. So a run of random reads (a DataLoader's epoch) pays at
    /// most twice the cheaper of the two, and a few lookups never download a section. Sections
    /// of at most `MAX_PURCHASE` bytes, and what one `open` buys in all at most an eighth of the
    /// cache's budget (`Storage::begin_purchase`): more would be evicted before it paid off.
    ///
    /// One purchase at a time per cached store, across the node's processes: DataLoader workers
    /// reach the threshold together, and one of them buys while the others rent on.
    fn rent_or_buy(&self, missing: &mut Vec<(Section, Range<u64>)>) -> Option<Purchase<'_, B>> {
        let options = self.buf.remote_options()?;
        if options.request_cost == 0 {
            return None;
        }
        // The requests this round sends for each section: its missing ranges, merged as the
        // remote file merges them (`merge_gap`), not each piece (consecutive positions are one
        // request).
        missing.sort_unstable_by_key(|(s, r)| (*s as usize, r.start));
        let mut requests = [0u64; Section::COUNT];
        let mut end = [0u64; Section::COUNT];
        for (s, r) in missing.iter() {
            let i = *s as usize;
            if requests[i] == 0 || r.start > end[i] + options.merge_gap {
                requests[i] += 1;
            }
            end[i] = end[i].max(r.end);
        }
        const INDEX: [Section; 5] = [
            Section::DocOffsets,
            Section::Keys,
            Section::KeyOffsets,
            Section::KeyIndex,
            Section::KeyRanks,
        ];
        let mut buy = Vec::new();
        for s in INDEX.into_iter().filter(|&s| requests[s as usize] > 0) {
            let section = &self.ranges[s as usize];
            let len = (section.end - section.start) as u64;
            let n = requests[s as usize];
            let rent = self.rent[s as usize].fetch_add(n, atomic::Ordering::Relaxed) + n;
            if rent.saturating_mul(options.request_cost) >= len && len <= MAX_PURCHASE {
                buy.push(s);
            }
        }
        let bytes = buy
            .iter()
            .map(|&s| self.ranges[s as usize].len() as u64)
            .sum();
        let stamp = match buy.is_empty() {
            true => return None,
            false => self.buf.begin_purchase(bytes)?,
        };
        for s in buy {
            // A purchase is earned again from nothing (a section evicted since is rented anew).
            self.rent[s as usize].store(0, atomic::Ordering::Relaxed);
            let section = &self.ranges[s as usize];
            let whole = section.start as u64..section.end as u64;
            missing.retain(|(_, r)| r.end <= whole.start || r.start >= whole.end);
            missing.push((s, whole));
        }
        Some(Purchase(&self.buf, stamp))
    }

    fn offset(&self, s: Section, i: u64) -> u64 {
        u64_at(self.section(s), i as usize * 8)
    }

    fn index_u32(&self, s: Section, i: u64) -> u64 {
        u64::from(u32_at(self.section(s), i as usize * 4))
    }

    pub fn len(&self) -> u64 {
        self.header.count
    }

    pub fn is_empty(&self) -> bool {
        self.header.count == 0
    }

    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Whether every document read is checked against its key (format v2 and later).
    pub fn checked(&self) -> bool {
        self.header.checked()
    }

    /// Identifies the store's contents: its header checksum (see `format::header_checksum`).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn file_len(&self) -> u64 {
        self.buf.as_ref().len() as u64
    }

    pub fn dictionary(&self) -> &[u8] {
        match &self.dictionary {
            Some(copy) => copy,
            None => self.section(Section::Dictionary),
        }
    }

    fn check_position(&self, pos: u64) -> Result<()> {
        if pos < self.len() {
            Ok(())
        } else {
            Err(Error::OutOfRange {
                index: pos,
                len: self.len(),
            })
        }
    }

    /// `start..end` of entry `i` in a section indexed by an offsets section.
    /// Where entry `i` lies in `target`, from `offsets[i]..offsets[i + 1]`, bounds-checked.
    fn range_at(&self, offsets: Section, target: Section, i: u64) -> Result<Range<usize>> {
        let at = i as usize * 8;
        self.need(offsets, at..at + 16)?;
        let (start, end) = (self.offset(offsets, i), self.offset(offsets, i + 1));
        if start > end || end > self.section(target).len() as u64 {
            return Err(Error::corrupt(format!("{} out of bounds", offsets.name())));
        }
        Ok(start as usize..end as usize)
    }

    fn slice_at(&self, offsets: Section, target: Section, i: u64) -> Result<&[u8]> {
        let range = self.range_at(offsets, target, i)?;
        self.need(target, range.clone())?;
        Ok(&self.section(target)[range])
    }

    pub(crate) fn key_of_rank(&self, rank: u64) -> Result<&[u8]> {
        self.slice_at(Section::KeyOffsets, Section::Keys, rank)
    }

    /// The position of `key`. In a checked store the answer is confirmed (see `confirmed`):
    /// a damaged index raises rather than give another document's position.
    pub fn position(&self, key: &[u8]) -> Result<Option<u64>> {
        self.rank_of(key)?
            .map(|rank| self.confirmed(key, rank))
            .transpose()
    }

    /// Where the key index finds `key`, not confirmed: for a lookup that then reads the
    /// document, whose check proves it is `key`'s (`with_record_of`).
    pub fn locate(&self, key: &[u8]) -> Result<Option<Found>> {
        self.rank_of(key)?
            .map(|rank| self.found_at(rank))
            .transpose()
    }

    /// The rank of `key`: a binary search over the compact prefix array finds the first
    /// candidate, whole keys settle ties. A miss is confirmed in a checked store.
    fn rank_of(&self, key: &[u8]) -> Result<Option<u64>> {
        self.fetch_search(&[key])?;
        let found = match self.target(key) {
            Some(target) => {
                let start = self.block_of(target) * self.block;
                let end = (start + self.block).min(self.len());
                let index = self.section(Section::KeyIndex);
                self.settle(
                    key,
                    target,
                    lower_bound(index, self.entry_size, start..end, target),
                )?
            }
            None => None,
        };
        if found.is_none() {
            self.confirm_absent(key)?;
        }
        Ok(found)
    }

    /// The position of the document whose key has `rank`, range-checked.
    pub(crate) fn position_of_rank(&self, rank: u64) -> Result<u64> {
        Ok(self.found_at(rank)?.pos)
    }

    /// What the key index entry of `rank` says: the position of its document (range-checked)
    /// and, in format v3, where its blob lies (checked when it is read, `blob_range`).
    pub(crate) fn found_at(&self, rank: u64) -> Result<Found> {
        let entry = self.entry(rank)?;
        let pos = u64::from(entry.position);
        self.check_position(pos)
            .map_err(|_| Error::corrupt("key position out of range"))?;
        let blob = (self.header.version >= 3).then_some((entry.blob_offset, entry.blob_len));
        Ok(Found { pos, blob })
    }

    /// The position of `key`, found at `rank` by the key index, once the document there passes
    /// its check with `key` (in a checked store): neither a damaged index entry nor a damaged key
    /// that reads as `key` can then hand out another document's position. Comparing with the keys
    /// section instead would trust the very bytes a search of long keys compared.
    fn confirmed(&self, key: &[u8], rank: u64) -> Result<u64> {
        let found = self.found_at(rank)?;
        self.confirm(found, key)?;
        Ok(found.pos)
    }

    /// Proves, in a checked store, that the document `found` is `key`'s: its blob passes its
    /// check with `key` (and from format v3 its position; a collection confirms what its global
    /// index said this way).
    pub fn confirm(&self, found: Found, key: &[u8]) -> Result<()> {
        if self.checked() {
            self.with_body(found, Some(key), |_| Ok(()))?;
        }
        Ok(())
    }

    /// In a checked store, proves that `key`, which the key index did not find, is absent: a
    /// binary search over the whole keys (a structure the index search does not depend on) must
    /// miss it too, and the two keys around where it would be must pass their documents' checks.
    /// Then no damage to the index can have hidden it. Costs a few microseconds, on misses only.
    fn confirm_absent(&self, key: &[u8]) -> Result<()> {
        if !self.checked() || self.is_empty() {
            return Ok(());
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key_of_rank(mid)?.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => {
                    return Err(Error::corrupt(format!(
                        "the key index misses {:?}, which the keys hold: the store is damaged \
                         (run verify())",
                        String::from_utf8_lossy(key)
                    )))
                }
            }
        }
        for rank in [lo.checked_sub(1), Some(lo).filter(|&r| r < self.len())]
            .into_iter()
            .flatten()
        {
            let neighbour = self.key_of_rank(rank)?;
            self.confirm(self.found_at(rank)?, neighbour)?;
        }
        Ok(())
    }

    /// What the search looks for: the 8 bytes of `key` after the common prefix, as in the key
    /// index. `None` when `key` lacks the common prefix (then it is absent). A remote store must
    /// have the prefix fetched (`fetch_search`).
    fn target(&self, key: &[u8]) -> Option<u64> {
        let common = &self.section(Section::Keys)[self.common_prefix.clone()];
        self.guess(key).filter(|_| key.starts_with(common))
    }

    /// `target` as far as the prefix's length tells (its bytes unread): where a remote lookup
    /// fetches its block in the round that fetches the prefix too.
    fn guess(&self, key: &[u8]) -> Option<u64> {
        let common = self.common_prefix.len();
        (!self.is_empty() && key.len() >= common).then(|| key_prefix(&key[common..]))
    }

    /// Whether the common prefix is readable: always, but for a remote store before its first
    /// lookup.
    fn prefix_present(&self) -> bool {
        // Acquire: the prefix's bytes, which the thread that found them present saw, are seen.
        if self.prefix_fetched.load(atomic::Ordering::Acquire)
            || !self.buf.is_remote()
            || self.common_prefix.is_empty()
        {
            return true;
        }
        let present =
            (self.buf).is_present(self.in_file(Section::Keys, self.common_prefix.clone()));
        if present {
            self.prefix_fetched.store(true, atomic::Ordering::Release);
        }
        present
    }

    /// For a remote store, fetches what searching for `keys` reads that the cache lacks: nothing
    /// when their key index blocks and the common prefix are cached; else, in as few rounds as
    /// `fetch_blocks` can, the missing blocks (guessed from the keys past the prefix's length),
    /// with the prefix (the first lookup after open), and what long keys read.
    fn fetch_search(&self, keys: &[&[u8]]) -> Result<()> {
        if !self.buf.is_remote() || self.is_empty() {
            return Ok(());
        }
        let n = self.len();
        // Until the prefix is fetched, keys are searched for as if they had it (those without
        // it fetch a block for nothing, once); then keys without it fetch nothing.
        let prefix = self.prefix_present();
        let target = |key: &[u8]| match prefix {
            true => self.target(key),
            false => self.guess(key),
        };
        let missing = |target: u64| {
            let start = self.block_of(target) * self.block;
            let block = start..(start + self.block).min(n);
            !self.present(Section::KeyIndex, block, self.entry_size)
        };
        if prefix && !keys.iter().any(|k| target(k).is_some_and(missing)) {
            return Ok(());
        }
        // In a batch that misses some blocks, the long keys too, whose keys and blobs the
        // search of the others' blocks prefetches (their own blocks are cached, their runs'
        // keys may not be).
        let short = self.common_prefix.len() + 8;
        self.fetch_blocks(keys.iter().filter_map(|k| {
            let target = target(k)?;
            (missing(target) || k.len() > short).then_some((target, k.len()))
        }))?;
        if !self.prefix_present() && keys.iter().any(|k| k.len() >= self.common_prefix.len()) {
            // No key had a block to fetch the prefix with.
            self.need(Section::Keys, self.common_prefix.clone())?;
        }
        Ok(())
    }

    /// The block of the key index where the first entry `>= target` lies (or whose end it is):
    /// the block before the first fence `>= target`.
    fn block_of(&self, target: u64) -> u64 {
        let fences = self.section(Section::KeyFences);
        lower_bound(fences, 8, 0..self.len().div_ceil(self.block), target).saturating_sub(1)
    }

    /// Positions of many keys, confirmed as `position`'s. The searches advance in lockstep, each
    /// prefetching what it reads next, so that the cache misses of a group overlap instead of
    /// queuing one after another.
    pub fn positions(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        let ranks = self.ranks(keys)?;
        (ranks.into_iter().zip(keys))
            .map(|(rank, key)| rank.map(|rank| self.confirmed(key, rank)).transpose())
            .collect()
    }

    /// `locate` of many keys.
    pub fn locate_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Found>>> {
        let ranks = self.ranks(keys)?;
        (ranks.into_iter())
            .map(|rank| rank.map(|rank| self.found_at(rank)).transpose())
            .collect()
    }

    /// Ranks of many keys (see `positions`), misses confirmed.
    fn ranks(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        if self.mapped && keys.len() >= PREFETCH_MIN {
            self.prefetch_index(keys);
        }
        self.fetch_search(keys)?;
        let mut out = vec![None; keys.len()];
        for (keys, out) in keys.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            self.ranks_into(keys, out)?;
        }
        for (key, rank) in keys.iter().zip(&out) {
            if rank.is_none() {
                self.confirm_absent(key)?;
            }
        }
        Ok(out)
    }

    /// For a remote store, fetches what searching for keys (their targets and lengths) reads, in
    /// as few rounds of concurrent requests as the search allows: the key index block where each
    /// is searched and that block's key offsets (the fences say which: one round); then, for
    /// keys longer than the common prefix plus 8 bytes (told apart by whole keys), the blocks
    /// and keys that `settle` reads: the run of entries sharing the key's prefix, as far as its
    /// gallop probes (more rounds only while a run goes past the blocks fetched so far).
    #[cold]
    fn fetch_blocks(&self, wanted: impl IntoIterator<Item = (u64, usize)>) -> Result<()> {
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        let short = self.header.common_prefix as usize + 8;
        let wanted: Vec<(u64, usize)> = wanted.into_iter().collect();
        let span = |b: u64| (b * self.block) as usize..((b + 1) * self.block).min(n) as usize;
        let mut fetched = std::collections::BTreeSet::new();
        // A block's key offsets come with it only for long keys (short ones never read keys).
        let mut with_offsets = std::collections::BTreeSet::new();
        // The common prefix, which the search compares, comes with the first blocks after open.
        let mut prefix = Some((Section::Keys, self.common_prefix.clone()));
        let mut fetch_blocks = |fetched: &mut std::collections::BTreeSet<u64>,
                                blocks: &mut dyn Iterator<Item = (u64, bool)>|
         -> Result<()> {
            let mut wants: Vec<_> = prefix.take().into_iter().collect();
            for (b, long) in blocks {
                let ranks = span(b);
                if fetched.insert(b) {
                    // And the next block's first two entries: a key past the block's last entry
                    // is settled there, and a run that ends at the block's end is seen to end
                    // (one request still, the ranges touch).
                    wants.push((
                        Section::KeyIndex,
                        ranks.start * self.entry_size..(ranks.end + 2) * self.entry_size,
                    ));
                }
                if long && with_offsets.insert(b) {
                    wants.push((Section::KeyOffsets, ranks.start * 8..ranks.end * 8 + 8));
                }
            }
            self.fetch(wants)
        };
        let first: Vec<(u64, bool)> = (wanted.iter())
            .map(|&(t, len)| (self.block_of(t), len > short))
            .collect();
        fetch_blocks(&mut fetched, &mut first.into_iter())?;
        // Long keys: where `settle` starts its gallop (past the short keys of the run), and how
        // far the gallop probes; blocks it reads that are missing are fetched, and it tries again.
        let index = self.section(Section::KeyIndex);
        let mut long: Vec<(u64, usize, Option<Range<u64>>)> = (wanted.iter())
            .filter(|&&(_, len)| len > short)
            .map(|&(t, len)| (t, len, None))
            .collect();
        for _ in 0..64 {
            let known = |rank: u64| {
                let b = rank / self.block;
                fetched.contains(&b)
                    || (rank % self.block < 2 && b > 0 && fetched.contains(&(b - 1)))
            };
            let mut missing = std::collections::BTreeSet::new();
            for (target, _, run) in long.iter_mut().filter(|(_, _, run)| run.is_none()) {
                let block = self.block_of(*target);
                let ranks = span(block);
                let mut rank = lower_bound(
                    index,
                    self.entry_size,
                    ranks.start as u64..ranks.end as u64,
                    *target,
                );
                let entry = |r: u64| KeyEntry::at(index, r, self.entry_size);
                let mut stuck = None;
                while rank < n {
                    if !known(rank) {
                        stuck = Some(rank);
                        break;
                    }
                    let e = entry(rank);
                    if e.prefix != *target || e.key_len as usize > short {
                        break;
                    }
                    rank += 1;
                }
                let (lo, mut hi, mut step) = (rank, rank, 1);
                while stuck.is_none() && hi < n {
                    if !known(hi) {
                        stuck = Some(hi);
                        break;
                    }
                    if entry(hi).prefix != *target {
                        break;
                    }
                    hi = (lo + step).min(n);
                    step *= 2;
                }
                match stuck {
                    Some(rank) => {
                        missing.insert(rank / self.block);
                    }
                    None => *run = Some(lo..hi),
                }
            }
            if missing.is_empty() {
                break;
            }
            fetch_blocks(&mut fetched, &mut missing.into_iter().map(|b| (b, true)))?;
        }
        // The binary search over whole keys reads the key offsets and keys of the whole run.
        let runs: Vec<Range<u64>> = (long.iter())
            .filter_map(|(_, _, run)| run.clone())
            .collect();
        fetch_blocks(
            &mut fetched,
            &mut runs
                .iter()
                .filter(|r| r.start < r.end)
                // The run's last rank is `end - 1`; its block's key offsets end with `end`'s.
                .flat_map(|r| r.start / self.block..=(r.end.min(n) - 1) / self.block)
                .map(|b| (b, true)),
        )?;
        let keys = runs.iter().filter_map(|r| {
            let start = self.offset(Section::KeyOffsets, r.start) as usize;
            let end = self.offset(Section::KeyOffsets, r.end) as usize;
            (start <= end).then_some((Section::Keys, start..end))
        });
        // Format 3: the blobs of the run's entries as long as the key asked for (at most
        // `SPECULATE` of them, usually one) come in the same round as the keys, so that the
        // lookup reads its document without a third round trip; a few blobs for nothing when
        // the key is not among them. Located by the entries, checked when read.
        let mut blobs = Vec::new();
        if self.header.locates_blobs() {
            for (_, len, run) in &long {
                let Some(run) = run else { continue };
                let candidates: Vec<KeyEntry> = (run.start..run.end.min(n))
                    .map(|r| KeyEntry::at(index, r, self.entry_size))
                    .filter(|e| e.key_len as usize == *len)
                    .take(SPECULATE + 1)
                    .collect();
                if candidates.len() <= SPECULATE {
                    // Clipped to the data section: a damaged location fetches nothing outside it.
                    let data = self.section(Section::Data).len() as u64;
                    blobs.extend(candidates.iter().map(|e| {
                        let start = e.blob_offset.min(data) as usize;
                        let end = e.blob_offset.saturating_add(e.blob_len).min(data) as usize;
                        (Section::Data, start..end)
                    }));
                }
            }
        }
        self.fetch(keys.chain(blobs))
    }

    /// For a remote store, fetches what reading `found` reads (with `keys`, the keys of their
    /// positions too, which a read by position checks its document with).
    pub fn prefetch_reads(&self, found: &[Found], keys: bool) -> Result<()> {
        if self.buf.is_remote() {
            self.fetch_positions(found.iter().copied(), true, keys)?;
        }
        Ok(())
    }

    /// For a remote store, fetches what looking up `keys` and reading their records reads: the
    /// key index blocks, then the blobs (format v3; before it, doc offsets come between): two
    /// rounds of concurrent requests for the whole batch.
    pub fn prefetch_keyed(&self, keys: &[&[u8]]) -> Result<()> {
        if self.buf.is_remote() {
            let found = self.locate_many(keys)?;
            self.fetch_positions(found.into_iter().flatten(), true, false)?;
        }
        Ok(())
    }

    /// For a remote store, fetches the keys of `positions` (key ranks, key offsets, keys: three
    /// rounds of concurrent requests), and in a checked store the blobs that prove them, so
    /// that `key_at` then reads them from the cache. Nothing to do for a local store.
    pub fn prefetch_keys(&self, positions: Range<u64>) -> Result<()> {
        if self.buf.is_remote() {
            self.fetch_positions(positions.map(Found::at), self.checked(), true)?;
        }
        Ok(())
    }

    /// What reading the records `found` reads, fetched in rounds of concurrent requests (a
    /// remote store): the doc offsets of those the key index did not locate (and, with `keys`,
    /// key ranks), then their blobs (and key offsets), then their keys.
    #[cold]
    fn fetch_positions(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        blobs: bool,
        keys: bool,
    ) -> Result<()> {
        self.position_rounds(found, blobs, keys, false).map(drop)
    }

    /// Whether reading the records `found` (with `keys`, their keys too) would fetch anything
    /// from a remote store: looked up in the cache's map, nothing fetched. A warm batch of a
    /// collection asks this of each shard, so that only shards with bytes missing fetch.
    pub(crate) fn needs_fetch(&self, found: &[Found], keys: bool) -> bool {
        self.buf.is_remote()
            && (self.position_rounds(found.iter().copied(), true, keys, true)).unwrap_or(true)
    }

    /// The rounds of `fetch_positions`; with `dry`, none is fetched: whether one would be (the
    /// first round with something missing answers, as the next rounds read what it fetches).
    fn position_rounds(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        blobs: bool,
        keys: bool,
        dry: bool,
    ) -> Result<bool> {
        let round = |wants: &mut dyn Iterator<Item = (Section, Range<usize>)>| -> Result<bool> {
            match dry {
                true => Ok(Iterator::any(&mut &mut *wants, |(s, r)| {
                    let range = self.in_file(s, r);
                    !range.is_empty() && !self.buf.is_present(range)
                })),
                false => self.fetch(wants).map(|()| false),
            }
        };
        let n = self.len();
        let found = found.filter(move |f| f.pos < n);
        let first = round(&mut found.clone().flat_map(|f| {
            let p = f.pos as usize;
            let located = self.located(&f);
            [
                (blobs && !located).then_some((Section::DocOffsets, p * 8..p * 8 + 16)),
                keys.then_some((Section::KeyRanks, p * 4..p * 4 + 4)),
            ]
            .into_iter()
            .flatten()
        }))?;
        if first {
            return Ok(true);
        }
        let rank = |p: u64| self.index_u32(Section::KeyRanks, p).min(n);
        let before = self.buf.fetched_bytes();
        let second = round(&mut found.clone().flat_map(|f| {
            let blob = blobs.then(|| self.blob_range(f).ok()).flatten();
            let r = rank(f.pos) as usize;
            [
                blob.map(|b| (Section::Data, b)),
                keys.then_some((Section::KeyOffsets, r * 8..r * 8 + 16)),
            ]
            .into_iter()
            .flatten()
        }))?;
        if second {
            return Ok(true);
        }
        if blobs && !keys {
            self.buf
                .add_data_bytes(self.buf.fetched_bytes().saturating_sub(before));
        }
        if !keys {
            return Ok(false);
        }
        round(&mut found.filter_map(|f| {
            let r = rank(f.pos);
            (r < n)
                .then(|| self.range_at(Section::KeyOffsets, Section::Keys, r).ok())
                .flatten()
                .map(|k| (Section::Keys, k))
        }))
    }

    /// When the key index pages that `keys` need look uncached (by a sample), asks for all of
    /// them at once, so that their reads overlap.
    fn prefetch_index(&self, keys: &[&[u8]]) {
        let index = self.section(Section::KeyIndex);
        let page = |key: &[u8]| {
            self.target(key)
                .map(|t| self.block_of(t) as usize * self.block as usize * self.entry_size)
        };
        if !self
            .cold
            .is_cold(|| page(keys[0]).is_none_or(|at| pagecache::resident(index, at)))
        {
            return;
        }
        for at in keys.iter().filter_map(|k| page(k)) {
            pagecache::will_need(index, at..at + self.block as usize * self.entry_size);
        }
    }

    /// When the blobs `found` look uncached (by a sample), asks for all their pages at once:
    /// first the doc offsets of those the key index did not locate, then the blobs.
    fn prefetch_records(&self, found: impl Iterator<Item = Found> + Clone) {
        let n = self.len();
        let data = self.section(Section::Data);
        let blob = |f: Found| (f.pos < n).then(|| self.blob_range(f).ok()).flatten();
        let Some(first) = found.clone().next() else {
            return;
        };
        if !self
            .cold
            .is_cold(|| blob(first).is_none_or(|r| pagecache::resident(data, r.start)))
        {
            return;
        }
        let offsets = self.section(Section::DocOffsets);
        for f in found.clone().filter(|f| f.pos < n && !self.located(f)) {
            let pos = f.pos as usize;
            pagecache::will_need(offsets, pos * 8..pos * 8 + 16);
        }
        let data_start = self.ranges[Section::Data as usize].start as u64;
        for range in found.filter_map(blob) {
            match &self.data_file {
                Some(file) => {
                    pagecache::will_need_file(file, data_start + range.start as u64, range.len())
                }
                None => pagecache::will_need(data, range),
            }
        }
    }

    fn entry(&self, rank: u64) -> Result<KeyEntry> {
        let at = rank as usize * self.entry_size;
        self.need(Section::KeyIndex, at..at + self.entry_size)?;
        Ok(KeyEntry::at(
            self.section(Section::KeyIndex),
            rank,
            self.entry_size,
        ))
    }

    /// `ranks` for at most GROUP keys, misses not confirmed: the fences say which block (page)
    /// of the key index can hold a key, a search in that block finds its first candidate, and the
    /// entries settle it. Only keys longer than the common prefix plus 8 bytes are compared with
    /// the keys.
    fn ranks_into(&self, keys: &[&[u8]], out: &mut [Option<u64>]) -> Result<()> {
        let n = self.len();
        out.fill(None);
        if n == 0 {
            return Ok(());
        }
        // Keys without the common prefix are absent; the others search by their next 8 bytes.
        let mut targets = [None; GROUP];
        for (target, key) in targets.iter_mut().zip(keys) {
            *target = self.target(key);
        }
        let fences = self.section(Section::KeyFences);
        let index = self.section(Section::KeyIndex);
        // The first block whose fence is >= the target: the first candidate lies in the block
        // before it (or is that block's first entry).
        let blocks = n.div_ceil(self.block);
        let mut lows = [0u64; GROUP];
        let mut sizes = [blocks; GROUP];
        lower_bounds(&targets, &mut lows, &mut sizes, fences, 8);
        for (low, size) in lows.iter_mut().zip(&mut sizes) {
            let start = low.saturating_sub(1) * self.block;
            *low = start;
            *size = self.block.min(n - start);
        }
        if self.buf.is_remote() {
            // Cached already (`fetch_search`): checked again just before they are read, so that
            // a block evicted since (a long batch) is fetched again rather than read as zeros.
            self.fetch(
                (targets.iter().zip(lows.iter().zip(&sizes)))
                    .filter(|(t, _)| t.is_some())
                    .map(|(_, (&lo, &size))| {
                        let lo = lo as usize * self.entry_size;
                        (Section::KeyIndex, lo..lo + size as usize * self.entry_size)
                    }),
            )?;
        }
        lower_bounds(&targets, &mut lows, &mut sizes, index, self.entry_size);
        for (i, target) in targets.iter().enumerate().take(keys.len()) {
            let Some(target) = *target else { continue };
            out[i] = self.settle(keys[i], target, lows[i])?;
        }
        Ok(())
    }

    /// Finds `key` among the run of entries whose prefix is `target`, starting at rank `lo`: its
    /// rank.
    fn settle(&self, key: &[u8], target: u64, lo: u64) -> Result<Option<u64>> {
        let n = self.len();
        let short = self.header.common_prefix as usize + 8;
        // Keys that end within the prefix come first in the run, shortest first; for them the
        // prefix and the length are the whole key.
        let mut rank = lo;
        while rank < n {
            let entry = self.entry(rank)?;
            if entry.prefix != target || entry.key_len as usize > short {
                break;
            }
            if entry.key_len as usize == key.len() {
                return Ok(Some(rank));
            }
            rank += 1;
        }
        if key.len() <= short {
            return Ok(None);
        }
        // Longer keys: gallop to the end of the run, then compare whole keys.
        let lo = rank;
        let mut hi = lo;
        let mut step = 1;
        while hi < n && self.entry(hi)?.prefix == target {
            hi = (lo + step).min(n);
            step *= 2;
        }
        self.search_keys(key, lo, hi)
    }

    /// Binary search for `key` among ranks `lo..hi` by whole-key comparison: its rank.
    fn search_keys(&self, key: &[u8], mut lo: u64, mut hi: u64) -> Result<Option<u64>> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key_of_rank(mid)?.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(Some(mid)),
            }
        }
        Ok(None)
    }

    /// The key of the document at `pos`. In a checked store it is proved as a document read is:
    /// the blob at `pos` must pass its check with it (and, from format v3, `pos`), so a damaged
    /// key, key offset or key rank raises instead of handing out another id. Costs hashing the
    /// stored blob (not decoding it).
    pub fn key_at(&self, pos: u64) -> Result<&str> {
        let key = self.key_bytes_at(pos)?;
        self.confirm(Found::at(pos), key)?;
        std::str::from_utf8(key).map_err(|_| Error::corrupt("key is not UTF-8"))
    }

    /// The key of the document at `pos` whose record has just been read with
    /// `with_record` (or `read_records`), which checked the record with this very key: from a
    /// local file the key is not hashed again (the same mapped bytes; a second `pread` of the
    /// blob cost a `take` 25%). A remote store's cache may have fetched the key anew since: it
    /// is proved again (`key_at`).
    pub fn key_at_after_read(&self, pos: u64) -> Result<&str> {
        if self.buf.is_remote() {
            return self.key_at(pos);
        }
        std::str::from_utf8(self.key_bytes_at(pos)?).map_err(|_| Error::corrupt("key is not UTF-8"))
    }

    /// Runs `each` on the position and key of every document of `positions`, in order, each key
    /// proved as `key_at` proves it. A store read with `pread` reads the blobs of a run of
    /// positions with one call (blobs tile the data section in position order) rather than one
    /// call a key, which made iterating the ids of a store 8x slower.
    pub fn keys_in(
        &self,
        positions: Range<u64>,
        mut each: impl FnMut(u64, &str) -> Result<()>,
    ) -> Result<()> {
        let Some(file) = self.data_file.as_ref().filter(|_| self.checked()) else {
            return positions
                .into_iter()
                .try_for_each(|pos| each(pos, self.key_at(pos)?));
        };
        let v3 = self.header.binds_position();
        let data_start = self.ranges[Section::Data as usize].start as u64;
        let mut pos = positions.start;
        while pos < positions.end {
            self.check_position(pos)?;
            // A run of positions whose blobs take at most RUN_BYTES together (at least one).
            let start = self
                .range_at(Section::DocOffsets, Section::Data, pos)?
                .start;
            let mut end = pos + 1;
            while end < positions.end.min(self.len())
                && end - pos < RUN_KEYS
                && (self.offset(Section::DocOffsets, end + 1) as usize)
                    .checked_sub(start)
                    .is_some_and(|len| len <= RUN_BYTES)
            {
                end += 1;
            }
            let span = start
                ..self
                    .range_at(Section::DocOffsets, Section::Data, end - 1)?
                    .end;
            let mut read = |buf: &mut Vec<u8>| -> Result<()> {
                buf.clear();
                try_reserve(buf, span.len())?;
                buf.resize(span.len(), 0);
                std::os::unix::fs::FileExt::read_exact_at(
                    file,
                    buf,
                    data_start + span.start as u64,
                )?;
                for p in pos..end {
                    let key = self.key_bytes_at(p)?;
                    let blob = self.range_at(Section::DocOffsets, Section::Data, p)?;
                    match (
                        blob.start.checked_sub(span.start),
                        blob.end.checked_sub(span.start),
                    ) {
                        // Offsets that do not increase (damage) fall outside the run: that
                        // position is read alone, and its check decides.
                        (Some(from), Some(to)) if blob.end <= span.end => {
                            check::checked_body(&buf[from..to], key, p, v3)?;
                        }
                        _ => self.confirm(Found::at(p), key)?,
                    }
                    let key =
                        std::str::from_utf8(key).map_err(|_| Error::corrupt("key is not UTF-8"))?;
                    each(p, key)?;
                }
                codec::release_if_huge(buf, 0);
                Ok(())
            };
            BLOB.with(|cell| match cell.try_borrow_mut() {
                Ok(mut buf) => read(&mut buf),
                Err(_) => read(&mut Vec::new()),
            })?;
            pos = end;
        }
        Ok(())
    }

    fn key_bytes_at(&self, pos: u64) -> Result<&[u8]> {
        self.key_of_rank(self.rank_at(pos)?)
    }

    /// The rank of the key of the document at `pos` (key ranks), range-checked, not confirmed.
    pub(crate) fn rank_at(&self, pos: u64) -> Result<u64> {
        self.check_position(pos)?;
        self.need(Section::KeyRanks, pos as usize * 4..pos as usize * 4 + 4)?;
        let rank = self.index_u32(Section::KeyRanks, pos);
        if rank >= self.len() {
            return Err(Error::corrupt("key rank out of range"));
        }
        Ok(rank)
    }

    /// The stored (compressed) blob of the document at `pos`.
    pub fn blob(&self, pos: u64) -> Result<&[u8]> {
        self.check_position(pos)?;
        self.slice_at(Section::DocOffsets, Section::Data, pos)
    }

    /// Where the blob of the document at `pos` lies in the data section (its doc offsets),
    /// bounds-checked.
    pub(crate) fn blob_range_at(&self, pos: u64) -> Result<Range<usize>> {
        self.blob_range(Found::at(pos))
    }

    /// Where the blob of `found` lies in the data section, bounds-checked: where its key index
    /// entry says, when this store's entries locate its blobs (format v3), else its doc offsets.
    /// A damaged location reads other bytes, which then fail the check of `found`'s key and
    /// position.
    fn blob_range(&self, found: Found) -> Result<Range<usize>> {
        match found.blob {
            Some((offset, len)) if self.header.locates_blobs() => {
                let end = (offset.checked_add(len))
                    .filter(|&end| end <= self.section(Section::Data).len() as u64)
                    .ok_or_else(|| Error::corrupt("key index blob location out of bounds"))?;
                Ok(offset as usize..end as usize)
            }
            _ => {
                self.check_position(found.pos)?;
                self.range_at(Section::DocOffsets, Section::Data, found.pos)
            }
        }
    }

    /// How this store reads documents.
    pub fn data_access(&self) -> DataAccess {
        match self.data_file {
            Some(_) => DataAccess::Pread,
            None => DataAccess::Mmap,
        }
    }

    /// The raw record of the document at `pos` (decode it with `record::decode`).
    pub fn record(&self, pos: u64) -> Result<Cow<'_, [u8]>> {
        self.with_record(pos, owned)?
    }

    /// Runs `f` on the raw record at `pos`, decoded in a per-thread buffer. In a checked store the
    /// record is checked against the key of `pos` (key ranks and keys: see `with_record_of`).
    pub fn with_record<R>(&self, pos: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let key = match self.checked() {
            true => Some(self.key_bytes_at(pos)?),
            false => None,
        };
        self.with_record_at(Found::at(pos), key, f)
    }

    /// `with_record` for a lookup by `key` that the key index found: the check proves the record
    /// is `key`'s (and from format v3 that it is at `found.pos`), so neither the position nor the
    /// key ranks need confirming.
    pub fn with_record_of<R>(
        &self,
        found: Found,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        self.with_record_at(found, Some(key).filter(|_| self.checked()), f)
    }

    fn with_record_at<R>(
        &self,
        found: Found,
        key: Option<&[u8]>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let dict_id = self.header.section(Section::Dictionary).checksum;
        self.with_body(found, key, |body| {
            codec::decompress_with(body, self.dictionary(), dict_id, f)
        })
    }

    /// Runs `f` on the blob of `found` without its check, once the check holds for `key` (given
    /// exactly when the store is checked) and, from format v3, `found.pos`.
    fn with_body<R>(
        &self,
        found: Found,
        key: Option<&[u8]>,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        fn checked<'b>(
            blob: &'b [u8],
            key: Option<&[u8]>,
            found: Found,
            v3: bool,
        ) -> Result<&'b [u8]> {
            match key {
                Some(key) => check::checked_body(blob, key, found.pos, v3),
                None => Ok(blob),
            }
        }
        let v3 = self.header.binds_position();
        let range = self.blob_range(found)?;
        if self.buf.is_remote() {
            // Copied out of the cache before it is checked and decoded: what is checked is
            // what is decoded, even if the cache evicts meanwhile (a memcpy, no system call).
            self.need(Section::Data, range.clone())?;
            let blob = &self.section(Section::Data)[range];
            let read = |buf: &mut Vec<u8>| -> Result<R> {
                buf.clear();
                try_reserve(buf, blob.len())?;
                buf.extend_from_slice(blob);
                let result = f(checked(buf, key, found, v3)?);
                codec::release_if_huge(buf, 0);
                result
            };
            return BLOB.with(|cell| match cell.try_borrow_mut() {
                Ok(mut buf) => read(&mut buf),
                Err(_) => read(&mut Vec::new()),
            });
        }
        let Some(file) = &self.data_file else {
            return f(checked(
                &self.section(Section::Data)[range],
                key,
                found,
                v3,
            )?);
        };
        // The bounds come from the mapped index, checked as for a mapped read; the bytes from
        // the file, never from the mapping.
        let blob = range;
        let at = (self.ranges[Section::Data as usize].start + blob.start) as u64;
        let read = |buf: &mut Vec<u8>| -> Result<R> {
            try_reserve(buf, blob.len().saturating_sub(buf.len()))?;
            buf.resize(blob.len(), 0);
            let result = std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
                .map_err(Error::from)
                .and_then(|()| f(checked(buf, key, found, v3)?));
            codec::release_if_huge(buf, 0);
            result
        };
        BLOB.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => read(&mut buf),
            Err(_) => read(&mut Vec::new()),
        })
    }

    /// Appends the raw records of `positions` to `batch`, prefetching each group's offsets and
    /// blobs before decoding them (see `positions`).
    pub fn read_records(&self, positions: &[u64], batch: &mut RecordBatch) -> Result<()> {
        let key_of_position = self.checked();
        self.read_grouped(
            positions,
            |&pos| Found::at(pos),
            key_of_position,
            |&pos| self.with_record(pos, |raw| batch.push(raw))?,
        )
    }

    /// `read_records` for lookups by key: what the key index found for each key, each record
    /// checked against its key.
    pub fn read_found(&self, found: &[(Found, &[u8])], batch: &mut RecordBatch) -> Result<()> {
        self.read_grouped(
            found,
            |&(found, _)| found,
            false,
            |&(found, key)| self.with_record_of(found, key, |raw| batch.push(raw))?,
        )
    }

    /// Runs `read` on each item, in groups whose doc offsets and blobs are prefetched first, and
    /// with `keys` the keys of their positions (what a checked read by position hashes).
    fn read_grouped<T>(
        &self,
        items: &[T],
        found_of: impl Fn(&T) -> Found,
        keys: bool,
        read: impl FnMut(&T) -> Result<()>,
    ) -> Result<()> {
        self.prepare_batch(items.iter().map(&found_of), items.len(), keys)?;
        read_pipelined(items, |item| (self, found_of(item)), keys, read)
    }

    /// Whether `prepare_batch` has anything to do for a batch of `len` records.
    pub(crate) fn prepares_batch(&self, len: usize) -> bool {
        (self.mapped && len >= PREFETCH_MIN) || self.buf.is_remote()
    }

    /// What a batch of `len` records `found` needs before `read_pipelined` reads them: from a
    /// remote store, their bytes fetched in a few rounds of concurrent requests; from a mapped
    /// file that looks uncached, all their pages asked for at once.
    pub(crate) fn prepare_batch(
        &self,
        found: impl Iterator<Item = Found> + Clone,
        len: usize,
        keys: bool,
    ) -> Result<()> {
        if self.mapped && len >= PREFETCH_MIN {
            self.prefetch_records(found.clone());
        }
        if self.buf.is_remote() {
            self.fetch_positions(found, true, keys)?;
        }
        Ok(())
    }

    /// Positions of many keys (`None` when absent), their records appended to `batch`, each
    /// checked against the key it was asked by.
    pub fn read_many(&self, keys: &[&[u8]], batch: &mut RecordBatch) -> Result<Vec<Option<u64>>> {
        let located = self.locate_many(keys)?;
        let found: Vec<(Found, &[u8])> = (located.iter().zip(keys))
            .filter_map(|(found, &key)| found.map(|found| (found, key)))
            .collect();
        self.read_found(&found, batch)?;
        Ok(located.iter().map(|f| f.map(|f| f.pos)).collect())
    }

    /// Position of `key` (`None` when absent), its record appended to `batch`, checked against it.
    pub fn read_one(&self, key: &[u8], batch: &mut RecordBatch) -> Result<Option<u64>> {
        let found = self.locate(key)?;
        if let Some(found) = found {
            self.with_record_of(found, key, |raw| batch.push(raw))??;
        }
        Ok(found.map(|f| f.pos))
    }

    /// Position and raw record of `key`, if present.
    pub fn get(&self, key: &[u8]) -> Result<Option<(u64, Cow<'_, [u8]>)>> {
        match self.locate(key)? {
            Some(found) => Ok(Some((found.pos, self.with_record_of(found, key, owned)??))),
            None => Ok(None),
        }
    }

    /// Reads every byte: section checksums, index consistency, and every record decoded against
    /// the schema. Runs in parallel on the docstore pool.
    pub fn verify(&self) -> Result<()>
    where
        B: Sync,
    {
        if self.buf.is_remote() {
            // (A collection verifies a remote store on a downloaded copy: `Collection::verify`.)
            let whole = 0..self.file_len();
            self.buf.ensure(&mut vec![whole])?;
        }
        // Bytes outside every section (alignment padding) must be zeros and the file must end
        // where the last section does, so that no flipped byte goes unnoticed.
        let mut covered = HEADER_SIZE;
        for range in &self.ranges {
            if self.buf.as_ref()[covered..range.start]
                .iter()
                .any(|&b| b != 0)
            {
                return Err(Error::corrupt("non-zero padding between sections"));
            }
            covered = range.end;
        }
        if covered != self.buf.as_ref().len() {
            return Err(Error::corrupt("trailing bytes after the last section"));
        }
        parallel::pool().install(|| {
            Section::ALL.par_iter().try_for_each(|&s| {
                if xxh3_64(self.section(s)) != self.header.section(s).checksum {
                    return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
                }
                Ok(())
            })?;
            let n = self.len();
            (0..n).into_par_iter().try_for_each(|rank| {
                let key = self.key_of_rank(rank)?;
                if key.is_empty() || std::str::from_utf8(key).is_err() {
                    return Err(Error::corrupt("empty or non-UTF-8 key"));
                }
                if rank + 1 < n && key >= self.key_of_rank(rank + 1)? {
                    return Err(Error::corrupt("keys are not sorted and unique"));
                }
                let common = self.header.common_prefix as usize;
                let entry = self.entry(rank)?;
                if key.len() < common
                    || key[..common] != self.key_of_rank(0)?[..common]
                    || entry.prefix != key_prefix(&key[common..])
                    || entry.key_len as usize != key.len()
                {
                    return Err(Error::corrupt("key index does not match the keys"));
                }
                let pos = u64::from(entry.position);
                if pos >= n || self.index_u32(Section::KeyRanks, pos) != rank {
                    return Err(Error::corrupt("key positions and ranks disagree"));
                }
                if self.header.locates_blobs() {
                    let blob = self.blob_range_at(pos)?;
                    if (entry.blob_offset, entry.blob_len) != (blob.start as u64, blob.len() as u64)
                    {
                        return Err(Error::corrupt(
                            "key index blob locations do not match the doc offsets",
                        ));
                    }
                }
                if rank.is_multiple_of(self.block)
                    && u64_at(
                        self.section(Section::KeyFences),
                        (rank / self.block) as usize * 8,
                    ) != entry.prefix
                {
                    return Err(Error::corrupt("key fences do not match the key index"));
                }
                Ok(())
            })?;
            if self.offset(Section::DocOffsets, 0) != 0 || self.offset(Section::KeyOffsets, 0) != 0
            {
                return Err(Error::corrupt("offsets do not start at zero"));
            }
            let raw_bytes = (0..n)
                .into_par_iter()
                .map(|pos| {
                    // Blobs tile the data section: each starts where the previous one ends.
                    if self.offset(Section::DocOffsets, pos)
                        > self.offset(Section::DocOffsets, pos + 1)
                    {
                        return Err(Error::corrupt("doc offsets decrease"));
                    }
                    self.with_record(pos, |raw| {
                        record::decode(&self.schema, raw).map(|_| raw.len() as u64)
                    })?
                })
                .try_reduce(|| 0, |a, b| Ok(a + b))?;
            if raw_bytes != self.header.raw_bytes {
                return Err(Error::corrupt(
                    "raw size in the header does not match the records",
                ));
            }
            Ok(())
        })
    }
}

/// Checks what `open_ranges` covers against the header's checksums.
fn check_open_ranges(bytes: &[u8], header: &Header) -> Result<()> {
    for s in [Section::Schema, Section::Dictionary, Section::KeyFences] {
        let e = header.section(s);
        let at = e.offset as usize..(e.offset + e.len) as usize;
        if xxh3_64(&bytes[at]) != e.checksum {
            return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
        }
    }
    Ok(())
}

/// What opening a remote store reads past its first bytes: the key fences (one request), and
/// the schema and the dictionary where they do not fit the first request.
fn open_ranges(header: &Header) -> Vec<Range<u64>> {
    let whole = |s: Section| {
        let e = header.section(s);
        e.offset..e.offset + e.len
    };
    vec![
        whole(Section::Schema),
        whole(Section::Dictionary),
        whole(Section::KeyFences),
    ]
}

/// A purchase of whole index sections under way (`Store::rent_or_buy`), ended when dropped.
struct Purchase<'b, B: Storage>(&'b B, u64);

impl<B: Storage> Drop for Purchase<'_, B> {
    fn drop(&mut self) {
        self.0.end_purchase(self.1);
    }
}

/// The largest index section `rent_or_buy` fetches whole: a purchase's requests are all in
/// flight at once, each response held whole until written (at most this much memory), and a
/// larger section is rarely read through before the cache evicts it.
const MAX_PURCHASE: u64 = 256 << 20;

/// Runs `read` on each item in order, each item naming its store (one store, or the shards of a
/// collection) and its position there, in groups of `GROUP` whose doc offsets, blobs and (with
/// `keys`) key ranks, key offsets and keys are prefetched into the CPU cache first: three
/// dependent loads each, overlapped across a group rather than queued one after another.
pub(crate) fn read_pipelined<'s, B: Storage + 's, T>(
    items: &[T],
    at: impl Fn(&T) -> (&'s Store<B>, Found),
    keys: bool,
    mut read: impl FnMut(&T) -> Result<()>,
) -> Result<()> {
    // Where a blob starts, as far as a prefetch needs to know (checked when it is read).
    let blob_start = |store: &Store<B>, found: Found| match found.blob {
        Some((offset, _)) if store.header.locates_blobs() => offset as usize,
        _ => store.offset(Section::DocOffsets, found.pos) as usize,
    };
    for group in items.chunks(GROUP) {
        for item in group {
            let (store, found) = at(item);
            let pos = found.pos as usize;
            if !store.located(&found) {
                store.prefetch(Section::DocOffsets, pos.saturating_mul(8));
            }
            if keys {
                store.prefetch(Section::KeyRanks, pos.saturating_mul(4));
            }
        }
        for item in group {
            let (store, found) = at(item);
            let pos = found.pos;
            if pos < store.len() && store.data_file.is_none() {
                store.prefetch(Section::Data, blob_start(store, found));
            }
            if keys && pos < store.len() {
                let rank = store.index_u32(Section::KeyRanks, pos) as usize;
                store.prefetch(Section::KeyOffsets, rank.saturating_mul(8));
            }
        }
        if keys {
            for item in group {
                let (store, Found { pos, .. }) = at(item);
                if pos < store.len() {
                    let rank = store.index_u32(Section::KeyRanks, pos);
                    if rank < store.len() {
                        let key_at = store.offset(Section::KeyOffsets, rank) as usize;
                        store.prefetch(Section::Keys, key_at);
                    }
                }
            }
        }
        for item in group {
            read(item)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Field, FieldType, Schema, Value, Writer, WriterOptions};

    #[test]
    fn keys_in_reads_runs_of_blobs_with_pread_and_checks_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let schema = Schema::new(vec![Field {
            name: "blob".into(),
            ty: FieldType::Bytes,
        }])
        .unwrap();
        let options = WriterOptions {
            level: codec::LEVEL_NONE,
            ..WriterOptions::default()
        };
        // Blobs over and under a run's bytes, and more keys than a run holds.
        let sizes: Vec<usize> = (0..RUN_KEYS as usize + 100)
            .map(|i| match i % 1000 {
                7 => RUN_BYTES + 10,
                8 => RUN_BYTES / 2,
                _ => i % 50,
            })
            .collect();
        let mut writer = Writer::create(&path, schema, options).unwrap();
        for (i, &size) in sizes.iter().enumerate() {
            let blob = vec![i as u8; size];
            writer
                .push(&format!("id{i:06}"), &[Value::Bytes(&blob)])
                .unwrap();
        }
        writer.finish().unwrap();
        let n = sizes.len() as u64;
        for access in [DataAccess::Mmap, DataAccess::Pread] {
            let store = Store::open_with(&path, access).unwrap();
            for range in [0..n, 5..9, 7..8, 3..3, n - 1..n] {
                let mut got = Vec::new();
                store
                    .keys_in(range.clone(), |p, k| {
                        got.push((p, k.to_owned()));
                        Ok(())
                    })
                    .unwrap();
                let want: Vec<(u64, String)> = range.map(|p| (p, format!("id{p:06}"))).collect();
                assert_eq!(got, want, "{access:?}");
            }
            assert!(store.keys_in(n - 1..n + 1, |_, _| Ok(())).is_err());
        }
        // One flipped byte of the keys: the keys before it come, then an error naming its position.
        let mut bytes = std::fs::read(&path).unwrap();
        let store = Store::open(&path).unwrap();
        let keys = store.ranges[Section::Keys as usize].start;
        let rank = store.index_u32(Section::KeyRanks, 2000) as usize;
        let at = keys + store.offset(Section::KeyOffsets, rank as u64) as usize + 3;
        drop(store);
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        for access in [DataAccess::Mmap, DataAccess::Pread] {
            let store = Store::open_with(&path, access).unwrap();
            let mut seen = 0;
            let err = store
                .keys_in(0..n, |_, _| {
                    seen += 1;
                    Ok(())
                })
                .unwrap_err();
            assert!(err.to_string().contains("position 2000"), "{err}");
            assert_eq!(seen, 2000, "{access:?}");
        }
    }

    #[test]
    fn pread_buffer_gives_back_the_room_of_a_huge_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let schema = Schema::new(vec![Field {
            name: "blob".into(),
            ty: FieldType::Bytes,
        }])
        .unwrap();
        let huge = vec![7u8; 20 << 20];
        let options = WriterOptions {
            level: codec::LEVEL_NONE,
            ..WriterOptions::default()
        };
        let mut writer = Writer::create(&path, schema, options).unwrap();
        writer.push("small", &[Value::Bytes(b"tiny")]).unwrap();
        writer.push("huge", &[Value::Bytes(&huge)]).unwrap();
        writer.finish().unwrap();
        let store = Store::open_with(&path, DataAccess::Pread).unwrap();
        assert!(store.with_record(1, <[u8]>::len).unwrap() > huge.len());
        assert!(BLOB.with(|cell| cell.borrow().capacity()) < 1 << 20);
        assert!(store.with_record(0, <[u8]>::len).unwrap() > 0);
    }
}
