//! `allocreplay._core.Progress`: how far a long call has gone (`allocreplay_core::cancel::Progress`),
//! read by a progress bar from Python while the call runs with the GIL released.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use allocreplay_core::cancel::Progress;
use pyo3::prelude::*;

/// Work done so far by a load (bytes read) or a replay (trace rows walked), and its `total`,
/// read from any thread while the call runs with the GIL released.
#[pyclass(frozen, module = "allocreplay._core", name = "Progress")]
pub(crate) struct PyProgress {
    pub(crate) inner: Arc<Progress>,
}

#[pymethods]
impl PyProgress {
    #[new]
    fn new() -> Self {
        PyProgress { inner: Arc::new(Progress::default()) }
    }

    #[getter]
    fn done(&self) -> u64 {
        self.inner.done.load(Ordering::Relaxed)
    }

    #[getter]
    fn total(&self) -> u64 {
        self.inner.total.load(Ordering::Relaxed)
    }
}
