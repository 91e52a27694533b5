//! The trace: loading, its events (Arrow C stream), metadata (a dict built natively), frames
//! and stacks (two tables), `info()`, and the one trace writer (`save`, with an optional
//! device filter and metadata overrides).

use std::path::PathBuf;
use std::sync::Arc;

use allocreplay_core::import::{self, ImportOptions};
use allocreplay_core::trace::info::trace_info;
use allocreplay_core::trace::{write_arrow, write_arrow_to, WriteError};
use allocreplay_core::{Error, Trace};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict};

use crate::arrow::{stream_capsule, PyTable};
use crate::errors::{guard, BindingResult};
use crate::info::TraceInfo;

/// A trace loaded in Rust. Exposes its events through `__arrow_c_stream__`.
#[pyclass(frozen, module = "allocreplay._core", name = "Trace")]
pub struct PyTrace {
    pub inner: Arc<Trace>,
}

#[pymethods]
impl PyTrace {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> BindingResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // The events have one schema; consumers cast if they must.
        guard(|| Ok(stream_capsule(py, self.inner.batch())?))
    }

    fn __len__(&self) -> usize {
        self.inner.num_events()
    }

    /// The trace metadata (format version, source, devices, pools, settings...) as a dict.
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> BindingResult<Bound<'py, PyAny>> {
        guard(|| Ok(crate::convert::to_py(py, &serde_json::to_value(&self.inner.metadata).expect("metadata serializes"))?))
    }

    /// One row per stack frame: frame_id, filename, line, name.
    #[getter]
    fn frames(&self, py: Python<'_>) -> BindingResult<Py<PyTable>> {
        guard(|| Ok(PyTable::new(py, self.inner.frames.frames_batch())?))
    }

    /// One row per frame of each stack: stack_id (the events' `stack_id`), depth (0 the
    /// innermost), frame_id.
    #[getter]
    fn stacks(&self, py: Python<'_>) -> BindingResult<Py<PyTable>> {
        guard(|| Ok(PyTable::new(py, self.inner.frames.stacks_batch())?))
    }

    /// `allocreplay info`'s numbers.
    fn info(&self, py: Python<'_>) -> BindingResult<TraceInfo> {
        let t = Arc::clone(&self.inner);
        guard(|| Ok(TraceInfo { inner: crate::interrupt::detach(py, move || Ok(trace_info(&t)))? }))
    }

    /// Writes the trace as an `.arrow` file, atomically. `device`: keep only that device's
    /// events (and its metadata); `metadata`: keys to replace in the metadata (dicts merge).
    #[pyo3(signature = (path, device=None, metadata=None))]
    fn save(&self, py: Python<'_>, path: PathBuf, device: Option<i32>, metadata: Option<Bound<'_, PyDict>>) -> BindingResult<()> {
        let patch = metadata.map(|m| crate::convert::from_py(m.as_any())).transpose()?;
        let t = Arc::clone(&self.inner);
        guard(|| {
            crate::interrupt::detach(py, move || {
                let derived = derive(&t, device, patch.as_ref())?;
                write_arrow(derived.as_ref().unwrap_or(&t), &path)
            })?;
            Ok(())
        })
    }

    /// The `.arrow` file's bytes (for `-o -`: a trace written to stdout).
    fn ipc_bytes<'py>(&self, py: Python<'py>) -> BindingResult<Bound<'py, PyBytes>> {
        let t = Arc::clone(&self.inner);
        guard(|| {
            let bytes = crate::interrupt::detach(py, move || {
                let mut buf = Vec::new();
                write_arrow_to(&t, &mut buf).map(|()| buf).map_err(|e| match e {
                    WriteError::Io(e) => Error::Replay(format!("writing the trace: {e}")),
                    WriteError::Arrow(m) => Error::Replay(format!("writing the trace: {m}")),
                })
            })?;
            Ok(PyBytes::new(py, &bytes))
        })
    }
}

/// `trace` with only `device`'s events and with `patch` merged into its metadata; `None` when
/// neither is asked for.
fn derive(trace: &Trace, device: Option<i32>, patch: Option<&serde_json::Value>) -> Result<Option<Trace>, Error> {
    let mut out: Option<Trace> = None;
    if let Some(d) = device {
        out = Some(out.as_ref().unwrap_or(trace).select_device(d)?);
    }
    if let Some(p) = patch {
        out = Some(out.as_ref().unwrap_or(trace).with_metadata_patch(p)?);
    }
    Ok(out)
}

/// The `info` and metadata of an `.arrow` file, streamed from the file (one checked pass,
/// memory O(live allocations)): `allocreplay info` on a trace too large to load.
#[pyfunction]
pub fn info_file<'py>(py: Python<'py>, path: PathBuf) -> BindingResult<(TraceInfo, Bound<'py, PyAny>)> {
    guard(|| {
        let t = crate::interrupt::detach(py, move || allocreplay_core::trace::MappedTrace::open(&path))?;
        let metadata = crate::convert::to_py(py, &serde_json::to_value(&t.metadata).expect("metadata serializes"))?;
        Ok((TraceInfo { inner: t.info().clone() }, metadata))
    })
}

/// Loads an `.arrow` trace or imports a raw source (format detected from its bytes); `lenient`
/// skips the events that break the trace's semantics instead of refusing it.
#[pyfunction]
#[pyo3(signature = (path, meta=None, allocator=None, lenient=false))]
pub fn load(py: Python<'_>, path: PathBuf, meta: Option<PathBuf>, allocator: Option<String>, lenient: bool) -> BindingResult<PyTrace> {
    let opts = ImportOptions { meta, allocator, lenient };
    guard(|| {
        let t = crate::interrupt::detach(py, move || import::load(&path, &opts))?;
        Ok(PyTrace { inner: Arc::new(t) })
    })
}
