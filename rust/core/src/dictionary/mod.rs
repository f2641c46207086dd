//! Training the lz4 dictionary that every document of a store is compressed against.
//!
//! lz4 finds matches in the 64 KiB before the data, so the dictionary should hold the byte
//! strings that most documents repeat. This is zstd's COVER algorithm (Liu, Cheng and Shih,
//! "Effective construction of relative Lempel-Ziv dictionaries", 2016), with fastCover's hashed
//! d-mers: cut the samples into epochs, take from each the `SEGMENT`-byte window whose distinct
//! d-mers occur in the most samples, then count those d-mers as covered, so that no later
//! segment pays for them again. Against a dictionary of pieces of evenly spaced documents, it
//! makes stores 3-4% smaller at the same lz4 HC level, on real news articles and on generated
//! MS MARCO-like passages (`benches/levels.py`).

use crate::runtime::prefetch::prefetch;
use rayon::prelude::*;

mod select;

/// Bytes of one dictionary segment (zstd's k); 32 did best on held-out documents of both
/// benchmark corpora.
const SEGMENT: usize = 32;
/// Bytes of a d-mer, the unit counted as covered (zstd's d).
const DMER: usize = 6;
/// log2 of the number of d-mer hash buckets (zstd's f): 256K buckets keep the counters in the
/// CPU's caches; 1M make dictionaries ~0.3% better and training ~1.3x slower.
const BUCKET_BITS: u32 = 18;
/// Sets the number of epochs, `size / SEGMENT / PASSES`: with 1 (as fastCover) each epoch is about
/// as long as the data that fills one segment. COVER's 4 (fewer, longer epochs, revisited until
/// the dictionary is full) give ~0.5% smaller output at 1.5x the training time.
const PASSES: usize = 1;

/// The d-mer bucket at each position of the samples laid end to end.
trait Dmers: Sync {
    /// Positions (of the samples' bytes, less the last `DMER - 1`).
    fn len(&self) -> usize;
    /// The bucket of the d-mer at `pos` (below `len`).
    fn at(&self, pos: usize) -> usize;
}

/// Samples' d-mers hashed each time they are read (a load, a multiply, a shift; once per position
/// of a walk, by `Ring`). Not stored: a table of them took 4 bytes a sample byte (20 MB for BBC
/// articles' 5 MB), whose first touch in a fresh process (5,000 page faults) cost more than
/// hashing again. Training on two threads, first round / best of 8 (`train_timing`): BBC articles
/// 33-46 / 17.6 ms stored, 26-32 / 18.3 ms hashed; 8 MiB of passages 48 / 37 ms, 44 / 33 ms.
struct Hashed<'a> {
    /// The samples, and 8 - `DMER` bytes after them, so that every d-mer is read as one word.
    data: &'a [u8],
    positions: usize,
}

impl Dmers for Hashed<'_> {
    fn len(&self) -> usize {
        self.positions
    }

    #[inline]
    fn at(&self, pos: usize) -> usize {
        const DMER_BITS: u64 = (1 << (8 * DMER)) - 1;
        let word = u64::from_le_bytes(self.data[pos..pos + 8].try_into().expect("8 bytes"));
        ((word & DMER_BITS).wrapping_mul(0xCF1B_BCDC_B7A5_6463) >> (64 - BUCKET_BITS)) as usize
    }
}

/// Positions a `Ring` keeps behind the last one it hashed: room for a window and the prefetch
/// distance (a power of two, so that a position's slot is a mask).
const RING: usize = 64;

/// The buckets of a run of d-mer positions in order, each hashed once, `AHEAD` positions before
/// it is used (its bucket prefetched then), and kept for `RING - AHEAD` positions after.
struct Ring<'a, D: ?Sized> {
    dmers: &'a D,
    /// Positions from here on are not hashed.
    end: usize,
    ring: [u32; RING],
}

impl<'a, D: Dmers + ?Sized> Ring<'a, D> {
    /// Ready to walk `begin..end` (within the d-mers).
    fn new(dmers: &'a D, (begin, end): (usize, usize)) -> Self {
        let mut ring = Ring {
            dmers,
            end,
            ring: [0; RING],
        };
        for at in begin..(begin + AHEAD).min(end) {
            ring.ring[at % RING] = dmers.at(at) as u32;
        }
        ring
    }

    /// The bucket at `at`, the next position of the walk; hashes the one `AHEAD` of it and
    /// prefetches its bucket in `buckets`.
    #[inline]
    fn step<T>(&mut self, at: usize, buckets: &[T]) -> usize {
        let ahead = at + AHEAD;
        if ahead < self.end {
            let bucket = self.dmers.at(ahead);
            self.ring[ahead % RING] = bucket as u32;
            prefetch(buckets, bucket);
        }
        self.ring[at % RING] as usize
    }

    /// The bucket at `at`, a position stepped over at most `RING - AHEAD` positions ago.
    #[inline]
    fn behind(&self, at: usize) -> usize {
        self.ring[at % RING] as usize
    }
}

/// Buckets given outright (tests).
impl Dmers for [u32] {
    fn len(&self) -> usize {
        <[u32]>::len(self)
    }

    fn at(&self, pos: usize) -> usize {
        self[pos] as usize
    }
}

/// What training keeps per d-mer bucket, together so that one cache line serves both.
#[derive(Clone, Copy)]
struct Bucket {
    /// In how many samples the d-mer occurs; zero once a dictionary segment covers it.
    frequency: u32,
    /// While counting, the last sample it was seen in; while choosing segments, its occurrences
    /// in the sliding window (`select.rs`).
    mark: u32,
}

/// How far ahead of its use a d-mer's bucket is prefetched (the table outgrows the L2 cache).
const AHEAD: usize = 16;

/// Bytes of samples per part of `sample_counts`: enough work per task to outweigh handing it to
/// another thread.
const COUNT_PART: usize = 1 << 20;

/// Per d-mer bucket, in how many of the samples (of `sizes` bytes each, laid end to end in
/// `dmers`) it occurs: a part of whole samples per pool thread (of `COUNT_PART` bytes at least)
/// counted at once, each into its own table, then summed. A d-mer counts once per sample and a
/// sample lies in one part, so the sums are the same however the samples are cut.
fn sample_counts(dmers: &(impl Dmers + ?Sized), sizes: &[usize]) -> Vec<Bucket> {
    let threads = crate::runtime::parallel::pool().current_num_threads();
    let part_bytes = dmers.len().div_ceil(threads.max(1)).max(COUNT_PART);
    sample_counts_in_parts(dmers, sizes, part_bytes)
}

/// `sample_counts`, the samples cut into parts of at least `part_bytes`.
fn sample_counts_in_parts(
    dmers: &(impl Dmers + ?Sized),
    sizes: &[usize],
    part_bytes: usize,
) -> Vec<Bucket> {
    let positions = dmers.len();
    // (first sample, its start) of each part.
    let mut parts = vec![(0, 0)];
    let mut start = 0;
    for (sample, len) in sizes.iter().enumerate() {
        if start - parts.last().map_or(0, |p| p.1) >= part_bytes {
            parts.push((sample, start));
        }
        start += len;
    }
    let count = |part: usize| {
        let (first, mut start) = parts[part];
        let last = parts.get(part + 1).map_or(sizes.len(), |p| p.0);
        let mut buckets = vec![
            Bucket {
                frequency: 0,
                mark: u32::MAX
            };
            1 << BUCKET_BITS
        ];
        for (sample, len) in sizes.iter().enumerate().take(last).skip(first) {
            let run = (start.min(positions), (start + len).min(positions));
            let mut ring = Ring::new(dmers, run);
            for i in run.0..run.1 {
                let at = ring.step(i, &buckets);
                let bucket = &mut buckets[at];
                if bucket.mark != sample as u32 {
                    bucket.mark = sample as u32;
                    bucket.frequency += 1;
                }
            }
            start += len;
        }
        buckets
    };
    let tables: Vec<Vec<Bucket>> = crate::runtime::parallel::pool()
        .install(|| (0..parts.len()).into_par_iter().map(count).collect());
    let mut tables = tables.into_iter();
    let mut sum = tables.next().expect("at least one part");
    for table in tables {
        for (into, from) in sum.iter_mut().zip(&table) {
            into.frequency += from.frequency;
        }
    }
    sum
}

/// A dictionary of at most `size` bytes for documents like `samples`, made of their most shared
/// segments, filled from its end in the order they are chosen. Deterministic.
pub fn train<'a>(samples: impl Iterator<Item = &'a [u8]> + Clone, size: usize) -> Vec<u8> {
    let sizes: Vec<usize> = samples.clone().map(<[u8]>::len).collect();
    let mut data = Vec::with_capacity(sizes.iter().sum::<usize>() + 8);
    samples.for_each(|s| data.extend_from_slice(s));
    if data.len() < SEGMENT.max(size) {
        return data[..data.len().min(size)].to_vec();
    }
    if size == 0 {
        return Vec::new();
    }
    // In how many samples each d-mer occurs, on the pool's threads (the build's other threads
    // wait for this dictionary): the samples counted in parts whose counts are then summed, so
    // the result is the same on any number of threads.
    let positions = data.len() - DMER + 1;
    data.resize(data.len() + 8 - DMER, 0); // whole words for the last d-mers
    let dmers = Hashed {
        data: &data,
        positions,
    };
    let frequency: Vec<u32> = (sample_counts(&dmers, &sizes).iter())
        .map(|b| b.frequency)
        .collect();

    // Epochs as zstd's COVER_computeEpochs: about size / SEGMENT / PASSES of them, each at least
    // ten segments long.
    let mut epochs = (size / SEGMENT / PASSES).max(1);
    let mut epoch_len = positions / epochs;
    if epoch_len < 10 * SEGMENT {
        epoch_len = (10 * SEGMENT).min(positions);
        epochs = positions / epoch_len;
    }
    let epoch = |visit: usize| {
        let epoch = visit % epochs;
        (epoch * epoch_len, (epoch + 1) * epoch_len)
    };
    // Segments fill the dictionary from its end, in the order they are chosen; the loop gives
    // up after this many epochs in a row with nothing left to cover.
    let give_up_after = (epochs / 8).clamp(10, 100);
    let mut dict = vec![0u8; size];
    let (mut free, mut fruitless) = (size, 0);
    let choose = |segment: Option<(usize, usize)>| {
        let Some((first, last)) = segment else {
            fruitless += 1;
            return fruitless < give_up_after;
        };
        fruitless = 0;
        let len = (last - first + DMER - 1).min(free);
        free -= len;
        dict[free..free + len].copy_from_slice(&data[first..first + len]);
        free > 0
    };
    crate::runtime::parallel::pool()
        .install(|| select::choose_segments(&dmers, &frequency, &epoch, choose));
    dict.drain(..free);
    dict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::compressed_size;

    /// Documents that share phrases (as real text does) but no two alike.
    fn corpus() -> Vec<Vec<u8>> {
        const PHRASES: [&str; 8] = [
            "the committee said on tuesday that ",
            "shares in the company rose sharply ",
            "according to the latest figures, ",
            "the government is expected to announce ",
            "a spokesman for the ministry declined to comment ",
            "analysts had forecast a smaller rise ",
            "in a statement released to the press ",
            "the number of people out of work ",
        ];
        let mut seed = 7u64;
        (0..2000)
            .map(|i| {
                let mut doc = format!("doc {i}: ");
                for _ in 0..6 {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    doc.push_str(PHRASES[(seed >> 33) as usize % PHRASES.len()]);
                    doc.push_str(&format!("{} ", seed >> 50));
                }
                doc.into_bytes()
            })
            .collect()
    }

    #[test]
    fn counts_are_the_same_however_the_samples_are_cut() {
        let docs = corpus();
        let sizes: Vec<usize> = docs.iter().map(Vec::len).collect();
        let mut data = docs.concat();
        let positions = data.len() - DMER + 1;
        data.resize(data.len() + 8, 0);
        let dmers = Hashed {
            data: &data,
            positions,
        };
        let one: Vec<u32> = (sample_counts_in_parts(&dmers, &sizes, usize::MAX).iter())
            .map(|b| b.frequency)
            .collect();
        assert!(one.iter().any(|&f| f > 1), "d-mers shared by samples");
        for part_bytes in [20_000, 100_000, data.len() / 3] {
            let cut = sample_counts_in_parts(&dmers, &sizes, part_bytes);
            let cut: Vec<u32> = cut.iter().map(|b| b.frequency).collect();
            assert!(cut == one, "parts of {part_bytes} bytes");
        }
    }

    #[test]
    fn holds_segments_of_the_samples_within_its_size_and_is_deterministic() {
        let docs = corpus();
        let dict = train(docs.iter().map(Vec::as_slice), 4096);
        assert!(!dict.is_empty() && dict.len() <= 4096);
        assert_eq!(dict, train(docs.iter().map(Vec::as_slice), 4096));
        // What the documents repeat is in it (in segments of about 32 bytes).
        let text = String::from_utf8_lossy(&dict);
        for phrase in [
            "the ministry declined",
            "the latest figures",
            "the company rose",
        ] {
            assert!(text.contains(phrase), "{phrase:?} not in {text:?}");
        }
    }

    #[test]
    fn makes_documents_that_share_phrases_much_smaller() {
        let docs = corpus();
        let dict = train(docs.iter().map(Vec::as_slice), 4096);
        let raw: usize = docs.iter().map(Vec::len).sum();
        let alone = compressed_size(&docs, 3, &[]);
        let with_dict = compressed_size(&docs, 3, &dict);
        assert!(with_dict * 2 < alone, "{with_dict} vs {alone} of {raw}");
    }

    #[test]
    fn fills_its_size_from_a_large_varied_sample() {
        let docs: Vec<Vec<u8>> = (0..40_000u64)
            .map(|i| {
                let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                format!(
                    "doc {i} says {} then {} and {}",
                    x % 5003,
                    (x >> 20) % 7919,
                    x >> 50
                )
                .into_bytes()
            })
            .collect();
        let dict = train(docs.iter().map(Vec::as_slice), 16 << 10);
        assert!(dict.len() > (16 << 10) * 9 / 10, "{} bytes", dict.len());
    }

    #[test]
    fn reads_the_d_mers_at_the_very_end_of_a_short_sample() {
        // 40 bytes: just past one segment, so the last d-mers read the padding after the data.
        let sample: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789ABCD";
        let dict = train(std::iter::once(sample), 33);
        assert!(!dict.is_empty() && dict.len() <= 33);
        // The first segment chosen ends the dictionary, and is a piece of the sample.
        let last = &dict[dict.len().saturating_sub(SEGMENT)..];
        assert!(sample.windows(last.len()).any(|w| w == last), "{dict:?}");
    }

    #[test]
    fn small_or_empty_samples_give_a_small_dictionary() {
        assert!(train(std::iter::empty(), 4096).is_empty());
        let one: &[u8] = b"only a few bytes";
        assert_eq!(train(std::iter::once(one), 4096), one);
        assert_eq!(train(std::iter::once(one), 4), b"only");
        let many = vec![b"abcdefgh".as_slice(); 10_000];
        let dict = train(many.iter().copied(), 1024);
        assert!(!dict.is_empty() && dict.len() <= 1024);
    }
}
