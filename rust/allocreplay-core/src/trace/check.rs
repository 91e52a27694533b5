//! The semantic check of a trace's events, run on every load (docs/bad-inputs.md): a pass over
//! the columns, O(events), with one state array indexed by the dense allocation ids and no
//! allocation per event.
//!
//! Always errors (a corrupt file, whatever the options): sizes of 2^56 bytes or more, and
//! allocation ids beyond the number of events. Errors by default and skipped with `lenient`
//! (the count goes to `metadata.extra["lenient_skipped"]`): an `alloc` without an id or with an
//! id already allocated; a free of a null id, of an id never allocated (free before alloc) or
//! already freed (double free); a free whose size differs from the allocation's; a recorded
//! time earlier than the previous one on the same device; a device or pool the metadata does
//! not declare.

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
                if !c.seed.value(i) && c.time_ns.is_valid(i) {
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
                        format!(
                            "event {i} ({}): {why}; pass --lenient (Python: lenient=True) to skip such events",
                            action.as_str()
                        ),
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
