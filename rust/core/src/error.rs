//! The one error type of the core. The Python bindings map each variant to one exception class.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while writing or reading a store.
#[derive(Debug)]
pub enum Error {
    /// The file is not a valid store (bad magic, checksum mismatch, out-of-range offsets ...).
    Corrupt(String),
    /// The store was written in a format version outside `min..=max`, the
    /// versions this docstore reads.
    UnsupportedVersion {
        found: u32,
        min: u32,
        max: u32,
    },
    /// A collection's manifest has a version other than `supported`, the one this docstore
    /// reads (a collection sealed by a newer or an older docstore).
    UnsupportedManifestVersion {
        found: u32,
        supported: u32,
    },
    /// Two documents share one key.
    DuplicateKey(String),
    /// A document repeats the key of the document at position `first` (found when added).
    DuplicateKeyAt {
        key: String,
        first: u64,
        second: u64,
    },
    /// Two shards sealed into one collection hold the same key.
    DuplicateKeyIn {
        key: String,
        first: PathBuf,
        second: PathBuf,
    },
    /// An argument is out of its range or of the wrong kind (no shards to seal, a bad option).
    InvalidArgument(String),
    /// A key is not usable (empty).
    InvalidKey(String),
    /// The schema, or a document against the schema, is wrong (missing/extra field, unknown type).
    Schema(String),
    /// A field value has the wrong type.
    FieldType(String),
    /// The target path already holds a store and overwrite was not asked for.
    AlreadyExists(PathBuf),
    /// A position outside `0..len`.
    OutOfRange {
        index: u64,
        len: u64,
    },
    /// The writer was used after it finished or failed.
    Closed(String),
    /// Memory for `bytes` more bytes could not be had (a genuine huge document under a memory
    /// limit): an error to raise, where an infallible allocation would abort the process.
    OutOfMemory {
        bytes: usize,
    },
    /// A remote object changed since the store was opened (its ETag no longer matches): its
    /// bytes are another store's.
    Changed(String),
    Io(io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn corrupt(msg: impl Into<String>) -> Self {
        Error::Corrupt(msg.into())
    }
}

/// Makes room for `additional` more items in `buf`, or says that memory ran out: every buffer
/// whose size comes from a file (a decoded record, a blob read with `pread`, a batch of records)
/// grows through this, so that a document too large for the memory at hand is an error, not an
/// abort. What a file claims is bounded before it gets here (see `codec::parse`).
pub fn try_reserve<T>(buf: &mut Vec<T>, additional: usize) -> Result<()> {
    buf.try_reserve(additional).map_err(|_| Error::OutOfMemory {
        bytes: additional.saturating_mul(std::mem::size_of::<T>()),
    })
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt(msg) => write!(f, "corrupt store: {msg}"),
            Error::UnsupportedVersion { found, min, max } if found > max => write!(
                f,
                "store format version {found} is not supported by this docstore \
                 (it reads versions {min} to {max}); upgrade docstore"
            ),
            Error::UnsupportedVersion { found, min, max } => write!(
                f,
                "store format version {found} is older than the versions this docstore reads \
                 ({min} to {max}); rebuild the store"
            ),
            Error::UnsupportedManifestVersion { found, supported } if found > supported => write!(
                f,
                "collection manifest version {found} is not supported by this docstore \
                 (it reads version {supported}); upgrade docstore"
            ),
            Error::UnsupportedManifestVersion { found, supported } => write!(
                f,
                "collection manifest version {found} is older than the version this docstore \
                 reads ({supported}); seal the collection's shards again"
            ),
            Error::DuplicateKey(key) => write!(f, "duplicate doc id {key:?}"),
            Error::DuplicateKeyAt { key, first, second } => write!(
                f,
                "duplicate doc id {key:?} at position {second} (first at position {first})"
            ),
            Error::DuplicateKeyIn { key, first, second } => write!(
                f,
                "duplicate doc id {key:?}: in shard {} and in shard {}",
                first.display(),
                second.display()
            ),
            Error::InvalidKey(msg) => write!(f, "invalid doc id: {msg}"),
            Error::Schema(msg)
            | Error::FieldType(msg)
            | Error::Closed(msg)
            | Error::Changed(msg)
            | Error::InvalidArgument(msg) => f.write_str(msg),
            Error::AlreadyExists(path) => write!(
                f,
                "{} already exists (pass overwrite=True to replace it)",
                path.display()
            ),
            Error::OutOfRange { index, len } => {
                write!(
                    f,
                    "position {index} out of range for a store of {len} documents"
                )
            }
            Error::OutOfMemory { bytes } => {
                write!(f, "out of memory: {bytes} bytes could not be allocated")
            }
            Error::Io(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Self {
        Error::Io(err)
    }
}
