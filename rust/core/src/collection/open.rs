//! Opening a collection: what a path or URL names is decided here, once (`Location::of`), and
//! opened (`Collection::open_named`): a URL (`s3://...`, `https://...`) is a remote store or
//! collection, read through a `Source` over its location; `file://` and a plain path name a
//! local one, a directory (a collection: its manifest, index and shards, each checked to be the
//! file sealed there) or a file (a single store, a collection of one). The bindings forward
//! `Reader(path)` here; Python asks `is_url` where it only inspects a string.

use super::dir::CollectionDir;
use super::{Collection, FileEntry, Ids, Manifest, MANIFEST};
use crate::error::{Error, Result};
use crate::storage::{RemoteOptions, Source, StoreFile};
use crate::store::{self, DataAccess, Store};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

/// What a path or URL names, decided once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A remote store or collection: the URL as given, credentials included (the client takes
    /// them; what is kept and shown is without them, `storage::url`).
    Url(String),
    /// A local store file or collection directory (`file://` taken off), made absolute so that
    /// a pickled store reopens the same file whatever the working directory of the process that
    /// unpickles it (or of this one, later).
    Path(PathBuf),
}

/// Whether `name` is a URL (`scheme://...`) rather than a path: a scheme of ASCII letters,
/// digits, `+`, `-` and `.`, starting with a letter (RFC 3986), then `://`. `file://...` is one.
pub fn is_url(name: &str) -> bool {
    match name.split_once("://") {
        Some((scheme, _)) => {
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && (scheme.chars())
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

impl Location {
    /// What `name` names: a URL other than `file://` is remote; `file://PATH` is `PATH`, and a
    /// path is itself, made absolute.
    pub fn of(name: &Path) -> Location {
        let text = name.to_str();
        if let Some(url) = text.filter(|t| is_url(t) && !t.starts_with("file://")) {
            return Location::Url(url.to_string());
        }
        let path = match text.and_then(|t| t.strip_prefix("file://")) {
            Some(local) => PathBuf::from(local),
            None => name.to_path_buf(),
        };
        Location::Path(std::path::absolute(&path).unwrap_or(path))
    }
}

/// Opens of a collection directory in a row that may fail because the directory was replaced
/// (by `seal(..., overwrite=True)`) while each ran; the last failure is the error.
const OPEN_ATTEMPTS: u32 = 8;

impl Collection {
    /// Opens what `name` names (`Location::of`): a URL through a remote source with the options
    /// `remote` makes (asked only for a URL), a directory as a collection and a file as a single
    /// store, read as `access` says. An error of the file system names the path (an empty one
    /// too); one of a URL names the URL, its credentials redacted. Returns where it was opened
    /// from as well.
    pub fn open_named(
        name: &Path,
        access: DataAccess,
        remote: impl FnOnce() -> Result<RemoteOptions>,
    ) -> Result<(Collection, Location)> {
        let location = Location::of(name);
        let collection = match &location {
            Location::Url(url) => {
                let source = Source::remote(url, remote()?)?;
                Collection::open_source(url, source)?
            }
            Location::Path(path) => Collection::open(path, access).map_err(|e| match e {
                Error::Io(io) => Error::Io(std::io::Error::new(
                    io.kind(),
                    match path.as_os_str().is_empty() {
                        true => format!("'' (an empty path): {io}"),
                        false => format!("{}: {io}", path.display()),
                    },
                )),
                e => e,
            })?,
        };
        Ok((collection, location))
    }

    /// Opens a collection directory, or a single store file as a collection of one.
    pub fn open(path: impl AsRef<Path>, access: DataAccess) -> Result<Collection> {
        let path = path.as_ref();
        if std::fs::metadata(path)?.is_dir() {
            Collection::open_dir(path, access)
        } else {
            let store = Store::open_local(path, access)?;
            Ok(Collection::single(
                store,
                path.to_path_buf(),
                Source::local(),
            ))
        }
    }

    /// A single store file: a collection of one shard, its ids in its own key index.
    fn single(store: Store<StoreFile>, path: PathBuf, source: Source) -> Collection {
        let fingerprint = store.fingerprint();
        Collection {
            starts: vec![0, store.len()],
            shards: vec![store],
            paths: vec![path],
            ids: Ids::Own,
            // A store's own key index locates its own blobs (format v3; `None` before).
            locates_blobs: true,
            fingerprint,
            source,
        }
    }

    /// Opens a remote store (`s3://bucket/corpus.docstore`) or collection (the prefix holding
    /// `docstore-collection.json`, `index.docstore` and the shards) through `source`, the
    /// remote location of `url` (`Source::remote`). A URL ending in `/` is a collection;
    /// otherwise the object is tried first, then the manifest under it.
    pub fn open_source(url: &str, source: Source) -> Result<Collection> {
        // The credentials a URL may carry stay with the client: the files' URLs, kept and shown
        // from here on, are without them (`storage::url`).
        let shown = crate::storage::url::redact(url);
        let url = crate::storage::url::without_credentials(url)
            .ok_or_else(|| Error::InvalidArgument(format!("{shown}: not a URL")))?;
        if !url.ends_with('/') {
            if let Some(file) = source.open_file(&url, store::declare)? {
                let store = Store::from_bytes(file)?;
                return Ok(Collection::single(store, PathBuf::from(url), source));
            }
        }
        let base = url.trim_end_matches('/');
        let manifest_url = format!("{base}/{MANIFEST}");
        // Neither a store nor a collection: the URL the user gave, not the manifest's.
        let bytes = source.read_object(&manifest_url).map_err(|e| match e {
            Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound => Error::Io(
                std::io::Error::new(io.kind(), format!("not found: {shown}")),
            ),
            e => e,
        })?;
        let manifest = Manifest::parse(&bytes, &manifest_url)?;
        let urls = (std::iter::once(&manifest.index).chain(&manifest.shards))
            .map(|entry| {
                let relative = entry.relative()?.to_string_lossy().into_owned();
                Source::file_url(base, &relative, &shown)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut opened = source
            .open_files(&urls, store::declare, Store::from_bytes)
            .into_iter();
        let index = (
            opened.next().expect("the index comes first")?,
            PathBuf::from(&urls[0]),
        );
        let shards = opened
            .zip(&urls[1..])
            .map(|(store, url)| store.map(|s| (s, PathBuf::from(url))))
            .collect::<Result<Vec<_>>>()?;
        Collection::assemble(&manifest, &url, index, shards, source)
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
        Collection::assemble(&manifest, &name, index, shards, Source::local())
    }

    /// A collection from its opened files, once each is checked to be the one the manifest
    /// pins, with the fields of the first and document checks.
    fn assemble(
        manifest: &Manifest,
        name: &str,
        (index, index_path): (Store<StoreFile>, PathBuf),
        opened: Vec<(Store<StoreFile>, PathBuf)>,
        source: Source,
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
            // A collection's metadata is its shards' (`seal` refuses shards whose differ).
            if shard.metadata() != shards.first().map_or(shard.metadata(), Store::metadata) {
                return Err(Error::corrupt(format!(
                    "shard {} has other metadata than the first shard",
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
            locates_blobs: index.header().locates_shard_blobs(),
            ids: Ids::Global(index, index_path),
            fingerprint: xxh3_64(&ids),
            source,
        })
    }
}
