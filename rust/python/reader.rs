//! `docstore._docstore.Reader`: lookups over an open store. The Python class `docstore.DocStore`
//! subclasses it and adds the pure-Python conveniences (iteration, pickling, context manager).
//! Its arguments are read in `args`, batches decoded in `chunks`, Docs made in `doc`.

use crate::args::{field_names_arg, ids_of, plain_str, position_arg, positions_arg};
use crate::chunks::{in_chunks, in_chunks_then};
use crate::doc::{doc_class, raw_to_python, DocBuilder};
use crate::errors::{exception_class, guard, key_error, new_error, Exc, IntoPy};
use crate::gil::others_may_wait;
use crate::scratch::{with_single, Batches, Decoded};
use crate::text::{no_texts, RecordTexts, Wants};
use arc_swap::{ArcSwapOption, Guard};
use docstore_core::record;
use docstore_core::repeats::{distinct, Seen};
use docstore_core::storage::Source;
use docstore_core::{Collection, DataAccess, Located, RemoteOptions};
use numpy::PyArray1;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

enum Select {
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

/// An open store borrowed for one call (`Reader::store_for_call`): a guard that is only made
/// when the store is open, so it derefs to the `Collection` itself.
struct OpenStore(Guard<Option<Arc<Collection>>>);

impl std::ops::Deref for OpenStore {
    type Target = Collection;

    fn deref(&self) -> &Collection {
        self.0
            .as_deref()
            .expect("OpenStore is only made for an open store")
    }
}

#[pyclass(subclass, frozen, module = "docstore._docstore")]
pub struct Reader {
    store: ArcSwapOption<Collection>,
    path: PathBuf,
    /// The URL of a remote store or collection as given, credentials included (what reopens it
    /// in a DataLoader worker): never shown. `path` holds it redacted, for `.path`, `.url` and
    /// messages (`docstore_core::storage::url`).
    url: Option<String>,
    access: DataAccess,
    doc_class: Py<PyType>,
    field_names: Vec<String>,
}

impl Reader {
    fn store(&self, py: Python<'_>) -> PyResult<Arc<Collection>> {
        self.store.load_full().ok_or_else(|| self.closed_error(py))
    }

    /// The store for one short call: `arc_swap`'s guard takes no reference count (it notes the
    /// pointer in a slot of this thread), so threads of single lookups on one store do not all
    /// write one count's cache line, as `store()`'s `Arc` clone does.
    fn store_for_call(&self, py: Python<'_>) -> PyResult<OpenStore> {
        let guard = self.store.load();
        match *guard {
            Some(_) => Ok(OpenStore(guard)),
            None => Err(self.closed_error(py)),
        }
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        new_error(
            py,
            Exc::Closed,
            format!("store {} is closed", self.path.display()),
        )
    }

    fn field_index(&self, py: Python<'_>, name: &str) -> PyResult<usize> {
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
    fn select(
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
    fn build<'py>(
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

    /// The id of `pos`, whose record has just been read (and checked with this id).
    fn key_object<'py>(
        py: Python<'py>,
        store: &Collection,
        pos: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        // A remote store may fetch (its bytes evicted since, or healed): with Python released.
        let key = match store.may_block() {
            true => py.detach(|| store.key_at_after_read(pos)),
            false => store.key_at_after_read(pos),
        };
        Ok(PyString::new(py, key.py_err(py)?).into_any())
    }

    fn resolve_position(store: &Collection, index: i64) -> PyResult<u64> {
        let len = store.len() as i64;
        let pos = if index < 0 { index + len } else { index };
        if pos < 0 || pos >= len {
            return Err(PyIndexError::new_err(format!(
                "position {index} out of range for a store of {len} documents"
            )));
        }
        Ok(pos as u64)
    }
}

#[pymethods]
impl Reader {
    #[new]
    #[pyo3(signature = (path, *, read="mmap", cache_dir=None, cache_bytes=None, storage_options=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        read: &str,
        cache_dir: Option<PathBuf>,
        cache_bytes: Option<u64>,
        storage_options: Option<HashMap<String, String>>,
    ) -> PyResult<Self> {
        let access = match read {
            "mmap" => DataAccess::Mmap,
            "pread" => DataAccess::Pread,
            other => {
                return Err(PyValueError::new_err(format!(
                    "read must be \"mmap\" or \"pread\", got {other:?}"
                )))
            }
        };
        let url = path
            .to_str()
            .filter(|p| is_url(p) && !p.starts_with("file://"))
            .map(str::to_string);
        let path = match path.to_str().and_then(|p| p.strip_prefix("file://")) {
            Some(local) => PathBuf::from(local),
            None => path,
        };
        if let Some(url) = url {
            let mut options: Vec<(String, String)> =
                storage_options.unwrap_or_default().into_iter().collect();
            options.sort();
            return guard(py, || {
                let store = py
                    .detach(|| {
                        RemoteOptions::new(options, cache_dir, cache_bytes)
                            .and_then(|o| Source::remote(&url, o))
                            .and_then(|source| Collection::open_source(&url, source))
                    })
                    .py_err(py)?;
                // A server that ignores Range: its files were read whole (docs/remote.md). At
                // the caller of docstore.open (stacklevel 2: this runs under open()).
                if let Some(warning) = store.source().take_warning() {
                    let warning = std::ffi::CString::new(warning.replace('\0', ""))
                        .expect("no NUL left in it");
                    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
                    PyErr::warn(py, &category, &warning, 2)?;
                }
                let shown = docstore_core::storage::url::redact(&url);
                Reader::with_store(py, store, PathBuf::from(shown), Some(url), DataAccess::Mmap)
            });
        }
        // Absolute, so that a pickled store reopens the same file whatever the working directory
        // of the process that unpickles it (or of this one, later).
        let path = std::path::absolute(&path).unwrap_or(path);
        guard(py, || {
            let store = py
                .detach(|| Collection::open(&path, access))
                .map_err(|e| match e {
                    docstore_core::Error::Io(io) => crate::errors::to_pyerr(
                        py,
                        docstore_core::Error::Io(std::io::Error::new(
                            io.kind(),
                            if path.as_os_str().is_empty() {
                                format!("'' (an empty path): {io}")
                            } else {
                                format!("{}: {io}", path.display())
                            },
                        )),
                    ),
                    e => crate::errors::to_pyerr(py, e),
                })?;
            Reader::with_store(py, store, path, None, access)
        })
    }

    /// The path the store was opened from, made absolute; the URL of a remote store, its
    /// credentials (userinfo, query string) redacted.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.url {
            Some(_) => Ok(PyString::new(py, &self.path.to_string_lossy()).into_any()),
            None => self.path.clone().into_pyobject(py).map(Bound::into_any),
        }
    }

    /// The URL of a remote store or collection, its credentials redacted; `None` for a local one.
    #[getter]
    fn url(&self) -> Option<String> {
        self.url
            .as_ref()
            .map(|_| self.path.to_string_lossy().into_owned())
    }

    /// The URL that reopens a remote store: as given (`credentials`), or without what may hold
    /// a secret (userinfo, query string, fragment); `None` for a local one.
    fn _reopen_url(&self, credentials: bool) -> Option<String> {
        let url = self.url.as_ref()?;
        match credentials {
            true => Some(url.clone()),
            false => docstore_core::storage::url::without_credentials(url),
        }
    }

    /// Counters of a remote store since it was opened (requests, bytes, round trips, cache
    /// hits, retries, heals, peak requests in flight, bytes the cache holds); `None` for a local
    /// one.
    fn _remote_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let store = self.store(py)?;
        let Some(stats) = store.source().stats() else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        dict.set_item("requests", stats.requests.load(Ordering::Relaxed))?;
        dict.set_item("bytes", stats.bytes.load(Ordering::Relaxed))?;
        dict.set_item("data_bytes", stats.data_bytes.load(Ordering::Relaxed))?;
        dict.set_item("round_trips", stats.rounds.load(Ordering::Relaxed))?;
        dict.set_item("retries", stats.retries.load(Ordering::Relaxed))?;
        dict.set_item("heals", stats.heals.load(Ordering::Relaxed))?;
        dict.set_item(
            "peak_in_flight",
            stats.peak_in_flight.load(Ordering::Relaxed),
        )?;
        let files = store.index().into_iter().chain(store.shards());
        let (mut held, mut usage) = (0u64, 0u64);
        for file in files.filter_map(|s| s.remote_file()) {
            held += file.cache().held();
            usage = file.cache().usage();
        }
        dict.set_item("cache_bytes_held", held)?;
        dict.set_item("cache_dir_bytes", usage)?;
        Ok(Some(dict))
    }

    /// How documents are read: "mmap" (through the memory map) or "pread" (system calls).
    #[getter]
    fn read(&self) -> &'static str {
        match self.access {
            DataAccess::Mmap => "mmap",
            DataAccess::Pread => "pread",
        }
    }

    /// Field names mapped to their types, in schema order.
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store(py)?;
        let dict = PyDict::new(py);
        for field in &store.schema().fields {
            dict.set_item(&field.name, field.type_name())?;
        }
        Ok(dict)
    }

    /// The Doc class of this store's documents.
    #[getter]
    fn doc_class(&self, py: Python<'_>) -> Py<PyType> {
        self.doc_class.clone_ref(py)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.load().is_none()
    }

    /// Releases the mapping. Lookups already running finish first; later ones raise ClosedError.
    fn close(&self) {
        self.store.store(None);
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.store(py)?.len() as usize)
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
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

    fn __getitem__<'py>(
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

    /// The document with id `doc_id` (or its field `field`), or `default` when absent.
    #[pyo3(signature = (doc_id, default=None, *, field=None, fields=None))]
    fn get<'py>(
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

    /// The position (insertion index) of `doc_id`; KeyError when absent.
    fn position(&self, py: Python<'_>, doc_id: &Bound<'_, PyAny>) -> PyResult<u64> {
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

    /// Positions of many doc ids as an int64 numpy array, -1 where an id is absent: searched in
    /// lockstep groups, in parallel, with Python released.
    fn positions<'py>(
        &self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let store = self.store(py)?;
        let objects: Vec<Bound<'py, PyAny>> = ids_of(doc_ids)?.collect::<PyResult<_>>()?;
        let keys: Vec<&[u8]> = objects
            .iter()
            .map(|o| {
                o.cast::<PyString>()
                    .ok()
                    .and_then(|k| k.to_str().ok())
                    .map_or(&b""[..], str::as_bytes)
            })
            .collect();
        guard(py, || {
            let items = py.detach(|| locate(&store, &keys)).py_err(py)?;
            let found = py
                .detach(|| {
                    in_chunks(&items, &mut Vec::<()>::new(), |chunk, _| {
                        store.confirm_located(chunk)
                    })
                })
                .py_err(py)?;
            let positions: Vec<i64> = found
                .into_iter()
                .flatten()
                .map(|p| p.map_or(-1, |p| p as i64))
                .collect();
            Ok(PyArray1::from_vec(py, positions))
        })
    }

    /// Documents of many ids, decoded in parallel: a dict in request order, missing ids omitted,
    /// keyed by the ids as plain `str` (an `np.str_` id comes back as the `str` it holds).
    #[pyo3(signature = (doc_ids, *, field=None, fields=None))]
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyAny>,
        field: Option<&str>,
        fields: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store(py)?;
        let select = self.select(py, field, fields)?;
        // Keep the id objects: they become the dict keys and doc.doc_id without new strings.
        // A repeated id is a repeated dict key: each distinct id is kept (and read) once, in
        // first-seen order (the order a dict keeps), as the ids come, so that memory grows
        // with the distinct ids, not with the ids given.
        fn text<'a>(id: &'a Bound<'_, PyString>) -> &'a [u8] {
            id.to_str().map_or(&b""[..], str::as_bytes)
        }
        // Sized for the ids given (when they have a length), at most 64k ahead: a generator
        // or a huge list of repeats still grows with the distinct ids only.
        let hint = doc_ids.len().unwrap_or(0).min(1 << 16);
        let mut objects: Vec<Bound<'py, PyString>> = Vec::with_capacity(hint);
        let mut seen = Seen::with_capacity(hint);
        for id in ids_of(doc_ids)? {
            let Ok(id) = id?.cast_into::<PyString>().map(plain_str) else {
                continue;
            };
            // Python's hash of a str, computed once and kept in it: the result dict needs it too
            // (hashing the bytes again with xxh3 cost ~30 instructions an id).
            let hash = id.hash()? as u64;
            let same = |d: usize| {
                let earlier = objects[d].as_any();
                earlier.is(&id) || PyAnyMethods::eq(earlier, &id).unwrap_or(false)
            };
            if seen.insert(hash, same).is_none() {
                objects.push(id);
            }
        }
        let keys: Vec<&[u8]> = objects.iter().map(text).collect();
        guard(py, || {
            let mut batches = Batches::take();
            let out = PyDict::new(py);
            let mut objects = objects.iter();
            // Per chunk of keys: the positions of those found, whose records `decoded` holds.
            let then = |decoded: &Decoded, positions: Vec<Option<u64>>| {
                let mut indices = 0..decoded.records.len();
                // `positions` first: zip stops on it without taking an id from the next chunk.
                for (pos, object) in positions.iter().zip(objects.by_ref()) {
                    if pos.is_some() {
                        let i = indices.next().expect("one record per found key");
                        let value = self.build(
                            py,
                            &store,
                            &select,
                            || Ok((*object).clone().into_any()),
                            decoded.records.get(i),
                            decoded.texts.record(i),
                        )?;
                        out.set_item(object, value)?;
                    }
                }
                Ok(())
            };
            // A remote batch is searched whole first, so that its fetches are a few rounds for
            // the whole batch. A local one is searched chunk by chunk where each chunk is read:
            // one pass over the pool, not two (each pass waits for the pool's threads to wake).
            match store.may_block() {
                true => {
                    let items = py.detach(|| store.locate_batch(&keys)).py_err(py)?;
                    let read = |items: &[(&[u8], Option<Located>)], decoded: &mut Decoded| {
                        decoded.read_located(&store, items, &select)
                    };
                    in_chunks_then(py, &items, &mut batches, read, then)
                }
                false => {
                    let read = |keys: &[&[u8]], decoded: &mut Decoded| {
                        decoded.read_located(&store, &store.locate_batch(keys)?, &select)
                    };
                    in_chunks_then(py, &keys, &mut batches, read, then)
                }
            }?;
            Ok(out)
        })
    }

    /// The document at position `index` (negative counts from the end).
    #[pyo3(signature = (index, *, field=None, fields=None))]
    fn at<'py>(
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
                self.build(
                    py,
                    store,
                    &select,
                    || Self::key_object(py, store, pos),
                    decoded.records.get(0),
                    decoded.texts.record(0),
                )
            })
        })
    }

    /// The documents at `positions`, decoded in parallel, as a list in the same order.
    #[pyo3(signature = (positions, *, field=None, fields=None))]
    fn take<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
        field: Option<&str>,
        fields: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let store = self.store(py)?;
        let select = self.select(py, field, fields)?;
        let positions = positions_arg(positions)?;
        let mut positions = positions
            .into_iter()
            .map(|i| Self::resolve_position(&store, i))
            .collect::<PyResult<Vec<u64>>>()?;
        // Each distinct position is read and decoded once; its repeats share the object made.
        let shared = distinct(&positions, |&p| p.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        if let Some(d) = &shared {
            positions = d.firsts.iter().map(|&row| positions[row]).collect();
        }
        guard(py, || {
            py.detach(|| store.prefetch_records(&positions))
                .py_err(py)?;
            let mut batches = Batches::take();
            let mut items = Vec::with_capacity(positions.len());
            let mut at = positions.iter();
            let read = |chunk: &[u64], decoded: &mut Decoded| decoded.read(&store, chunk, &select);
            in_chunks_then(py, &positions, &mut batches, read, |decoded, ()| {
                for (i, &pos) in (0..decoded.records.len()).zip(at.by_ref()) {
                    items.push(self.build(
                        py,
                        &store,
                        &select,
                        || Self::key_object(py, &store, pos),
                        decoded.records.get(i),
                        decoded.texts.record(i),
                    )?);
                }
                Ok(())
            })?;
            match shared {
                Some(d) => PyList::new(py, d.of_row.iter().map(|&i| &items[i])),
                None => PyList::new(py, items),
            }
        })
    }

    /// Doc ids of positions `start..stop`, in insertion order; as a slice does, negative bounds
    /// count from the end and both are clamped to the store.
    fn keys_range<'py>(
        &self,
        py: Python<'py>,
        start: i64,
        stop: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let store = self.store(py)?;
        let n = store.len() as i64;
        let clamp = |i: i64| (if i < 0 { i + n } else { i }).clamp(0, n) as u64;
        let (start, stop) = (clamp(start), clamp(stop));
        guard(py, || {
            // Read with Python released (a remote store may fetch, a damaged one heal: a server
            // in this very process must be able to answer), each id proved by its document's
            // check as a document read is; into one buffer, made `str`s afterwards.
            let range = start.min(stop)..stop;
            let mut text = String::new();
            let mut ends = Vec::with_capacity((range.end - range.start) as usize);
            py.detach(|| {
                store.prefetch_keys(range.clone())?;
                store.keys_in(range, |_, k| {
                    text.push_str(k);
                    ends.push(text.len());
                    Ok(())
                })
            })
            .py_err(py)?;
            let mut begin = 0;
            let keys = ends.iter().map(|&end| {
                let key = PyString::new(py, &text[begin..end]);
                begin = end;
                key
            });
            PyList::new(py, keys)
        })
    }

    /// Doc ids and the fields `fields` of `positions` as flat buffers: `(ids, [columns])`,
    /// each `(int64 offsets or None, uint8 data)`, the layout of Arrow arrays (`arrow_read`);
    /// what `docstore.ray` and `docstore.spark` build their Arrow blocks from, with no Python
    /// object per document.
    fn _take_columns<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
        fields: Vec<String>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let store = self.store(py)?;
        let indices = (fields.iter())
            .map(|name| self.field_index(py, name))
            .collect::<PyResult<Vec<_>>>()?;
        let positions = positions_arg(positions)?
            .into_iter()
            .map(|i| Self::resolve_position(&store, i))
            .collect::<PyResult<Vec<u64>>>()?;
        crate::arrow_read::take_columns(py, &store, &positions, &indices)
    }

    /// The store's identity: the checksum of its header, which holds every section's checksum.
    #[getter]
    fn fingerprint(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.store(py)?.fingerprint())
    }

    /// Counts and sizes: `count`, `raw_bytes`, `stored_bytes`, `ratio`, `level`, `dictionary_bytes`,
    /// and for a collection its `shards` (each with the same keys, and `path`).
    fn _info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store(py)?;
        let describe = |shard: &docstore_core::Store<docstore_core::StoreFile>| -> PyResult<_> {
            let header = shard.header();
            let info = PyDict::new(py);
            info.set_item("count", header.count)?;
            info.set_item("raw_bytes", header.raw_bytes)?;
            info.set_item("stored_bytes", shard.file_len())?;
            // As the writer's `level=` takes it: the header's 0xFF (none) is -1.
            info.set_item("level", header.level as i8)?;
            info.set_item("dictionary_bytes", shard.dictionary().len())?;
            info.set_item("format_version", header.version)?;
            info.set_item("checked_reads", shard.checked())?;
            Ok(info)
        };
        let shards = store.shards();
        if !store.is_collection() {
            return describe(&shards[0]);
        }
        let info = PyDict::new(py);
        let list = PyList::empty(py);
        let (mut raw, mut dictionary) = (0u64, 0usize);
        for (shard, path) in shards.iter().zip(store.shard_paths()) {
            let item = describe(shard)?;
            match &self.url {
                Some(_) => item.set_item("path", path.to_string_lossy())?,
                None => item.set_item("path", path)?,
            }
            list.append(item)?;
            raw += shard.header().raw_bytes;
            dictionary += shard.dictionary().len();
        }
        let levels: std::collections::BTreeSet<i8> =
            shards.iter().map(|s| s.header().level as i8).collect();
        info.set_item("count", store.len())?;
        info.set_item("raw_bytes", raw)?;
        info.set_item("stored_bytes", store.file_len())?;
        // One level when the shards agree, else None.
        let level = (levels.len() == 1)
            .then(|| levels.first().copied())
            .flatten();
        info.set_item("level", level)?;
        info.set_item("dictionary_bytes", dictionary)?;
        // The oldest file's: what `docstore upgrade` would change.
        let versions = shards
            .iter()
            .chain(store.index())
            .map(|s| s.header().version);
        info.set_item("format_version", versions.min())?;
        info.set_item("checked_reads", store.checked())?;
        info.set_item("shards", list)?;
        Ok(info)
    }

    /// The compression dictionary (of the first shard, in a collection): `Writer(dictionary=...)`
    /// takes it, so that the shards of one corpus share one.
    fn _dictionary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let store = self.store(py)?;
        Ok(pyo3::types::PyBytes::new(
            py,
            store.shards()[0].dictionary(),
        ))
    }

    /// Reads and checks every byte (checksums, index, every document); raises CorruptStoreError.
    /// `progress(done, total)` is called now and then (every 0.1 s) while it runs.
    #[pyo3(signature = (progress=None))]
    fn verify(&self, py: Python<'_>, progress: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let store = self.store(py)?;
        let Some(progress) = progress else {
            return guard(py, || py.detach(|| store.verify()).py_err(py));
        };
        let total = store.verify_steps();
        let done = std::sync::atomic::AtomicU64::new(0);
        guard(py, || {
            let counts = || (done.load(std::sync::atomic::Ordering::Relaxed), total);
            crate::progress::reporting(py, &progress, counts, || store.verify_counting(&done))
        })
    }
}

/// Whether `path` is a URL (`scheme://...`) rather than a path.
fn is_url(path: &str) -> bool {
    match path.split_once("://") {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

impl Reader {
    fn with_store(
        py: Python<'_>,
        store: Collection,
        path: PathBuf,
        url: Option<String>,
        access: DataAccess,
    ) -> PyResult<Reader> {
        let field_names: Vec<String> = store
            .schema()
            .fields
            .iter()
            .map(|f| f.name.clone())
            .collect();
        let doc_class = doc_class(py, &field_names)?.unbind();
        Ok(Reader {
            store: ArcSwapOption::from_pointee(store),
            path,
            url,
            access,
            doc_class,
            field_names,
        })
    }

    fn get_impl<'py>(
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
                self.build(
                    py,
                    store,
                    select,
                    || Ok(key.clone().into_any()),
                    decoded.records.get(0),
                    decoded.texts.record(0),
                )
                .map(Some)
            })
        })
    }
}

/// Each key with where `Collection::locate_batch` found it: the batch searched once (before it
/// is read chunk by chunk). A remote store's batch is one search, so that its fetches are a few
/// rounds for the whole batch; a local one is searched in chunks on the pool's threads.
fn locate<'k>(
    store: &Collection,
    keys: &[&'k [u8]],
) -> docstore_core::Result<Vec<(&'k [u8], Option<Located>)>> {
    if store.may_block() {
        return store.locate_batch(keys);
    }
    let mut parts = in_chunks(keys, &mut Vec::<()>::new(), |chunk, _| {
        store.locate_batch(chunk)
    })?;
    Ok(match parts.len() {
        1 => parts.pop().expect("one part"),
        _ => parts.concat(),
    })
}
