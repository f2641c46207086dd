//! `Reader._take_columns`: the doc ids and fields as flat buffers, the layout of
//! Arrow's `large_string` / `large_binary` / `large_list` / primitive arrays, so that the
//! engines' readers (`docstore._engine_read`) build Arrow blocks from them without a Python
//! object per document.

use crate::errors::{guard, IntoPy};
use docstore_core::record::{self, RawValue, Value};
use docstore_core::{planes, Collection, FieldType, RecordBatch, Result};
use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Records read at a time: bounds the raw records held beside the columns being built.
const CHUNK: usize = 1024;

/// One column being built: `offsets` (Arrow's, from 0; counting bytes for text, elements for
/// arrays; empty for fixed-width fields) and the values' little-endian bytes.
#[derive(Default)]
struct ColumnBuf {
    offsets: Vec<i64>,
    data: Vec<u8>,
}

impl ColumnBuf {
    fn new(ty: Option<FieldType>) -> Self {
        let variable = !matches!(ty, Some(FieldType::Int64 | FieldType::Float64));
        ColumnBuf {
            offsets: if variable { vec![0] } else { Vec::new() },
            data: Vec::new(),
        }
    }

    fn push(&mut self, value: RawValue<'_>) -> Result<()> {
        match value {
            RawValue::Utf8(bytes) => {
                // Arrow strings must be UTF-8: checked here, as Python's decoder checks `take`'s.
                std::str::from_utf8(bytes)
                    .map_err(|_| docstore_core::Error::Corrupt("str field is not UTF-8".into()))?;
                self.push_bytes(bytes, bytes.len());
            }
            RawValue::Other(Value::Str(text)) => self.push_bytes(text.as_bytes(), text.len()),
            RawValue::Other(Value::Bytes(bytes)) => self.push_bytes(bytes, bytes.len()),
            RawValue::Other(Value::Int64(v)) => self.data.extend_from_slice(&v.to_le_bytes()),
            RawValue::Other(Value::Float64(v)) => self.data.extend_from_slice(&v.to_le_bytes()),
            RawValue::Other(Value::Array(elem, bytes)) => {
                self.push_bytes(bytes, bytes.len() / elem.size())
            }
            RawValue::Other(Value::Planes(elem, bytes)) => {
                let start = self.data.len();
                self.data.resize(start + bytes.len(), 0);
                planes::join(bytes, elem.size(), &mut self.data[start..]);
                self.next_offset(bytes.len() / elem.size());
            }
        }
        Ok(())
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

/// The ids and the fields `indices` of `positions` (in range) of `store`, in that order.
fn read_columns(
    store: &Collection,
    positions: &[u64],
    indices: &[usize],
) -> Result<(ColumnBuf, Vec<ColumnBuf>)> {
    let schema = store.schema();
    let mut ids = ColumnBuf::new(None);
    let mut columns: Vec<ColumnBuf> = (indices.iter())
        .map(|&i| ColumnBuf::new(Some(schema.fields[i].ty)))
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
    let offsets: Bound<'py, PyAny> = if column.offsets.is_empty() {
        py.None().into_bound(py)
    } else {
        column.offsets.into_pyarray(py).into_any()
    };
    let data: Bound<'py, PyArray1<u8>> = column.data.into_pyarray(py);
    PyTuple::new(py, [offsets, data.into_any()])
}

/// `(ids, [columns])`, each `(offsets or None, data)` as numpy arrays (int64 offsets, uint8
/// data), for the fields `indices` of `positions`; read with Python released.
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
