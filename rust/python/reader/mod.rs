//! `docstore._docstore.Reader`: lookups over an open store. The Python class `docstore.DocStore`
//! subclasses it and adds the pure-Python conveniences (iteration, pickling, context manager).
//!
//! This module holds the class and its one `#[pymethods]` block, each method a forward to where
//! its concept lives: `open` (what a path or URL names, opened), `select` (what a lookup returns,
//! built from a record), `single` (reads by id or position, and the GIL rule), `batch` (batches,
//! chunked on the pool) and `info` (counts, sizes, counters, `verify`). Arguments are read in
//! `args`, batches decoded in `chunks`, Docs made in `doc`.

mod batch;
mod info;
mod open;
mod select;
mod single;

use crate::doc::doc_class;
use crate::errors::{new_error, Exc};
use arc_swap::{ArcSwapOption, Guard};
use docstore_core::{Collection, DataAccess};
use numpy::PyArray1;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

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

    fn store(&self, py: Python<'_>) -> PyResult<Arc<Collection>> {
        self.store.load_full().ok_or_else(|| self.closed_error(py))
    }

    /// The store for one short call: `arc_swap`'s guard takes no reference count (it notes the
    /// pointer in a slot of this thread), so threads of single lookups on one store do not all
    /// write one count's cache line, as `store()`'s `Arc` clone does.
    #[inline]
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
        Self::open(py, path, read, cache_dir, cache_bytes, storage_options)
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
        self.remote_stats(py)
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
        self.contains(py, key)
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.getitem(py, key)
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
        self.get_or(py, doc_id, default, field, fields)
    }

    /// The position (insertion index) of `doc_id`; KeyError when absent.
    fn position(&self, py: Python<'_>, doc_id: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.position_of(py, doc_id)
    }

    /// Positions of many doc ids as an int64 numpy array, -1 where an id is absent: searched in
    /// lockstep groups, in parallel, with Python released.
    fn positions<'py>(
        &self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        self.positions_impl(py, doc_ids)
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
        self.get_many_impl(py, doc_ids, field, fields)
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
        self.at_impl(py, index, field, fields)
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
        self.take_impl(py, positions, field, fields)
    }

    /// Loads the documents at `positions` ahead of their reads (the page cache, or a remote
    /// store's node cache), with Python released; returns the bytes fetched or asked for.
    fn prefetch<'py>(&self, py: Python<'py>, positions: &Bound<'py, PyAny>) -> PyResult<u64> {
        self.prefetch_impl(py, positions)
    }

    /// Loads every section but the documents, read whole (`Collection::load_index`); returns
    /// the bytes fetched or read.
    fn load_index(&self, py: Python<'_>) -> PyResult<u64> {
        self.load_index_impl(py)
    }

    /// Doc ids of positions `start..stop`, in insertion order; as a slice does, negative bounds
    /// count from the end and both are clamped to the store.
    fn keys_range<'py>(
        &self,
        py: Python<'py>,
        start: i64,
        stop: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        self.keys_range_impl(py, start, stop)
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
        self.take_columns_impl(py, positions, fields)
    }

    /// The store's identity: the checksum of its header, which holds every section's checksum.
    #[getter]
    fn fingerprint(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.store(py)?.fingerprint())
    }

    /// Counts and sizes: `count`, `raw_bytes`, `stored_bytes`, `ratio`, `level`, `dictionary_bytes`,
    /// and for a collection its `shards` (each with the same keys, and `path`).
    fn _info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.info(py)
    }

    /// The user metadata (format v5): the text of one JSON object, that of every shard in a
    /// collection; `None` for a store without.
    fn _metadata(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.store(py)?.metadata().map(str::to_owned))
    }

    /// The compression dictionary (of the first shard, in a collection): `Writer(dictionary=...)`
    /// takes it, so that the shards of one corpus share one.
    fn _dictionary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.dictionary(py)
    }

    /// Reads and checks every byte (checksums, index, every document); raises CorruptStoreError.
    /// `progress(done, total)` is called now and then (every 0.1 s) while it runs.
    #[pyo3(signature = (progress=None))]
    fn verify(&self, py: Python<'_>, progress: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.verify_impl(py, progress)
    }
}
