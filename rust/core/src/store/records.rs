//! Reading documents and keys from a `Store`: by position or by what the key index found, one
//! at a time or in batches (`RecordBatch`), over bytes the storage holds still while they are
//! checked and decoded (`Storage::read_stable`: the map's, or a copy read with `pread` or out
//! of a remote store's cache). In a checked store every record and key read is proved to be
//! the one asked for (`check`).

use super::pipeline::read_pipelined;
use super::{Found, Store};
use crate::codec;
use crate::error::{try_reserve, Error, Result};
use crate::format::check;
use crate::format::Section;
use crate::storage::Storage;
use std::borrow::Cow;
use std::ops::Range;

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

/// The most keys, and bytes of their blobs, that `keys_in` reads at once.
const RUN_KEYS: u64 = 4096;
const RUN_BYTES: usize = 1 << 20;

impl<B: Storage> Store<B> {
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
        if !self.buf.stable() {
            return self.key_at(pos);
        }
        std::str::from_utf8(self.key_bytes_at(pos)?).map_err(|_| Error::corrupt("key is not UTF-8"))
    }

    /// Runs `each` on the position and key of every document of `positions`, in order, each key
    /// proved as `key_at` proves it. The blobs of a run of positions are read at once (blobs
    /// tile the data section in position order): one `pread` a run rather than one a key, which
    /// made iterating the ids of a store 8x slower.
    pub fn keys_in(
        &self,
        positions: Range<u64>,
        mut each: impl FnMut(u64, &str) -> Result<()>,
    ) -> Result<()> {
        if !self.checked() {
            return positions
                .into_iter()
                .try_for_each(|pos| each(pos, self.key_at(pos)?));
        }
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
            let read = |buf: &[u8]| -> Result<()> {
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
                Ok(())
            };
            let at = data_start + span.start as u64..data_start + span.end as u64;
            self.buf.read_stable(at, read)?;
            pos = end;
        }
        Ok(())
    }

    /// The stored (compressed) blob of the document at `pos`.
    pub fn blob(&self, pos: u64) -> Result<&[u8]> {
        self.check_position(pos)?;
        self.slice_at(Section::DocOffsets, Section::Data, pos)
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
    pub(super) fn with_body<R>(
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
        let range = self.in_file(Section::Data, self.blob_range(found)?);
        self.buf
            .read_stable(range, |blob| f(checked(blob, key, found, v3)?))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataAccess, Field, FieldType, Schema, Value, Writer, WriterOptions};

    #[test]
    fn keys_in_reads_runs_of_blobs_with_pread_and_checks_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let schema = Schema::new(vec![Field::new("blob", FieldType::Bytes)]).unwrap();
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
        let schema = Schema::new(vec![Field::new("blob", FieldType::Bytes)]).unwrap();
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
        assert!(crate::storage::copy_capacity() < 1 << 20);
        assert!(store.with_record(0, <[u8]>::len).unwrap() > 0);
    }
}
