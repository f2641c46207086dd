//! `Reader(path, ...)`: the core decides what `path` names and opens it
//! (`Collection::open_named`); here only the arguments are read, and a warning of the open is
//! raised as Python's.

use super::Reader;
use crate::errors::{guard, IntoPy};
use docstore_core::collection::Location;
use docstore_core::{Collection, DataAccess, RemoteOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;

impl Reader {
    /// Opens what `path` names (see `Reader.__init__`).
    pub(super) fn open(
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
        let mut options: Vec<(String, String)> =
            storage_options.unwrap_or_default().into_iter().collect();
        options.sort();
        let remote = || RemoteOptions::new(options, cache_dir, cache_bytes);
        guard(py, || {
            let (store, location) = py
                .detach(|| Collection::open_named(&path, access, remote))
                .py_err(py)?;
            // A server that ignores Range: its files were read whole (docs/remote.md). At the
            // caller of docstore.open (stacklevel 2: this runs under open()).
            if let Some(warning) = store.source().take_warning() {
                let warning =
                    std::ffi::CString::new(warning.replace('\0', "")).expect("no NUL left in it");
                let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
                PyErr::warn(py, &category, &warning, 2)?;
            }
            match location {
                Location::Url(url) => {
                    let shown = docstore_core::storage::url::redact(&url);
                    // Read through the node cache's mapping, whatever `read` says.
                    Reader::with_store(py, store, PathBuf::from(shown), Some(url), DataAccess::Mmap)
                }
                Location::Path(path) => Reader::with_store(py, store, path, None, access),
            }
        })
    }
}
