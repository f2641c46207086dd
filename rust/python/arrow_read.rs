//! `Reader._take_columns`: the doc ids and fields as flat buffers, the layout of
//! Arrow's `large_string` / `large_binary` / `large_list` / primitive arrays, so that the
//! engines' readers (`docstore._engine_read`) build Arrow blocks from them without a Python
//! object per document.
//!
//! Every buffer sized by the documents grows fallibly (`try_reserve`) and becomes a numpy array
//! without a copy and without a panic (`into_array`): a batch too large for the memory at hand
//! raises `MemoryError`, as `store[id]` does, where an infallible allocation aborted the process.

use crate::errors::{guard, IntoPy};
use docstore_core::error::try_reserve;
use docstore_core::format::planes;
use docstore_core::format::record::{self, RawValue, Value};
use docstore_core::{Collection, Field, FieldType, RecordBatch, Result};
use numpy::npyffi::{self, NpyTypes, PY_ARRAY_API};
use numpy::{Element, PyArrayDescrMethods};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

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
            try_reserve(valid, 1)?;
            valid.push(u8::from(value != RawValue::Other(Value::Null)));
        }
        match value {
            RawValue::Utf8(bytes) => {
                // Arrow strings must be UTF-8: checked here, as Python's decoder checks `take`'s.
                check_utf8(bytes)?;
                self.push_bytes(bytes, bytes.len())?;
            }
            RawValue::Other(Value::Str(text)) => self.push_bytes(text.as_bytes(), text.len())?,
            RawValue::Other(Value::Bytes(bytes)) => self.push_bytes(bytes, bytes.len())?,
            RawValue::Other(Value::Int64(v)) => self.extend(&v.to_le_bytes())?,
            RawValue::Other(Value::Float64(v)) => self.extend(&v.to_le_bytes())?,
            RawValue::Other(Value::Bool(v)) => self.extend(&[u8::from(v)])?,
            RawValue::Other(Value::Array(elem, bytes)) => {
                self.push_bytes(bytes, bytes.len() / elem.size())?
            }
            RawValue::Other(Value::Planes(elem, bytes)) => {
                self.push_planes(elem.size(), bytes)?;
                self.next_offset(bytes.len() / elem.size())?;
            }
            // Fixed width: no offsets, the shape is the field's.
            RawValue::Other(Value::Tensor(elem, _, bytes)) => {
                self.push_planes(elem.size(), bytes)?
            }
            RawValue::Other(Value::List { utf8, raw }) => {
                let items = self.items.get_or_insert_with(|| vec![0]);
                let mut count = 0;
                for item in record::list_items(raw) {
                    let item = item?;
                    if utf8 {
                        check_utf8(item)?;
                    }
                    try_reserve(&mut self.data, item.len())?;
                    self.data.extend_from_slice(item);
                    // Amortised: a list of 60M empty items is 480 MB of item offsets.
                    try_reserve(items, 1)?;
                    items.push(self.data.len() as i64);
                    count += 1;
                }
                self.next_offset(count)?;
            }
            RawValue::Other(Value::Null) => {
                if self.width == 0 {
                    self.next_offset(0)?;
                } else {
                    try_reserve(&mut self.data, self.width)?;
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

    fn push_planes(&mut self, size: usize, bytes: &[u8]) -> Result<()> {
        let start = self.data.len();
        try_reserve(&mut self.data, bytes.len())?;
        self.data.resize(start + bytes.len(), 0);
        planes::join(bytes, size, &mut self.data[start..]);
        Ok(())
    }

    fn extend(&mut self, bytes: &[u8]) -> Result<()> {
        try_reserve(&mut self.data, bytes.len())?;
        self.data.extend_from_slice(bytes);
        Ok(())
    }

    fn push_bytes(&mut self, bytes: &[u8], units: usize) -> Result<()> {
        self.extend(bytes)?;
        self.next_offset(units)
    }

    fn next_offset(&mut self, units: usize) -> Result<()> {
        let last = *self.offsets.last().unwrap_or(&0);
        try_reserve(&mut self.offsets, 1)?;
        self.offsets.push(last + units as i64);
        Ok(())
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
            ids.push_bytes(key.as_bytes(), key.len())?;
        }
    }
    Ok((ids, columns))
}

/// A 1-D numpy array over `values`, which it then owns (no copy), or the Python error of making
/// it (`MemoryError`): numpy's `into_pyarray` panics on a failure instead.
fn into_array<T: Element + Send + 'static>(
    py: Python<'_>,
    values: Vec<T>,
) -> PyResult<Bound<'_, PyAny>> {
    let mut dims = [values.len() as npyffi::npy_intp];
    let data = values.as_ptr();
    // Moving the vector into the capsule moves its header, not its buffer: `data` stays valid
    // for as long as the capsule lives.
    let owner = PyCapsule::new_with_value(py, values, c"docstore.arrow_read.buffer")?;
    // SAFETY: a 1-D array of `dims[0]` elements of `T`'s dtype over `data`, which holds that
    // many initialised `T`s, C-contiguous (null strides), as numpy's `from_raw_parts` makes it;
    // a null result comes with the exception set (`from_owned_ptr_or_err`), and then `owner`
    // drops the vector. `PyArray_SetBaseObject` takes the reference `into_ptr` gives it, even
    // when it fails (-1, exception set), and from then on the array keeps `data` alive.
    unsafe {
        let ptr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, NpyTypes::PyArray_Type),
            T::get_dtype(py).into_dtype_ptr(),
            1,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data as *mut std::ffi::c_void,
            npyffi::NPY_ARRAY_WRITEABLE,
            std::ptr::null_mut(),
        );
        let array = Bound::from_owned_ptr_or_err(py, ptr)?;
        let base = PY_ARRAY_API.PyArray_SetBaseObject(py, ptr.cast(), owner.into_ptr());
        if base != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}

fn to_python<'py>(py: Python<'py>, column: ColumnBuf) -> PyResult<Bound<'py, PyTuple>> {
    let none = || py.None().into_bound(py);
    let offsets = match column.offsets.is_empty() {
        true => none(),
        false => into_array(py, column.offsets)?,
    };
    let data = into_array(py, column.data)?;
    let items = column.items.map(|v| into_array(py, v)).transpose()?;
    let valid = column.valid.map(|v| into_array(py, v)).transpose()?;
    PyTuple::new(
        py,
        [
            offsets,
            data,
            items.unwrap_or_else(none),
            valid.unwrap_or_else(none),
        ],
    )
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
