//! Stores and collections the collection and remote tests read: written with the core's
//! `Writer`, sealed with `collection::seal`, in a temporary directory.

#![allow(dead_code)] // each test file uses its part

use docstore_core::format::record::{decode, Value};
use docstore_core::{Field, FieldType, Schema, Writer, WriterOptions};
use std::path::{Path, PathBuf};

pub fn schema() -> Schema {
    Schema::new(vec![
        Field::new("text", FieldType::Str),
        Field::new("n", FieldType::Int64),
    ])
    .unwrap()
}

/// The id of document `i`: short (told apart by the key index alone), in no order.
pub fn key(i: u64) -> String {
    format!("d{:07}", (i * 7919) % 10_000_019)
}

/// Document `i`'s text: words that compress about as real text does.
pub fn text(i: u64) -> String {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..8 + i % 24)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            [
                "river", "sea", "stone", "light", "north", "paper", "glass", "wind",
            ][(x % 8) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes documents `ids` (each `key(i)`, `text(i)`, `n = i`) to a store at `path`.
pub fn write(path: &Path, ids: std::ops::Range<u64>) -> PathBuf {
    let mut writer = Writer::create(path, schema(), WriterOptions::default()).unwrap();
    for i in ids {
        let text = text(i);
        writer
            .push(&key(i), &[Value::Str(&text), Value::Int64(i as i64)])
            .unwrap();
    }
    writer.finish().unwrap();
    path.to_path_buf()
}

/// A collection at `dir/name` sealed from shards of `sizes` documents (document `i` of the
/// whole is at global position `i`).
pub fn sealed(dir: &Path, name: &str, sizes: &[u64]) -> PathBuf {
    let mut start = 0;
    let shards: Vec<PathBuf> = (sizes.iter().enumerate())
        .map(|(s, &n)| {
            let shard = write(
                &dir.join(format!("{name}-shard{s}.docstore")),
                start..start + n,
            );
            start += n;
            shard
        })
        .collect();
    let target = dir.join(name);
    docstore_core::collection::seal(&target, &shards, false).unwrap();
    target
}

/// The `n` of a raw record, after checking its text is document `n`'s.
pub fn number(raw: &[u8]) -> u64 {
    let values = decode(&schema(), raw).unwrap();
    let (Value::Str(text), Value::Int64(n)) = (&values[0], &values[1]) else {
        panic!("fields out of order: {values:?}");
    };
    assert_eq!(*text, self::text(*n as u64));
    *n as u64
}
