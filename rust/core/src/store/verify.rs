//! `Store::verify`: every byte of a store read and checked (section checksums, padding, the
//! key index against the keys, every record decoded against the schema).

use super::Store;
use crate::error::{Error, Result};
use crate::format::key_entry::key_prefix;
use crate::format::record;
use crate::format::{u64_at, Section, HEADER_SIZE};
use crate::runtime::parallel;
use crate::storage::Storage;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use xxhash_rust::xxh3::xxh3_64;

/// Items checked between two additions to a verify's progress counter (one shared atomic).
const PROGRESS_EVERY: u64 = 1024;

/// Adds `PROGRESS_EVERY` to `done` on every `PROGRESS_EVERY`th item.
fn tick(done: &AtomicU64, item: u64) {
    if item % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
        done.fetch_add(PROGRESS_EVERY, Ordering::Relaxed);
    }
}

impl<B: Storage> Store<B> {
    /// Reads every byte: section checksums, index consistency, and every record decoded against
    /// the schema. Runs in parallel on the docstore pool.
    pub fn verify(&self) -> Result<()>
    where
        B: Sync,
    {
        self.verify_counting(&AtomicU64::new(0))
    }

    /// The steps `verify_counting` counts: each key checked, then each record.
    pub fn verify_steps(&self) -> u64 {
        2 * self.len()
    }

    /// `verify`, adding to `done` as it goes (about `verify_steps()` in all), for a progress bar.
    pub fn verify_counting(&self, done: &AtomicU64) -> Result<()>
    where
        B: Sync,
    {
        // Every byte made readable (nothing to do for a local file; a collection verifies a
        // remote store on a downloaded copy: `Collection::verify`).
        self.buf.ensure_one(0..self.file_len())?;
        // Bytes outside every section (alignment padding) must be zeros and the file must end
        // where the last section does, so that no flipped byte goes unnoticed.
        let mut covered = HEADER_SIZE;
        for range in &self.ranges[..self.header.present().len()] {
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
            self.header.present().par_iter().try_for_each(|&s| {
                if xxh3_64(self.section(s)) != self.header.section(s).checksum {
                    return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
                }
                Ok(())
            })?;
            let n = self.len();
            (0..n).into_par_iter().try_for_each(|rank| {
                tick(done, rank);
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
                    tick(done, pos);
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
