//! What the fuzz targets do with their input, shared with the stable smoke test
//! (`rust/core/tests/fuzz.rs`) and the seed writer (`examples/fuzz_seeds.rs`), which include
//! this file by path.
//!
//! A store's checksums catch accidents, not crafted files: `reseal` gives any bytes valid
//! checksums, so that the reader's own checks, not the checksums, are what the fuzzer meets.

#![allow(dead_code)] // each includer uses its part

use docstore_core::codec::{self, Compressor};
use docstore_core::format::record::{self, Value};
use docstore_core::format::reseal;
use docstore_core::{
    ElemType, Field, FieldType, RecordBatch, Schema, Store, Writer, WriterOptions,
};
use std::path::Path;

/// Records read per store: enough to reach every section, few enough to keep runs fast.
const MAX_PROBED: u64 = 64;

/// How far a run got into a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reached {
    /// `open` refused it.
    Refused,
    /// It opened, and `verify()` found it corrupt.
    Opened,
    /// It opened and passed `verify()`.
    Verified,
}

/// Seals `bytes` as a store and reads it every way the API allows. Panics only on a defect:
/// a panic inside the core, or a store that `verify()` accepts but that reads inconsistently.
pub fn fuzz_store(bytes: &[u8]) -> Reached {
    let mut file = bytes.to_vec();
    reseal(&mut file);
    read_everything(&file)
}

/// Opens `file` as it is and reads it every way the API allows (see `fuzz_store`).
pub fn read_everything(file: &[u8]) -> Reached {
    let Ok(store) = Store::from_bytes(file) else {
        return Reached::Refused;
    };
    let verified = store.verify().is_ok();
    // Checked at open: what a store gives back is one JSON object, whatever its bytes were.
    if let Some(metadata) = store.metadata() {
        assert!(docstore_core::format::metadata::check(metadata.as_bytes()).is_ok());
    }
    let schema = store.schema();
    let n = store.len();
    let probed: Vec<u64> = (0..n.min(MAX_PROBED))
        .chain([n, n.saturating_add(1), u64::MAX])
        .collect();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for &pos in &probed {
        let key = store.key_at(pos).map(str::to_owned);
        let raw = store.record(pos).map(|raw| raw.into_owned());
        if let Ok(raw) = &raw {
            read_fields(schema, raw);
        }
        let _ = store.with_record(pos, |raw| raw.len());
        if verified && pos < n {
            let key = key.as_deref().expect("a verified store reads its keys");
            let raw = raw.as_ref().expect("a verified store reads its records");
            record::decode(schema, raw).expect("a verified store's records decode");
            assert_eq!(
                store.position(key.as_bytes()).unwrap(),
                Some(pos),
                "a verified store finds its keys where they are"
            );
        }
        if let Ok(key) = key {
            keys.push(key.into_bytes());
        }
    }
    // Keys that are not in the store: none at all, a high byte, and near misses of stored keys.
    let mut misses = vec![Vec::new(), vec![0xFF], vec![0x00]];
    for key in &keys {
        misses.push(key[..key.len() / 2].to_vec());
        misses.push([key.as_slice(), b"\0"].concat());
        let mut bumped = key.clone();
        if let Some(last) = bumped.last_mut() {
            *last = last.wrapping_add(1);
        }
        misses.push(bumped);
    }
    for key in keys.iter().chain(&misses) {
        let _ = store.position(key);
        let _ = store.get(key);
    }
    let all: Vec<&[u8]> = keys.iter().chain(&misses).map(Vec::as_slice).collect();
    let _ = store.positions(&all);
    let mut batch = RecordBatch::default();
    let _ = store.read_records(&probed, &mut batch);
    let found = store.read_many(&all, &mut batch);
    if verified {
        let found = found.expect("a verified store reads a batch of keys");
        for (key, pos) in keys.iter().zip(found) {
            assert_eq!(pos, store.position(key).unwrap(), "batch and single agree");
        }
        return Reached::Verified;
    }
    Reached::Opened
}

/// Compresses the document in `bytes` with the level and dictionary they also give, at every
/// writer path (docstore's encoder at level 3 with a dictionary, liblz4 otherwise), and checks
/// that it decodes back. The target builds with debug assertions, so the encoder's own check
/// (`encode_checked`) panics instead of quietly handing the block to liblz4.
pub fn fuzz_compress(bytes: &[u8]) {
    let [level, dict_hi, dict_lo, rest @ ..] = bytes else {
        return;
    };
    // 0xFF is "none" (as in the header); other bytes pick 0 (fast) to 12 (HC).
    let level = match *level {
        0xFF => codec::LEVEL_NONE,
        byte => i32::from(byte % 13),
    };
    let dict_len = (usize::from(*dict_hi) << 8 | usize::from(*dict_lo)).min(rest.len());
    let (dict, doc) = rest.split_at(dict_len);
    let compressor = Compressor::new(level, dict).expect("levels -1 to 12 are valid");
    let mut blob = Vec::new();
    compressor.compress(doc, &mut blob);
    let decoded = codec::decompress(&blob, compressor.dictionary()).expect("a blob decodes");
    assert_eq!(&*decoded, doc, "a blob decodes to its document");
}

/// Decodes a record every way the API offers: whole, field by field, and raw.
fn read_fields(schema: &Schema, raw: &[u8]) {
    let _ = record::decode(schema, raw);
    for value in record::raw_fields(schema, raw) {
        if value.is_err() {
            break;
        }
    }
    for index in 0..schema.len() {
        let _ = record::decode_field(schema, raw, index);
        let _ = record::raw_field(schema, raw, index);
    }
}

/// Small stores that cover the format: every field type, with and without a dictionary, fast
/// and HC levels, keys sharing long prefixes, no document and one document.
pub fn seed_stores(dir: &Path) -> Vec<Vec<u8>> {
    let every_type = Schema::new(vec![
        field("text", FieldType::Str),
        field("blob", FieldType::Bytes),
        field("n", FieldType::Int64),
        field("x", FieldType::Float64),
        field("tokens", FieldType::Array(ElemType::I32)),
        field("weights", FieldType::Array(ElemType::F32)),
    ])
    .unwrap();
    // Version 4: nullable fields and the types it added.
    let version4 = Schema::new(vec![
        Field {
            nullable: true,
            ..field("title", FieldType::Str)
        },
        field("flag", FieldType::Bool),
        field("tags", FieldType::StrList),
        field("parts", FieldType::BytesList),
        field("half", FieldType::Array(ElemType::F16)),
        Field {
            nullable: true,
            ..field("brain", FieldType::Array(ElemType::BF16))
        },
        field("grid", "uint8[3,1]".parse().unwrap()),
    ])
    .unwrap();
    let text_only = Schema::new(vec![field("text", FieldType::Str)]).unwrap();
    let small_dict = WriterOptions {
        dict_size: 256,
        ..Default::default()
    };
    let fast = WriterOptions {
        level: 0,
        dict_size: 0,
        ..Default::default()
    };
    let uncompressed = WriterOptions {
        level: codec::LEVEL_NONE,
        ..Default::default()
    };
    let specs = [
        ("every_type", &every_type, 24, small_dict.clone()),
        ("every_type_fast", &every_type, 24, fast.clone()),
        ("version4", &version4, 24, small_dict.clone()),
        (
            "version5_metadata",
            &version4,
            12,
            WriterOptions {
                metadata: Some(r#"{"huggingface": {"features": {"t": {"dtype": "string"}}}, "n": [1, 2.5, null, true]}"#.into()),
                ..small_dict.clone()
            },
        ),
        ("text_prefixed_keys", &text_only, 40, small_dict),
        ("text_fast", &text_only, 8, fast),
        ("text_uncompressed", &text_only, 8, uncompressed),
        ("one", &text_only, 1, WriterOptions::default()),
        ("empty", &every_type, 0, WriterOptions::default()),
    ];
    specs
        .into_iter()
        .map(|(name, schema, count, options)| {
            let path = dir.join(name);
            let mut writer = Writer::create(&path, schema.clone(), options).unwrap();
            for i in 0..count {
                let key = if name.contains("prefixed") {
                    format!("collection/shared/prefix/{i:04}")
                } else {
                    format!("d{i}")
                };
                let text = format!("document {i}: {}", "the river meets the sea ".repeat(i % 7));
                let tokens: Vec<u8> = (0..(i % 5) as i32)
                    .flat_map(|t| (t * 7).to_le_bytes())
                    .collect();
                let weights: Vec<u8> = (0..(i % 3))
                    .flat_map(|t| (t as f32 / 3.0).to_le_bytes())
                    .collect();
                let blob = [i as u8; 3];
                let mut list = Vec::new();
                record::put_list(
                    &mut list,
                    i % 3,
                    [text.as_bytes(), b"tag"].into_iter().cycle().take(i % 3),
                );
                let values: Vec<Value> = schema
                    .fields
                    .iter()
                    .map(|f| match f.ty {
                        _ if f.nullable && i % 4 == 1 => Value::Null,
                        FieldType::Str => Value::Str(&text),
                        FieldType::Bytes => Value::Bytes(&blob),
                        FieldType::Int64 => Value::Int64(i as i64 - 3),
                        FieldType::Float64 => Value::Float64(i as f64 / 8.0),
                        FieldType::Array(ElemType::I32) => Value::Array(ElemType::I32, &tokens),
                        FieldType::Array(elem @ (ElemType::F16 | ElemType::BF16)) => {
                            Value::Array(elem, &blob[..(i % 2) * 2])
                        }
                        FieldType::Array(_) => Value::Array(ElemType::F32, &weights),
                        FieldType::Bool => Value::Bool(i.is_multiple_of(2)),
                        FieldType::Tensor(elem, _) => Value::Array(elem, &blob),
                        FieldType::StrList | FieldType::BytesList => Value::List {
                            utf8: f.ty == FieldType::StrList,
                            raw: &list,
                        },
                    })
                    .collect();
                writer.push(&key, &values).unwrap();
            }
            writer.finish().unwrap();
            std::fs::read(&path).unwrap()
        })
        .collect()
}

/// Inputs for `fuzz_compress`: English-like documents with and without a dictionary drawn from
/// the same text, at the default level (docstore's encoder), at level 0, at a high HC level and
/// uncompressed.
pub fn seed_compress_inputs() -> Vec<Vec<u8>> {
    let text = "the river meets the sea where the government of the town met on the bank; \
                a document about rivers, towns and the sea, and the people of the town. "
        .repeat(12)
        .into_bytes();
    let input = |level: u8, dict: &[u8], doc: &[u8]| {
        let mut input = vec![level, (dict.len() >> 8) as u8, dict.len() as u8];
        input.extend_from_slice(dict);
        input.extend_from_slice(doc);
        input
    };
    vec![
        input(3, &text[..600], &text[300..900]),
        input(3, &text[..600], &text[..600]),
        input(3, &[], &text[..400]),
        input(0, &text[..200], &text[100..500]),
        input(9, &text[..300], &text[50..700]),
        input(3, &text[..64], b"short"),
        input(0xFF, &text[..64], &text[..300]),
    ]
}

fn field(name: &str, ty: FieldType) -> Field {
    Field::new(name, ty)
}
