//! `docstore._docstore.seal`: shard files sealed into one collection (see the core's
//! `collection::seal`). Reading a collection goes through `Reader` like any store.

use crate::errors::{guard, IntoPy};
use pyo3::prelude::*;
use std::path::PathBuf;

/// Seals `shards` into a collection at `target`; returns the number of documents.
#[pyfunction]
#[pyo3(signature = (target, shards, *, overwrite=false))]
pub fn seal(
    py: Python<'_>,
    target: PathBuf,
    shards: Vec<PathBuf>,
    overwrite: bool,
) -> PyResult<u64> {
    guard(py, || {
        py.detach(|| docstore_core::collection::seal(&target, &shards, overwrite))
            .py_err(py)
            .map(|summary| summary.count)
    })
}
