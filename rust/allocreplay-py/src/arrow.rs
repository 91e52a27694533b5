//! Tables cross into Python through the Arrow C stream interface (`__arrow_c_stream__`
//! returning a PyCapsule named "arrow_array_stream"), so Polars and pyarrow import the Rust
//! record batches without copying them through Python objects.

use std::ffi::CStr;

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchIterator};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::errors::{guard, BindingResult};

pub(crate) const STREAM_NAME: &CStr = c"arrow_array_stream";

/// An Arrow C stream of one record batch, in a capsule the consumer moves it out of.
pub fn stream_capsule<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyCapsule>> {
    let reader = RecordBatchIterator::new(vec![Ok(batch.clone())], batch.schema());
    let stream = FFI_ArrowArrayStream::new(Box::new(reader));
    // The capsule's destructor drops the struct, which releases the stream unless the consumer
    // has moved it out (then `release` is null and nothing happens).
    PyCapsule::new_with_value(py, stream, STREAM_NAME)
}

/// A result table (record batch) exposed through `__arrow_c_stream__`.
#[pyclass(frozen, module = "allocreplay._core", name = "Table")]
pub struct PyTable {
    pub batch: RecordBatch,
}

#[pymethods]
impl PyTable {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> BindingResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // One schema; consumers cast if they must.
        guard(|| Ok(stream_capsule(py, &self.batch)?))
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }
}

impl PyTable {
    pub fn new(py: Python<'_>, batch: RecordBatch) -> PyResult<Py<PyTable>> {
        Py::new(py, PyTable { batch })
    }
}
