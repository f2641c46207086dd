//! A batch searched once (`Collection::locate_batch`), then read chunk by chunk from what the
//! search found (`read_located`, `confirm_located`): what the bindings' `get_many` and
//! `positions` do.

use docstore_core::{
    Collection, DataAccess, Error, Field, FieldType, RecordBatch, Schema, Value, Writer,
    WriterOptions,
};

fn store(dir: &std::path::Path, n: usize) -> Collection {
    let path = dir.join("s.docstore");
    let schema = Schema::new(vec![Field::new("text", FieldType::Str)]).unwrap();
    let mut writer = Writer::create(&path, schema, WriterOptions::default()).unwrap();
    for i in 0..n {
        let text = format!("document {i}: {}", "words ".repeat(i % 40));
        writer
            .push(&format!("id{i:04}"), &[Value::Str(&text)])
            .unwrap();
    }
    writer.finish().unwrap();
    Collection::open(&path, DataAccess::Mmap).unwrap()
}

fn records(batch: &RecordBatch) -> Vec<Vec<u8>> {
    (0..batch.len()).map(|i| batch.get(i).to_vec()).collect()
}

#[test]
fn a_located_batch_reads_as_read_many_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 300);
    let keys: Vec<String> = ["id0299", "nope", "id0000", "id0150", "id0007", "id9999"]
        .iter()
        .map(|k| k.to_string())
        .collect();
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let (mut want, mut got) = (RecordBatch::default(), RecordBatch::default());
    let positions = store.read_many(&keys, &mut want).unwrap();
    let items = store.locate_batch(&keys).unwrap();
    assert_eq!(items.iter().map(|(k, _)| *k).collect::<Vec<_>>(), keys);
    // In two chunks, as the bindings read a batch.
    let (a, b) = items.split_at(3);
    let mut read = store.read_located(a, &mut got).unwrap();
    read.extend(store.read_located(b, &mut got).unwrap());
    assert_eq!(read, positions);
    assert_eq!(read, [Some(299), None, Some(0), Some(150), Some(7), None]);
    assert_eq!(records(&got), records(&want));
    assert_eq!(store.confirm_located(&items).unwrap(), positions);
}

#[test]
fn what_was_located_is_what_is_read_without_a_second_search() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), 300);
    let keys: [&[u8]; 2] = [b"id0010", b"id0020"];
    let mut items = store.locate_batch(&keys).unwrap();
    // Each key given the other's entry: a read that searched again would find the right ones;
    // one that reads the entries given finds documents that fail their check with the key.
    let (first, second) = (items[0].1, items[1].1);
    (items[0].1, items[1].1) = (second, first);
    let mut batch = RecordBatch::default();
    let err = store.read_located(&items, &mut batch).unwrap_err();
    assert!(matches!(err, Error::Corrupt(_)), "{err}");
    let err = store.confirm_located(&items).unwrap_err();
    assert!(matches!(err, Error::Corrupt(_)), "{err}");
    assert_eq!(first.map(|l| l.pos), Some(10));
}
