//! Many store files (shards) read as one store: one id space, one position space.
//!
//! A collection is a directory (docs/collections.md): the shards, each a complete single-file
//! store, plus a global id index and a manifest naming both. Positions are global: shard order,
//! then position within the shard. An id is found by one search in the global index, which is
//! itself a store without fields whose key index maps every id of every shard to its global
//! position; the shard's document check (format v2) then proves that the document read is the
//! one asked for, so a damaged index can fail a lookup but never answer it with another document.
//!
//! A single store file opens as a collection of one shard whose own key index maps its ids
//! (`Ids::Own`): its positions are the collection's, so every lookup takes the same route as a
//! collection's, and the bindings hold one type whatever was opened. A remote store or
//! collection (a URL) opens as the same type over remote files: the same lookups, over another
//! storage, whose `Source` decides what a remote read needs besides (retries, fetching a batch
//! at once, a whole copy to verify).

mod batch;
mod dir;
mod manifest;
mod open;
mod seal;
mod verify;

pub use batch::{LocatedChunk, RunChunks};
pub use manifest::{FileEntry, Manifest, MANIFEST};
pub use open::{is_url, Location};
pub use seal::{append, check_replaceable, seal, seal_counting, Progress as SealProgress};

use crate::error::{Error, Result};
use crate::format::schema::Schema;
use crate::storage::source::Source;
use crate::storage::StoreFile;
use crate::store::{self, Found, RecordBatch, Store};
use std::path::PathBuf;

pub struct Collection {
    shards: Vec<Store<StoreFile>>,
    paths: Vec<PathBuf>,
    /// The global position of each shard's first document, then the total.
    starts: Vec<u64>,
    /// The key index that maps ids to global positions.
    ids: Ids,
    /// Whether what `ids` finds locates the blob in the shard (see `indexed`).
    locates_blobs: bool,
    fingerprint: u64,
    /// Where the files come from (local, or a remote location and its client).
    source: Source,
}

/// Where a collection looks its ids up. A single store file is a collection of one shard: its
/// own key index gives its positions, which are the collection's, so it needs no index of its
/// own, and every lookup goes the same way as through a global index. (A second store for
/// it, or an `Option` to test at every lookup, is what this replaces.)
// One per collection, never moved once opened: a box would cost every lookup a pointer chase.
#[allow(clippy::large_enum_variant)]
enum Ids {
    /// The only shard's own key index.
    Own,
    /// A global id index (a store without fields) over the shards, and where it was opened
    /// from (what `verify` names).
    Global(Store<StoreFile>, PathBuf),
}

/// Where `Collection::locate_batch` found a key: the global position, and the shard and the
/// document in it (with where its blob lies, when the index says).
#[derive(Clone, Copy, Debug)]
pub struct Located {
    pub pos: u64,
    shard: usize,
    local: Found,
}

impl Collection {
    /// Where the files come from: local, or a remote location (its counters: `stats`).
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Whether a read may wait on the network (a remote location): the one question about
    /// where bytes live that a caller asks, to let others run meanwhile (the bindings release
    /// Python's GIL). Everything else about the tiers is decided below this type.
    #[inline(always)]
    pub fn may_block(&self) -> bool {
        self.source.may_block()
    }

    /// The node cache's bytes: what this collection's files hold there, and what the cache
    /// directory holds in all (`None` for local files).
    pub fn cache_usage(&self) -> Option<(u64, u64)> {
        self.source.cache_usage(self.files().map(Store::storage))
    }

    /// Every file read: the global id index, if any, then the shards.
    fn files(&self) -> impl Iterator<Item = &Store<StoreFile>> + Clone {
        self.index().into_iter().chain(&self.shards)
    }

    /// Runs a read of the files (`op` told which attempt it is, 1 first): once, or for a remote
    /// store once more on bytes fetched anew each time it finds damage (`Source::run`).
    fn retrying<R>(&self, op: impl FnMut(u32) -> Result<R>) -> Result<R> {
        self.source.run(|| self.files().map(Store::storage), op)
    }

    /// `retrying` of a read that appends records to `batch`: each attempt starts from what
    /// `batch` held before.
    fn retrying_into<R>(
        &self,
        batch: &mut RecordBatch,
        mut op: impl FnMut(u32, &mut RecordBatch) -> Result<R>,
    ) -> Result<R> {
        let base = batch.len();
        self.retrying(|attempt| {
            batch.truncate(base);
            op(attempt, batch)
        })
    }

    /// The key index ids are looked up in: the global one, or the only shard's own.
    fn id_index(&self) -> &Store<StoreFile> {
        match &self.ids {
            Ids::Global(index, _) => index,
            Ids::Own => &self.shards[0],
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

    /// The user metadata of the collection: that of its shards, which all hold the same
    /// (format v5; None without).
    pub fn metadata(&self) -> Option<&str> {
        self.shards[0].metadata()
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
        match &self.ids {
            Ids::Global(index, _) => Some(index),
            Ids::Own => None,
        }
    }

    /// Whether this is a collection directory rather than one store file.
    pub fn is_collection(&self) -> bool {
        matches!(self.ids, Ids::Global(..))
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
        self.files().map(Store::file_len).sum()
    }

    /// The shard holding global position `pos`, and the position inside it.
    #[inline(always)]
    fn shard_of(&self, pos: u64) -> Result<(usize, u64)> {
        let len = self.len();
        if pos >= len {
            return Err(Error::OutOfRange { index: pos, len });
        }
        let shard = match self.starts.len() {
            // One shard (a single store file, say): its positions are the collection's. Not
            // searched: this is on every lookup's path.
            2 => return Ok((0, pos)),
            // Shards may be empty: the last shard whose start is <= pos holds it.
            _ => self.starts.partition_point(|&start| start <= pos) - 1,
        };
        Ok((shard, pos - self.starts[shard]))
    }

    /// The shard of a document the id index found, and the document in it: its position
    /// there and, where the index locates the shards' blobs (format v3), where its blob lies.
    /// Out of range means a damaged index. (Inlined: it is on every lookup's path.)
    #[inline(always)]
    fn indexed(&self, found: Found) -> Result<(usize, Found)> {
        let (shard, local) = (self.shard_of(found.pos))
            .map_err(|_| Error::corrupt("the global id index gives a position out of range"))?;
        let blob = found.blob.filter(|_| self.locates_blobs);
        Ok((shard, Found { pos: local, blob }))
    }

    /// The position of `key`, confirmed by its document's check.
    pub fn position(&self, key: &[u8]) -> Result<Option<u64>> {
        self.retrying(|_| self.position_once(key))
    }

    fn position_once(&self, key: &[u8]) -> Result<Option<u64>> {
        let Some(found) = self.id_index().locate(key)? else {
            return Ok(None);
        };
        let (shard, local) = self.indexed(found)?;
        self.shards[shard].confirm(local, key)?;
        Ok(Some(found.pos))
    }

    /// `position` of many keys.
    pub fn positions(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        self.retrying(|_| self.positions_once(keys))
    }

    fn positions_once(&self, keys: &[&[u8]]) -> Result<Vec<Option<u64>>> {
        let found = self.id_index().locate_many(keys)?;
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
        self.retrying(|_| {
            let (shard, local) = self.shard_of(pos)?;
            self.shards[shard].key_at(local)
        })
    }

    /// `key_at` of a position whose record has just been read (`Store::key_at_after_read`).
    pub fn key_at_after_read(&self, pos: u64) -> Result<&str> {
        self.retrying(|_| {
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
            self.retrying(|_| {
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

    /// Prepares at once what `read_records(positions)` will read (`prepare_shards`), so that
    /// reading it in chunks (on several threads, `read_prefetched`) waits on nothing: from a
    /// remote store a batch is a few rounds of concurrent requests, not a few per chunk.
    pub fn prefetch_records(&self, positions: &[u64]) -> Result<()> {
        let by_shard = self.by_shard(positions);
        // Reads by position check each document with its key.
        self.retrying(|_| self.prepare_shards(&by_shard, positions.len(), self.checked()))
    }

    /// Loads the documents at `positions` before they are read, in the background of a
    /// caller that knows they will be (a training loader's next batches): from a remote store
    /// into the node cache, in rounds of concurrent requests, the shards at once; from local
    /// files into the page cache, every range asked for at once so that the device reads them
    /// at depth. Returns the bytes fetched or asked for (0 when all were there). Positions out
    /// of range are left for the read to report.
    pub fn load_ahead(&self, positions: &[u64]) -> Result<u64> {
        let by_shard = self.by_shard(positions);
        let keys = self.checked(); // reads by position check each document with its key
        self.retrying(|_| {
            let bytes = std::sync::atomic::AtomicU64::new(0);
            let parts: Vec<(&Store<StoreFile>, &[Found])> = (self.shards.iter().zip(&by_shard))
                .filter(|(_, part)| !part.is_empty())
                .map(|(shard, part)| (shard, part.as_slice()))
                .collect();
            self.source.prepare(
                &parts,
                |&(shard, part)| shard.needs_fetch(part, keys),
                |&(shard, part)| {
                    let loaded = shard.load_ahead(part.iter().copied(), part.len(), keys)?;
                    bytes.fetch_add(loaded, std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                },
            )?;
            Ok(bytes.into_inner())
        })
    }

    /// Loads the index of every file (the global index and each shard's sections but the
    /// documents), read whole: a first pass over cold documents then reads one page a
    /// document, not one for the index too. Returns the bytes fetched or read.
    pub fn load_index(&self) -> Result<u64> {
        self.retrying(|_| self.files().map(Store::load_index).sum())
    }

    /// `positions` as each shard's part (positions out of range left out).
    fn by_shard(&self, positions: &[u64]) -> Vec<Vec<Found>> {
        let mut by_shard: Vec<Vec<Found>> = vec![Vec::new(); self.shards.len()];
        for &pos in positions {
            if let Ok((shard, local)) = self.shard_of(pos) {
                by_shard[shard].push(Found::at(local));
            }
        }
        by_shard
    }

    /// Prepares what reading each shard's part of a batch of `len` reads (with `keys`, the keys
    /// of its positions too), as the source's policy says (`Source::prepare`): remote shards
    /// with bytes missing fetch at once, a thread each, so that they make one round of requests
    /// rather than one per shard (which shards miss bytes is looked up first, on this thread: a
    /// warm batch starts no thread; one per shard per batch cost a warm 64-shard batch 40x its
    /// time, measured); local shards that look cold ask for their pages.
    fn prepare_shards(&self, parts: &[Vec<Found>], len: usize, keys: bool) -> Result<()> {
        let parts: Vec<(&Store<StoreFile>, &[Found])> = (self.shards.iter().zip(parts))
            .filter(|(shard, part)| !part.is_empty() && shard.prepares_batch(len))
            .map(|(shard, part)| (shard, part.as_slice()))
            .collect();
        self.source.prepare(
            &parts,
            |&(shard, part)| shard.needs_fetch(part, keys),
            |&(shard, part)| shard.prepare_batch(part.iter().copied(), len, keys),
        )
    }

    /// Finds many keys for reading, the batch searched once: for a remote store, what reading
    /// them needs is then fetched in a few rounds of concurrent requests (the index blocks, then
    /// the blobs, which a format-v3 index locates), so that `read_located` and `confirm_located`
    /// go through the batch chunk by chunk, on several threads, without searching again or
    /// waiting on the network. Nothing is confirmed here: those check each document. Each key
    /// comes back with what was found for it, in order: what those take.
    pub fn locate_batch<'k>(&self, keys: &[&'k [u8]]) -> Result<Vec<(&'k [u8], Option<Located>)>> {
        self.retrying(|_| {
            let located = self.locate_once(keys)?;
            if (self.shards.iter()).any(|shard| shard.prepares_batch(located.len())) {
                let mut by_shard: Vec<Vec<Found>> = vec![Vec::new(); self.shards.len()];
                for (_, l) in located.iter() {
                    if let Some(l) = l {
                        by_shard[l.shard].push(l.local);
                    }
                }
                self.prepare_shards(&by_shard, located.len(), false)?;
            }
            Ok(located)
        })
    }

    fn locate_once<'k>(&self, keys: &[&'k [u8]]) -> Result<Vec<(&'k [u8], Option<Located>)>> {
        let mut located = Vec::with_capacity(keys.len());
        self.id_index().locate_each(keys, |i, found| {
            let at = match found {
                Some(found) => {
                    let (shard, local) = self.indexed(found)?;
                    Some(Located {
                        pos: found.pos,
                        shard,
                        local,
                    })
                }
                None => None,
            };
            located.push((keys[i], at));
            Ok(())
        })?;
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
        self.retrying_into(batch, |attempt, batch| {
            if attempt > 1 {
                return self.read_many_once(&keys_of(items), batch);
            }
            let mut found: Vec<(&[u8], Located)> = Vec::with_capacity(items.len());
            found.extend(items.iter().filter_map(|&(key, l)| l.map(|l| (key, l))));
            // Prepared by `locate_batch`.
            self.read_across(
                &found,
                false,
                true,
                |&(_, l)| (l.shard, l.local),
                |&(key, l)| self.shards[l.shard].with_record_of(l.local, key, |r| batch.push(r))?,
            )?;
            Ok(items.iter().map(|(_, l)| l.map(|l| l.pos)).collect())
        })
    }

    /// `positions` of keys that `locate_batch` found (see `read_located`): each confirmed by
    /// its document's check, without a second search.
    pub fn confirm_located(&self, items: &[(&[u8], Option<Located>)]) -> Result<Vec<Option<u64>>> {
        self.retrying(|attempt| {
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

    /// Fetches the keys of positions `range` at once where reads fetch (see
    /// `Store::prefetch_keys`, `Source::fetch_ahead`), so that `key_at` over them waits on
    /// nothing.
    pub fn prefetch_keys(&self, range: std::ops::Range<u64>) -> Result<()> {
        self.source.fetch_ahead(|| {
            let end = range.end.min(self.len());
            let mut pos = range.start;
            while pos < end {
                let (shard, local) = self.shard_of(pos)?;
                let take = (self.starts[shard + 1] - pos).min(end - pos);
                self.shards[shard].prefetch_keys(local..local + take)?;
                pos += take;
            }
            Ok(())
        })
    }

    /// Appends the raw records of `positions` to `batch`, in request order.
    pub fn read_records(&self, positions: &[u64], batch: &mut RecordBatch) -> Result<()> {
        self.retrying_into(batch, |_, batch| {
            self.read_records_once(positions, batch, false)
        })
    }

    /// `read_records` of positions that `prefetch_records` prepared: the first attempt does not
    /// prepare them again (any bytes a cache lost meanwhile are fetched as read); one that finds
    /// damage fetches anew.
    pub fn read_prefetched(&self, positions: &[u64], batch: &mut RecordBatch) -> Result<()> {
        self.retrying_into(batch, |attempt, batch| {
            self.read_records_once(positions, batch, attempt == 1)
        })
    }

    fn read_records_once(
        &self,
        positions: &[u64],
        batch: &mut RecordBatch,
        prepared: bool,
    ) -> Result<()> {
        // Every shard is format 2 (sealing refuses others): a read by position is checked with
        // the key of the position.
        let keys = self.shards[0].checked();
        if let [shard] = self.shards.as_slice() {
            // One shard: its positions are the collection's (`shard_of`), read as they are,
            // without a list of (shard, position) pairs (~100 instructions a document of a
            // `take` of 1024).
            let len = self.len();
            if let Some(&index) = positions.iter().find(|&&pos| pos >= len) {
                return Err(Error::OutOfRange { index, len });
            }
            return self.read_across(
                positions,
                keys,
                prepared,
                |&pos| (0, Found::at(pos)),
                |&pos| shard.with_record(pos, |raw| batch.push(raw))?,
            );
        }
        let items = (positions.iter())
            .map(|&pos| self.shard_of(pos).map(|(s, local)| (s, Found::at(local))))
            .collect::<Result<Vec<_>>>()?;
        self.read_across(
            &items,
            keys,
            prepared,
            |&at| at,
            |&(shard, local)| self.shards[shard].with_record(local.pos, |raw| batch.push(raw))?,
        )
    }

    /// Positions of many keys (`None` when absent), the records of those found appended to
    /// `batch` in request order, each checked against the key it was asked by.
    pub fn read_many(&self, keys: &[&[u8]], batch: &mut RecordBatch) -> Result<Vec<Option<u64>>> {
        self.retrying_into(batch, |_, batch| self.read_many_once(keys, batch))
    }

    fn read_many_once(&self, keys: &[&[u8]], batch: &mut RecordBatch) -> Result<Vec<Option<u64>>> {
        let found = self.id_index().locate_many(keys)?;
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
        (self.with_one(key, |pos, raw| batch.push(raw).map(|()| pos))).and_then(Option::transpose)
    }

    /// Runs `f` on the raw record at `pos` (checked against its key, decoded in this thread's
    /// buffer), without a copy.
    pub fn with_at<R>(&self, pos: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let mut f = Some(f);
        self.retrying(|_| {
            let (shard, local) = self.shard_of(pos)?;
            // As in `with_one`: `f` runs last, once.
            let run = |raw: &[u8]| (f.take().expect("`f` runs once, last"))(raw);
            self.shards[shard].with_record(local, run)
        })
    }

    /// Runs `f` on the position of `key` and its raw record, checked against it and decoded in
    /// this thread's buffer, without a copy; `None` when absent.
    pub fn with_one<R>(&self, key: &[u8], f: impl FnOnce(u64, &[u8]) -> R) -> Result<Option<R>> {
        let mut f = Some(f);
        self.retrying(|_| {
            let Some(found) = self.id_index().locate(key)? else {
                return Ok(None);
            };
            let (shard, local) = self.indexed(found)?;
            // `f` runs last, on a record that passed its check: an attempt that fails (and is
            // retried) fails before it.
            let run = |raw: &[u8]| (f.take().expect("`f` runs once, last"))(found.pos, raw);
            self.shards[shard].with_record_of(local, key, run).map(Some)
        })
    }

    /// Runs `read` on `items` in request order, `at` naming each one's shard and position there:
    /// the batch prepared first (unless `prepared` says it was: `prepare_shards`), then one
    /// prefetching pipeline across the shards, so that a batch spread over many shards overlaps
    /// its memory loads as one file's does (read shard by shard, 64 shards left one or two
    /// documents a group and nothing to overlap).
    fn read_across<T>(
        &self,
        items: &[T],
        keys: bool,
        prepared: bool,
        at: impl Fn(&T) -> (usize, Found),
        read: impl FnMut(&T) -> Result<()>,
    ) -> Result<()> {
        let len = items.len();
        if prepared || !(self.shards.iter()).any(|shard| shard.prepares_batch(len)) {
            // Nothing to prepare.
        } else if let [shard] = self.shards.as_slice() {
            // One file: prepared straight from the batch, without a copy per shard.
            shard.prepare_batch(items.iter().map(|i| at(i).1), len, keys)?;
        } else {
            let mut by_shard: Vec<Vec<Found>> = vec![Vec::new(); self.shards.len()];
            for (shard, local) in items.iter().map(&at) {
                by_shard[shard].push(local);
            }
            self.prepare_shards(&by_shard, len, keys)?;
        }
        let at = |item: &T| {
            let (shard, local) = at(item);
            (&self.shards[shard], local)
        };
        store::read_pipelined(items, at, keys, read)
    }
}

/// The keys of `read_located`'s items.
fn keys_of<'k>(items: &[(&'k [u8], Option<Located>)]) -> Vec<&'k [u8]> {
    items.iter().map(|&(key, _)| key).collect()
}
