//! `allocreplay tune`'s bindings: `_core.sweep` (many specs over many traces on all cores, GIL
//! released, traces shared), `_core.tile` (a long trace from a real one, for benchmarks) and
//! `_core.trace_from_arrow` (a trace from any Arrow C stream, e.g. a pyarrow table out of Ray's
//! object store).

use std::path::Path;
use std::sync::Arc;

use allocreplay_core::error::Error;
use allocreplay_core::trace::{tile as core_tile, trace_from_batches};
use allocreplay_core::units;
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::RecordBatch;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::{to_py, PyTable, PyTrace};

/// Replays every trace under every spec, in parallel (`threads`: 0 = one per core). One row
/// per (setting, trace, device): `setting` and `trace` index the lists given, then the
/// `replay` summary's columns.
#[pyfunction]
#[pyo3(signature = (traces, specs, capacity=None, threads=0))]
fn sweep(py: Python<'_>, traces: Vec<PyRef<'_, PyTrace>>, specs: Vec<String>, capacity: Option<&str>, threads: usize) -> PyResult<PyTable> {
    let capacity = capacity.map(units::parse_capacity).transpose().map_err(|e| to_py(py, e))?;
    let shared: Vec<Arc<allocreplay_core::Trace>> = traces.iter().map(|t| t.inner.clone()).collect();
    let batch = py
        .detach(move || {
            let refs: Vec<&allocreplay_core::Trace> = shared.iter().map(|t| t.as_ref()).collect();
            allocreplay_core::tune::sweep(&refs, &specs, capacity, threads)
        })
        .map_err(|e| to_py(py, e))?;
    Ok(PyTable { batch })
}

/// `trace` repeated `n` times with fresh allocation ids, shifted addresses and times.
#[pyfunction]
fn tile(py: Python<'_>, trace: &PyTrace, n: usize) -> PyResult<PyTrace> {
    let t = trace.inner.clone();
    let tiled = py.detach(move || core_tile(&t, n)).map_err(|e| to_py(py, e))?;
    Ok(PyTrace { inner: Arc::new(tiled) })
}

/// A trace from an object exporting `__arrow_c_stream__` whose schema carries the trace's
/// metadata (`Trace.to_arrow()`, or that table after a trip through Ray's object store).
/// Checked as an `.arrow` file is.
#[pyfunction]
fn trace_from_arrow(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<PyTrace> {
    let capsule = data.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast::<PyCapsule>().map_err(PyErr::from)?;
    let ptr = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: the capsule holds an FFI_ArrowArrayStream (named "arrow_array_stream" by the
    // Arrow PyCapsule interface); `from_raw` moves it out and leaves a released stream behind,
    // which the capsule's destructor then ignores.
    let stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr.as_ptr().cast::<FFI_ArrowArrayStream>()) };
    let origin = Path::new("<arrow stream>");
    let bad = |e: String| to_py(py, Error::format(origin, e));
    let reader = RecordBatchStreamReader::try_new(stream).map_err(|e| bad(format!("not a readable Arrow stream ({e})")))?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(|e| bad(format!("corrupt Arrow record batch: {e}")))?;
    let t = py.detach(move || trace_from_batches(schema, batches, origin)).map_err(|e| to_py(py, e))?;
    Ok(PyTrace { inner: Arc::new(t) })
}

/// Adds the functions to `_core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(tile, m)?)?;
    m.add_function(wrap_pyfunction!(trace_from_arrow, m)?)?;
    Ok(())
}
