//! `allocreplay tune`'s bindings: `_core.sweep` (many specs over many traces on all cores, GIL
//! released, traces shared), `_core.tile` (a long trace from a real one, for benchmarks) and
//! `_core.trace_from_arrow` (a trace from any Arrow C stream, e.g. a pyarrow table out of Ray's
//! object store).

use std::sync::Arc;

use allocreplay_core::trace::tile as core_tile;
use pyo3::prelude::*;

use crate::arrow::PyTable;
use crate::errors::{guard, BindingResult};
use crate::trace::PyTrace;
use crate::units::CapacityArg;

/// Replays every trace under every spec, in parallel (`threads`: 0 = one per core). One row
/// per (setting, trace, device): `setting` and `trace` index the lists given, then the
/// `replay` summary's columns.
#[pyfunction]
#[pyo3(signature = (traces, specs, capacity=None, threads=0))]
fn sweep(
    py: Python<'_>,
    traces: Vec<PyRef<'_, PyTrace>>,
    specs: Vec<String>,
    capacity: Option<CapacityArg>,
    threads: usize,
) -> BindingResult<PyTable> {
    let shared: Vec<Arc<allocreplay_core::Trace>> = traces.iter().map(|t| t.inner.clone()).collect();
    guard(|| {
        let capacity = capacity.map(|c| c.0);
        let batch = crate::interrupt::detach(py, move || {
            let refs: Vec<&allocreplay_core::Trace> = shared.iter().map(|t| t.as_ref()).collect();
            allocreplay_core::tune::sweep(&refs, &specs, capacity, threads)
        })?;
        Ok(PyTable { batch })
    })
}

/// `trace` repeated `n` times with fresh allocation ids, shifted addresses and times.
#[pyfunction]
fn tile(py: Python<'_>, trace: &PyTrace, n: usize) -> BindingResult<PyTrace> {
    let t = trace.inner.clone();
    guard(|| {
        let tiled = crate::interrupt::detach(py, move || core_tile(&t, n))?;
        Ok(PyTrace { inner: Arc::new(tiled) })
    })
}

/// `tile` written to `path` batch by batch (`batch_rows` events each), never held whole: a
/// tile of any length in the memory of one batch. The number of events written.
#[pyfunction]
#[pyo3(signature = (trace, n, path, batch_rows=1048576))]
fn tile_file(py: Python<'_>, trace: &PyTrace, n: usize, path: std::path::PathBuf, batch_rows: usize) -> BindingResult<u64> {
    let t = trace.inner.clone();
    guard(|| crate::interrupt::detach(py, move || allocreplay_core::trace::tile_to_file(&t, n, &path, batch_rows)))
}

/// Adds the functions to `_core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(tile, m)?)?;
    m.add_function(wrap_pyfunction!(tile_file, m)?)?;
    Ok(())
}
