//! The section views of a `Store`: a section's bytes, entry `i` of an offsets section, where
//! a blob or the key of a position lies. Every range read from the file is bounds-checked
//! against its section, so that damage yields `Error::Corrupt`, never a read elsewhere.

use super::{Found, Store};
use crate::error::{Error, Result};
use crate::format::{u32_at, u64_at, Section};
use crate::storage::Storage;
use std::ops::Range;

impl<B: Storage> Store<B> {
    pub(super) fn section(&self, s: Section) -> &[u8] {
        &self.buf.as_ref()[self.ranges[s as usize].clone()]
    }

    /// Bytes `range` of section `s` as a range of the file, clipped to the section (a range
    /// computed from damaged offsets reaches nothing outside it).
    pub(super) fn in_file(&self, s: Section, range: Range<usize>) -> Range<u64> {
        let section = &self.ranges[s as usize];
        let start = section.start.saturating_add(range.start).min(section.end);
        let end = section.start.saturating_add(range.end).min(section.end);
        start as u64..end.max(start) as u64
    }

    /// Whether `found` is read where its key index entry locates it (else by its doc offsets).
    pub(super) fn located(&self, found: &Found) -> bool {
        found.blob.is_some() && self.header.locates_blobs()
    }

    /// The ranks of block `block` of the key index.
    pub(super) fn block_span(&self, block: u64) -> Range<usize> {
        let start = block * self.block;
        start as usize..(start + self.block).min(self.len()) as usize
    }

    pub(super) fn offset(&self, s: Section, i: u64) -> u64 {
        u64_at(self.section(s), i as usize * 8)
    }

    pub(super) fn index_u32(&self, s: Section, i: u64) -> u64 {
        u64::from(u32_at(self.section(s), i as usize * 4))
    }

    pub(super) fn check_position(&self, pos: u64) -> Result<()> {
        if pos < self.len() {
            Ok(())
        } else {
            Err(Error::OutOfRange {
                index: pos,
                len: self.len(),
            })
        }
    }

    /// `start..end` of entry `i` in a section indexed by an offsets section.
    /// Where entry `i` lies in `target`, from `offsets[i]..offsets[i + 1]`, bounds-checked.
    pub(super) fn range_at(
        &self,
        offsets: Section,
        target: Section,
        i: u64,
    ) -> Result<Range<usize>> {
        let at = i as usize * 8;
        self.need(offsets, at..at + 16)?;
        let (start, end) = (self.offset(offsets, i), self.offset(offsets, i + 1));
        if start > end || end > self.section(target).len() as u64 {
            return Err(Error::corrupt(format!("{} out of bounds", offsets.name())));
        }
        Ok(start as usize..end as usize)
    }

    pub(super) fn slice_at(&self, offsets: Section, target: Section, i: u64) -> Result<&[u8]> {
        let range = self.range_at(offsets, target, i)?;
        self.need(target, range.clone())?;
        Ok(&self.section(target)[range])
    }

    pub(crate) fn key_of_rank(&self, rank: u64) -> Result<&[u8]> {
        self.slice_at(Section::KeyOffsets, Section::Keys, rank)
    }

    pub(super) fn key_bytes_at(&self, pos: u64) -> Result<&[u8]> {
        self.key_of_rank(self.rank_at(pos)?)
    }

    /// The rank of the key of the document at `pos` (key ranks), range-checked, not confirmed.
    pub(crate) fn rank_at(&self, pos: u64) -> Result<u64> {
        self.check_position(pos)?;
        self.need(Section::KeyRanks, pos as usize * 4..pos as usize * 4 + 4)?;
        let rank = self.index_u32(Section::KeyRanks, pos);
        if rank >= self.len() {
            return Err(Error::corrupt("key rank out of range"));
        }
        Ok(rank)
    }

    /// Where the blob of the document at `pos` lies in the data section (its doc offsets),
    /// bounds-checked.
    pub(crate) fn blob_range_at(&self, pos: u64) -> Result<Range<usize>> {
        self.blob_range(Found::at(pos))
    }

    /// Where the blob of `found` lies in the data section, bounds-checked: where its key index
    /// entry says, when this store's entries locate its blobs (format v3), else its doc offsets.
    /// A damaged location reads other bytes, which then fail the check of `found`'s key and
    /// position.
    pub(super) fn blob_range(&self, found: Found) -> Result<Range<usize>> {
        match found.blob {
            Some((offset, len)) if self.header.locates_blobs() => {
                let end = (offset.checked_add(len))
                    .filter(|&end| end <= self.section(Section::Data).len() as u64)
                    .ok_or_else(|| Error::corrupt("key index blob location out of bounds"))?;
                Ok(offset as usize..end as usize)
            }
            _ => {
                self.check_position(found.pos)?;
                self.range_at(Section::DocOffsets, Section::Data, found.pos)
            }
        }
    }
}
