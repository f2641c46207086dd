//! The numpy views of Arrow buffers that `Writer._add_arrow_columns` takes, borrowed as
//! `docstore_core::Column`s: no Python object per value. Checking the rows and encoding them is
//! the core's (`docstore_core::columns`); here the buffers are only borrowed and their dtypes
//! matched to the fields.

use crate::convert::exact_array;
use crate::errors::{new_error, Exc};
use docstore_core::{Column, ElemType, Field, FieldType};
use numpy::{PyReadonlyArray1, PyUntypedArray};
use pyo3::prelude::*;

/// One column's numpy arrays, held (and borrowed read-only) while the batch is added.
pub(crate) enum Buffers<'py> {
    /// (int64 offsets, uint8 data): `str` and `bytes` fields, and the doc ids.
    Text(PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, u8>),
    Int64(PyReadonlyArray1<'py, i64>),
    Float64(PyReadonlyArray1<'py, f64>),
    /// (int64 offsets counting elements, values of the field's exact dtype).
    Array(
        ElemType,
        PyReadonlyArray1<'py, i64>,
        Bound<'py, PyUntypedArray>,
    ),
    /// One byte a row, 0 or 1: `bool` fields.
    Bool(PyReadonlyArray1<'py, u8>),
    /// (int64 offsets counting items, int64 item offsets, uint8 data): `list[str]` and
    /// `list[bytes]` fields.
    List(
        PyReadonlyArray1<'py, i64>,
        PyReadonlyArray1<'py, i64>,
        PyReadonlyArray1<'py, u8>,
    ),
}

/// The validity of a nullable field's rows (uint8, 0 for a null), when it has nulls.
pub(crate) type Validity<'py> = Option<PyReadonlyArray1<'py, u8>>;

impl<'py> Buffers<'py> {
    /// The arrays of `field`'s column: for a nullable field, `(validity or None, buffers)`.
    pub(crate) fn extract_field(
        obj: &Bound<'py, PyAny>,
        field: &Field,
        what: &str,
    ) -> PyResult<(Validity<'py>, Self)> {
        if !field.nullable {
            return Ok((None, Self::extract(obj, field.ty, what)?));
        }
        let (valid, inner): (Validity<'py>, Bound<'py, PyAny>) = obj.extract().map_err(|_| {
            let message = format!("{what}: expected (uint8 validity or None, buffers)");
            new_error(obj.py(), Exc::Schema, message)
        })?;
        Ok((valid, Self::extract(&inner, field.ty, what)?))
    }

    /// The arrays of a column of field type `ty` (`what` names it in errors).
    pub(crate) fn extract(obj: &Bound<'py, PyAny>, ty: FieldType, what: &str) -> PyResult<Self> {
        let py = obj.py();
        let wrong = |expected: &str| {
            let message = format!("{what}: expected {expected} for a {ty} column");
            move |_| new_error(py, Exc::Schema, message)
        };
        Ok(match ty {
            FieldType::Str | FieldType::Bytes => {
                let (offsets, data) = obj
                    .extract()
                    .map_err(wrong("(int64 offsets, uint8 data)"))?;
                Buffers::Text(offsets, data)
            }
            FieldType::Int64 => Buffers::Int64(obj.extract().map_err(wrong("an int64 array"))?),
            FieldType::Float64 => {
                Buffers::Float64(obj.extract().map_err(wrong("a float64 array"))?)
            }
            FieldType::Array(elem) | FieldType::Tensor(elem, _) => {
                let (offsets, values) = obj
                    .extract()
                    .map_err(wrong("(int64 offsets, values of the field's dtype)"))?;
                Buffers::Array(elem, offsets, values)
            }
            FieldType::Bool => Buffers::Bool(obj.extract().map_err(wrong("a uint8 array"))?),
            FieldType::StrList | FieldType::BytesList => {
                let (offsets, item_offsets, data) = obj
                    .extract()
                    .map_err(wrong("(int64 offsets, int64 item offsets, uint8 data)"))?;
                Buffers::List(offsets, item_offsets, data)
            }
        })
    }

    /// The buffers as a core column, if they are contiguous arrays of the right dtypes.
    pub(crate) fn column(&self) -> Result<Column<'_>, String> {
        let contiguous = || "offsets and data must be contiguous arrays".to_string();
        Ok(match self {
            Buffers::Text(offsets, data) => Column::Text {
                offsets: offsets.as_slice().map_err(|_| contiguous())?,
                data: data.as_slice().map_err(|_| contiguous())?,
            },
            Buffers::Int64(values) => Column::Int64(values.as_slice().map_err(|_| contiguous())?),
            Buffers::Float64(values) => {
                Column::Float64(values.as_slice().map_err(|_| contiguous())?)
            }
            Buffers::Array(elem, offsets, values) => Column::Array {
                elem: *elem,
                offsets: offsets.as_slice().map_err(|_| contiguous())?,
                values: exact_array(values.as_any(), *elem).ok_or_else(|| {
                    format!("values must be a contiguous, native {} array", elem.name())
                })?,
            },
            Buffers::Bool(values) => Column::Bool(values.as_slice().map_err(|_| contiguous())?),
            Buffers::List(offsets, item_offsets, data) => Column::List {
                offsets: offsets.as_slice().map_err(|_| contiguous())?,
                item_offsets: item_offsets.as_slice().map_err(|_| contiguous())?,
                data: data.as_slice().map_err(|_| contiguous())?,
            },
        })
    }
}
