//! `allocreplay tune`'s engine: many policy specs replayed over one or more traces, in parallel
//! on all cores, one summary row per (setting, trace, device). The search space (from the policy
//! registry's per-option search values) and the ranking live in the Python layer; this is the
//! part that must be fast.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};

use crate::error::{Error, Result};
use crate::replay::{replay, summary_batch, ReplayRequest, Run};
use crate::trace::Trace;
use crate::units::Capacity;

/// Replays every trace under every spec: `replay::replay_with`'s job threads (`threads`, 0 =
/// one per core) with placements off and a one-point timeline, traces borrowed, not copied.
/// Returns `replay`'s summary columns with `setting` (index into `specs`) and `trace` (index
/// into `traces`) in front, rows ordered by trace, then setting, then device.
pub fn sweep(traces: &[&Trace], specs: &[String], capacity: Option<Capacity>, threads: usize) -> Result<RecordBatch> {
    if traces.is_empty() {
        return Err(Error::InvalidArgument("tune: no trace to replay".into()));
    }
    if specs.is_empty() {
        return Err(Error::InvalidArgument("tune: no setting to replay".into()));
    }
    let mut runs: Vec<Run> = Vec::new();
    let (mut setting, mut trace_index) = (Vec::new(), Vec::new());
    for (t, trace) in traces.iter().enumerate() {
        let req = ReplayRequest { policies: specs.to_vec(), capacity, timeline_points: 1, placements: false, threads };
        let devices = trace.devices().len();
        let trace_runs = replay(trace, &req)?;
        // `replay` returns the runs spec by spec, each with one run per device.
        for (i, _) in trace_runs.iter().enumerate() {
            setting.push((i / devices.max(1)) as u32);
            trace_index.push(t as u32);
        }
        runs.extend(trace_runs);
    }
    let summary = summary_batch(&runs);
    let mut fields = vec![Field::new("setting", DataType::UInt32, false), Field::new("trace", DataType::UInt32, false)];
    fields.extend(summary.schema().fields().iter().map(|f| f.as_ref().clone()));
    let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(setting)), Arc::new(UInt32Array::from(trace_index))];
    columns.extend(summary.columns().iter().cloned());
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("columns match their fields"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;

    use crate::import::{load, ImportOptions};

    fn two_streams() -> Trace {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/two_streams__default.pickle.xz");
        load(&p, &ImportOptions::default()).unwrap()
    }

    #[test]
    fn one_row_per_setting_and_trace_matching_single_replays() {
        let t = two_streams();
        let tiled = crate::trace::tile(&t, 2).unwrap();
        let specs: Vec<String> = ["pytorch", "pytorch:expandable_segments:True", "pytorch:max_split_size_mb:64"].map(String::from).to_vec();
        let b = sweep(&[&t, &tiled], &specs, Some(Capacity::Bytes(16 << 30)), 2).unwrap();
        assert_eq!(b.num_rows(), 6);
        let setting = b.column_by_name("setting").unwrap().as_primitive::<arrow_array::types::UInt32Type>();
        let trace = b.column_by_name("trace").unwrap().as_primitive::<arrow_array::types::UInt32Type>();
        assert_eq!(setting.values(), &[0, 1, 2, 0, 1, 2]);
        assert_eq!(trace.values(), &[0, 0, 0, 1, 1, 1]);
        let peak = b.column_by_name("peak_reserved_bytes").unwrap().as_primitive::<UInt64Type>();
        // The same numbers as replaying one spec alone (threads and batching change nothing).
        for (i, spec) in specs.iter().enumerate() {
            let req =
                ReplayRequest { policies: vec![spec.clone()], capacity: Some(Capacity::Bytes(16 << 30)), threads: 1, ..Default::default() };
            let alone = replay(&t, &req).unwrap();
            assert_eq!(peak.value(i), alone[0].replay.stats.peak_reserved, "{spec}");
        }
        // The README's numbers for this capture: expandable segments reserve less.
        assert!(peak.value(1) < peak.value(0));
        assert!(sweep(&[], &specs, None, 0).is_err());
        assert!(sweep(&[&t], &["nosuch".to_string()], None, 0).is_err());
    }
}
