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
use crate::keysort;
use crate::reader::Store;
use crate::schema::Schema;
use crate::writer::{self, Summary, Writer, WriterOptions, MAX_DOCS};
use memmap2::Mmap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The global id index's file name inside a collection.
const INDEX: &str = "index.docstore";

/// Seals `shards` (store files with one schema, format 2) into a collection at `target`, in that
/// order. Fails, leaving nothing at `target`, on a repeated id, differing schemas, or a `target`
/// that exists when `overwrite` is false; with `overwrite` an existing store or collection there
/// is replaced atomically.
pub fn seal(target: &Path, shards: &[PathBuf], overwrite: bool) -> Result<Summary> {
    if shards.is_empty() {
        return Err(Error::InvalidArgument(
            "no shards to seal: give at least one store file".into(),
        ));
    }
    if !overwrite && std::fs::symlink_metadata(target).is_ok() {
        return Err(Error::AlreadyExists(target.to_path_buf()));
    }
    let (parent, name) = writer::split_target(target)?;
    let scratch = writer::Scratch::create(&parent, &name)?;
    let dir = scratch.path().to_path_buf();
    std::fs::create_dir(dir.join("shards"))?;

    // The same file twice would only be found as a repeated id: say what it is.
    let mut seen = std::collections::HashMap::new();
    let mut resolved = Vec::with_capacity(shards.len());
    for source in shards {
        let real = resolve(source)?;
        let meta = std::fs::metadata(&real).map_err(|e| named(Error::Io(e), source))?;
        if meta.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "shard {} is a directory (a collection?), not a store file: give its shards \
                 (DocStore.info()[\"shards\"])",
                source.display()
            )));
        }
        if let Some(first) = seen.insert((meta.dev(), meta.ino()), source) {
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
    let mut stores: Vec<Store<Mmap>> = Vec::with_capacity(shards.len());
    let mut total = 0u64;
    for (i, (source, real)) in shards.iter().zip(&resolved).enumerate() {
        let file = format!("shards/part-{i:05}.docstore");
        place(source, real, &dir.join(&file))?;
        let store = Store::open(dir.join(&file)).map_err(|e| named(e, source))?;
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

    let index = write_index(&dir.join(INDEX), &stores, shards)?;
    let index_store = Store::open(dir.join(INDEX))?;
    let index_entry = FileEntry::new(INDEX.into(), total, index_store.fingerprint());
    drop(index_store);
    drop(stores);

    let manifest = Manifest::new(total, index_entry, entries);
    let mut out = File::create(dir.join(MANIFEST))?;
    out.write_all(&manifest.to_json())?;
    out.sync_all()?;
    for d in [dir.join("shards"), dir.clone()] {
        File::open(d)?.sync_all()?;
    }
    scratch.publish(target, overwrite)?;
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
fn write_index(path: &Path, stores: &[Store<Mmap>], sources: &[PathBuf]) -> Result<Summary> {
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
    // merge below checks that each rank's position leads back to that rank, and that the keys
    // come in order. Costs hashing every stored blob once.
    for (store, source) in stores.iter().zip(sources) {
        for pos in 0..store.len() {
            let key = store.key_at(pos).map_err(|e| named(e, source))?;
            writer.add_unindexed(key, &[])?;
            if writer.needs_flush() {
                writer.flush()?;
            }
        }
    }
    // Every key starts with what the smallest and the largest key share.
    let mut ends = Vec::with_capacity(2 * stores.len());
    for store in stores.iter().filter(|s| !s.is_empty()) {
        ends.push(store.key_of_rank(0)?);
        ends.push(store.key_of_rank(store.len() - 1)?);
    }
    let common_prefix = match (ends.iter().min(), ends.iter().max()) {
        (Some(a), Some(b)) => a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count(),
        _ => 0,
    };
    let mut start = 0u64;
    let mut runs = Vec::with_capacity(stores.len());
    for (store, source) in stores.iter().zip(sources) {
        let offset = start;
        start += store.len();
        runs.push((0..store.len()).map(move |rank| {
            let key = store
                .key_of_rank(rank)
                .map_err(|e| named(e, source))?
                .to_vec();
            let local = store.position_of_rank(rank).map_err(|e| named(e, source))?;
            // The key of `local` was checked above, and it is this rank's key only if the
            // position's rank is this rank: then ranks and positions are one-to-one, and every
            // merged key is a checked one at its own position.
            let damaged = |what: &str| {
                named(
                    Error::corrupt(format!(
                        "{what} at rank {rank}: the store is damaged (run verify())"
                    )),
                    source,
                )
            };
            if store.rank_at(local).map_err(|e| named(e, source))? != rank {
                return Err(damaged("key index and key ranks disagree"));
            }
            if rank > 0 && store.key_of_rank(rank - 1).map_err(|e| named(e, source))? >= &key[..] {
                return Err(damaged("keys are not sorted"));
            }
            Ok((key, (offset + local) as u32)) // < MAX_DOCS, checked by `seal`
        }));
    }
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
        keysort::merge(runs, each, |key, a, b| Error::DuplicateKeyIn {
            key: String::from_utf8_lossy(key).into_owned(),
            first: sources[a.min(b)].clone(),
            second: sources[a.max(b)].clone(),
        })
    })
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
        .map(|f| format!("{}: {}", f.name, f.ty))
        .collect();
    format!("{{{}}}", fields.join(", "))
}
