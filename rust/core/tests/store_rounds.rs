//! The round trips a store makes over a storage that must be asked for its bytes (a remote
//! store's cache), counted where they are made: a counting in-memory `Storage` records every
//! `ensure` that fetched something (one round of concurrent requests), its requests (runs of
//! missing 64-byte units, as the node cache counts them) and bytes. "A cold lookup is two round
//! trips" is asserted here, under the Python tests of the same promise (tests/remote/).

use docstore_core::storage::Storage;
use docstore_core::{
    Field, FieldType, RecordBatch, Result, Schema, Store, Value, Writer, WriterOptions,
};
use std::ops::Range;
use std::sync::Mutex;

/// Presence is kept per unit of this many bytes, as the node cache keeps it.
const UNIT: u64 = 64;

/// A store's bytes, every one of them at hand, but readable only once `ensure`d: what a remote
/// store's cache holds, with a log of the rounds that fetched.
struct Counting {
    bytes: Vec<u8>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    present: Vec<bool>,
    /// Each round that fetched: its requests (byte ranges).
    rounds: Vec<Vec<Range<u64>>>,
}

impl Counting {
    fn new(bytes: Vec<u8>) -> Counting {
        let units = (bytes.len() as u64).div_ceil(UNIT) as usize;
        // The first bytes come with the open's first request (`RemoteFile::open`).
        let mut present = vec![false; units];
        let first = (64 << 10) / UNIT as usize;
        present[..first.min(units)].fill(true);
        Counting {
            bytes,
            state: Mutex::new(State {
                present,
                ..State::default()
            }),
        }
    }

    fn units(&self, range: &Range<u64>) -> Range<usize> {
        let end = range.end.min(self.bytes.len() as u64);
        (range.start / UNIT) as usize..end.div_ceil(UNIT) as usize
    }

    /// Rounds, requests and bytes fetched so far.
    fn counts(&self) -> (usize, usize, u64) {
        let state = self.state.lock().unwrap();
        let requests = state.rounds.iter().map(Vec::len).sum();
        let bytes = (state.rounds.iter().flatten())
            .map(|r| r.end - r.start)
            .sum();
        (state.rounds.len(), requests, bytes)
    }
}

impl AsRef<[u8]> for Counting {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Storage for Counting {
    fn ensure(&self, ranges: &mut Vec<Range<u64>>) -> Result<()> {
        let mut state = self.state.lock().unwrap();
        let mut missing: Vec<usize> = Vec::new();
        for range in ranges.drain(..) {
            missing.extend(self.units(&range).filter(|&u| !state.present[u]));
        }
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        // One request per run of consecutive missing units.
        let mut requests: Vec<Range<u64>> = Vec::new();
        for &u in &missing {
            state.present[u] = true;
            let at = u as u64 * UNIT;
            match requests.last_mut() {
                Some(last) if last.end == at => last.end = at + UNIT,
                _ => requests.push(at..at + UNIT),
            }
        }
        state.rounds.push(requests);
        Ok(())
    }

    fn present(&self, range: Range<u64>) -> bool {
        let state = self.state.lock().unwrap();
        self.units(&range).all(|u| state.present[u])
    }
}

/// A checked store of `n` documents with ids `id000000`...: a few KiB of text each, so that
/// blobs lie apart.
fn build(n: usize, id: impl Fn(usize) -> String) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.docstore");
    let schema = Schema::new(vec![Field::new("text", FieldType::Str)]).unwrap();
    let mut writer = Writer::create(&path, schema, WriterOptions::default()).unwrap();
    for i in 0..n {
        let text: String = (0..200)
            .map(|j| format!("w{} ", (i * 7919 + j * 104729) % 100_003))
            .collect();
        writer.push(&id(i), &[Value::Str(&text)]).unwrap();
    }
    writer.finish().unwrap();
    std::fs::read(&path).unwrap()
}

fn short(i: usize) -> String {
    format!("id{i:06}")
}

fn open(bytes: &[u8]) -> Store<Counting> {
    Store::from_bytes(Counting::new(bytes.to_vec())).unwrap()
}

#[test]
fn a_cold_lookup_is_two_rounds() {
    let bytes = build(5000, short);
    let store = open(&bytes);
    let opened = store_counts(&store);
    // Opening fetches the key fences (the schema and dictionary came with the first bytes).
    assert_eq!(opened.0, 1, "{opened:?}");
    let mut batch = RecordBatch::default();
    assert_eq!(store.read_one(b"id004321", &mut batch).unwrap(), Some(4321));
    // The key index block with the common prefix, then the blob the entry locates (the
    // figures of main before the plan: 2 rounds, 3 requests, 5056 bytes).
    assert_eq!(minus(store_counts(&store), opened), (2, 3, 5056));
    // Warm: nothing more.
    let warm = store_counts(&store);
    store.read_one(b"id004321", &mut batch).unwrap();
    assert_eq!(store_counts(&store), warm);
}

#[test]
fn a_cold_batch_is_two_rounds() {
    let bytes = build(5000, short);
    let store = open(&bytes);
    let opened = store_counts(&store);
    let ids: Vec<String> = (0..64).map(|i| short(i * 73 % 5000)).collect();
    let keys: Vec<&[u8]> = ids.iter().map(|k| k.as_bytes()).collect();
    let mut batch = RecordBatch::default();
    let found = store.read_many(&keys, &mut batch).unwrap();
    assert!(found.iter().all(Option::is_some));
    // The blocks (and the prefix), then every blob at once.
    assert_eq!(minus(store_counts(&store), opened), (2, 66, 200320));
}

#[test]
fn a_cold_lookup_of_a_long_id_is_two_rounds() {
    // Random-looking ids of 32 hex digits: longer than the common prefix (none) plus 8 bytes,
    // so told apart by whole keys.
    let long = |i: usize| {
        format!(
            "{:032x}",
            (i as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
        )
    };
    let bytes = build(3000, long);
    let store = open(&bytes);
    let opened = store_counts(&store);
    let mut batch = RecordBatch::default();
    let key = long(1234);
    let found = store.read_one(key.as_bytes(), &mut batch).unwrap();
    // The block and its key offsets; then the keys of the run with the candidates' blobs.
    let (rounds, ..) = minus(store_counts(&store), opened);
    assert_eq!(rounds, 2, "{:?}", minus(store_counts(&store), opened));
    assert_eq!(store.key_at(found.unwrap()).unwrap(), key);
}

#[test]
fn a_cold_take_is_three_rounds() {
    let bytes = build(5000, short);
    let store = open(&bytes);
    let opened = store_counts(&store);
    let positions: Vec<u64> = (0..64).map(|i| i * 71 % 5000).collect();
    let mut batch = RecordBatch::default();
    store.read_records(&positions, &mut batch).unwrap();
    // Doc offsets and key ranks; blobs and key offsets; keys: five requests a document.
    assert_eq!(minus(store_counts(&store), opened), (3, 320, 69824));
}

fn store_counts(store: &Store<Counting>) -> (usize, usize, u64) {
    store.storage().counts()
}

fn minus(a: (usize, usize, u64), b: (usize, usize, u64)) -> (usize, usize, u64) {
    (a.0 - b.0, a.1 - b.1, a.2 - b.2)
}
