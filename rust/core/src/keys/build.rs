//! The key sections of a store, written from its keys in sorted order (docs/format.md §11 steps
//! 4 and 5), after the data and doc offsets sections.
//!
//! One pass over the sorted keys writes the keys straight into the store file, and their offsets,
//! key index entries and fences into scratch files, which are then appended as the next three
//! sections: nothing that grows with the corpus is held in memory. The key ranks (the inverse
//! permutation of the entries' positions) are random writes, made through a mapping of the file
//! from the key index read back in rank order.

use crate::error::{Error, Result};
use crate::format::key_entry::{self, key_prefix, KeyEntry, KEY_INDEX_ALIGN};
use crate::format::sections::SectionWriter;
use crate::format::{self, Header, Section, SectionEntry};
use memmap2::{Mmap, MmapMut};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use xxhash_rust::xxh3::xxh3_64;

/// Where each position's blob lies, for the key index entries that hold it (format v3).
pub(crate) enum BlobLocations<'a> {
    /// In this file's data section: `count` doc offsets (a scratch file, mapped) and the data
    /// section's length, where the last blob ends.
    Own {
        doc_offsets: Mmap,
        count: u64,
        data_len: u64,
    },
    /// In a collection's shards, where the function says (a collection's global id index).
    Shards(&'a dyn Fn(u32) -> Result<(u64, u64)>),
    /// Nowhere: entries before version 3 do not hold it (and an empty store has none).
    None,
}

impl BlobLocations<'_> {
    /// The doc offsets of `count > 0` documents in the scratch file at `path`, no longer
    /// written, and the data section's length.
    pub(crate) fn own(path: &Path, count: u64, data_len: u64) -> Result<Self> {
        // SAFETY: the scratch file is private to this writer and no longer written.
        let doc_offsets = unsafe { Mmap::map(&File::open(path)?)? };
        Ok(BlobLocations::Own {
            doc_offsets,
            count,
            data_len,
        })
    }

    /// The blob of `position` (offset in the data section, length). The doc offsets are read
    /// back at random by position, from the page cache.
    fn of(&self, position: u32) -> Result<(u64, u64)> {
        match self {
            BlobLocations::Own {
                doc_offsets,
                count,
                data_len,
            } => {
                let p = position as usize;
                let start = format::u64_at(doc_offsets, p * 8);
                let end = match p + 1 < *count as usize {
                    true => format::u64_at(doc_offsets, p * 8 + 8),
                    false => *data_len,
                };
                Ok((start, end - start))
            }
            BlobLocations::Shards(locate) => locate(position),
            BlobLocations::None => Ok((0, 0)),
        }
    }
}

/// Writes the keys, key offsets, key index and key fences sections into `file`, from
/// `sorted_keys`, which calls `each(key, position)` for every document's key in sorted order;
/// `header` gives their layout (count, common prefix, version) and gets their section entries.
/// Scratch files go to `scratch`; the key index stays there for `write_ranks`.
pub(crate) fn write_sections(
    file: &mut SectionWriter,
    header: &mut Header,
    scratch: &Path,
    locations: &BlobLocations,
    sorted_keys: impl FnOnce(&mut dyn FnMut(&[u8], u32) -> Result<()>) -> Result<()>,
) -> Result<()> {
    let (count, common_prefix) = (header.count, header.common_prefix as usize);
    let (entry_size, block) = (header.key_entry(), header.key_block());
    file.begin()?;
    let scratch_file =
        |name: &str| File::create(scratch.join(name)).map(|f| BufWriter::with_capacity(1 << 20, f));
    let mut key_offsets = scratch_file("key-offsets")?;
    let mut key_index = scratch_file("key-index")?;
    let mut key_fences = scratch_file("key-fences")?;
    let keys_start = file.pos;
    let mut rank = 0u64;
    let mut encoded = Vec::with_capacity(entry_size);
    sorted_keys(&mut |key, position| {
        key_offsets.write_all(&(file.pos - keys_start).to_le_bytes())?;
        let Some(rest) = key.get(common_prefix..) else {
            return Err(Error::corrupt("a key is shorter than the common prefix"));
        };
        let prefix = key_prefix(rest);
        let (blob_offset, blob_len) = locations.of(position)?;
        let entry = KeyEntry {
            prefix,
            position,
            key_len: key.len() as u32, // `add` rejects longer keys
            blob_offset,
            blob_len,
        };
        encoded.clear();
        entry.encode(entry_size, &mut encoded);
        key_index.write_all(&encoded)?;
        if key_entry::starts_block(rank, block) {
            key_fences.write_all(&prefix.to_le_bytes())?;
        }
        rank += 1;
        file.write(key)
    })?;
    if rank != count {
        return Err(Error::InvalidArgument(format!(
            "{rank} sorted keys were given for {count} documents"
        )));
    }
    key_offsets.write_all(&(file.pos - keys_start).to_le_bytes())?;
    for scratch_writer in [key_offsets, key_index, key_fences] {
        scratch_writer.into_inner().map_err(|e| e.into_error())?;
    }
    let sections = &mut header.sections;
    sections[Section::Keys as usize] = file.end();
    file.begin()?;
    file.copy_from(&scratch.join("key-offsets"))?;
    sections[Section::KeyOffsets as usize] = file.end();
    file.begin_aligned(KEY_INDEX_ALIGN)?;
    file.copy_from(&scratch.join("key-index"))?;
    sections[Section::KeyIndex as usize] = file.end();
    file.begin()?;
    file.copy_from(&scratch.join("key-fences"))?;
    sections[Section::KeyFences as usize] = file.end();
    Ok(())
}

/// Writes the key ranks section, the last, after what `file` holds, from the key index that
/// `write_sections` left in `scratch`; its entry goes to `header`. Returns the file, every byte
/// of it written but the header's.
pub(crate) fn write_ranks(
    mut file: SectionWriter,
    header: &mut Header,
    scratch: &Path,
) -> Result<File> {
    // Ranks are the inverse permutation: random writes, so they go through a mapping of the
    // file (page cache) rather than a buffer in memory that grows with the corpus.
    let count = header.count;
    file.begin()?;
    let ranks_at = file.pos;
    let ranks_len = count * 4;
    let out = file.into_file()?;
    out.set_len(ranks_at + ranks_len)?;
    let ranks_checksum = if count > 0 {
        // SAFETY: the file is private to this writer's scratch directory.
        let mut ranks = unsafe {
            memmap2::MmapOptions::new()
                .offset(ranks_at)
                .len(ranks_len as usize)
                .map_mut(&out)?
        };
        fill_ranks(&mut ranks, &scratch.join("key-index"), header.key_entry())?;
        ranks.flush()?;
        xxh3_64(&ranks)
    } else {
        xxh3_64(&[])
    };
    header.sections[Section::KeyRanks as usize] = SectionEntry {
        offset: ranks_at,
        len: ranks_len,
        checksum: ranks_checksum,
    };
    Ok(out)
}

/// Writes the rank of each position, reading the positions from the key index in rank order.
fn fill_ranks(ranks: &mut MmapMut, key_index: &Path, entry_size: usize) -> Result<()> {
    let count = ranks.len() / 4;
    let mut input = BufReader::with_capacity(1 << 20, File::open(key_index)?);
    let mut entry = vec![0u8; entry_size];
    for rank in 0..count as u32 {
        input.read_exact(&mut entry)?;
        let at = KeyEntry::at(&entry, 0, entry_size).position as usize * 4;
        ranks[at..at + 4].copy_from_slice(&rank.to_le_bytes());
    }
    Ok(())
}
