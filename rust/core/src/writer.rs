//! Streaming, crash-safe construction of a store.
//!
//! Documents are encoded on the caller's thread and handed over in batches to a background thread
//! that compresses each batch in parallel and appends it to a partial file in a scratch directory
//! beside the target. Keys are sorted externally (`keys::sort`) and their sections written by
//! `keys::build`. Only a complete, checksummed and synced file is ever renamed to the target path,
//! so a failure or a kill leaves nothing there.

use crate::codec::{self, Compressor};
use crate::columns::Columns;
use crate::error::{Error, Result};
use crate::format::check;
use crate::format::record::{self, Value};
use crate::format::schema::Schema;
use crate::format::sections::SectionWriter;
use crate::format::{self, Header, Section, SectionEntry, FLAG_SHARD_LOCATIONS, HEADER_SIZE};
use crate::keys::build::{self, BlobLocations};
use crate::keys::sort::KeySorter;
use crate::parallel;
use crate::platform;
use crate::repeats::IdTable;
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;
use tempfile::TempDir;
use xxhash_rust::xxh3::xxh3_64;

/// Bytes of `key_buffer_bytes` counted per id that the table of ids added holds (its slots are
/// ~30-60 bytes an id): the default 64 MiB holds the first 512Ki ids, found repeated at once.
const ID_TABLE_COST: usize = 128;

/// The largest `WriterOptions::batch_bytes`: a writer allocates a batch of that size up front.
pub const MAX_BATCH_BYTES: usize = 1 << 30;

/// The most documents a store holds (positions are u32, and one value is kept free).
pub const MAX_DOCS: u64 = u32::MAX as u64 - 1;

#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// 0 = lz4 fast, 1..=12 = lz4 HC levels, `codec::LEVEL_NONE` (-1) = stored uncompressed.
    pub level: i32,
    /// Bytes of dictionary trained on the first batch (0 disables it; at most 64 KiB).
    pub dict_size: usize,
    /// Raw bytes per compression batch (the dictionary is trained on the first one). A writer
    /// holds up to five: the one being filled, two queued, the one being compressed, and the one
    /// before it, compressed, being written.
    pub batch_bytes: usize,
    /// Memory for keys before a sorted run is spilled to disk.
    pub key_buffer_bytes: usize,
    pub overwrite: bool,
    /// The newest version the writer may write, `format::NEWEST` down to `format::MIN_VERSION`,
    /// for older readers. It writes version 4 only for a schema that needs it
    /// (`Schema::min_version`), `format::VERSION` (3) otherwise.
    pub format_version: u32,
    /// A dictionary to use instead of training one (at most 64 KiB): the shards of one corpus
    /// share the one trained once, so that their reader keeps one copy and a sharded build
    /// trains once, not once per shard.
    pub dictionary: Option<Vec<u8>>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            // HC level 3 with the trained dictionary: English news at 0.49 of raw (<= 0.5 is the
            // target); level 4 is ~2.5% smaller, level 9 ~4%, at ~0.85x and ~0.4x the build
            // speed (`benches/levels.py`).
            level: 3,
            dict_size: codec::MAX_DICT_SIZE,
            batch_bytes: 4 << 20,
            key_buffer_bytes: 64 << 20,
            overwrite: false,
            format_version: format::NEWEST,
            dictionary: None,
        }
    }
}

impl WriterOptions {
    /// Checks the options as `Writer::create` does before it creates any file: the level, the
    /// batch size, the format version and the dictionary's size.
    pub fn validate(&self) -> Result<()> {
        Compressor::new(self.level, &[])?;
        if self.batch_bytes > MAX_BATCH_BYTES {
            return Err(Error::InvalidArgument(format!(
                "batch_bytes must be at most {MAX_BATCH_BYTES} (a writer holds five batches), got {}",
                self.batch_bytes
            )));
        }
        if !(format::MIN_VERSION..=format::NEWEST).contains(&self.format_version) {
            return Err(Error::InvalidArgument(format!(
                "format_version must be {} to {}, got {}",
                format::MIN_VERSION,
                format::NEWEST,
                self.format_version
            )));
        }
        if self
            .dictionary
            .as_ref()
            .is_some_and(|d| d.len() > codec::MAX_DICT_SIZE)
        {
            return Err(Error::InvalidArgument(format!(
                "a dictionary is at most {} bytes (all lz4 can reach back)",
                codec::MAX_DICT_SIZE
            )));
        }
        if self.dict_size > codec::MAX_DICT_SIZE {
            return Err(Error::InvalidArgument(format!(
                "dict_size must be 0 (no dictionary) to {} bytes (all lz4 can reach back), got {}",
                codec::MAX_DICT_SIZE,
                self.dict_size
            )));
        }
        Ok(())
    }
}

/// What a finished build produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub raw_bytes: u64,
    pub file_bytes: u64,
}

/// Raw records waiting for compression, concatenated, with the key hashes their checks hold.
#[derive(Default)]
struct Batch {
    data: Vec<u8>,
    ends: Vec<usize>,
    /// `check::doc_hash` of each record's key and position (empty for a format v1 store).
    key_hashes: Vec<u64>,
}

impl Batch {
    fn with_capacity(bytes: usize) -> Batch {
        // Some slack: the record that crosses `bytes` still fits.
        Batch {
            data: Vec::with_capacity(bytes + bytes / 8),
            ends: Vec::new(),
            key_hashes: Vec::new(),
        }
    }

    fn records(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone {
        (0..self.ends.len()).map(|i| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.data[start..self.ends[i]]
        })
    }
}

/// What the background thread hands back: the partial file up to the end of the data section.
struct DataWritten {
    file: SectionWriter,
    schema: SectionEntry,
    dictionary: SectionEntry,
    data: SectionEntry,
}

pub struct Writer {
    schema: Schema,
    options: WriterOptions,
    target: PathBuf,
    /// Removed when the writer is dropped, except in a forked child (see `Drop`).
    scratch: ManuallyDrop<TempDir>,
    count: u64,
    raw_bytes: u64,
    batch: Batch,
    keys: KeySorter,
    /// Every id added, with its position: a repeat is refused when added (`Error::DuplicateKeyAt`).
    ids: IdTable,
    sender: Option<SyncSender<Batch>>,
    worker: Option<JoinHandle<Result<DataWritten>>>,
    /// The process that created the writer: a forked child inherits the writer but not its
    /// compression thread, and its scratch directory is the parent's (`process::instance`: a
    /// descendant may get the same pid).
    pid: u64,
    /// Locked while the writer lives (see `lock_scratch`).
    _scratch_lock: Option<File>,
}

/// The version a writer allowed versions up to `newest` writes for `schema`: version 3 (or
/// older, if asked) unless the schema needs 4.
fn written_version(schema: &Schema, newest: u32) -> Result<u32> {
    let needed = schema.min_version();
    if needed > newest {
        let field = (schema.fields.iter())
            .find(|f| f.min_version() > newest)
            .expect("a field needs the version");
        return Err(Error::InvalidArgument(format!(
            "field {:?} is {}, which format version {newest} cannot hold (it needs version \
             {needed})",
            field.name,
            field.type_name()
        )));
    }
    Ok(newest.min(needed.max(format::VERSION)))
}

impl Writer {
    pub fn create(
        path: impl AsRef<Path>,
        schema: Schema,
        options: WriterOptions,
    ) -> Result<Writer> {
        let target = path.as_ref().to_path_buf();
        let (parent, name) = split_target(&target)?;
        if !options.overwrite && std::fs::symlink_metadata(&target).is_ok() {
            return Err(Error::AlreadyExists(target));
        }
        if target.is_dir() {
            return Err(Error::Io(std::io::Error::other(format!(
                "{} is a directory",
                target.display()
            ))));
        }
        if options.overwrite {
            // Refused before any work; checked again when the store replaces it.
            check_replaceable_file(&target)?;
        }
        // Validates the options before any file exists.
        options.validate()?;
        let mut options = options;
        options.format_version = written_version(&schema, options.format_version)?;
        let (scratch, scratch_lock) =
            new_scratch(&parent, &name, &TargetLock::acquire(&parent, &name)?)?;
        // Read and write: the ranks section is filled through a mapping of this file.
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(scratch.path().join("store"))?;
        let offsets = File::create(scratch.path().join("doc-offsets"))?;
        let (sender, receiver) = sync_channel::<Batch>(2);
        let worker = {
            let (schema, options) = (schema.clone(), options.clone());
            std::thread::Builder::new()
                .name("docstore-writer".into())
                .spawn(move || write_data(file, offsets, &schema, &options, receiver.into_iter()))?
        };
        let key_buffer_bytes = options.key_buffer_bytes;
        let keys = KeySorter::new(scratch.path().to_path_buf(), key_buffer_bytes);
        let batch_bytes = options.batch_bytes;
        Ok(Writer {
            schema,
            options,
            target,
            scratch: ManuallyDrop::new(scratch),
            count: 0,
            raw_bytes: 0,
            batch: Batch::with_capacity(batch_bytes),
            keys,
            ids: IdTable::with_limit(key_buffer_bytes / ID_TABLE_COST),
            sender: Some(sender),
            worker: Some(worker),
            pid: crate::process::instance(),
            _scratch_lock: Some(scratch_lock),
        })
    }

    /// Refuses work in a forked child: its compression thread exists only in the parent.
    fn check_process(&self) -> Result<()> {
        if crate::process::instance() == self.pid {
            return Ok(());
        }
        Err(Error::Closed(format!(
            "the writer of {} belongs to the process that created it (pid {}), not to this \
             forked child",
            self.target.display(),
            self.pid as u32
        )))
    }

    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Buffers one document. Never blocks; call `flush` when `needs_flush` says so (or use `push`).
    /// A rejected document leaves the writer as it was.
    pub fn add(&mut self, key: &str, values: &[Value<'_>]) -> Result<()> {
        self.add_record(key, values, true)
    }

    /// Adds rows `from..` of `columns` (made against this writer's schema) as `add` adds each,
    /// until the rows run out or the batch is full (`needs_flush`); returns the row to go on
    /// from, after a `flush`. The batch was checked whole when made, so no row fails here but
    /// for a writer that cannot take more (`MAX_DOCS`).
    pub fn add_columns(&mut self, columns: &Columns<'_>, from: usize) -> Result<usize> {
        let mut values = Vec::with_capacity(columns.width());
        let mut row = from;
        while row < columns.len() && !self.needs_flush() {
            values.clear();
            columns.values(row, &mut values);
            self.add(columns.key(row), &values)?;
            row += 1;
        }
        Ok(row)
    }

    /// `add`, leaving the key out of the key sort: for `finish_with`, whose caller gives the
    /// sorted keys itself (sealing a collection merges its shards' sorted keys).
    pub(crate) fn add_unindexed(&mut self, key: &str, values: &[Value<'_>]) -> Result<()> {
        self.add_record(key, values, false)
    }

    fn add_record(&mut self, key: &str, values: &[Value<'_>], index: bool) -> Result<()> {
        if key.is_empty() {
            return Err(Error::InvalidKey(
                "doc ids must be non-empty strings".into(),
            ));
        }
        if self.count >= MAX_DOCS {
            return Err(Error::InvalidArgument(format!(
                "a store holds at most {MAX_DOCS} documents"
            )));
        }
        if key.len() > u32::MAX as usize {
            return Err(Error::InvalidKey("doc ids are at most 4 GiB long".into()));
        }
        let id = IdTable::hash(key.as_bytes());
        if index {
            if let Some(first) = self.ids.get(id) {
                return Err(Error::DuplicateKeyAt {
                    key: key.to_owned(),
                    first: first.into(),
                    second: self.count,
                });
            }
        }
        let start = self.batch.data.len();
        if let Err(err) = record::encode(&self.schema, values, &mut self.batch.data) {
            self.batch.data.truncate(start);
            // Which document, besides which field.
            return Err(match err {
                Error::FieldType(message) => Error::FieldType(format!("doc {key:?}: {message}")),
                err => err,
            });
        }
        if index {
            self.keys.push(key.as_bytes(), self.count as u32)?;
            self.ids.insert(id, self.count as u32);
        }
        if self.options.format_version >= 2 {
            let binds_position = self.options.format_version >= 3;
            let key_hash = check::key_hash(key.as_bytes());
            (self.batch.key_hashes).push(check::doc_hash(key_hash, self.count, binds_position));
        }
        self.batch.ends.push(self.batch.data.len());
        self.raw_bytes += (self.batch.data.len() - start) as u64;
        self.count += 1;
        Ok(())
    }

    /// Keeps every id in the table of those added (see `IdTable`), so that `position_of` knows
    /// them all, at ~30-60 bytes an id; by default it holds as many as `key_buffer_bytes / 128`.
    pub fn track_every_id(&mut self) {
        self.ids.unlimited();
    }

    /// The position of the document added with id `key`, if any (of those the table holds:
    /// every one after `track_every_id`).
    pub fn position_of(&self, key: &str) -> Option<u64> {
        self.ids.get(IdTable::hash(key.as_bytes())).map(u64::from)
    }

    pub fn needs_flush(&self) -> bool {
        self.batch.data.len() >= self.options.batch_bytes || self.keys.is_full()
    }

    /// Hands the batch to the compression thread (blocks while two batches are already queued)
    /// and spills the keys when their buffer is full.
    pub fn flush(&mut self) -> Result<()> {
        self.check_process()?;
        if !self.batch.ends.is_empty() {
            // The next batch gets its full size at once: growing it by doubling would copy it.
            let next = Batch::with_capacity(self.options.batch_bytes);
            let batch = std::mem::replace(&mut self.batch, next);
            let sent = self
                .sender
                .as_ref()
                .map(|s| s.send(batch).is_ok())
                .unwrap_or(false);
            if !sent {
                return Err(self.worker_error());
            }
        }
        if self.keys.is_full() {
            self.keys.spill()?;
        }
        Ok(())
    }

    /// `add`, then `flush` if needed.
    pub fn push(&mut self, key: &str, values: &[Value<'_>]) -> Result<()> {
        self.add(key, values)?;
        if self.needs_flush() {
            self.flush()?;
        }
        Ok(())
    }

    /// The background thread stopped early: its error says why.
    fn worker_error(&mut self) -> Error {
        self.sender = None;
        match self.worker.take().map(JoinHandle::join) {
            Some(Ok(Err(err))) => err,
            Some(Err(_)) => Error::Closed("the compression thread panicked".into()),
            _ => Error::Closed("the writer has already failed or finished".into()),
        }
    }

    /// Completes the store and moves it to the target path.
    pub fn finish(mut self) -> Result<Summary> {
        let keys = std::mem::replace(&mut self.keys, KeySorter::new(PathBuf::new(), 1));
        let common_prefix = keys.common_prefix();
        self.finish_with(common_prefix, None, |each| keys.finish(each))
    }

    /// `finish` with the keys given by `sorted_keys`, which calls `each(key, position)` for every
    /// document's key in sorted order, all of them sharing the first `common_prefix` bytes. With
    /// `shard_locations` (a collection's global index), the key index locates each position's
    /// blob where that function says, in the collection's shards, instead of in this file.
    pub(crate) fn finish_with(
        mut self,
        common_prefix: usize,
        shard_locations: Option<&dyn Fn(u32) -> Result<(u64, u64)>>,
        sorted_keys: impl FnOnce(&mut dyn FnMut(&[u8], u32) -> Result<()>) -> Result<()>,
    ) -> Result<Summary> {
        let DataWritten {
            mut file,
            schema,
            dictionary,
            data,
        } = self.finish_data()?;
        let scratch = self.scratch.path().to_path_buf();
        let mut header = self.header(common_prefix, shard_locations.is_some());
        header.sections[Section::Schema as usize] = schema;
        header.sections[Section::Dictionary as usize] = dictionary;
        header.sections[Section::Data as usize] = data;
        header.sections[Section::DocOffsets as usize] =
            write_doc_offsets(&mut file, &scratch, data.len)?;
        // Version 3 entries locate their blobs: in this file, by its doc offsets.
        let locations = match shard_locations {
            Some(locate) => BlobLocations::Shards(locate),
            None if header.locates_blobs() && self.count > 0 => {
                BlobLocations::own(&scratch.join("doc-offsets"), self.count, data.len)?
            }
            None => BlobLocations::None,
        };
        build::write_sections(&mut file, &mut header, &scratch, &locations, sorted_keys)?;
        let out = build::write_ranks(file, &mut header, &scratch)?;
        write_header(out, &header)?;
        self.publish(&scratch.join("store"))?;
        let ranks = header.section(Section::KeyRanks);
        Ok(Summary {
            count: self.count,
            raw_bytes: self.raw_bytes,
            file_bytes: ranks.offset + ranks.len, // the last section
        })
    }

    /// Ends the compression thread, once it has written every document: what it wrote, the
    /// file up to the end of the data section.
    fn finish_data(&mut self) -> Result<DataWritten> {
        self.check_process()?;
        self.flush()?;
        self.sender = None; // ends the worker's loop
        match self.worker.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(Error::Closed("the compression thread panicked".into())),
            None => Err(Error::Closed("the writer has already failed".into())),
        }
    }

    /// The header of this store, its sections yet to be filled in.
    fn header(&self, common_prefix: usize, shard_locations: bool) -> Header {
        Header {
            version: self.options.format_version,
            count: self.count,
            raw_bytes: self.raw_bytes,
            // -1 (none) is 0xFF.
            level: self.options.level as u8,
            common_prefix: common_prefix as u32,
            flags: match shard_locations {
                true => FLAG_SHARD_LOCATIONS,
                false => 0,
            },
            sections: Default::default(),
        }
    }

    /// Moves the finished file to the target (`publish_file`).
    fn publish(&self, finished: &Path) -> Result<()> {
        publish_file(finished, &self.target, self.options.overwrite)
    }
}

/// Moves the finished store file `finished` to `target`: atomically, and without replacing an
/// existing store unless `overwrite` (nor anything but a store: see `check_replaceable_file`).
/// Under the target's lock, so that a collection appended to meanwhile is not replaced under its
/// append, nor this store by it. The one way every writer publishes a store file; `finished`
/// must be on the target's file system (a scratch or staging directory beside it). Without
/// `overwrite`, `finished` is linked, not moved: its caller removes it with its directory.
pub fn publish_file(finished: &Path, target: &Path, overwrite: bool) -> Result<()> {
    if !starts_with_magic(finished)? {
        return Err(Error::InvalidArgument(format!(
            "{} is not a docstore store file: only a finished store is published",
            finished.display()
        )));
    }
    let (parent, name) = split_target(target)?;
    let _lock = TargetLock::acquire(&parent, &name)?;
    if overwrite {
        check_replaceable_file(target)?;
        std::fs::rename(finished, target)?;
    } else {
        // link() fails if the target exists, so a store created meanwhile is never clobbered.
        std::fs::hard_link(finished, target).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Error::AlreadyExists(target.to_path_buf()),
            _ => Error::Io(e),
        })?;
    }
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(dir) = File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

impl Drop for Writer {
    /// An unfinished writer leaves nothing behind: the worker stops and the scratch dir goes.
    /// In a forked child both are the parent's, so they are left alone.
    fn drop(&mut self) {
        if crate::process::instance() != self.pid {
            std::mem::forget(self.worker.take());
            return;
        }
        self.sender = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        // Closed before its directory is removed: Windows cannot remove a directory that holds
        // an open file.
        drop(self._scratch_lock.take());
        // SAFETY: dropped once, here; never used again.
        unsafe { ManuallyDrop::drop(&mut self.scratch) };
    }
}

/// The directory and the file name of `target`, once the directory is known to exist.
pub(crate) fn split_target(target: &Path) -> Result<(PathBuf, String)> {
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{:?} does not name a file", target.display().to_string()),
        )));
    };
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        let (kind, message) = if parent.exists() {
            (
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", parent.display()),
            )
        } else {
            (
                std::io::ErrorKind::NotFound,
                format!("directory {} does not exist", parent.display()),
            )
        };
        return Err(Error::Io(std::io::Error::new(kind, message)));
    }
    Ok((parent, name))
}

/// A new scratch directory in `parent` for building target `name`, locked (see `SCRATCH_LOCK`),
/// once those that killed builders left there are swept; `lock` is the target's, held.
fn new_scratch(parent: &Path, name: &str, lock: &TargetLock) -> Result<(TempDir, File)> {
    let prefix = scratch_prefix(name);
    sweep_dead_scratch(parent, &prefix, lock);
    let scratch = tempfile::Builder::new()
        .prefix(&prefix)
        .rand_bytes(SCRATCH_RANDOM)
        .suffix(SCRATCH_SUFFIX)
        .tempdir_in(parent)?;
    let lock = lock_scratch(scratch.path())?;
    Ok((scratch, lock))
}

/// A scratch directory that becomes a directory at the target (a collection): removed, with
/// everything in it, unless published.
pub(crate) struct Scratch {
    // Fields drop in this order: the lock file is closed before its directory is removed
    // (Windows cannot remove a directory that holds an open file).
    _lock: File,
    dir: TempDir,
}

impl Scratch {
    /// `lock`: the target's (`TargetLock::acquire(parent, name)`), held.
    pub(crate) fn create(parent: &Path, name: &str, lock: &TargetLock) -> Result<Scratch> {
        let (dir, _lock) = new_scratch(parent, name, lock)?;
        Ok(Scratch { _lock, dir })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Gives the directory the name `target`, in one step: a rename that fails if something is
    /// there, or with `overwrite` an exchange with what is there (removed afterwards; readers
    /// that hold it open keep reading it), which the caller has found replaceable under `lock`,
    /// the target's, held until this returns. The lock file goes first: it is not the
    /// collection's. A kill from there on leaves a scratch directory without a lock file (this
    /// one, or the old target under its name), which the next holder of the target's lock
    /// sweeps (`sweep_dead_scratch`).
    pub(crate) fn publish(self, target: &Path, overwrite: bool, _lock: &TargetLock) -> Result<()> {
        let Scratch {
            _lock: scratch_lock,
            dir,
        } = self;
        // Closed before it is removed: Windows cannot rename a directory that holds an open
        // file. The target's lock, held, keeps sweepers out meanwhile.
        drop(scratch_lock);
        std::fs::remove_file(dir.path().join(SCRATCH_LOCK))?;
        let from = dir.path();
        match platform::rename_noreplace(from, target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && overwrite => {
                platform::exchange(from, target)?;
                // `from` now holds what was at the target.
                let old = std::fs::symlink_metadata(from)?;
                if old.is_dir() {
                    std::fs::remove_dir_all(from)?;
                } else {
                    std::fs::remove_file(from)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::AlreadyExists(target.to_path_buf()))
            }
            Err(e) => return Err(e.into()),
        }
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(dir) = File::open(parent) {
                let _ = dir.sync_all();
            }
        }
        // Nothing is left at the scratch path: TempDir's removal finds nothing to remove.
        drop(dir);
        Ok(())
    }
}

const SCRATCH_SUFFIX: &str = ".docstore-tmp";
/// A file in the scratch directory, `flock`ed by its writer for as long as the writer lives and
/// holding the writer's pid once locked. The kernel drops the lock when the process dies, so a
/// scratch directory whose lock can be taken, and whose lock file has been written, belongs to a
/// killed writer.
const SCRATCH_LOCK: &str = "lock";

fn lock_scratch(dir: &Path) -> Result<File> {
    let mut file = File::create(dir.join(SCRATCH_LOCK))?;
    // Blocking: a sweeping writer may hold it for a moment, before it sees that it is empty.
    if !platform::lock(&file) {
        // A file system without flock: the lock file stays empty, so no writer ever takes this
        // directory for a dead one (nor sweeps the dead ones here).
        return Ok(file);
    }
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// A target's lock file, beside it: `{scratch_prefix}docstore-lock`, `flock`ed by every docstore
/// process while it creates a scratch directory of the target (and sweeps dead ones), publishes
/// to the target, or appends to it (from reading what is there to publishing the result). Two
/// writers of one target thus never publish over each other's append, and a sweeper holding it
/// knows that no live process is between creating a scratch directory and locking it, nor
/// between taking its lock file away and renaming it (`Scratch::publish`). Its holder removes
/// it when done, so that nothing stays beside the target.
pub(crate) struct TargetLock {
    /// `None` where the file system has no `flock`: nothing is held, and sweeps are as careful
    /// as without the lock.
    file: Option<File>,
    path: PathBuf,
}

impl TargetLock {
    /// Waits for the lock of target `name` in `parent`.
    pub(crate) fn acquire(parent: &Path, name: &str) -> Result<TargetLock> {
        let path = parent.join(format!("{}docstore-lock", scratch_prefix(name)));
        let mut tries = 0;
        loop {
            let created =
                platform::no_follow(File::options().read(true).write(true).create(true), 0o644)
                    .open(&path);
            let file = match created {
                // Another user's, in a directory both write to: a lock needs only reading.
                Err(denied) if denied.kind() == std::io::ErrorKind::PermissionDenied => {
                    match platform::no_follow(File::options().read(true), 0o644).open(&path) {
                        // Removed meanwhile by its holder (try again), or never there: the
                        // directory is not writable (say so).
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 8 => {
                            tries += 1;
                            continue;
                        }
                        Err(_) => return Err(denied.into()),
                        Ok(file) => file,
                    }
                }
                other => other?,
            };
            if !platform::lock(&file) {
                let _ = std::fs::remove_file(&path);
                return Ok(TargetLock { file: None, path });
            }
            // The holder before us removes the file as it lets go: a lock taken on a removed
            // file (or on one since replaced) is no lock; take the file that is there now.
            let (held, named) = (platform::identity(&file)?, platform::identity_at(&path));
            if named.is_ok_and(|n| n == held) {
                return Ok(TargetLock {
                    file: Some(file),
                    path,
                });
            }
        }
    }

    fn held(&self) -> bool {
        self.file.is_some()
    }
}

impl Drop for TargetLock {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Removed while held: whoever waits on this file finds it gone and tries again.
            let _ = std::fs::remove_file(&self.path);
            // Unlocked, not only closed: a child forked meanwhile shares the lock, and would
            // hold it for its whole life.
            platform::unlock(&file);
            drop(file);
        }
    }
}

/// The lock of a target, held (`lock_target`): other docstore writers of the target, seals and
/// appends wait until it is dropped, or spent by `HeldTarget::append` (in `collection::seal`).
pub struct HeldTarget {
    pub(crate) target: PathBuf,
    pub(crate) lock: TargetLock,
}

impl HeldTarget {
    pub fn target(&self) -> &Path {
        &self.target
    }
}

/// Waits for the lock of `target`, for a caller that reads what is there and then appends to it
/// (`HeldTarget::append`) with nothing published in between: the ids that
/// `seal(append=True, on_duplicate="first")` drops as repeats must be those of the collection it
/// appends to. A writer or seal of the same target started meanwhile, in this process too,
/// waits for it.
pub fn lock_target(target: &Path) -> Result<HeldTarget> {
    let (parent, name) = split_target(target)?;
    Ok(HeldTarget {
        target: target.to_path_buf(),
        lock: TargetLock::acquire(&parent, &name)?,
    })
}

/// Refuses to replace what is at `target` unless it is a docstore store file (a regular file that
/// starts with the magic bytes, damaged or not) or an empty file: a writer or a seal with
/// `overwrite` must never destroy a file of the user's. Nothing there is fine.
pub(crate) fn check_replaceable_file(target: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let kind = meta.file_type();
    let what = if kind.is_symlink() {
        "a symbolic link (remove it, or write to where it points)"
    } else if kind.is_dir() {
        "a directory"
    } else if !kind.is_file() {
        "not a regular file (a FIFO, socket or device)"
    } else if meta.len() == 0 || starts_with_magic(target)? {
        return Ok(());
    } else {
        "a file that is not a docstore store"
    };
    Err(refused(target, what))
}

/// Whether the regular file at `path` starts with a store's magic bytes.
pub(crate) fn starts_with_magic(path: &Path) -> Result<bool> {
    let mut file = platform::no_follow(File::options().read(true), 0o644).open(path)?;
    let mut magic = [0u8; 8];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got == magic.len() && magic == format::MAGIC)
}

/// The error of an overwrite refused because `target` is `what`.
pub(crate) fn refused(target: &Path, what: &str) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!(
            "{} is {what}: overwrite replaces only a docstore store or collection, so it is left \
             as it is; remove it yourself, or choose another target",
            target.display()
        ),
    ))
}

/// Random alphanumerics in a scratch directory's name (tempfile's).
const SCRATCH_RANDOM: usize = 6;
/// Bytes of the target's name that its scratch directory's name repeats, to say whose it is.
const SCRATCH_NAME_BYTES: usize = 32;

/// The start of the names of target `name`'s scratch directories, `.{head}.{hash}.`: `head` is
/// the name's first 32 bytes at most (cut at a character), `hash` the xxh3 of the whole name in
/// 16 hex digits. A scratch name is then at most 1 + 32 + 1 + 16 + 1 + 6 + 13 = 70 bytes,
/// whatever the target's length: a target name may use all 255 bytes a file name can have.
fn scratch_prefix(name: &str) -> String {
    let mut head = SCRATCH_NAME_BYTES.min(name.len());
    while !name.is_char_boundary(head) {
        head -= 1;
    }
    format!(".{}.{:016x}.", &name[..head], xxh3_64(name.as_bytes()))
}

/// Whether `dir_name` is a scratch directory of the target whose `scratch_prefix` is `prefix`:
/// that prefix, six random alphanumerics, `.docstore-tmp` (the hash in the prefix tells targets
/// apart, so `corpus.v2`'s are not `corpus`'s).
fn is_scratch_of(dir_name: &str, prefix: &str) -> bool {
    let random = dir_name
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(SCRATCH_SUFFIX));
    random
        .is_some_and(|r| r.len() == SCRATCH_RANDOM && r.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Removes the scratch directories that killed writers of the target whose `scratch_prefix` is
/// `prefix` left in `parent`; `lock` is the target's, held. Best effort: anything unexpected
/// leaves a directory alone.
fn sweep_dead_scratch(parent: &Path, prefix: &str, target_lock: &TargetLock) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let me = std::process::id().to_string();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(dir_name) = file_name.to_str() else {
            continue;
        };
        if !is_scratch_of(dir_name, prefix) {
            continue;
        }
        let dir = entry.path();
        // Under the target's lock, no live process is between creating a scratch directory and
        // writing its pid in the locked lock file, nor publishing one without its lock file:
        // a directory without a lock file, or with an empty one, was left by a killed process.
        // Without that lock (no flock), such a directory may be a live writer's.
        let dead = match File::open(dir.join(SCRATCH_LOCK)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => target_lock.held(),
            Err(_) => false,
            Ok(mut lock) => {
                let mut pid = String::new();
                // This process's own pid: a live writer of this process, whose lock some file
                // systems (NFS) do not hold against the rest of the process.
                platform::try_lock(&lock)
                    && lock.read_to_string(&mut pid).is_ok()
                    && (!pid.is_empty() || target_lock.held())
                    && pid != me
            }
        };
        if dead {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Writes the doc offsets section after the data section: the blob offsets the compression
/// thread left in the scratch file, then the data section's length, where the last blob ends.
fn write_doc_offsets(
    file: &mut SectionWriter,
    scratch: &Path,
    data_len: u64,
) -> Result<SectionEntry> {
    file.begin()?;
    file.copy_from(&scratch.join("doc-offsets"))?;
    file.write(&data_len.to_le_bytes())?;
    Ok(file.end())
}

/// Writes the header over the zeros at the start of `out`, whose sections are all written, and
/// syncs the whole file.
fn write_header(mut out: File, header: &Header) -> Result<()> {
    out.seek(SeekFrom::Start(0))?;
    out.write_all(&header.encode())?;
    out.sync_all()?;
    Ok(())
}

/// Compressed records, concatenated, and where each ends.
type Chunk = (Vec<u8>, Vec<usize>);

/// Compresses `records` in parallel, in chunks that each fill one buffer (few allocations),
/// returned in order. With `key_hashes` (`check::doc_hash`, one per record, format v2 and later),
/// each blob gets its check.
fn compress_chunks(compressor: &Compressor, records: &[&[u8]], key_hashes: &[u64]) -> Vec<Chunk> {
    const CHUNK: usize = 64;
    records
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, chunk)| {
            let mut out = Vec::new();
            let mut ends = Vec::with_capacity(chunk.len());
            let key_hashes = key_hashes.get(c * CHUNK..).unwrap_or_default();
            for (i, raw) in chunk.iter().enumerate() {
                match key_hashes.get(i) {
                    Some(&key_hash) => {
                        check::put_checked(key_hash, &mut out, |out| compressor.compress(raw, out))
                    }
                    None => compressor.compress(raw, &mut out),
                }
                ends.push(out.len());
            }
            (out, ends)
        })
        .collect()
}

/// Appends compressed chunks to the data section and their records' offsets to `offsets`.
fn write_chunks(
    file: &mut SectionWriter,
    offsets: &mut impl Write,
    chunks: Vec<Chunk>,
) -> Result<()> {
    for (out, ends) in chunks {
        let base = file.pos - file.start;
        let mut start = 0;
        for end in ends {
            offsets.write_all(&(base + start as u64).to_le_bytes())?;
            start = end;
        }
        file.write(&out)?;
    }
    Ok(())
}

/// The compression thread: header space, schema, dictionary (from the first batch), then the
/// data section; blob offsets go to `offsets`.
fn write_data(
    file: File,
    offsets: File,
    schema: &Schema,
    options: &WriterOptions,
    batches: impl Iterator<Item = Batch>,
) -> Result<DataWritten> {
    let mut file = SectionWriter::new(file);
    let mut offsets = BufWriter::with_capacity(1 << 20, offsets);
    file.write(&[0u8; HEADER_SIZE])?;
    file.begin()?;
    let mut encoded = Vec::new();
    schema.encode(&mut encoded);
    file.write(&encoded)?;
    let schema_entry = file.end();

    let mut compressor: Option<Compressor> = None;
    let mut dictionary = SectionEntry::default();
    let mut start_data = |file: &mut SectionWriter, dict: &[u8]| -> Result<Compressor> {
        file.begin()?;
        file.write(dict)?;
        dictionary = file.end();
        file.begin()?;
        Compressor::new(options.level, dict)
    };
    // While the pool compresses batch k, this thread writes batch k-1 (compressed): the pool no
    // longer idles through every write, at the cost of holding one compressed batch more.
    let mut compressed: Option<Vec<Chunk>> = None;
    for batch in batches {
        let compressor = match &compressor {
            Some(c) => c,
            None => {
                let dict = match &options.dictionary {
                    _ if options.level == codec::LEVEL_NONE => Vec::new(), // stored as is
                    Some(given) => given.clone(),
                    None => codec::dictionary_for(batch.records(), options.dict_size),
                };
                compressor.insert(start_data(&mut file, &dict)?)
            }
        };
        let records: Vec<&[u8]> = batch.records().collect();
        let mut next = None;
        parallel::pool().in_place_scope(|scope| {
            scope.spawn(|_| next = Some(compress_chunks(compressor, &records, &batch.key_hashes)));
            compressed.take().map_or(Ok(()), |chunks| {
                write_chunks(&mut file, &mut offsets, chunks)
            })
        })?;
        compressed = next;
    }
    if let Some(chunks) = compressed {
        write_chunks(&mut file, &mut offsets, chunks)?;
    }
    if compressor.is_none() {
        start_data(&mut file, &[])?;
    }
    offsets.into_inner().map_err(|e| e.into_error())?;
    let data = file.end();
    Ok(DataWritten {
        file,
        schema: schema_entry,
        dictionary,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::{is_scratch_of, scratch_prefix, TargetLock, WriterOptions};

    #[test]
    fn validate_refuses_each_bad_option_and_creates_nothing() {
        assert!(WriterOptions::default().validate().is_ok());
        let dir = tempfile::tempdir().unwrap();
        let bad = [
            WriterOptions {
                level: 13,
                ..Default::default()
            },
            WriterOptions {
                batch_bytes: super::MAX_BATCH_BYTES + 1,
                ..Default::default()
            },
            WriterOptions {
                format_version: 0,
                ..Default::default()
            },
            WriterOptions {
                dict_size: (64 << 10) + 1,
                ..Default::default()
            },
            WriterOptions {
                dictionary: Some(vec![0; (64 << 10) + 1]),
                ..Default::default()
            },
        ];
        for options in bad {
            let message = options.validate().unwrap_err().to_string();
            let schema = crate::Schema::new(vec![]).unwrap();
            let target = dir.path().join("store");
            let created = super::Writer::create(&target, schema, options)
                .err()
                .unwrap();
            // `Writer::create` refuses them with the same error, before any file exists.
            assert_eq!(created.to_string(), message);
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_target_lock_excludes_other_holders_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let first = TargetLock::acquire(dir.path(), "corpus").unwrap();
        assert!(first.held());
        let (sender, receiver) = std::sync::mpsc::channel();
        let path = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            let second = TargetLock::acquire(&path, "corpus").unwrap();
            sender.send(second.held()).unwrap();
        });
        // Another target's lock is another file: not held by `first`.
        drop(TargetLock::acquire(dir.path(), "corpus.v2").unwrap());
        let waited = receiver.recv_timeout(std::time::Duration::from_millis(300));
        assert!(
            waited.is_err(),
            "a second holder got the lock while the first held it"
        );
        drop(first);
        assert!(receiver.recv().unwrap());
        waiter.join().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn publish_file_replaces_only_a_store_and_nothing_without_overwrite() {
        use super::{publish_file, Writer};
        use crate::Error;
        let dir = tempfile::tempdir().unwrap();
        let made = |name: &str| {
            let path = dir.path().join(name);
            let schema = crate::Schema::new(vec![]).unwrap();
            let mut writer = Writer::create(&path, schema, WriterOptions::default()).unwrap();
            writer.add("a", &[]).unwrap();
            writer.finish().unwrap();
            path
        };
        let (first, second) = (made("first"), made("second"));
        let (target, notes) = (dir.path().join("target"), dir.path().join("notes"));
        publish_file(&first, &target, false).unwrap();
        let refused = publish_file(&second, &target, false);
        assert!(
            matches!(refused, Err(Error::AlreadyExists(_))),
            "{refused:?}"
        );
        std::fs::write(&notes, b"the user's").unwrap();
        assert!(publish_file(&second, &notes, true).is_err());
        assert_eq!(std::fs::read(&notes).unwrap(), b"the user's");
        let other = dir.path().join("other");
        let not_a_store = publish_file(&notes, &other, false);
        assert!(matches!(not_a_store, Err(Error::InvalidArgument(_))));
        publish_file(&second, &target, true).unwrap(); // a store is replaced
        assert!(!second.exists() && target.exists() && !other.exists());
    }

    #[test]
    fn scratch_directories_are_told_apart_by_their_whole_name() {
        let prefix = scratch_prefix;
        let corpus = prefix("corpus");
        assert!(corpus.starts_with(".corpus.") && corpus.len() == 1 + 6 + 1 + 16 + 1);
        assert!(is_scratch_of(
            &format!("{corpus}a1B2c3.docstore-tmp"),
            &corpus
        ));
        assert!(!is_scratch_of(
            &format!("{corpus}a1B2c.docstore-tmp"),
            &corpus
        ));
        assert!(!is_scratch_of(
            &format!("{corpus}a1B2c3.docstore-tm"),
            &corpus
        ));
        let v2 = prefix("corpus.v2");
        assert!(!is_scratch_of(&format!("{v2}a1B2c3.docstore-tmp"), &corpus));
        assert!(!is_scratch_of(
            &format!("{corpus}a1B2c3.docstore-tmp"),
            &prefix("corpu")
        ));
        // Long names share their first 32 bytes, not their hash; the name stays short.
        let (a, b) = (
            prefix(&"é".repeat(127)),
            prefix(&format!("{}x", "é".repeat(127))),
        );
        assert_ne!(a, b);
        assert!(a.starts_with(&format!(".{}.", "é".repeat(16))));
        assert!(a.len() + 6 + ".docstore-tmp".len() <= 70);
    }
}
