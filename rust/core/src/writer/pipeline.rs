//! The writer's compression thread: batches of raw records (`Batch`) go in, are compressed in
//! parallel in chunks (`compress_chunks`) and appended to the data section of the partial file,
//! each record's offset to the doc offsets file (`write_chunks`); `write_data` runs the thread
//! and hands back the file up to the end of the data section (`DataWritten`).

use super::WriterOptions;
use crate::codec::{self, Compressor};
use crate::error::Result;
use crate::format::check;
use crate::format::schema::Schema;
use crate::format::sections::SectionWriter;
use crate::format::{SectionEntry, HEADER_SIZE};
use crate::runtime::parallel;
use rayon::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Write};

/// Raw records waiting for compression, concatenated, with the key hashes their checks hold.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) data: Vec<u8>,
    pub(super) ends: Vec<usize>,
    /// `check::doc_hash` of each record's key and position (empty for a format v1 store).
    pub(super) key_hashes: Vec<u64>,
}

impl Batch {
    pub(super) fn with_capacity(bytes: usize) -> Batch {
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
pub(super) struct DataWritten {
    pub(super) file: SectionWriter,
    pub(super) schema: SectionEntry,
    pub(super) dictionary: SectionEntry,
    pub(super) data: SectionEntry,
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
pub(super) fn write_data(
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
