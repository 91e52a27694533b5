//! PyO3 bindings: `allocreplay._core`. Tables cross into Python through the Arrow C stream
//! interface (`__arrow_c_stream__` returning a PyCapsule named "arrow_array_stream"), so Polars
//! and pyarrow import the Rust record batches without copying them through Python objects.
//! Every core `Error` variant becomes its own exception class (re-exported by
//! `allocreplay.errors`). Imports and replays run with the GIL released.

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::Arc;

use allocreplay_core::error::Error;
use allocreplay_core::import::{self, ImportOptions};
use allocreplay_core::replay::{self as core_replay, ReplayRequest};
use allocreplay_core::trace::info::trace_info;
use allocreplay_core::trace::write_arrow;
use allocreplay_core::units::{self, Capacity};
use allocreplay_core::Trace;
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchIterator};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

mod registry;
mod tune;

create_exception!(allocreplay.errors, AllocReplayError, PyException, "Base class of every error allocreplay raises.");
create_exception!(allocreplay.errors, TraceIOError, AllocReplayError, "A file could not be opened, read or written.");
create_exception!(
    allocreplay.errors,
    TraceFormatError,
    AllocReplayError,
    "A file is corrupt, truncated, or not the kind of input it claims to be."
);
create_exception!(
    allocreplay.errors,
    UnsafePickleError,
    AllocReplayError,
    "A pickle holds something other than plain dicts, lists, strings and numbers; it was refused, never executed."
);
create_exception!(allocreplay.errors, UnknownFormatError, AllocReplayError, "The format of a source could not be recognised.");
create_exception!(allocreplay.errors, SchemaError, AllocReplayError, "An .arrow file is not a trace of a supported format version.");
create_exception!(allocreplay.errors, PolicySpecError, AllocReplayError, "A policy specification names an unknown policy or option.");
create_exception!(allocreplay.errors, InvalidArgumentError, AllocReplayError, "An argument (capacity, option combination) is invalid.");
create_exception!(allocreplay.errors, ReplayError, AllocReplayError, "A trace is well formed but inconsistent, or a replay failed.");

/// Maps a core error to its exception class; `.path` holds the file concerned (or None).
fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    let (err, path) = match &e {
        Error::Io { path, .. } => (TraceIOError::new_err(msg), Some(path.clone())),
        Error::Format { path, .. } => (TraceFormatError::new_err(msg), Some(path.clone())),
        Error::UnsafePickle { path, .. } => (UnsafePickleError::new_err(msg), Some(path.clone())),
        Error::UnknownFormat { path, .. } => (UnknownFormatError::new_err(msg), Some(path.clone())),
        Error::Schema { path, .. } => (SchemaError::new_err(msg), Some(path.clone())),
        Error::PolicySpec(_) => (PolicySpecError::new_err(msg), None),
        Error::InvalidArgument(_) => (InvalidArgumentError::new_err(msg), None),
        Error::Replay(_) => (ReplayError::new_err(msg), None),
    };
    let path = path.map(|p| p.display().to_string());
    // Best effort: the message alone is still a useful exception.
    let _ = err.value(py).setattr("path", path);
    err
}

const STREAM_NAME: &CStr = c"arrow_array_stream";

/// An Arrow C stream of one record batch, in a capsule the consumer moves it out of.
fn stream_capsule<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyCapsule>> {
    let reader = RecordBatchIterator::new(vec![Ok(batch.clone())], batch.schema());
    let stream = FFI_ArrowArrayStream::new(Box::new(reader));
    // The capsule's destructor drops the struct, which releases the stream unless the consumer
    // has moved it out (then `release` is null and nothing happens).
    PyCapsule::new_with_value(py, stream, STREAM_NAME)
}

/// A trace loaded in Rust. Exposes its events through `__arrow_c_stream__`.
#[pyclass(frozen, module = "allocreplay._core", name = "Trace")]
struct PyTrace {
    inner: Arc<Trace>,
}

#[pymethods]
impl PyTrace {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(&self, py: Python<'py>, requested_schema: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // The events have one schema; consumers cast if they must.
        stream_capsule(py, self.inner.batch())
    }

    fn __len__(&self) -> usize {
        self.inner.num_events()
    }

    /// The trace metadata (format version, source, devices, pools, settings...) as JSON.
    fn metadata_json(&self) -> String {
        serde_json::to_string(&self.inner.metadata).expect("metadata serializes")
    }

    /// The frame table (filenames, lines, names, stacks) as JSON.
    fn frames_json(&self) -> String {
        serde_json::to_string(&self.inner.frames).expect("frames serialize")
    }

    /// `allocreplay info`'s numbers as JSON.
    fn info_json(&self, py: Python<'_>) -> String {
        let t = self.inner.clone();
        py.detach(move || serde_json::to_string(&trace_info(&t)).expect("info serializes"))
    }

    /// Writes the trace as an `.arrow` file.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let t = self.inner.clone();
        py.detach(move || write_arrow(&t, &path)).map_err(|e| to_py(py, e))
    }
}

/// A result table (record batch) exposed through `__arrow_c_stream__`.
#[pyclass(frozen, module = "allocreplay._core", name = "Table")]
struct PyTable {
    batch: RecordBatch,
}

#[pymethods]
impl PyTable {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(&self, py: Python<'py>, requested_schema: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        stream_capsule(py, &self.batch)
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }
}

/// Results of a replay: four tables built in Rust.
#[pyclass(frozen, module = "allocreplay._core", name = "ReplayResult")]
struct PyReplayResult {
    #[pyo3(get)]
    summary: Py<PyTable>,
    #[pyo3(get)]
    timeline: Py<PyTable>,
    #[pyo3(get)]
    segments: Py<PyTable>,
    #[pyo3(get)]
    placements: Py<PyTable>,
}

/// Loads an `.arrow` trace or imports a raw source (format detected from its bytes).
#[pyfunction]
#[pyo3(signature = (path, meta=None, allocator=None))]
fn load(py: Python<'_>, path: PathBuf, meta: Option<PathBuf>, allocator: Option<String>) -> PyResult<PyTrace> {
    let opts = ImportOptions { meta, allocator };
    let t = py.detach(move || import::load(&path, &opts)).map_err(|e| to_py(py, e))?;
    Ok(PyTrace { inner: Arc::new(t) })
}

/// Parses a capacity string: an int (bytes) or a float (a fraction of device memory).
#[pyfunction]
fn parse_capacity(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    match units::parse_capacity(text).map_err(|e| to_py(py, e))? {
        Capacity::Bytes(b) => Ok(b.into_pyobject(py)?.into_any().unbind()),
        Capacity::Fraction(f) => Ok(f.into_pyobject(py)?.into_any().unbind()),
    }
}

#[pyfunction]
fn format_bytes(n: u64) -> String {
    units::format_bytes(n)
}

/// `allocreplay plan DUMP_DIR`: every program of an XLA dump, as a JSON list of objects.
#[pyfunction]
fn plan_json(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let plans = py.detach(move || allocreplay_core::offline::buffer_assignment::plan_dump(&path)).map_err(|e| to_py(py, e))?;
    Ok(serde_json::to_string(&plans).expect("plans serialize"))
}

/// The allocations the JAX runtime makes running one program of an XLA dump `calls` times
/// (arguments, then per call the live-out allocations and the temp arena): a trace to replay
/// under `jax` / `bfc`. `program`: a substring of the program's name; default the program
/// with the largest preallocated-temp allocation.
#[pyfunction]
#[pyo3(signature = (path, program=None, calls=3))]
fn xla_runtime_trace(py: Python<'_>, path: PathBuf, program: Option<String>, calls: usize) -> PyResult<PyTrace> {
    use allocreplay_core::offline::buffer_assignment::runtime_trace;
    let t = py
        .detach(move || {
            let programs = allocreplay_core::import::xla::load_dump(&path)?;
            let temp = |p: &allocreplay_core::import::xla::XlaProgram| -> i64 {
                p.allocations.iter().filter(|a| a.is_preallocated_temp()).map(|a| a.size).sum()
            };
            let chosen = match &program {
                Some(name) => programs.iter().find(|p| p.program.contains(name.as_str())).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "{}: no program matching '{name}'; programs: {}",
                        path.display(),
                        programs.iter().map(|p| p.program.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })?,
                None => programs
                    .iter()
                    .max_by_key(|p| temp(p))
                    .ok_or_else(|| Error::InvalidArgument(format!("{}: no programs", path.display())))?,
            };
            runtime_trace(chosen, calls.max(1))
        })
        .map_err(|e| to_py(py, e))?;
    Ok(PyTrace { inner: Arc::new(t) })
}

/// The `ideal` and `offline` bounds of every device of `trace` (alignment 0: the source's
/// default), as a JSON list of objects.
#[pyfunction]
#[pyo3(signature = (trace, alignment=0))]
fn offline_json(py: Python<'_>, trace: &PyTrace, alignment: u64) -> PyResult<String> {
    let t = trace.inner.clone();
    let results = py
        .detach(move || {
            t.devices().into_iter().map(|d| allocreplay_core::offline::plan_trace(&t, d, alignment)).collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| to_py(py, e))?;
    Ok(serde_json::to_string(&results).expect("results serialize"))
}

/// Replays every device of `trace` under every policy spec.
#[pyfunction]
#[pyo3(signature = (trace, policies, capacity=None, timeline_points=2000, placements=true))]
fn replay(
    py: Python<'_>,
    trace: &PyTrace,
    policies: Vec<String>,
    capacity: Option<&str>,
    timeline_points: usize,
    placements: bool,
) -> PyResult<PyReplayResult> {
    let capacity = capacity.map(units::parse_capacity).transpose().map_err(|e| to_py(py, e))?;
    let req = ReplayRequest { policies, capacity, timeline_points, placements, threads: 0 };
    let t = trace.inner.clone();
    let batches = py
        .detach(move || {
            core_replay::replay(&t, &req).map(|runs| {
                (
                    core_replay::summary_batch(&runs),
                    core_replay::timeline_batch(&runs),
                    core_replay::segments_batch(&runs),
                    core_replay::placements_batch(&runs),
                )
            })
        })
        .map_err(|e| to_py(py, e))?;
    let table = |batch| Py::new(py, PyTable { batch });
    Ok(PyReplayResult {
        summary: table(batches.0)?,
        timeline: table(batches.1)?,
        segments: table(batches.2)?,
        placements: table(batches.3)?,
    })
}

/// `validate`: the trace replayed under its recorded settings against its recorded decisions,
/// as a JSON object (see `allocreplay_core::validate::validate_trace`).
#[pyfunction]
fn validate_json(py: Python<'_>, trace: &PyTrace) -> PyResult<String> {
    let t = trace.inner.clone();
    py.detach(move || allocreplay_core::validate::validate_trace(&t).map(|v| v.to_string())).map_err(|e| to_py(py, e))
}

/// Validates the `bfc` policy on a BFC trace (a TensorFlow / JAX capture) event by event:
/// chunk sizes, bytes in use, peak in use, pool bytes. `policy`: a `bfc` / `tf` / `jax` spec;
/// default: the settings the capture recorded. Returns the report as JSON.
#[pyfunction]
#[pyo3(signature = (trace, device=None, policy=None))]
fn validate_bfc(py: Python<'_>, trace: &PyTrace, device: Option<i32>, policy: Option<String>) -> PyResult<String> {
    let t = trace.inner.clone();
    py.detach(move || {
        let device = device.or_else(|| t.devices().first().copied()).unwrap_or(0);
        allocreplay_core::validate::bfc::validate_bfc(&t, device, policy.as_deref())
            .map(|v| serde_json::to_string(&v).expect("report serializes"))
    })
    .map_err(|e| to_py(py, e))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyTrace>()?;
    m.add_class::<PyTable>()?;
    m.add_class::<PyReplayResult>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(validate_json, m)?)?;
    m.add_function(wrap_pyfunction!(xla_runtime_trace, m)?)?;
    m.add_function(wrap_pyfunction!(validate_bfc, m)?)?;
    m.add_function(wrap_pyfunction!(parse_capacity, m)?)?;
    m.add_function(wrap_pyfunction!(format_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(plan_json, m)?)?;
    m.add_function(wrap_pyfunction!(offline_json, m)?)?;
    registry::register(m)?;
    tune::register(m)?;
    m.add("POLICY_NAMES", allocreplay_core::policy::spec::POLICY_NAMES.to_vec())?;
    m.add("FORMAT_VERSION", allocreplay_core::trace::FORMAT_VERSION)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("AllocReplayError", py.get_type::<AllocReplayError>())?;
    m.add("TraceIOError", py.get_type::<TraceIOError>())?;
    m.add("TraceFormatError", py.get_type::<TraceFormatError>())?;
    m.add("UnsafePickleError", py.get_type::<UnsafePickleError>())?;
    m.add("UnknownFormatError", py.get_type::<UnknownFormatError>())?;
    m.add("SchemaError", py.get_type::<SchemaError>())?;
    m.add("PolicySpecError", py.get_type::<PolicySpecError>())?;
    m.add("InvalidArgumentError", py.get_type::<InvalidArgumentError>())?;
    m.add("ReplayError", py.get_type::<ReplayError>())?;
    Ok(())
}
