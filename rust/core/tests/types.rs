//! The field types of version 4 (nullable fields, `bool`, `list[str]`, `list[bytes]`,
//! `float16[]`, `bfloat16[]`): they round-trip, columns encode them byte for byte as rows do,
//! a store holding them is version 4 (which older readers refuse by its version), and a
//! version 3 store claiming them is corrupt.

use docstore_core::format;
use docstore_core::format::record::{self, Value};
use docstore_core::{
    Column, Columns, ElemType, Error, Field, FieldType, Schema, Store, Writer, WriterOptions,
};

fn nullable(name: &str, ty: FieldType) -> Field {
    Field {
        nullable: true,
        ..Field::new(name, ty)
    }
}

fn schema() -> Schema {
    Schema::new(vec![
        nullable("title", FieldType::Str),
        Field::new("flag", FieldType::Bool),
        Field::new("tags", FieldType::StrList),
        nullable("parts", FieldType::BytesList),
        Field::new("half", FieldType::Array(ElemType::F16)),
        nullable("brain", FieldType::Array(ElemType::BF16)),
        nullable("n", FieldType::Int64),
    ])
    .unwrap()
}

/// Row `i`: every third has nulls where it may.
struct Row {
    title: Option<String>,
    flag: bool,
    tags: Vec<String>,
    parts: Option<Vec<Vec<u8>>>,
    half: Vec<u8>,
    brain: Option<Vec<u8>>,
    n: Option<i64>,
}

fn row(i: usize) -> Row {
    let null = i % 3 == 1;
    Row {
        title: (!null).then(|| format!("title {i} é")),
        flag: i.is_multiple_of(2),
        tags: (0..i % 4).map(|j| format!("tag{j}")).collect(),
        parts: (!null).then(|| (0..i % 3).map(|j| vec![j as u8; j]).collect()),
        half: (0..i % 5)
            .flat_map(|j| (0x3c00u16 + j as u16).to_le_bytes())
            .collect(),
        brain: (!null).then(|| {
            (0..i % 3)
                .flat_map(|j| (0x3f80u16 + j as u16).to_le_bytes())
                .collect()
        }),
        n: (!null).then_some(i as i64 - 50),
    }
}

fn list(items: &[impl AsRef<[u8]>]) -> Vec<u8> {
    let mut out = Vec::new();
    record::put_list(&mut out, items.len(), items.iter().map(AsRef::as_ref));
    out
}

fn values<'a>(r: &'a Row, tags: &'a [u8], parts: &'a Option<Vec<u8>>) -> Vec<Value<'a>> {
    vec![
        r.title.as_deref().map_or(Value::Null, Value::Str),
        Value::Bool(r.flag),
        Value::List {
            utf8: true,
            raw: tags,
        },
        parts
            .as_deref()
            .map_or(Value::Null, |raw| Value::List { utf8: false, raw }),
        Value::Array(ElemType::F16, &r.half),
        r.brain
            .as_deref()
            .map_or(Value::Null, |b| Value::Array(ElemType::BF16, b)),
        r.n.map_or(Value::Null, Value::Int64),
    ]
}

fn options() -> WriterOptions {
    WriterOptions {
        batch_bytes: 64,
        dict_size: 0,
        ..Default::default()
    }
}

#[test]
fn version_4_types_round_trip_and_columns_write_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let n = 60;
    let rows: Vec<Row> = (0..n).map(row).collect();
    let keys: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();

    let by_rows = dir.path().join("rows");
    let mut writer = Writer::create(&by_rows, schema(), options()).unwrap();
    for (key, r) in keys.iter().zip(&rows) {
        let tags = list(&r.tags);
        let parts = r.parts.as_ref().map(|p| list(p));
        writer.push(key, &values(r, &tags, &parts)).unwrap();
    }
    writer.finish().unwrap();

    let store = Store::open(&by_rows).unwrap();
    assert_eq!(store.header().version, 4);
    assert_eq!(store.schema(), &schema());
    for (i, r) in rows.iter().enumerate() {
        let (_, raw) = store.get(keys[i].as_bytes()).unwrap().unwrap();
        let tags = list(&r.tags);
        let parts = r.parts.as_ref().map(|p| list(p));
        assert_eq!(
            record::decode(&schema(), &raw).unwrap(),
            values(r, &tags, &parts)
        );
        for cut in 0..raw.len() {
            assert!(record::decode(&schema(), &raw[..cut]).is_err());
        }
    }

    // The same rows as Arrow-like columns, nulls in validity arrays.
    let text = |items: &mut dyn Iterator<Item = Vec<u8>>| {
        let (mut offsets, mut data) = (vec![0i64], Vec::new());
        for item in items {
            data.extend_from_slice(&item);
            offsets.push(data.len() as i64);
        }
        (offsets, data)
    };
    let flat = |items: &mut dyn Iterator<Item = Vec<u8>>, size: i64| {
        let (mut offsets, mut data) = (vec![0i64], Vec::new());
        for item in items {
            data.extend_from_slice(&item);
            offsets.push(data.len() as i64 / size);
        }
        (offsets, data)
    };
    let lists = |rows: &mut dyn Iterator<Item = Vec<Vec<u8>>>| {
        let (mut offsets, mut items) = (vec![0i64], Vec::new());
        for row in rows {
            items.extend(row);
            offsets.push(items.len() as i64);
        }
        let (item_offsets, data) = text(&mut items.into_iter());
        (offsets, item_offsets, data)
    };
    let valid = |f: &dyn Fn(&Row) -> bool| rows.iter().map(|r| u8::from(f(r))).collect::<Vec<u8>>();
    let ids = text(&mut keys.iter().map(|k| k.clone().into_bytes()));
    let titles = text(
        &mut rows
            .iter()
            .map(|r| r.title.clone().unwrap_or_default().into_bytes()),
    );
    let flags: Vec<u8> = rows.iter().map(|r| u8::from(r.flag)).collect();
    let tags = lists(
        &mut rows
            .iter()
            .map(|r| r.tags.iter().map(|t| t.clone().into_bytes()).collect()),
    );
    let parts = lists(&mut rows.iter().map(|r| r.parts.clone().unwrap_or_default()));
    let halves = flat(&mut rows.iter().map(|r| r.half.clone()), 2);
    let brains = flat(
        &mut rows.iter().map(|r| r.brain.clone().unwrap_or_default()),
        2,
    );
    let ns: Vec<i64> = rows.iter().map(|r| r.n.unwrap_or(0)).collect();
    let columns = vec![
        Column::Text {
            offsets: &titles.0,
            data: &titles.1,
        },
        Column::Bool(&flags),
        Column::List {
            offsets: &tags.0,
            item_offsets: &tags.1,
            data: &tags.2,
        },
        Column::List {
            offsets: &parts.0,
            item_offsets: &parts.1,
            data: &parts.2,
        },
        Column::Array {
            elem: ElemType::F16,
            offsets: &halves.0,
            values: &halves.1,
        },
        Column::Array {
            elem: ElemType::BF16,
            offsets: &brains.0,
            values: &brains.1,
        },
        Column::Int64(&ns),
    ];
    let (title_valid, parts_valid, brain_valid, n_valid) = (
        valid(&|r| r.title.is_some()),
        valid(&|r| r.parts.is_some()),
        valid(&|r| r.brain.is_some()),
        valid(&|r| r.n.is_some()),
    );
    let validity = vec![
        Some(&title_valid[..]),
        None,
        None,
        Some(&parts_valid[..]),
        None,
        Some(&brain_valid[..]),
        Some(&n_valid[..]),
    ];
    let ids_column = Column::Text {
        offsets: &ids.0,
        data: &ids.1,
    };
    let batch =
        Columns::with_nulls(&schema(), ids_column, columns.clone(), validity.clone()).unwrap();
    let by_columns = dir.path().join("columns");
    let mut writer = Writer::create(&by_columns, schema(), options()).unwrap();
    let mut from = 0;
    while from < batch.len() {
        from = writer.add_columns(&batch, from).unwrap();
        writer.flush().unwrap();
    }
    writer.finish().unwrap();
    assert_eq!(
        std::fs::read(&by_rows).unwrap(),
        std::fs::read(&by_columns).unwrap()
    );

    // A null in a field that is not nullable, and a bool byte that is not 0 or 1, are refused
    // naming the field and the document.
    let mut no_flags = validity.clone();
    no_flags[1] = Some(&title_valid[..]);
    let err = Columns::with_nulls(&schema(), ids_column, columns.clone(), no_flags)
        .err()
        .unwrap();
    assert!(matches!(err, Error::FieldType(_)), "{err}");
    assert!(
        err.to_string()
            .contains("doc \"d1\": field \"flag\" is bool, got None"),
        "{err}"
    );
    let mut bad = columns.clone();
    let two: Vec<u8> = flags.iter().map(|f| f * 2).collect();
    bad[1] = Column::Bool(&two);
    let err = Columns::with_nulls(&schema(), ids_column, bad, validity.clone())
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("doc \"d0\": field \"flag\" is bool, got the byte 2"),
        "{err}"
    );
}

#[test]
fn nulls_and_lists_are_checked_when_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = Writer::create(dir.path().join("s"), schema(), options()).unwrap();
    let r = row(0);
    let tags = list(&r.tags);
    let parts = r.parts.as_ref().map(|p| list(p));
    let mut bad = values(&r, &tags, &parts);
    bad[1] = Value::Null;
    let err = writer.add("k", &bad).unwrap_err();
    assert!(
        err.to_string()
            .contains("doc \"k\": field \"flag\" is bool, got None"),
        "{err}"
    );
    let not_utf8 = list(&[b"\xff".as_slice()]);
    let mut bad = values(&r, &tags, &parts);
    bad[2] = Value::List {
        utf8: true,
        raw: &not_utf8,
    };
    let err = writer.add("k", &bad).unwrap_err();
    assert!(
        err.to_string()
            .contains("item 0 of its list is not valid UTF-8"),
        "{err}"
    );
    assert_eq!(writer.len(), 0);
}

#[test]
fn version_4_types_are_refused_where_the_version_cannot_hold_them() {
    let dir = tempfile::tempdir().unwrap();
    // A writer held to version 3 refuses them by name.
    let err = Writer::create(
        dir.path().join("v3"),
        schema(),
        WriterOptions {
            format_version: 3,
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("field \"title\" is str?"), "{err}");

    // A version 3 store whose schema claims a version 4 type is corrupt, not misread.
    let path = dir.path().join("s");
    let one = Schema::new(vec![Field::new("flag", FieldType::Bool)]).unwrap();
    let mut writer = Writer::create(&path, one, WriterOptions::default()).unwrap();
    writer.push("a", &[Value::Bool(true)]).unwrap();
    writer.finish().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[8], 4);
    bytes[8] = 3;
    format::reseal(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path).err().unwrap();
    assert!(matches!(err, Error::Corrupt(_)), "{err}");
    assert!(err
        .to_string()
        .contains("version 3 store with a field of a type version 4 added"));
}

#[test]
fn fixed_shape_arrays_store_no_count_and_check_their_element_count() {
    use docstore_core::Shape;
    let shape = Shape::new(&[2, 3]).unwrap();
    let ty: FieldType = "float32[2,3]".parse().unwrap();
    assert_eq!(ty, FieldType::Tensor(ElemType::F32, shape));
    assert_eq!(ty.to_string(), "float32[2,3]");
    assert!("float32[2,0]".parse::<FieldType>().is_err());
    assert!("float32[1,1,1,1,1,1,1,1,1]".parse::<FieldType>().is_err());
    let schema = Schema::new(vec![Field::new("m", ty)]).unwrap();
    let mut encoded = Vec::new();
    schema.encode(&mut encoded);
    // code 24 | 0x40, name, then ndim and the dimensions as u32
    assert_eq!(
        encoded,
        b"\x01\x00\x58\x01\x00m\x02\x02\x00\x00\x00\x03\x00\x00\x00"
    );
    assert_eq!(Schema::decode(&encoded).unwrap(), schema);
    let elements: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut raw = Vec::new();
    record::encode(&schema, &[Value::Array(ElemType::F32, &elements)], &mut raw).unwrap();
    assert_eq!(raw.len(), 24); // the planes alone: the shape gives the count
    let decoded = record::decode(&schema, &raw).unwrap();
    assert!(matches!(decoded[0], Value::Tensor(ElemType::F32, s, _) if s == shape));
    assert_eq!(decoded[0], Value::Array(ElemType::F32, &elements));
    let err = record::encode(
        &schema,
        &[Value::Array(ElemType::F32, &elements[..20])],
        &mut raw,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("got 5 elements (its shape holds 6)"),
        "{err}"
    );
    // Columns: a row of another element count is refused naming the document.
    let ids = (vec![0i64, 1, 2], b"ab".to_vec());
    let offsets = [0i64, 6, 11];
    let values: Vec<u8> = (0..11).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let column = Column::Array {
        elem: ElemType::F32,
        offsets: &offsets,
        values: &values,
    };
    let ids = Column::Text {
        offsets: &ids.0,
        data: &ids.1,
    };
    let err = Columns::new(&schema, ids, vec![column]).err().unwrap();
    assert!(
        err.to_string()
            .contains("doc \"b\": field \"m\" is float32[2,3], got 5 elements"),
        "{err}"
    );
}
