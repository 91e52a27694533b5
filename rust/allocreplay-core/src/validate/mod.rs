//! `validate`: replays a trace under the settings it recorded and compares, decision by
//! decision, with what the real allocator did. One module per source.

pub mod bfc;
pub mod pytorch;

use crate::error::{Error, Result};
use crate::trace::Trace;

/// The report of one device: which one depends on the trace's source.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceValidation {
    /// A PyTorch snapshot: addresses, segment events, peaks, retries, OOMs.
    Pytorch(pytorch::PytorchValidation),
    /// A TensorFlow / JAX profiler capture: BFC's per-event chunk and in-use bytes.
    Bfc(bfc::BfcValidation),
}

impl DeviceValidation {
    pub fn ok(&self) -> bool {
        match self {
            DeviceValidation::Pytorch(v) => v.ok,
            DeviceValidation::Bfc(v) => v.ok,
        }
    }

    pub fn device(&self) -> i32 {
        match self {
            DeviceValidation::Pytorch(v) => v.device,
            DeviceValidation::Bfc(v) => v.device,
        }
    }
}

/// Validates every device of `trace` (ascending) with the policy of its source.
pub fn validate_trace(trace: &Trace) -> Result<Vec<DeviceValidation>> {
    validate_trace_with(trace, false)
}

/// [`validate_trace`]; `no_addresses`: PyTorch traces replay without their recorded segment
/// addresses (`validate --no-addresses`), in the modelled driver address space.
pub fn validate_trace_with(trace: &Trace, no_addresses: bool) -> Result<Vec<DeviceValidation>> {
    let reports: Vec<DeviceValidation> = match trace.metadata.source.as_str() {
        "pytorch" => trace
            .devices()
            .into_iter()
            .map(|d| pytorch::validate_pytorch_with(trace, d, no_addresses).map(DeviceValidation::Pytorch))
            .collect::<Result<_>>()?,
        "xplane" => trace.devices().into_iter().map(|d| bfc::validate_bfc(trace, d, None).map(DeviceValidation::Bfc)).collect::<Result<_>>()?,
        other => {
            return Err(Error::InvalidArgument(format!(
                "validate needs the recorded decisions of a PyTorch snapshot or a TensorFlow/JAX profiler capture; this trace comes from '{other}' (for XLA dumps, `allocreplay plan` compares the planner with XLA)"
            )))
        }
    };
    if reports.is_empty() {
        return Err(Error::InvalidArgument("the trace has no events to validate".into()));
    }
    Ok(reports)
}
