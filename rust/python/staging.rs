//! `docstore._docstore.Staging`: the core's publication protocol (`docstore_core::publish`) for
//! the Python writers. A staging directory is a scratch directory beside a target, made under
//! the target's lock once the dead ones there are swept, and locked by this process until
//! released; a file staged there is published at the target by the core, with its checks. The
//! Python package renames and replaces nothing itself.

use crate::errors::{guard, new_error, Exc, IntoPy};
use crate::writer::HeldTarget;
use docstore_core::publish::{self, Scratch};
use docstore_core::Error;
use pyo3::prelude::*;
use std::ffi::OsString;
use std::path::{Component, PathBuf};
use std::sync::Mutex;

/// `docstore._docstore.Staging(target, *, held=None)`: a staging directory of `target` (see the
/// module doc), removed by `release()`, at the end of its `with` block, or when collected (but
/// one attached: `release()` alone removes it).
#[pyclass(frozen, module = "docstore._docstore")]
pub struct Staging {
    target: PathBuf,
    path: PathBuf,
    /// `None` once released.
    scratch: Mutex<Option<Scratch>>,
}

/// `path`, absolute (not resolved: a link stays a link), as the core's errors will name it.
fn absolute(path: PathBuf) -> PyResult<PathBuf> {
    std::path::absolute(&path).map_err(PyErr::from)
}

impl Staging {
    fn of(target: PathBuf, scratch: Scratch) -> Staging {
        Staging {
            target,
            path: scratch.path().to_path_buf(),
            scratch: Mutex::new(Some(scratch)),
        }
    }

    fn scratch(&self) -> std::sync::MutexGuard<'_, Option<Scratch>> {
        self.scratch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl Staging {
    /// Makes a staging directory beside `target`, under the target's lock (taken for the moment
    /// it takes, or `held`, the caller's `lock_target(target)`), after removing those that
    /// killed processes left there.
    #[new]
    #[pyo3(signature = (target, *, held=None))]
    fn new(py: Python<'_>, target: PathBuf, held: Option<PyRef<'_, HeldTarget>>) -> PyResult<Self> {
        let target = absolute(target)?;
        let scratch = guard(py, || match &held {
            None => py.detach(|| Scratch::new(&target, None)).py_err(py),
            Some(held) => held.with(py, |held| {
                py.detach(|| Scratch::new(&target, Some(held))).py_err(py)
            })?,
        })?;
        Ok(Staging::of(target, scratch))
    }

    /// Makes a staging directory of `target` that no process holds, and returns its path: for a
    /// job whose processes all end before it does. Never swept; `attach(target, path)` then
    /// `release()` removes it.
    #[staticmethod]
    fn unheld(py: Python<'_>, target: PathBuf) -> PyResult<OsString> {
        let target = absolute(target)?;
        guard(py, || {
            let path = py.detach(|| Scratch::unheld(&target)).py_err(py)?;
            Ok(path.into_os_string())
        })
    }

    /// The staging directory `path` of `target` that another process made, to write into and
    /// release here; `InvalidArgumentError` unless it is one of `target`'s.
    #[staticmethod]
    fn attach(py: Python<'_>, target: PathBuf, path: PathBuf) -> PyResult<Staging> {
        let (target, path) = (absolute(target)?, absolute(path)?);
        let scratch = guard(py, || {
            py.detach(|| Scratch::attach(&target, &path)).py_err(py)
        })?;
        Ok(Staging::of(target, scratch))
    }

    /// Removes, under the lock of `target`, the staging directories that killed processes left
    /// beside it; returns their paths.
    #[staticmethod]
    fn sweep(py: Python<'_>, target: PathBuf) -> PyResult<Vec<OsString>> {
        let target = absolute(target)?;
        guard(py, || {
            let removed = py.detach(|| publish::sweep(&target)).py_err(py)?;
            Ok(removed.into_iter().map(PathBuf::into_os_string).collect())
        })
    }

    /// The staging directory.
    #[getter]
    fn path(&self) -> OsString {
        self.path.clone().into_os_string()
    }

    /// What it is staging for.
    #[getter]
    fn target(&self) -> OsString {
        self.target.clone().into_os_string()
    }

    /// Whether it is released (and its directory gone).
    #[getter]
    fn released(&self) -> bool {
        self.scratch().is_none()
    }

    /// Publishes the file `path` of the staging directory (relative to it, or inside it) at the
    /// target: a store (else `InvalidArgumentError`), over nothing (`StoreExistsError`) unless
    /// `overwrite`, and then only over a store. With `export`, a file `docstore export` wrote,
    /// which replaces a regular file there (never a directory).
    #[pyo3(signature = (path, *, overwrite=false, export=false))]
    fn publish(
        &self,
        py: Python<'_>,
        path: PathBuf,
        overwrite: bool,
        export: bool,
    ) -> PyResult<()> {
        let file = absolute(self.path.join(path))?;
        let inside = file.starts_with(&self.path)
            && file != self.path
            && !file.components().any(|c| c == Component::ParentDir);
        guard(py, || {
            if !inside {
                let message = format!(
                    "{} is not a file of the staging directory {}",
                    file.display(),
                    self.path.display()
                );
                return Err(Error::InvalidArgument(message)).py_err(py);
            }
            let scratch = self.scratch();
            if scratch.is_none() {
                let message = format!("the staging directory {} is released", self.path.display());
                return Err(new_error(py, Exc::Closed, message));
            }
            let target = &self.target;
            py.detach(|| match export {
                true => publish::publish_export(&file, target),
                false => publish::publish_file(&file, target, overwrite),
            })
            .py_err(py)
        })
    }

    /// Removes the staging directory with everything in it, then lets its lock go; nothing if
    /// it is released already. In a forked child, lets go of this copy alone: the directory is
    /// the parent's.
    fn release(&self, py: Python<'_>) {
        if let Some(scratch) = self.scratch().take() {
            py.detach(|| scratch.remove());
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, exc, tb, /))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        tb: &Bound<'_, PyAny>,
    ) {
        let _ = (exc_type, exc, tb); // released whatever ended the block
        self.release(py);
    }

    fn __repr__(&self) -> String {
        format!(
            "Staging({:?}, path={:?}{})",
            self.target.display().to_string(),
            self.path.display().to_string(),
            if self.released() { ", released" } else { "" }
        )
    }
}
