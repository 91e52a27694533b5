//! `replay`: every device of a trace under every policy spec; four result tables built in
//! Rust (`allocreplay_core::replay`).

use std::sync::Arc;

use allocreplay_core::replay::{self as core_replay, ReplayRequest};
use pyo3::prelude::*;

use crate::arrow::PyTable;
use crate::errors::{guard, BindingResult};
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

/// Replays every device of `trace` under every policy spec. A policy that cannot run on a
/// device of this trace gets a row whose `error` column says why.
#[pyfunction]
#[pyo3(signature = (trace, policies, capacity=None, timeline_points=2000, placements=true))]
pub fn replay(
    py: Python<'_>,
    trace: &PyTrace,
    policies: Vec<String>,
    capacity: Option<CapacityArg>,
    timeline_points: usize,
    placements: bool,
) -> BindingResult<PyReplayResult> {
    let t = Arc::clone(&trace.inner);
    guard(|| {
        let capacity = capacity.map(|c| c.0);
        let req = ReplayRequest { policies, capacity, timeline_points, placements, threads: 0 };
        let tables = crate::interrupt::detach(py, move || core_replay::replay(&t, &req).map(|runs| core_replay::result_tables(&runs)))?;
        Ok(PyReplayResult::new(py, tables)?)
    })
}
