//! `allocreplay tune`'s engine: many policy specs replayed over one or more traces, in parallel
//! on all cores, one summary row per (setting, trace, device). The search space (from the policy
//! registry's per-option search values) and the ranking live in the Python layer; this is the
//! part that must be fast.

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};

use crate::error::{Error, Result};
use crate::replay::{failed_run, replay, summary_batch, ReplayRequest, Run};
use crate::trace::Trace;
use crate::units::Capacity;

thread_local! {
    /// Where the last panic on this thread happened and what it said (see `quiet_panics`).
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// One (trace, setting) job's outcome.
enum Outcome {
    Runs(Vec<Run>),
    /// The policy panicked on this trace: its rows carry the message instead of numbers.
    Failed(String),
}

/// Replays every trace under every spec, one job per (trace, spec) on `threads` worker threads
/// (0 = one per core; placements off, a one-point timeline, traces borrowed, not copied), as
/// `replay::replay` runs its jobs. Returns `replay`'s summary columns with `setting`
/// (index into `specs`) and `trace` (index into `traces`) in front and `error` at the end,
/// rows ordered by trace, then setting, then device. A spec that does not parse fails the
/// sweep; a policy that panics on a trace (a bug) fails only its own rows, whose `error` says
/// where, so one setting cannot sink a search of hundreds.
pub fn sweep(traces: &[&Trace], specs: &[String], capacity: Option<Capacity>, threads: usize) -> Result<RecordBatch> {
    if traces.is_empty() {
        return Err(Error::InvalidArgument("tune: no trace to replay".into()));
    }
    if specs.is_empty() {
        return Err(Error::InvalidArgument("tune: no setting to replay".into()));
    }
    let jobs: Vec<(usize, usize)> = (0..traces.len()).flat_map(|t| (0..specs.len()).map(move |s| (t, s))).collect();
    let threads = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads }.min(jobs.len()).max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Outcome>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let work = || loop {
        if crate::cancel::requested() {
            break;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&(t, s)) = jobs.get(i) else { break };
        let req = ReplayRequest {
            policies: vec![specs[s].clone()],
            capacity,
            timeline_points: 1,
            placements: false,
            threads: 1,
            ..Default::default()
        };
        let outcome = match panic::catch_unwind(AssertUnwindSafe(|| replay(traces[t], &req))) {
            Ok(Ok(runs)) => Ok(Outcome::Runs(runs)),
            Ok(Err(e)) => Err(e),
            Err(payload) => {
                let msg = payload.downcast_ref::<&str>().map(|m| m.to_string()).or_else(|| payload.downcast_ref::<String>().cloned());
                let at = LAST_PANIC.with(|p| p.borrow_mut().take());
                Ok(Outcome::Failed(format!("the policy panicked: {}", at.or(msg).unwrap_or_else(|| "(no message)".into()))))
            }
        };
        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(outcome);
    };
    // The workers run under the caller's cancellation token (`crate::cancel`).
    let token = crate::cancel::current();
    quiet_panics(|| {
        std::thread::scope(|sc| {
            for _ in 0..threads {
                sc.spawn(|| crate::cancel::within(token.as_ref(), work));
            }
        })
    });
    // Cancelled: jobs were cut short or never ran; nothing partial is returned.
    crate::cancel::check()?;
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut runs: Vec<Run> = Vec::new();
    let (mut setting, mut trace_index) = (Vec::new(), Vec::new());
    for (&(t, s), r) in jobs.iter().zip(results) {
        let job_runs = match r.expect("every job ran")? {
            Outcome::Runs(r) => r,
            Outcome::Failed(m) => traces[t].devices().into_iter().map(|device| failed_run(&specs[s], device, None, m.clone())).collect(),
        };
        for _ in &job_runs {
            setting.push(s as u32);
            trace_index.push(t as u32);
        }
        runs.extend(job_runs);
    }
    let summary = summary_batch(&runs);
    let mut fields = vec![Field::new("setting", DataType::UInt32, false), Field::new("trace", DataType::UInt32, false)];
    fields.extend(summary.schema().fields().iter().map(|f| f.as_ref().clone()));
    // The summary's own `error` column says why a setting could not run (or panicked).
    let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(setting)), Arc::new(UInt32Array::from(trace_index))];
    columns.extend(summary.columns().iter().cloned());
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("columns match their fields"))
}

/// Runs `f` with panics recorded in `LAST_PANIC` (location and message) instead of printed, so
/// a policy's panic becomes its row's `error`, not text on the user's terminal. The hook is
/// process-wide: sweeps take turns installing it.
fn quiet_panics<R>(f: impl FnOnce() -> R) -> R {
    static HOOK: Mutex<()> = Mutex::new(());
    let _guard = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let msg = info.payload().downcast_ref::<&str>().map(|m| m.to_string()).or_else(|| info.payload().downcast_ref::<String>().cloned());
        let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{} at {at}", msg.unwrap_or_else(|| "(no message)".into()))));
    }));
    let r = f();
    panic::set_hook(previous);
    r
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
        assert_eq!(b.column_by_name("error").unwrap().null_count(), 6);
        assert!(sweep(&[], &specs, None, 0).is_err());
        assert!(sweep(&[&t], &["nosuch".to_string()], None, 0).is_err());
    }
}
