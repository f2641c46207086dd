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
//! one type whatever was opened. A remote store or collection (a URL: `storage::remote`) opens
//! as the same type over remote files: the same lookups, over another storage.

mod dir;
mod manifest;
mod seal;

pub use manifest::{FileEntry, Manifest, MANIFEST};
pub use seal::{append, check_replaceable, seal};

use dir::CollectionDir;

use crate::error::{Error, Result};
use crate::schema::Schema;
use crate::storage::remote::{self, Remote, RemoteFile, RemoteOptions};
use crate::storage::StoreFile;
use crate::store::{self, DataAccess, Found, RecordBatch, Store};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

pub struct Collection {
    shards: Vec<Store<StoreFile>>,
    paths: Vec<PathBuf>,
    /// The global position of each shard's first document, then the total.
    starts: Vec<u64>,
    /// The global id index; `None` for a single store file (its own key index serves).
    index: Option<Store<StoreFile>>,
    /// Where the global id index was opened from (what `verify` names).
    index_path: Option<PathBuf>,
    fingerprint: u64,
    /// The client of a remote store or collection (`None`: local files).
    remote: Option<Arc<Remote>>,
}

/// Where `Collection::locate_batch` found a key: the global position, and the shard and the
/// document in it (with where its blob lies, when the index says).
#[derive(Clone, Copy, Debug)]
pub struct Located {
    pub pos: u64,
    shard: usize,
    local: Found,
}

/// A damaged read of a remote store is tried this many times in all, its bytes fetched anew:
/// the cache may have been evicted under it, the network may have handed over bad bytes that
/// passed as the right length, or the cache's disk may have damaged them. The second attempt
/// fetches again what the first read (`remote::invalidate_read`); the third also what every
/// read relies on unasked (the pinned ranges: `RemoteFile::refetch_pinned`). Only a read that
/// fails on bytes the server has just sent raises.
const REMOTE_ATTEMPTS: u32 = 3;

/// Opens of a collection directory in a row that may fail because the directory was replaced
/// (by `seal(..., overwrite=True)`) while each ran; the last failure is the error.
const OPEN_ATTEMPTS: u32 = 8;

impl Collection {
    /// Opens a collection directory, or a single store file as a collection of one.
    pub fn open(path: impl AsRef<Path>, access: DataAccess) -> Result<Collection> {
        let path = path.as_ref();
        if std::fs::metadata(path)?.is_dir() {
            Collection::open_dir(path, access)
        } else {
            let store = Store::open_local(path, access)?;
            Ok(Collection::single(store, path.to_path_buf(), None))
        }
    }

    fn single(store: Store<StoreFile>, path: PathBuf, remote: Option<Arc<Remote>>) -> Collection {
        let fingerprint = store.fingerprint();
        Collection {
            starts: vec![0, store.len()],
            shards: vec![store],
            paths: vec![path],
            index: None,
            index_path: None,
            fingerprint,
            remote,
        }
    }

    /// Opens a remote store (`s3://bucket/corpus.docstore`) or collection (the prefix holding
    /// `docstore-collection.json`, `index.docstore` and the shards). A URL ending in `/` is a
    /// collection; otherwise the object is tried first, then the manifest under it.
    pub fn open_remote(url: &str, options: RemoteOptions) -> Result<Collection> {
        let remote = Remote::new(url, options)?;
        // The credentials a URL may carry stay with the client (`Remote`): the files' URLs, kept
        // and shown from here on, are without them (`storage::url`).
        let shown = crate::storage::url::redact(url);
        let url = crate::storage::url::without_credentials(url)
            .ok_or_else(|| Error::InvalidArgument(format!("{shown}: not a URL")))?;
        if !url.ends_with('/') {
            match RemoteFile::open(&remote, &url) {
                Ok(file) => {
                    let store = Store::open_remote(file)?;
                    return Ok(Collection::single(store, PathBuf::from(url), Some(remote)));
                }
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let base = url.trim_end_matches('/');
        let manifest_url = format!("{base}/{MANIFEST}");
        let bytes = remote
            .get_all(&remote.path_of(&manifest_url)?, &manifest_url)
            .map_err(|e| match e {
                Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
                    Error::Io(std::io::Error::new(
                        io.kind(),
                        format!("no store or collection at {shown} ({io})"),
                    ))
                }
                e => e,
            })?;
        let manifest = Manifest::parse(&bytes, &manifest_url)?;
        let mut urls = Vec::with_capacity(manifest.shards.len() + 1);
        for entry in std::iter::once(&manifest.index).chain(&manifest.shards) {
            // Checked first (nothing outside the collection is asked for), then one path segment
            // per component, escaped: the object named is the manifest's name, whatever it holds.
            let relative = entry.relative()?.to_string_lossy().into_owned();
            let mut file = ::url::Url::parse(base)
                .map_err(|e| Error::InvalidArgument(format!("{shown}: {e}")))?;
            file.path_segments_mut()
                .map_err(|_| Error::InvalidArgument(format!("{shown}: not a URL with a path")))?
                .pop_if_empty()
                .extend(relative.split('/'));
            urls.push(String::from(file));
        }
        // Every file at once: each open is one or two round trips.
        let opened: Vec<Result<Store<StoreFile>>> = std::thread::scope(|scope| {
            let remote = &remote;
            let handles: Vec<_> = urls
                .chunks(urls.len().div_ceil(32).max(1))
                .map(|chunk| {
                    scope.spawn(move || {
                        chunk
                            .iter()
                            .map(|u| RemoteFile::open(remote, u).and_then(Store::open_remote))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("a thread opening a remote file panicked"))
                .collect()
        });
        let mut opened = opened.into_iter();
        let index = (
            opened.next().expect("the index comes first")?,
            PathBuf::from(&urls[0]),
        );
        let shards = opened
            .zip(&urls[1..])
            .map(|(store, url)| store.map(|s| (s, PathBuf::from(url))))
            .collect::<Result<Vec<_>>>()?;
        Collection::assemble(&manifest, &url, index, shards, Some(remote))
    }

    /// Opens every file the manifest names and checks that each is the one sealed there, all
    /// from one directory (see `dir`): a collection replaced meanwhile is opened either as it was
    /// or, once the open that began in the old one fails, as it is now.
    fn open_dir(path: &Path, access: DataAccess) -> Result<Collection> {
        let mut attempt = 1;
        loop {
            let dir = CollectionDir::open(path)?;
            match Collection::open_in(&dir, access) {
                // The old directory's files go once it is replaced: start again in the new one.
                Err(_) if attempt < OPEN_ATTEMPTS && dir.replaced() => attempt += 1,
                other => return other,
            }
        }
    }

    fn open_in(dir: &CollectionDir, access: DataAccess) -> Result<Collection> {
        let manifest = Manifest::read_in(dir)?;
        let open = |entry: &FileEntry, access: DataAccess| -> Result<(Store<StoreFile>, PathBuf)> {
            let relative = entry.relative()?;
            let path = dir.path().join(relative);
            let store = Store::open_local_file(dir.open_file(relative)?, &path, access)?;
            Ok((store, path))
        };
        let index = open(&manifest.index, DataAccess::Mmap)?;
        let shards = (manifest.shards.iter())
            .map(|entry| open(entry, access))
            .collect::<Result<Vec<_>>>()?;
        let name = dir.path().display().to_string();
        Collection::assemble(&manifest, &name, index, shards, None)
    }

    /// A collection from its opened files, once each is checked to be the one the manifest
    /// pins, with the fields of the first and document checks.
    fn assemble(
        manifest: &Manifest,
        name: &str,
        (index, index_path): (Store<StoreFile>, PathBuf),
        opened: Vec<(Store<StoreFile>, PathBuf)>,
        remote: Option<Arc<Remote>>,
    ) -> Result<Collection> {
        let pinned = |store: &Store<StoreFile>, entry: &FileEntry| -> Result<()> {
            if store.fingerprint() != entry.fingerprint()? || store.len() != entry.count {
                return Err(Error::corrupt(format!(
                    "{} in {name} is not the file that was sealed there (fingerprint or count \
                     differs): the collection was changed after sealing",
                    entry.file,
                )));
            }
            Ok(())
        };
        pinned(&index, &manifest.index)?;
        if !index.schema().fields.is_empty() || !index.checked() {
            return Err(Error::corrupt(
                "the global id index is not a checked store without fields",
            ));
        }
        let (mut shards, mut paths, mut starts) = (Vec::new(), Vec::new(), vec![0]);
        for (entry, (shard, path)) in manifest.shards.iter().zip(opened) {
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
            index_path: Some(index_path),
            fingerprint: xxh3_64(&ids),
            remote,
        })
    }

    /// The client of a remote store or collection (its counters), `None` for local files.
    pub fn remote(&self) -> Option<&Arc<Remote>> {
        self.remote.as_ref()
    }

    /// Runs a read; for a remote store, a read that finds damage is run again after evicting
    /// what it read from the cache (see `REMOTE_ATTEMPTS`).
    fn retrying<R>(&self, mut op: impl FnMut() -> Result<R>) -> Result<R> {
        self.retrying_from(|_| op())
    }

    /// `retrying`, `op` told which attempt it is (1 first).
    fn retrying_from<R>(&self, mut op: impl FnMut(u32) -> Result<R>) -> Result<R> {
        if self.remote.is_none() {
            return op(1);
        }
        let now = remote::guard_clock();
        for file in self.index.iter().chain(&self.shards) {
            file.remote_file().map_or(Ok(()), |f| f.guard(now))?;
        }
        let mut attempt = 1;
        loop {
            remote::begin_read();
            match op(attempt) {
                Err(Error::Corrupt(_)) if attempt < REMOTE_ATTEMPTS => {
                    attempt += 1;
                    let files = self.index.iter().chain(&self.shards);
                    remote::invalidate_read(
                        files.filter_map(Store::remote_file),
                        attempt == REMOTE_ATTEMPTS,
                    )?;
                }
                Err(e @ Error::Corrupt(_)) => {
                    // Damaged as the server sent it: not left in the cache for the next read.
                    let files = self.index.iter().chain(&self.shards);
                    remote::invalidate_read(files.filter_map(Store::remote_file), false)?;
                    return Err(e);
                }
                Ok(found) if attempt > 1 => {
                    if let Some(remote) = &self.remote {
                        remote.stats.heals.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(found);
                }
                other => return other,
            }
        }
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
    pub fn shards(&self) -> &[Store<StoreFile>] {
        &self.shards
    }

    /// The paths the shards were opened from.
    pub fn shard_paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The global id index (`None` for a single store file).
    pub fn index(&self) -> Option<&Store<StoreFile>> {
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

    /// The shard of a document the global index found, and the document in it: its position
    /// there and, where the index locates the shards' blobs (format v3), where its blob lies.
    /// Out of range means a damaged index.
    fn indexed(&self, found: Found) -> Result<(usize, Found)> {
        let (shard, local) = (self.shard_of(found.pos))
            .map_err(|_| Error::corrupt("the global id index gives a position out of range"))?;
        let located = self
            .index
            .as_ref()
            .is_some_and(|i| i.header().locates_shard_blobs());
        let blob = found.blob.filter(|_| located);
        Ok((shard, Found { pos: local, blob }))
    }

    /// The position of `key`, confirmed by its document's check.
    pub fn position(&self, key: &[u8]) -> Result<Option<u64>> {
        self.retrying(|| self.position_once(key))
    }

    fn position_once(&self, key: &[u8]) -> Result<Option<u64>> {
        let Some(index) = &self.index else {
            return self.shards[0].position(key);
        };
        let Some(found) = index.locate(key)? else {
            return Ok(None);
        };
        let (shard, local) = self.indexed(found)?;
        self.shards[shard].confirm(local, key)?;
        Ok(Some(found.pos))
    }

    /// `position` of many keys.
    pub fn positions(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        self.retrying(|| self.positions_once(keys))
    }

    fn positions_once(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        let Some(index) = &self.index else {
            return self.shards[0].positions(keys);
        };
        let found = index.locate_many(keys)?;
        for (found, key) in found.iter().zip(keys) {
            if let Some(found) = *found {
                let (shard, local) = self.indexed(found)?;
                self.shards[shard].confirm(local, key)?;
            }
        }
        Ok(found.iter().map(|f| f.map(|f| f.pos)).collect())
    }

    /// The key of the document at `pos`.
    pub fn key_at(&self, pos: u64) -> Result<&str> {
        self.retrying(|| {
            let (shard, local) = self.shard_of(pos)?;
            self.shards[shard].key_at(local)
        })
    }

    /// `key_at` of a position whose record has just been read (`Store::key_at_after_read`).
    pub fn key_at_after_read(&self, pos: u64) -> Result<&str> {
        self.retrying(|| {
            let (shard, local) = self.shard_of(pos)?;
            self.shards[shard].key_at_after_read(local)
        })
    }

    /// Runs `each` on the position and key of every document of `positions` (clipped to the
    /// collection), in order, each key proved by its document's check (`Store::keys_in`).
    pub fn keys_in(
        &self,
        positions: std::ops::Range<u64>,
        mut each: impl FnMut(u64, &str) -> Result<()>,
    ) -> Result<()> {
        let end = positions.end.min(self.len());
        let mut pos = positions.start;
        while pos < end {
            let (shard, local) = self.shard_of(pos)?;
            let take = (self.starts[shard + 1] - pos).min(end - pos);
            let (start, base) = (pos, self.starts[shard]);
            // A retried read (remote) calls `each` again from the shard's part's first key.
            let mut done = start;
            self.retrying(|| {
                self.shards[shard].keys_in(local + (done - start)..local + take, |p, key| {
                    each(base + p, key)?;
                    done = base + p + 1;
                    Ok(())
                })
            })?;
            pos += take;
        }
        Ok(())
    }

    /// For a remote store, fetches at once what `read_records(positions)` will read, so that
    /// reading it in chunks (on several threads, `read_prefetched`) waits on nothing: a batch is
    /// a few rounds of concurrent requests, not a few per chunk. Nothing to do for local files.
    pub fn prefetch_records(&self, positions: &[u64]) -> Result<()> {
        if self.remote.is_none() {
            return Ok(());
        }
        self.retrying(|| {
            let mut by_shard: Vec<Vec<Found>> = vec![Vec::new(); self.shards.len()];
            for &pos in positions {
                if let Ok((shard, local)) = self.shard_of(pos) {
                    by_shard[shard].push(Found::at(local));
                }
            }
            // Reads by position check each document with its key.
            self.fetch_shards(&by_shard, self.checked())
        })
    }

    /// Fetches what reading each remote shard's part of a batch needs (with `keys`, the keys of
    /// its positions too): the shards with bytes missing at once, a thread each, so that they
    /// make one round of requests rather than one per shard. Which shards miss bytes is looked
    /// up first, on this thread: a warm batch starts no thread (one per shard per batch cost a
    /// warm 64-shard batch 40x its time, measured).
    fn fetch_shards(&self, parts: &[Vec<Found>], keys: bool) -> Result<()> {
        let cold: Vec<(&Store<StoreFile>, &[Found])> = (self.shards.iter().zip(parts))
            .filter(|(shard, part)| !part.is_empty() && shard.needs_fetch(part, keys))
            .map(|(shard, part)| (shard, part.as_slice()))
            .collect();
        match cold.as_slice() {
            [] => Ok(()),
            [(shard, part)] => shard.prefetch_reads(part, keys),
            _ => std::thread::scope(|scope| {
                let handles: Vec<_> = (cold.iter())
                    .map(|&(shard, part)| scope.spawn(move || shard.prefetch_reads(part, keys)))
                    .collect();
                handles
                    .into_iter()
                    .try_for_each(|h| h.join().expect("a prefetching thread panicked"))
            }),
        }
    }

    /// Finds many keys for reading, the batch searched once: for a remote store, what reading
    /// them needs is then fetched in a few rounds of concurrent requests (the index blocks, then
    /// the blobs, which a format-v3 index locates), so that `read_located` and `confirm_located`
    /// go through the batch chunk by chunk, on several threads, without searching again or
    /// waiting on the network. Nothing is confirmed here: those check each document. Each key
    /// comes back with what was found for it, in order: what those take.
    pub fn locate_batch<'k>(&self, keys: &[&'k [u8]]) -> Result<Vec<(&'k [u8], Option<Located>)>> {
        if self.remote.is_none() {
            return self.locate_once(keys);
        }
        self.retrying(|| {
            let located = self.locate_once(keys)?;
            let mut by_shard: Vec<Vec<Found>> = vec![Vec::new(); self.shards.len()];
            for (_, l) in located.iter() {
                if let Some(l) = l {
                    by_shard[l.shard].push(l.local);
                }
            }
            self.fetch_shards(&by_shard, false)?;
            Ok(located)
        })
    }

    fn locate_once<'k>(&self, keys: &[&'k [u8]]) -> Result<Vec<(&'k [u8], Option<Located>)>> {
        let Some(index) = &self.index else {
            let found = self.shards[0].locate_many(keys)?;
            let at = |local: Found| Located {
                pos: local.pos,
                shard: 0,
                local,
            };
            return Ok(keys
                .iter()
                .zip(found)
                .map(|(&k, f)| (k, f.map(at)))
                .collect());
        };
        let found = index.locate_many(keys)?;
        let mut located = Vec::with_capacity(keys.len());
        for (&key, found) in keys.iter().zip(found) {
            let at = found.map(|found| {
                let (shard, local) = self.indexed(found)?;
                Ok::<_, Error>(Located {
                    pos: found.pos,
                    shard,
                    local,
                })
            });
            located.push((key, at.transpose()?));
        }
        Ok(located)
    }

    /// `read_many` of keys that `locate_batch` found (`items`: each key with what was found):
    /// no second search. A read that finds damage (a remote store) is run again as `read_many`,
    /// searching with bytes fetched anew: what the search read may be what is damaged.
    pub fn read_located(
        &self,
        items: &[(&[u8], Option<Located>)],
        batch: &mut RecordBatch,
    ) -> Result<Vec<Option<u64>>> {
        let base = batch.len();
        self.retrying_from(|attempt| {
            batch.truncate(base);
            if attempt > 1 {
                return self.read_many_once(&keys_of(items), batch);
            }
            let mut found: Vec<(&[u8], Located)> = Vec::with_capacity(items.len());
            found.extend(items.iter().filter_map(|&(key, l)| l.map(|l| (key, l))));
            self.read_across(
                &found,
                false,
                self.remote.is_some(),
                |&(_, l)| (l.shard, l.local),
                |&(key, l)| self.shards[l.shard].with_record_of(l.local, key, |r| batch.push(r))?,
            )?;
            Ok(items.iter().map(|(_, l)| l.map(|l| l.pos)).collect())
        })
    }

    /// `positions` of keys that `locate_batch` found (see `read_located`): each confirmed by
    /// its document's check, without a second search.
    pub fn confirm_located(&self, items: &[(&[u8], Option<Located>)]) -> Result<Vec<Option<u64>>> {
        self.retrying_from(|attempt| {
            if attempt > 1 {
                return self.positions_once(&keys_of(items));
            }
            for &(key, l) in items {
                if let Some(l) = l {
                    self.shards[l.shard].confirm(l.local, key)?;
                }
            }
            Ok(items.iter().map(|(_, l)| l.map(|l| l.pos)).collect())
        })
    }

    /// For a remote store, fetches the keys of positions `range` at once (see
    /// `Store::prefetch_keys`), so that `key_at` over them waits on nothing.
    pub fn prefetch_keys(&self, range: std::ops::Range<u64>) -> Result<()> {
        if self.remote.is_none() || range.is_empty() {
            return Ok(());
        }
        let end = range.end.min(self.len());
        let mut pos = range.start;
        while pos < end {
            let (shard, local) = self.shard_of(pos)?;
            let take = (self.starts[shard + 1] - pos).min(end - pos);
            self.shards[shard].prefetch_keys(local..local + take)?;
            pos += take;
        }
        Ok(())
    }

    /// Appends the raw records of `positions` to `batch`, in request order.
    pub fn read_records(&self, positions: &[u64], batch: &mut RecordBatch) -> Result<()> {
        let base = batch.len();
        self.retrying(|| {
            batch.truncate(base);
            self.read_records_once(positions, batch, false)
        })
    }

    /// `read_records` of positions that `prefetch_records` fetched: a remote store's first
    /// attempt does not look for missing bytes again (any the cache lost meanwhile are fetched
    /// as read); one that finds damage fetches anew.
    pub fn read_prefetched(&self, positions: &[u64], batch: &mut RecordBatch) -> Result<()> {
        let base = batch.len();
        let fetched = self.remote.is_some();
        self.retrying_from(|attempt| {
            batch.truncate(base);
            self.read_records_once(positions, batch, fetched && attempt == 1)
        })
    }

    fn read_records_once(
        &self,
        positions: &[u64],
        batch: &mut RecordBatch,
        fetched: bool,
    ) -> Result<()> {
        if self.index.is_none() && !fetched {
            return self.shards[0].read_records(positions, batch);
        }
        let items = (positions.iter())
            .map(|&pos| self.shard_of(pos).map(|(s, local)| (s, Found::at(local))))
            .collect::<Result<Vec<_>>>()?;
        // Every shard is format 2 (sealing refuses others): a read by position is checked with
        // the key of the position.
        let keys = self.shards[0].checked();
        self.read_across(
            &items,
            keys,
            fetched,
            |&at| at,
            |&(shard, local)| self.shards[shard].with_record(local.pos, |raw| batch.push(raw))?,
        )
    }

    /// Positions of many keys (`None` when absent), the records of those found appended to
    /// `batch` in request order, each checked against the key it was asked by.
    pub fn read_many(&self, keys: &[&[u8]], batch: &mut RecordBatch) -> Result<Vec<Option<u64>>> {
        let base = batch.len();
        self.retrying(|| {
            batch.truncate(base);
            self.read_many_once(keys, batch)
        })
    }

    fn read_many_once(&self, keys: &[&[u8]], batch: &mut RecordBatch) -> Result<Vec<Option<u64>>> {
        let Some(index) = &self.index else {
            return self.shards[0].read_many(keys, batch);
        };
        let found = index.locate_many(keys)?;
        let items = (found.iter().zip(keys))
            .filter_map(|(found, &key)| found.map(|found| (found, key)))
            .map(|(found, key)| self.indexed(found).map(|(s, local)| (s, local, key)))
            .collect::<Result<Vec<_>>>()?;
        self.read_across(
            &items,
            false,
            false,
            |&(s, local, _)| (s, local),
            |&(s, local, key)| self.shards[s].with_record_of(local, key, |raw| batch.push(raw))?,
        )?;
        Ok(found.iter().map(|f| f.map(|f| f.pos)).collect())
    }

    /// Position of `key` (`None` when absent), its record appended to `batch`, checked against it.
    pub fn read_one(&self, key: &[u8], batch: &mut RecordBatch) -> Result<Option<u64>> {
        let base = batch.len();
        self.retrying(|| {
            batch.truncate(base);
            self.read_one_once(key, batch)
        })
    }

    fn read_one_once(&self, key: &[u8], batch: &mut RecordBatch) -> Result<Option<u64>> {
        let Some(index) = &self.index else {
            return self.shards[0].read_one(key, batch);
        };
        let Some(found) = index.locate(key)? else {
            return Ok(None);
        };
        let (shard, local) = self.indexed(found)?;
        self.shards[shard].read_found(&[(local, key)], batch)?;
        Ok(Some(found.pos))
    }

    /// Runs `read` on `items` in request order, `at` naming each one's shard and position there:
    /// each shard's part of the batch prepared first (fetched from a remote store, or its pages
    /// asked for when they look uncached), then one prefetching pipeline across the shards, so
    /// that a batch spread over many shards overlaps its memory loads as one file's does (read
    /// shard by shard, 64 shards left one or two documents a group and nothing to overlap).
    /// With `fetched`, what a remote store reads was fetched for the batch already.
    fn read_across<T>(
        &self,
        items: &[T],
        keys: bool,
        fetched: bool,
        at: impl Fn(&T) -> (usize, Found),
        read: impl FnMut(&T) -> Result<()>,
    ) -> Result<()> {
        if let ([shard], false) = (self.shards.as_slice(), fetched || self.remote.is_some()) {
            // One local file: its hints straight from the batch, without a copy per shard.
            if shard.prepares_batch(items.len()) {
                shard.prepare_batch(items.iter().map(|i| at(i).1), items.len(), keys)?;
            }
        } else if !fetched && (self.shards.iter()).any(|shard| shard.prepares_batch(items.len())) {
            let mut by_shard: Vec<Vec<Found>> = vec![Vec::new(); self.shards.len()];
            for (shard, local) in items.iter().map(&at) {
                by_shard[shard].push(local);
            }
            // Remote shards fetch at once (one round for them all); local ones only hint.
            match self.remote.is_some() {
                true => self.fetch_shards(&by_shard, keys)?,
                false => (self.shards.iter().zip(&by_shard))
                    .filter(|(_, part)| !part.is_empty())
                    .try_for_each(|(shard, part)| {
                        shard.prepare_batch(part.iter().copied(), items.len(), keys)
                    })?,
            }
        }
        let at = |item: &T| {
            let (shard, local) = at(item);
            (&self.shards[shard], local)
        };
        store::read_pipelined(items, at, keys, read)
    }

    /// A remote collection's files downloaded whole into temporary files, each checked to be
    /// the file opened (its fingerprint): what `verify` reads.
    fn downloaded(&self) -> Result<Collection> {
        let load = |store: &Store<StoreFile>| -> Result<Store<StoreFile>> {
            let file = store
                .remote_file()
                .expect("a remote collection's files are remote");
            let copy = Store::from_bytes(StoreFile::local(file.download()?))?;
            if copy.fingerprint() != store.fingerprint() {
                return Err(Error::corrupt(format!(
                    "{} changed since it was opened",
                    file.url()
                )));
            }
            Ok(copy)
        };
        Ok(Collection {
            shards: self.shards.iter().map(load).collect::<Result<_>>()?,
            paths: self.paths.clone(),
            starts: self.starts.clone(),
            index: self.index.as_ref().map(load).transpose()?,
            index_path: self.index_path.clone(),
            fingerprint: self.fingerprint,
            remote: None,
        })
    }

    /// Reads every byte of every file (see `Store::verify`), and checks that the global index
    /// holds exactly the shards' ids at their global positions.
    pub fn verify(&self) -> Result<()> {
        self.verify_counting(&std::sync::atomic::AtomicU64::new(0))
    }

    /// The steps `verify_counting` counts (`Store::verify_steps` of every file).
    pub fn verify_steps(&self) -> u64 {
        let index = self.index.as_ref().map_or(0, Store::verify_steps);
        index + self.shards.iter().map(Store::verify_steps).sum::<u64>()
    }

    /// `verify`, adding to `done` as it goes (about `verify_steps()` in all), for a progress bar.
    pub fn verify_counting(&self, done: &std::sync::atomic::AtomicU64) -> Result<()> {
        if self.remote.is_some() {
            return self.downloaded()?.verify_counting(done);
        }
        let Some(index) = &self.index else {
            return self.shards[0].verify_counting(done);
        };
        // Every file is read, and every damaged one named, not only the first.
        let index_path = self
            .index_path
            .as_deref()
            .unwrap_or(Path::new("the global id index"));
        let files = std::iter::once((index, index_path)).chain(
            self.shards
                .iter()
                .zip(self.paths.iter().map(PathBuf::as_path)),
        );
        let mut damaged = Vec::new();
        for (store, path) in files {
            match store.verify_counting(done) {
                Ok(()) => {}
                Err(Error::Corrupt(msg)) => damaged.push(format!("{}: {msg}", path.display())),
                Err(other) => return Err(other),
            }
        }
        match damaged.len() {
            0 => {}
            1 => return Err(Error::corrupt(damaged.remove(0))),
            n => {
                return Err(Error::corrupt(format!(
                    "{n} damaged files: {}",
                    damaged.join("; ")
                )))
            }
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
            })?;
            if !index.header().locates_shard_blobs() {
                return Ok(());
            }
            // Every entry locates its document's blob in its shard.
            (0..index.len()).into_par_iter().try_for_each(|rank| {
                let found = index.found_at(rank)?;
                let (shard, local) = self.shard_of(found.pos)?;
                let blob = self.shards[shard].blob_range_at(local)?;
                if found.blob != Some((blob.start as u64, blob.len() as u64)) {
                    return Err(Error::corrupt(format!(
                        "the global id index locates the blob of position {} elsewhere than \
                         its shard holds it",
                        found.pos
                    )));
                }
                Ok(())
            })
        })
    }
}

/// The keys of `read_located`'s items.
fn keys_of<'k>(items: &[(&'k [u8], Option<Located>)]) -> Vec<&'k [u8]> {
    items.iter().map(|&(key, _)| key).collect()
}
