//! Core errors as Python exceptions. The classes live in `allocreplay/errors.py`, where each
//! also derives from the builtin a caller would catch (`OSError`, `FileNotFoundError`,
//! `ValueError`) — `create_exception!` takes one base only — and are looked up here when an
//! error is raised. [`BindingError`] is the one conversion: every binding returns
//! `BindingResult`, and `?` turns a core `Error` or a `PyErr` into it.
//!
//! No panic reaches Python: every entry point that calls into the core runs its body in
//! [`guard`], which turns a panic (a bug) into `allocreplay.errors.InternalError`, whose message
//! asks for an issue report, instead of pyo3's `PanicException` (a `BaseException` that
//! `except Exception` and the CLI's one-line errors would miss).

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use allocreplay_core::error::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// A core error, a Python one, or a panic caught by [`guard`] (its message), on its way to
/// Python.
pub enum BindingError {
    Core(Error),
    Py(PyErr),
    Internal(String),
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
            BindingError::Internal(m) => Python::attach(|py| internal_error(py, &m)),
        }
    }
}

/// Guards running now, in any thread: while there is one, the panic hook stays quiet (the
/// guard reports the panic) unless `ALLOCREPLAY_PANIC_TRACE` is set.
static GUARDS: AtomicUsize = AtomicUsize::new(0);
/// (message, `file:line:column`) of the last panics under guards, kept until no guard runs:
/// a guard takes the location of the one whose message is its payload's (a panic the core
/// catches itself is recorded too, and must not lend its location to another).
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Runs `f`, an entry point's body, turning a panic into [`BindingError::Internal`]. The message
/// comes from the panic's payload; the location from the hook [`install_panic_hook`] sets.
/// Panics in worker threads arrive here too: the core's replays re-raise a worker's panic with
/// its own payload.
pub fn guard<T>(f: impl FnOnce() -> BindingResult<T>) -> BindingResult<T> {
    GUARDS.fetch_add(1, Ordering::SeqCst);
    let outcome = panic::catch_unwind(AssertUnwindSafe(f));
    let mut panics = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    let result = outcome.unwrap_or_else(|payload| {
        let message = payload_message(payload.as_ref());
        Err(BindingError::Internal(match panics.iter().rev().find(|(m, _)| *m == message) {
            Some((_, at)) => format!("{message} (at {at})"),
            None => message,
        }))
    });
    if GUARDS.fetch_sub(1, Ordering::SeqCst) == 1 {
        panics.clear();
    }
    result
}

/// What a panic said: its payload when that is a string (`panic!`, `assert!`, `expect`...).
fn payload_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|m| m.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Installs (once) a panic hook that, while a [`guard`] runs, records what panicked where
/// instead of printing the default report to stderr — the error the guard raises says it all,
/// so the CLI's error stays one line. Outside guards, or with `ALLOCREPLAY_PANIC_TRACE` set (to
/// see Rust's own report, with a backtrace under `RUST_BACKTRACE=1`), the previous hook runs
/// as before.
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if GUARDS.load(Ordering::SeqCst) > 0 {
                if let Some(l) = info.location() {
                    let mut panics = PANICS.lock().unwrap_or_else(|e| e.into_inner());
                    if panics.len() >= 64 {
                        panics.remove(0);
                    }
                    panics.push((payload_message(info.payload()), format!("{}:{}:{}", l.file(), l.line(), l.column())));
                }
                if std::env::var_os("ALLOCREPLAY_PANIC_TRACE").is_none() {
                    return;
                }
            }
            previous(info)
        }));
    });
}

/// The text of an internal error: what to do about it, then what panicked.
pub fn internal_message(panic_message: &str) -> String {
    format!(
        "internal error in allocreplay (please report it on the project's issue tracker, with the command and the trace): {panic_message}"
    )
}

/// `allocreplay.errors.InternalError` for a caught panic.
fn internal_error(py: Python<'_>, panic_message: &str) -> PyErr {
    let message = internal_message(panic_message);
    match py.import("allocreplay.errors").and_then(|m| m.getattr("InternalError")).and_then(|c| Ok(c.cast_into::<PyType>()?)) {
        Ok(class) => PyErr::from_type(class, (message, py.None())),
        Err(import_error) => PyRuntimeError::new_err(format!("{message} (allocreplay.errors unavailable: {import_error})")),
    }
}

/// `_core._debug_panic(message)`: panics with `message` (with the GIL released, as the core's
/// work runs), so the tests can check what a user sees of a bug. Not part of the API.
#[pyfunction]
#[pyo3(name = "_debug_panic")]
pub fn debug_panic(py: Python<'_>, message: String) -> BindingResult<()> {
    guard(|| crate::interrupt::detach(py, move || -> Result<(), Error> { panic!("{message}") }))
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
        // Not raised as a class of allocreplay.errors: `core_error` raises KeyboardInterrupt.
        Error::Cancelled => "AllocReplayError",
    }
}

/// The exception for a core error: its message, `.path` (the file concerned, or None) and,
/// for I/O errors, `.errno`.
fn core_error(py: Python<'_>, e: Error) -> PyErr {
    if let Error::Cancelled = e {
        // A call stopped by its cancellation token: the work of Ctrl-C (`interrupt::detach`
        // raises the signal handler's own exception; this is for a cancellation seen otherwise).
        return pyo3::exceptions::PyKeyboardInterrupt::new_err("cancelled");
    }
    let message = e.to_string();
    let path = match &e {
        Error::Io { path, .. }
        | Error::Format { path, .. }
        | Error::UnsafePickle { path, .. }
        | Error::UnknownFormat { path, .. }
        | Error::Schema { path, .. }
        | Error::InvalidInput { path, .. } => Some(path.display().to_string()),
        Error::PolicySpec(_) | Error::InvalidArgument(_) | Error::Replay(_) | Error::Cancelled => None,
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
