//! Where a reader's files come from: local files, or a remote location (a bucket, a server)
//! whose objects are read through the node cache (`remote`, `cache`).
//!
//! A collection reads its files through one `Source` and never asks where they are: it asks its
//! shards' storage for ranges and gets errors back. The read policy that depends on where the
//! files are is decided here, once for every read of a collection:
//! - `open_files`: a collection's files opened at once (each open is a round trip or two);
//! - `run`: a read that finds damage run again on bytes fetched anew (`REMOTE_ATTEMPTS`);
//! - `prepare`: the shards of a batch fetched together, one round for them all (`at_once`),
//!   or, for local files, their pages hinted one shard after another;
//! - `fetch_ahead`: work that only fetches, skipped for local files;
//! - `local_copy`: a whole copy of a remote file, what `verify` reads;
//! - `may_block`: the one question a caller asks (the bindings, to release the GIL).

use super::remote::{self, Remote, RemoteFile, RemoteOptions, RemoteStats};
use super::{Declare, StoreFile};
use crate::error::{Error, Result};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A damaged read of a remote store is tried this many times in all, its bytes fetched anew:
/// the cache may have been evicted under it, the network may have handed over bad bytes that
/// passed as the right length, or the cache's disk may have damaged them. The second attempt
/// fetches again what the first read (`remote::invalidate_read`); the third also what every
/// read relies on unasked (the pinned ranges: `RemoteFile::refetch_pinned`). Only a read that
/// fails on bytes the server has just sent raises.
const REMOTE_ATTEMPTS: u32 = 3;

/// Local files, or a remote location and its client (counters included).
#[derive(Clone, Default)]
pub struct Source {
    remote: Option<Arc<Remote>>,
}

impl Source {
    /// Local files: every byte is where it is read.
    pub fn local() -> Source {
        Source { remote: None }
    }

    /// The remote location of `url` (its scheme and bucket or host), its client made at once so
    /// that bad options fail here.
    pub fn remote(url: &str, options: RemoteOptions) -> Result<Source> {
        Ok(Source {
            remote: Some(Remote::new(url, options)?),
        })
    }

    /// `remote` over `store` instead of the client the URL names: what the core's tests read
    /// through (an in-memory store that counts what it is asked). Not reachable from Python.
    #[doc(hidden)]
    pub fn over(
        url: &str,
        options: RemoteOptions,
        store: Arc<dyn object_store::ObjectStore>,
    ) -> Result<Source> {
        Ok(Source {
            remote: Some(Remote::over(url, options, store)?),
        })
    }

    /// Whether a read may wait on the network (a remote location): what a caller that lets
    /// others run meanwhile asks (the bindings release Python's GIL).
    #[inline(always)]
    pub fn may_block(&self) -> bool {
        self.remote.is_some()
    }

    /// Prepares each of `parts` (a shard's part of a batch) with `prepare` (`Store::prepare_batch`):
    /// where reads fetch, those that `lacks` says miss bytes at once, a thread each, so that
    /// their requests make one round (a warm batch starts no thread); local parts one after
    /// another (their hints are system calls that do not wait).
    pub fn prepare<T: Sync>(
        &self,
        parts: &[T],
        lacks: impl Fn(&T) -> bool,
        prepare: impl Fn(&T) -> Result<()> + Sync,
    ) -> Result<()> {
        match &self.remote {
            None => parts.iter().try_for_each(prepare),
            Some(_) => {
                let cold: Vec<&T> = parts.iter().filter(|p| lacks(p)).collect();
                at_once(&cold, |part| prepare(part))
            }
        }
    }

    /// Runs `fetch` where reads fetch: work that only fetches ahead what later reads read (so
    /// that they wait on nothing), which local files do not need.
    pub fn fetch_ahead(&self, fetch: impl FnOnce() -> Result<()>) -> Result<()> {
        match &self.remote {
            None => Ok(()),
            Some(_) => fetch(),
        }
    }

    /// What `files` hold in the node cache, and what its directory holds in all (`None` for
    /// local files).
    pub fn cache_usage<'a>(
        &self,
        files: impl Iterator<Item = &'a StoreFile>,
    ) -> Option<(u64, u64)> {
        self.remote.as_ref()?;
        let (mut held, mut usage) = (0u64, 0u64);
        for file in files.filter_map(StoreFile::remote_file) {
            held += file.cache().held();
            usage = file.cache().usage();
        }
        Some((held, usage))
    }

    /// The remote client's counters (`None` for local files).
    pub fn stats(&self) -> Option<&RemoteStats> {
        self.remote.as_ref().map(|r| &r.stats)
    }

    /// What an open should warn of, once: that its server ignores Range, so its files were read
    /// whole into the node cache (`Remote::take_warning`). `None` for local files.
    pub fn take_warning(&self) -> Option<String> {
        self.remote.as_ref()?.take_warning()
    }

    fn client(&self) -> Result<&Arc<Remote>> {
        (self.remote.as_ref())
            .ok_or_else(|| Error::InvalidArgument("not a remote location: give a URL".into()))
    }

    /// The object at `url` (under this source's location) opened as a store file: its first
    /// bytes fetched (header, schema, dictionary); `None` when there is no such object.
    ///
    /// An object that is not a store, under which a collection's manifest lies, is `None` too:
    /// a directory whose URL the server answers with a page (Python's `http.server` redirects
    /// it to the listing of the directory), where a collection was uploaded as it lay.
    pub fn open_file(&self, url: &str, declare: Declare) -> Result<Option<StoreFile>> {
        match self.opened(url, declare) {
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e @ Error::Corrupt(_)) => {
                let manifest = format!(
                    "{}/{}",
                    url.trim_end_matches('/'),
                    crate::collection::MANIFEST
                );
                match self.read_object(&manifest) {
                    Ok(_) => Ok(None),
                    Err(_) => Err(e),
                }
            }
            other => other.map(Some),
        }
    }

    /// The store file at `url`, its first bytes read as `declare` says.
    fn opened(&self, url: &str, declare: Declare) -> Result<StoreFile> {
        StoreFile::remote(RemoteFile::open(self.client()?, url, declare)?)
    }

    /// `open_file` of every URL at once, each then made what `open` makes of it (a store, which
    /// fetches its key fences): one or two round trips for them all, not per file.
    pub fn open_files<T: Send>(
        &self,
        urls: &[String],
        declare: Declare,
        open: impl Fn(StoreFile) -> Result<T> + Sync,
    ) -> Vec<Result<T>> {
        let open = |url: &String| self.opened(url, declare).and_then(&open);
        std::thread::scope(|scope| {
            let handles: Vec<_> = urls
                .chunks(urls.len().div_ceil(32).max(1))
                .map(|chunk| scope.spawn(|| chunk.iter().map(open).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("a thread opening a remote file panicked"))
                .collect()
        })
    }

    /// The whole (small) object at `url`: a collection's manifest.
    pub fn read_object(&self, url: &str) -> Result<Bytes> {
        let remote = self.client()?;
        remote.get_all(&remote.path_of(url)?, url)
    }

    /// Runs a read of `files` (listed only for a remote read; `op` told which attempt it is, 1
    /// first). A local read runs once. A remote
    /// one first checks that the cache files are whole (`RemoteFile::guard`), and one that finds
    /// damage is run again after evicting what it read from the cache (`REMOTE_ATTEMPTS`).
    #[inline]
    pub fn run<'a, I, R>(
        &self,
        files: impl FnOnce() -> I,
        mut op: impl FnMut(u32) -> Result<R>,
    ) -> Result<R>
    where
        I: Iterator<Item = &'a StoreFile> + Clone,
    {
        let Some(remote) = &self.remote else {
            return op(1);
        };
        let files = files().filter_map(StoreFile::remote_file);
        let now = remote::guard_clock();
        for file in files.clone() {
            file.guard(now)?;
        }
        let mut attempt = 1;
        loop {
            remote::begin_read();
            match op(attempt) {
                Err(Error::Corrupt(_)) if attempt < REMOTE_ATTEMPTS => {
                    attempt += 1;
                    remote::invalidate_read(files.clone(), attempt == REMOTE_ATTEMPTS)?;
                }
                Err(e @ Error::Corrupt(_)) => {
                    // Damaged as the server sent it: not left in the cache for the next read.
                    remote::invalidate_read(files.clone(), false)?;
                    return Err(e);
                }
                Ok(found) if attempt > 1 => {
                    remote.stats.heals.fetch_add(1, Ordering::Relaxed);
                    return Ok(found);
                }
                other => return other,
            }
        }
    }

    /// A whole copy of `file` (`None`: a local file, read where it is), downloaded into a
    /// temporary file: what `verify` reads, whatever the cache's budget.
    pub fn local_copy(&self, file: &StoreFile) -> Result<Option<StoreFile>> {
        (file.remote_file())
            .map(|f| Ok(StoreFile::mapped(f.download()?)))
            .transpose()
    }

    /// `url` of the file `relative` to the location `base` (a URL without credentials; `shown`
    /// names it in errors): checked first (nothing outside it is asked for), then one path
    /// segment per component, escaped, so that the object named is `relative`, whatever it holds.
    pub fn file_url(base: &str, relative: &str, shown: &str) -> Result<String> {
        let mut file =
            ::url::Url::parse(base).map_err(|e| Error::InvalidArgument(format!("{shown}: {e}")))?;
        file.path_segments_mut()
            .map_err(|_| Error::InvalidArgument(format!("{shown}: not a URL with a path")))?
            .pop_if_empty()
            .extend(relative.split('/'));
        Ok(String::from(file))
    }
}

/// Runs `each` on every part at once, a thread each (just this one for a single part): fetches
/// of several files sent together are one round of requests, not one per file.
pub fn at_once<T: Sync>(parts: &[T], each: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    match parts {
        [] => Ok(()),
        [part] => each(part),
        _ => std::thread::scope(|scope| {
            let each = &each;
            let handles: Vec<_> = (parts.iter())
                .map(|part| scope.spawn(move || each(part)))
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("a fetching thread panicked"))
        }),
    }
}
