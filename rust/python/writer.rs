//! `docstore._docstore.Writer`: builds a store from Python values. The Python class
//! `docstore.Writer` subclasses it (context manager, pyarrow input).

use crate::convert::{from_python, Holder};
use crate::errors::{guard, new_error, IntoPy};
use docstore_core::repeats::first_repeat;
use docstore_core::{
    Field, FieldType, Schema, Value, Writer as CoreWriter, WriterOptions, MAX_DOCS,
};
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

/// `docstore._docstore.Writer`. One writer may be shared by threads: its calls take turns (a
/// thread waiting for its turn releases Python, so the one in turn can flush without it).
#[pyclass(subclass, frozen, module = "docstore._docstore")]
pub struct Writer {
    state: Mutex<State>,
    /// The thread whose call holds `state` (`this_thread()`), 0 when none: a call that comes
    /// back into the writer on that thread (from a value's `__repr__`, say) must fail, not wait
    /// for itself.
    owner: AtomicUsize,
    /// The process that created the writer. A forked child's copy must not wait for `state`:
    /// a thread of the parent may have held it at the fork, and that thread does not exist here.
    pid: u32,
    /// The target path, which needs no turn to read (`repr` works in a forked child too).
    path: PathBuf,
}

/// A number for the calling thread, unique among live threads: the address of a thread-local.
fn this_thread() -> usize {
    thread_local!(static MARK: u8 = const { 0 });
    MARK.with(|mark| mark as *const u8 as usize)
}

/// The writer's state for one call; gives it back when dropped.
struct Turn<'a> {
    state: MutexGuard<'a, State>,
    owner: &'a AtomicUsize,
}

impl Deref for Turn<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for Turn<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.owner.store(0, Ordering::Release);
    }
}

struct State {
    inner: Option<CoreWriter>,
    schema: Schema,
    path: PathBuf,
    /// Field names as interned Python strings: dict lookups without making a str per field.
    names: Arc<[Py<PyString>]>,
    /// The id field of `add_record`, kept between calls for the same reason.
    id_key: Option<(String, Py<PyString>)>,
}

impl Writer {
    fn in_forked_child(&self) -> bool {
        docstore_core::process::id() != self.pid
    }

    /// The writer's state, once no other thread is using it.
    fn lock(&self, py: Python<'_>) -> PyResult<Turn<'_>> {
        if self.in_forked_child() {
            let message = format!(
                "the writer of {} belongs to the process that created it (pid {}), not to \
                 this forked child",
                self.path.display(),
                self.pid
            );
            return Err(new_error(py, "ClosedError", message));
        }
        loop {
            let state = match self.state.try_lock() {
                Ok(state) => state,
                // A panic in a call is caught inside it (`guard`), so this is not expected; the
                // state is then as the call left it, which `inner` reports if it matters.
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock)
                    if self.owner.load(Ordering::Acquire) == this_thread() =>
                {
                    return Err(PyRuntimeError::new_err(
                        "the writer was called again from inside one of its own calls \
                         (by a value's __repr__ or __eq__, say)",
                    ));
                }
                // Wait without Python: the thread in turn may need it to finish its call.
                Err(TryLockError::WouldBlock) => {
                    py.detach(|| drop(self.state.lock()));
                    continue;
                }
            };
            self.owner.store(this_thread(), Ordering::Release);
            return Ok(Turn {
                state,
                owner: &self.owner,
            });
        }
    }
}

impl State {
    fn inner(&mut self, py: Python<'_>) -> PyResult<&mut CoreWriter> {
        let path = &self.path;
        self.inner.as_mut().ok_or_else(|| {
            let message = format!(
                "the writer of {} has already finished or failed",
                path.display()
            );
            new_error(py, "ClosedError", message)
        })
    }

    /// Encodes one document from `lookup(field name)` and buffers it; flushes with Python released.
    fn add_one<'py>(
        &mut self,
        py: Python<'py>,
        doc_id: &Bound<'py, PyAny>,
        holder: &mut Holder<'py>,
        lookup: impl FnMut(usize, &str) -> PyResult<Option<Bound<'py, PyAny>>>,
    ) -> PyResult<()> {
        let key = key_of(py, doc_id)?;
        let objects = self.objects_of(py, key, lookup)?;
        holder.clear();
        // Values borrow from `objects` and `holder`; they are dropped before either is touched again.
        let values = convert_all(&self.schema, &objects, holder, key)?;
        let writer = self.inner(py)?;
        writer.add(key, &values).py_err(py)?;
        drop(values);
        if writer.needs_flush() {
            self.flush(py)?;
        }
        Ok(())
    }

    /// The Python value of each field, in schema order, from `lookup(index, name)`.
    fn objects_of<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        mut lookup: impl FnMut(usize, &str) -> PyResult<Option<Bound<'py, PyAny>>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.schema
            .fields
            .iter()
            .enumerate()
            .map(|(i, field)| {
                lookup(i, &field.name)?.ok_or_else(|| {
                    new_error(
                        py,
                        "SchemaError",
                        format!("doc {key:?} is missing field {:?}", field.name),
                    )
                })
            })
            .collect()
    }

    /// Checks `rows` documents of a batch as `add_one` would, without adding any, so that a bad
    /// one leaves the writer as it was; also finds an id repeated within the batch. The first
    /// problem in row order is the one reported.
    fn check_rows<'py>(
        &mut self,
        py: Python<'py>,
        doc_ids: &[Bound<'py, PyAny>],
        holder: &mut Holder<'py>,
        mut lookup: impl FnMut(usize, usize) -> PyResult<Option<Bound<'py, PyAny>>>,
    ) -> PyResult<()> {
        self.check_room(py, doc_ids.len())?;
        let mut keys = Vec::with_capacity(doc_ids.len());
        let checked = doc_ids.iter().enumerate().try_for_each(|(row, doc_id)| {
            let key = key_of(py, doc_id)?;
            keys.push(key);
            let objects = self.objects_of(py, key, |i, _| lookup(row, i))?;
            holder.clear();
            convert_all(&self.schema, &objects, holder, key).map(drop)
        });
        // Python stays held: the rows are the caller's lists, which other threads could change
        // between this check and the adding.
        match first_repeat(&keys) {
            Some(row) => Err(docstore_core::Error::DuplicateKey(keys[row].to_owned())).py_err(py),
            None => checked,
        }
    }

    /// Fails unless `rows` more documents fit in the store.
    fn check_room(&mut self, py: Python<'_>, rows: usize) -> PyResult<()> {
        let count = self.inner(py)?.len();
        if count.saturating_add(rows as u64) > MAX_DOCS {
            return Err(new_error(
                py,
                "SchemaError",
                format!("a store holds at most {MAX_DOCS} documents"),
            ));
        }
        Ok(())
    }

    fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        let writer = self.inner(py)?;
        let result = py.detach(|| writer.flush());
        if result.is_err() {
            self.inner = None; // a failed flush leaves an unusable writer; drop removes its files
        }
        result.py_err(py)
    }

    fn check_extra(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        doc_id: &Bound<'_, PyAny>,
        id_field: Option<&str>,
    ) -> PyResult<()> {
        let name = key
            .cast::<PyString>()
            .ok()
            .and_then(|k| k.to_str().ok().map(str::to_owned));
        match name {
            Some(name)
                if Some(name.as_str()) == id_field || self.schema.index_of(&name).is_some() =>
            {
                Ok(())
            }
            _ => Err(new_error(
                py,
                "SchemaError",
                format!(
                    "doc {}: unknown field {}; the store's fields are {:?}",
                    quoted(doc_id),
                    quoted(key),
                    self.schema
                        .fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                ),
            )),
        }
    }
}

/// The id of a document: a non-empty str, valid Unicode (no lone surrogates).
fn key_of<'a>(py: Python<'_>, doc_id: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let key = doc_id.cast::<PyString>().map_err(|_| {
        let got = doc_id
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        new_error(
            py,
            "InvalidKeyError",
            format!("doc ids must be str, got {got} {doc_id}"),
        )
    })?;
    match key.to_str() {
        Ok("") => Err(new_error(
            py,
            "InvalidKeyError",
            "doc ids must be non-empty strings".into(),
        )),
        Ok(key) => Ok(key),
        Err(_) => Err(new_error(
            py,
            "InvalidKeyError",
            format!("doc id {doc_id:?} is not valid Unicode"),
        )),
    }
}

/// A dict of field values, or any other mapping copied into one.
fn as_dict<'py>(fields: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
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

fn convert_all<'a, 'py>(
    schema: &Schema,
    objects: &'a [Bound<'py, PyAny>],
    holder: &'a mut Holder<'py>,
    key: &str,
) -> PyResult<Vec<Value<'a>>> {
    // Arrays needing conversion are converted first, so that `holder` is no longer mutated
    // once values start borrowing from it.
    for (i, (field, obj)) in schema.fields.iter().zip(objects).enumerate() {
        holder.prepare(i, obj, field.ty, key, &field.name)?;
    }
    let holder: &'a Holder<'py> = holder;
    let mut values = Vec::with_capacity(objects.len());
    for (i, (field, obj)) in schema.fields.iter().zip(objects).enumerate() {
        values.push(from_python(obj, field.ty, holder, i, key, &field.name)?);
    }
    Ok(values)
}

/// The schema of `Writer(path, fields)`: a mapping (or pairs) of field names to type names.
fn schema_of(py: Python<'_>, fields: &Bound<'_, PyAny>) -> PyResult<Schema> {
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
            "SchemaError",
            "fields must map field names to type names, e.g. {\"text\": \"str\"}".into(),
        )
    })?;
    let fields = pairs
        .into_iter()
        .map(|(name, ty)| {
            Ok(Field {
                name,
                ty: ty.parse()?,
            })
        })
        .collect::<Result<Vec<_>, docstore_core::Error>>()
        .py_err(py)?;
    Schema::new(fields).py_err(py)
}

impl State {
    fn create(
        py: Python<'_>,
        path: PathBuf,
        schema: Schema,
        options: WriterOptions,
    ) -> PyResult<Self> {
        let inner = guard(py, || {
            CoreWriter::create(&path, schema.clone(), options).py_err(py)
        })?;
        let names = schema
            .fields
            .iter()
            .map(|f| PyString::intern(py, &f.name).unbind())
            .collect();
        Ok(State {
            inner: Some(inner),
            schema,
            path,
            names,
            id_key: None,
        })
    }

    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for field in &self.schema.fields {
            dict.set_item(&field.name, field.ty.to_string())?;
        }
        Ok(dict)
    }

    fn count(&self) -> u64 {
        self.inner.as_ref().map_or(0, CoreWriter::len)
    }

    fn closed(&self) -> bool {
        self.inner.is_none()
    }

    fn add<'py>(
        &mut self,
        py: Python<'py>,
        doc_id: &Bound<'py, PyAny>,
        fields: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<()> {
        let fields = fields.map(as_dict).transpose()?;
        let source = match (fields.as_ref(), kwargs) {
            (Some(_), Some(_)) => {
                return Err(new_error(
                    py,
                    "SchemaError",
                    "give fields either as a dict or as keywords, not both".into(),
                ))
            }
            (Some(d), None) | (None, Some(d)) => Some(d),
            (None, None) => None,
        };
        if let Some(source) = source {
            if source.len() != self.schema.len() {
                for key in source.keys() {
                    self.check_extra(py, &key, doc_id, None)?;
                }
            }
        }
        let mut holder = Holder::default();
        let names = self.names.clone();
        let added = guard(py, || {
            self.add_one(py, doc_id, &mut holder, |i, _| {
                source.map_or(Ok(None), |d| d.get_item(names[i].bind(py)))
            })
        });
        // As many names as fields, one missing: then one is unknown, the likelier mistake to name.
        if let (Err(_), Some(source)) = (&added, source) {
            for key in source.keys() {
                self.check_extra(py, &key, doc_id, None)?;
            }
        }
        added
    }

    fn add_record<'py>(
        &mut self,
        py: Python<'py>,
        record: &Bound<'py, PyDict>,
        id_field: &str,
    ) -> PyResult<()> {
        let id_key = match &self.id_key {
            Some((name, key)) if name == id_field => key.bind(py).clone(),
            _ => {
                let key = PyString::intern(py, id_field);
                self.id_key = Some((id_field.to_owned(), key.clone().unbind()));
                key
            }
        };
        let doc_id = record.get_item(&id_key)?.ok_or_else(|| {
            new_error(
                py,
                "SchemaError",
                format!("record has no id field {id_field:?}: {record}"),
            )
        })?;
        if record.len() != self.schema.len() + 1 {
            for key in record.keys() {
                self.check_extra(py, &key, &doc_id, Some(id_field))?;
            }
        }
        let mut holder = Holder::default();
        let names = self.names.clone();
        let added = guard(py, || {
            self.add_one(py, &doc_id, &mut holder, |i, _| {
                record.get_item(names[i].bind(py))
            })
        });
        if added.is_err() {
            for key in record.keys() {
                self.check_extra(py, &key, &doc_id, Some(id_field))?;
            }
        }
        added
    }

    fn add_columns<'py>(
        &mut self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyList>,
        columns: Vec<Bound<'py, PyList>>,
    ) -> PyResult<()> {
        if columns.len() != self.schema.len() {
            return Err(new_error(
                py,
                "SchemaError",
                "one column per field is needed".into(),
            ));
        }
        for column in &columns {
            if column.len() != doc_ids.len() {
                return Err(new_error(
                    py,
                    "SchemaError",
                    format!(
                        "columns have {} values for {} doc ids",
                        column.len(),
                        doc_ids.len()
                    ),
                ));
            }
        }
        let ids: Vec<Bound<'py, PyAny>> = doc_ids.iter().collect();
        let mut holder = Holder::default();
        guard(py, || {
            self.check_rows(py, &ids, &mut holder, |row, index| {
                columns[index].get_item(row).map(Some)
            })?;
            for (row, doc_id) in ids.iter().enumerate() {
                self.add_one(py, doc_id, &mut holder, |index, _| {
                    columns[index].get_item(row).map(Some)
                })?;
            }
            Ok(())
        })
    }

    fn add_text_columns(
        &mut self,
        py: Python<'_>,
        doc_ids: (PyReadonlyArray1<'_, i64>, PyReadonlyArray1<'_, u8>),
        columns: Vec<(PyReadonlyArray1<'_, i64>, PyReadonlyArray1<'_, u8>)>,
    ) -> PyResult<()> {
        let error = |message: String| new_error(py, "SchemaError", message);
        if columns.len() != self.schema.len() {
            return Err(error("one column per field is needed".into()));
        }
        let ids =
            TextColumn::new(&doc_ids.0, &doc_ids.1).map_err(|e| error(format!("doc ids: {e}")))?;
        let mut text = Vec::with_capacity(columns.len());
        for (field, (offsets, data)) in self.schema.fields.iter().zip(&columns) {
            if !matches!(field.ty, FieldType::Str | FieldType::Bytes) {
                return Err(error(format!(
                    "field {:?} is {}, not a text column",
                    field.name, field.ty
                )));
            }
            let column = TextColumn::new(offsets, data)
                .map_err(|e| error(format!("field {:?}: {e}", field.name)))?;
            if column.len() != ids.len() {
                return Err(error(format!(
                    "columns have {} values for {} doc ids",
                    column.len(),
                    ids.len()
                )));
            }
            text.push(column);
        }
        let kinds: Vec<(bool, String)> = self
            .schema
            .fields
            .iter()
            .map(|f| (f.ty == FieldType::Str, f.name.clone()))
            .collect();
        guard(py, || {
            // Every row is checked before any is added, so a bad one leaves the writer as it was.
            self.check_room(py, ids.len())?;
            py.detach(|| check_text_rows(&ids, &text, &kinds))
                .py_err(py)?;
            let mut row = 0;
            while row < ids.len() {
                let writer = self.inner(py)?;
                // Rows until the batch is full, with Python released; then the usual flush.
                row = py
                    .detach(|| -> docstore_core::Result<usize> {
                        let mut values = Vec::with_capacity(text.len());
                        while row < ids.len() && !writer.needs_flush() {
                            values.clear();
                            for ((is_str, _), column) in kinds.iter().zip(&text) {
                                values.push(match is_str {
                                    // SAFETY: checked to be UTF-8 by `check_text_rows`.
                                    true => Value::Str(unsafe { column.str_unchecked(row) }),
                                    false => Value::Bytes(column.get(row)),
                                });
                            }
                            // SAFETY: as above.
                            writer.add(unsafe { ids.str_unchecked(row) }, &values)?;
                            row += 1;
                        }
                        Ok(row)
                    })
                    .py_err(py)?;
                if self.inner(py)?.needs_flush() {
                    self.flush(py)?;
                }
            }
            Ok(())
        })
    }

    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let writer = self.inner(py)?;
        let _ = writer;
        let writer = self.inner.take().expect("checked above");
        let summary = guard(py, || py.detach(|| writer.finish()).py_err(py))?;
        let out = PyDict::new(py);
        out.set_item("count", summary.count)?;
        out.set_item("raw_bytes", summary.raw_bytes)?;
        out.set_item("stored_bytes", summary.file_bytes)?;
        Ok(out)
    }

    fn abort(&mut self, py: Python<'_>) {
        if let Some(writer) = self.inner.take() {
            py.detach(|| drop(writer));
        }
    }
}

/// A str as the other messages show it (`"b"`), anything else as Python prints it.
fn quoted(obj: &Bound<'_, PyAny>) -> String {
    obj.extract::<String>()
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|_| obj.to_string())
}

/// A writer option as the core takes it (`default` when not given); a negative or huge value is
/// a `SchemaError` naming the option, as the core's own range checks are.
fn option<T: TryFrom<i64>>(
    py: Python<'_>,
    name: &str,
    value: Option<i64>,
    default: T,
) -> PyResult<T> {
    match value {
        None => Ok(default),
        Some(v) => T::try_from(v)
            .map_err(|_| new_error(py, "SchemaError", format!("{name}={v} is out of range"))),
    }
}

#[pymethods]
impl Writer {
    #[new]
    #[pyo3(signature = (path, fields, *, overwrite=false, level=None, dict_size=None, batch_bytes=None, key_buffer_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        fields: &Bound<'_, PyAny>,
        overwrite: bool,
        level: Option<i64>,
        dict_size: Option<i64>,
        batch_bytes: Option<i64>,
        key_buffer_bytes: Option<i64>,
    ) -> PyResult<Self> {
        let schema = schema_of(py, fields)?;
        let defaults = WriterOptions::default();
        let options = WriterOptions {
            level: option(py, "level", level, defaults.level)?,
            dict_size: option(py, "dict_size", dict_size, defaults.dict_size)?,
            batch_bytes: option(py, "batch_bytes", batch_bytes, defaults.batch_bytes)?,
            key_buffer_bytes: option(
                py,
                "key_buffer_bytes",
                key_buffer_bytes,
                defaults.key_buffer_bytes,
            )?,
            overwrite,
        };
        let state = State::create(py, path.clone(), schema, options)?;
        Ok(Writer {
            path,
            state: Mutex::new(state),
            owner: AtomicUsize::new(0),
            pid: docstore_core::process::id(),
        })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Field names mapped to their types, in schema order.
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.lock(py)?.fields(py)
    }

    /// Documents added so far.
    #[getter]
    fn count(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.lock(py)?.count())
    }

    /// True once the writer takes no more documents (finished, failed, aborted, or inherited by
    /// a forked child).
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        if self.in_forked_child() {
            return Ok(true);
        }
        Ok(self.lock(py)?.closed())
    }

    /// Adds one document: `add("id", text="...")` or `add("id", {"text": "..."})`.
    #[pyo3(signature = (doc_id, fields=None, /, **kwargs))]
    fn add<'py>(
        &self,
        py: Python<'py>,
        doc_id: &Bound<'py, PyAny>,
        fields: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<()> {
        self.lock(py)?.add(py, doc_id, fields, kwargs)
    }

    /// Adds a record dict that holds its own id under `id_field` (used by `docstore.build`).
    fn add_record<'py>(
        &self,
        py: Python<'py>,
        record: &Bound<'py, PyDict>,
        id_field: &str,
    ) -> PyResult<()> {
        self.lock(py)?.add_record(py, record, id_field)
    }

    /// Adds documents column by column: `columns` holds one list per field, in schema order.
    /// The whole batch is checked before any of it is added.
    fn _add_columns<'py>(
        &self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyList>,
        columns: Vec<Bound<'py, PyList>>,
    ) -> PyResult<()> {
        self.lock(py)?.add_columns(py, doc_ids, columns)
    }

    /// Adds documents whose id and every field are Arrow-style string/binary columns, given as
    /// (int64 offsets, uint8 data) pairs: no Python object per value, and Python released for the
    /// whole batch. `str` values (and ids) are checked to be UTF-8, all before any is added.
    fn _add_text_columns(
        &self,
        py: Python<'_>,
        doc_ids: (PyReadonlyArray1<'_, i64>, PyReadonlyArray1<'_, u8>),
        columns: Vec<(PyReadonlyArray1<'_, i64>, PyReadonlyArray1<'_, u8>)>,
    ) -> PyResult<()> {
        self.lock(py)?.add_text_columns(py, doc_ids, columns)
    }

    /// Completes the store and moves it into place. Returns a summary dict.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.lock(py)?.finish(py)
    }

    /// Abandons the store: nothing is written at the target path. Safe to call twice. In a
    /// forked child it does nothing: the store being written is the parent's.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        if self.in_forked_child() {
            return Ok(());
        }
        self.lock(py)?.abort(py);
        Ok(())
    }
}

/// What `Writer::add` would reject in text columns: ids that are empty, not UTF-8 or repeated
/// within the batch, `str` values that are not UTF-8. The first problem in row order is reported.
fn check_text_rows(
    ids: &TextColumn<'_>,
    columns: &[TextColumn<'_>],
    kinds: &[(bool, String)],
) -> docstore_core::Result<()> {
    let mut keys = Vec::with_capacity(ids.len());
    let mut check_row = |row: usize| -> docstore_core::Result<()> {
        let key = ids.str(row, "doc id")?;
        if key.is_empty() {
            return Err(docstore_core::Error::InvalidKey(format!(
                "the doc id of row {row} is empty"
            )));
        }
        keys.push(key);
        for ((is_str, name), column) in kinds.iter().zip(columns) {
            if *is_str {
                column.str(row, name)?;
            }
        }
        Ok(())
    };
    let checked = (0..ids.len()).try_for_each(&mut check_row);
    // Repeats among the rows before a bad one (and its id) come first in row order.
    match first_repeat(&keys) {
        Some(row) => Err(docstore_core::Error::DuplicateKey(keys[row].to_owned())),
        None => checked,
    }
}

/// A column of strings as Arrow lays them out: `offsets[i]..offsets[i + 1]` in `data`.
struct TextColumn<'a> {
    offsets: &'a [i64],
    data: &'a [u8],
}

impl<'a> TextColumn<'a> {
    fn new(
        offsets: &'a PyReadonlyArray1<'_, i64>,
        data: &'a PyReadonlyArray1<'_, u8>,
    ) -> Result<Self, String> {
        let (Ok(offsets), Ok(data)) = (offsets.as_slice(), data.as_slice()) else {
            return Err("offsets and data must be contiguous arrays".into());
        };
        let valid = !offsets.is_empty()
            && offsets[0] >= 0
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets[offsets.len() - 1] as u64 <= data.len() as u64;
        if !valid {
            return Err("offsets must be non-decreasing and within the data".into());
        }
        Ok(TextColumn { offsets, data })
    }

    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    fn get(&self, row: usize) -> &'a [u8] {
        &self.data[self.offsets[row] as usize..self.offsets[row + 1] as usize]
    }

    /// # Safety
    /// Row `row` must be valid UTF-8 (`str` said so).
    unsafe fn str_unchecked(&self, row: usize) -> &'a str {
        // SAFETY: the caller's promise.
        unsafe { std::str::from_utf8_unchecked(self.get(row)) }
    }

    fn str(&self, row: usize, what: &str) -> docstore_core::Result<&'a str> {
        std::str::from_utf8(self.get(row)).map_err(|_| {
            docstore_core::Error::Schema(format!("{what} of row {row} is not valid UTF-8"))
        })
    }
}
