//! `validate`: replays a trace under the settings it recorded and compares, decision by
//! decision, with what the real allocator did. One module per source.

pub mod bfc;
pub mod pytorch;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::trace::Trace;

/// Validates every device of `trace` with the policy of its source. The result is one JSON
/// object: the keys of the first device's report at the top level, aggregated over devices
/// (`address_match` the minimum, `ok` all of them), and every device's report under `devices`.
pub fn validate_trace(trace: &Trace) -> Result<Value> {
    validate_trace_with(trace, false)
}

/// [`validate_trace`]; `no_addresses`: PyTorch traces replay without their recorded segment
/// addresses (`validate --no-addresses`), in the modelled driver address space.
pub fn validate_trace_with(trace: &Trace, no_addresses: bool) -> Result<Value> {
    let reports: Vec<Value> = match trace.metadata.source.as_str() {
        "pytorch" => trace
            .devices()
            .into_iter()
            .map(|d| pytorch::validate_pytorch_with(trace, d, no_addresses).map(|v| serde_json::to_value(v).expect("serializes")))
            .collect::<Result<_>>()?,
        // TensorFlow / JAX profiler captures: BFC's per-event chunk and in-use bytes.
        "xplane" => trace
            .devices()
            .into_iter()
            .map(|d| bfc::validate_bfc(trace, d, None).map(|v| serde_json::to_value(v).expect("serializes")))
            .collect::<Result<_>>()?,
        other => {
            return Err(Error::InvalidArgument(format!(
                "validate needs the recorded decisions of a PyTorch snapshot or a TensorFlow/JAX profiler capture; this trace comes from '{other}' (for XLA dumps, `allocreplay plan` compares the planner with XLA)"
            )))
        }
    };
    aggregate(reports)
}

fn aggregate(reports: Vec<Value>) -> Result<Value> {
    let Some(first) = reports.first() else {
        return Err(Error::InvalidArgument("the trace has no events to validate".into()));
    };
    let mut top = first.clone();
    let obj = top.as_object_mut().expect("reports are objects");
    if reports.len() > 1 {
        let min_match = reports.iter().filter_map(|r| r.get("address_match").and_then(Value::as_f64)).fold(f64::INFINITY, f64::min);
        if min_match.is_finite() {
            obj.insert("address_match".into(), json!(min_match));
        }
        for key in ["segment_events_match", "ok"] {
            if obj.contains_key(key) {
                let all = reports.iter().all(|r| r.get(key).and_then(Value::as_bool).unwrap_or(false));
                obj.insert(key.into(), json!(all));
            }
        }
    }
    obj.insert("devices".into(), Value::Array(reports));
    Ok(top)
}
