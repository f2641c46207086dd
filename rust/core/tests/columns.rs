//! Documents added as columns (`Columns`, `Writer::add_columns`): the same store, byte for
//! byte, as the same documents added one by one, and every malformed batch refused whole.

use docstore_core::{
    Column, Columns, ElemType, Error, Field, FieldType, Schema, Value, Writer, WriterOptions,
};

fn schema() -> Schema {
    let field = |name: &str, ty| Field::new(name, ty);
    Schema::new(vec![
        field("text", FieldType::Str),
        field("raw", FieldType::Bytes),
        field("n", FieldType::Int64),
        field("x", FieldType::Float64),
        field("v", FieldType::Array(ElemType::F32)),
    ])
    .unwrap()
}

/// Text laid out as Arrow lays it out: (offsets, data).
fn text(items: &[&str]) -> (Vec<i64>, Vec<u8>) {
    let mut offsets = vec![0];
    let mut data = Vec::new();
    for item in items {
        data.extend_from_slice(item.as_bytes());
        offsets.push(data.len() as i64);
    }
    (offsets, data)
}

fn options() -> WriterOptions {
    WriterOptions {
        batch_bytes: 64, // several flushes, so that `add_columns` stops and goes on
        dict_size: 0,
        ..Default::default()
    }
}

#[test]
fn columns_make_the_store_rows_make() {
    let dir = tempfile::tempdir().unwrap();
    let n = 200;
    let keys: Vec<String> = (0..n).map(|i| format!("doc-{i}-é")).collect();
    let texts: Vec<String> = (0..n).map(|i| "word ".repeat(i % 7)).collect();
    let raws: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; i % 5]).collect();
    let ns: Vec<i64> = (0..n).map(|i| (i as i64 - 100) << 40).collect();
    let xs: Vec<f64> = (0..n).map(|i| i as f64 / 3.0).collect();
    let vs: Vec<Vec<f32>> = (0..n)
        .map(|i| (0..i % 4).map(|j| j as f32).collect())
        .collect();
    let elements = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();

    let rows = dir.path().join("rows");
    let mut writer = Writer::create(&rows, schema(), options()).unwrap();
    for i in 0..n {
        let v = elements(&vs[i]);
        let values = [
            Value::Str(&texts[i]),
            Value::Bytes(&raws[i]),
            Value::Int64(ns[i]),
            Value::Float64(xs[i]),
            Value::Array(ElemType::F32, &v),
        ];
        writer.push(&keys[i], &values).unwrap();
    }
    writer.finish().unwrap();

    let (id_offsets, id_data) = text(&keys.iter().map(String::as_str).collect::<Vec<_>>());
    let (text_offsets, text_data) = text(&texts.iter().map(String::as_str).collect::<Vec<_>>());
    let raw_data: Vec<u8> = raws.concat();
    let mut raw_offsets = vec![0];
    raw_offsets.extend(raws.iter().scan(0, |end, r| {
        *end += r.len() as i64;
        Some(*end)
    }));
    let v_data = elements(&vs.concat());
    let mut v_offsets = vec![0];
    v_offsets.extend(vs.iter().scan(0, |end, v| {
        *end += v.len() as i64;
        Some(*end)
    }));
    let columns = dir.path().join("columns");
    let mut writer = Writer::create(&columns, schema(), options()).unwrap();
    // Two batches, the second a slice of Arrow-style buffers whose offsets do not start at 0.
    for range in [0..50, 50..n] {
        let batch = Columns::new(
            &schema(),
            Column::Text {
                offsets: &id_offsets[range.start..=range.end],
                data: &id_data,
            },
            vec![
                Column::Text {
                    offsets: &text_offsets[range.start..=range.end],
                    data: &text_data,
                },
                Column::Text {
                    offsets: &raw_offsets[range.start..=range.end],
                    data: &raw_data,
                },
                Column::Int64(&ns[range.clone()]),
                Column::Float64(&xs[range.clone()]),
                Column::Array {
                    elem: ElemType::F32,
                    offsets: &v_offsets[range.start..=range.end],
                    values: &v_data,
                },
            ],
        )
        .unwrap();
        let mut row = 0;
        while row < batch.len() {
            row = writer.add_columns(&batch, row).unwrap();
            if writer.needs_flush() {
                writer.flush().unwrap();
            }
        }
    }
    writer.finish().unwrap();
    assert_eq!(
        std::fs::read(&rows).unwrap(),
        std::fs::read(&columns).unwrap()
    );
}

fn one_field(ty: FieldType) -> Schema {
    Schema::new(vec![Field::new("f", ty)]).unwrap()
}

fn refused(schema: &Schema, ids: &[&str], column: Column<'_>) -> String {
    let (offsets, data) = text(ids);
    let ids = Column::Text {
        offsets: &offsets,
        data: &data,
    };
    match Columns::new(schema, ids, vec![column]) {
        Ok(_) => panic!("accepted"),
        Err(err) => format!("{err:?}"),
    }
}

#[test]
fn malformed_columns_are_refused_whole() {
    let ints = one_field(FieldType::Int64);
    let arrays = one_field(FieldType::Array(ElemType::F64));
    let strs = one_field(FieldType::Str);
    let two = [1i64, 2];
    let eight = [0u8; 8];
    let array = |offsets| Column::Array {
        elem: ElemType::F64,
        offsets,
        values: &eight,
    };
    let cases: Vec<(&Schema, &[&str], Column<'_>, &str)> = vec![
        (
            &ints,
            &["a", "b"],
            Column::Float64(&[1.0, 2.0]),
            "is int64, given a float64 column",
        ),
        (
            &ints,
            &["a", "b", "c"],
            Column::Int64(&two),
            "columns have 2 values for 3 doc ids",
        ),
        (
            &arrays,
            &["a"],
            array(&[0, 2]),
            "offsets must be non-decreasing and within the data",
        ),
        (&arrays, &["a"], array(&[]), "non-decreasing"),
        (&arrays, &["a"], array(&[-1, 0]), "non-decreasing"),
        (&arrays, &["a", "b"], array(&[1, 0, 1]), "non-decreasing"),
        (&arrays, &["a"], array(&[0, i64::MAX]), "within the data"),
        (
            &arrays,
            &["a"],
            Column::Array {
                elem: ElemType::F32,
                offsets: &[0, 1],
                values: &eight,
            },
            "is float64[], given a float32[] column",
        ),
        (
            &strs,
            &["a", "b"],
            Column::Text {
                offsets: &[0, 1, 2],
                data: b"x\xff",
            },
            "Schema(\"f of row 1 is not valid UTF-8\")",
        ),
        (
            &ints,
            &["a", "", "a"],
            Column::Int64(&[1, 2, 3]),
            "InvalidKey(\"the doc id of row 1 is empty\")",
        ),
        (
            &ints,
            &["a", "a", ""],
            Column::Int64(&[1, 2, 3]),
            "DuplicateKey(\"a\")",
        ),
    ];
    for (schema, ids, column, message) in cases {
        let got = refused(schema, ids, column);
        assert!(got.contains(message), "{got:?} lacks {message:?}");
    }
    let err = Columns::new(&ints, Column::Int64(&two), vec![Column::Int64(&two)]);
    assert!(matches!(err, Err(Error::Schema(m)) if m.contains("doc ids must be a text column")));
    let (offsets, data) = text(&["a", "b"]);
    let ids = Column::Text {
        offsets: &offsets,
        data: &data,
    };
    assert!(Columns::new(&ints, ids, vec![]).is_err());
    let batch = Columns::new(&ints, ids, vec![Column::Int64(&two)]).unwrap();
    assert_eq!((batch.len(), batch.key(1), batch.width()), (2, "b", 1));
}
