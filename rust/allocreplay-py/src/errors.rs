//! Core errors as Python exceptions. The classes live in `allocreplay/errors.py`, where each
//! also derives from the builtin a caller would catch (`OSError`, `FileNotFoundError`,
//! `ValueError`) — `create_exception!` takes one base only — and are looked up here when an
//! error is raised. [`BindingError`] is the one conversion: every binding returns
//! `BindingResult`, and `?` turns a core `Error` or a `PyErr` into it.

use allocreplay_core::error::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// A core error or a Python one, on its way to Python.
pub enum BindingError {
    Core(Error),
    Py(PyErr),
}

pub type BindingResult<T> = Result<T, BindingError>;

impl From<Error> for BindingError {
    fn from(e: Error) -> Self {
        BindingError::Core(e)
    }
}

impl From<PyErr> for BindingError {
    fn from(e: PyErr) -> Self {
        BindingError::Py(e)
    }
}

impl From<BindingError> for PyErr {
    fn from(e: BindingError) -> PyErr {
        match e {
            BindingError::Py(e) => e,
            BindingError::Core(e) => Python::attach(|py| core_error(py, e)),
        }
    }
}

/// The class of `allocreplay.errors` a core error is raised as.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => "TraceNotFoundError",
        Error::Io { .. } => "TraceIOError",
        Error::Format { .. } => "TraceFormatError",
        Error::UnsafePickle { .. } => "UnsafePickleError",
        Error::UnknownFormat { .. } => "UnknownFormatError",
        Error::Schema { .. } => "SchemaError",
        Error::PolicySpec(_) => "PolicySpecError",
        Error::InvalidArgument(_) | Error::InvalidInput { .. } => "InvalidArgumentError",
        Error::Replay(_) => "ReplayError",
    }
}

/// The exception for a core error: its message, `.path` (the file concerned, or None) and,
/// for I/O errors, `.errno`.
fn core_error(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    let path = match &e {
        Error::Io { path, .. }
        | Error::Format { path, .. }
        | Error::UnsafePickle { path, .. }
        | Error::UnknownFormat { path, .. }
        | Error::Schema { path, .. }
        | Error::InvalidInput { path, .. } => Some(path.display().to_string()),
        Error::PolicySpec(_) | Error::InvalidArgument(_) | Error::Replay(_) => None,
    };
    let errno = match &e {
        Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    let class = py.import("allocreplay.errors").and_then(|m| m.getattr(class_name(&e))).and_then(|c| Ok(c.cast_into::<PyType>()?));
    let class = match class {
        Ok(c) => c,
        // Only when the package is broken; the message is still worth raising.
        Err(import_error) => return PyRuntimeError::new_err(format!("{message} (allocreplay.errors unavailable: {import_error})")),
    };
    let err = PyErr::from_type(class, (message, path));
    if let Some(errno) = errno {
        // Best effort: the message alone is still a useful exception.
        let _ = err.value(py).setattr("errno", errno);
    }
    err
}
