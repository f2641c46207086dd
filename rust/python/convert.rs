//! Field values between Python objects and `docstore_core::Value`.

use crate::errors::{new_error, Exc};
use docstore_core::{ElemType, FieldType, Shape, Value};
use numpy::npyffi::{self, NpyTypes, PY_ARRAY_API};
use numpy::{Element, PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

/// A decoded value as a Python object: `str`, `bytes`, `int`, `float`, `bool`, `None`, a list
/// of `str` or of `bytes`, or a 1-D numpy array. A value too large for the memory at hand
/// raises `MemoryError` (pyo3's and numpy's own constructors would panic instead).
pub fn to_python<'py>(py: Python<'py>, value: Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Value::List { utf8, raw } => {
            let list = PyList::empty(py);
            for item in docstore_core::format::record::list_items(raw) {
                let item = item.map_err(|e| crate::errors::to_pyerr(py, e))?;
                list.append(match utf8 {
                    true => str_from_utf8(py, item)?,
                    false => to_python(py, Value::Bytes(item))?,
                })?;
            }
            list.into_any()
        }
        Value::Items { .. } => {
            let items = value.to_items().unwrap_or_default();
            PyList::new(py, items.into_iter().map(|b| PyBytes::new(py, b)))?.into_any()
        }
        Value::Str(s) => {
            let len = s.len() as pyo3::ffi::Py_ssize_t;
            // SAFETY: a valid pointer and length; the result is checked for NULL, which comes
            // with the exception set (MemoryError).
            unsafe {
                let obj = pyo3::ffi::PyUnicode_FromStringAndSize(s.as_ptr().cast(), len);
                Bound::from_owned_ptr_or_err(py, obj)?
            }
        }
        Value::Bytes(b) => {
            let len = b.len() as pyo3::ffi::Py_ssize_t;
            // SAFETY: as for `Str`.
            unsafe {
                let obj = pyo3::ffi::PyBytes_FromStringAndSize(b.as_ptr().cast(), len);
                Bound::from_owned_ptr_or_err(py, obj)?
            }
        }
        Value::Int64(v) => v.into_pyobject(py)?.into_any(),
        Value::Float64(v) => PyFloat::new(py, v).into_any(),
        Value::Array(elem, bytes) => new_array(py, elem, bytes, false)?,
        Value::Planes(elem, bytes) => new_array(py, elem, bytes, true)?,
        Value::Tensor(elem, shape, bytes) => {
            let dims: Vec<npyffi::npy_intp> = shape.dims().iter().map(|&d| d as _).collect();
            array_from(
                py,
                dtype_of(py, elem)?,
                elem.size(),
                bytes,
                true,
                Some(&dims),
            )?
        }
    })
}

/// A `str` from bytes the core checked to be UTF-8 (CPython's decoder checks again).
fn str_from_utf8<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: a valid pointer and length; the result is checked for NULL, which comes with the
    // exception set.
    unsafe {
        let obj = pyo3::ffi::PyUnicode_DecodeUTF8(
            bytes.as_ptr().cast(),
            bytes.len() as pyo3::ffi::Py_ssize_t,
            c"strict".as_ptr(),
        );
        Bound::from_owned_ptr_or_err(py, obj)
    }
}

/// numpy's dtype for `elem`s: its own, or for bfloat16, which numpy lacks, `ml_dtypes`'s
/// (`docstore._convert.bfloat16`, which says how to install it where it is missing).
fn dtype_of<'py>(py: Python<'py>, elem: ElemType) -> PyResult<Bound<'py, PyArrayDescr>> {
    // numpy makes these from their names, parsed each time: made once.
    static FLOAT16: PyOnceLock<Py<PyArrayDescr>> = PyOnceLock::new();
    static BFLOAT16: PyOnceLock<Py<PyArrayDescr>> = PyOnceLock::new();
    Ok(match elem {
        ElemType::I8 => i8::get_dtype(py),
        ElemType::U8 => u8::get_dtype(py),
        ElemType::I16 => i16::get_dtype(py),
        ElemType::U16 => u16::get_dtype(py),
        ElemType::I32 => i32::get_dtype(py),
        ElemType::U32 => u32::get_dtype(py),
        ElemType::I64 => i64::get_dtype(py),
        ElemType::U64 => u64::get_dtype(py),
        ElemType::F32 => f32::get_dtype(py),
        ElemType::F64 => f64::get_dtype(py),
        ElemType::F16 => FLOAT16
            .get_or_try_init(py, || PyArrayDescr::new(py, "float16").map(Bound::unbind))?
            .bind(py)
            .clone(),
        ElemType::BF16 => BFLOAT16
            .get_or_try_init(py, || -> PyResult<_> {
                let dtype = py.import("docstore._convert")?.call_method0("bfloat16")?;
                Ok(dtype.cast_into::<PyArrayDescr>()?.unbind())
            })?
            .bind(py)
            .clone(),
    })
}

/// A new numpy array of `elem`s from little-endian `bytes`, or from their byte planes.
fn new_array<'py>(
    py: Python<'py>,
    elem: ElemType,
    bytes: &[u8],
    planes: bool,
) -> PyResult<Bound<'py, PyAny>> {
    array_from(py, dtype_of(py, elem)?, elem.size(), bytes, planes, None)
}

/// A new numpy array of `dtype` (elements of `size` bytes) holding the elements in `bytes`:
/// little-endian elements (the host is little-endian) or, with `planes`, their byte planes,
/// joined straight into the array; of `shape` (whose elements are those of `bytes`), or 1-D.
fn array_from<'py>(
    py: Python<'py>,
    dtype: Bound<'py, PyArrayDescr>,
    size: usize,
    bytes: &[u8],
    planes: bool,
    shape: Option<&[npyffi::npy_intp]>,
) -> PyResult<Bound<'py, PyAny>> {
    let len = bytes.len() / size;
    let bytes = &bytes[..len * size];
    // SAFETY: a fresh, C-contiguous array of `len` elements of `dtype` (whose items are `size`
    // bytes), made as numpy's `PyArray1::new` makes it but with its failure (NULL, MemoryError
    // set) returned rather than a panic: `len * size` bytes, not yet initialised (hence
    // `MaybeUninit`), all written here before the array is shared. Writing them needs no
    // alignment of `bytes`.
    unsafe {
        let mut dims = shape.map_or_else(|| vec![len as npyffi::npy_intp], <[_]>::to_vec);
        let ptr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, NpyTypes::PyArray_Type),
            dtype.into_dtype_ptr(),
            dims.len() as std::ffi::c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut(),
        );
        let array = Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked::<PyUntypedArray>();
        if len > 0 {
            let out = std::slice::from_raw_parts_mut(
                (*array.as_array_ptr())
                    .fields
                    .data
                    .cast::<std::mem::MaybeUninit<u8>>(),
                bytes.len(),
            );
            if planes {
                docstore_core::format::planes::join_uninit(bytes, size, out);
            } else {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast(), bytes.len());
            }
        }
        Ok(array.into_any())
    }
}

/// Copies and conversions made for one document, by field index, before its values borrow them:
/// arrays not already of the field's exact dtype (converted by `docstore._convert.as_array`) and
/// bytearrays (copied, as they are mutable).
#[derive(Default)]
pub struct Holder<'py> {
    converted: Vec<Option<Bound<'py, PyAny>>>,
    copies: Vec<Option<Vec<u8>>>,
}

impl<'py> Holder<'py> {
    pub fn clear(&mut self) {
        self.converted.clear();
        self.copies.clear();
    }

    /// Makes whatever field `index` needs besides `obj` itself.
    pub fn prepare(
        &mut self,
        index: usize,
        obj: &Bound<'py, PyAny>,
        ty: FieldType,
        doc_id: &str,
        field: &str,
    ) -> PyResult<()> {
        match ty {
            FieldType::Tensor(elem, shape) if exact_tensor(obj, elem, shape).is_none() => {
                let shape: Vec<u32> = shape.dims().to_vec();
                let converted = as_array(obj.py())?.call1((
                    obj,
                    elem.name(),
                    doc_id,
                    field,
                    PyTuple::new(obj.py(), shape)?,
                ))?;
                *slot(&mut self.converted, index) = Some(converted);
            }
            FieldType::Array(elem) if exact_array(obj, elem).is_none() => {
                let converted = as_array(obj.py())?.call1((obj, elem.name(), doc_id, field))?;
                if exact_array(&converted, elem).is_none() {
                    return Err(new_error(
                        obj.py(),
                        Exc::Internal,
                        "as_array returned a wrong array".into(),
                    ));
                }
                *slot(&mut self.converted, index) = Some(converted);
            }
            FieldType::Bytes => {
                if let Ok(b) = obj.cast::<PyByteArray>() {
                    *slot(&mut self.copies, index) = Some(b.to_vec());
                }
            }
            FieldType::StrList | FieldType::BytesList => {
                *slot(&mut self.copies, index) = Some(encode_list(obj, ty, doc_id, field)?);
            }
            _ => {}
        }
        Ok(())
    }
}

/// A `list[str]` or `list[bytes]` value (a list, tuple or 1-D numpy array of `str`s, or of
/// `bytes` or `bytearray`s) as a record stores it (`Value::List`).
fn encode_list(
    obj: &Bound<'_, PyAny>,
    ty: FieldType,
    doc_id: &str,
    field: &str,
) -> PyResult<Vec<u8>> {
    let py = obj.py();
    if let Ok(array) = obj.cast::<PyUntypedArray>() {
        if array.ndim() == 1 {
            return encode_list(&obj.call_method0("tolist")?, ty, doc_id, field);
        }
    }
    let items: Vec<Bound<'_, PyAny>> = if let Ok(list) = obj.cast::<PyList>() {
        list.iter().collect()
    } else if let Ok(tuple) = obj.cast::<PyTuple>() {
        tuple.iter().collect()
    } else {
        return Err(type_error(py, doc_id, field, ty, obj));
    };
    let mut copies = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let bytes = match ty {
            FieldType::StrList => item.cast::<PyString>().ok().map(|s| {
                s.to_str().map(|s| s.as_bytes().to_vec()).map_err(|_| {
                    let message = format!(
                        "doc {doc_id:?}: item {i} of field {field:?} is not valid Unicode (lone surrogate)"
                    );
                    new_error(py, Exc::FieldType, message)
                })
            }),
            _ => match (item.cast::<PyBytes>(), item.cast::<PyByteArray>()) {
                (Ok(b), _) => Some(Ok(b.as_bytes().to_vec())),
                (_, Ok(b)) => Some(Ok(b.to_vec())),
                _ => None,
            },
        };
        let Some(bytes) = bytes else {
            let got = item
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            let message = format!(
                "doc {doc_id:?}: field {field:?} is {ty}, got a {got} at item {i}{}",
                if item.is_none() {
                    " (a list holds no None)"
                } else {
                    ""
                }
            );
            return Err(new_error(py, Exc::FieldType, message));
        };
        copies.push(bytes?);
    }
    let mut out = Vec::new();
    docstore_core::format::record::put_list(
        &mut out,
        copies.len(),
        copies.iter().map(Vec::as_slice),
    );
    Ok(out)
}

/// `items[index]`, growing `items` with `None`s as needed (nothing is allocated for documents
/// that need no conversion).
fn slot<T>(items: &mut Vec<Option<T>>, index: usize) -> &mut Option<T> {
    if items.len() <= index {
        items.resize_with(index + 1, || None);
    }
    &mut items[index]
}

fn type_error(
    py: Python<'_>,
    doc_id: &str,
    field: &str,
    ty: FieldType,
    got: &Bound<'_, PyAny>,
) -> PyErr {
    if got.is_none() {
        let message = format!(
            "doc {doc_id:?}: field {field:?} is {ty}, got None; declare the field {ty}? to store None"
        );
        return new_error(py, Exc::FieldType, message);
    }
    let got = got
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    new_error(
        py,
        Exc::FieldType,
        format!("doc {doc_id:?}: field {field:?} is {ty}, got {got}"),
    )
}

/// Borrows `obj` (or what `holder` prepared for field `index`) as a value of type `ty`.
///
/// The bytes of `bytes`, `str` and numpy arrays are borrowed without copying; the caller holds
/// the GIL for as long as the value is used, so no Python code can change or free them.
pub fn from_python<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    ty: FieldType,
    holder: &'a Holder<'py>,
    index: usize,
    doc_id: &str,
    field: &str,
) -> PyResult<Value<'a>> {
    let py = obj.py();
    let wrong = || type_error(py, doc_id, field, ty, obj);
    Ok(match ty {
        FieldType::Str => {
            let s = obj.cast::<PyString>().map_err(|_| wrong())?;
            Value::Str(s.to_str().map_err(|_| {
                new_error(
                    py,
                    Exc::FieldType,
                    format!(
                        "doc {doc_id:?}: field {field:?} is not valid Unicode (lone surrogate)"
                    ),
                )
            })?)
        }
        FieldType::Bytes => match (obj.cast::<PyBytes>(), holder.copies.get(index)) {
            (Ok(b), _) => Value::Bytes(b.as_bytes()),
            (_, Some(Some(copy))) => Value::Bytes(copy),
            _ => return Err(wrong()),
        },
        FieldType::Int64 => {
            if obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyString>() {
                return Err(wrong());
            }
            Value::Int64(obj.extract::<i64>().map_err(|_| {
                if obj.is_instance_of::<PyInt>() {
                    let message = format!(
                        "doc {doc_id:?}: field {field:?} is int64, got {obj}: outside its range"
                    );
                    new_error(py, Exc::FieldType, message)
                } else {
                    wrong()
                }
            })?)
        }
        FieldType::Float64 => {
            if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
                return Err(wrong());
            }
            let x = obj.extract::<f64>().map_err(|_| wrong())?;
            if !obj.is_exact_instance_of::<PyFloat>() && !x.is_nan() && !equals_exactly(obj, x)? {
                let message = format!(
                    "doc {doc_id:?}: field {field:?} is float64, got {obj}, which float64 cannot hold exactly"
                );
                return Err(new_error(py, Exc::FieldType, message));
            }
            Value::Float64(x)
        }
        FieldType::Array(elem) => {
            let source = match holder.converted.get(index) {
                Some(Some(converted)) => converted,
                _ => obj,
            };
            Value::Array(elem, exact_array(source, elem).ok_or_else(wrong)?)
        }
        FieldType::Tensor(elem, shape) => {
            let source = match holder.converted.get(index) {
                Some(Some(converted)) => converted,
                _ => obj,
            };
            Value::Array(elem, exact_tensor(source, elem, shape).ok_or_else(wrong)?)
        }
        FieldType::Bool => {
            // True and False, numpy's bools, and the ints 0 and 1: nothing else is a bool
            // without losing what it was.
            if let Ok(b) = obj.cast::<PyBool>() {
                Value::Bool(b.is_true())
            } else if obj
                .get_type()
                .name()
                .is_ok_and(|n| n == "bool" || n == "bool_")
            {
                Value::Bool(obj.is_truthy()?)
            } else if obj.is_instance_of::<PyInt>() {
                match obj.extract::<i64>() {
                    Ok(0) => Value::Bool(false),
                    Ok(1) => Value::Bool(true),
                    _ => {
                        let message = format!(
                            "doc {doc_id:?}: field {field:?} is bool, got {obj} (only 0 and 1 are bools)"
                        );
                        return Err(new_error(py, Exc::FieldType, message));
                    }
                }
            } else {
                return Err(wrong());
            }
        }
        FieldType::StrList | FieldType::BytesList => match holder.copies.get(index) {
            Some(Some(raw)) => Value::List {
                utf8: ty == FieldType::StrList,
                raw,
            },
            _ => return Err(wrong()),
        },
    })
}

/// Whether `obj` (an int, a numpy number, a `Decimal` ...) is exactly the float64 `x` it converts
/// to. Python compares ints and Decimals with floats exactly; numpy rounds its integers to float
/// first, so integers are compared as Python ints.
fn equals_exactly(obj: &Bound<'_, PyAny>, x: f64) -> PyResult<bool> {
    let py = obj.py();
    // SAFETY: PyNumber_Index returns a new reference, or null with an exception set.
    let value = match unsafe {
        Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyNumber_Index(obj.as_ptr()))
    } {
        Ok(int) => int,
        Err(_) => obj.clone(), // not an integer
    };
    value.eq(x)
}

/// The bytes of `obj` if it is a 1-D, C-contiguous, little-endian numpy array of exactly `elem`.
/// Not of a subclass: a masked array's data holds its masked slots too, and `as_array` refuses it.
pub(crate) fn exact_array<'a>(obj: &'a Bound<'_, PyAny>, elem: ElemType) -> Option<&'a [u8]> {
    exact_elements(obj, elem, None)
}

/// The bytes of `obj` if it is a C-contiguous, little-endian numpy array of exactly `elem` and
/// of `shape` (as `exact_array`).
fn exact_tensor<'a>(obj: &'a Bound<'_, PyAny>, elem: ElemType, shape: Shape) -> Option<&'a [u8]> {
    exact_elements(obj, elem, Some(shape))
}

/// `exact_array` (`shape` None: 1-D) or `exact_tensor`.
fn exact_elements<'a>(
    obj: &'a Bound<'_, PyAny>,
    elem: ElemType,
    shape: Option<Shape>,
) -> Option<&'a [u8]> {
    if !obj.is_exact_instance_of::<PyUntypedArray>() {
        return None;
    }
    let array = obj.cast::<PyUntypedArray>().ok()?;
    let dtype = array.dtype();
    let kind = match elem {
        ElemType::I8 | ElemType::I16 | ElemType::I32 | ElemType::I64 => b'i',
        ElemType::U8 | ElemType::U16 | ElemType::U32 | ElemType::U64 => b'u',
        ElemType::F16 | ElemType::F32 | ElemType::F64 => b'f',
        ElemType::BF16 => b'b',
    };
    let native = dtype.is_native_byteorder().unwrap_or(true);
    let shaped = match shape {
        None => array.ndim() == 1,
        Some(shape) => array
            .shape()
            .iter()
            .copied()
            .eq(shape.dims().iter().map(|&d| d as usize)),
    };
    if !shaped || !array.is_c_contiguous() || dtype.itemsize() != elem.size() || !native {
        return None;
    }
    let exact = match kind {
        // ml_dtypes' bfloat16: numpy's kind 'V', told apart by its name.
        b'b' => dtype.typeobj().name().is_ok_and(|n| n == "bfloat16"),
        _ => dtype.kind() == kind,
    };
    if !exact {
        return None;
    }
    let len = array.len() * elem.size();
    if len == 0 {
        return Some(&[]);
    }
    // SAFETY: a C-contiguous array of `len` bytes, kept alive by `obj` while the slice is used.
    // Its contents stay put as long as no other thread writes or resizes the array meanwhile:
    // the GIL ensures that on a regular build; on a free-threaded one it is the caller's to
    // ensure, as for numpy's own functions (docs/wheels.md, "Free-threaded CPython").
    unsafe {
        Some(std::slice::from_raw_parts(
            (*array.as_array_ptr()).fields.data as *const u8,
            len,
        ))
    }
}

fn as_array(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static AS_ARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    AS_ARRAY.import(py, "docstore._convert", "as_array")
}
