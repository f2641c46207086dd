//! Many store files (shards) read as one store: one id space, one position space.
//!
//! A collection is a directory (docs/collections.md): the shards, each a complete single-file
//! store, plus a global id index and a manifest naming both. Positions are global: shard order,
//! then position within the shard. An id is found by one search in the global index, which is
//! itself a store without fields whose key index maps every id of every shard to its global
//! position; the shard's document check (format v2) then proves that the document read is the
//! one asked for, so a damaged index can fail a lookup but never answer it with another document.
//!
//! A single store file opens as a collection of one shard without an index, so the bindings hold
//! one type whatever was opened.

mod manifest;
mod seal;

pub use manifest::{FileEntry, Manifest, MANIFEST};
pub use seal::seal;

use crate::error::{Error, Result};
use crate::reader::{DataAccess, RecordBatch, Store};
use crate::schema::Schema;
use memmap2::Mmap;
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

pub struct Collection {
    shards: Vec<Store<Mmap>>,
    paths: Vec<PathBuf>,
    /// The global position of each shard's first document, then the total.
    starts: Vec<u64>,
    /// The global id index; `None` for a single store file (its own key index serves).
    index: Option<Store<Mmap>>,
    fingerprint: u64,
}

impl Collection {
    /// Opens a collection directory, or a single store file as a collection of one.
    pub fn open(path: impl AsRef<Path>, access: DataAccess) -> Result<Collection> {
        let path = path.as_ref();
        if std::fs::metadata(path)?.is_dir() {
            Collection::open_dir(path, access)
        } else {
            let store = Store::open_with(path, access)?;
            let fingerprint = store.fingerprint();
            Ok(Collection {
                starts: vec![0, store.len()],
                shards: vec![store],
                paths: vec![path.to_path_buf()],
                index: None,
                fingerprint,
            })
        }
    }

    /// Opens every file the manifest names and checks that each is the one sealed there.
    fn open_dir(dir: &Path, access: DataAccess) -> Result<Collection> {
        let manifest = Manifest::read(dir)?;
        let pinned = |store: &Store<Mmap>, entry: &FileEntry| -> Result<()> {
            if store.fingerprint() != entry.fingerprint()? || store.len() != entry.count {
                return Err(Error::corrupt(format!(
                    "{} in {} is not the file that was sealed there (fingerprint or count \
                     differs): the collection was changed after sealing",
                    entry.file,
                    dir.display()
                )));
            }
            Ok(())
        };
        let index = Store::open(manifest.index.path_in(dir)?)?;
        pinned(&index, &manifest.index)?;
        if !index.schema().fields.is_empty() || !index.checked() {
            return Err(Error::corrupt(
                "the global id index is not a checked store without fields",
            ));
        }
        let (mut shards, mut paths, mut starts) = (Vec::new(), Vec::new(), vec![0]);
        for entry in &manifest.shards {
            let path = entry.path_in(dir)?;
            let shard = Store::open_with(&path, access)?;
            pinned(&shard, entry)?;
            if shard.schema() != shards.first().map_or(shard.schema(), Store::schema) {
                return Err(Error::corrupt(format!(
                    "shard {} has other fields than the first shard",
                    entry.file
                )));
            }
            if !shard.checked() {
                return Err(Error::corrupt(format!(
                    "shard {} lacks document checks (format version 1)",
                    entry.file
                )));
            }
            starts.push(starts.last().copied().unwrap_or(0) + shard.len());
            shards.push(shard);
            paths.push(path);
        }
        // The collection's identity: every file's, in order.
        let mut ids = index.fingerprint().to_le_bytes().to_vec();
        for shard in &shards {
            ids.extend_from_slice(&shard.fingerprint().to_le_bytes());
        }
        Ok(Collection {
            shards,
            paths,
            starts,
            index: Some(index),
            fingerprint: xxh3_64(&ids),
        })
    }

    pub fn len(&self) -> u64 {
        *self.starts.last().expect("starts holds the total")
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn schema(&self) -> &Schema {
        self.shards[0].schema()
    }

    /// The shards in position order (one for a single store file).
    pub fn shards(&self) -> &[Store<Mmap>] {
        &self.shards
    }

    /// The paths the shards were opened from.
    pub fn shard_paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The global id index (`None` for a single store file).
    pub fn index(&self) -> Option<&Store<Mmap>> {
        self.index.as_ref()
    }

    /// Whether this is a collection directory rather than one store file.
    pub fn is_collection(&self) -> bool {
        self.index.is_some()
    }

    /// Whether every document read is checked against its key (always, in a collection).
    pub fn checked(&self) -> bool {
        self.shards.iter().all(Store::checked)
    }

    /// Identifies the contents: a store's header checksum, or a hash of every file's.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Bytes on disk, every file counted.
    pub fn file_len(&self) -> u64 {
        let shards: u64 = self.shards.iter().map(Store::file_len).sum();
        shards + self.index.as_ref().map_or(0, Store::file_len)
    }

    /// The shard holding global position `pos`, and the position inside it.
    fn shard_of(&self, pos: u64) -> Result<(usize, u64)> {
        if pos >= self.len() {
            return Err(Error::OutOfRange {
                index: pos,
                len: self.len(),
            });
        }
        // Shards may be empty: the last shard whose start is <= pos holds it.
        let shard = self.starts.partition_point(|&start| start <= pos) - 1;
        Ok((shard, pos - self.starts[shard]))
    }

    /// `shard_of` for a position the global index gave: out of range means a damaged index.
    fn indexed(&self, pos: u64) -> Result<(usize, u64)> {
        self.shard_of(pos)
            .map_err(|_| Error::corrupt("the global id index gives a position out of range"))
    }

    /// The position of `key`, confirmed by its document's check.
    pub fn position(&self, key: &[u8]) -> Result<Option<u64>> {
        let Some(index) = &self.index else {
            return self.shards[0].position(key);
        };
        let Some(pos) = index.locate(key)? else {
            return Ok(None);
        };
        let (shard, local) = self.indexed(pos)?;
        self.shards[shard].confirm(local, key)?;
        Ok(Some(pos))
    }

    /// `position` of many keys.
    pub fn positions(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        let Some(index) = &self.index else {
            return self.shards[0].positions(keys);
        };
        let found = index.locate_many(keys)?;
        for (pos, key) in found.iter().zip(keys) {
            if let Some(pos) = *pos {
                let (shard, local) = self.indexed(pos)?;
                self.shards[shard].confirm(local, key)?;
            }
        }
        Ok(found)
    }

    /// The key of the document at `pos`.
    pub fn key_at(&self, pos: u64) -> Result<&str> {
        let (shard, local) = self.shard_of(pos)?;
        self.shards[shard].key_at(local)
    }

    /// Appends the raw records of `positions` to `batch`, in request order.
    pub fn read_records(&self, positions: &[u64], batch: &mut RecordBatch) -> Result<()> {
        if self.index.is_none() {
            return self.shards[0].read_records(positions, batch);
        }
        let items = positions
            .iter()
            .map(|&pos| self.shard_of(pos).map(|(s, local)| (s, local, ())))
            .collect::<Result<Vec<_>>>()?;
        self.by_shard(&items, batch, |shard, items, batch| {
            let locals: Vec<u64> = items.iter().map(|&(local, ())| local).collect();
            shard.read_records(&locals, batch)
        })
    }

    /// Positions of many keys (`None` when absent), the records of those found appended to
    /// `batch` in request order, each checked against the key it was asked by.
    pub fn read_many(&self, keys: &[&[u8]], batch: &mut RecordBatch) -> Result<Vec<Option<u64>>> {
        let Some(index) = &self.index else {
            return self.shards[0].read_many(keys, batch);
        };
        let found = index.locate_many(keys)?;
        let items = (found.iter().zip(keys))
            .filter_map(|(pos, &key)| pos.map(|pos| (pos, key)))
            .map(|(pos, key)| self.indexed(pos).map(|(s, local)| (s, local, key)))
            .collect::<Result<Vec<_>>>()?;
        self.by_shard(&items, batch, |shard, items, batch| {
            shard.read_found(items, batch)
        })?;
        Ok(found)
    }

    /// Position of `key` (`None` when absent), its record appended to `batch`, checked against it.
    pub fn read_one(&self, key: &[u8], batch: &mut RecordBatch) -> Result<Option<u64>> {
        let Some(index) = &self.index else {
            return self.shards[0].read_one(key, batch);
        };
        let Some(pos) = index.locate(key)? else {
            return Ok(None);
        };
        let (shard, local) = self.indexed(pos)?;
        self.shards[shard].read_found(&[(local, key)], batch)?;
        Ok(Some(pos))
    }

    /// Reads `items` (shard, position in it, what else `read` needs) shard by shard, each shard's
    /// in one call of `read` (so that its prefetching and grouping apply), then puts the records
    /// back in request order.
    fn by_shard<T: Copy>(
        &self,
        items: &[(usize, u64, T)],
        batch: &mut RecordBatch,
        read: impl Fn(&Store<Mmap>, &[(u64, T)], &mut RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let Some(&(first, _, _)) = items.first() else {
            return Ok(());
        };
        if items.iter().all(|&(s, _, _)| s == first) {
            let local: Vec<(u64, T)> = items.iter().map(|&(_, l, t)| (l, t)).collect();
            return read(&self.shards[first], &local, batch);
        }
        // A stable sort by shard: `order[k]` is the request index of the k-th record read.
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| items[i].0);
        let base = batch.len();
        for group in order.chunk_by(|&a, &b| items[a].0 == items[b].0) {
            let local: Vec<(u64, T)> = group.iter().map(|&i| (items[i].1, items[i].2)).collect();
            read(&self.shards[items[group[0]].0], &local, batch)?;
        }
        // Record `base + k` answers request `order[k]`; request `i` wants record `base + at[i]`.
        let mut at = vec![0; items.len()];
        for (k, &i) in order.iter().enumerate() {
            at[i] = k;
        }
        batch.reorder_from(base, &at)
    }

    /// Reads every byte of every file (see `Store::verify`), and checks that the global index
    /// holds exactly the shards' ids at their global positions.
    pub fn verify(&self) -> Result<()> {
        let Some(index) = &self.index else {
            return self.shards[0].verify();
        };
        index.verify()?;
        for (shard, path) in self.shards.iter().zip(&self.paths) {
            shard.verify().map_err(|e| match e {
                Error::Corrupt(msg) => Error::corrupt(format!("{}: {msg}", path.display())),
                other => other,
            })?;
        }
        if index.len() != self.len() {
            return Err(Error::corrupt(
                "the global id index and the shards count different documents",
            ));
        }
        crate::parallel::pool().install(|| {
            (0..self.len()).into_par_iter().try_for_each(|pos| {
                if index.key_at(pos)? != self.key_at(pos)? {
                    return Err(Error::corrupt(format!(
                        "the global id index and the shards disagree at position {pos}"
                    )));
                }
                Ok(())
            })
        })
    }
}
