//! Builds are byte-identical: fixed corpora give stores (and a collection's id index) whose bytes
//! hash to fixed values. A refactoring of the writer or the key index must not change these; a
//! deliberate format change updates them (and says so in docs/format.md).

use docstore_core::collection;
use docstore_core::{ElemType, Field, FieldType, Schema, Value, Writer, WriterOptions};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_64;

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("text", FieldType::Str),
        Field::new("label", FieldType::Int64),
        Field::new("tokens", FieldType::Array(ElemType::I32)),
    ])
    .unwrap()
}

/// Document `i` of a corpus whose keys share a prefix, tie on their first 8 bytes after it, and
/// come in no order.
fn build(path: &Path, docs: impl Iterator<Item = usize>, options: WriterOptions) -> u64 {
    let mut writer = Writer::create(path, schema(), options).unwrap();
    for i in docs {
        let key = format!("doc-{:06}-{}", (i * 7919) % 1_000_003, "é".repeat(i % 3));
        let text = format!(
            "passage {i} about rivers, {} and the sea",
            "words ".repeat(i % 50)
        );
        let tokens: Vec<u8> = (0..(i % 9) as i32)
            .flat_map(|t| (t * i as i32).to_le_bytes())
            .collect();
        let values = [
            Value::Str(&text),
            Value::Int64(i as i64 - 500),
            Value::Array(ElemType::I32, &tokens),
        ];
        writer.push(&key, &values).unwrap();
    }
    writer.finish().unwrap();
    xxh3_64(&std::fs::read(path).unwrap())
}

#[test]
fn stores_are_byte_identical_to_their_fixed_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let options = WriterOptions::default;
    let got = [
        build(&path("v3"), 0..5000, options()),
        // Without a dictionary (trained on the first batch, which a spill of the keys ends),
        // spilled key runs give the same file as one sort in memory.
        build(
            &path("v3-nodict"),
            0..5000,
            WriterOptions {
                dict_size: 0,
                ..options()
            },
        ),
        build(
            &path("v3-nodict-spilled"),
            0..5000,
            WriterOptions {
                dict_size: 0,
                key_buffer_bytes: 4096,
                ..options()
            },
        ),
        build(
            &path("v2"),
            0..2000,
            WriterOptions {
                format_version: 2,
                ..options()
            },
        ),
        build(
            &path("v1"),
            0..2000,
            WriterOptions {
                format_version: 1,
                ..options()
            },
        ),
        build(
            &path("stored"),
            0..1000,
            WriterOptions {
                level: docstore_core::codec::LEVEL_NONE,
                ..options()
            },
        ),
        build(&path("empty"), 0..0, options()),
        build(&path("one"), 0..1, options()),
    ];
    let want = [
        0x637aabf292c78383,
        0xedb43d2c90787ea1,
        0xedb43d2c90787ea1,
        0x1b33b3241a169fe9,
        0x4fb8dcb42409bdec,
        0x6ffbf89995bc5c2a,
        0x45fbb1bbf6b2bfb1,
        0x52baa6e3d008aa79,
    ];
    assert_eq!(got[1], got[2], "spilled key runs changed the file");
    assert_eq!(got, want, "{got:#018x?}");
}

#[test]
fn a_collections_id_index_is_byte_identical_to_its_fixed_hash() {
    let dir = tempfile::tempdir().unwrap();
    let shards: Vec<PathBuf> = [0..1500, 1500..1501, 1501..1501, 1501..4000]
        .into_iter()
        .enumerate()
        .map(|(i, docs)| {
            let path = dir.path().join(format!("shard-{i}"));
            build(&path, docs, WriterOptions::default());
            path
        })
        .collect();
    let target = dir.path().join("corpus");
    collection::seal(&target, &shards, false).unwrap();
    let index = xxh3_64(&std::fs::read(target.join("index.docstore")).unwrap());
    assert_eq!(index, 0xdeb609d1bf9afcef, "{index:#018x}");
}
