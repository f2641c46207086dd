//! Opening a store or collection, local or remote, for `Reader(path, ...)`.

use super::Reader;
use crate::errors::{guard, IntoPy};
use docstore_core::storage::Source;
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
