//! `Reader._take_columns`: the doc ids and fields as flat buffers, the layout of
//! Arrow's `large_string` / `large_binary` / `large_list` / primitive arrays, so that the
//! engines' readers (`docstore._engine_read`) build Arrow blocks from them without a Python
//! object per document.

use crate::errors::{guard, IntoPy};
use docstore_core::record::{self, RawValue, Value};
use docstore_core::{planes, Collection, Field, FieldType, RecordBatch, Result};
use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Records read at a time: bounds the raw records held beside the columns being built.
const CHUNK: usize = 1024;

/// One column being built: `offsets` (Arrow's, from 0; counting bytes for text, elements for
/// arrays, items for lists; empty for fixed-width fields) and the values' little-endian bytes;
/// for a list field, `items` (each item's byte offsets into `data`); for a nullable field,
/// `valid` (one byte a row: 0 where the document holds no value).
#[derive(Default)]
struct ColumnBuf {
    offsets: Vec<i64>,
    data: Vec<u8>,
    items: Option<Vec<i64>>,
    valid: Option<Vec<u8>>,
    /// Bytes of one value of a fixed-width field (what a null row holds: zeros).
    width: usize,
}

impl ColumnBuf {
    fn new(field: Option<&Field>) -> Self {
        let ty = field.map(|f| f.ty);
        let width = match ty {
            Some(FieldType::Int64 | FieldType::Float64) => 8,
            Some(FieldType::Bool) => 1,
            Some(FieldType::Tensor(elem, shape)) => elem.size() * shape.elements(),
            _ => 0,
        };
        let lists = matches!(ty, Some(FieldType::StrList | FieldType::BytesList));
        ColumnBuf {
            offsets: if width == 0 { vec![0] } else { Vec::new() },
            data: Vec::new(),
            items: lists.then(|| vec![0]),
            valid: field.filter(|f| f.nullable).map(|_| Vec::new()),
            width,
        }
    }

    fn push(&mut self, value: RawValue<'_>) -> Result<()> {
        if let Some(valid) = &mut self.valid {
            valid.push(u8::from(value != RawValue::Other(Value::Null)));
        }
        match value {
            RawValue::Utf8(bytes) => {
                // Arrow strings must be UTF-8: checked here, as Python's decoder checks `take`'s.
                check_utf8(bytes)?;
                self.push_bytes(bytes, bytes.len());
            }
            RawValue::Other(Value::Str(text)) => self.push_bytes(text.as_bytes(), text.len()),
            RawValue::Other(Value::Bytes(bytes)) => self.push_bytes(bytes, bytes.len()),
            RawValue::Other(Value::Int64(v)) => self.data.extend_from_slice(&v.to_le_bytes()),
            RawValue::Other(Value::Float64(v)) => self.data.extend_from_slice(&v.to_le_bytes()),
            RawValue::Other(Value::Bool(v)) => self.data.push(u8::from(v)),
            RawValue::Other(Value::Array(elem, bytes)) => {
                self.push_bytes(bytes, bytes.len() / elem.size())
            }
            RawValue::Other(Value::Planes(elem, bytes)) => {
                self.push_planes(elem.size(), bytes);
                self.next_offset(bytes.len() / elem.size());
            }
            // Fixed width: no offsets, the shape is the field's.
            RawValue::Other(Value::Tensor(elem, _, bytes)) => self.push_planes(elem.size(), bytes),
            RawValue::Other(Value::List { utf8, raw }) => {
                let mut count = 0;
                for item in record::list_items(raw) {
                    let item = item?;
                    if utf8 {
                        check_utf8(item)?;
                    }
                    self.data.extend_from_slice(item);
                    let end = self.data.len() as i64;
                    self.items.get_or_insert_with(|| vec![0]).push(end);
                    count += 1;
                }
                self.next_offset(count);
            }
            RawValue::Other(Value::Null) => {
                if self.width == 0 {
                    self.next_offset(0);
                } else {
                    self.data.resize(self.data.len() + self.width, 0);
                }
            }
            // Only columns being written hold items; a read never gives them.
            RawValue::Other(Value::Items { .. }) => {
                return Err(docstore_core::Error::Corrupt(
                    "a record gave a column's items".into(),
                ))
            }
        }
        Ok(())
    }

    fn push_planes(&mut self, size: usize, bytes: &[u8]) {
        let start = self.data.len();
        self.data.resize(start + bytes.len(), 0);
        planes::join(bytes, size, &mut self.data[start..]);
    }

    fn push_bytes(&mut self, bytes: &[u8], units: usize) {
        self.data.extend_from_slice(bytes);
        self.next_offset(units);
    }

    fn next_offset(&mut self, units: usize) {
        let last = *self.offsets.last().unwrap_or(&0);
        self.offsets.push(last + units as i64);
    }
}

fn check_utf8(bytes: &[u8]) -> Result<()> {
    std::str::from_utf8(bytes)
        .map(|_| ())
        .map_err(|_| docstore_core::Error::Corrupt("str field is not UTF-8".into()))
}

/// The ids and the fields `indices` of `positions` (in range) of `store`, in that order.
fn read_columns(
    store: &Collection,
    positions: &[u64],
    indices: &[usize],
) -> Result<(ColumnBuf, Vec<ColumnBuf>)> {
    let schema = store.schema();
    let mut ids = ColumnBuf::new(None);
    let mut columns: Vec<ColumnBuf> = (indices.iter())
        .map(|&i| ColumnBuf::new(Some(&schema.fields[i])))
        .collect();
    store.prefetch_records(positions)?; // a remote store: fetched at once, then read in chunks
    let mut batch = RecordBatch::default();
    for chunk in positions.chunks(CHUNK) {
        batch.clear();
        store.read_prefetched(chunk, &mut batch)?;
        let mut values = Vec::with_capacity(schema.fields.len());
        for (i, &pos) in chunk.iter().enumerate() {
            values.clear();
            for value in record::raw_fields(schema, batch.get(i)) {
                values.push(value?);
            }
            for (column, &index) in columns.iter_mut().zip(indices) {
                column.push(values[index])?;
            }
            // The key of a record just read and checked with it (as `take` gives `doc_id`).
            let key = store.key_at_after_read(pos)?;
            ids.push_bytes(key.as_bytes(), key.len());
        }
    }
    Ok((ids, columns))
}

fn to_python<'py>(py: Python<'py>, column: ColumnBuf) -> PyResult<Bound<'py, PyTuple>> {
    let or_none = |v: Option<Bound<'py, PyAny>>| v.unwrap_or_else(|| py.None().into_bound(py));
    let offsets =
        or_none((!column.offsets.is_empty()).then(|| column.offsets.into_pyarray(py).into_any()));
    let data: Bound<'py, PyArray1<u8>> = column.data.into_pyarray(py);
    let items = or_none(column.items.map(|v| v.into_pyarray(py).into_any()));
    let valid = or_none(column.valid.map(|v| v.into_pyarray(py).into_any()));
    PyTuple::new(py, [offsets, data.into_any(), items, valid])
}

/// `(ids, [columns])`, each `(offsets, data, items, valid)` as numpy arrays (int64 offsets and
/// list items' byte offsets, uint8 data and validity; `None` where a field has none), for the fields `indices` of `positions`; read with Python released.
pub(crate) fn take_columns<'py>(
    py: Python<'py>,
    store: &Collection,
    positions: &[u64],
    indices: &[usize],
) -> PyResult<Bound<'py, PyTuple>> {
    guard(py, || {
        let (ids, columns) = py
            .detach(|| read_columns(store, positions, indices))
            .py_err(py)?;
        let ids = to_python(py, ids)?;
        let columns = (columns.into_iter())
            .map(|c| to_python(py, c))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(
            py,
            [
                ids.into_any(),
                pyo3::types::PyList::new(py, columns)?.into_any(),
            ],
        )
    })
}
