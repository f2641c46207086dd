//! A store file written front to back, section by section: each section padded to its alignment,
//! and hashed as it is written, for the section table.

use crate::error::Result;
use crate::format::{SectionEntry, ALIGN};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

/// A file written section by section: tracks the position and the checksum of the open section.
pub(crate) struct SectionWriter {
    out: BufWriter<File>,
    /// Bytes written so far: the file offset the next byte goes to.
    pub(crate) pos: u64,
    /// Where the open section starts.
    pub(crate) start: u64,
    hasher: Xxh3,
}

impl SectionWriter {
    pub(crate) fn new(file: File) -> SectionWriter {
        SectionWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            pos: 0,
            start: 0,
            hasher: Xxh3::new(),
        }
    }

    /// Pads with zeros to the alignment and opens a section there.
    pub(crate) fn begin(&mut self) -> Result<()> {
        self.begin_aligned(ALIGN)
    }

    /// Pads with zeros to a multiple of `align` and opens a section there.
    pub(crate) fn begin_aligned(&mut self, align: u64) -> Result<()> {
        let padding = (align - self.pos % align) % align;
        std::io::copy(&mut std::io::repeat(0).take(padding), &mut self.out)?;
        self.pos += padding;
        self.start = self.pos;
        self.hasher.reset();
        Ok(())
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes)?;
        self.hasher.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }

    pub(crate) fn end(&mut self) -> SectionEntry {
        SectionEntry {
            offset: self.start,
            len: self.pos - self.start,
            checksum: self.hasher.digest(),
        }
    }

    /// Appends the whole file at `path` to the open section.
    pub(crate) fn copy_from(&mut self, path: &Path) -> Result<()> {
        let mut input = BufReader::with_capacity(1 << 20, File::open(path)?);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            self.write(&buf[..n])?;
        }
    }

    /// The file, every byte written to it.
    pub(crate) fn into_file(self) -> Result<File> {
        Ok(self.out.into_inner().map_err(|e| e.into_error())?)
    }
}
