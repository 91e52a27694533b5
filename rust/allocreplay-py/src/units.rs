//! Sizes: parsing `--capacity` and printing bytes as the CLI does (`allocreplay_core::units`).

use allocreplay_core::units::{self, Capacity};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::errors::{guard, BindingResult};

/// Parses a capacity string: an int (bytes) or a float (a fraction of device memory).
#[pyfunction]
pub fn parse_capacity(py: Python<'_>, text: &str) -> BindingResult<Py<PyAny>> {
    guard(|| {
        Ok(match units::parse_capacity(text)? {
            Capacity::Bytes(b) => b.into_py_any(py)?,
            Capacity::Fraction(f) => f.into_py_any(py)?,
        })
    })
}

#[pyfunction]
pub fn format_bytes(n: u64) -> BindingResult<String> {
    guard(|| Ok(units::format_bytes(n)))
}
