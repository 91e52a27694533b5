//! The semantic check of a trace's events, run on every load (docs/bad-inputs.md): a pass over
//! the columns, O(events), with one state array indexed by the dense allocation ids and no
//! allocation per event. A strict check of a large trace first runs on the cores (`passes_on_threads`:
//! each thread a share of the rows and a share of the ids); only a trace it does not pass goes
//! through the one-thread pass, which names the first violation.
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

use super::{Action, Columns, Trace, TraceMetadata};
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
    check_metadata(&trace.metadata, path)?;
    let n = trace.num_events();
    let mut keep: Option<Vec<bool>> = None;
    let mut skipped = 0usize;
    // A strict load of a trace that passes (every real one) is decided on spare cores; any
    // doubt, and the pass below finds the first violation and names it.
    if !lenient && passes_on_threads(&trace, crate::cores::threads_for(n)) {
        return Ok(trace);
    }
    {
        let mut checker = EventChecker::new(&trace.metadata, n as u64, DenseIds::new(n));
        let c = trace.columns();
        for i in 0..n {
            if i % crate::cancel::PROGRESS_EVERY == 0 {
                crate::cancel::check()?;
            }
            if let Err(v) = checker.check(&c, i, i, path)? {
                if !lenient {
                    let at = v.at.unwrap_or_default();
                    return Err(v.error(path, at));
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

/// Whether every event of `trace` passes [`EventChecker::check`] (no violation, nothing
/// corrupt), decided on `threads` threads: thread `t` checks the rows of its `t`-th of the
/// trace one by one, and runs the allocation-id states of its `t`-th of the ids over every row.
/// Same answer as the sequential pass; `false` on one thread (nothing decided).
fn passes_on_threads(trace: &Trace, threads: usize) -> bool {
    if threads < 2 || crate::cancel::check().is_err() {
        return false;
    }
    let n = trace.num_events();
    let (md, c) = (&trace.metadata, trace.columns());
    let part = |t: usize| t * n / threads..(t + 1) * n / threads;
    let results: Vec<Option<DeviceTimes>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let c = &c;
                s.spawn(move || if ids_pass(c, part(t), n) { rows_pass(md, c, part(t)) } else { None })
            })
            .collect();
        workers.into_iter().map(|w| w.join().ok().flatten()).collect()
    });
    times_follow_on(&results)
}

/// Per device: its first and last clocked time in a run of rows.
type DeviceTimes = Vec<(i32, i64, i64)>;

/// The checks of [`EventChecker::check`] that need no allocation-id state, on `rows`: the
/// devices' first and last times if every row passes, with times not going backwards within.
fn rows_pass(md: &TraceMetadata, c: &Columns<'_>, rows: std::ops::Range<usize>) -> Option<DeviceTimes> {
    let clocked = md.source != "xla";
    let (mut ok_device, mut ok_pool) = (None, None);
    let mut times: DeviceTimes = Vec::new();
    for j in rows {
        let Some(action) = Action::from_code(c.action[j]) else { continue };
        let bad_addr = action != Action::Oom && c.addr.is_valid(j) && c.addr.value(j) >= MAX_SIZE;
        let needs_id = matches!(action, Action::Alloc | Action::FreeRequested | Action::FreeCompleted);
        let id_valid = c.alloc_id_valid(j);
        if c.size[j] >= MAX_SIZE || bad_addr || (id_valid && c.alloc_id[j] >= c.alloc_id.len() as u64) || (needs_id && !id_valid) {
            return None;
        }
        let (dev, pool) = (c.device[j], c.pool[j]);
        if ok_device != Some(dev) {
            md.devices.iter().any(|x| x.index == dev).then_some(())?;
            ok_device = Some(dev);
        }
        if ok_pool != Some(pool) {
            md.pools.iter().any(|x| x.index == pool).then_some(())?;
            ok_pool = Some(pool);
        }
        if clocked && !c.seed.value(j) && c.time_ns.is_valid(j) {
            let t = c.time_ns.value(j);
            match times.iter_mut().find(|x| x.0 == dev) {
                Some(last) if t < last.2 => return None,
                Some(last) => last.2 = t,
                None => times.push((dev, t, t)),
            }
        }
    }
    Some(times)
}

/// Every id in `ids` goes through the states the sequential check allows (alloc once, then an
/// optional free request, then the free, each with the allocated size), over all `n` rows.
fn ids_pass(c: &Columns<'_>, ids: std::ops::Range<usize>, n: usize) -> bool {
    let (lo, hi) = (ids.start as u64, ids.end as u64);
    let mut state = vec![UNSEEN; ids.len()];
    let mut size_of = vec![0u64; ids.len()];
    for j in 0..n {
        let id = c.alloc_id[j];
        if id < lo || id >= hi || !c.alloc_id_valid(j) {
            continue;
        }
        let k = (id - lo) as usize;
        let size = c.size[j];
        match Action::from_code(c.action[j]) {
            Some(Action::Alloc) if state[k] == UNSEEN => (state[k], size_of[k]) = (LIVE, size),
            Some(Action::FreeRequested) if state[k] == LIVE && size_of[k] == size => state[k] = REQUESTED,
            Some(Action::FreeCompleted) if matches!(state[k], LIVE | REQUESTED) && size_of[k] == size => state[k] = FREED,
            Some(Action::Alloc | Action::FreeRequested | Action::FreeCompleted) => return false,
            _ => {}
        }
    }
    true
}

/// Whether each run's first time on a device is no earlier than the last time of the runs
/// before it, every run having passed (`Some`).
fn times_follow_on(runs: &[Option<DeviceTimes>]) -> bool {
    let mut last: Vec<(i32, i64)> = Vec::new();
    for run in runs {
        let Some(run) = run else { return false };
        for &(dev, first, end) in run {
            match last.iter_mut().find(|x| x.0 == dev) {
                Some(l) if first < l.1 => return false,
                Some(l) => l.1 = end,
                None => last.push((dev, end)),
            }
        }
    }
    true
}

/// The metadata's device memory sizes are below 2^56 bytes, as every size (a capacity of more
/// is not modelled: `units::MAX_CAPACITY`); even lenient.
pub(crate) fn check_metadata(md: &TraceMetadata, path: &Path) -> Result<()> {
    for d in &md.devices {
        for (what, v) in [("total_memory", d.total_memory), ("memory_cap", d.memory_cap)] {
            if let Some(v) = v.filter(|&v| v > crate::units::MAX_CAPACITY) {
                return Err(Error::format(
                    path,
                    format!("device {}: {what} {v} is more than 2^56 bytes (64 PiB): the trace metadata is corrupt", d.index),
                ));
            }
        }
    }
    Ok(())
}

/// The state of every allocation id, as the check needs it: (state, size, the event that last
/// changed it). `at` may be unknown (`None`) for a freed id: a streamed check keeps only one
/// bit per freed id, and finds the event again when a violation names it.
pub(crate) trait IdStates {
    fn get(&self, id: u64) -> (u8, u64, Option<u32>);
    fn set(&mut self, id: u64, state: u8, size: u64, at: u32);
}

/// Three arrays indexed by the dense ids: a trace held in memory.
pub(crate) struct DenseIds {
    state: Vec<u8>,
    size_of: Vec<u64>,
    at: Vec<u32>,
}

impl DenseIds {
    pub(crate) fn new(n: usize) -> Self {
        DenseIds { state: vec![UNSEEN; n], size_of: vec![0; n], at: vec![0; n] }
    }
}

impl IdStates for DenseIds {
    #[inline]
    fn get(&self, id: u64) -> (u8, u64, Option<u32>) {
        let id = id as usize;
        (self.state[id], self.size_of[id], Some(self.at[id]))
    }
    #[inline]
    fn set(&mut self, id: u64, state: u8, size: u64, at: u32) {
        let id = id as usize;
        self.state[id] = state;
        self.size_of[id] = size;
        self.at[id] = at;
    }
}

/// Live ids in a map, freed ids as one bit each: a streamed trace (`MappedTrace`), whose state
/// must stay O(live allocations) (the bits take 1/8 byte per event).
pub(crate) struct SparseIds {
    live: rustc_hash::FxHashMap<u64, (u8, u64, u32)>,
    freed: Vec<u64>,
}

impl SparseIds {
    pub(crate) fn new(n: u64) -> Self {
        SparseIds { live: Default::default(), freed: vec![0; n.div_ceil(64) as usize] }
    }
}

impl IdStates for SparseIds {
    #[inline]
    fn get(&self, id: u64) -> (u8, u64, Option<u32>) {
        match self.live.get(&id) {
            Some(&(state, size, at)) => (state, size, Some(at)),
            None if self.freed[(id / 64) as usize] >> (id % 64) & 1 == 1 => (FREED, 0, None),
            None => (UNSEEN, 0, None),
        }
    }
    #[inline]
    fn set(&mut self, id: u64, state: u8, size: u64, at: u32) {
        if state == FREED {
            self.live.remove(&id);
            self.freed[(id / 64) as usize] |= 1 << (id % 64);
        } else {
            self.live.insert(id, (state, size, at));
        }
    }
}

/// A violation of the trace's semantics at one event.
pub(crate) struct Violation {
    pub(crate) event: usize,
    action: Action,
    /// The id whose last change `why` names, when the store did not know it (a freed id).
    pub(crate) id: Option<u64>,
    pub(crate) at: Option<u32>,
    why: Box<dyn Fn(u32) -> String>,
}

impl Violation {
    /// The strict load's error, with `at` the event that last changed the id it names.
    pub(crate) fn error(&self, path: &Path, at: u32) -> Error {
        Error::format(
            path,
            format!(
                "event {} ({}): {}; pass --lenient (Python: lenient=True) to skip such events",
                self.event,
                self.action.as_str(),
                (self.why)(at)
            ),
        )
    }
}

/// The check of one event after another (a whole trace's, or a streamed file's batches in
/// order), with the per-id state in `S`.
pub(crate) struct EventChecker<'m, S> {
    md: &'m TraceMetadata,
    n: u64,
    ids: S,
    /// Last recorded time per device (devices are few: a short list).
    last_time: Vec<(i32, i64, usize)>,
    /// XLA dumps' times are schedule steps, restarting with each program (import::xla::trace):
    /// not a clock.
    clocked: bool,
    /// Cache of the last device / pool found declared.
    ok_device: Option<i32>,
    ok_pool: Option<u32>,
}

impl<'m, S: IdStates> EventChecker<'m, S> {
    /// `n`: the trace's number of events (ids must be below it).
    pub(crate) fn new(md: &'m TraceMetadata, n: u64, ids: S) -> Self {
        EventChecker { md, n, ids, last_time: Vec::new(), clocked: md.source != "xla", ok_device: None, ok_pool: None }
    }

    /// Checks row `j` of `c`, event `i` of the trace. `Err`: the trace is corrupt whatever the
    /// options; `Ok(Err(_))`: the event violates the semantics (strict loads refuse it, lenient
    /// ones skip it: the state is then left as before the event).
    #[inline]
    pub(crate) fn check(&mut self, c: &Columns<'_>, j: usize, i: usize, path: &Path) -> Result<std::result::Result<(), Violation>> {
        let code = c.action[j];
        let Some(action) = Action::from_code(code) else { return Ok(Ok(())) };
        let size = c.size[j];
        if size >= MAX_SIZE {
            return Err(Error::format(
                path,
                format!("event {i} ({}): size {size} is not below 2^56 bytes: the trace is corrupt", action.as_str()),
            ));
        }
        // Addresses are pointers below 2^56 (an `oom` event's addr is free bytes).
        if action != Action::Oom && c.addr.is_valid(j) && c.addr.value(j) >= MAX_SIZE {
            return Err(Error::format(
                path,
                format!("event {i} ({}): addr {:#x} is not below 2^56: the trace is corrupt", action.as_str(), c.addr.value(j)),
            ));
        }
        let id_valid = c.alloc_id_valid(j);
        let id = c.alloc_id[j];
        if id_valid && id >= self.n {
            return Err(Error::format(
                path,
                format!("event {i} ({}): alloc_id {id} is not dense: ids must be below the number of events ({})", action.as_str(), self.n),
            ));
        }
        let violation =
            |why: Box<dyn Fn(u32) -> String>, id: Option<u64>, at: Option<u32>| Ok(Err(Violation { event: i, action, id, at, why }));
        let fixed = |m: String| -> Box<dyn Fn(u32) -> String> { Box::new(move |_| m.clone()) };
        let dev = c.device[j];
        if self.ok_device != Some(dev) {
            if !self.md.devices.iter().any(|x| x.index == dev) {
                return violation(fixed(format!("device {dev} is not declared in the trace metadata's devices")), None, None);
            }
            self.ok_device = Some(dev);
        }
        let pool = c.pool[j];
        if self.ok_pool != Some(pool) {
            if !self.md.pools.iter().any(|x| x.index == pool) {
                return violation(fixed(format!("pool {pool} is not declared in the trace metadata's pools")), None, None);
            }
            self.ok_pool = Some(pool);
        }
        // The time is taken even when the event fails a check below (as a lenient load always did).
        if self.clocked && !c.seed.value(j) && c.time_ns.is_valid(j) {
            let t = c.time_ns.value(j);
            match self.last_time.iter_mut().find(|x| x.0 == dev) {
                Some(last) if t < last.1 => {
                    let (last, at) = (last.1, last.2);
                    return violation(fixed(format!("time goes backwards: {t} ns is before {last} ns at event {at}")), None, None);
                }
                Some(last) => {
                    last.1 = t;
                    last.2 = i;
                }
                None => self.last_time.push((dev, t, i)),
            }
        }
        match action {
            Action::Alloc => {
                if !id_valid {
                    return violation(fixed("an alloc without an alloc_id".into()), None, None);
                }
                let (state, _, at) = self.ids.get(id);
                if state != UNSEEN {
                    return violation(Box::new(move |at| format!("alloc_id {id} is allocated again (first at event {at})")), Some(id), at);
                }
                self.ids.set(id, LIVE, size, i as u32);
            }
            Action::FreeRequested | Action::FreeCompleted => {
                if !id_valid {
                    return violation(fixed("a free of a null alloc_id (an allocation the trace never made)".into()), None, None);
                }
                let (state, size_of, at) = self.ids.get(id);
                match state {
                    UNSEEN => return violation(fixed(format!("a free of alloc_id {id} before its alloc")), None, None),
                    FREED => {
                        return violation(Box::new(move |at| format!("a double free: alloc_id {id} was freed at event {at}")), Some(id), at)
                    }
                    REQUESTED if action == Action::FreeRequested => {
                        return violation(
                            Box::new(move |at| format!("a double free: alloc_id {id}'s free was requested at event {at}")),
                            Some(id),
                            at,
                        )
                    }
                    _ => {}
                }
                if size != size_of {
                    return violation(fixed(format!("frees {size} bytes of alloc_id {id}, allocated with {size_of} bytes")), None, None);
                }
                self.ids.set(id, if action == Action::FreeRequested { REQUESTED } else { FREED }, size, i as u32);
            }
            _ => {}
        }
        Ok(Ok(()))
    }
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

    /// A consistent trace from `seed` (allocs, free requests, frees; times rising), then
    /// `breaks` rows changed: an id, a size, a time, the device, or a row repeated.
    fn made_trace(seed: u64, breaks: usize) -> Vec<Row> {
        let mut x = seed | 1;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let (mut rows, mut live, mut id): (Vec<Row>, Vec<(u64, bool)>, u64) = (Vec::new(), Vec::new(), 0);
        for t in 0..16 + next(24) as i64 {
            match next(3) {
                0 if !live.is_empty() => {
                    let k = next(live.len() as u64) as usize;
                    let (i, requested) = live[k];
                    if requested || next(2) == 0 {
                        live.swap_remove(k);
                        rows.push((Done, Some(i), 8 + i, Some(t), 0));
                    } else {
                        live[k].1 = true;
                        rows.push((Req, Some(i), 8 + i, Some(t), 0));
                    }
                }
                _ => {
                    live.push((id, false));
                    rows.push((Alloc, Some(id), 8 + id, Some(t), 0));
                    id += 1;
                }
            }
        }
        for _ in 0..breaks {
            let k = next(rows.len() as u64) as usize;
            match next(5) {
                0 => rows[k].1 = Some(next(id + 2)),
                1 => rows[k].2 += 1,
                2 => rows[k].3 = Some(next(40) as i64),
                3 => rows[k].4 = 1,
                _ => rows.insert(next(rows.len() as u64) as usize, rows[k]),
            }
        }
        rows
    }

    proptest::proptest! {
        /// The threads' verdict is the sequential check's, on traces broken in 0–2 places.
        #[test]
        fn the_threads_decide_as_the_sequential_check(seed in proptest::num::u64::ANY, breaks in 0usize..3, threads in 2usize..6) {
            let t = trace(&made_trace(seed, breaks));
            let sequential = check_trace(t.clone(), Path::new("t.arrow"), false).is_ok();
            proptest::prop_assert_eq!(passes_on_threads(&t, threads), sequential);
        }
    }

    #[test]
    fn a_trace_that_passes_passes_on_threads_too() {
        let rows: Vec<Row> =
            (0..64u64).flat_map(|i| [(Alloc, Some(i), 8, Some(i as i64), 0), (Done, Some(i), 8, Some(i as i64), 0)]).collect();
        let t = trace(&rows);
        assert!(check_trace(t.clone(), Path::new("t.arrow"), false).is_ok());
        for threads in 2..9 {
            assert!(passes_on_threads(&t, threads), "{threads} threads");
        }
    }
}
