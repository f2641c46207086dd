//! Repeated items in a batch. `first_repeat`: an id that a batch repeats, found before any of the
//! batch is added (`add_many` adds a batch whole or not at all). `distinct`: what a batch lookup
//! reads once and shares.
//!
//! `first_repeat`: Sorting (hash, row) pairs on the pool finds repeats in parallel; a
//! `HashSet<&str>` (SipHash, a string compare per probe) took ~0.25 s of one core for a batch of
//! 1M ids (of a 0.45-0.65 s check), while the compression pool waited for the batch.

use crate::runtime::parallel;
use rayon::prelude::*;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

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

/// The items of a batch lookup that repeats some, so that each distinct one is read and decoded
/// once and its result shared: 10M ids naming 20k documents used to decode 10M documents.
#[derive(Debug, PartialEq, Eq)]
pub struct Distinct {
    /// The row of each distinct item's first occurrence, in row order.
    pub firsts: Vec<usize>,
    /// For each row, the index in `firsts` of its item.
    pub of_row: Vec<usize>,
}

/// `hash` is already a hash: the table uses it as it is.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 hashes are written")
    }
    fn write_u64(&mut self, h: u64) {
        self.0 = h;
    }
}

/// An id's 128-bit hash (`IdTable::hash`), which the table hashes by its low half.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct Hash128(u64, u64);

impl std::hash::Hash for Hash128 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0);
    }
}

/// The ids a writer has taken, each with its position, met one at a time: a repeated id is
/// found when it is added, not when the keys are sorted at the end, so that a build reports it
/// at once. An id is known by its 128-bit hash (24 bytes a slot, ~30-60 bytes an id, whatever
/// its length): two different ids of a billion share one with a chance under 1e-20, and the key
/// sort still compares the bytes of every id it is given. It holds the first `limit` ids only
/// (a writer's memory stays bounded); a repeat of a later one is found by the key sort, when a
/// run of keys is spilled or at the end.
pub struct IdTable {
    positions: HashMap<Hash128, u32, BuildHasherDefault<Prehashed>>,
    limit: usize,
}

impl Default for IdTable {
    fn default() -> Self {
        IdTable::with_limit(usize::MAX)
    }
}

impl IdTable {
    pub fn with_limit(limit: usize) -> IdTable {
        IdTable {
            positions: HashMap::default(),
            limit,
        }
    }

    /// Holds every id from now on, however many (what keeping one document of each needs).
    pub fn unlimited(&mut self) {
        self.limit = usize::MAX;
    }

    pub fn hash(key: &[u8]) -> Hash128 {
        let h = xxh3_128(key);
        Hash128(h as u64, (h >> 64) as u64)
    }

    /// The position of the id of hash `id`, when it was inserted before.
    pub fn get(&self, id: Hash128) -> Option<u32> {
        self.positions.get(&id).copied()
    }

    /// Records the id of hash `id` at `position`, unless it is there already: then its earlier
    /// position.
    pub fn insert(&mut self, id: Hash128, position: u32) -> Option<u32> {
        if self.positions.len() >= self.limit {
            return self.get(id);
        }
        match self.positions.entry(id) {
            std::collections::hash_map::Entry::Occupied(slot) => Some(*slot.get()),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(position);
                None
            }
        }
    }
}

/// The distinct items of `items` when some repeat, `None` when all are distinct (the common case,
/// decided by one pass over the hashes, `all_differ`).
pub fn distinct<T: Eq>(items: &[T], hash: impl Fn(&T) -> u64) -> Option<Distinct> {
    if all_differ(items.iter().map(&hash)) {
        return None;
    }
    let mut seen = Seen::with_capacity(items.len());
    let mut firsts = Vec::new();
    let mut of_row = Vec::with_capacity(items.len());
    for (row, item) in items.iter().enumerate() {
        let found = seen.insert(hash(item), |d| items[firsts[d]] == *item);
        of_row.push(found.unwrap_or_else(|| {
            firsts.push(row);
            firsts.len() - 1
        }));
    }
    (firsts.len() < items.len()).then_some(Distinct { firsts, of_row })
}

/// Whether the `hashes` all differ (the common case `distinct` rules out first): a set of them
/// with open addressing (as `Seen`), ~20 instructions a hash where a `HashMap` and a `Vec` of the
/// hashes took ~70 (`take` of 1024 random positions).
fn all_differ(hashes: impl ExactSizeIterator<Item = u64>) -> bool {
    let mut slots = vec![0u64; slots_for(hashes.len())];
    let mask = slots.len() - 1;
    // 0 marks an empty slot: a hash of 0 is kept aside.
    let mut zero = false;
    for h in hashes {
        if h == 0 {
            if std::mem::replace(&mut zero, true) {
                return false;
            }
            continue;
        }
        let mut i = slot_of(h, mask);
        loop {
            match slots[i] {
                0 => break slots[i] = h,
                s if s == h => return false,
                _ => i = (i + 1) & mask,
            }
        }
    }
    true
}

/// The hash `distinct_keys` and a `Seen` of ids use.
pub fn hash_key(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// `distinct` for ids (byte strings).
pub fn distinct_keys<K: AsRef<[u8]> + Eq>(keys: &[K]) -> Option<Distinct> {
    distinct(keys, |k| hash_key(k.as_ref()))
}

/// Distinct items met one at a time, held by the caller (ids that are Python objects): each new
/// one is numbered in first-seen order. Memory grows with the distinct items only, so that
/// 3,000,000 copies of one id cost one entry (a pass that hashed every row first held ~2 GB).
/// Open addressing with linear probing, ~20 instructions an item where a `HashMap` (and a second
/// one for collisions) took ~120 (`get_many` of 1024 ids): items of equal hash, repeats or
/// collisions that `same` tells apart, simply sit in the same run of slots.
#[derive(Default)]
pub struct Seen {
    /// `[hash, number + 1]` per slot; 0 for an empty one. At most half of them are full. (An
    /// array, not a tuple: a table of zeros is then one zeroed allocation.)
    slots: Vec<[u64; 2]>,
    len: usize,
}

impl Seen {
    pub fn new() -> Seen {
        Seen::default()
    }

    /// Room for `items` distinct items before the table grows (growing it step by step cost a
    /// batch of 1024 ids ~65 instructions an id).
    pub fn with_capacity(items: usize) -> Seen {
        Seen {
            slots: vec![[0; 2]; slots_for(items)],
            len: 0,
        }
    }

    /// Distinct items so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of the item hashing to `hash`, when one seen before equals it (`same(d)`: it
    /// equals distinct item `d`); `None` when it is new, which then becomes item `len()`.
    #[inline]
    pub fn insert(&mut self, hash: u64, same: impl Fn(usize) -> bool) -> Option<usize> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = slot_of(hash, mask);
        loop {
            match self.slots[i] {
                [_, 0] => {
                    self.len += 1;
                    self.slots[i] = [hash, self.len as u64];
                    return None;
                }
                [h, d] if h == hash && same(d as usize - 1) => return Some(d as usize - 1),
                _ => i = (i + 1) & mask,
            }
        }
    }

    fn grow(&mut self) {
        let old = std::mem::replace(&mut self.slots, vec![[0; 2]; slots_for(self.len + 1)]);
        let mask = self.slots.len() - 1;
        for slot in old.into_iter().filter(|&[_, d]| d != 0) {
            let mut i = slot_of(slot[0], mask);
            while self.slots[i][1] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = slot;
        }
    }
}

/// Slots of an open-addressing table for `items` (a power of two, at least twice as many).
fn slots_for(items: usize) -> usize {
    (items.saturating_mul(2)).max(16).next_power_of_two()
}

/// The slot of `hash` in a table of `mask + 1` slots: the top bits of its product with 2^64 / phi
/// (Fibonacci hashing), which depend on every bit of `hash`.
#[inline(always)]
fn slot_of(hash: u64, mask: usize) -> usize {
    (hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - mask.count_ones())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn id_table_gives_the_earlier_position_of_a_repeated_id() {
        let mut ids = IdTable::default();
        let h = IdTable::hash;
        assert_eq!(ids.insert(h(b"a"), 0), None);
        assert_eq!(ids.insert(h(b"b"), 1), None);
        assert_eq!(ids.insert(h(b"a"), 2), Some(0));
        assert_eq!(ids.insert(h(b"a"), 3), Some(0));
        assert_eq!((ids.get(h(b"b")), ids.get(h(b"c"))), (Some(1), None));
        // Past its limit it holds no more, and finds repeats of those it holds.
        let mut ids = IdTable::with_limit(2);
        for (k, key) in [b"a", b"b", b"c"].iter().enumerate() {
            assert_eq!(ids.insert(h(*key), k as u32), None);
        }
        assert_eq!((ids.get(h(b"a")), ids.get(h(b"c"))), (Some(0), None));
        ids.unlimited();
        assert_eq!((ids.insert(h(b"c"), 3), ids.get(h(b"c"))), (None, Some(3)));
    }

    #[test]
    fn seen_numbers_distinct_items_and_tells_collisions_apart() {
        let keys = ["a", "b", "a", "c", "b", "a", "d"];
        let hashes = [|k: &str| xxh3_64(k.as_bytes()), |_: &str| 7];
        // A table sized ahead (smaller than the items, so that it still grows) answers the same.
        for (hash, mut seen) in (hashes.into_iter())
            .flat_map(|hash| [(hash, Seen::new()), (hash, Seen::with_capacity(2))])
        {
            let mut distinct: Vec<&str> = Vec::new();
            let got: Vec<Option<usize>> = (keys.iter())
                .map(|&k| {
                    let found = seen.insert(hash(k), |d| distinct[d] == k);
                    if found.is_none() {
                        distinct.push(k);
                    }
                    found
                })
                .collect();
            assert_eq!(got, [None, None, Some(0), None, Some(1), Some(0), None]);
            assert_eq!(distinct, ["a", "b", "c", "d"]);
            assert_eq!(seen.len(), 4);
        }
    }

    #[test]
    fn seen_keeps_its_numbers_as_it_grows() {
        let mut seen = Seen::new();
        let items: Vec<u64> = (0..5000).map(|i| i % 1500).collect();
        let mut distinct: Vec<u64> = Vec::new();
        for &item in &items {
            // Half the items share a hash with another (colliding): `same` tells them apart.
            match seen.insert(item / 2, |d| distinct[d] == item) {
                Some(d) => assert_eq!(distinct[d], item),
                None => distinct.push(item),
            }
        }
        assert_eq!(distinct, (0..1500).collect::<Vec<u64>>());
        assert_eq!(seen.len(), 1500);
    }

    #[test]
    fn all_differ_finds_a_repeated_hash_wherever_it_lands() {
        assert!(all_differ([].into_iter()));
        assert!(all_differ([0, 1, u64::MAX].into_iter()));
        assert!(!all_differ([0, 5, 0].into_iter()));
        // Hashes in neighbouring slots: a repeat is found past a run of others.
        let crowded: Vec<u64> = (1..100).collect();
        assert!(all_differ(crowded.iter().copied()));
        for repeat in [1, 50, 99] {
            let with_repeat: Vec<u64> = crowded.iter().copied().chain([repeat]).collect();
            assert!(!all_differ(with_repeat.into_iter()));
        }
        // A run of slots wraps around the end of the table.
        let last = (1..)
            .find(|&h| slot_of(h, 15) == 15)
            .expect("some hash lands last");
        let same_slot: Vec<u64> = (1..).filter(|&h| slot_of(h, 15) == 15).take(5).collect();
        assert!(all_differ(same_slot.iter().copied()));
        let wrapped: Vec<u64> = same_slot.iter().copied().chain([last]).collect();
        assert!(!all_differ(wrapped.into_iter()));
    }

    #[test]
    fn distinct_shares_repeats_and_tells_collisions_apart() {
        let keys = ["a", "b", "a", "c", "b", "a"];
        let d = distinct(&keys, |k| xxh3_64(k.as_bytes())).unwrap();
        assert_eq!(d.firsts, [0, 1, 3]);
        assert_eq!(d.of_row, [0, 1, 0, 2, 1, 0]);
        assert_eq!(distinct(&["a", "b", "c"], |k| xxh3_64(k.as_bytes())), None);
        assert_eq!(distinct::<u64>(&[], |&p| p), None);
        // Every hash equal: only equality decides.
        let d = distinct(&keys, |_| 7).unwrap();
        assert_eq!(
            (d.firsts, d.of_row),
            (vec![0, 1, 3], vec![0, 1, 0, 2, 1, 0])
        );
        assert_eq!(distinct(&["x", "y", "z"], |_| 7), None);
        let positions: Vec<u64> = (0..10_000).map(|i| i % 20).collect();
        let d = distinct(&positions, |&p| p).unwrap();
        assert_eq!(d.firsts, (0..20).collect::<Vec<_>>());
        assert!(d.of_row.iter().enumerate().all(|(row, &i)| i == row % 20));
    }

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
