//! `replay`: every device of a trace under every policy spec; four result tables built in
//! Rust (`allocreplay_core::replay`).

use std::path::PathBuf;
use std::sync::Arc;

use allocreplay_core::replay::{self as core_replay, ReplayRequest};
use allocreplay_core::trace::MappedTrace;
use allocreplay_core::trace::Trace;
use arrow_array::RecordBatch;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::arrow::PyTable;
use crate::errors::{guard, BindingResult};
use crate::progress::PyProgress;
use crate::trace::PyTrace;
use crate::units::CapacityArg;

/// Results of a replay: four tables built in Rust. The placements table (one row per
/// allocation, and a third of a replay's time where it was built with the others; issue 30) is
/// built when it is first read, by replaying the same request again with placements on: replays
/// are deterministic, so it is the table the first replay would have built.
#[pyclass(frozen, module = "allocreplay._core", name = "ReplayResult")]
pub struct PyReplayResult {
    #[pyo3(get)]
    pub(crate) summary: Py<PyTable>,
    #[pyo3(get)]
    pub(crate) timeline: Py<PyTable>,
    #[pyo3(get)]
    pub(crate) segments: Py<PyTable>,
    placements: PyOnceLock<Py<PyTable>>,
    /// What replays again for the placements; `None` when the request asked for none (the
    /// table is then the empty one, built with the others).
    again: Option<Again>,
}

/// The source and request of a replay whose placements are still to be built.
#[derive(Clone)]
enum Again {
    /// A trace held whole.
    Memory(Arc<Trace>, ReplayRequest),
    /// An `.arrow` file streamed again (an error if it changed since).
    File(PathBuf, ReplayRequest),
}

impl Again {
    /// The placements table of the request's replay.
    fn placements(self) -> allocreplay_core::error::Result<RecordBatch> {
        let runs = match self {
            Again::Memory(t, req) => core_replay::replay(&*t, &with_placements(req))?,
            Again::File(path, req) => core_replay::replay(&MappedTrace::open(&path)?, &with_placements(req))?,
        };
        Ok(core_replay::placements_batch(&runs))
    }
}

/// `req` building the placements table and nothing it can skip.
fn with_placements(req: ReplayRequest) -> ReplayRequest {
    ReplayRequest { placements: true, timeline_points: 1, progress: None, ..req }
}

impl PyReplayResult {
    /// The Python result of a replay's tables (`replay::result_tables`), with the placements
    /// to build on first read from `again` when the request asked for them (see the type).
    fn new(py: Python<'_>, t: core_replay::ResultTables, again: Option<Again>) -> PyResult<Self> {
        let placements = PyOnceLock::new();
        if again.is_none() {
            placements.get_or_try_init(py, || PyTable::new(py, t.placements))?;
        }
        Ok(PyReplayResult {
            summary: PyTable::new(py, t.summary)?,
            timeline: PyTable::new(py, t.timeline)?,
            segments: PyTable::new(py, t.segments)?,
            placements,
            again,
        })
    }
}

#[pymethods]
impl PyReplayResult {
    /// Where each request was placed: built on first read (see the type).
    #[getter]
    fn placements(&self, py: Python<'_>) -> BindingResult<Py<PyTable>> {
        if let Some(t) = self.placements.get(py) {
            return Ok(t.clone_ref(py));
        }
        let again = self.again.clone().expect("set when the request asked for no placements");
        guard(|| {
            // Two threads reading it at once both replay; the first table stored is kept.
            let batch = crate::interrupt::detach(py, move || again.placements())?;
            let table = self.placements.get_or_try_init(py, || PyTable::new(py, batch))?;
            Ok(table.clone_ref(py))
        })
    }
}

/// Replays every device of `trace` under every policy spec (`allocreplay_core::replay::replay`),
/// counting the trace rows walked into `progress` when given. A policy that cannot run on a
/// device of this trace gets a row whose `error` column says why.
#[pyfunction]
#[pyo3(signature = (trace, policies, capacity=None, timeline_points=2000, placements=true, progress=None))]
pub fn replay(
    py: Python<'_>,
    trace: &PyTrace,
    policies: Vec<String>,
    capacity: Option<CapacityArg>,
    timeline_points: usize,
    placements: bool,
    progress: Option<&PyProgress>,
) -> BindingResult<PyReplayResult> {
    let t = Arc::clone(&trace.inner);
    let req = request(policies, capacity, timeline_points, progress);
    let again = placements.then(|| Again::Memory(Arc::clone(&t), req.clone()));
    guard(|| {
        let tables = crate::interrupt::detach(py, move || core_replay::replay(&*t, &req).map(|runs| core_replay::result_tables(&runs)))?;
        Ok(PyReplayResult::new(py, tables, again)?)
    })
}

/// [`replay`] of an `.arrow` file streamed batch by batch (`allocreplay_core::trace::MappedTrace`):
/// memory is the policies' state and a record batch per replay running, not the trace's. Also
/// returns the trace's `info` (from the same first pass).
#[pyfunction]
#[pyo3(signature = (path, policies, capacity=None, timeline_points=2000, placements=true, progress=None))]
pub fn replay_file(
    py: Python<'_>,
    path: PathBuf,
    policies: Vec<String>,
    capacity: Option<CapacityArg>,
    timeline_points: usize,
    placements: bool,
    progress: Option<&PyProgress>,
) -> BindingResult<(PyReplayResult, crate::info::TraceInfo)> {
    let req = request(policies, capacity, timeline_points, progress);
    let again = placements.then(|| Again::File(path.clone(), req.clone()));
    if let Some(p) = &req.progress {
        // Opening the file reads it once; the bar starts when the replays do.
        p.start(0);
    }
    guard(|| {
        let (tables, info) = crate::interrupt::detach(py, move || -> allocreplay_core::error::Result<_> {
            let trace = MappedTrace::open(&path)?;
            let runs = core_replay::replay(&trace, &req)?;
            Ok((core_replay::result_tables(&runs), trace.info().clone()))
        })?;
        Ok((PyReplayResult::new(py, tables, again)?, crate::info::TraceInfo { inner: info }))
    })
}

fn request(policies: Vec<String>, capacity: Option<CapacityArg>, timeline_points: usize, progress: Option<&PyProgress>) -> ReplayRequest {
    // The placements are built when first read (`PyReplayResult`), not with the other tables.
    ReplayRequest {
        policies,
        capacity: capacity.map(|c| c.0),
        timeline_points,
        placements: false,
        progress: progress.map(|p| Arc::clone(&p.inner)),
        ..Default::default()
    }
}
