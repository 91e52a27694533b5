//! XLA dumps and offline bounds: `plan` (XLA's buffer assignment replayed, one row per
//! program), `offline` (`ideal` / `offline` bounds of a trace, one row per device) and the
//! runtime trace of one program.

use std::path::PathBuf;
use std::sync::Arc;

use allocreplay_core::import::xla::{load_dump, XlaProgram};
use allocreplay_core::offline::buffer_assignment::{plan_dump, runtime_trace};
use allocreplay_core::offline::{plan_trace, tables};
use allocreplay_core::Error;
use pyo3::prelude::*;

use crate::arrow::PyTable;
use crate::errors::{guard, BindingResult};
use crate::trace::PyTrace;

/// `allocreplay plan DUMP_DIR`: every program of an XLA dump, one row each.
#[pyfunction]
pub fn plan(py: Python<'_>, path: PathBuf) -> BindingResult<Py<PyTable>> {
    guard(|| {
        let batch = crate::interrupt::detach(py, move || plan_dump(&path).map(|plans| tables::plans_batch(&plans)))?;
        Ok(PyTable::new(py, batch)?)
    })
}

/// The `ideal` and `offline` bounds of every device of `trace` (alignment 0: the source's
/// default), one row per device.
#[pyfunction]
#[pyo3(signature = (trace, alignment=0))]
pub fn offline(py: Python<'_>, trace: &PyTrace, alignment: u64) -> BindingResult<Py<PyTable>> {
    let t = Arc::clone(&trace.inner);
    guard(|| {
        let batch = crate::interrupt::detach(py, move || {
            t.devices().into_iter().map(|d| plan_trace(&t, d, alignment)).collect::<Result<Vec<_>, _>>().map(|r| tables::offline_batch(&r))
        })?;
        Ok(PyTable::new(py, batch)?)
    })
}

/// The allocations the JAX runtime makes running one program of an XLA dump `calls` times
/// (arguments, then per call the live-out allocations and the temp arena): a trace to replay
/// under `jax` / `bfc`. `program`: a substring of the program's name; default the program
/// with the largest preallocated-temp allocation.
#[pyfunction]
#[pyo3(signature = (path, program=None, calls=3))]
pub fn xla_runtime_trace(py: Python<'_>, path: PathBuf, program: Option<String>, calls: usize) -> BindingResult<PyTrace> {
    let t = guard(|| {
        crate::interrupt::detach(py, move || {
            let programs = load_dump(&path)?;
            let temp = |p: &XlaProgram| -> i64 { p.allocations.iter().filter(|a| a.is_preallocated_temp()).map(|a| a.size).sum() };
            let chosen = match &program {
                Some(name) => programs.iter().find(|p| p.program.contains(name.as_str())).ok_or_else(|| {
                    Error::invalid_input(
                        &path,
                        format!(
                            "no program matching '{name}'; programs: {}",
                            programs.iter().map(|p| p.program.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    )
                })?,
                None => programs.iter().max_by_key(|p| temp(p)).ok_or_else(|| Error::invalid_input(&path, "no programs"))?,
            };
            runtime_trace(chosen, calls.max(1))
        })
    })?;
    Ok(PyTrace { inner: Arc::new(t) })
}
