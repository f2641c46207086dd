//! `docstore._docstore.seal`: shard files sealed into one collection (see the core's
//! `collection::seal`). Reading a collection goes through `Reader` like any store.

use crate::errors::{guard, IntoPy};
use docstore_core::collection::{self, SealProgress};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;

/// Seals `shards` into a collection at `target` (with `append`, after the shards of what is
/// there: see the core's `collection::append`); returns the number of documents.
/// `progress(done, total)` is called now and then (every 0.1 s) while it runs: two steps a
/// document (its key read and checked, then merged into the global index).
#[pyfunction]
#[pyo3(signature = (target, shards, *, overwrite=false, append=false, progress=None))]
pub fn seal(
    py: Python<'_>,
    target: PathBuf,
    shards: Vec<PathBuf>,
    overwrite: bool,
    append: bool,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<u64> {
    sealing(py, progress.as_ref(), |state| {
        collection::seal_counting(&target, &shards, overwrite, append, state).map(|s| s.count)
    })
}

/// Runs `work` (a seal, given the counters it advances) without the GIL, and reports its
/// progress to `progress(done, total)` every 0.1 s when given; what `work` returns.
pub(crate) fn sealing(
    py: Python<'_>,
    progress: Option<&Bound<'_, PyAny>>,
    work: impl FnOnce(&SealProgress) -> docstore_core::Result<u64> + Send,
) -> PyResult<u64> {
    let state = SealProgress::default();
    let work = || work(&state);
    guard(py, || match progress {
        None => py.detach(work).py_err(py),
        Some(progress) => {
            let counts = || (state.done.load(Relaxed), state.total.load(Relaxed));
            crate::progress::reporting(py, progress, counts, work)
        }
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
