//! Batches: `get_many`, `take`, `positions`, `keys_range` and `_take_columns`. A batch is read
//! chunk by chunk with Python released (on the pool when it is large) and built with Python
//! held, chunk by chunk as each is read (`chunks::in_chunks_then`); how a batch of keys is
//! searched (whole first, or chunk by chunk) is the core's to decide
//! (`Collection::search_in_chunks`), this module only says how chunks run here (`Chunked`).

use super::Reader;
use crate::args::{ids_of, plain_str, positions_arg};
use crate::chunks::{in_chunks_then, Clearable};
use crate::errors::{guard, IntoPy};
use crate::scratch::{Batches, Decoded};
use docstore_core::collection::{LocatedChunk, RunChunks};
use docstore_core::repeats::{distinct, Seen};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use std::ops::DerefMut;

/// How a batch's chunks run here: read with Python released (on the pool when the batch is
/// large, each chunk with its scratch from `scratch`), and each chunk's scratch and result
/// handed to `then` with Python held, in order, as soon as it and those before it are read.
struct Chunked<'py, B, F> {
    py: Python<'py>,
    scratch: B,
    then: F,
}

/// The skeleton `get_many` and `take` share: this thread's decode buffers taken for the batch
/// (`Batches`), its chunks read into them as `Chunked` runs them, and `then` building each
/// chunk's records into Python objects.
fn decode_chunked<'py, R, F>(py: Python<'py>, then: F) -> Chunked<'py, Batches, F>
where
    F: FnMut(&Decoded, R) -> PyResult<()>,
{
    Chunked {
        py,
        scratch: Batches::take(),
        then,
    }
}

impl<S, B, F> Chunked<'_, B, F>
where
    S: Default + Clearable + Send,
    B: DerefMut<Target = Vec<S>>,
{
    /// `read` on chunks of `items`, each chunk then handed to `then` (see the type).
    fn run<T: Sync, R: Send>(
        &mut self,
        items: &[T],
        read: impl Fn(&[T], &mut S) -> docstore_core::Result<R> + Sync,
    ) -> PyResult<()>
    where
        F: FnMut(&S, R) -> PyResult<()>,
    {
        in_chunks_then(self.py, items, &mut self.scratch, read, &mut self.then)
    }
}

impl<S, B, R, F> RunChunks<S, R> for Chunked<'_, B, F>
where
    S: Default + Clearable + Send,
    B: DerefMut<Target = Vec<S>>,
    R: Send,
    F: FnMut(&S, R) -> PyResult<()>,
{
    type Error = PyErr;

    fn whole<V: Send>(
        &mut self,
        f: impl FnOnce() -> docstore_core::Result<V> + Send,
    ) -> PyResult<V> {
        self.py.detach(f).py_err(self.py)
    }

    fn chunks<T: Sync>(
        &mut self,
        items: &[T],
        read: impl Fn(&[T], &mut S) -> docstore_core::Result<R> + Sync,
    ) -> PyResult<()> {
        self.run(items, read)
    }
}

impl Reader {
    /// Documents of many ids: a dict in request order, missing ids omitted, keyed by the ids as
    /// plain `str`.
    pub(super) fn get_many_impl<'py>(
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
            let out = PyDict::new(py);
            let mut objects = objects.iter();
            // Per chunk of keys: the positions of those found, whose records `decoded` holds.
            let then = |decoded: &Decoded, positions: Vec<Option<u64>>| {
                let mut indices = 0..decoded.records.len();
                // `positions` first: zip stops on it without taking an id from the next chunk.
                for (pos, object) in positions.iter().zip(objects.by_ref()) {
                    if pos.is_some() {
                        let i = indices.next().expect("one record per found key");
                        let key = || Ok((*object).clone().into_any());
                        let value = self.build_decoded(py, &store, &select, key, decoded, i)?;
                        out.set_item(object, value)?;
                    }
                }
                Ok(())
            };
            let read = |items: LocatedChunk<'_, '_>, decoded: &mut Decoded| {
                decoded.read_located(&store, items, &select)
            };
            store.search_in_chunks(&keys, &mut decode_chunked(py, then), read)?;
            Ok(out)
        })
    }

    /// The documents at `positions`, as a list in the same order.
    pub(super) fn take_impl<'py>(
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
            let mut items = Vec::with_capacity(positions.len());
            let mut at = positions.iter();
            let then = |decoded: &Decoded, ()| {
                for (i, &pos) in (0..decoded.records.len()).zip(at.by_ref()) {
                    let key = || Self::key_object(py, &store, pos);
                    items.push(self.build_decoded(py, &store, &select, key, decoded, i)?);
                }
                Ok(())
            };
            let read = |chunk: &[u64], decoded: &mut Decoded| decoded.read(&store, chunk, &select);
            decode_chunked(py, then).run(&positions, read)?;
            match shared {
                Some(d) => PyList::new(py, d.of_row.iter().map(|&i| &items[i])),
                None => PyList::new(py, items),
            }
        })
    }

    /// `Collection::load_ahead` of `positions` (checked and resolved as `take` does).
    pub(super) fn prefetch_impl<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
    ) -> PyResult<u64> {
        let store = self.store(py)?;
        let positions = (positions_arg(positions)?.into_iter())
            .map(|i| Self::resolve_position(&store, i))
            .collect::<PyResult<Vec<u64>>>()?;
        guard(py, || py.detach(|| store.load_ahead(&positions)).py_err(py))
    }

    /// `Collection::load_index`, with Python released.
    pub(super) fn load_index_impl(&self, py: Python<'_>) -> PyResult<u64> {
        let store = self.store(py)?;
        guard(py, || py.detach(|| store.load_index()).py_err(py))
    }

    /// Positions of many doc ids as an int64 numpy array, -1 where an id is absent.
    pub(super) fn positions_impl<'py>(
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
            let mut positions: Vec<i64> = Vec::with_capacity(keys.len());
            let then = |_: &(), found: Vec<Option<u64>>| {
                positions.extend(found.into_iter().map(|p| p.map_or(-1, |p| p as i64)));
                Ok(())
            };
            let mut no_scratch = Vec::<()>::new();
            let run = &mut Chunked {
                py,
                scratch: &mut no_scratch,
                then,
            };
            let confirm = |items: LocatedChunk<'_, '_>, _: &mut ()| store.confirm_located(items);
            store.search_in_chunks(&keys, run, confirm)?;
            Ok(PyArray1::from_vec(py, positions))
        })
    }

    /// Doc ids of positions `start..stop`, in insertion order; as a slice does, negative bounds
    /// count from the end and both are clamped to the store.
    pub(super) fn keys_range_impl<'py>(
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

    /// Doc ids and the fields `fields` of `positions` as flat Arrow-layout buffers
    /// (`arrow_read`).
    pub(super) fn take_columns_impl<'py>(
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
}
