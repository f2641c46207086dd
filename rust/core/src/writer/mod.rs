//! Streaming, crash-safe construction of a store.
//!
//! Documents are encoded on the caller's thread and handed over in batches to a background thread
//! (`pipeline`) that compresses each batch in parallel and appends it to a partial file in a
//! scratch directory beside the target. Keys are sorted externally (`keys::sort`) and their
//! sections written by `keys::build`. Only a complete, checksummed and synced file is ever
//! published at the target path (`publish`), so a failure or a kill leaves nothing there.

mod options;
mod pipeline;

pub use options::WriterOptions;

use crate::columns::Columns;
use crate::error::{Error, Result};
use crate::format::check;
use crate::format::record::{self, Value};
use crate::format::schema::Schema;
use crate::format::sections::SectionWriter;
use crate::format::{self, Header, Section, SectionEntry, FLAG_SHARD_LOCATIONS};
use crate::keys::build::{self, BlobLocations};
use crate::keys::sort::KeySorter;
use crate::publish::{self, Scratch, TargetLock};
use crate::repeats::IdTable;
use pipeline::{write_data, Batch, DataWritten};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;

/// Bytes of `key_buffer_bytes` counted per id that the table of ids added holds (its slots are
/// ~30-60 bytes an id): the default 64 MiB holds the first 512Ki ids, found repeated at once.
const ID_TABLE_COST: usize = 128;

/// The most documents a store holds (positions are u32, and one value is kept free).
pub const MAX_DOCS: u64 = u32::MAX as u64 - 1;

/// What a finished build produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub raw_bytes: u64,
    pub file_bytes: u64,
}

pub struct Writer {
    schema: Schema,
    options: WriterOptions,
    target: PathBuf,
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
    /// Where the partial file, the doc offsets and the key runs are written; removed with the
    /// writer (but in a forked child: `Scratch`'s drop). Last: dropped after every file in it.
    scratch: Scratch,
}

/// The version a writer allowed versions up to `newest` writes for `schema`: version 3 (or
/// older, if asked) unless the schema needs 4, or the store has metadata (5).
fn written_version(schema: &Schema, newest: u32, metadata: bool) -> Result<u32> {
    if metadata {
        // `WriterOptions::validate` refused metadata with an older `newest`.
        return Ok(format::METADATA_VERSION);
    }
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
        let (parent, name) = publish::split_target(&target)?;
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
            publish::check_replaceable_file(&target)?;
        }
        // Validates the options before any file exists.
        options.validate()?;
        let mut options = options;
        options.format_version =
            written_version(&schema, options.format_version, options.metadata.is_some())?;
        let scratch = Scratch::create(&parent, &name, &TargetLock::acquire(&parent, &name)?)?;
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
            count: 0,
            raw_bytes: 0,
            batch: Batch::with_capacity(batch_bytes),
            keys,
            ids: IdTable::with_limit(key_buffer_bytes / ID_TABLE_COST),
            sender: Some(sender),
            worker: Some(worker),
            pid: crate::runtime::process::instance(),
            scratch,
        })
    }

    /// Refuses work in a forked child: its compression thread exists only in the parent.
    fn check_process(&self) -> Result<()> {
        if crate::runtime::process::instance() == self.pid {
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
        let mut out = build::write_ranks(file, &mut header, &scratch)?;
        if let Some(metadata) = &self.options.metadata {
            header.sections[Section::Metadata as usize] =
                write_metadata(&mut out, metadata.as_bytes())?;
        }
        write_header(out, &header)?;
        self.publish(&scratch.join("store"))?;
        let last = header.section(*header.present().last().expect("nine sections or ten"));
        Ok(Summary {
            count: self.count,
            raw_bytes: self.raw_bytes,
            file_bytes: last.offset + last.len,
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

    /// Moves the finished file to the target (`publish::publish_file`).
    fn publish(&self, finished: &Path) -> Result<()> {
        publish::publish_file(finished, &self.target, self.options.overwrite)
    }
}

impl Drop for Writer {
    /// An unfinished writer leaves nothing behind: the worker stops and the scratch dir goes.
    /// In a forked child both are the parent's, so they are left alone.
    fn drop(&mut self) {
        if crate::runtime::process::instance() != self.pid {
            std::mem::forget(self.worker.take());
            return;
        }
        self.sender = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        // The scratch directory goes as the fields drop: last, once every file in it is closed
        // (Windows cannot remove a directory that holds an open file).
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

/// Appends the metadata section (format v5, the last) to `out`, which ends with the key ranks:
/// zero padding to the alignment, then the JSON text (checked by `WriterOptions::validate`).
fn write_metadata(out: &mut File, metadata: &[u8]) -> Result<SectionEntry> {
    let end = out.seek(SeekFrom::End(0))?;
    let offset = end.next_multiple_of(format::ALIGN);
    out.write_all(&vec![0u8; (offset - end) as usize])?;
    out.write_all(metadata)?;
    Ok(SectionEntry {
        offset,
        len: metadata.len() as u64,
        checksum: xxhash_rust::xxh3::xxh3_64(metadata),
    })
}

/// Writes the header over the zeros at the start of `out`, whose sections are all written, and
/// syncs the whole file.
fn write_header(mut out: File, header: &Header) -> Result<()> {
    out.seek(SeekFrom::Start(0))?;
    out.write_all(&header.encode())?;
    out.sync_all()?;
    Ok(())
}
