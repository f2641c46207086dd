//! Read access to a store: constant-time open, binary search over the mapped key index,
//! O(1) access by position. Every offset read from the file is bounds-checked, so a corrupt
//! file yields `Error::Corrupt`, never a crash.

use crate::codec;
use crate::error::{Error, Result};
use crate::format::{key_prefix, u32_at, u64_at, Header, Section, HEADER_SIZE};
use crate::parallel;
use crate::record;
use crate::schema::Schema;
use memmap2::{Advice, Mmap};
use rayon::prelude::*;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
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

    fn push(&mut self, raw: &[u8]) {
        self.data.extend_from_slice(raw);
        self.ends.push(self.data.len());
    }
}

/// Lookups of a batch that advance together (see `positions`).
const GROUP: usize = 16;

/// Asks the CPU to start loading `bytes[at]` into cache (a hint: no effect where unsupported).
#[inline(always)]
fn prefetch(bytes: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < bytes.len() {
        // SAFETY: `at` is in bounds; a prefetch never faults and changes no memory.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(at).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
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
        let file = File::open(path.as_ref())?;
        if file.metadata()?.is_dir() {
            return Err(Error::Io(std::io::Error::other(format!(
                "{} is a directory",
                path.as_ref().display()
            ))));
        }
        if file.metadata()?.len() < HEADER_SIZE as u64 {
            // mmap of an empty file fails; report what it is instead.
            let mut start = [0u8; 12];
            let n = std::io::Read::read(&mut &file, &mut start)?;
            Header::decode(&start[..n], n as u64)?;
            return Err(Error::corrupt(
                "file is shorter than its header (truncated)",
            ));
        }
        // SAFETY: stores are immutable once renamed into place; a store changed underneath a
        // reader is outside the contract (as with any mmapped file).
        let mmap = unsafe { Mmap::map(&file)? };
        // Lookups touch one or two pages each: read-ahead would only evict useful pages.
        let _ = mmap.advise(Advice::Random);
        let mut store = Store::from_bytes(mmap)?;
        if access == DataAccess::Pread {
            store.data_file = Some(file);
        }
        Ok(store)
    }
}

impl<B: AsRef<[u8]>> Store<B> {
    pub fn from_bytes(buf: B) -> Result<Store<B>> {
        let bytes = buf.as_ref();
        let header = Header::decode(bytes, bytes.len() as u64)?;
        let ranges = Section::ALL.map(|s| {
            let entry = header.section(s);
            entry.offset as usize..(entry.offset + entry.len) as usize
        });
        let section = |s: Section| &bytes[ranges[s as usize].clone()];
        for s in [Section::Schema, Section::Dictionary] {
            if xxh3_64(section(s)) != header.section(s).checksum {
                return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
            }
        }
        let schema = Schema::decode(section(Section::Schema))?;
        let count = header.count;
        if count >= u64::from(u32::MAX) {
            return Err(Error::corrupt("document count out of range"));
        }
        let expected = [
            (Section::DocOffsets, (count + 1) * 8),
            (Section::KeyOffsets, (count + 1) * 8),
            (Section::KeyPrefixes, count * 8),
            (Section::KeyPositions, count * 4),
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
        let store = Store {
            buf,
            header,
            schema,
            ranges,
            data_file: None,
        };
        // The last offsets close their sections: a cheap check that catches most truncations.
        if store.offset(Section::DocOffsets, count) != store.section(Section::Data).len() as u64
            || store.offset(Section::KeyOffsets, count) != store.section(Section::Keys).len() as u64
        {
            return Err(Error::corrupt("index does not match its data (truncated?)"));
        }
        Ok(store)
    }

    fn section(&self, s: Section) -> &[u8] {
        &self.buf.as_ref()[self.ranges[s as usize].clone()]
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

    pub fn file_len(&self) -> u64 {
        self.buf.as_ref().len() as u64
    }

    pub fn dictionary(&self) -> &[u8] {
        self.section(Section::Dictionary)
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
        let (start, end) = (self.offset(offsets, i), self.offset(offsets, i + 1));
        if start > end || end > self.section(target).len() as u64 {
            return Err(Error::corrupt(format!("{} out of bounds", offsets.name())));
        }
        Ok(start as usize..end as usize)
    }

    fn slice_at(&self, offsets: Section, target: Section, i: u64) -> Result<&[u8]> {
        Ok(&self.section(target)[self.range_at(offsets, target, i)?])
    }

    fn key_of_rank(&self, rank: u64) -> Result<&[u8]> {
        self.slice_at(Section::KeyOffsets, Section::Keys, rank)
    }

    /// The position of `key`: a binary search over the compact prefix array finds the first
    /// candidate, whole keys settle ties.
    pub fn position(&self, key: &[u8]) -> Result<Option<u64>> {
        let mut out = [None];
        self.positions_into(&[key], &mut out)?;
        Ok(out[0])
    }

    /// Positions of many keys. The searches advance in lockstep, each prefetching what it reads
    /// next, so that the cache misses of a group overlap instead of queuing one after another.
    pub fn positions(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        let mut out = vec![None; keys.len()];
        for (keys, out) in keys.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            self.positions_into(keys, out)?;
        }
        Ok(out)
    }

    /// `positions` for at most GROUP keys.
    fn positions_into(&self, keys: &[&[u8]], out: &mut [Option<u64>]) -> Result<()> {
        let n = self.len();
        out.fill(None);
        if n == 0 {
            return Ok(());
        }
        let common = self.header.common_prefix as usize;
        let first = self.key_of_rank(0)?;
        if first.len() < common {
            return Err(Error::corrupt(
                "common key prefix longer than the first key",
            ));
        }
        let prefixes = self.section(Section::KeyPrefixes);
        let prefix = |rank: u64| u64_at(prefixes, rank as usize * 8);
        // Keys without the common prefix are absent; the others search by their next 8 bytes.
        let mut targets = [None; GROUP];
        for (target, key) in targets.iter_mut().zip(keys) {
            if key.len() >= common && key[..common] == first[..common] {
                *target = Some(key_prefix(&key[common..]));
            }
        }
        // Branch-free lower bound: every search takes the same steps, so they run in lockstep.
        let mut base = [0u64; GROUP];
        let mut size = n;
        while size > 1 {
            let half = size / 2;
            let next_half = (size - half) / 2;
            for (base, target) in base[..keys.len()].iter_mut().zip(&targets) {
                if let Some(target) = *target {
                    if prefix(*base + half) < target {
                        *base += half;
                    }
                    prefetch(prefixes, (*base + next_half) as usize * 8);
                }
            }
            size -= half;
        }
        let mut lows = [0u64; GROUP];
        for ((low, base), target) in lows[..keys.len()].iter_mut().zip(&base).zip(&targets) {
            if let Some(target) = *target {
                *low = *base + u64::from(prefix(*base) < target);
                prefetch(
                    self.section(Section::KeyOffsets),
                    (*low as usize).min(n as usize - 1) * 8,
                );
                prefetch(
                    self.section(Section::KeyPositions),
                    (*low as usize).min(n as usize - 1) * 4,
                );
            }
        }
        for (i, target) in targets.iter().enumerate().take(keys.len()) {
            if target.is_some() && lows[i] < n {
                let start = self.offset(Section::KeyOffsets, lows[i]);
                prefetch(self.section(Section::Keys), start as usize);
            }
        }
        for (i, target) in targets.iter().enumerate().take(keys.len()) {
            let Some(target) = *target else { continue };
            // Keys sharing the target's prefix start at `lo`; gallop to the end of that run.
            let lo = lows[i];
            let mut hi = lo;
            let mut step = 1;
            while hi < n && prefix(hi) == target {
                hi = (lo + step).min(n);
                step *= 2;
            }
            out[i] = self.search_keys(keys[i], lo, hi)?;
        }
        Ok(())
    }

    /// Binary search for `key` among ranks `lo..hi` by whole-key comparison.
    fn search_keys(&self, key: &[u8], mut lo: u64, mut hi: u64) -> Result<Option<u64>> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key_of_rank(mid)?.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => {
                    let pos = self.index_u32(Section::KeyPositions, mid);
                    self.check_position(pos)
                        .map_err(|_| Error::corrupt("key position out of range"))?;
                    return Ok(Some(pos));
                }
            }
        }
        Ok(None)
    }

    /// The key of the document at `pos`.
    pub fn key_at(&self, pos: u64) -> Result<&str> {
        self.check_position(pos)?;
        let rank = self.index_u32(Section::KeyRanks, pos);
        if rank >= self.len() {
            return Err(Error::corrupt("key rank out of range"));
        }
        std::str::from_utf8(self.key_of_rank(rank)?).map_err(|_| Error::corrupt("key is not UTF-8"))
    }

    /// The stored (compressed) blob of the document at `pos`.
    pub fn blob(&self, pos: u64) -> Result<&[u8]> {
        self.check_position(pos)?;
        self.slice_at(Section::DocOffsets, Section::Data, pos)
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
        self.with_record(pos, |raw| Cow::Owned(raw.to_vec()))
    }

    /// Runs `f` on the raw record at `pos`, decoded in a per-thread buffer.
    pub fn with_record<R>(&self, pos: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let dict_id = self.header.section(Section::Dictionary).checksum;
        let Some(file) = &self.data_file else {
            return codec::decompress_with(self.blob(pos)?, self.dictionary(), dict_id, f);
        };
        // The bounds come from the mapped index, checked as for a mapped read; the bytes from
        // the file, never from the mapping.
        self.check_position(pos)?;
        let blob = self.range_at(Section::DocOffsets, Section::Data, pos)?;
        let at = (self.ranges[Section::Data as usize].start + blob.start) as u64;
        let read = |buf: &mut Vec<u8>| -> Result<R> {
            buf.resize(blob.len(), 0);
            std::os::unix::fs::FileExt::read_exact_at(file, buf, at)?;
            codec::decompress_with(buf, self.dictionary(), dict_id, f)
        };
        BLOB.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => read(&mut buf),
            Err(_) => read(&mut Vec::new()),
        })
    }

    /// Appends the raw records of `positions` to `batch`, prefetching each group's offsets and
    /// blobs before decoding them (see `positions`).
    pub fn read_records(&self, positions: &[u64], batch: &mut RecordBatch) -> Result<()> {
        let offsets = self.section(Section::DocOffsets);
        for group in positions.chunks(GROUP) {
            for &pos in group {
                prefetch(offsets, pos as usize * 8);
            }
            for &pos in group {
                if pos < self.len() && self.data_file.is_none() {
                    prefetch(
                        self.section(Section::Data),
                        self.offset(Section::DocOffsets, pos) as usize,
                    );
                }
            }
            for &pos in group {
                self.with_record(pos, |raw| batch.push(raw))?;
            }
        }
        Ok(())
    }

    /// Positions of many keys (`None` when absent), their records appended to `batch`.
    pub fn read_many(&self, keys: &[&[u8]], batch: &mut RecordBatch) -> Result<Vec<Option<u64>>> {
        let positions = self.positions(keys)?;
        let found: Vec<u64> = positions.iter().flatten().copied().collect();
        self.read_records(&found, batch)?;
        Ok(positions)
    }

    /// Position and raw record of `key`, if present.
    pub fn get(&self, key: &[u8]) -> Result<Option<(u64, Cow<'_, [u8]>)>> {
        match self.position(key)? {
            Some(pos) => Ok(Some((pos, self.record(pos)?))),
            None => Ok(None),
        }
    }

    /// Reads every byte: section checksums, index consistency, and every record decoded against
    /// the schema. Runs in parallel on the docstore pool.
    pub fn verify(&self) -> Result<()>
    where
        B: Sync,
    {
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
                let prefix = u64_at(self.section(Section::KeyPrefixes), rank as usize * 8);
                if key.len() < common
                    || key[..common] != self.key_of_rank(0)?[..common]
                    || prefix != key_prefix(&key[common..])
                {
                    return Err(Error::corrupt("key prefixes do not match the keys"));
                }
                let pos = self.index_u32(Section::KeyPositions, rank);
                if pos >= n || self.index_u32(Section::KeyRanks, pos) != rank {
                    return Err(Error::corrupt("key positions and ranks disagree"));
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
