//! The semantic check of a trace's events, run on every load (docs/bad-inputs.md): a pass over
//! the columns, O(events), with one state array indexed by the dense allocation ids and no
//! allocation per event.
//!
//! Always errors (a corrupt file, whatever the options): sizes and addresses of 2^56 or more, and
//! allocation ids beyond the number of events. Errors by default and skipped with `lenient`
//! (the count goes to `metadata.extra["lenient_skipped"]`): an `alloc` without an id or with an
//! id already allocated; a free of a null id, of an id never allocated (free before alloc) or
//! already freed (double free); a free whose size differs from the allocation's; a recorded
//! time earlier than the previous one on the same device (except in `xla` traces, whose times
//! are each program's schedule steps); a device or pool the metadata does not declare.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray};

use super::{Action, Trace};
use crate::error::{Error, Result};

/// Sizes are below 2^56 bytes (64 PiB) in every format; larger values are corrupt.
pub const MAX_SIZE: u64 = 1 << 56;

/// Metadata key (in `extra`) of the number of events `lenient` skipped.
pub const LENIENT_SKIPPED: &str = "lenient_skipped";

const UNSEEN: u8 = 0;
const LIVE: u8 = 1;
const REQUESTED: u8 = 2;
const FREED: u8 = 3;

/// Checks `trace` (read from `path`, named in errors). Strict: the first violation is an error
/// naming the event. Lenient: violating events are dropped and counted in the metadata.
pub fn check_trace(trace: Trace, path: &Path, lenient: bool) -> Result<Trace> {
    let n = trace.num_events();
    let mut keep: Option<Vec<bool>> = None;
    let mut skipped = 0usize;
    {
        let c = trace.columns();
        let md = &trace.metadata;
        let pool_declared = |p: u32| md.pools.iter().any(|x| x.index == p);
        let device_declared = |d: i32| md.devices.iter().any(|x| x.index == d);
        // Per allocation id: state, size, and the event that last changed it.
        let mut state = vec![UNSEEN; n];
        let mut size_of = vec![0u64; n];
        let mut at = vec![0u32; n];
        // Last recorded time per device (devices are few: a short list).
        let mut last_time: Vec<(i32, i64, usize)> = Vec::new();
        // XLA dumps' times are schedule steps, restarting with each program (import::xla::trace):
        // not a clock.
        let clocked = md.source != "xla";
        // Cache of the last device / pool found declared.
        let (mut ok_device, mut ok_pool) = (None, None);
        for i in 0..n {
            let code = c.action[i];
            let Some(action) = Action::from_code(code) else { continue };
            let size = c.size[i];
            if size >= MAX_SIZE {
                return Err(Error::format(
                    path,
                    format!("event {i} ({}): size {size} is not below 2^56 bytes: the trace is corrupt", action.as_str()),
                ));
            }
            // Addresses are pointers below 2^56 (an `oom` event's addr is free bytes).
            if action != Action::Oom && c.addr.is_valid(i) && c.addr.value(i) >= MAX_SIZE {
                return Err(Error::format(
                    path,
                    format!("event {i} ({}): addr {:#x} is not below 2^56: the trace is corrupt", action.as_str(), c.addr.value(i)),
                ));
            }
            let id_valid = c.alloc_id_valid(i);
            let id = c.alloc_id[i];
            if id_valid && id >= n as u64 {
                return Err(Error::format(
                    path,
                    format!("event {i} ({}): alloc_id {id} is not dense: ids must be below the number of events ({n})", action.as_str()),
                ));
            }
            let violation: Option<String> = (|| {
                let dev = c.device[i];
                if ok_device != Some(dev) {
                    if !device_declared(dev) {
                        return Some(format!("device {dev} is not declared in the trace metadata's devices"));
                    }
                    ok_device = Some(dev);
                }
                let pool = c.pool[i];
                if ok_pool != Some(pool) {
                    if !pool_declared(pool) {
                        return Some(format!("pool {pool} is not declared in the trace metadata's pools"));
                    }
                    ok_pool = Some(pool);
                }
                if clocked && !c.seed.value(i) && c.time_ns.is_valid(i) {
                    let t = c.time_ns.value(i);
                    match last_time.iter_mut().find(|x| x.0 == dev) {
                        Some(last) if t < last.1 => {
                            return Some(format!("time goes backwards: {t} ns is before {} ns at event {}", last.1, last.2))
                        }
                        Some(last) => {
                            last.1 = t;
                            last.2 = i;
                        }
                        None => last_time.push((dev, t, i)),
                    }
                }
                let id = id as usize;
                match action {
                    Action::Alloc => {
                        if !id_valid {
                            return Some("an alloc without an alloc_id".into());
                        }
                        if state[id] != UNSEEN {
                            return Some(format!("alloc_id {id} is allocated again (first at event {})", at[id]));
                        }
                        state[id] = LIVE;
                        size_of[id] = size;
                        at[id] = i as u32;
                    }
                    Action::FreeRequested | Action::FreeCompleted => {
                        if !id_valid {
                            return Some("a free of a null alloc_id (an allocation the trace never made)".into());
                        }
                        match state[id] {
                            UNSEEN => return Some(format!("a free of alloc_id {id} before its alloc")),
                            FREED => return Some(format!("a double free: alloc_id {id} was freed at event {}", at[id])),
                            REQUESTED if action == Action::FreeRequested => {
                                return Some(format!("a double free: alloc_id {id}'s free was requested at event {}", at[id]))
                            }
                            _ => {}
                        }
                        if size != size_of[id] {
                            return Some(format!("frees {size} bytes of alloc_id {id}, allocated with {} bytes", size_of[id]));
                        }
                        state[id] = if action == Action::FreeRequested { REQUESTED } else { FREED };
                        at[id] = i as u32;
                    }
                    _ => {}
                }
                None
            })();
            if let Some(why) = violation {
                if !lenient {
                    return Err(Error::format(
                        path,
                        format!("event {i} ({}): {why}; pass --lenient (Python: lenient=True) to skip such events", action.as_str()),
                    ));
                }
                keep.get_or_insert_with(|| vec![true; n])[i] = false;
                skipped += 1;
            }
        }
    }
    if !lenient {
        return Ok(trace);
    }
    let mut metadata = trace.metadata.clone();
    metadata.extra.insert(LENIENT_SKIPPED.into(), skipped.into());
    let batch = match keep {
        Some(keep) => arrow_select::filter::filter_record_batch(trace.batch(), &BooleanArray::from(keep))
            .map_err(|e| Error::format(path, format!("dropping the skipped events: {e}")))?,
        None => trace.batch().clone(),
    };
    let extra: Vec<arrow_schema::Field> = batch.schema().fields().iter().skip(10).map(|f| f.as_ref().clone()).collect();
    let columns: Vec<Arc<dyn Array>> = batch.columns().to_vec();
    Trace::from_parts(metadata, trace.frames.clone(), &extra, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{DeviceInfo, EventRow, FrameTable, TraceBuilder, TraceMetadata};

    /// (action, alloc_id, size, time_ns, device) rows, pool 0.
    type Row = (Action, Option<u64>, u64, Option<i64>, i32);

    fn trace(rows: &[Row]) -> Trace {
        let mut b = TraceBuilder::with_capacity(rows.len());
        for &(a, id, size, t, dev) in rows {
            let mut r = EventRow::new(a, size);
            r.alloc_id = id;
            r.time_ns = t;
            r.device = dev;
            b.push(&r);
        }
        let mut md = TraceMetadata::new("test");
        md.devices = vec![DeviceInfo { index: 0, ..Default::default() }];
        b.finish(md, FrameTable::default()).unwrap()
    }

    fn strict_error(rows: &[Row]) -> String {
        match check_trace(trace(rows), Path::new("t.arrow"), false) {
            Err(e @ Error::Format { .. }) => e.to_string(),
            other => panic!("{:?}", other.map(|t| t.num_events())),
        }
    }

    fn lenient_skipped(rows: &[Row]) -> (usize, u64) {
        let t = check_trace(trace(rows), Path::new("t.arrow"), true).unwrap();
        (t.num_events(), t.metadata.extra[LENIENT_SKIPPED].as_u64().unwrap())
    }

    use Action::{Alloc, FreeCompleted as Done, FreeRequested as Req};
    const TAIL: &str = "; pass --lenient (Python: lenient=True) to skip such events";

    #[test]
    fn a_consistent_trace_passes_and_lenient_reports_zero() {
        let rows = [(Alloc, Some(0), 8, Some(1), 0), (Req, Some(0), 8, Some(2), 0), (Done, Some(0), 8, Some(3), 0)];
        assert_eq!(check_trace(trace(&rows), Path::new("t.arrow"), false).unwrap().num_events(), 3);
        assert_eq!(lenient_skipped(&rows), (3, 0));
    }

    #[test]
    fn double_free() {
        let rows = [(Alloc, Some(0), 8, None, 0), (Done, Some(0), 8, None, 0), (Done, Some(0), 8, None, 0)];
        assert_eq!(strict_error(&rows), format!("t.arrow: event 2 (free_completed): a double free: alloc_id 0 was freed at event 1{TAIL}"));
        assert_eq!(lenient_skipped(&rows), (2, 1));
        let rows = [(Alloc, Some(0), 8, None, 0), (Req, Some(0), 8, None, 0), (Req, Some(0), 8, None, 0)];
        assert!(strict_error(&rows).contains("event 2 (free_requested): a double free: alloc_id 0's free was requested at event 1"));
    }

    #[test]
    fn free_of_a_null_or_unknown_id_and_free_before_alloc() {
        let m = strict_error(&[(Alloc, Some(0), 8, None, 0), (Done, None, 8, None, 0)]);
        assert_eq!(m, format!("t.arrow: event 1 (free_completed): a free of a null alloc_id (an allocation the trace never made){TAIL}"));
        let m = strict_error(&[(Alloc, Some(0), 8, None, 0), (Done, Some(1), 8, None, 0), (Alloc, Some(1), 8, None, 0)]);
        assert_eq!(m, format!("t.arrow: event 1 (free_completed): a free of alloc_id 1 before its alloc{TAIL}"));
        assert_eq!(lenient_skipped(&[(Done, Some(1), 8, None, 0), (Alloc, Some(1), 8, None, 0), (Done, Some(1), 8, None, 0)]), (2, 1));
    }

    #[test]
    fn alloc_twice_and_alloc_without_id() {
        let m = strict_error(&[(Alloc, Some(0), 8, None, 0), (Alloc, Some(0), 8, None, 0)]);
        assert_eq!(m, format!("t.arrow: event 1 (alloc): alloc_id 0 is allocated again (first at event 0){TAIL}"));
        let m = strict_error(&[(Alloc, None, 8, None, 0)]);
        assert_eq!(m, format!("t.arrow: event 0 (alloc): an alloc without an alloc_id{TAIL}"));
    }

    #[test]
    fn free_size_mismatch() {
        let m = strict_error(&[(Alloc, Some(0), 8, None, 0), (Done, Some(0), 16, None, 0)]);
        assert_eq!(m, format!("t.arrow: event 1 (free_completed): frees 16 bytes of alloc_id 0, allocated with 8 bytes{TAIL}"));
    }

    #[test]
    fn time_going_backwards_on_a_device() {
        let m = strict_error(&[(Alloc, Some(0), 8, Some(100), 0), (Done, Some(0), 8, Some(99), 0)]);
        assert_eq!(m, format!("t.arrow: event 1 (free_completed): time goes backwards: 99 ns is before 100 ns at event 0{TAIL}"));
        // Equal times are fine.
        assert_eq!(lenient_skipped(&[(Alloc, Some(0), 8, Some(100), 0), (Done, Some(0), 8, Some(100), 0)]), (2, 0));
    }

    #[test]
    fn undeclared_device() {
        let m = strict_error(&[(Alloc, Some(0), 8, None, 3)]);
        assert_eq!(m, format!("t.arrow: event 0 (alloc): device 3 is not declared in the trace metadata's devices{TAIL}"));
    }

    #[test]
    fn addresses_of_2_pow_56_are_errors() {
        // Found by the arrow fuzz target: a seed at such an address broke pytorch's block keys.
        let mut b = TraceBuilder::with_capacity(1);
        let mut r = EventRow::new(Action::Alloc, 8);
        r.alloc_id = Some(0);
        r.addr = Some(MAX_SIZE);
        b.push(&r);
        let mut md = TraceMetadata::new("test");
        md.devices = vec![DeviceInfo { index: 0, ..Default::default() }];
        let e = check_trace(b.finish(md, FrameTable::default()).unwrap(), Path::new("t.arrow"), true).unwrap_err();
        assert_eq!(e.to_string(), "t.arrow: event 0 (alloc): addr 0x100000000000000 is not below 2^56: the trace is corrupt");
    }

    #[test]
    fn huge_sizes_and_sparse_ids_are_errors_even_lenient() {
        for lenient in [false, true] {
            let e = check_trace(trace(&[(Alloc, Some(0), MAX_SIZE, None, 0)]), Path::new("t.arrow"), lenient).unwrap_err();
            assert_eq!(e.to_string(), "t.arrow: event 0 (alloc): size 72057594037927936 is not below 2^56 bytes: the trace is corrupt");
            let e = check_trace(trace(&[(Alloc, Some(7), 8, None, 0)]), Path::new("t.arrow"), lenient).unwrap_err();
            assert!(e.to_string().contains("alloc_id 7 is not dense"), "{e}");
        }
    }
}
