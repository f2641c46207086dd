//! Finding an id that a batch repeats, before any of the batch is added (`add_many` adds a batch
//! whole or not at all). Sorting (hash, row) pairs on the pool finds repeats in parallel; a
//! `HashSet<&str>` (SipHash, a string compare per probe) took ~0.25 s of one core for a batch of
//! 1M ids (of a 0.45-0.65 s check), while the compression pool waited for the batch.

use crate::parallel;
use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

/// Batches smaller than this are checked on the calling thread.
const PARALLEL_MIN: usize = 1 << 14;

/// The row of the first key that equals a key of an earlier row, if any.
pub fn first_repeat<K: AsRef<[u8]> + Sync>(keys: &[K]) -> Option<usize> {
    first_repeat_hashed_by(keys, xxh3_64)
}

fn first_repeat_hashed_by<K: AsRef<[u8]> + Sync>(
    keys: &[K],
    hasher: impl Fn(&[u8]) -> u64 + Sync,
) -> Option<usize> {
    if keys.len() < 2 {
        return None;
    }
    let hash = |(row, key): (usize, &K)| (hasher(key.as_ref()), row);
    let mut hashed: Vec<(u64, usize)>;
    if keys.len() < PARALLEL_MIN {
        hashed = keys.iter().enumerate().map(hash).collect();
        hashed.sort_unstable();
    } else {
        hashed = parallel::pool().install(|| {
            let mut hashed: Vec<_> = keys.par_iter().enumerate().map(hash).collect();
            hashed.par_sort_unstable();
            hashed
        });
    }
    // Keys of equal hash are sorted by their bytes (then row): equal neighbours are repeats, and
    // the later of each pair is a row that repeats an earlier one. Different keys of equal hash
    // (collisions) cost a sort of their run, never a comparison of every pair.
    let mut first: Option<usize> = None;
    for run in hashed
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|run| run.len() > 1)
    {
        let mut members: Vec<(&[u8], usize)> = run
            .iter()
            .map(|&(_, row)| (keys[row].as_ref(), row))
            .collect();
        members.sort_unstable();
        for pair in members.windows(2) {
            if pair[0].0 == pair[1].0 && first.is_none_or(|f| pair[1].1 < f) {
                first = Some(pair[1].1);
            }
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The oracle: the first row whose key was seen before.
    fn naive(keys: &[String]) -> Option<usize> {
        let mut seen = HashSet::new();
        keys.iter().position(|k| !seen.insert(k))
    }

    #[test]
    fn finds_the_first_repeated_row_serially_and_in_parallel() {
        for n in [0, 1, 2, 100, PARALLEL_MIN + 1000] {
            let unique: Vec<String> = (0..n).map(|i| format!("doc-{i}")).collect();
            assert_eq!(first_repeat(&unique), None, "n = {n}");
            if n < 2 {
                continue;
            }
            // Two repeats: the earlier repeating row is reported, whatever the hash order.
            let mut keys = unique.clone();
            keys[n - 1] = keys[3 % n].clone();
            keys[n / 2] = keys[0].clone();
            if n / 2 == 0 {
                continue;
            }
            assert_eq!(first_repeat(&keys), naive(&keys), "n = {n}");
            assert_eq!(first_repeat(&keys), Some(n / 2), "n = {n}");
        }
    }

    #[test]
    fn a_key_seen_three_times_is_reported_at_its_second_row() {
        let keys: Vec<String> = ["a", "b", "c", "b", "d", "b", "c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(first_repeat(&keys), Some(3));
        assert_eq!(first_repeat(&keys), naive(&keys));
    }

    #[test]
    fn tells_colliding_hashes_from_repeats() {
        // Hashed by length only: every run of equal hashes mixes different keys.
        let by_len = |k: &[u8]| k.len() as u64;
        let keys: Vec<String> = ["ab", "cd", "ef", "xyz", "cd", "ab"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(first_repeat_hashed_by(&keys, by_len), Some(4));
        let unique: Vec<String> = (0..PARALLEL_MIN + 10).map(|i| format!("{i:06}")).collect();
        assert_eq!(first_repeat_hashed_by(&unique[..300], by_len), None);
        let mut keys = unique[..300].to_vec();
        keys[250] = keys[17].clone();
        assert_eq!(first_repeat_hashed_by(&keys, by_len), Some(250));
    }

    #[test]
    fn a_batch_whose_hashes_all_collide_is_sorted_not_compared_pairwise() {
        // 200k distinct keys in one run of equal hashes: pairwise comparison would be 2e10 steps.
        let mut keys: Vec<String> = (0..200_000).map(|i| format!("k{i}")).collect();
        assert_eq!(first_repeat_hashed_by(&keys, |_| 7), None);
        keys[150_000] = keys[99_999].clone();
        keys[180_000] = keys[3].clone();
        assert_eq!(first_repeat_hashed_by(&keys, |_| 7), Some(150_000));
    }

    #[test]
    fn agrees_with_a_hash_set_on_random_batches() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..200 {
            let n = (round * 37) % 300;
            let keys: Vec<String> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    format!("{}", x % (4 * n as u64 + 1))
                })
                .collect();
            assert_eq!(first_repeat(&keys), naive(&keys), "{keys:?}");
        }
    }
}
