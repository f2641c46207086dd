//! Core errors to Python exceptions (classes defined in `docstore/errors.py`), and the guard
//! that turns a Rust panic into `docstore.InternalError` instead of a crash.

use docstore_core::Error;
use pyo3::exceptions::{PyIndexError, PyKeyError, PyMemoryError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// One of the exception classes of `docstore.errors`, looked up once.
pub fn exception_class<'py>(py: Python<'py>, class: Exc) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("docstore.errors").map(Bound::unbind))?;
    module
        .bind(py)
        .getattr(class.name())?
        .cast_into::<PyType>()
        .map_err(PyErr::from)
}

/// The exception classes of `docstore/errors.py` the bindings raise, named here once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exc {
    Corrupt,
    UnsupportedVersion,
    Schema,
    FieldType,
    InvalidKey,
    InvalidArgument,
    DuplicateKey,
    StoreExists,
    StoreNotFound,
    StoreIO,
    Changed,
    Closed,
    NotAnId,
    Internal,
}

impl Exc {
    pub const ALL: [Exc; 14] = [
        Exc::Corrupt,
        Exc::UnsupportedVersion,
        Exc::Schema,
        Exc::FieldType,
        Exc::InvalidKey,
        Exc::InvalidArgument,
        Exc::DuplicateKey,
        Exc::StoreExists,
        Exc::StoreNotFound,
        Exc::StoreIO,
        Exc::Changed,
        Exc::Closed,
        Exc::NotAnId,
        Exc::Internal,
    ];

    /// The class's name in `docstore.errors`.
    pub fn name(self) -> &'static str {
        match self {
            Exc::Corrupt => "CorruptStoreError",
            Exc::UnsupportedVersion => "UnsupportedVersionError",
            Exc::Schema => "SchemaError",
            Exc::FieldType => "FieldTypeError",
            Exc::InvalidKey => "InvalidKeyError",
            Exc::InvalidArgument => "InvalidArgumentError",
            Exc::DuplicateKey => "DuplicateKeyError",
            Exc::StoreExists => "StoreExistsError",
            Exc::StoreNotFound => "StoreNotFoundError",
            Exc::StoreIO => "StoreIOError",
            Exc::Changed => "StoreChangedError",
            Exc::Closed => "ClosedError",
            Exc::NotAnId => "NotAnIdError",
            Exc::Internal => "InternalError",
        }
    }
}

pub fn new_error(py: Python<'_>, class: Exc, message: String) -> PyErr {
    match exception_class(py, class) {
        Ok(cls) => PyErr::from_type(cls, message),
        Err(err) => err,
    }
}

/// Converts a core error with Python held.
pub fn to_pyerr(py: Python<'_>, err: Error) -> PyErr {
    let message = err.to_string();
    let class = match err {
        Error::Corrupt(_) => Exc::Corrupt,
        Error::UnsupportedVersion { .. } | Error::UnsupportedManifestVersion { .. } => {
            Exc::UnsupportedVersion
        }
        Error::DuplicateKey(key) | Error::DuplicateKeyIn { key, .. } => {
            return match exception_class(py, Exc::DuplicateKey) {
                Ok(cls) => PyErr::from_type(cls, (message, key)),
                Err(err) => err,
            }
        }
        Error::DuplicateKeyAt { key, first, second } => {
            return match exception_class(py, Exc::DuplicateKey) {
                Ok(cls) => PyErr::from_type(cls, (message, key, (first, second))),
                Err(err) => err,
            }
        }
        Error::InvalidArgument(_) => Exc::InvalidArgument,
        Error::InvalidKey(_) => Exc::InvalidKey,
        Error::Schema(_) => Exc::Schema,
        Error::FieldType(_) => Exc::FieldType,
        Error::AlreadyExists(_) => Exc::StoreExists,
        Error::OutOfRange { .. } => return PyIndexError::new_err(message),
        Error::Closed(_) => Exc::Closed,
        Error::Changed(_) => Exc::Changed,
        // Python's own: what any allocation that fails raises, and what callers catch.
        Error::OutOfMemory { .. } => return PyMemoryError::new_err(message),
        Error::Io(ref io) if io.kind() == std::io::ErrorKind::NotFound => Exc::StoreNotFound,
        // Something at the target that an overwrite does not replace (not a store).
        Error::Io(ref io) if io.kind() == std::io::ErrorKind::AlreadyExists => Exc::StoreExists,
        Error::Io(_) => Exc::StoreIO,
    };
    new_error(py, class, message)
}

pub fn key_error(key: &Bound<'_, PyAny>) -> PyErr {
    // In a 1-tuple: a tuple key would otherwise become the exception's args, and None no args.
    PyKeyError::new_err((key.clone().unbind(),))
}

/// Runs `f`, turning a panic into `InternalError` so that no Rust bug brings the interpreter down.
pub fn guard<T>(py: Python<'_>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(new_error(
                py,
                Exc::Internal,
                format!("internal error in docstore: {what}"),
            ))
        }
    }
}

/// Extension to convert `docstore_core::Result` into `PyResult` at the boundary.
pub trait IntoPy<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}
