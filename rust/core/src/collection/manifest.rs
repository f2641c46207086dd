//! `docstore-collection.json`: what a collection directory holds, in order (docs/collections.md).
//!
//! JSON so that people and tools can read it; every file it names is pinned by its fingerprint
//! (the header checksum, which covers every section's checksum), so a damaged manifest or a shard
//! replaced on disk is refused at open instead of read as another collection.

use super::dir::CollectionDir;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

/// The manifest's file name inside a collection directory.
pub const MANIFEST: &str = "docstore-collection.json";
/// The value of the manifest's `format` field.
const FORMAT: &str = "docstore-collection";
/// The manifest version this docstore writes and reads.
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// Documents in the whole collection.
    pub count: u64,
    /// The global id index: a store without fields whose document `p` is the collection's
    /// document `p` (its key index maps every id to its global position).
    pub index: FileEntry,
    /// The shards in position order.
    pub shards: Vec<FileEntry>,
    /// xxh3-64 (16 hex digits) of the manifest's compact JSON with this field empty: an edited or
    /// damaged manifest (shards reordered, a count changed) is refused rather than read.
    pub checksum: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative to the collection directory.
    pub file: String,
    pub count: u64,
    /// The store's header checksum, as 16 hex digits (JSON numbers lose bits past 2^53).
    pub fingerprint: String,
}

impl FileEntry {
    pub fn new(file: String, count: u64, fingerprint: u64) -> FileEntry {
        FileEntry {
            file,
            count,
            fingerprint: format!("{fingerprint:016x}"),
        }
    }

    pub fn fingerprint(&self) -> Result<u64> {
        u64::from_str_radix(&self.fingerprint, 16)
            .ok()
            .filter(|_| self.fingerprint.len() == 16)
            .ok_or_else(|| Error::corrupt(format!("bad fingerprint {:?}", self.fingerprint)))
    }

    /// The file's path inside `dir`; refuses names that would leave it.
    pub fn path_in(&self, dir: &Path) -> Result<PathBuf> {
        Ok(dir.join(self.relative()?))
    }

    /// The file's name relative to the collection, refused if it would leave it.
    ///
    /// One rule wherever the collection lies, taken as strictly as any reader of the name could
    /// take it: `/` separates; a backslash is refused (a separator to an HTTP client, and on
    /// Windows); every component, also percent-decoded (as a URL parser decodes `%2e%2e` into
    /// `..`), must be a plain name: not empty, `.` or `..`, and without an encoded separator.
    pub fn relative(&self) -> Result<&Path> {
        let relative = Path::new(&self.file);
        let plain = |part: &str| !part.is_empty() && part != "." && part != "..";
        let inside = !self.file.is_empty()
            && !self.file.contains(['\\', '\0'])
            && self.file.split('/').all(|part| {
                plain(part)
                    && percent_decoded(part)
                        .is_some_and(|p| plain(&p) && !p.contains(['/', '\\', '\0']))
            })
            && relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !inside {
            return Err(Error::corrupt(format!(
                "the manifest names {:?}, which is not a file inside the collection",
                self.file
            )));
        }
        Ok(relative)
    }
}

impl Manifest {
    pub fn new(count: u64, index: FileEntry, shards: Vec<FileEntry>) -> Manifest {
        let mut manifest = Manifest {
            format: FORMAT.into(),
            version: VERSION,
            count,
            index,
            shards,
            checksum: String::new(),
        };
        manifest.checksum = manifest.expected_checksum();
        manifest
    }

    fn expected_checksum(&self) -> String {
        let unsealed = Manifest {
            checksum: String::new(),
            ..self.clone()
        };
        let bytes = serde_json::to_vec(&unsealed).expect("a manifest always serialises");
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes))
    }

    /// Reads the manifest of the collection `dir` holds open (a regular file: a FIFO would block).
    pub(super) fn read_in(dir: &CollectionDir) -> Result<Manifest> {
        let path = dir.path().join(MANIFEST);
        let bytes = match dir.open_file(Path::new(MANIFEST)).and_then(read_fallibly) {
            Ok(bytes) => bytes,
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a directory without {MANIFEST}: not a docstore collection",
                        dir.path().display()
                    ),
                )))
            }
            Err(e) => return Err(e),
        };
        Manifest::parse(&bytes, &path.display().to_string())
    }

    /// Parses and checks a manifest's bytes; `name` says where they came from in errors.
    pub fn parse(bytes: &[u8], name: &str) -> Result<Manifest> {
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| Error::corrupt(format!("{name}: {e}")))?;
        if manifest.format != FORMAT {
            return Err(Error::corrupt(format!(
                "{name}: format is {:?}, not {FORMAT:?}",
                manifest.format
            )));
        }
        if manifest.version != VERSION {
            return Err(Error::UnsupportedManifestVersion {
                found: manifest.version,
                supported: VERSION,
            });
        }
        if manifest.checksum != manifest.expected_checksum() {
            return Err(Error::corrupt(format!(
                "{name}: checksum mismatch (the manifest was changed or damaged)"
            )));
        }
        let total: u64 = manifest.shards.iter().map(|s| s.count).sum();
        if manifest.shards.is_empty() || total != manifest.count || manifest.index.count != total {
            return Err(Error::corrupt(format!("{name}: the counts do not add up")));
        }
        Ok(manifest)
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a manifest always serialises");
        bytes.push(b'\n');
        bytes
    }
}

/// `part` with its `%XX` escapes decoded, as a URL parser decodes a path; `None` if what they
/// decode to is not UTF-8 (no name sealed here is).
fn percent_decoded(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The bytes of `file`, their room reserved fallibly: a file too large for the memory at hand (a
/// manifest is a few KB; a crafted one need not be) is `OutOfMemory`, not an abort.
fn read_fallibly(mut file: std::fs::File) -> Result<Vec<u8>> {
    use std::io::Read;
    let len = file.metadata()?.len();
    let mut bytes = Vec::new();
    crate::error::try_reserve(&mut bytes, usize::try_from(len).unwrap_or(usize::MAX))?;
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(file: &str) -> FileEntry {
        FileEntry::new(file.into(), 1, 0)
    }

    #[test]
    fn names_inside_the_collection_only() {
        for good in [
            "index.docstore",
            "shards/part-00000.docstore",
            "a%20b",
            "100%",
        ] {
            assert!(named(good).relative().is_ok(), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "./x",
            "a/../x",
            "a//x",
            "a/",
            "%2e%2e/x",
            "%2E%2e/x",
            ".%2e/x",
            "shards/%2E%2E/%2e%2e/x",
            "..\\x",
            "a\\b",
            "a%2fb",
            "a%2Fb",
            "a%5cb",
            "%2e",
            "a\0b",
            "a%00b",
            "%ff",
        ] {
            let err = named(bad).relative().unwrap_err();
            assert!(matches!(err, Error::Corrupt(_)), "{bad}: {err}");
        }
    }
}
