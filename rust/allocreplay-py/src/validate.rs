//! `validate`: one typed report per device — `ValidationReport` for PyTorch snapshots,
//! `BfcValidationReport` for TensorFlow / JAX profiler captures (see
//! `allocreplay_core::validate`).

use std::sync::Arc;

use allocreplay_core::validate::bfc::BfcValidation;
use allocreplay_core::validate::pytorch::PytorchValidation;
use allocreplay_core::validate::{self as core_validate, DeviceValidation};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::errors::{guard, BindingResult};
use crate::trace::PyTrace;
use crate::typed::typed_result;

typed_result!(
    /// The `pytorch` policy replayed on one device of a PyTorch snapshot under its recorded
    /// settings, against the recorded decisions (`validate_pytorch`).
    ValidationReport wraps PytorchValidation {
        device: i32,
        policy: String,
        capacity: Option<u64>,
        device_limit: Option<u64>,
        capacity_source: String,
        allocs: usize,
        address_match: f64,
        first_address_mismatch_event: Option<usize>,
        segment_events_match: bool,
        segment_addresses_match: bool,
        segment_events_recorded: usize,
        segment_events_replayed: usize,
        first_segment_mismatch: Option<usize>,
        peak_reserved_recorded: Option<u64>,
        peak_reserved_replayed: u64,
        peak_allocated_recorded: Option<u64>,
        peak_allocated_replayed: u64,
        num_alloc_retries_recorded: Option<u64>,
        num_alloc_retries_replayed: u64,
        num_ooms_recorded: Option<u64>,
        num_ooms_replayed: u64,
        no_addresses: bool,
        settings_assumed: Option<String>,
        seeded: bool,
        assumed: Vec<String>,
        address_notes: Vec<String>,
        ok: bool,
    }
);

typed_result!(
    /// The `bfc` policy replayed on one device of a TensorFlow / JAX profiler capture, event by
    /// event against the recorded chunks and bytes in use (`validate_bfc`).
    BfcValidationReport wraps BfcValidation {
        device: i32,
        allocator: Option<String>,
        policy: String,
        settings_source: String,
        events: usize,
        allocs: usize,
        frees: usize,
        chunk_match: f64,
        in_use_match: f64,
        address_match: f64,
        chunk_mismatches: usize,
        in_use_mismatches: usize,
        first_chunk_mismatch_event: Option<usize>,
        first_in_use_mismatch_event: Option<usize>,
        peak_in_use_recorded: Option<u64>,
        peak_in_use_replayed: u64,
        peak_before_window: bool,
        pool_bytes_recorded: Option<u64>,
        pool_bytes_replayed: u64,
        peak_pool_bytes_recorded: Option<u64>,
        peak_pool_bytes_replayed: u64,
        regions_replayed: usize,
        ooms_replayed: u64,
        seeded: bool,
        ok: bool,
    }
);

/// `validate`: every device of `trace` (ascending), replayed under its recorded settings.
/// `no_addresses`: PyTorch traces replay in the modelled driver address space, without their
/// recorded segment addresses (`validate --no-addresses`).
#[pyfunction]
#[pyo3(signature = (trace, no_addresses=false))]
pub fn validate(py: Python<'_>, trace: &PyTrace, no_addresses: bool) -> BindingResult<Vec<Py<PyAny>>> {
    let t = Arc::clone(&trace.inner);
    guard(|| {
        let reports = crate::interrupt::detach(py, move || core_validate::validate_trace_with(&t, no_addresses))?;
        let mut out = Vec::with_capacity(reports.len());
        for r in reports {
            out.push(match r {
                DeviceValidation::Pytorch(inner) => ValidationReport { inner }.into_py_any(py)?,
                DeviceValidation::Bfc(inner) => BfcValidationReport { inner }.into_py_any(py)?,
            });
        }
        Ok(out)
    })
}

/// Validates the `bfc` policy on a BFC trace (a TensorFlow / JAX capture) event by event:
/// chunk sizes, bytes in use, peak in use, pool bytes. `policy`: a `bfc` / `tf` / `jax` spec;
/// default: the settings the capture recorded. `device`: default the first.
#[pyfunction]
#[pyo3(signature = (trace, device=None, policy=None))]
pub fn validate_bfc(py: Python<'_>, trace: &PyTrace, device: Option<i32>, policy: Option<String>) -> BindingResult<BfcValidationReport> {
    let t = Arc::clone(&trace.inner);
    guard(|| {
        let inner = crate::interrupt::detach(py, move || {
            let device = device.or_else(|| t.devices().first().copied()).unwrap_or(0);
            core_validate::bfc::validate_bfc(&t, device, policy.as_deref())
        })?;
        Ok(BfcValidationReport { inner })
    })
}
