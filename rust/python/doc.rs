//! The Python objects a lookup makes from a raw record: each field's value (a prepared `str` only
//! copied), and the Doc, an instance of the store's namedtuple subclass, allocated and filled in
//! place rather than made by calling its class.

use crate::convert::to_python;
use crate::errors::{new_error, Exc};
use crate::text::{is_ascii, Layout, Units};
use docstore_core::format::record::RawValue;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

/// A Doc (an instance of a namedtuple subclass) being filled in place.
pub(crate) struct DocBuilder<'py> {
    doc: Bound<'py, PyAny>,
}

impl<'py> DocBuilder<'py> {
    pub(crate) fn new(cls: &Bound<'py, PyType>, len: usize) -> PyResult<Self> {
        let len = len as pyo3::ffi::Py_ssize_t;
        // SAFETY: the Doc class is a tuple subclass with empty __slots__, so an instance is a
        // plain tuple of `len` slots, allocated as `tuple` allocates its own: `PyObject_GC_NewVar`
        // (it takes a reference to the heap type, as `PyType_GenericAlloc` does) leaves it
        // untracked by the garbage collector. It only ever holds str, bytes, int, float and
        // numeric arrays, so it can never be part of a reference cycle, and collections need not
        // traverse it (tuples of atoms untrack themselves the same way): never tracking it
        // saves tracking and untracking it. The slots are nulled before anything can see them;
        // one left NULL by an error is fine: tuple deallocation skips NULLs.
        unsafe {
            let obj = pyo3::ffi::PyObject_GC_NewVar::<pyo3::ffi::PyObject>(cls.as_type_ptr(), len);
            if obj.is_null() {
                return Err(PyErr::fetch(cls.py()));
            }
            for index in 0..len {
                pyo3::ffi::PyTuple_SET_ITEM(obj, index, std::ptr::null_mut());
            }
            Ok(DocBuilder {
                doc: Bound::from_owned_ptr(cls.py(), obj),
            })
        }
    }

    pub(crate) fn set(&self, index: usize, item: Bound<'py, PyAny>) {
        // SAFETY: `index` < len (one per field plus the key), each slot is set once.
        unsafe {
            pyo3::ffi::PyTuple_SET_ITEM(
                self.doc.as_ptr(),
                index as pyo3::ffi::Py_ssize_t,
                item.into_ptr(),
            )
        };
    }

    /// The finished Doc (never tracked by the garbage collector: see `new`).
    pub(crate) fn finish(self) -> Bound<'py, PyAny> {
        self.doc
    }
}

/// A raw field as a Python object. A `str` prepared while Python was released (`prepared`: its
/// layout, and the buffer its units may be in) is only copied; any other is validated by
/// CPython's UTF-8 decoder.
pub(crate) fn raw_to_python<'py>(
    py: Python<'py>,
    value: RawValue<'_>,
    prepared: Option<(&Layout, &[u8])>,
) -> PyResult<Bound<'py, PyAny>> {
    match (value, prepared) {
        (RawValue::Utf8(bytes), Some((layout, buffer))) => {
            prepared_str(py, layout, layout.units(bytes, buffer))
        }
        // Not prepared (a batch prepares every str field it converts, a single lookup those
        // of long records: `scratch::PREPARE_SINGLE_MIN`). ASCII, the common case, is only
        // checked and copied; CPython's decoder validates the rest.
        (RawValue::Utf8(bytes), None) if is_ascii(bytes) => {
            let ascii = Layout {
                chars: bytes.len(),
                max_char: 127,
                units: Units::Ascii,
            };
            prepared_str(py, &ascii, bytes)
        }
        (RawValue::Utf8(bytes), None) => {
            // SAFETY: a valid pointer and length; the result is checked for NULL.
            let obj = unsafe {
                pyo3::ffi::PyUnicode_DecodeUTF8(
                    bytes.as_ptr().cast(),
                    bytes.len() as pyo3::ffi::Py_ssize_t,
                    c"strict".as_ptr(),
                )
            };
            if obj.is_null() {
                // Out of memory for it: that error itself. Otherwise the bytes are not UTF-8.
                let err = PyErr::fetch(py);
                if err.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) {
                    return Err(err);
                }
                return Err(crate::errors::to_pyerr(
                    py,
                    docstore_core::Error::Corrupt("str field is not UTF-8".into()),
                ));
            }
            // SAFETY: a new reference from the decoder.
            Ok(unsafe { Bound::from_owned_ptr(py, obj) })
        }
        (RawValue::Other(value), _) => to_python(py, value),
    }
}

/// A `str` of `layout` made of its code units `units`.
fn prepared_str<'py>(
    py: Python<'py>,
    layout: &Layout,
    units: &[u8],
) -> PyResult<Bound<'py, PyAny>> {
    if units.len() != layout.chars * layout.width() {
        return Err(new_error(
            py,
            Exc::Internal,
            "a prepared str has the wrong number of units".into(),
        ));
    }
    // SAFETY: PyUnicode_New(chars, max_char) makes a compact str of the width that
    // `max_char` selects, with room for `chars` units of that width: exactly `units`
    // (checked above), filled here before anything else can see it. The str is
    // canonical (CPython's other functions rely on it): `max_char` is 127 only for
    // ASCII, and otherwise the text holds a character above the next narrower width
    // (see `text::layout_of`).
    unsafe {
        let obj = pyo3::ffi::PyUnicode_New(
            layout.chars as pyo3::ffi::Py_ssize_t,
            layout.max_char as pyo3::ffi::Py_UCS4,
        );
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        std::ptr::copy_nonoverlapping(
            units.as_ptr(),
            pyo3::ffi::PyUnicode_DATA(obj).cast::<u8>(),
            units.len(),
        );
        Ok(Bound::from_owned_ptr(py, obj))
    }
}

pub(crate) fn doc_class<'py>(py: Python<'py>, fields: &[String]) -> PyResult<Bound<'py, PyType>> {
    static DOC_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let factory = DOC_CLASS.import(py, "docstore._doc", "doc_class")?;
    let names = PyTuple::new(py, fields)?;
    Ok(factory.call1((names,))?.cast_into::<PyType>()?)
}
