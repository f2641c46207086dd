//! The bytes on disk (docs/format.md). This file is the fixed 512-byte header and the section
//! table; beside it, one file per part of the format:
//!
//! - `schema`: field types and the schema section;
//! - `record`: one document's fields as raw record bytes, with `varint` lengths and the
//!   byte `planes` of numeric arrays;
//! - `check`: the per-document check in front of every blob;
//! - `key_entry`: the key index's entries, blocks and fences (what `keys` builds and the
//!   search reads);
//! - `sections`: a store file written section by section, hashed for the section table.
//!
//! Nothing here imports from the layers above (keys, store, writer, storage).
//!
//! Version 2 adds a check in front of every blob (`check`); version 3 binds the position into
//! that check and puts each document's blob location in its key index entry, so that a lookup
//! by key reads the key index and then the blob, nothing between (one round trip less remotely,
//! one random read less locally). Version 4 only adds field types and nullable fields. Version
//! 5 only adds the user metadata section (`metadata`), a tenth section at the end of the file.

pub mod check;
pub mod key_entry;
pub mod metadata;
pub mod planes;
pub mod record;
pub mod schema;
pub(crate) mod sections;
pub(crate) mod varint;

use crate::error::{Error, Result};
use key_entry::{KEY_ENTRY_V2, KEY_ENTRY_V3, KEY_INDEX_ALIGN};
use xxhash_rust::xxh3::xxh3_64;

pub const MAGIC: [u8; 8] = *b"DOCSTORE";
/// The version this docstore writes for a store whose fields version 3 holds (every store
/// before version 4), byte for byte as before, so that readers of version 3 open it.
pub const VERSION: u32 = 3;
/// The newest version it reads and writes: version 4 with the user metadata section, written
/// only for a store given metadata (`metadata`).
pub const NEWEST: u32 = 5;
/// The first version with the user metadata section (section 9): a store without metadata is
/// written as before, byte for byte.
pub const METADATA_VERSION: u32 = 5;
/// The oldest version it reads: version 1 stores lack the per-document checks of version 2.
pub const MIN_VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 512;
/// The longest dictionary section: lz4 only ever looks 64 KiB back, so a longer dictionary is
/// wasted space, and `open()` reads the section whole (bounded, whatever the file claims).
pub const MAX_DICT_SIZE: usize = 64 * 1024;
/// Every section starts at a multiple of this, so fixed-width arrays are naturally aligned.
pub const ALIGN: u64 = 8;
/// Header flag (byte `FLAGS_AT`, version 3): the blob locations of the key index lie in the data
/// sections of a collection's shards, not in this file (a collection's global id index, §13).
pub const FLAG_SHARD_LOCATIONS: u8 = 1;

/// The sections of a store, in file order. The discriminant is the index in the section table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Field names and types, codec parameters.
    Schema = 0,
    /// The lz4 dictionary shared by all documents (may be empty).
    Dictionary = 1,
    /// Concatenated document blobs in insertion order.
    Data = 2,
    /// `count + 1` u64: offset of each blob in Data, then Data's length.
    DocOffsets = 3,
    /// Concatenated keys (UTF-8) in sorted byte order.
    Keys = 4,
    /// `count + 1` u64: offset of each sorted key in Keys, then Keys' length.
    KeyOffsets = 5,
    /// `count` entries of `Header::key_entry()` bytes, one per sorted key: the 8 bytes that
    /// follow the prefix all keys share as a big-endian number (zero-padded), the key's position
    /// and its length, and (version 3) where its document's blob lies. A lookup finds everything
    /// it needs in one entry, so short keys are found without reading the keys section.
    KeyIndex = 6,
    /// `ceil(count / key_block)` u64: the prefix of every block's first entry, a small array
    /// that stays cached and tells which page of the key index holds a key.
    KeyFences = 7,
    /// `count` u32: the sorted rank of the key of each position (inverse of the index positions).
    KeyRanks = 8,
    /// Version 5: the user's metadata, one JSON object (`metadata`). Absent (no table entry, an
    /// empty range) before version 5.
    Metadata = 9,
}

impl Section {
    /// Table entries a header holds room for: nine before version 5, ten from it.
    pub const COUNT: usize = 10;
    pub const ALL: [Section; Section::COUNT] = [
        Section::Schema,
        Section::Dictionary,
        Section::Data,
        Section::DocOffsets,
        Section::Keys,
        Section::KeyOffsets,
        Section::KeyIndex,
        Section::KeyFences,
        Section::KeyRanks,
        Section::Metadata,
    ];

    /// The index: the sections a lookup reads piece by piece (a remote store may buy them whole).
    pub const INDEX: [Section; 5] = [
        Section::DocOffsets,
        Section::Keys,
        Section::KeyOffsets,
        Section::KeyIndex,
        Section::KeyRanks,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Section::Schema => "schema",
            Section::Dictionary => "dictionary",
            Section::Data => "data",
            Section::DocOffsets => "doc offsets",
            Section::Keys => "keys",
            Section::KeyOffsets => "key offsets",
            Section::KeyIndex => "key index",
            Section::KeyFences => "key fences",
            Section::KeyRanks => "key ranks",
            Section::Metadata => "metadata",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SectionEntry {
    pub offset: u64,
    pub len: u64,
    /// xxh3-64 of the section's bytes.
    pub checksum: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `MIN_VERSION..=VERSION`; from 2 on, every blob starts with its check (`check`).
    pub version: u32,
    pub count: u64,
    /// Sum of the raw (uncompressed) record sizes.
    pub raw_bytes: u64,
    /// Compression level the writer used, 0xFF for none (informational; decoding does not
    /// depend on it).
    pub level: u8,
    /// Length of the byte prefix shared by every key (skipped by the key index prefixes).
    pub common_prefix: u32,
    /// `FLAG_*` bits (version 3; a reserved zero byte before it).
    pub flags: u8,
    pub sections: [SectionEntry; Section::COUNT],
}

// Byte offsets inside the header.
const COUNT_AT: usize = 16;
const RAW_AT: usize = 24;
const SECTIONS_COUNT_AT: usize = 32;
const LEVEL_AT: usize = 36;
const FLAGS_AT: usize = 37;
const COMMON_PREFIX_AT: usize = 40;
const TABLE_AT: usize = 64;
const CHECKSUM_AT: usize = HEADER_SIZE - 8;
/// Where the header's checksum lies: what tells one version of a file from another.
pub const FINGERPRINT_AT: usize = CHECKSUM_AT;

impl Header {
    /// Whether every blob carries its check (format v2 and later).
    pub fn checked(&self) -> bool {
        self.version >= 2
    }

    /// Whether the check of a blob binds its position too (format v3 and later).
    pub fn binds_position(&self) -> bool {
        self.version >= 3
    }

    /// Bytes of one key index entry.
    pub fn key_entry(&self) -> usize {
        if self.version >= 3 {
            KEY_ENTRY_V3
        } else {
            KEY_ENTRY_V2
        }
    }

    /// Key index entries per block (one page): one fence per block.
    pub fn key_block(&self) -> u64 {
        KEY_INDEX_ALIGN / self.key_entry() as u64
    }

    /// Whether the key index entries locate the blobs of this file's own data section (format
    /// v3, except a collection's global index, whose entries locate its shards' blobs).
    pub fn locates_blobs(&self) -> bool {
        self.version >= 3 && self.flags & FLAG_SHARD_LOCATIONS == 0
    }

    /// Whether the key index entries locate the blobs in a collection's shards (its global id
    /// index, format v3).
    pub fn locates_shard_blobs(&self) -> bool {
        self.version >= 3 && self.flags & FLAG_SHARD_LOCATIONS != 0
    }

    pub fn section(&self, section: Section) -> SectionEntry {
        self.sections[section as usize]
    }

    /// The sections a store of this version has, in file order: nine, and from version 5 the
    /// metadata section (the last).
    pub fn present(&self) -> &'static [Section] {
        &Section::ALL[..section_count(self.version)]
    }

    /// Whether this store has the user metadata section (format v5).
    pub fn has_metadata(&self) -> bool {
        self.version >= METADATA_VERSION
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut buf = [0u8; HEADER_SIZE];
        buf[..8].copy_from_slice(&MAGIC);
        buf[8..12].copy_from_slice(&self.version.to_le_bytes());
        buf[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        buf[COUNT_AT..COUNT_AT + 8].copy_from_slice(&self.count.to_le_bytes());
        buf[RAW_AT..RAW_AT + 8].copy_from_slice(&self.raw_bytes.to_le_bytes());
        let present = section_count(self.version);
        buf[SECTIONS_COUNT_AT..SECTIONS_COUNT_AT + 4]
            .copy_from_slice(&(present as u32).to_le_bytes());
        buf[LEVEL_AT] = self.level;
        buf[FLAGS_AT] = self.flags;
        buf[COMMON_PREFIX_AT..COMMON_PREFIX_AT + 4]
            .copy_from_slice(&self.common_prefix.to_le_bytes());
        for (i, entry) in self.sections[..present].iter().enumerate() {
            let at = TABLE_AT + i * 24;
            buf[at..at + 8].copy_from_slice(&entry.offset.to_le_bytes());
            buf[at + 8..at + 16].copy_from_slice(&entry.len.to_le_bytes());
            buf[at + 16..at + 24].copy_from_slice(&entry.checksum.to_le_bytes());
        }
        let checksum = xxh3_64(&buf[..CHECKSUM_AT]);
        buf[CHECKSUM_AT..].copy_from_slice(&checksum.to_le_bytes());
        buf
    }

    /// Parses and checks the header of a file of `file_len` bytes whose start is `buf`.
    pub fn decode(buf: &[u8], file_len: u64) -> Result<Header> {
        if buf.len() < 12 || buf[..8] != MAGIC {
            return Err(Error::corrupt("not a docstore file (bad magic bytes)"));
        }
        let version = u32_at(buf, 8);
        if !(MIN_VERSION..=NEWEST).contains(&version) {
            return Err(Error::UnsupportedVersion {
                found: version,
                min: MIN_VERSION,
                max: NEWEST,
            });
        }
        if buf.len() < HEADER_SIZE {
            return Err(Error::corrupt(
                "file is shorter than its header (truncated)",
            ));
        }
        let stored = u64_at(buf, CHECKSUM_AT);
        if xxh3_64(&buf[..CHECKSUM_AT]) != stored {
            return Err(Error::corrupt("header checksum mismatch"));
        }
        if u32_at(buf, 12) as usize != HEADER_SIZE
            || u32_at(buf, SECTIONS_COUNT_AT) as usize != section_count(version)
        {
            return Err(Error::corrupt("unexpected header layout"));
        }
        let mut header = Header {
            version,
            count: u64_at(buf, COUNT_AT),
            raw_bytes: u64_at(buf, RAW_AT),
            level: buf[LEVEL_AT],
            common_prefix: u32_at(buf, COMMON_PREFIX_AT),
            flags: if version >= 3 { buf[FLAGS_AT] } else { 0 },
            sections: Default::default(),
        };
        if header.flags & !FLAG_SHARD_LOCATIONS != 0 {
            return Err(Error::corrupt(format!(
                "unknown header flags {:#04x}",
                header.flags
            )));
        }
        let mut end_of_previous = HEADER_SIZE as u64;
        for &section in header.present() {
            let at = TABLE_AT + section as usize * 24;
            let entry = SectionEntry {
                offset: u64_at(buf, at),
                len: u64_at(buf, at + 8),
                checksum: u64_at(buf, at + 16),
            };
            let end = entry.offset.checked_add(entry.len);
            let align = match section {
                Section::KeyIndex => KEY_INDEX_ALIGN,
                _ => ALIGN,
            };
            if entry.offset < end_of_previous
                || !entry.offset.is_multiple_of(align)
                || end.is_none_or(|end| end > file_len)
            {
                return Err(Error::corrupt(format!(
                    "{} section lies outside the file (truncated?)",
                    section.name()
                )));
            }
            end_of_previous = end.unwrap();
            header.sections[section as usize] = entry;
        }
        // `open()` reads (and hashes) these two whole: bounded, it costs the same for any file.
        for (section, most) in [
            (Section::Schema, schema::MAX_SCHEMA_BYTES),
            (Section::Dictionary, MAX_DICT_SIZE),
            (Section::Metadata, metadata::MAX_METADATA_BYTES),
        ] {
            if header.section(section).len > most as u64 {
                return Err(Error::corrupt(format!(
                    "{} section is longer than any store has ({} bytes, at most {most})",
                    section.name(),
                    header.section(section).len
                )));
            }
        }
        Ok(header)
    }
}

/// Entries in the section table of a store of `version` (the header's section count field).
pub fn section_count(version: u32) -> usize {
    if version >= METADATA_VERSION {
        Section::COUNT
    } else {
        Section::COUNT - 1
    }
}

/// The header checksum stored in `file` (whose header `Header::decode` accepted). The header
/// holds every section's checksum, so this identifies the store's contents: a store rebuilt at
/// the same path, even from the same documents in another order, has another one.
pub fn header_checksum(file: &[u8]) -> u64 {
    u64_at(file, CHECKSUM_AT)
}

/// Recomputes the checksums of a store file in place: each section's that lies inside `file`,
/// then the header's. For tests and fuzzing: checksums catch accidents, not crafted files, so the
/// reader must be safe on any bytes that carry valid ones, and this makes such bytes.
pub fn reseal(file: &mut [u8]) {
    if file.len() < HEADER_SIZE {
        return;
    }
    let entries = (u32_at(file, SECTIONS_COUNT_AT) as usize).min(Section::COUNT);
    for i in 0..entries {
        let at = TABLE_AT + i * 24;
        let (offset, len) = (u64_at(file, at), u64_at(file, at + 8));
        if let Some(section) = offset
            .checked_add(len)
            .filter(|&end| end <= file.len() as u64)
            .map(|end| &file[offset as usize..end as usize])
        {
            let checksum = xxh3_64(section);
            file[at + 16..at + 24].copy_from_slice(&checksum.to_le_bytes());
        }
    }
    let checksum = xxh3_64(&file[..CHECKSUM_AT]);
    file[CHECKSUM_AT..HEADER_SIZE].copy_from_slice(&checksum.to_le_bytes());
}

pub fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
}

pub fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        let mut h = Header {
            version: VERSION,
            count: 3,
            raw_bytes: 99,
            level: 9,
            ..Default::default()
        };
        let mut offset = HEADER_SIZE as u64;
        let present = h.present().len();
        for (i, entry) in h.sections[..present].iter_mut().enumerate() {
            if i == Section::KeyIndex as usize {
                offset = offset.next_multiple_of(KEY_INDEX_ALIGN);
            }
            *entry = SectionEntry {
                offset,
                len: i as u64 * 8,
                checksum: i as u64,
            };
            offset += i as u64 * 8;
        }
        h
    }

    #[test]
    fn round_trips() {
        let h = header();
        assert_eq!(Header::decode(&h.encode(), 10_000).unwrap(), h);
    }

    #[test]
    fn version_5_has_a_tenth_section_and_nothing_else_differs() {
        let mut h = header();
        h.version = METADATA_VERSION;
        let end = h.sections[Section::KeyRanks as usize];
        h.sections[Section::Metadata as usize] = SectionEntry {
            offset: (end.offset + end.len).next_multiple_of(ALIGN),
            len: 2,
            checksum: xxh3_64(b"{}"),
        };
        let bytes = h.encode();
        assert_eq!(u32_at(&bytes, SECTIONS_COUNT_AT), 10);
        assert_eq!(Header::decode(&bytes, 10_000).unwrap(), h);
        // Before version 5 the tenth entry is reserved, zero, whatever the header holds.
        let mut old = h.clone();
        old.version = 4;
        let bytes = old.encode();
        assert_eq!(u32_at(&bytes, SECTIONS_COUNT_AT), 9);
        assert!(bytes[TABLE_AT + 9 * 24..CHECKSUM_AT]
            .iter()
            .all(|&b| b == 0));
        assert_eq!(header().encode()[..8], bytes[..8]);
        // Its entry is checked as every other: in the file, after the key ranks, aligned.
        for bad in [
            SectionEntry {
                offset: end.offset,
                ..h.sections[9]
            },
            SectionEntry {
                offset: 9_999,
                ..h.sections[9]
            },
            SectionEntry {
                offset: 9_000,
                len: 1_001,
                ..h.sections[9]
            },
        ] {
            let mut bad_header = h.clone();
            bad_header.sections[Section::Metadata as usize] = bad;
            let err = Header::decode(&bad_header.encode(), 10_000).unwrap_err();
            assert!(
                err.to_string().contains("metadata section lies outside"),
                "{err}"
            );
        }
        let mut long = h.clone();
        long.sections[Section::Metadata as usize].len = metadata::MAX_METADATA_BYTES as u64 + 1;
        let err = Header::decode(&long.encode(), u64::MAX)
            .unwrap_err()
            .to_string();
        assert!(err.contains("metadata section is longer"), "{err}");
        // A version 5 header with nine entries, or a version 4 one with ten, is refused.
        let mut bytes = h.encode();
        bytes[SECTIONS_COUNT_AT] = 9;
        reseal(&mut bytes);
        assert!(Header::decode(&bytes, 10_000).is_err());
        let mut bytes = old.encode();
        bytes[SECTIONS_COUNT_AT] = 10;
        reseal(&mut bytes);
        assert!(Header::decode(&bytes, 10_000).is_err());
    }

    #[test]
    fn header_checksum_follows_every_section_checksum() {
        let h = header();
        let bytes = h.encode();
        assert_eq!(header_checksum(&bytes), xxh3_64(&bytes[..CHECKSUM_AT]));
        let mut other = h.clone();
        other.sections[Section::Data as usize].checksum ^= 1;
        assert_ne!(header_checksum(&other.encode()), header_checksum(&bytes));
    }

    #[test]
    fn detects_every_flipped_byte_and_truncation() {
        let bytes = header().encode();
        for i in 0..HEADER_SIZE {
            let mut bad = bytes;
            bad[i] ^= 1;
            assert!(
                Header::decode(&bad, 10_000).is_err(),
                "flip at {i} undetected"
            );
        }
        assert!(Header::decode(&bytes[..100], 10_000).is_err());
        assert!(
            Header::decode(&bytes, 600).is_err(),
            "sections past the end"
        );
    }

    #[test]
    fn unknown_flags_are_refused() {
        let mut h = header();
        h.flags = FLAG_SHARD_LOCATIONS;
        assert_eq!(Header::decode(&h.encode(), 10_000).unwrap(), h);
        h.flags = 2;
        assert!(Header::decode(&h.encode(), 10_000).is_err());
        // Before version 3 the byte is reserved: not read.
        h.version = 2;
        h.flags = 0;
        let mut bytes = h.encode();
        bytes[FLAGS_AT] = 7;
        let checksum = xxh3_64(&bytes[..CHECKSUM_AT]);
        bytes[CHECKSUM_AT..].copy_from_slice(&checksum.to_le_bytes());
        assert_eq!(Header::decode(&bytes, 10_000).unwrap().flags, 0);
    }

    #[test]
    fn newer_version_is_reported_as_such() {
        let mut bytes = header().encode();
        bytes[8] = 6;
        assert!(matches!(
            Header::decode(&bytes, 10_000),
            Err(Error::UnsupportedVersion { found: 6, .. })
        ));
        bytes[8] = 0;
        assert!(matches!(
            Header::decode(&bytes, 10_000),
            Err(Error::UnsupportedVersion { found: 0, .. })
        ));
    }
}
