//! `docstore._docstore.Reader`: lookups over an open store. The Python class `docstore.DocStore`
//! subclasses it and adds the pure-Python conveniences (iteration, pickling, context manager).

use crate::convert::to_python;
use crate::errors::{guard, key_error, new_error, IntoPy};
use crate::scratch::{Batches, Decoded};
use crate::text::{Layout, RecordTexts, Wants};
use arc_swap::ArcSwapOption;
use docstore_core::record::{self, RawValue};
use docstore_core::Mmap;
use docstore_core::{parallel, DataAccess, Store};
use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

/// Batches smaller than this decode on the calling thread: waking the pool's threads costs more
/// than decoding a few dozen short documents (measured ~10x slower for 32 passages on a busy
/// 2-core machine).
const PARALLEL_MIN: usize = 256;
/// Keys or positions per parallel task: several prefetch groups, few tasks.
const CHUNK: usize = 64;

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

#[pyclass(subclass, frozen, module = "docstore._docstore")]
pub struct Reader {
    store: ArcSwapOption<Store<Mmap>>,
    path: PathBuf,
    access: DataAccess,
    doc_class: Py<PyType>,
    field_names: Vec<String>,
}

impl Reader {
    fn store(&self, py: Python<'_>) -> PyResult<Arc<Store<Mmap>>> {
        self.store.load_full().ok_or_else(|| {
            new_error(
                py,
                "ClosedError",
                format!("store {} is closed", self.path.display()),
            )
        })
    }

    fn field_index(&self, py: Python<'_>, name: &str) -> PyResult<usize> {
        self.field_names
            .iter()
            .position(|f| f == name)
            .ok_or_else(|| {
                new_error(
                    py,
                    "SchemaError",
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
        fields: Option<Vec<String>>,
    ) -> PyResult<Select> {
        match (field, fields) {
            (Some(_), Some(_)) => Err(new_error(
                py,
                "SchemaError",
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
        store: &Store<Mmap>,
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

    fn key_object<'py>(
        py: Python<'py>,
        store: &Store<Mmap>,
        pos: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyString::new(py, store.key_at(pos).py_err(py)?).into_any())
    }

    fn resolve_position(store: &Store<Mmap>, index: i64) -> PyResult<u64> {
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

/// A position argument: an int beyond 64 bits is out of range for any store (`IndexError`, as a
/// list says), not an `OverflowError`.
fn position_arg(index: &Bound<'_, PyAny>) -> PyResult<i64> {
    index.extract::<i64>().map_err(|err| {
        if err.is_instance_of::<PyOverflowError>(index.py()) {
            PyIndexError::new_err(format!("position {index} out of range"))
        } else {
            err
        }
    })
}

/// Positions from a list, tuple or range of ints, a 1-D integer array (numpy, or what numpy reads
/// without a copy, such as a CPU torch tensor) or any other iterable of ints. A boolean array is
/// refused: it is a mask, not positions.
fn positions_arg(positions: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
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
fn ids_of<'py>(doc_ids: &Bound<'py, PyAny>) -> PyResult<Bound<'py, pyo3::types::PyIterator>> {
    if doc_ids.is_instance_of::<PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "expected a collection of doc ids, got one str (for one id, use get() or [])",
        ));
    }
    doc_ids.try_iter()
}

/// `f` over chunks of `items`, each chunk with its own `scratch` (emptied first, grown as
/// needed, left filled for the caller): on the calling thread for small batches (or when the
/// pool is set to one thread or busy with another thread's batch), else on the calling thread
/// and the pool's together.
fn in_chunks<T: Sync, S: Default + Clearable + Send, R: Send>(
    items: &[T],
    scratch: &mut Vec<S>,
    f: impl Fn(&[T], &mut S) -> docstore_core::Result<R> + Sync,
) -> docstore_core::Result<Vec<R>> {
    let pool = if items.len() < PARALLEL_MIN {
        None
    } else {
        parallel::claim()
    };
    let chunk = if pool.is_none() {
        items.len().max(1)
    } else {
        CHUNK
    };
    let chunks = items.len().div_ceil(chunk);
    if scratch.len() < chunks {
        scratch.resize_with(chunks, S::default);
    }
    // All of it: batches kept from a larger call must not pass stale records to the caller.
    scratch.iter_mut().for_each(Clearable::clear);
    let scratch = &mut scratch[..chunks];
    let Some(pool) = pool else {
        return items
            .chunks(chunk)
            .zip(scratch.iter_mut())
            .map(|(items, s)| f(items, s))
            .collect();
    };
    // Chunks are claimed in turn by the calling thread and the pool's, each with its scratch.
    let slots: Vec<Slot<'_, S, R>> = scratch.iter_mut().map(|s| Mutex::new((s, None))).collect();
    let next = AtomicUsize::new(0);
    pool.run_with_caller(|| loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = slots.get(k) else { break };
        // Never contended: each chunk index is claimed once.
        let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (scratch, result) = &mut *slot;
        let end = (k * chunk + chunk).min(items.len());
        *result = Some(f(&items[k * chunk..end], scratch));
    });
    slots
        .into_iter()
        .map(|slot| {
            let (_, result) = slot.into_inner().unwrap_or_else(|p| p.into_inner());
            result.expect("every chunk ran")
        })
        .collect()
}

/// `f` over chunks of `items` as `in_chunks` does (with Python released), then `then` on each
/// chunk's scratch and result, in order, with Python held. With the pool, the calling thread
/// hands a chunk to `then` as soon as it and those before it are done, between decoding chunks
/// of its own: making the Python objects, which only one thread can do, overlaps the pool's
/// decoding instead of waiting for all of it. Python is held only while `then` runs, so waiting
/// for the pool (which may be busy with another thread's work) never blocks other Python threads.
fn in_chunks_then<T: Sync, S: Default + Clearable + Send, R: Send>(
    py: Python<'_>,
    items: &[T],
    scratch: &mut Vec<S>,
    f: impl Fn(&[T], &mut S) -> docstore_core::Result<R> + Sync,
    mut then: impl FnMut(&S, R) -> PyResult<()>,
) -> PyResult<()> {
    let pool = if items.len() < PARALLEL_MIN {
        None
    } else {
        parallel::claim()
    };
    let Some(pool) = pool else {
        let results = py.detach(|| in_chunks(items, scratch, &f)).py_err(py)?;
        return scratch
            .iter()
            .zip(results)
            .try_for_each(|(s, r)| then(s, r));
    };
    let chunks = items.len().div_ceil(CHUNK);
    if scratch.len() < chunks {
        scratch.resize_with(chunks, S::default);
    }
    scratch.iter_mut().for_each(Clearable::clear);
    let slots: Vec<Slot<'_, S, R>> = scratch[..chunks]
        .iter_mut()
        .map(|s| Mutex::new((s, None)))
        .collect();
    let next = AtomicUsize::new(0);
    // Claims the next chunk and runs `f` on it, its slot locked meanwhile; false when none is left.
    let decode_one = || {
        let k = next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = slots.get(k) else {
            return false;
        };
        let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (scratch, result) = &mut *slot;
        let end = (k * CHUNK + CHUNK).min(items.len());
        *result = Some(f(&items[k * CHUNK..end], scratch));
        true
    };
    let then = OnThisThread(&mut then);
    py.detach(|| {
        pool.run_beside(
            || while decode_one() {},
            || {
                let then = then; // the whole wrapper, not its field
                let mut handed = 0;
                let mut hand_over = || loop {
                    let more = decode_one();
                    while handed < chunks {
                        let Some(mut slot) = finished(&slots[handed], !more) else {
                            break;
                        };
                        let (scratch, result) = &mut *slot;
                        let result = result.take();
                        Python::attach(|py| match result {
                            Some(result) => result.py_err(py).and_then(|r| (then.0)(scratch, r)),
                            // Its decoding thread panicked (the panic resurfaces as the pool's
                            // scope ends, and `guard` reports it).
                            None => Err(new_error(
                                py,
                                "InternalError",
                                "a decoding thread failed".into(),
                            )),
                        })?;
                        handed += 1;
                    }
                    if !more && handed == chunks {
                        return Ok(());
                    }
                };
                let outcome = hand_over();
                // Whatever is left (after an error) is no one's: helpers yet to start stop at once.
                next.store(chunks, Ordering::Relaxed);
                outcome
            },
        )
    })
}

/// The slot of a chunk once decoded, locked; `None` if it is not yet (unless `wait`: then once
/// it is). A slot whose decoding thread panicked counts as decoded, with no result.
fn finished<'a, 's, S, R>(
    slot: &'a Slot<'s, S, R>,
    wait: bool,
) -> Option<MutexGuard<'a, SlotState<'s, S, R>>> {
    loop {
        let guard = match slot.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if !wait => return None,
            // Being decoded: wait until its thread lets go.
            Err(TryLockError::WouldBlock) => {
                drop(slot.lock());
                continue;
            }
        };
        if guard.1.is_some() {
            return Some(guard);
        }
        // Claimed but not yet locked by its thread (or not claimed yet, while this thread decodes).
        drop(guard);
        if !wait {
            return None;
        }
        std::thread::yield_now();
    }
}

/// What holds Python objects (a closure over them, say), carried by the thread that owns it
/// through a section where Python is released, to be used again only on that thread and only
/// with Python held (`Python::attach`). It is never sent to another thread.
struct OnThisThread<T>(T);

// SAFETY: see above: the value never leaves the thread that made it, and is only used with
// Python held; `Send` is claimed only to pass it into `Python::detach`, which runs its closure on
// the calling thread.
unsafe impl<T> Send for OnThisThread<T> {}

/// One chunk's scratch and, once it has run, its result.
type Slot<'a, S, R> = Mutex<SlotState<'a, S, R>>;
type SlotState<'a, S, R> = (&'a mut S, Option<docstore_core::Result<R>>);

/// Per-chunk scratch that `in_chunks` empties before use.
trait Clearable {
    fn clear(&mut self);
}

impl Clearable for Decoded {
    fn clear(&mut self) {
        Decoded::clear(self);
    }
}

/// No scratch.
impl Clearable for () {
    fn clear(&mut self) {}
}

/// A Doc (an instance of a namedtuple subclass) being filled in place.
struct DocBuilder<'py> {
    doc: Bound<'py, PyAny>,
}

impl<'py> DocBuilder<'py> {
    fn new(cls: &Bound<'py, PyType>, len: usize) -> PyResult<Self> {
        // SAFETY: the Doc class is a tuple subclass with empty __slots__, so an instance is a
        // plain tuple of `len` slots; tp_alloc zero-fills them (what tuple.__new__ does for
        // subclasses). A slot left NULL by an error is fine: tuple deallocation skips NULLs.
        unsafe {
            let obj =
                pyo3::ffi::PyType_GenericAlloc(cls.as_type_ptr(), len as pyo3::ffi::Py_ssize_t);
            if obj.is_null() {
                return Err(PyErr::fetch(cls.py()));
            }
            Ok(DocBuilder {
                doc: Bound::from_owned_ptr(cls.py(), obj),
            })
        }
    }

    fn set(&self, index: usize, item: Bound<'py, PyAny>) {
        // SAFETY: `index` < len (one per field plus the key), each slot is set once.
        unsafe {
            pyo3::ffi::PyTuple_SET_ITEM(
                self.doc.as_ptr(),
                index as pyo3::ffi::Py_ssize_t,
                item.into_ptr(),
            )
        };
    }

    /// The finished Doc, untracked by the garbage collector: it holds only str, bytes, int,
    /// float and numeric arrays, so it can never be part of a reference cycle, and collections
    /// need not traverse it (tuples untrack themselves the same way).
    fn finish(self) -> Bound<'py, PyAny> {
        // SAFETY: a fully built, GC-tracked object of a GC type.
        unsafe { pyo3::ffi::PyObject_GC_UnTrack(self.doc.as_ptr().cast()) };
        self.doc
    }
}

/// A raw field as a Python object. A `str` prepared while Python was released (`prepared`: its
/// layout, and the buffer its units may be in) is only copied; any other is validated by
/// CPython's UTF-8 decoder.
fn raw_to_python<'py>(
    py: Python<'py>,
    value: RawValue<'_>,
    prepared: Option<(&Layout, &[u8])>,
) -> PyResult<Bound<'py, PyAny>> {
    match (value, prepared) {
        (RawValue::Utf8(bytes), Some((layout, buffer))) => {
            let units = layout.units(bytes, buffer);
            if units.len() != layout.chars * layout.width() {
                return Err(new_error(
                    py,
                    "InternalError",
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
        // Not prepared (a lookup prepares every str field it converts; this stays correct
        // for any that did not): CPython's decoder validates.
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
                let _ = PyErr::fetch(py);
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

fn doc_class<'py>(py: Python<'py>, fields: &[String]) -> PyResult<Bound<'py, PyType>> {
    static DOC_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let factory = DOC_CLASS.import(py, "docstore._doc", "doc_class")?;
    let names = PyTuple::new(py, fields)?;
    Ok(factory.call1((names,))?.cast_into::<PyType>()?)
}

#[pymethods]
impl Reader {
    #[new]
    #[pyo3(signature = (path, *, read="mmap"))]
    fn new(py: Python<'_>, path: PathBuf, read: &str) -> PyResult<Self> {
        let access = match read {
            "mmap" => DataAccess::Mmap,
            "pread" => DataAccess::Pread,
            other => {
                return Err(PyValueError::new_err(format!(
                    "read must be \"mmap\" or \"pread\", got {other:?}"
                )))
            }
        };
        // Absolute, so that a pickled store reopens the same file whatever the working directory
        // of the process that unpickles it (or of this one, later).
        let path = std::path::absolute(&path).unwrap_or(path);
        guard(py, || {
            let store = py
                .detach(|| Store::open_with(&path, access))
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
                access,
                doc_class,
                field_names,
            })
        })
    }

    /// The path the store was opened from, made absolute.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
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
            dict.set_item(&field.name, field.ty.to_string())?;
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
        fields: Option<Vec<String>>,
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
            let found = py
                .detach(|| {
                    in_chunks(&keys, &mut Vec::<()>::new(), |chunk, _| {
                        store.positions(chunk)
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

    /// Documents of many ids, decoded in parallel: a dict in request order, missing ids omitted.
    #[pyo3(signature = (doc_ids, *, field=None, fields=None))]
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        doc_ids: &Bound<'py, PyAny>,
        field: Option<&str>,
        fields: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store(py)?;
        let select = self.select(py, field, fields)?;
        // Keep the id objects: they become the dict keys and doc.doc_id without new strings.
        let objects: Vec<Bound<'py, PyString>> = ids_of(doc_ids)?
            .filter_map(|id| id.map(|id| id.cast_into::<PyString>().ok()).transpose())
            .collect::<PyResult<_>>()?;
        let keys: Vec<&[u8]> = objects
            .iter()
            .map(|k| k.to_str().map_or(&b""[..], str::as_bytes))
            .collect();
        guard(py, || {
            let mut batches = Batches::take();
            let out = PyDict::new(py);
            let mut objects = objects.iter();
            // Per chunk of keys: the positions of those found, whose records `decoded` holds.
            let read =
                |keys: &[&[u8]], decoded: &mut Decoded| decoded.read_keys(&store, keys, &select);
            in_chunks_then(py, &keys, &mut batches, read, |decoded, positions| {
                let mut indices = 0..decoded.records.len();
                // `positions` first: zip stops on it without taking an id from the next chunk.
                for (pos, object) in positions.iter().zip(objects.by_ref()) {
                    if pos.is_some() {
                        let i = indices.next().expect("one record per found key");
                        let value = self.build(
                            py,
                            &store,
                            &select,
                            || Ok(object.clone().into_any()),
                            decoded.records.get(i),
                            decoded.texts.record(i),
                        )?;
                        out.set_item(object, value)?;
                    }
                }
                Ok(())
            })?;
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
        fields: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store(py)?;
        let select = self.select(py, field, fields)?;
        let pos = Self::resolve_position(&store, position_arg(index)?)?;
        guard(py, || {
            let mut batches = Batches::take();
            let decoded = batches.single();
            py.detach(|| decoded.read(&store, &[pos], &select))
                .py_err(py)?;
            self.build(
                py,
                &store,
                &select,
                || Self::key_object(py, &store, pos),
                decoded.records.get(0),
                decoded.texts.record(0),
            )
        })
    }

    /// The documents at `positions`, decoded in parallel, as a list in the same order.
    #[pyo3(signature = (positions, *, field=None, fields=None))]
    fn take<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
        field: Option<&str>,
        fields: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let store = self.store(py)?;
        let select = self.select(py, field, fields)?;
        let positions = positions_arg(positions)?;
        let positions = positions
            .into_iter()
            .map(|i| Self::resolve_position(&store, i))
            .collect::<PyResult<Vec<u64>>>()?;
        guard(py, || {
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
            PyList::new(py, items)
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
            let keys = (start.min(stop)..stop)
                .map(|pos| store.key_at(pos).map(|k| PyString::new(py, k)))
                .collect::<Result<Vec<_>, _>>()
                .py_err(py)?;
            PyList::new(py, keys)
        })
    }

    /// Counts and sizes: `count`, `raw_bytes`, `stored_bytes`, `ratio`, `level`, `dictionary_bytes`.
    fn _info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store(py)?;
        let header = store.header();
        let info = PyDict::new(py);
        info.set_item("count", header.count)?;
        info.set_item("raw_bytes", header.raw_bytes)?;
        info.set_item("stored_bytes", store.file_len())?;
        info.set_item("level", header.level)?;
        info.set_item("dictionary_bytes", store.dictionary().len())?;
        info.set_item("format_version", docstore_core::format::VERSION)?;
        Ok(info)
    }

    /// Reads and checks every byte (checksums, index, every document); raises CorruptStoreError.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.store(py)?;
        guard(py, || py.detach(|| store.verify()).py_err(py))
    }
}

impl Reader {
    fn get_impl<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        select: &Select,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let store = self.store(py)?;
        let Some(text) = key.cast::<PyString>().ok().and_then(|k| k.to_str().ok()) else {
            return Ok(None);
        };
        guard(py, || {
            let mut batches = Batches::take();
            let decoded = batches.single();
            let found = py
                .detach(|| match store.position(text.as_bytes())? {
                    Some(pos) => decoded.read(&store, &[pos], select).map(|()| true),
                    None => Ok(false),
                })
                .py_err(py)?;
            if !found {
                return Ok(None);
            }
            self.build(
                py,
                &store,
                select,
                || Ok(key.clone()),
                decoded.records.get(0),
                decoded.texts.record(0),
            )
            .map(Some)
        })
    }
}
