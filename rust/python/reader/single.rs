//! Single reads, by id or by position, with the GIL rule of `gil`: alone, the Doc is built from
//! the record where it was decoded, with Python held; otherwise the record is read with Python
//! released into this thread's scratch, then built.

use super::select::Select;
use super::Reader;
use crate::args::{plain_str, position_arg};
use crate::errors::{exception_class, guard, key_error, Exc, IntoPy};
use crate::gil::others_may_wait;
use crate::scratch::with_single;
use crate::text::no_texts;
use docstore_core::Collection;
use pyo3::prelude::*;
use pyo3::types::PyString;

impl Reader {
    /// `store[key]`: a KeyError naming the key when absent (a `NotAnIdError` for an int or a
    /// slice, which are most likely positions).
    #[inline]
    pub(super) fn getitem<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.get_impl(py, key, &Select::Doc)? {
            Some(doc) => Ok(doc),
            // Ids are strings: an int is most likely a position, a slice positions. The error
            // is a KeyError carrying the key as given (`args == (key,)`, as for every missing
            // id) whose message says how to read by position.
            None if key.is_instance_of::<pyo3::types::PyInt>()
                || key.is_instance_of::<pyo3::types::PySlice>() =>
            {
                let class = exception_class(py, Exc::NotAnId)?;
                Err(PyErr::from_type(class, (key.clone().unbind(),)))
            }
            None => Err(key_error(key)),
        }
    }

    /// `store.get(doc_id, default, field=, fields=)`.
    pub(super) fn get_or<'py>(
        &self,
        py: Python<'py>,
        doc_id: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
        field: Option<&str>,
        fields: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let select = self.select(py, field, fields)?;
        Ok(self.get_impl(py, doc_id, &select)?.or(default))
    }

    /// Whether `key` is an id of the store.
    pub(super) fn contains(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let store = self.store(py)?;
        let Some(key) = key.cast::<PyString>().ok().and_then(|k| k.to_str().ok()) else {
            return Ok(false);
        };
        guard(py, || {
            py.detach(|| store.position(key.as_bytes()))
                .py_err(py)
                .map(|p| p.is_some())
        })
    }

    /// The position of `doc_id`; KeyError when absent.
    pub(super) fn position_of(&self, py: Python<'_>, doc_id: &Bound<'_, PyAny>) -> PyResult<u64> {
        let store = self.store(py)?;
        let key = doc_id.cast::<PyString>().ok().and_then(|k| k.to_str().ok());
        let pos = match key {
            Some(key) => guard(py, || {
                py.detach(|| store.position(key.as_bytes())).py_err(py)
            })?,
            None => None,
        };
        pos.ok_or_else(|| key_error(doc_id))
    }

    /// The document at position `index` (negative counts from the end).
    #[inline]
    pub(super) fn at_impl<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
        field: Option<&str>,
        fields: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let loaded = self.store_for_call(py)?;
        let store: &Collection = &loaded;
        let select = self.select(py, field, fields)?;
        let pos = Self::resolve_position(store, position_arg(index)?)?;
        guard(py, || {
            if !others_may_wait(py, store.may_block()) {
                // Alone (`gil`): built from the record where it was decoded, without a copy.
                let key = || Self::key_object(py, store, pos);
                let build = |raw: &[u8]| self.build(py, store, &select, key, raw, no_texts());
                return store.with_at(pos, build).py_err(py)?;
            }
            with_single(|decoded| {
                py.detach(|| decoded.read_at(store, pos, &select))
                    .py_err(py)?;
                let key = || Self::key_object(py, store, pos);
                self.build_decoded(py, store, &select, key, decoded, 0)
            })
        })
    }

    /// The document with id `key` as `select` says, `None` when absent (or not a `str`).
    #[inline]
    pub(super) fn get_impl<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        select: &Select,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let loaded = self.store_for_call(py)?;
        let store: &Collection = &loaded;
        let Some(key) = key.cast::<PyString>().ok().map(|k| plain_str(k.clone())) else {
            return Ok(None);
        };
        let Ok(text) = key.to_str() else {
            return Ok(None);
        };
        guard(py, || {
            if !others_may_wait(py, store.may_block()) {
                // Alone (`gil`): built from the record where it was decoded, without a copy.
                let key = || Ok(key.clone().into_any());
                let build = |_, raw: &[u8]| self.build(py, store, select, key, raw, no_texts());
                return store
                    .with_one(text.as_bytes(), build)
                    .py_err(py)?
                    .transpose();
            }
            with_single(|decoded| {
                let found = py
                    .detach(|| decoded.read_key(store, text.as_bytes(), select))
                    .py_err(py)?
                    .is_some();
                if !found {
                    return Ok(None);
                }
                let key = || Ok(key.clone().into_any());
                self.build_decoded(py, store, select, key, decoded, 0)
                    .map(Some)
            })
        })
    }
}
