//! Long calls that report progress: the work runs on a thread of its own, without Python,
//! while the calling thread wakes every 0.1 s to call the user's `progress(done, total)` (Python
//! held only for that call). Used by `Reader.verify` and `seal`.

use crate::errors::IntoPy;
use pyo3::prelude::*;
use std::time::Duration;

/// Runs `work`, calling `progress(*counts())` now and then while it runs and once at its end
/// (`(total, total)`). An error from `progress` stops the reports, not the work, and is raised
/// after it, unless the work failed.
pub(crate) fn reporting<T: Send>(
    py: Python<'_>,
    progress: &Bound<'_, PyAny>,
    counts: impl Fn() -> (u64, u64) + Sync,
    work: impl FnOnce() -> docstore_core::Result<T> + Send,
) -> PyResult<T> {
    let (result, reported) = std::thread::scope(|scope| {
        let worker = scope.spawn(work);
        let mut reported = Ok(());
        while !worker.is_finished() {
            py.detach(|| std::thread::sleep(Duration::from_millis(100)));
            if reported.is_ok() {
                let (done, total) = counts();
                reported = progress.call1((done.min(total), total)).map(drop);
            }
        }
        (worker.join(), reported)
    });
    let value = result
        .unwrap_or_else(|payload| std::panic::resume_unwind(payload))
        .py_err(py)?;
    reported?;
    let (_, total) = counts();
    progress.call1((total, total))?;
    Ok(value)
}
