//! What a lookup returns (`field=`, `fields=` or whole Docs), and building it from a record.

use super::Reader;
use crate::args::field_names_arg;
use crate::doc::{raw_to_python, DocBuilder};
use crate::errors::{new_error, Exc, IntoPy};
use crate::scratch::Decoded;
use crate::text::{RecordTexts, Wants};
use docstore_core::format::record;
use docstore_core::Collection;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

pub(super) enum Select {
    Doc,
    /// `field="doc_id"`.
    Key,
    One(usize),
    /// Field indices; `None` is the doc id.
    Many(Vec<Option<usize>>),
}

impl Wants for Select {
    /// Whether the lookup converts field `index` (its `str`s are then prepared early).
    fn wants(&self, index: usize) -> bool {
        match self {
            Select::Doc => true,
            Select::Key => false,
            Select::One(one) => *one == index,
            Select::Many(indices) => indices.contains(&Some(index)),
        }
    }
}

impl Reader {
    pub(super) fn field_index(&self, py: Python<'_>, name: &str) -> PyResult<usize> {
        self.field_names
            .iter()
            .position(|f| f == name)
            .ok_or_else(|| {
                new_error(
                    py,
                    Exc::Schema,
                    format!(
                        "no field {name:?}; the store's fields are {:?}",
                        self.field_names
                    ),
                )
            })
    }

    /// What a lookup returns: whole Docs, one field's values (`field=`), or tuples (`fields=`).
    pub(super) fn select(
        &self,
        py: Python<'_>,
        field: Option<&str>,
        fields: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Select> {
        match (field, fields.map(field_names_arg).transpose()?) {
            (Some(_), Some(_)) => Err(new_error(
                py,
                Exc::Schema,
                "give field= or fields=, not both".into(),
            )),
            (Some("doc_id"), None) => Ok(Select::Key),
            (Some(name), None) => Ok(Select::One(self.field_index(py, name)?)),
            (None, Some(names)) => {
                let indices = names
                    .iter()
                    .map(|n| match n.as_str() {
                        "doc_id" => Ok(None),
                        name => self.field_index(py, name).map(Some),
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(Select::Many(indices))
            }
            (None, None) => Ok(Select::Doc),
        }
    }

    /// A Doc, one field's value or a tuple of fields, from a raw record; `key` becomes `doc.doc_id`.
    #[inline]
    pub(super) fn build<'py>(
        &self,
        py: Python<'py>,
        store: &Collection,
        select: &Select,
        key: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
        raw: &[u8],
        texts: RecordTexts<'_>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let schema = store.schema();
        match select {
            Select::Key => key(),
            Select::One(index) => raw_to_python(
                py,
                record::raw_field(schema, raw, *index).py_err(py)?,
                texts.field(*index),
            ),
            Select::Many(indices) => {
                let values = record::raw_fields(schema, raw)
                    .collect::<Result<Vec<_>, _>>()
                    .py_err(py)?;
                let mut key = Some(key);
                let mut key_object: Option<Bound<'py, PyAny>> = None;
                let mut items = Vec::with_capacity(indices.len());
                for index in indices {
                    items.push(match index {
                        Some(i) => raw_to_python(py, values[*i], texts.field(*i))?,
                        None => match (&key_object, key.take()) {
                            (Some(object), _) => object.clone(),
                            (None, Some(make)) => key_object.insert(make()?).clone(),
                            (None, None) => unreachable!("the key is made once, then kept"),
                        },
                    });
                }
                Ok(PyTuple::new(py, items)?.into_any())
            }
            Select::Doc => {
                let doc = DocBuilder::new(self.doc_class.bind(py), schema.len() + 1)?;
                doc.set(0, key()?);
                for (index, value) in record::raw_fields(schema, raw).enumerate() {
                    let value = raw_to_python(py, value.py_err(py)?, texts.field(index))?;
                    doc.set(index + 1, value);
                }
                Ok(doc.finish())
            }
        }
    }

    /// `build` of the `i`th record `decoded` holds, with its `str`s as prepared there.
    #[inline]
    pub(super) fn build_decoded<'py>(
        &self,
        py: Python<'py>,
        store: &Collection,
        select: &Select,
        key: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
        decoded: &Decoded,
        i: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (raw, texts) = (decoded.records.get(i), decoded.texts.record(i));
        self.build(py, store, select, key, raw, texts)
    }

    /// The id of `pos`, whose record has just been read (and checked with this id).
    pub(super) fn key_object<'py>(
        py: Python<'py>,
        store: &Collection,
        pos: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        // A read that may wait (its bytes evicted since, or healed): with Python released.
        let key = match store.may_block() {
            true => py.detach(|| store.key_at_after_read(pos)),
            false => store.key_at_after_read(pos),
        };
        Ok(PyString::new(py, key.py_err(py)?).into_any())
    }
}
