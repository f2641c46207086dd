//! Read access to a store: constant-time open, binary search over the mapped key index,
//! O(1) access by position. Every offset read from the file is bounds-checked, so a corrupt
//! file yields `Error::Corrupt`, never a crash. In a format v2 store every document read is
//! proved to be the one asked for (`check`), and so is every position and every absence a
//! lookup reports (`confirm_absent`, `confirmed`).
//!
//! One `Store<B: Storage>` reads a memory map, a `Vec<u8>` (tests) or a remote store's cache
//! alike; its methods are split by concern, one `impl` block per file:
//!
//! - `mod.rs` (here): `Store` itself, `Found`, `DataAccess`; opening (`open`, `open_local`,
//!   `open_remote`, `from_bytes`, with a remote store's open checks) and what the header says.
//! - `layout`: the section views: a section's bytes, an entry of an offsets section, where a
//!   blob or the key of a position lies; all bounds-checked.
//! - `search`: the key search (the fences, then one block of the key index, then whole keys:
//!   `locate`, `locate_many`, `find`, `settle`) and its proofs (`confirm`, `confirm_absent`).
//!   It reads through a `Reach`: as it goes (`Fetch`), or over a remote cache noting what it
//!   lacks and stopping there (`Lack`), to be resumed once that is fetched.
//! - `plan`: what reading a batch's documents touches, round by round (doc offsets, then
//!   blobs, then keys): written once, run by three executors.
//! - `fetch`: a remote store's rounds: the search resumed (`search_fetching`) and the plan run
//!   (`fetch_reads`), each round one `Storage::ensure`.
//! - `pipeline`: the plan in the page cache (`hint_reads`) and the CPU cache
//!   (`read_pipelined`); `prepare_batch` picks the executors a batch needs.
//! - `records`: documents and keys read, each checked against its key (`with_record_of`,
//!   `read_found`, `read_one`, `key_at`, `keys_in`); `RecordBatch`.
//! - `verify`: every byte read and checked.
//!
//! What plans, what executes, and where bytes come from:
//!
//! ```text
//!   search (Reach) ---- lacks ---> fetch::search_fetching --+
//!   plan (touches) --+-> fetch::fetch_reads ----------------+--> Storage::ensure (storage/:
//!                    +-> pipeline::hint_reads --> pagecache        a map: nothing to do; a
//!                    +-> pipeline::read_pipelined --> CPU          remote cache: requests,
//!                                                                  rent or buy, counters)
//! ```

mod fetch;
mod layout;
mod pipeline;
mod plan;
mod records;
mod search;
mod verify;

use crate::error::{Error, Result};
use crate::format::schema::Schema;
use crate::format::{Header, Section, HEADER_SIZE};
use crate::storage::{remote::RemoteFile, Fingerprint, Region, Regions, Storage, StoreFile};
use memmap2::Mmap;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{self, AtomicBool};
use xxhash_rust::xxh3::xxh3_64;

pub use crate::storage::DataAccess;
pub(crate) use pipeline::read_pipelined;
pub use records::RecordBatch;

/// A document to read: its position and, when a key index entry gave it (format v3), where its
/// blob lies, so that reading it skips the doc offsets (one dependent read less: one random read
/// locally, one round trip remotely).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub pos: u64,
    /// `(offset in the data section, length)` as a key index entry holds it. A store uses it
    /// only when its own entries locate its blobs (`Header::locates_blobs`); the position's
    /// doc offsets otherwise.
    pub blob: Option<(u64, u64)>,
}

impl Found {
    /// The document at `pos`, located by its doc offsets.
    pub fn at(pos: u64) -> Found {
        Found { pos, blob: None }
    }
}

/// Lookups of a batch that advance together (see `positions`).
const GROUP: usize = 16;

/// An open store over any bytes: a memory map in production, a `Vec<u8>` in tests and fuzzing.
pub struct Store<B> {
    buf: B,
    header: Header,
    schema: Schema,
    ranges: [Range<usize>; Section::COUNT],
    /// The dictionary, copied at open where the storage's bytes may change (see `from_bytes`).
    dictionary: Option<Box<[u8]>>,
    /// The user metadata (format v5), a JSON object's text, checked and copied at open.
    metadata: Option<Box<str>>,
    /// The header checksum, taken at open: what `verify` compares a download with, which bytes
    /// damaged in a remote store's cache since must not change.
    fingerprint: u64,
    /// Where the prefix shared by every key lies in the keys section.
    common_prefix: Range<usize>,
    /// Whether the common prefix is readable (pinned once it is): at once locally, after the
    /// first lookup over a remote store's cache.
    prefix_fetched: AtomicBool,
    /// Bytes of a key index entry, and entries per block (`Header::key_entry`, `key_block`).
    entry_size: usize,
    block: u64,
}

impl Store<StoreFile> {
    /// Maps the file read-only. Costs the same for any store size: nothing is read but the header,
    /// the schema and the dictionary (the key fences, 1/512 of the key index, are asked for in
    /// the background).
    pub fn open(path: impl AsRef<Path>) -> Result<Store<StoreFile>> {
        Store::open_with(path, DataAccess::Mmap)
    }

    /// Like `open`, reading documents as `access` says (the index is always mapped).
    pub fn open_with(path: impl AsRef<Path>, access: DataAccess) -> Result<Store<StoreFile>> {
        let (file, mmap) = map_store_file(path.as_ref())?;
        Store::from_bytes(StoreFile::local(mmap, file, access))
    }

    /// `open_with` (what a collection holds).
    pub fn open_local(path: impl AsRef<Path>, access: DataAccess) -> Result<Store<StoreFile>> {
        Store::open_with(path, access)
    }

    /// `open_local` of a file already opened (a collection opens its files relative to its
    /// directory, which may be replaced meanwhile); `path` names it in errors.
    pub fn open_local_file(
        file: File,
        path: &Path,
        access: DataAccess,
    ) -> Result<Store<StoreFile>> {
        let mmap = map_opened(&file, path)?;
        Store::from_bytes(StoreFile::local(mmap, file, access))
    }

    /// A remote store: `file` has fetched the first bytes (header, schema, dictionary); opening
    /// fetches the key fences, which every lookup reads (and the rest of the schema and
    /// dictionary, where they go past the first bytes), in one round.
    pub fn open_remote(file: RemoteFile) -> Result<Store<StoreFile>> {
        Store::from_bytes(StoreFile::remote(file)?)
    }

    /// The remote file behind this store, if it is one.
    pub fn remote_file(&self) -> Option<&RemoteFile> {
        self.buf.remote_file()
    }
}

/// Opens and maps a store file read-only (see `Store::open`).
fn map_store_file(path: &Path) -> Result<(File, Mmap)> {
    // Opening a FIFO for reading blocks until a writer comes: look before opening.
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, socket or device)"
        };
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is {what}", path.display()),
        )));
    }
    let file = crate::runtime::platform::no_block(File::options().read(true)).open(path)?;
    let mmap = map_opened(&file, path)?;
    Ok((file, mmap))
}

/// Maps an opened store file read-only, once it is known to be a regular file of a header's length.
fn map_opened(file: &File, path: &Path) -> Result<Mmap> {
    if !file.metadata()?.is_file() {
        // Replaced by something else between the two looks.
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        )));
    }
    if file.metadata()?.len() < HEADER_SIZE as u64 {
        // mmap of an empty file fails; report what it is instead.
        let mut start = [0u8; 12];
        let n = std::io::Read::read(&mut &*file, &mut start)?;
        Header::decode(&start[..n], n as u64)?;
        return Err(Error::corrupt(
            "file is shorter than its header (truncated)",
        ));
    }
    // SAFETY: stores are immutable once renamed into place; a store changed underneath a
    // reader is outside the contract (as with any mmapped file).
    let mmap = unsafe { Mmap::map(file)? };
    // Lookups touch one or two pages each: read-ahead would only evict useful pages. What
    // open reads whole (the schema, the dictionary, the key fences) it asks for whole
    // (`Storage::open` of a local file).
    crate::runtime::platform::hints::random_access(&mmap);
    Ok(mmap)
}

impl<B: Storage> Store<B> {
    pub fn from_bytes(buf: B) -> Result<Store<B>> {
        let bytes = buf.as_ref();
        let header = Header::decode(bytes, bytes.len() as u64)?;
        // What every read relies on, made readable (a remote store: fetched in one round,
        // checked, healed) before anything below reads it.
        buf.open(&regions(&header, crate::format::header_checksum(bytes)))?;
        let ranges = Section::ALL.map(|s| {
            let entry = header.section(s);
            entry.offset as usize..(entry.offset + entry.len) as usize
        });
        let section = |s: Section| &bytes[ranges[s as usize].clone()];
        // Where bytes may change under the reader (a remote store's cache file: damaged on disk,
        // rewritten by another process), the dictionary is copied, then checked: a changed
        // dictionary would decode documents to wrong text that their checks (of stored bytes)
        // pass. A local store's file is immutable once sealed, and its dictionary stays where it
        // is mapped (a copy would cost every process 64 KiB of memory per shard).
        let dictionary = (!buf.stable()).then(|| Box::<[u8]>::from(section(Section::Dictionary)));
        let checked = [
            (Section::Schema, section(Section::Schema)),
            (
                Section::Dictionary,
                dictionary
                    .as_deref()
                    .unwrap_or(section(Section::Dictionary)),
            ),
        ];
        for (s, bytes) in checked {
            if xxh3_64(bytes) != header.section(s).checksum {
                return Err(Error::corrupt(format!("{} checksum mismatch", s.name())));
            }
        }
        let schema = Schema::decode(section(Section::Schema))?;
        // Format v5: checked whole (its checksum, then one JSON object) and copied, as small as
        // the schema and bounded the same way (`Header::decode`).
        let metadata = match header.has_metadata() {
            true => {
                let bytes = section(Section::Metadata);
                if xxh3_64(bytes) != header.section(Section::Metadata).checksum {
                    return Err(Error::corrupt("metadata checksum mismatch"));
                }
                Some(Box::from(crate::format::metadata::check(bytes)?))
            }
            false => None,
        };
        // Nullable fields and the types version 4 added are refused in an older store rather
        // than read by rules its writer did not follow.
        if schema.min_version() > header.version {
            return Err(Error::corrupt(format!(
                "bad schema: a version {} store with a field of a type version 4 added",
                header.version
            )));
        }
        // Only a collection's global index (no fields) locates blobs elsewhere: on a store with
        // fields the flag would leave its locations unchecked by `verify`.
        if header.locates_shard_blobs() && !schema.fields.is_empty() {
            return Err(Error::corrupt(
                "header flag 0x01 (a collection's global index) on a store with fields",
            ));
        }
        let count = header.count;
        if count >= u64::from(u32::MAX) {
            return Err(Error::corrupt("document count out of range"));
        }
        let expected = [
            (Section::DocOffsets, (count + 1) * 8),
            (Section::KeyOffsets, (count + 1) * 8),
            (Section::KeyIndex, count * header.key_entry() as u64),
            (Section::KeyFences, count.div_ceil(header.key_block()) * 8),
            (Section::KeyRanks, count * 4),
        ];
        for (s, len) in expected {
            if header.section(s).len != len {
                return Err(Error::corrupt(format!(
                    "{} section has the wrong size",
                    s.name()
                )));
            }
        }
        let fingerprint = crate::format::header_checksum(buf.as_ref());
        let mut store = Store {
            buf,
            fingerprint,
            entry_size: header.key_entry(),
            block: header.key_block(),
            header,
            schema,
            ranges,
            dictionary,
            metadata,
            common_prefix: 0..0,
            prefix_fetched: AtomicBool::new(false),
        };
        let common = store.header.common_prefix as usize;
        if common > store.section(Section::Keys).len() {
            return Err(Error::corrupt("common key prefix longer than the keys"));
        }
        store.common_prefix = 0..common;
        // The last offsets close their sections, and the first key holds the common prefix:
        // cheap checks that catch most truncations, made where those bytes are at hand. Over a
        // remote store's cold cache they would cost three requests more than the open's two;
        // there the header's section table refuses a truncated object, and damage elsewhere
        // fails the document checks and `verify`.
        let last = count as usize * 8..count as usize * 8 + 8;
        if store.has(Section::DocOffsets, last.clone())
            && store.has(Section::KeyOffsets, last)
            && store.has(Section::KeyOffsets, 0..8)
        {
            if store.offset(Section::DocOffsets, count) != store.section(Section::Data).len() as u64
                || store.offset(Section::KeyOffsets, count)
                    != store.section(Section::Keys).len() as u64
            {
                return Err(Error::corrupt("index does not match its data (truncated?)"));
            }
            if count > 0 {
                let first = store.range_at(Section::KeyOffsets, Section::Keys, 0)?;
                if first.len() < common {
                    return Err(Error::corrupt(
                        "common key prefix longer than the first key",
                    ));
                }
                store.common_prefix = first.start..first.start + common;
            }
        }
        // Pinned: every search compares keys with it. Fetched with the first lookup where it is
        // not at hand (`search_fetching`).
        let prefix = store.in_file(Section::Keys, store.common_prefix.clone());
        store.buf.pin(std::slice::from_ref(&prefix));
        let at_hand = prefix.is_empty() || store.buf.present(prefix);
        store
            .prefix_fetched
            .store(at_hand, atomic::Ordering::Release);
        Ok(store)
    }

    pub fn len(&self) -> u64 {
        self.header.count
    }

    pub fn is_empty(&self) -> bool {
        self.header.count == 0
    }

    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Whether every document read is checked against its key (format v2 and later).
    pub fn checked(&self) -> bool {
        self.header.checked()
    }

    /// Identifies the store's contents: its header checksum (see `format::header_checksum`).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Where the bytes come from (see `storage`).
    pub fn storage(&self) -> &B {
        &self.buf
    }

    pub fn file_len(&self) -> u64 {
        self.buf.as_ref().len() as u64
    }

    pub fn dictionary(&self) -> &[u8] {
        match &self.dictionary {
            Some(copy) => copy,
            None => self.section(Section::Dictionary),
        }
    }

    /// The user metadata a format v5 store holds: the text of one JSON object (checked at open);
    /// None for a store without (every store before version 5).
    pub fn metadata(&self) -> Option<&str> {
        self.metadata.as_deref()
    }

    /// How this store reads documents.
    pub fn data_access(&self) -> DataAccess {
        self.buf.data_access()
    }
}

/// What a store file's first bytes declare to its storage (`storage::Declare`): the header
/// decoded and checked against the file's `size`, and the store's regions.
pub fn declare(first: &[u8], size: u64) -> Result<Regions> {
    let header = Header::decode(first, size)?;
    Ok(regions(&header, crate::format::header_checksum(first)))
}

/// What a store of `header` declares to its storage at open (`storage::Regions`).
fn regions(header: &Header, fingerprint: u64) -> Regions {
    let region = |s: Section| {
        let e = header.section(s);
        Region {
            what: s.name(),
            range: e.offset..e.offset + e.len,
            checksum: e.checksum,
        }
    };
    Regions {
        header: 0..HEADER_SIZE as u64,
        fingerprint: Fingerprint {
            at: crate::format::FINGERPRINT_AT as u64..HEADER_SIZE as u64,
            value: fingerprint,
        },
        // What opening a remote store reads past its first bytes: the key fences (one
        // request), the metadata (format v5, at the end of the file) in the same round, and the
        // schema and the dictionary where they do not fit the first request.
        pinned: [Section::Schema, Section::Dictionary, Section::KeyFences]
            .into_iter()
            .chain(header.has_metadata().then_some(Section::Metadata))
            .map(region)
            .collect(),
        index: Section::INDEX.map(region).to_vec(),
        documents: region(Section::Data),
    }
}
