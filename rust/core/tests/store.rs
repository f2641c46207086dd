//! Write a store, read it back, and break it in every way a disk or a user can.

use docstore_core::format::Section;
use docstore_core::{
    DataAccess, ElemType, Error, Field, FieldType, RecordBatch, Schema, Store, Value, Writer,
    WriterOptions,
};
use std::collections::HashMap;
use std::path::Path;

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("text", FieldType::Str),
        Field::new("label", FieldType::Int64),
        Field::new("tokens", FieldType::Array(ElemType::I32)),
    ])
    .unwrap()
}

fn doc(i: usize) -> (String, String, i64, Vec<u8>) {
    let key = format!("doc-{:05}-{}", (i * 7919) % 100_000, "é".repeat(i % 3));
    let text = format!(
        "passage {i} about rivers, {} and the sea",
        "words ".repeat(i % 50)
    );
    let tokens: Vec<u8> = (0..(i % 9) as i32)
        .flat_map(|t| (t * i as i32).to_le_bytes())
        .collect();
    (key, text, i as i64 - 500, tokens)
}

fn build(path: &Path, n: usize, options: WriterOptions) -> docstore_core::Summary {
    let mut writer = Writer::create(path, schema(), options).unwrap();
    for i in 0..n {
        let (key, text, label, tokens) = doc(i);
        let values = [
            Value::Str(&text),
            Value::Int64(label),
            Value::Array(ElemType::I32, &tokens),
        ];
        writer.push(&key, &values).unwrap();
    }
    writer.finish().unwrap()
}

fn check_all(store: &Store<impl docstore_core::storage::Storage>, n: usize) {
    assert_eq!(store.len(), n as u64);
    let schema = schema();
    for i in 0..n {
        let (key, text, label, tokens) = doc(i);
        let (pos, raw) = store.get(key.as_bytes()).unwrap().expect("key present");
        assert_eq!(pos, i as u64);
        assert_eq!(store.key_at(pos).unwrap(), key);
        let values = docstore_core::format::record::decode(&schema, &raw).unwrap();
        assert_eq!(
            values,
            [
                Value::Str(&text),
                Value::Int64(label),
                Value::Array(ElemType::I32, &tokens)
            ]
        );
    }
    assert!(store.get(b"missing").unwrap().is_none());
    assert!(store.get(b"").unwrap().is_none());
}

#[test]
fn round_trips_with_and_without_spilled_key_runs() {
    let dir = tempfile::tempdir().unwrap();
    for (name, options) in [
        ("default", WriterOptions::default()),
        (
            "spilled",
            WriterOptions {
                key_buffer_bytes: 2000,
                batch_bytes: 3000,
                ..Default::default()
            },
        ),
        (
            "fast",
            WriterOptions {
                level: 0,
                dict_size: 0,
                ..Default::default()
            },
        ),
    ] {
        let path = dir.path().join(name);
        let summary = build(&path, 3000, options);
        assert_eq!(summary.count, 3000);
        assert_eq!(summary.file_bytes, std::fs::metadata(&path).unwrap().len());
        let store = Store::open(&path).unwrap();
        check_all(&store, 3000);
        store.verify().unwrap();
        let pread = Store::open_with(&path, DataAccess::Pread).unwrap();
        assert_eq!(pread.data_access(), DataAccess::Pread);
        check_all(&pread, 3000);
    }
    // Nothing but the stores is left beside them.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

#[test]
fn empty_store_and_single_document() {
    let dir = tempfile::tempdir().unwrap();
    for n in [0, 1] {
        let path = dir.path().join(format!("s{n}"));
        build(&path, n, WriterOptions::default());
        let store = Store::open(&path).unwrap();
        check_all(&store, n);
        store.verify().unwrap();
        assert!(matches!(
            store.record(n as u64),
            Err(Error::OutOfRange { .. })
        ));
    }
}

#[test]
fn uncompressed_store_holds_records_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none");
    let options = WriterOptions {
        level: docstore_core::codec::LEVEL_NONE,
        ..WriterOptions::default()
    };
    let summary = build(&path, 3000, options);
    let store = Store::open(&path).unwrap();
    check_all(&store, 3000);
    store.verify().unwrap();
    assert_eq!(store.header().level, 0xFF);
    assert!(store.dictionary().is_empty(), "no dictionary to train");
    // Each record costs its bytes and a varint of its length: nothing is compressed.
    assert!(summary.file_bytes > summary.raw_bytes);
    let compressed = build(&dir.path().join("lz4"), 3000, WriterOptions::default());
    assert!(compressed.file_bytes < summary.file_bytes / 2);
}

#[test]
fn duplicate_keys_leave_no_store() {
    let dir = tempfile::tempdir().unwrap();
    for key_buffer_bytes in [1 << 20, 64] {
        let path = dir.path().join("dup");
        let options = WriterOptions {
            key_buffer_bytes,
            ..Default::default()
        };
        let mut writer = Writer::create(&path, schema(), options).unwrap();
        let mut result = Ok(());
        for key in ["a", "b", "c", "d", "e", "f", "g", "h", "c", "z"] {
            result = result.and_then(|_| {
                writer.push(
                    key,
                    &[
                        Value::Str("t"),
                        Value::Int64(1),
                        Value::Array(ElemType::I32, &[]),
                    ],
                )
            });
        }
        let err = result.and_then(|_| writer.finish().map(drop)).unwrap_err();
        // Refused when added, naming both positions, by the table of the first
        // key_buffer_bytes / 128 ids; with none held (64 bytes), by the key sort.
        assert!(
            match err {
                Error::DuplicateKeyAt {
                    ref key,
                    first: 2,
                    second: 8,
                } => key == "c" && key_buffer_bytes > 64,
                Error::DuplicateKey(ref key) => key == "c" && key_buffer_bytes == 64,
                _ => false,
            },
            "{err}"
        );
        assert!(!path.exists());
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "scratch files were left behind"
    );
}

#[test]
fn bad_documents_are_rejected_and_leave_the_writer_usable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut writer = Writer::create(&path, schema(), WriterOptions::default()).unwrap();
    let good = [
        Value::Str("t"),
        Value::Int64(1),
        Value::Array(ElemType::I32, &[]),
    ];
    assert!(matches!(writer.push("", &good), Err(Error::InvalidKey(_))));
    assert!(matches!(
        writer.push("k", &good[..2]),
        Err(Error::Schema(_))
    ));
    let wrong = [
        Value::Int64(1),
        Value::Int64(1),
        Value::Array(ElemType::I32, &[]),
    ];
    assert!(matches!(writer.push("k", &wrong), Err(Error::FieldType(_))));
    writer.push("k", &good).unwrap();
    writer.finish().unwrap();
    assert_eq!(Store::open(&path).unwrap().len(), 1);
}

#[test]
fn abandoned_writer_and_existing_target() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut writer = Writer::create(&path, schema(), WriterOptions::default()).unwrap();
    writer
        .push(
            "k",
            &[
                Value::Str("t"),
                Value::Int64(1),
                Value::Array(ElemType::I32, &[]),
            ],
        )
        .unwrap();
    drop(writer);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    build(&path, 5, WriterOptions::default());
    assert!(matches!(
        Writer::create(&path, schema(), WriterOptions::default()),
        Err(Error::AlreadyExists(_))
    ));
    build(
        &path,
        7,
        WriterOptions {
            overwrite: true,
            ..Default::default()
        },
    );
    assert_eq!(Store::open(&path).unwrap().len(), 7);
}

#[test]
fn every_flipped_byte_and_every_truncation_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    build(
        &path,
        40,
        WriterOptions {
            dict_size: 512,
            ..Default::default()
        },
    );
    let good = std::fs::read(&path).unwrap();
    let oracle: HashMap<String, Vec<u8>> = {
        let store = Store::from_bytes(good.clone()).unwrap();
        (0..40)
            .map(|p| {
                (
                    store.key_at(p).unwrap().to_owned(),
                    store.record(p).unwrap().into_owned(),
                )
            })
            .collect()
    };
    // Reads every document of a store that opened: each is right, or an error.
    let read_all = |store: &Store<Vec<u8>>| {
        for (key, raw) in &oracle {
            if let Ok(Some((_, got))) = store.get(key.as_bytes()) {
                assert!(got.as_ref() == raw.as_slice() || store.verify().is_err());
            }
        }
        for p in 0..store.len() {
            let _ = store.key_at(p);
            let _ = store
                .record(p)
                .map(|r| docstore_core::format::record::decode(store.schema(), &r).map(drop));
        }
    };
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x41;
        match Store::from_bytes(bad) {
            Err(_) => {}
            Ok(store) => {
                assert!(
                    store.verify().is_err(),
                    "flip at byte {i} of {} not detected",
                    good.len()
                );
                read_all(&store);
            }
        }
    }
    for len in (0..good.len()).step_by(7) {
        assert!(
            Store::from_bytes(good[..len].to_vec()).is_err(),
            "truncation at {len} opened"
        );
    }
}

#[test]
fn garbage_and_newer_versions_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage");
    std::fs::write(&path, b"hello, this is not a store at all").unwrap();
    assert!(matches!(Store::open(&path), Err(Error::Corrupt(_))));
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(Store::open(&path), Err(Error::Corrupt(_))));
    let store = dir.path().join("s");
    build(&store, 3, WriterOptions::default());
    let mut bytes = std::fs::read(&store).unwrap();
    bytes[8] = 6;
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(
        err,
        Error::UnsupportedVersion {
            found: 6,
            min: 1,
            max: 5
        }
    ));
    assert!(err.to_string().contains("upgrade"));
}

#[test]
fn large_document_over_16_mib() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let schema = Schema::new(vec![Field::new("text", FieldType::Str)]).unwrap();
    let big: String = (0..5_000_000).map(|i| format!("{} ", i % 977)).collect();
    assert!(big.len() > 16 << 20);
    let mut writer = Writer::create(&path, schema.clone(), WriterOptions::default()).unwrap();
    writer.push("small", &[Value::Str("x")]).unwrap();
    writer.push("big", &[Value::Str(&big)]).unwrap();
    writer.finish().unwrap();
    let store = Store::open(&path).unwrap();
    let (_, raw) = store.get(b"big").unwrap().unwrap();
    assert_eq!(
        docstore_core::format::record::decode(&schema, &raw).unwrap(),
        [Value::Str(&big)]
    );
    store.verify().unwrap();
}

#[test]
fn keys_sharing_long_prefixes_and_keys_that_prefix_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let schema = Schema::new(vec![Field::new("text", FieldType::Str)]).unwrap();
    let mut keys: Vec<String> = (0..2000)
        .map(|i| format!("clueweb22-en0000-{:02}-{:05}", i % 7, i))
        .collect();
    keys.extend(
        [
            "c",
            "cl",
            "clueweb22-en0000-00",
            "clueweb22-en0000-00\0",
            "clueweb22-en0000-00\0\0x",
        ]
        .map(String::from),
    );
    keys.extend((1..50).map(|i| format!("clueweb22-en0000-00-00000{}", "9".repeat(i))));
    let mut writer = Writer::create(&path, schema, WriterOptions::default()).unwrap();
    for key in &keys {
        writer.push(key, &[Value::Str(key)]).unwrap();
    }
    writer.finish().unwrap();
    let store = Store::open(&path).unwrap();
    store.verify().unwrap();
    for (pos, key) in keys.iter().enumerate() {
        assert_eq!(
            store.position(key.as_bytes()).unwrap(),
            Some(pos as u64),
            "{key:?}"
        );
    }
    for absent in [
        "",
        "b",
        "d",
        "clueweb22",
        "clueweb22-en0000-00-000009999999999999999999999999999999999999999999999999999",
        "clueweb22-en0000-00\0\0",
    ] {
        assert_eq!(
            store.position(absent.as_bytes()).unwrap(),
            None,
            "{absent:?}"
        );
    }
}

#[test]
fn pread_reads_what_the_map_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    build(&path, 500, WriterOptions::default());
    let mapped = Store::open(&path).unwrap();
    let pread = Store::open_with(&path, DataAccess::Pread).unwrap();
    let positions: Vec<u64> = (0..500).rev().collect();
    let (mut a, mut b) = (RecordBatch::default(), RecordBatch::default());
    mapped.read_records(&positions, &mut a).unwrap();
    pread.read_records(&positions, &mut b).unwrap();
    assert_eq!(a.len(), 500);
    for i in 0..a.len() {
        assert_eq!(a.get(i), b.get(i));
    }
}

#[test]
fn lookups_agree_with_a_hash_map_for_keys_that_tie_on_their_prefix() {
    // Short alphabets with NUL bytes make many keys share the 8 bytes after the common prefix,
    // across block (page) boundaries of the key index, and mix short and long keys in one run.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |m: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % m
    };
    let alphabet = ["a", "b", "\0", "é"];
    let mut random_key = |prefix: &str| {
        let len = 1 + next(14);
        let tail: String = (0..len).map(|_| alphabet[next(4) as usize]).collect();
        format!("{prefix}{tail}")
    };
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new(vec![]).unwrap();
    for (case, prefix) in ["", "p/", "common-prefix-longer-than-eight/"]
        .iter()
        .enumerate()
    {
        let mut seen = HashMap::new();
        let mut keys = Vec::new();
        while keys.len() < 3000 {
            let key = random_key(prefix);
            if !seen.contains_key(&key) {
                seen.insert(key.clone(), keys.len() as u64);
                keys.push(key);
            }
        }
        let path = dir.path().join(format!("s{case}"));
        let mut writer = Writer::create(&path, schema.clone(), WriterOptions::default()).unwrap();
        for key in &keys {
            writer.push(key, &[]).unwrap();
        }
        writer.finish().unwrap();
        let store = Store::open(&path).unwrap();
        store.verify().unwrap();
        let mut probes: Vec<String> = keys.clone();
        probes.extend((0..3000).map(|_| random_key(prefix)));
        probes.extend((0..500).map(|_| random_key("")));
        let refs: Vec<&[u8]> = probes.iter().map(|k| k.as_bytes()).collect();
        let batch = store.positions(&refs).unwrap();
        for (probe, got) in probes.iter().zip(batch) {
            let expected = seen.get(probe).copied();
            assert_eq!(got, expected, "{probe:?} in a batch");
            assert_eq!(
                store.position(probe.as_bytes()).unwrap(),
                expected,
                "{probe:?}"
            );
        }
    }
}

/// Format v2's promise: whatever single bit of the file is flipped, a lookup by id or by position,
/// one or many, returns the right document, the right position, the right absence, or an error;
/// never another document, another position, or "absent" for a key the store holds.
#[test]
fn every_flipped_bit_gives_the_right_answer_or_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let n = 40;
    // `doc`'s values under ASCII ids of three lengths: short ones (found by the key index alone),
    // and ones past the common prefix plus 8 bytes (compared with the keys section).
    let mut writer = Writer::create(
        &path,
        schema(),
        WriterOptions {
            dict_size: 512,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..n {
        let (_, text, label, tokens) = doc(i);
        let key = format!("doc-{:03}{}", (i * 37) % 100, "-tail".repeat(i % 3));
        let values = [
            Value::Str(&text),
            Value::Int64(label),
            Value::Array(ElemType::I32, &tokens),
        ];
        writer.push(&key, &values).unwrap();
    }
    writer.finish().unwrap();
    let good = std::fs::read(&path).unwrap();
    let docs: Vec<(String, Vec<u8>)> = {
        let store = Store::from_bytes(good.clone()).unwrap();
        assert!(store.checked());
        (0..n as u64)
            .map(|p| {
                let key = store.key_at(p).unwrap().to_owned();
                (key, store.record(p).unwrap().into_owned())
            })
            .collect()
    };
    // Keys just before, between and after the stored ones, with and without the common prefix.
    let absent: Vec<String> = docs
        .iter()
        .map(|(key, _)| format!("{key}x"))
        // A key one character short: what a damaged key offset can make a stored key read as.
        .chain(docs.iter().map(|(key, _)| {
            let mut short = key.clone();
            short.pop();
            short
        }))
        .chain(["doc-", "doc-00", "doc-0000", "doc-999-tail", "zzz", "a"].map(String::from))
        .filter(|key| docs.iter().all(|(k, _)| k != key))
        .collect();
    let keys: Vec<&[u8]> = docs.iter().map(|(k, _)| k.as_bytes()).collect();
    let absent_keys: Vec<&[u8]> = absent.iter().map(|k| k.as_bytes()).collect();
    let mut wrong = Vec::new();
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[i] ^= 1 << bit;
            let Ok(store) = Store::from_bytes(bad) else {
                continue;
            };
            let mut fail = |what: String| wrong.push(format!("byte {i} bit {bit}: {what}"));
            for (p, (key, raw)) in docs.iter().enumerate() {
                match store.get(key.as_bytes()) {
                    Ok(Some((pos, got))) if pos == p as u64 && got.as_ref() == raw => {}
                    Ok(other) => fail(format!("get({key}) = {other:?}")),
                    Err(_) => {}
                }
                match store.position(key.as_bytes()) {
                    Ok(Some(pos)) if pos == p as u64 => {}
                    Ok(other) => fail(format!("position({key}) = {other:?}")),
                    Err(_) => {}
                }
                let by_position = store.key_at(p as u64).and_then(|k| {
                    let k = k.to_owned();
                    store.record(p as u64).map(|r| (k, r.into_owned()))
                });
                match by_position {
                    Ok((k, got)) if got == *raw && &k == key => {}
                    Ok((k, _)) => fail(format!("record({p}) of {k}, not the stored one")),
                    Err(_) => {}
                }
            }
            match store.positions(&keys) {
                Ok(found) if found == (0..n as u64).map(Some).collect::<Vec<_>>() => {}
                Ok(found) => fail(format!("positions = {found:?}")),
                Err(_) => {}
            }
            let mut batch = RecordBatch::default();
            match store.read_many(&keys, &mut batch) {
                Ok(_) if batch.len() == n && (0..n).all(|j| batch.get(j) == docs[j].1) => {}
                Ok(_) => fail("read_many returned other records".into()),
                Err(_) => {}
            }
            for key in &absent_keys {
                match store.position(key) {
                    Ok(None) | Err(_) => {}
                    Ok(found) => fail(format!("absent {key:?} found at {found:?}")),
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong answers: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(20)]
    );
}

/// Stores written as format v1 (before the per-document checks) and v2 (before the blob
/// locations in the key index) still open and read.
#[test]
fn older_versions_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let written = |version: u32| {
        let path = dir.path().join(format!("v{version}"));
        build(
            &path,
            300,
            WriterOptions {
                format_version: version,
                ..Default::default()
            },
        );
        let store = Store::open(&path).unwrap();
        assert_eq!(store.header().version, version);
        assert_eq!(store.checked(), version >= 2);
        check_all(&store, 300);
        store.verify().unwrap();
        store
    };
    let (v1, v2, v3) = (written(1), written(2), written(3));
    let len = |store: &Store<_>, s: Section| store.header().section(s).len;
    // v2: four bytes of check per document, nothing else.
    assert_eq!(len(&v2, Section::Data) - len(&v1, Section::Data), 300 * 4);
    // v3: the same blobs, and 16 more bytes of key index entry per document (the location).
    assert_eq!(len(&v3, Section::Data), len(&v2, Section::Data));
    assert_eq!(len(&v3, Section::KeyIndex), 300 * 32);
    assert_eq!(len(&v2, Section::KeyIndex), 300 * 16);
    assert_eq!(
        len(&v3, Section::KeyFences),
        300usize.div_ceil(128) as u64 * 8
    );
    // Version 4 is written only for a schema that needs it: this one is written as 3.
    let v4 = dir.path().join("v4");
    build(
        &v4,
        300,
        WriterOptions {
            format_version: 4,
            ..Default::default()
        },
    );
    assert_eq!(Store::open(&v4).unwrap().header().version, 3);
    assert_eq!(
        std::fs::read(&v4).unwrap(),
        std::fs::read(dir.path().join("v3")).unwrap()
    );
    // Version 5 (metadata) is written only for a store given metadata: this one is written as 3.
    let v5 = dir.path().join("v5");
    build(
        &v5,
        300,
        WriterOptions {
            format_version: 5,
            ..Default::default()
        },
    );
    assert_eq!(
        std::fs::read(&v5).unwrap(),
        std::fs::read(dir.path().join("v3")).unwrap()
    );
    assert!(Writer::create(
        dir.path().join("v6"),
        schema(),
        WriterOptions {
            format_version: 6,
            ..Default::default()
        }
    )
    .is_err());
}

const METADATA: &str = r#"{"huggingface": {"features": {"label": {"names": ["neg", "pos"], "_type": "ClassLabel"}}}, "é": [1, 2.5, null]}"#;

fn with_metadata(metadata: &str) -> WriterOptions {
    WriterOptions {
        metadata: Some(metadata.into()),
        ..WriterOptions::default()
    }
}

#[test]
fn metadata_makes_a_version_5_store_and_none_leaves_it_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, with) = (dir.path().join("plain"), dir.path().join("with"));
    build(&plain, 300, WriterOptions::default());
    let summary = build(&with, 300, with_metadata(METADATA));
    let (a, b) = (
        std::fs::read(&plain).unwrap(),
        std::fs::read(&with).unwrap(),
    );
    assert_eq!(summary.file_bytes, b.len() as u64);
    let store = Store::open(&with).unwrap();
    assert_eq!(store.header().version, 5);
    assert_eq!(store.metadata(), Some(METADATA));
    store.verify().unwrap();
    check_all(&store, 300);
    let old = Store::open(&plain).unwrap();
    assert_eq!((old.header().version, old.metadata()), (3, None));
    // The section is the last, after zero padding; every byte before it is the same but the
    // header's version, section count, tenth table entry and checksum.
    let meta = store.header().section(Section::Metadata);
    assert_eq!(&b[meta.offset as usize..], METADATA.as_bytes());
    assert!(meta.offset - (a.len() as u64) < 8 && meta.offset % 8 == 0);
    assert_eq!(a[512..], b[512..a.len()]);
    assert!(b[a.len()..meta.offset as usize].iter().all(|&x| x == 0));
    assert_eq!(b[32], 10);
    // Given to a writer of an older version, or not one JSON object: refused, naming why.
    for (options, why) in [
        (
            WriterOptions {
                format_version: 4,
                ..with_metadata("{}")
            },
            "format version 5",
        ),
        (with_metadata("[1]"), "not a JSON object"),
        (with_metadata("{\"a\": 1, \"a\": 2}"), "repeated"),
        (with_metadata("{\"a\": "), "EOF"),
    ] {
        let path = dir.path().join("refused");
        let err = Writer::create(&path, schema(), options).err().unwrap();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains(why)),
            "{err}"
        );
        assert!(!path.exists());
    }
}

#[test]
fn a_damaged_metadata_section_is_refused_at_open_and_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    build(&path, 21, with_metadata(METADATA));
    let good = std::fs::read(&path).unwrap();
    let meta = Store::open(&path)
        .unwrap()
        .header()
        .section(Section::Metadata);
    let (start, end) = (meta.offset as usize, good.len());
    // Any flipped byte of the section: its checksum (open), or, checksums recomputed (a crafted
    // file), its JSON; a flip that leaves one JSON object is read as that.
    for i in start..end {
        for bit in [0x01, 0x20, 0x80] {
            let mut bad = good.clone();
            bad[i] ^= bit;
            let err = Store::from_bytes(bad.clone()).err().unwrap().to_string();
            assert!(err.contains("metadata checksum mismatch"), "{err}");
            docstore_core::format::reseal(&mut bad);
            match Store::from_bytes(bad.clone()) {
                Err(err) => assert!(err.to_string().contains("bad metadata"), "{i}: {err}"),
                Ok(store) => {
                    store.verify().unwrap();
                    let text = store.metadata().unwrap();
                    assert!(docstore_core::format::metadata::check(text.as_bytes()).is_ok());
                }
            }
        }
    }
    // Truncated, or a byte more: the section no longer ends the file.
    let err = Store::from_bytes(good[..end - 1].to_vec()).err().unwrap();
    assert!(
        err.to_string().contains("metadata section lies outside"),
        "{err}"
    );
    let mut longer = good.clone();
    longer.push(b' ');
    let err = Store::from_bytes(longer.clone())
        .unwrap()
        .verify()
        .unwrap_err();
    assert!(err.to_string().contains("trailing bytes"), "{err}");
    // Non-zero padding before it (21 documents: 84 bytes of ranks, ending off the alignment).
    let ranks = Store::open(&path)
        .unwrap()
        .header()
        .section(Section::KeyRanks);
    let padding = (ranks.offset + ranks.len) as usize..start;
    assert!(!padding.is_empty());
    let mut bad = good.clone();
    bad[padding.start] = 1;
    let err = Store::from_bytes(bad).unwrap().verify().unwrap_err();
    assert!(err.to_string().contains("padding"), "{err}");
    // Crafted contents, checksums recomputed: each refused with what is wrong.
    for (contents, why) in [
        (&b"[1, 2]"[..], "not a JSON object"),
        (b"{\"a\": 1, \"a\": 1}", "repeated"),
        (b"{\"a\": 1} x", "trailing"),
        (b"{\"a\": \"\xff\"}", "not UTF-8"),
        (b"", "EOF"),
    ] {
        let mut bad = good[..start].to_vec();
        bad.extend_from_slice(contents);
        let table = 64 + 9 * 24;
        bad[table + 8..table + 16].copy_from_slice(&(contents.len() as u64).to_le_bytes());
        docstore_core::format::reseal(&mut bad);
        let err = Store::from_bytes(bad).err().unwrap().to_string();
        assert!(
            err.contains("bad metadata") && err.contains(why),
            "{why}: {err}"
        );
    }
}

#[test]
fn a_collections_metadata_is_its_shards_and_differing_shards_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shard = |name: &str, metadata: Option<&str>, from: usize| {
        let path = dir.path().join(name);
        let options = WriterOptions {
            metadata: metadata.map(str::to_owned),
            ..WriterOptions::default()
        };
        let mut writer = Writer::create(&path, schema(), options).unwrap();
        for i in from..from + 10 {
            let (key, text, label, tokens) = doc(i);
            let values = [
                Value::Str(&text),
                Value::Int64(label),
                Value::Array(ElemType::I32, &tokens),
            ];
            writer.push(&key, &values).unwrap();
        }
        writer.finish().unwrap();
        path
    };
    let (a, b) = (
        shard("a", Some(METADATA), 0),
        shard("b", Some(METADATA), 10),
    );
    let target = dir.path().join("c");
    docstore_core::collection::seal(&target, &[a.clone(), b], false).unwrap();
    let collection = docstore_core::Collection::open(&target, DataAccess::Mmap).unwrap();
    assert_eq!(collection.metadata(), Some(METADATA));
    for (other, shown) in [
        (shard("x", Some("{}"), 20), "{}"),
        (shard("y", None, 30), "none"),
    ] {
        let err =
            docstore_core::collection::seal(&dir.path().join("d"), &[a.clone(), other], false)
                .unwrap_err()
                .to_string();
        assert!(err.contains("metadata") && err.contains(shown), "{err}");
        assert!(!dir.path().join("d").exists());
    }
}
