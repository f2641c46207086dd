//! `docstore._docstore.Writer`: builds a store from Python values. The Python class
//! `docstore.Writer` subclasses it (context manager, pyarrow input). How calls take turns at it
//! is in `turn`, its arguments are read in `args`, Arrow columns' buffers in `columns`.

mod turn;

use crate::args::{as_dict, key_of, option, schema_of};
use crate::columns::Buffers;
use crate::convert::{from_python, Holder};
use crate::errors::{guard, new_error, Exc, IntoPy};
use docstore_core::codec::{dictionary_for, MAX_TRAINING_BYTES};
use docstore_core::format::record::encode;
use docstore_core::repeats::first_repeat;
use docstore_core::{
    Columns, FieldType, Schema, Value, Writer as CoreWriter, WriterOptions, MAX_DOCS,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

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
    /// (`process::instance`: a descendant may get the same pid.)
    pid: u64,
    /// The target path, which needs no turn to read (`repr` works in a forked child too).
    path: PathBuf,
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

impl State {
    fn inner(&mut self, py: Python<'_>) -> PyResult<&mut CoreWriter> {
        let path = &self.path;
        self.inner.as_mut().ok_or_else(|| {
            let message = format!(
                "the writer of {} has already finished or failed",
                path.display()
            );
            new_error(py, Exc::Closed, message)
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
                        Exc::Schema,
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
            None => checked.and_then(|()| self.check_new(py, keys.iter().copied())),
        }
    }

    /// Fails on the first of `keys` that a document added before has: the core would refuse
    /// it mid-batch, where a batch is added whole or not at all.
    fn check_new<'k>(
        &mut self,
        py: Python<'_>,
        keys: impl Iterator<Item = &'k str>,
    ) -> PyResult<()> {
        let writer = self.inner(py)?;
        let count = writer.len();
        for (row, key) in keys.enumerate() {
            if let Some(first) = writer.position_of(key) {
                let second = count + row as u64;
                let key = key.to_owned();
                return Err(docstore_core::Error::DuplicateKeyAt { key, first, second }).py_err(py);
            }
        }
        Ok(())
    }

    /// Fails unless `rows` more documents fit in the store.
    fn check_room(&mut self, py: Python<'_>, rows: usize) -> PyResult<()> {
        let count = self.inner(py)?.len();
        if count.saturating_add(rows as u64) > MAX_DOCS {
            return Err(new_error(
                py,
                Exc::InvalidArgument, // as the core's own check of each document
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
                Exc::Schema,
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

fn convert_all<'a, 'py>(
    schema: &Schema,
    objects: &'a [Bound<'py, PyAny>],
    holder: &'a mut Holder<'py>,
    key: &str,
) -> PyResult<Vec<Value<'a>>> {
    // Arrays needing conversion are converted first, so that `holder` is no longer mutated
    // once values start borrowing from it.
    for (i, (field, obj)) in schema.fields.iter().zip(objects).enumerate() {
        if !(field.nullable && obj.is_none()) {
            holder.prepare(i, obj, field.ty, key, &field.name)?;
        }
    }
    let holder: &'a Holder<'py> = holder;
    let mut values = Vec::with_capacity(objects.len());
    for (i, (field, obj)) in schema.fields.iter().zip(objects).enumerate() {
        values.push(match field.nullable && obj.is_none() {
            true => Value::Null,
            false => from_python(obj, field.ty, holder, i, key, &field.name)?,
        });
    }
    Ok(values)
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
            dict.set_item(&field.name, field.type_name())?;
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
                    Exc::Schema,
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
                Exc::Schema,
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
                Exc::Schema,
                "one column per field is needed".into(),
            ));
        }
        for column in &columns {
            if column.len() != doc_ids.len() {
                return Err(new_error(
                    py,
                    Exc::Schema,
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

    fn add_arrow_columns<'py>(
        &mut self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyAny>,
        columns: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let error = |message: String| new_error(py, Exc::Schema, message);
        if columns.len() != self.schema.len() {
            return Err(error("one column per field is needed".into()));
        }
        let ids = Buffers::extract(doc_ids, FieldType::Str, "doc ids")?;
        let buffers = self
            .schema
            .fields
            .iter()
            .zip(&columns)
            .map(|(field, obj)| {
                Buffers::extract_field(obj, field, &format!("field {:?}", field.name))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let ids = ids.column().map_err(|e| error(format!("doc ids: {e}")))?;
        let mut borrowed = Vec::with_capacity(buffers.len());
        let mut valid = Vec::with_capacity(buffers.len());
        for (field, (validity, column)) in self.schema.fields.iter().zip(&buffers) {
            let validity = validity.as_ref().map(|v| v.as_slice());
            valid.push(validity.transpose().map_err(|_| {
                error(format!(
                    "field {:?}: the validity must be contiguous",
                    field.name
                ))
            })?);
            borrowed.push(
                column
                    .column()
                    .map_err(|e| error(format!("field {:?}: {e}", field.name)))?,
            );
        }
        guard(py, || {
            let schema = &self.schema;
            // Every row is checked before any is added, so a bad one leaves the writer as it was.
            let batch = py
                .detach(|| Columns::with_nulls(schema, ids, borrowed, valid))
                .py_err(py)?;
            self.check_room(py, batch.len())?;
            self.check_new(py, (0..batch.len()).map(|row| batch.key(row)))?;
            let mut row = 0;
            while row < batch.len() {
                let writer = self.inner(py)?;
                // Rows until the batch is full, with Python released; then the usual flush.
                row = py.detach(|| writer.add_columns(&batch, row)).py_err(py)?;
                if self.inner(py)?.needs_flush() {
                    self.flush(py)?;
                }
            }
            Ok(())
        })
    }

    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.inner(py)?; // a finished writer raises here
        let writer = self.inner.take().expect("checked above");
        let summary = guard(py, || py.detach(|| writer.finish()).py_err(py))?;
        let out = PyDict::new(py);
        out.set_item("count", summary.count)?;
        out.set_item("raw_bytes", summary.raw_bytes)?;
        out.set_item("stored_bytes", summary.file_bytes)?;
        Ok(out)
    }

    fn position_of(&mut self, py: Python<'_>, doc_id: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let key = key_of(py, doc_id)?;
        Ok(self.inner(py)?.position_of(key))
    }

    fn abort(&mut self, py: Python<'_>) {
        if let Some(writer) = self.inner.take() {
            py.detach(|| drop(writer));
        }
    }
}

/// The options of `Writer(...)`, each read as the writer reads it (unchecked).
#[allow(clippy::too_many_arguments)]
fn options_of(
    overwrite: bool,
    level: Option<&Bound<'_, PyAny>>,
    dict_size: Option<&Bound<'_, PyAny>>,
    batch_bytes: Option<&Bound<'_, PyAny>>,
    key_buffer_bytes: Option<&Bound<'_, PyAny>>,
    format_version: Option<&Bound<'_, PyAny>>,
    dictionary: Option<&[u8]>,
    metadata: Option<String>,
) -> PyResult<WriterOptions> {
    let defaults = WriterOptions::default();
    Ok(WriterOptions {
        level: option("level", level, defaults.level)?,
        dict_size: option("dict_size", dict_size, defaults.dict_size)?,
        batch_bytes: option("batch_bytes", batch_bytes, defaults.batch_bytes)?,
        key_buffer_bytes: option(
            "key_buffer_bytes",
            key_buffer_bytes,
            defaults.key_buffer_bytes,
        )?,
        overwrite,
        format_version: option("format_version", format_version, defaults.format_version)?,
        dictionary: dictionary.map(<[u8]>::to_vec),
        metadata,
    })
}

/// `_docstore.check_writer(fields, **options)`: raises what `Writer(path, fields, **options)`
/// raises for its fields and options, without creating a writer or any file.
#[pyfunction]
#[pyo3(signature = (fields, *, overwrite=false, level=None, dict_size=None, batch_bytes=None, key_buffer_bytes=None, format_version=None, dictionary=None, metadata=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_writer(
    py: Python<'_>,
    fields: &Bound<'_, PyAny>,
    overwrite: bool,
    level: Option<&Bound<'_, PyAny>>,
    dict_size: Option<&Bound<'_, PyAny>>,
    batch_bytes: Option<&Bound<'_, PyAny>>,
    key_buffer_bytes: Option<&Bound<'_, PyAny>>,
    format_version: Option<&Bound<'_, PyAny>>,
    dictionary: Option<&[u8]>,
    metadata: Option<String>,
) -> PyResult<()> {
    schema_of(py, fields)?;
    let options = options_of(
        overwrite,
        level,
        dict_size,
        batch_bytes,
        key_buffer_bytes,
        format_version,
        dictionary,
        metadata,
    )?;
    options.validate().py_err(py)
}

/// `_docstore.train_dictionary(samples, size, *, fields=None)`: the dictionary of at most `size`
/// bytes that a writer trains on a first batch of `samples`, by the same code
/// (`codec::dictionary_for`: its first 8 MiB). With `fields`, each sample is a document: a
/// sequence of its values in the fields' order, encoded as the writer encodes them, so that
/// the dictionary is the one `Writer(path, fields, dict_size=size)` trains on these documents;
/// without, each is the bytes of one record as they are.
#[pyfunction]
#[pyo3(signature = (samples, size=None, *, fields=None))]
pub(crate) fn train_dictionary<'py>(
    py: Python<'py>,
    samples: &Bound<'py, PyAny>,
    size: Option<&Bound<'py, PyAny>>,
    fields: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let defaults = WriterOptions::default();
    let size = option("size", size, defaults.dict_size)?;
    // A size the writer refuses is refused here, with its message.
    let checked = WriterOptions {
        dict_size: size,
        ..defaults
    };
    checked.validate().py_err(py)?;
    let mut records: Vec<Vec<u8>> = Vec::new();
    // Training reads no further than this; the rest of the samples is not taken.
    let mut room = MAX_TRAINING_BYTES;
    let mut take = |record: Vec<u8>| {
        room = room.saturating_sub(record.len());
        records.push(record);
        room > 0
    };
    guard(py, || {
        let Some(fields) = fields else {
            for sample in samples.try_iter()? {
                let sample = sample?;
                let bytes = sample.extract::<Vec<u8>>().map_err(|_| {
                    let kind = sample.get_type().name().map(|n| n.to_string());
                    let message = format!(
                        "samples must be bytes (or documents, with fields=), got {}",
                        kind.unwrap_or_default()
                    );
                    pyo3::exceptions::PyTypeError::new_err(message)
                })?;
                if !take(bytes) {
                    break;
                }
            }
            return Ok(());
        };
        let schema = schema_of(py, fields)?;
        let mut holder = Holder::default();
        for (row, sample) in samples.try_iter()?.enumerate() {
            let key = format!("sample {row}");
            let objects: Vec<Bound<'py, PyAny>> = sample?.try_iter()?.collect::<PyResult<_>>()?;
            if objects.len() != schema.len() {
                return Err(new_error(
                    py,
                    Exc::Schema,
                    format!(
                        "{key} has {} values for {} fields",
                        objects.len(),
                        schema.len()
                    ),
                ));
            }
            holder.clear();
            let values = convert_all(&schema, &objects, &mut holder, &key)?;
            let mut record = Vec::new();
            encode(&schema, &values, &mut record).py_err(py)?;
            if !take(record) {
                break;
            }
        }
        Ok(())
    })?;
    let dictionary = py.detach(|| dictionary_for(records.iter().map(Vec::as_slice), size));
    Ok(PyBytes::new(py, &dictionary))
}

/// A str as the other messages show it (`"b"`), anything else as Python prints it.
fn quoted(obj: &Bound<'_, PyAny>) -> String {
    obj.extract::<String>()
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|_| obj.to_string())
}

#[pymethods]
impl Writer {
    #[new]
    #[pyo3(signature = (path, fields, *, overwrite=false, level=None, dict_size=None, batch_bytes=None, key_buffer_bytes=None, format_version=None, dictionary=None, metadata=None, _every_id=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        fields: &Bound<'_, PyAny>,
        overwrite: bool,
        level: Option<&Bound<'_, PyAny>>,
        dict_size: Option<&Bound<'_, PyAny>>,
        batch_bytes: Option<&Bound<'_, PyAny>>,
        key_buffer_bytes: Option<&Bound<'_, PyAny>>,
        format_version: Option<&Bound<'_, PyAny>>,
        dictionary: Option<&[u8]>,
        metadata: Option<String>,
        _every_id: bool,
    ) -> PyResult<Self> {
        let schema = schema_of(py, fields)?;
        let options = options_of(
            overwrite,
            level,
            dict_size,
            batch_bytes,
            key_buffer_bytes,
            format_version,
            dictionary,
            metadata,
        )?;
        let mut state = State::create(py, path.clone(), schema, options)?;
        if _every_id {
            // `on_duplicate="first"/"last"` asks `position_of` of every id.
            state.inner(py)?.track_every_id();
        }
        Ok(Writer {
            path,
            state: Mutex::new(state),
            owner: AtomicUsize::new(0),
            pid: docstore_core::runtime::process::instance(),
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

    /// Adds documents given as the buffers of Arrow columns, one per field in schema order: the
    /// ids and `str`/`bytes` fields as (int64 offsets, uint8 data), `int64` and `float64` fields
    /// as arrays of that dtype, array fields as (int64 offsets, values of the field's dtype). No
    /// Python object per value, and Python released for the whole batch; every row is checked
    /// (ids non-empty and distinct, ids and `str` values UTF-8) before any is added.
    fn _add_arrow_columns<'py>(
        &self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyAny>,
        columns: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        self.lock(py)?.add_arrow_columns(py, doc_ids, columns)
    }

    /// The position of the document added with id `doc_id`, or None (for `on_duplicate`).
    fn position_of(&self, py: Python<'_>, doc_id: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        self.lock(py)?.position_of(py, doc_id)
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

/// `_docstore.publish_file(finished, target, *, overwrite=False)`: moves the finished store file
/// `finished` (in a directory beside `target`) to `target` as every writer publishes
/// (`publish::publish_file`): under the target's lock, never over anything but a store, and over
/// nothing at all without `overwrite` (`StoreExistsError`, even for a file that appeared since
/// the writer began).
#[pyfunction]
#[pyo3(signature = (finished, target, *, overwrite=false))]
pub(crate) fn publish_file(
    py: Python<'_>,
    finished: PathBuf,
    target: PathBuf,
    overwrite: bool,
) -> PyResult<()> {
    guard(py, || {
        py.detach(|| docstore_core::publish::publish_file(&finished, &target, overwrite))
            .py_err(py)
    })
}

/// `_docstore.lock_target(target)`: waits for the lock of `target` (`publish::lock_target`) and
/// holds it until `append` spends it or `release` (or leaving its `with` block) lets it go.
#[pyfunction]
pub(crate) fn lock_target(py: Python<'_>, target: PathBuf) -> PyResult<HeldTarget> {
    let held = guard(py, || {
        py.detach(|| docstore_core::publish::lock_target(&target))
            .py_err(py)
    })?;
    Ok(HeldTarget {
        held: Mutex::new(Some(held)),
    })
}

/// A target's lock, held (`lock_target`).
#[pyclass(frozen, module = "docstore._docstore")]
pub struct HeldTarget {
    held: Mutex<Option<docstore_core::publish::HeldTarget>>,
}

impl HeldTarget {
    /// `f` of the lock, held (a staging directory made under it); `ClosedError` once let go.
    pub(crate) fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&docstore_core::publish::HeldTarget) -> T,
    ) -> PyResult<T> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.as_ref() {
            Some(held) => Ok(f(held)),
            None => Err(new_error(
                py,
                Exc::Closed,
                "the target's lock was let go already (released, or spent by an append)".into(),
            )),
        }
    }

    fn take(&self, py: Python<'_>) -> PyResult<docstore_core::publish::HeldTarget> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
        held.ok_or_else(|| {
            new_error(
                py,
                Exc::Closed,
                "the target's lock was let go already (released, or spent by an append)".into(),
            )
        })
    }
}

#[pymethods]
impl HeldTarget {
    /// Appends `shards` to the target (`seal(target, shards, append=True)`) under this lock,
    /// which it lets go at the end; returns the number of documents in the collection.
    #[pyo3(signature = (shards, *, progress=None))]
    fn append(
        &self,
        py: Python<'_>,
        shards: Vec<PathBuf>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let held = self.take(py)?;
        crate::collection::sealing(py, progress.as_ref(), move |state| {
            held.append(&shards, state).map(|s| s.count)
        })
    }

    /// Lets the lock go (nothing if it is gone already).
    fn release(&self) {
        drop(self.held.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, exc, tb, /))]
    fn __exit__(&self, exc_type: &Bound<'_, PyAny>, exc: &Bound<'_, PyAny>, tb: &Bound<'_, PyAny>) {
        let _ = (exc_type, exc, tb); // the lock goes whatever ended the block
        self.release();
    }
}
