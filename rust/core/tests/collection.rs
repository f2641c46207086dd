//! A collection read through `Collection`: a sealed directory of shards, and a single store file
//! opened as a collection of one, answer every lookup the same way (by id, by position, in
//! batches, misses included), and `verify` names what is damaged.

mod common;

use common::{key, number, sealed, write};
use docstore_core::format::Section;
use docstore_core::{Collection, DataAccess, Error, RecordBatch};
use std::path::Path;

fn open(path: &Path) -> Collection {
    Collection::open(path, DataAccess::Mmap).unwrap()
}

/// Ids that no document has: a shorter and a longer one, one past the last, one before the first.
const MISSES: [&str; 4] = ["d", "d00000000", "zzz", "a"];

/// Asserts that `c` holds documents `0..n` at positions `0..n`, by every way of reading.
fn check_reads_as_written(c: &Collection, n: u64) {
    assert_eq!(c.len(), n);
    let mut batch = RecordBatch::default();
    for i in (0..n).step_by(7).chain([n - 1]) {
        batch.clear();
        let k = key(i);
        assert_eq!(c.read_one(k.as_bytes(), &mut batch).unwrap(), Some(i));
        assert_eq!((batch.len(), number(batch.get(0))), (1, i));
        assert_eq!(c.position(k.as_bytes()).unwrap(), Some(i));
        assert_eq!(c.key_at(i).unwrap(), k);
    }
    for miss in MISSES {
        batch.clear();
        assert_eq!(c.read_one(miss.as_bytes(), &mut batch).unwrap(), None);
        assert!(batch.is_empty(), "a miss reads nothing");
        assert_eq!(c.position(miss.as_bytes()).unwrap(), None);
    }
    assert!(matches!(c.key_at(n), Err(Error::OutOfRange { index, len }) if (index, len) == (n, n)));

    // A batch in no order, with misses between its ids.
    let mut asked: Vec<String> = (0..n).rev().step_by(3).map(key).collect();
    for (at, miss) in MISSES.iter().enumerate() {
        asked.insert(at * 17, miss.to_string());
    }
    let keys: Vec<&[u8]> = asked.iter().map(|k| k.as_bytes()).collect();
    let want: Vec<Option<u64>> = (asked.iter())
        .map(|k| (0..n).find(|&i| key(i) == *k))
        .collect();
    let found: Vec<u64> = want.iter().flatten().copied().collect();
    let numbers = |batch: &RecordBatch| {
        (0..batch.len())
            .map(|r| number(batch.get(r)))
            .collect::<Vec<_>>()
    };

    batch.clear();
    assert_eq!(c.read_many(&keys, &mut batch).unwrap(), want);
    assert_eq!(numbers(&batch), found);
    assert_eq!(c.positions(&keys).unwrap(), want);

    let located = c.locate_batch(&keys).unwrap();
    let positions: Vec<Option<u64>> = located.iter().map(|(_, l)| l.map(|l| l.pos)).collect();
    assert_eq!(positions, want);
    batch.clear();
    assert_eq!(c.read_located(&located, &mut batch).unwrap(), want);
    assert_eq!(numbers(&batch), found);
    assert_eq!(c.confirm_located(&located).unwrap(), want);

    // By position, in request order.
    batch.clear();
    c.read_records(&found, &mut batch).unwrap();
    assert_eq!(numbers(&batch), found);
    batch.clear();
    c.read_prefetched(&found, &mut batch).unwrap();
    assert_eq!(numbers(&batch), found);
    assert!(matches!(
        c.read_records(&[0, n], &mut batch),
        Err(Error::OutOfRange { .. })
    ));

    // Keys of a range of positions, clipped to the collection.
    let mut seen = Vec::new();
    c.keys_in(1..n + 5, |pos, k| {
        seen.push((pos, k.to_string()));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, (1..n).map(|i| (i, key(i))).collect::<Vec<_>>());

    c.verify().unwrap();
}

#[test]
fn a_sealed_collection_reads_as_its_documents_across_its_shards() {
    let dir = tempfile::tempdir().unwrap();
    // An empty shard between two others: its positions are no one's.
    let path = sealed(dir.path(), "coll", &[300, 0, 500, 200]);
    let c = open(&path);
    assert!(c.is_collection() && c.index().is_some());
    assert_eq!(c.shards().len(), 4);
    assert_eq!(
        c.shards().iter().map(|s| s.len()).collect::<Vec<_>>(),
        [300, 0, 500, 200]
    );
    assert!(c.checked());
    check_reads_as_written(&c, 1000);
}

#[test]
fn a_single_store_file_reads_as_a_collection_of_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir.path().join("one.docstore"), 0..700);
    let c = open(&path);
    assert!(!c.is_collection() && c.index().is_none());
    assert_eq!(c.shards().len(), 1);
    assert_eq!(c.shard_paths(), std::slice::from_ref(&path));
    check_reads_as_written(&c, 700);
}

/// Flips one byte in the middle of the data section of the store file at `path`.
fn damage(path: &Path) {
    let store = docstore_core::Store::open(path).unwrap();
    let data = store.header().section(Section::Data);
    drop(store);
    let mut bytes = std::fs::read(path).unwrap();
    bytes[(data.offset + data.len / 2) as usize] ^= 0x55;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn verify_names_each_damaged_file_of_a_collection() {
    let dir = tempfile::tempdir().unwrap();
    let path = sealed(dir.path(), "coll", &[300, 400, 300]);
    let paths = open(&path).shard_paths().to_vec();
    damage(&paths[1]);
    let Err(Error::Corrupt(message)) = open(&path).verify() else {
        panic!("a damaged shard passed verify");
    };
    assert!(
        message.contains(&paths[1].display().to_string()),
        "{message}"
    );
    assert!(message.contains("checksum"), "{message}");
    damage(&paths[2]);
    let Err(Error::Corrupt(message)) = open(&path).verify() else {
        panic!("two damaged shards passed verify");
    };
    assert!(message.starts_with("2 damaged files"), "{message}");
}

#[test]
fn verify_of_a_single_damaged_file_says_what_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir.path().join("one.docstore"), 0..500);
    damage(&path);
    match open(&path).verify() {
        Err(Error::Corrupt(message)) => assert!(message.contains("checksum"), "{message}"),
        other => panic!("a damaged store passed verify: {other:?}"),
    }
}
