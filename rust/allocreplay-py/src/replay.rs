//! `replay`: every device of a trace under every policy spec; four result tables built in
//! Rust (`allocreplay_core::replay`).

use std::path::PathBuf;
use std::sync::Arc;

use allocreplay_core::replay::{self as core_replay, ReplayRequest};
use allocreplay_core::trace::MappedTrace;
use pyo3::prelude::*;

use crate::arrow::PyTable;
use crate::errors::{guard, BindingResult};
use crate::progress::PyProgress;
use crate::trace::PyTrace;
use crate::units::CapacityArg;

/// Results of a replay: four tables built in Rust.
#[pyclass(frozen, module = "allocreplay._core", name = "ReplayResult")]
pub struct PyReplayResult {
    #[pyo3(get)]
    pub(crate) summary: Py<PyTable>,
    #[pyo3(get)]
    pub(crate) timeline: Py<PyTable>,
    #[pyo3(get)]
    pub(crate) segments: Py<PyTable>,
    #[pyo3(get)]
    pub(crate) placements: Py<PyTable>,
}

impl PyReplayResult {
    /// The Python result of a replay's tables (`replay::result_tables`): every binding that
    /// replays returns it so.
    pub(crate) fn new(py: Python<'_>, t: core_replay::ResultTables) -> PyResult<Self> {
        Ok(PyReplayResult {
            summary: PyTable::new(py, t.summary)?,
            timeline: PyTable::new(py, t.timeline)?,
            segments: PyTable::new(py, t.segments)?,
            placements: PyTable::new(py, t.placements)?,
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
    let req = request(policies, capacity, timeline_points, placements, progress);
    guard(|| {
        let tables = crate::interrupt::detach(py, move || core_replay::replay(&*t, &req).map(|runs| core_replay::result_tables(&runs)))?;
        Ok(PyReplayResult::new(py, tables)?)
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
    let req = request(policies, capacity, timeline_points, placements, progress);
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
        Ok((PyReplayResult::new(py, tables)?, crate::info::TraceInfo { inner: info }))
    })
}

fn request(
    policies: Vec<String>,
    capacity: Option<CapacityArg>,
    timeline_points: usize,
    placements: bool,
    progress: Option<&PyProgress>,
) -> ReplayRequest {
    ReplayRequest {
        policies,
        capacity: capacity.map(|c| c.0),
        timeline_points,
        placements,
        progress: progress.map(|p| Arc::clone(&p.inner)),
        ..Default::default()
    }
}
