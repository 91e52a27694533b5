//! Sizes: parsing `--capacity` and printing bytes as the CLI does (`allocreplay_core::units`).

use allocreplay_core::error::Error;
use allocreplay_core::units::{self, Capacity};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};
use pyo3::IntoPyObjectExt;

use crate::errors::{guard, BindingError, BindingResult};

/// A capacity as Python passes it, parsed once at the edge into the core's typed [`Capacity`]:
/// an `int` (bytes), a `float` (a fraction of the device's memory, in (0, 1]) or a `str`
/// (`"80GiB"`, `"16GB"`, `"17179869184"`, `"0.5"`), by `units::parse_capacity`'s rules; a
/// `bool` or anything else is refused. Every binding that takes a capacity takes this.
pub struct CapacityArg(pub Capacity);

impl<'a, 'py> FromPyObject<'a, 'py> for CapacityArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let refused = || -> PyErr {
            let shown = obj.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
            BindingError::from(Error::InvalidArgument(format!("capacity {shown}: expected bytes, a size string or a fraction"))).into()
        };
        // The text each kind is parsed from: a float by its repr (0.5 -> "0.5", 1e-05 ->
        // "1e-05": refused as a size), an int by its digits, a string as it is.
        let text: String = if obj.is_instance_of::<PyBool>() {
            return Err(refused());
        } else if obj.is_instance_of::<PyFloat>() {
            let repr = obj.repr()?.to_string();
            if repr.contains('.') {
                repr
            } else {
                format!("{:.6}", obj.extract::<f64>()?)
            }
        } else if obj.is_instance_of::<PyInt>() {
            obj.str()?.to_string()
        } else if obj.is_instance_of::<PyString>() {
            obj.extract::<String>()?
        } else if obj.hasattr("__index__")? {
            // An integer of another type (numpy.int64): its value, as an int's.
            obj.call_method0("__index__")?.str()?.to_string()
        } else {
            return Err(refused());
        };
        units::parse_capacity(&text).map(CapacityArg).map_err(|e| BindingError::from(e).into())
    }
}

/// Parses a capacity ([`CapacityArg`]: int, float or str) into an int (bytes) or a float (a
/// fraction of device memory).
#[pyfunction]
pub fn parse_capacity(py: Python<'_>, capacity: CapacityArg) -> BindingResult<Py<PyAny>> {
    guard(|| {
        Ok(match capacity.0 {
            Capacity::Bytes(b) => b.into_py_any(py)?,
            Capacity::Fraction(f) => f.into_py_any(py)?,
        })
    })
}

#[pyfunction]
pub fn format_bytes(n: u64) -> BindingResult<String> {
    guard(|| Ok(units::format_bytes(n)))
}
