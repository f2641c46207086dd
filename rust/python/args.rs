//! Arguments from Python, checked and read into what the core takes: positions and collections of
//! doc ids for the Reader's lookups; doc ids, field dicts, the schema and options for the Writer.
//! Each raises the error a user should see for a bad argument (`IndexError`, `TypeError`, a
//! docstore error), so the methods that take them need not check them.

use crate::errors::{new_error, Exc, IntoPy};
use docstore_core::{Field, Schema};
use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyString};

/// A position argument: an int beyond 64 bits is out of range for any store (`IndexError`, as a
/// list says), not an `OverflowError`.
pub(crate) fn position_arg(index: &Bound<'_, PyAny>) -> PyResult<i64> {
    index.extract::<i64>().map_err(|err| {
        if err.is_instance_of::<PyOverflowError>(index.py()) {
            PyIndexError::new_err(format!("position {index} out of range"))
        } else {
            err
        }
    })
}

/// A doc id as a plain `str`: an instance of a subclass (numpy's `np.str_`, say) comes back from
/// lookups (`doc.doc_id`, `get_many`'s keys) as the `str` it holds, not as the caller's type.
/// One that is not valid UTF-8 (lone surrogates) is kept: no store holds it.
pub(crate) fn plain_str(id: Bound<'_, PyString>) -> Bound<'_, PyString> {
    if id.is_exact_instance_of::<PyString>() {
        return id;
    }
    match id.to_str() {
        Ok(text) => PyString::new(id.py(), text),
        Err(_) => id,
    }
}

/// Field names (`fields=`): any sequence of str but one name (a str, which would be read as
/// one-letter names, or bytes, as numbers).
pub(crate) fn field_names_arg(fields: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if fields.is_instance_of::<PyString>()
        || fields.is_instance_of::<PyBytes>()
        || fields.is_instance_of::<PyByteArray>()
    {
        return Err(PyTypeError::new_err(format!(
            "fields= takes a sequence of field names, got the {} {}; use field= for one field",
            fields.get_type().name()?,
            fields.repr()?
        )));
    }
    fields.extract()
}

/// Positions from a list, tuple or range of ints, a 1-D integer array (numpy, or what numpy reads
/// without a copy, such as a CPU torch tensor) or any other iterable of ints. A boolean array is
/// refused: it is a mask, not positions.
pub(crate) fn positions_arg(positions: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    let py = positions.py();
    if let Ok(array) = positions.cast::<PyArray1<i64>>() {
        return Ok(array.readonly().as_array().to_vec());
    }
    if positions.hasattr(pyo3::intern!(py, "__array__"))? {
        let numpy = py.import(pyo3::intern!(py, "numpy"))?;
        if let Ok(array) = numpy.call_method1(pyo3::intern!(py, "asarray"), (positions,)) {
            let array = array.cast_into::<PyUntypedArray>()?;
            let kind = array.dtype().kind();
            if array.ndim() != 1 || !matches!(kind, b'i' | b'u' | b'b') {
                return Err(PyTypeError::new_err(format!(
                    "positions must be a 1-D sequence of ints, got an array of {} with shape {:?}",
                    array.dtype(),
                    array.shape()
                )));
            }
            if kind == b'b' {
                return Err(PyTypeError::new_err(
                    "positions must be ints, got a boolean array (a mask? use its nonzero() positions)",
                ));
            }
            if kind == b'i' || array.dtype().itemsize() < 8 {
                let array = array.call_method1(pyo3::intern!(py, "astype"), ("int64",))?;
                return positions_arg(&array); // now an int64 array
            }
            // uint64, through Python ints: a value beyond int64 is then out of range.
            return array
                .call_method0(pyo3::intern!(py, "tolist"))?
                .extract::<Vec<Bound<'_, PyAny>>>()?
                .iter()
                .map(position_arg)
                .collect();
        }
    }
    match positions.extract::<Vec<i64>>() {
        Ok(positions) => Ok(positions),
        // Any other iterable of ints: a generator, a CUDA tensor ...
        Err(_) => positions.try_iter()?.map(|i| position_arg(&i?)).collect(),
    }
}

/// The items of a collection of doc ids; one str is refused (it would be read as its characters).
pub(crate) fn ids_of<'py>(
    doc_ids: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, pyo3::types::PyIterator>> {
    if doc_ids.is_instance_of::<PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "expected a collection of doc ids, got one str (for one id, use get() or [])",
        ));
    }
    doc_ids.try_iter()
}

/// The id of a document: a non-empty str, valid Unicode (no lone surrogates).
pub(crate) fn key_of<'a>(py: Python<'_>, doc_id: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let key = doc_id.cast::<PyString>().map_err(|_| {
        let got = doc_id
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        new_error(
            py,
            Exc::InvalidKey,
            format!("doc ids must be str, got {got} {doc_id}"),
        )
    })?;
    match key.to_str() {
        Ok("") => Err(new_error(
            py,
            Exc::InvalidKey,
            "doc ids must be non-empty strings".into(),
        )),
        Ok(key) => Ok(key),
        Err(_) => Err(new_error(
            py,
            Exc::InvalidKey,
            format!("doc id {doc_id:?} is not valid Unicode"),
        )),
    }
}

/// A dict of field values, or any other mapping copied into one.
pub(crate) fn as_dict<'py>(fields: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    if let Ok(dict) = fields.cast::<PyDict>() {
        return Ok(dict.clone());
    }
    let mapping = fields.cast::<pyo3::types::PyMapping>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "fields must be a dict of field values, got {}",
            fields.get_type()
        ))
    })?;
    let dict = PyDict::new(fields.py());
    dict.update(mapping)?;
    Ok(dict)
}

/// The schema of `Writer(path, fields)`: a mapping (or pairs) of field names to type names.
pub(crate) fn schema_of(py: Python<'_>, fields: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let pairs: Vec<(String, String)> = if let Ok(dict) = fields.cast::<PyDict>() {
        dict.iter()
            .map(|(k, v)| Ok((k.extract()?, v.extract()?)))
            .collect::<PyResult<_>>()
    } else if let Ok(mapping) = fields.cast::<pyo3::types::PyMapping>() {
        mapping.items().and_then(|items| items.extract())
    } else {
        fields.extract()
    }
    .map_err(|_| {
        new_error(
            py,
            Exc::Schema,
            "fields must map field names to type names, e.g. {\"text\": \"str\"}".into(),
        )
    })?;
    let fields = pairs
        .into_iter()
        .map(|(name, ty)| Field::parse(name, &ty))
        .collect::<Result<Vec<_>, docstore_core::Error>>()
        .py_err(py)?;
    Schema::new(fields).py_err(py)
}

/// An int argument: `True` and `False` are ints to Python but never a count, level or size.
pub(crate) fn int_arg(name: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got bool ({value})"
        )));
    }
    value.extract()
}

/// A writer option as the core takes it (`default` when not given); a negative or huge value is
/// an `InvalidArgumentError` naming the option, as the core's own range checks are.
pub(crate) fn option<T: TryFrom<i64>>(
    name: &str,
    value: Option<&Bound<'_, PyAny>>,
    default: T,
) -> PyResult<T> {
    let Some(value) = value else {
        return Ok(default);
    };
    let v = int_arg(name, value).map_err(|err| {
        if err.is_instance_of::<PyOverflowError>(value.py()) {
            new_error(
                value.py(),
                Exc::InvalidArgument,
                format!("{name}={value} is out of range"),
            )
        } else {
            err
        }
    })?;
    T::try_from(v).map_err(|_| {
        new_error(
            value.py(),
            Exc::InvalidArgument,
            format!("{name}={v} is out of range"),
        )
    })
}
