//! `docstore._docstore`: the Python extension module, a thin pyo3 layer over docstore-core.
//! Everything users see is re-exported and documented by the `docstore` Python package.

mod args;
mod arrow_read;
mod chunks;
mod collection;
mod columns;
mod convert;
mod doc;
mod errors;
mod gil;
mod progress;
mod reader;
mod scratch;
mod staging;
mod text;
mod writer;

use pyo3::prelude::*;

/// Sets the number of threads used for parallel compression and batch decoding (0 = all cores).
#[pyfunction]
fn set_num_threads(py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<()> {
    use docstore_core::{runtime::parallel, Error};
    use errors::IntoPy;
    let n = args::int_arg("the number of threads", n)?;
    let max = parallel::MAX_THREADS;
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| {
            Error::InvalidArgument(format!("threads must be 0 (all cores) to {max}, got {n}"))
        })
        .py_err(py)?;
    parallel::set_num_threads(n).py_err(py)
}

/// The number of threads used for parallel work.
#[pyfunction]
fn get_num_threads() -> usize {
    docstore_core::runtime::parallel::num_threads()
}

/// `text` with the credentials of every URL in it redacted (userinfo, query values, fragment).
#[pyfunction]
fn _redact_urls(text: &str) -> String {
    docstore_core::storage::url::redact_text(text)
}

/// `url` without what may hold a secret (userinfo, query string, fragment); `None` if it does
/// not parse.
#[pyfunction]
fn _strip_url(url: &str) -> Option<String> {
    docstore_core::storage::url::without_credentials(url)
}

/// Whether `path` is a URL (`scheme://...`, `file://` too) rather than a file system path: the
/// core's one answer (`docstore_core::collection::is_url`), which `Reader` opens by. False for
/// what is not a `str`.
#[pyfunction]
fn is_url(path: &Bound<'_, PyAny>) -> bool {
    use pyo3::types::{PyString, PyStringMethods};
    (path.cast::<PyString>().ok())
        .is_some_and(|s| docstore_core::collection::is_url(&s.to_string_lossy()))
}

// Free-threading safe (docs/wheels.md, "Free-threaded CPython": the audit, and the tests run on
// CPython 3.14t): a free-threaded CPython keeps the GIL disabled when it imports this module.
// PyO3 0.30 declares this by default; said here so that it stays true if that default changes.
#[pymodule(gil_used = false)]
fn _docstore(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<reader::Reader>()?;
    m.add_class::<writer::Writer>()?;
    m.add_function(wrap_pyfunction!(collection::seal, m)?)?;
    m.add_function(wrap_pyfunction!(writer::train_dictionary, m)?)?;
    m.add_function(wrap_pyfunction!(writer::check_writer, m)?)?;
    m.add_function(wrap_pyfunction!(writer::publish_file, m)?)?;
    m.add_function(wrap_pyfunction!(writer::lock_target, m)?)?;
    m.add_class::<writer::HeldTarget>()?;
    m.add_class::<staging::Staging>()?;
    m.add_function(wrap_pyfunction!(collection::check_replaceable, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(_redact_urls, m)?)?;
    m.add_function(wrap_pyfunction!(_strip_url, m)?)?;
    m.add_function(wrap_pyfunction!(is_url, m)?)?;
    m.add("FORMAT_VERSION", docstore_core::format::VERSION)?;
    m.add(
        "DEFAULT_LEVEL",
        docstore_core::WriterOptions::default().level,
    )?;
    // The one list of array element types, for the Python side's checks and CLI parsing.
    let dtypes: Vec<&str> = docstore_core::ElemType::ALL
        .iter()
        .map(|e| e.name())
        .collect();
    m.add("ARRAY_DTYPES", pyo3::types::PyTuple::new(m.py(), dtypes)?)?;
    // The exception classes the bindings raise, for the test that each exists in docstore.errors.
    let classes = errors::Exc::ALL.map(errors::Exc::name);
    m.add(
        "EXCEPTION_CLASSES",
        pyo3::types::PyTuple::new(m.py(), classes)?,
    )?;
    Ok(())
}
