//! The plan of a batch's reads, written once: which byte ranges of which sections reading a
//! document touches, round by round. Reading a document is a chain of dependent reads, each
//! round's ranges known only once the bytes of the round before are at hand:
//!
//! ```text
//!   round   the document (blobs)              its key (keys: a read by position checks with it)
//!   0       doc offsets (unless the key       key ranks
//!           index entry located the blob)
//!   1       the blob                          key offsets
//!   2                                         the key
//! ```
//!
//! `Store::touches` says what one document touches in one round. The storage runs the plan of
//! a batch (`BatchPlan`, a `storage::Plan`) as its tier wants, before the batch is read
//! (`Storage::prepare`): a remote cache fetches each round with one `Storage::ensure` (one
//! round of concurrent requests), so that a batch costs three round trips at most; a map that
//! looks cold asks the page cache for every page of each round. Then the CPU-cache executor,
//! `pipeline::read_pipelined`, issues a group's loads of each round together.
//!
//! The ranges come from bytes not yet checked (damage gives a range clipped to its section,
//! `in_file`); what is read is checked when read (`records`).

use super::{Found, Store};
use crate::format::Section;
use crate::storage::{Plan, Storage};
use std::ops::Range;

/// What a batch reads of each document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reads {
    /// The blob (through doc offsets where the key index did not locate it).
    pub blobs: bool,
    /// The key of its position (through key ranks and key offsets).
    pub keys: bool,
}

impl Reads {
    /// A read by key: the key index found the document, whose check is with the key asked by.
    pub const BLOBS: Reads = Reads {
        blobs: true,
        keys: false,
    };

    /// The rounds these reads take: the key's chain is one longer than the blob's.
    #[inline(always)]
    pub fn rounds(self) -> usize {
        match self.keys {
            true => ROUNDS,
            false => ROUNDS - 1,
        }
    }
}

/// The rounds of the plan (see the table above).
pub(crate) const ROUNDS: usize = 3;

/// What one document touches in one round: at most two ranges, each of a section.
pub(crate) type Touches = [Option<(Section, Range<usize>)>; 2];

impl<B: Storage> Store<B> {
    /// The ranges (of their sections) that reading `found` touches in round `ROUND`
    /// (`0..ROUNDS`), computed from the bytes of the rounds before: the plan (see the module
    /// note). Without `ENDS`, each range is empty at its start: where the reads begin, all that
    /// a CPU prefetch needs (the end of a blob or key costs a load more). Positions out of range
    /// touch nothing (their read fails).
    #[inline(always)]
    pub(crate) fn touches<const ROUND: usize, const ENDS: bool>(
        &self,
        found: Found,
        reads: Reads,
    ) -> Touches {
        let n = self.len();
        if found.pos >= n {
            return [None, None];
        }
        let pos = found.pos as usize;
        let rank = || self.index_u32(Section::KeyRanks, found.pos).min(n);
        match ROUND {
            0 => [
                (reads.blobs && !self.located(&found))
                    .then(|| (Section::DocOffsets, pos * 8..pos * 8 + 16)),
                reads
                    .keys
                    .then(|| (Section::KeyRanks, pos * 4..pos * 4 + 4)),
            ],
            1 => [
                reads
                    .blobs
                    .then(|| (Section::Data, self.blob_span::<ENDS>(found))),
                reads.keys.then(|| {
                    let r = rank() as usize;
                    (Section::KeyOffsets, r * 8..r * 8 + 16)
                }),
            ],
            _ => [
                reads
                    .keys
                    .then(rank)
                    .filter(|&r| r < n)
                    .map(|r| (Section::Keys, self.span::<ENDS>(Section::KeyOffsets, r))),
                None,
            ],
        }
    }

    /// Where the blob of `found` lies as far as a plan needs to know: not bounds-checked (see
    /// `blob_range` for the read's own).
    #[inline(always)]
    fn blob_span<const ENDS: bool>(&self, found: Found) -> Range<usize> {
        match found.blob {
            Some((offset, len)) if self.header.locates_blobs() => {
                offset as usize..offset.saturating_add(len) as usize
            }
            _ => self.span::<ENDS>(Section::DocOffsets, found.pos),
        }
    }

    /// Entry `i` of an offsets section, unchecked: `offsets[i]..offsets[i + 1]` (without
    /// `ENDS`, empty at its start).
    #[inline(always)]
    fn span<const ENDS: bool>(&self, offsets: Section, i: u64) -> Range<usize> {
        let start = self.offset(offsets, i) as usize;
        match ENDS {
            true => start..self.offset(offsets, i + 1) as usize,
            false => start..start,
        }
    }

    /// Runs `each` on every range the documents `found` touch in `round`.
    #[inline]
    pub(crate) fn each_touch(
        &self,
        found: impl Iterator<Item = Found>,
        round: usize,
        reads: Reads,
        mut each: impl FnMut(Section, Range<usize>),
    ) {
        for f in found {
            let touches = match round {
                0 => self.touches::<0, true>(f, reads),
                1 => self.touches::<1, true>(f, reads),
                _ => self.touches::<2, true>(f, reads),
            };
            for (s, range) in touches.into_iter().flatten() {
                each(s, range);
            }
        }
    }
}

/// What reading the documents `found` reads (with `reads`), as the storage runs it: the plan
/// in ranges of the file.
pub(crate) struct BatchPlan<'s, B, I> {
    pub store: &'s Store<B>,
    pub found: I,
    pub len: usize,
    pub reads: Reads,
}

impl<B: Storage, I: Iterator<Item = Found> + Clone> Plan for BatchPlan<'_, B, I> {
    fn reads(&self) -> usize {
        self.len
    }

    fn rounds(&self) -> usize {
        self.reads.rounds()
    }

    fn each(&self, round: usize, each: &mut dyn FnMut(Range<u64>)) {
        let store = self.store;
        store.each_touch(self.found.clone(), round, self.reads, |s, r| {
            each(store.in_file(s, r))
        });
    }

    fn sample(&self) -> Option<Range<u64>> {
        let first = self.found.clone().next()?;
        let [blob, _] = self.store.touches::<1, false>(first, Reads::BLOBS);
        blob.map(|(s, r)| self.store.in_file(s, r.start..r.start + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Field, FieldType, Schema, Value, Writer, WriterOptions};

    /// A store of `n` documents, `id0000`... with texts of growing length; format `version`.
    fn store(n: usize, version: u32) -> Store<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let schema = Schema::new(vec![Field::new("text", FieldType::Str)]).unwrap();
        let options = WriterOptions {
            format_version: version,
            ..WriterOptions::default()
        };
        let mut writer = Writer::create(&path, schema, options).unwrap();
        for i in 0..n {
            let text = "word ".repeat(i);
            writer
                .push(&format!("id{i:04}"), &[Value::Str(&text)])
                .unwrap();
        }
        writer.finish().unwrap();
        Store::from_bytes(std::fs::read(&path).unwrap()).unwrap()
    }

    fn plan(
        store: &Store<Vec<u8>>,
        found: Found,
        reads: Reads,
    ) -> Vec<Vec<(Section, Range<usize>)>> {
        (0..ROUNDS)
            .map(|round| {
                let mut touched = Vec::new();
                store.each_touch([found].into_iter(), round, reads, |s, r| {
                    touched.push((s, r))
                });
                touched
            })
            .collect()
    }

    #[test]
    fn a_lookup_located_by_its_entry_reads_its_blob_in_one_round() {
        let store = store(50, 3);
        let found = store.locate(b"id0042").unwrap().unwrap();
        let blob = store.blob_range(found).unwrap();
        assert_eq!(
            plan(&store, found, Reads::BLOBS),
            [vec![], vec![(Section::Data, blob)], vec![]]
        );
    }

    #[test]
    fn a_read_by_position_reads_offsets_then_blob_and_key_offsets_then_key() {
        let store = store(50, 3);
        let pos = 17;
        let rank = store.rank_at(pos).unwrap() as usize;
        let blob = store.blob_range_at(pos).unwrap();
        let key = store
            .range_at(Section::KeyOffsets, Section::Keys, rank as u64)
            .unwrap();
        assert_eq!(
            plan(
                &store,
                Found::at(pos),
                Reads {
                    blobs: true,
                    keys: true
                }
            ),
            [
                vec![
                    (Section::DocOffsets, 17 * 8..17 * 8 + 16),
                    (Section::KeyRanks, 17 * 4..17 * 4 + 4)
                ],
                vec![
                    (Section::Data, blob),
                    (Section::KeyOffsets, rank * 8..rank * 8 + 16)
                ],
                vec![(Section::Keys, key)],
            ]
        );
        // Unchecked: the blob alone, through its doc offsets.
        let blob = store.blob_range_at(pos).unwrap();
        assert_eq!(
            plan(&store, Found::at(pos), Reads::BLOBS),
            [
                vec![(Section::DocOffsets, 17 * 8..17 * 8 + 16)],
                vec![(Section::Data, blob)],
                vec![]
            ]
        );
    }

    #[test]
    fn a_version_2_lookup_reads_doc_offsets_first() {
        let store = store(50, 2);
        let found = store.locate(b"id0042").unwrap().unwrap();
        assert_eq!(found.blob, None);
        let blob = store.blob_range(found).unwrap();
        assert_eq!(
            plan(&store, found, Reads::BLOBS),
            [
                vec![(Section::DocOffsets, 42 * 8..42 * 8 + 16)],
                vec![(Section::Data, blob)],
                vec![]
            ]
        );
    }

    #[test]
    fn a_batch_touches_each_document_in_order_and_nothing_out_of_range() {
        let store = store(50, 3);
        let found: Vec<Found> = [3u64, 49, 50, 7].into_iter().map(Found::at).collect();
        let mut touched = Vec::new();
        store.each_touch(found.iter().copied(), 0, Reads::BLOBS, |s, r| {
            touched.push((s, r))
        });
        assert_eq!(
            touched,
            [3usize, 49, 7].map(|p| (Section::DocOffsets, p * 8..p * 8 + 16))
        );
        let mut blobs = Vec::new();
        store.each_touch(found.iter().copied(), 1, Reads::BLOBS, |s, r| {
            blobs.push((s, r))
        });
        let want: Vec<_> = [3u64, 49, 7]
            .into_iter()
            .map(|p| (Section::Data, store.blob_range_at(p).unwrap()))
            .collect();
        assert_eq!(blobs, want);
    }
}
