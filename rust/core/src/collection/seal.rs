//! Sealing: shard files become one collection directory, all or nothing.
//!
//! The shards are linked (copied across file systems) into a scratch directory beside the
//! target, never changed; the global id index is written there by the store writer from a k-way
//! merge of the shards' key indexes, which are sorted already (memory: one key per shard), so a
//! repeated id is met as two equal keys in a row; the manifest goes last. Only then does the
//! directory take the target's name, in one rename (an exchange, when it replaces a store or a
//! collection: readers holding the old one keep reading it).

use super::manifest::{FileEntry, Manifest, MANIFEST};
use crate::codec;
use crate::error::{Error, Result};
use crate::format;
use crate::format::schema::Schema;
use crate::keys::merge::{self, SortedKeys};
use crate::publish::{self, HeldTarget, Scratch, TargetLock};
use crate::storage::StoreFile;
use crate::store::Store;
use crate::writer::{Summary, Writer, WriterOptions, MAX_DOCS};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The global id index's file name inside a collection.
const INDEX: &str = "index.docstore";

/// Seals `shards` (store files with one schema, format 2) into a collection at `target`, in that
/// order. Fails, leaving nothing at `target`, on a repeated id, differing schemas, or a `target`
/// that exists when `overwrite` is false; with `overwrite` an existing store or collection there
/// is replaced atomically (anything else there is refused: see `check_replaceable`).
pub fn seal(target: &Path, shards: &[PathBuf], overwrite: bool) -> Result<Summary> {
    let existing = match overwrite {
        true => Existing::Replace,
        false => Existing::Refuse,
    };
    seal_into(target, shards, existing, &Progress::default())
}

/// Appends `shards` to the collection (or single store file) at `target`: seals its shards, then
/// these, into a collection that replaces it atomically; with nothing at `target`, seals them
/// alone. The target's lock is held from reading its manifest to publishing the result, so two
/// appends (or an append and any other docstore writer of the target) run one after the other,
/// and neither loses the other's documents.
pub fn append(target: &Path, shards: &[PathBuf]) -> Result<Summary> {
    seal_into(target, shards, Existing::Append, &Progress::default())
}

/// `seal` (`append` when `append`), advancing `progress` as it goes.
pub fn seal_counting(
    target: &Path,
    shards: &[PathBuf],
    overwrite: bool,
    append: bool,
    progress: &Progress,
) -> Result<Summary> {
    let existing = match (overwrite, append) {
        (true, true) => {
            return Err(Error::InvalidArgument(
                "overwrite and append exclude each other: append replaces the collection with \
                 its shards and the new ones"
                    .into(),
            ))
        }
        (_, true) => Existing::Append,
        (true, false) => Existing::Replace,
        (false, false) => Existing::Refuse,
    };
    seal_into(target, shards, existing, progress)
}

/// How far a seal is, for a progress bar read from another thread: `total` steps, known once
/// the shards are open (two a document: its key read and checked, then merged into the global
/// index), and the steps `done`.
#[derive(Debug, Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub total: AtomicU64,
}

/// What a seal does with what is at its target.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Existing {
    Refuse,
    Replace,
    Append,
}

fn seal_into(
    target: &Path,
    shards: &[PathBuf],
    existing: Existing,
    progress: &Progress,
) -> Result<Summary> {
    if shards.is_empty() {
        return Err(Error::InvalidArgument(
            "no shards to seal: give at least one store file".into(),
        ));
    }
    if existing == Existing::Refuse && std::fs::symlink_metadata(target).is_ok() {
        return Err(Error::AlreadyExists(target.to_path_buf()));
    }
    if existing == Existing::Replace {
        check_replaceable(target)?; // before the work; again under the lock, before publishing
    }
    let held = publish::lock_target(target)?;
    seal_held(held, shards, existing, progress)
}

/// An append under a target's lock held since the caller read what is there
/// (`publish::lock_target`); here, beside the seal it runs.
impl HeldTarget {
    /// `append` to this target, under this lock: nothing was published at the target since it
    /// was taken. The lock is let go at the end.
    pub fn append(self, shards: &[PathBuf], progress: &Progress) -> Result<Summary> {
        if shards.is_empty() {
            return Err(Error::InvalidArgument(
                "no shards to seal: give at least one store file".into(),
            ));
        }
        seal_held(self, shards, Existing::Append, progress)
    }
}

/// `seal_into` once the target's lock is held.
fn seal_held(
    held: HeldTarget,
    shards: &[PathBuf],
    existing: Existing,
    progress: &Progress,
) -> Result<Summary> {
    let HeldTarget { target, lock } = held;
    let target = target.as_path();
    let (parent, name) = publish::split_target(target)?;
    // The shards of what is at the target, read under the lock that publishes the result.
    let mut sources: Vec<(PathBuf, Option<FileEntry>)> = match existing {
        Existing::Append => existing_shards(target)?,
        _ => Vec::new(),
    };
    // An append to nothing publishes as a seal does without overwrite: whatever appeared at the
    // target meanwhile (written by something that does not take the lock) is not replaced.
    let replace = match existing {
        Existing::Append => !sources.is_empty(),
        _ => existing == Existing::Replace,
    };
    sources.extend(shards.iter().map(|s| (s.clone(), None)));
    let shards: &[PathBuf] = &sources
        .iter()
        .map(|(path, _)| path.clone())
        .collect::<Vec<_>>();
    let scratch = Scratch::create(&parent, &name, &lock)?;
    // An append keeps the lock to the end; a seal takes it again to publish.
    let lock = match existing {
        Existing::Append => Some(lock),
        _ => {
            drop(lock); // now: a shadowed binding would hold it to the end
            None
        }
    };
    let dir = scratch.path().to_path_buf();
    std::fs::create_dir(dir.join("shards"))?;

    // The same file twice would only be found as a repeated id: say what it is.
    let mut seen = std::collections::HashMap::new();
    let mut resolved = Vec::with_capacity(shards.len());
    for source in shards {
        let real = resolve(source)?;
        let meta = std::fs::metadata(&real).map_err(|e| named(Error::Io(e), source))?;
        let identity = crate::runtime::platform::identity_at(&real)
            .map_err(|e| named(Error::Io(e), source))?;
        if meta.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "shard {} is a directory (a collection?), not a store file: give its shards \
                 (DocStore.info()[\"shards\"])",
                source.display()
            )));
        }
        if let Some(first) = seen.insert(identity, source) {
            return Err(Error::InvalidArgument(format!(
                "shard {} is listed twice (also as {})",
                source.display(),
                first.display()
            )));
        }
        resolved.push(real);
    }

    // Linked first, then opened there: what is indexed is what the collection holds.
    let mut entries = Vec::with_capacity(shards.len());
    let mut stores: Vec<Store<StoreFile>> = Vec::with_capacity(shards.len());
    let mut total = 0u64;
    for (i, (source, real)) in shards.iter().zip(&resolved).enumerate() {
        let file = format!("shards/part-{i:05}.docstore");
        place(source, real, &dir.join(&file))?;
        let store = Store::open(dir.join(&file)).map_err(|e| named(e, source))?;
        if let Some(sealed) = &sources[i].1 {
            if store.fingerprint() != sealed.fingerprint()? || store.len() != sealed.count {
                return Err(Error::corrupt(format!(
                    "{} in {} is not the file that was sealed there (fingerprint or count \
                     differs): the collection was changed after sealing, and is not appended to",
                    sealed.file,
                    target.display()
                )));
            }
        }
        if let Some(first) = stores.first() {
            if store.schema() != first.schema() {
                return Err(Error::Schema(format!(
                    "shard {} has fields {}, but shard {} has {}",
                    source.display(),
                    describe(store.schema()),
                    shards[0].display(),
                    describe(first.schema())
                )));
            }
            if store.metadata() != first.metadata() {
                let what = |m: Option<&str>| match m {
                    Some(text) if text.len() > 200 => {
                        format!("{}...", &text[..text.floor_char_boundary(200)])
                    }
                    Some(text) => text.to_owned(),
                    None => "none".to_owned(),
                };
                return Err(Error::Schema(format!(
                    "shard {} has metadata {}, but shard {} has {}: a collection's shards hold \
                     the same metadata (its own)",
                    source.display(),
                    what(store.metadata()),
                    shards[0].display(),
                    what(first.metadata())
                )));
            }
        }
        if !store.checked() {
            return Err(Error::InvalidArgument(format!(
                "shard {} is format version {}, without document checks: `docstore upgrade` it \
                 first",
                source.display(),
                store.header().version
            )));
        }
        total += store.len();
        if total > MAX_DOCS {
            return Err(Error::InvalidArgument(format!(
                "a collection holds at most {MAX_DOCS} documents"
            )));
        }
        entries.push(FileEntry::new(file, store.len(), store.fingerprint()));
        stores.push(store);
    }

    progress.total.store(2 * total, Ordering::Relaxed);
    let index = write_index(&dir.join(INDEX), &stores, shards, &progress.done)?;
    let index_store = Store::open(dir.join(INDEX))?;
    let index_entry = FileEntry::new(INDEX.into(), total, index_store.fingerprint());
    drop(index_store);
    drop(stores);

    let manifest = Manifest::new(total, index_entry, entries);
    let mut out = File::create(dir.join(MANIFEST))?;
    out.write_all(&manifest.to_json())?;
    out.sync_all()?;
    for d in [dir.join("shards"), dir.clone()] {
        crate::runtime::platform::sync_dir(&d)?;
    }
    let lock = match lock {
        Some(lock) => lock,
        None => TargetLock::acquire(&parent, &name)?,
    };
    if replace {
        check_replaceable(target)?;
    }
    scratch.publish(target, replace, &lock)?;
    drop(lock);
    Ok(Summary {
        count: total,
        raw_bytes: index.raw_bytes,
        file_bytes: index.file_bytes,
    })
}

/// The file a shard's path names, every symbolic link on the way resolved: link(2) would link a
/// symbolic link itself, leaving the collection dependent on (or, for a relative link, dangling
/// from) where it points.
fn resolve(source: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(source).map_err(|e| match std::fs::read_link(source) {
        Ok(to) => Error::Io(std::io::Error::new(
            e.kind(),
            format!(
                "shard {} is a symbolic link to {}, which cannot be opened ({e})",
                source.display(),
                to.display()
            ),
        )),
        Err(_) => named(Error::Io(e), source),
    })
}

/// The shards of what is at `target` for an append, each with its manifest entry when it is a
/// collection's (the file sealed there is checked to be the one the manifest pins): nothing, a
/// collection's shards, or a single store file as its own one shard.
fn existing_shards(target: &Path) -> Result<Vec<(PathBuf, Option<FileEntry>)>> {
    let meta = match std::fs::symlink_metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    if !meta.is_dir() {
        publish::check_replaceable_file(target)?;
        return Ok(vec![(target.to_path_buf(), None)]);
    }
    let manifest = check_replaceable_collection(target)?;
    let mut shards = Vec::with_capacity(manifest.shards.len());
    for entry in manifest.shards {
        shards.push((entry.path_in(target)?, Some(entry)));
    }
    Ok(shards)
}

/// Refuses to replace what is at `target` unless it is nothing, a docstore store file
/// (`publish::check_replaceable_file`) or a docstore collection with nothing else in it
/// (`check_replaceable_collection`): an overwrite never destroys a user's files. Seals check
/// it under the target's lock before they publish; callers may check it first, to refuse
/// before any work.
pub fn check_replaceable(target: &Path) -> Result<()> {
    match std::fs::symlink_metadata(target) {
        Ok(meta) if meta.is_dir() => check_replaceable_collection(target).map(|_| ()),
        _ => publish::check_replaceable_file(target),
    }
}

/// The manifest of the collection at `dir`, if `dir` is one that an overwrite may replace: a
/// valid manifest, and nothing else but the files it names (each a store file, by its magic
/// bytes) and the directories that hold them. Anything else is refused, naming what is there.
fn check_replaceable_collection(dir: &Path) -> Result<Manifest> {
    let not_collection = |why: String| publish::refused(dir, &why);
    let manifest = match std::fs::symlink_metadata(dir.join(MANIFEST)) {
        Ok(meta) if meta.is_file() => super::dir::CollectionDir::open(dir)
            .and_then(|held| Manifest::read_in(&held))
            .map_err(|e| {
                not_collection(format!(
                    "a directory whose {MANIFEST} is not a valid collection manifest ({e})"
                ))
            })?,
        Ok(_) => {
            return Err(not_collection(format!(
                "a directory whose {MANIFEST} is not a regular file"
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut names: Vec<String> = std::fs::read_dir(dir)?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            let what = match names.is_empty() {
                true => "an empty directory, not a docstore collection".to_string(),
                false => format!(
                    "a directory that is not a docstore collection (it holds {})",
                    listing(&names)
                ),
            };
            return Err(not_collection(what));
        }
        Err(e) => return Err(e.into()),
    };
    let mut files = std::collections::HashSet::new();
    let mut dirs = std::collections::HashSet::new();
    for entry in std::iter::once(&manifest.index).chain(&manifest.shards) {
        let relative = entry
            .relative()
            .map_err(|e| not_collection(format!("a directory whose manifest is damaged ({e})")))?;
        dirs.extend(relative.ancestors().skip(1).map(Path::to_path_buf));
        files.insert(relative.to_path_buf());
    }
    // Walked without following links, into the directories the manifest's files need only.
    let mut unexpected = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        for entry in std::fs::read_dir(dir.join(&relative))? {
            let entry = entry?;
            let path = relative.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_dir() && dirs.contains(&path) {
                pending.push(path);
            } else if kind.is_file() && path.as_os_str() == MANIFEST {
                continue;
            } else if kind.is_file() && files.contains(&path) {
                if !publish::starts_with_magic(&entry.path())? {
                    unexpected.push(format!("{} (not a docstore store)", path.display()));
                }
            } else {
                let slash = if kind.is_dir() { "/" } else { "" };
                unexpected.push(format!("{}{slash}", path.display()));
            }
        }
    }
    if !unexpected.is_empty() {
        unexpected.sort();
        return Err(not_collection(format!(
            "a docstore collection that also holds {}",
            listing(&unexpected)
        )));
    }
    Ok(manifest)
}

/// The first few of `names` for an error message, and how many more there are.
fn listing(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let shown = names[..names.len().min(SHOWN)].join(", ");
    match names.len() > SHOWN {
        true => format!("{shown} and {} more", names.len() - SHOWN),
        false => shown,
    }
}

/// Puts a shard's file (`real`: `source` with its links resolved) at `dest`: a hard link, or a
/// copy where links cannot go (another file system). Either way the source is left as it was.
fn place(source: &Path, real: &Path, dest: &Path) -> Result<()> {
    let kind = std::fs::metadata(real)
        .map_err(|e| named(Error::Io(e), source))?
        .file_type();
    if !kind.is_file() {
        return Err(Error::InvalidArgument(format!(
            "shard {} is not a regular file",
            source.display()
        )));
    }
    if std::fs::hard_link(real, dest).is_err() {
        std::fs::copy(real, dest).map_err(|e| named(Error::Io(e), source))?;
        File::open(dest)?.sync_all()?;
    }
    Ok(())
}

/// The global id index: a store without fields, document `p` being the collection's document `p`
/// (its check binds the id to that position), its keys merged from the shards' sorted keys, and
/// its key index locating each document's blob in its shard.
fn write_index(
    path: &Path,
    stores: &[Store<StoreFile>],
    sources: &[PathBuf],
    done: &AtomicU64,
) -> Result<Summary> {
    let options = WriterOptions {
        level: codec::LEVEL_NONE,
        dict_size: 0,
        format_version: format::VERSION,
        ..WriterOptions::default()
    };
    let mut writer = Writer::create(path, Schema::new(Vec::new())?, options)?;
    // What is merged is verified first, so that a damaged shard fails the seal, naming it,
    // rather than be sealed into an index that agrees with its damage (its ids then found
    // nowhere): every key read by position passes its document's check (`key_at`), and the
    // merge below (`merge::store_runs`) checks that each rank's position leads back to that
    // rank, and that the keys come in order. Costs hashing every stored blob once.
    for (store, source) in stores.iter().zip(sources) {
        for pos in 0..store.len() {
            let key = store.key_at(pos).map_err(|e| named(e, source))?;
            writer.add_unindexed(key, &[])?;
            done.fetch_add(1, Ordering::Relaxed);
            if writer.needs_flush() {
                writer.flush()?;
            }
        }
    }
    let common_prefix = merge::common_prefix(stores)?;
    // Positions stay below MAX_DOCS, checked by `seal`.
    let named_shard = |e, i: usize| named(e, &sources[i]);
    let runs = merge::store_runs(stores, &named_shard);
    // Entries locate each document's blob in its shard, so that a lookup by id reads the index
    // and then the blob (format v3). The shards' starts say which shard a global position is in.
    let starts: Vec<u64> = (stores.iter())
        .scan(0, |start, s| {
            let this = *start;
            *start += s.len();
            Some(this)
        })
        .collect();
    let locate = |pos: u32| -> Result<(u64, u64)> {
        let pos = u64::from(pos);
        let shard = starts.partition_point(|&start| start <= pos) - 1;
        let blob = stores[shard].blob_range_at(pos - starts[shard])?;
        Ok((blob.start as u64, blob.len() as u64))
    };
    writer.finish_with(common_prefix, Some(&locate), |each| {
        let counted = |key: &[u8], pos: u32| {
            done.fetch_add(1, Ordering::Relaxed);
            each(key, pos)
        };
        merge::merge(runs, counted, |key, a, b| Error::DuplicateKeyIn {
            key: String::from_utf8_lossy(key).into_owned(),
            first: sources[a.min(b)].clone(),
            second: sources[a.max(b)].clone(),
        })
    })
}

/// A shard's keys, for the merge of the global id index.
impl SortedKeys for Store<StoreFile> {
    fn len(&self) -> u64 {
        Store::len(self)
    }
    fn key_of_rank(&self, rank: u64) -> Result<&[u8]> {
        Store::key_of_rank(self, rank)
    }
    fn position_of_rank(&self, rank: u64) -> Result<u64> {
        Store::position_of_rank(self, rank)
    }
    fn rank_at(&self, position: u64) -> Result<u64> {
        Store::rank_at(self, position)
    }
}

/// An error about a shard, naming the file the caller gave.
fn named(err: Error, source: &Path) -> Error {
    match err {
        Error::Corrupt(msg) => Error::corrupt(format!("shard {}: {msg}", source.display())),
        Error::Io(io) => Error::Io(std::io::Error::new(
            io.kind(),
            format!("shard {}: {io}", source.display()),
        )),
        other => other,
    }
}

fn describe(schema: &Schema) -> String {
    let fields: Vec<String> = schema
        .fields
        .iter()
        .map(|f| format!("{}: {}", f.name, f.type_name()))
        .collect();
    format!("{{{}}}", fields.join(", "))
}
