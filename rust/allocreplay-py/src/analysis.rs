//! Bindings of `allocreplay.analysis`, `Trace.from_events`, the snapshot export and a load that
//! counts its progress: the state of a policy at one event (allocations live, segments, blocks
//! and holes, the history for export) as Arrow tables, a trace from Arrow record batches, and a
//! load counting into a `Progress` Python polls while the GIL is released.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use allocreplay_core::analysis::{self, At, StateRequest};
use allocreplay_core::error::Error;
use allocreplay_core::import::{self, ImportOptions};
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::RecordBatch;
use arrow_array::RecordBatchReader;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::arrow::{PyTable, STREAM_NAME};
use crate::errors::{guard, BindingResult};
use crate::progress::PyProgress;
use crate::trace::PyTrace;
use crate::units::CapacityArg;

/// `load`, counting the bytes of the file read (decompressed) so far into `progress`.
#[pyfunction]
#[pyo3(signature = (path, progress, meta=None, allocator=None, lenient=false))]
fn load_progress(
    py: Python<'_>,
    path: PathBuf,
    progress: &PyProgress,
    meta: Option<PathBuf>,
    allocator: Option<String>,
    lenient: bool,
) -> BindingResult<PyTrace> {
    let opts = ImportOptions { meta, allocator, lenient };
    let p = progress.inner.clone();
    p.done.store(0, Ordering::Relaxed);
    p.total.store(0, Ordering::Relaxed);
    guard(|| {
        let t = crate::interrupt::detach(py, move || import::load_with_progress(&path, &opts, Some(&p)))?;
        Ok(PyTrace { inner: Arc::new(t) })
    })
}

/// The state of `policy` at `at` (`peak`, `peak_allocated`, `oom`, `end` or an event index)
/// on every device: (states, live allocations, blocks, segments, history) tables; the
/// history (for export) is empty unless `history`.
#[pyfunction]
#[pyo3(signature = (trace, policy, at="peak", capacity=None, history=false))]
fn state_at(
    py: Python<'_>,
    trace: &PyTrace,
    policy: String,
    at: &str,
    capacity: Option<CapacityArg>,
    history: bool,
) -> BindingResult<(PyTable, PyTable, PyTable, PyTable, PyTable)> {
    let t = trace.inner.clone();
    guard(|| {
        let at = At::parse(at)?;
        let capacity = capacity.map(|c| c.0);
        let req = StateRequest { policy, capacity, at, history };
        let b = crate::interrupt::detach(py, move || {
            analysis::state_at(&t, &req).map(|states| {
                let h = if history {
                    allocreplay_core::export::history_batch(&t, &states)
                } else {
                    allocreplay_core::export::history_batch(&t, &[])
                };
                (
                    analysis::states_batch(&states),
                    analysis::live_batch(&states),
                    analysis::blocks_batch(&states),
                    analysis::segments_batch(&states),
                    h,
                )
            })
        })?;
        Ok((PyTable { batch: b.0 }, PyTable { batch: b.1 }, PyTable { batch: b.2 }, PyTable { batch: b.3 }, PyTable { batch: b.4 }))
    })
}

/// A trace from an object exporting an Arrow C stream (a pyarrow Table with a trace's schema
/// and schema metadata), checked as an `.arrow` file is (its columns, then its events:
/// `trace::check`, strict unless `lenient`); `origin` names it in errors.
#[pyfunction]
#[pyo3(signature = (data, origin, lenient=false))]
fn trace_from_arrow(py: Python<'_>, data: Bound<'_, PyAny>, origin: String, lenient: bool) -> BindingResult<PyTrace> {
    guard(|| {
        let capsule = data.call_method1("__arrow_c_stream__", (py.None(),))?;
        let capsule = capsule.cast::<PyCapsule>().map_err(PyErr::from)?;
        let ptr = capsule.pointer_checked(Some(STREAM_NAME))?;
        // SAFETY: the capsule holds an FFI_ArrowArrayStream (checked by name); `from_raw` moves it
        // out and leaves a released stream behind for the capsule's destructor.
        let stream = unsafe { FFI_ArrowArrayStream::from_raw(ptr.as_ptr().cast()) };
        let origin_path = Path::new(&origin).to_path_buf();
        let reader =
            RecordBatchStreamReader::try_new(stream).map_err(|e| Error::format(&origin_path, format!("not an Arrow stream: {e}")))?;
        let schema = reader.schema();
        let batches: Vec<RecordBatch> =
            reader.collect::<Result<_, _>>().map_err(|e| Error::format(&origin_path, format!("corrupt Arrow record batch: {e}")))?;
        // The same checks as every load (`trace::check`, strict): a trace built in Python
        // replays only if its file would load.
        let t = crate::interrupt::detach(py, move || {
            let t = allocreplay_core::trace::trace_from_batches(schema, batches, &origin_path)?;
            allocreplay_core::trace::check::check_trace(t, &origin_path, lenient)
        })?;
        Ok(PyTrace { inner: Arc::new(t) })
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_progress, m)?)?;
    m.add_function(wrap_pyfunction!(state_at, m)?)?;
    m.add_function(wrap_pyfunction!(trace_from_arrow, m)?)?;
    Ok(())
}
