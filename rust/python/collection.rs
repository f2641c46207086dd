//! `docstore._docstore.seal`: shard files sealed into one collection (see the core's
//! `collection::seal`). Reading a collection goes through `Reader` like any store.

use crate::errors::{guard, IntoPy};
use pyo3::prelude::*;
use std::path::PathBuf;

/// Seals `shards` into a collection at `target` (with `append`, after the shards of what is
/// there: see the core's `collection::append`); returns the number of documents.
#[pyfunction]
#[pyo3(signature = (target, shards, *, overwrite=false, append=false))]
pub fn seal(
    py: Python<'_>,
    target: PathBuf,
    shards: Vec<PathBuf>,
    overwrite: bool,
    append: bool,
) -> PyResult<u64> {
    guard(py, || {
        py.detach(|| match (overwrite, append) {
            (true, true) => Err(docstore_core::Error::InvalidArgument(
                "overwrite and append exclude each other: append replaces the collection with \
                 its shards and the new ones"
                    .into(),
            )),
            (_, true) => docstore_core::collection::append(&target, &shards),
            _ => docstore_core::collection::seal(&target, &shards, overwrite),
        })
        .py_err(py)
        .map(|summary| summary.count)
    })
}

/// Raises `StoreExistsError` naming what is at `target` unless an overwrite may replace it:
/// nothing, a docstore store file or a docstore collection with nothing else in it. For the
/// commands that would otherwise find out at the end of their work.
#[pyfunction]
pub fn check_replaceable(py: Python<'_>, target: PathBuf) -> PyResult<()> {
    guard(py, || {
        py.detach(|| docstore_core::collection::check_replaceable(&target))
            .py_err(py)
    })
}
