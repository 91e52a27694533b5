//! The replay engine: streams one device's request events through a policy and records what
//! the policy decided. No heap allocation per event in the loop beyond what the policy does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, PrimitiveArray, RecordBatch};

use crate::device::memory::AddressChange;
use crate::device::{DeviceEvent, DeviceMemory, Stats};
use crate::policy::{FromPolicy, OutOfMemory, Placement, Policy, Request, SegmentInfo};
use crate::trace::{Action, Columns, Trace};

pub(crate) mod host_ranges;

#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Bytes the policy may reserve on each device (a cap); `None`: the policy's own default
    /// (unlimited unless the policy is configured with a limit).
    pub capacity: Option<u64>,
    /// Offer the recorded segment addresses to the device model (validate).
    pub recorded_addresses: bool,
    /// Keep the allocated/reserved timeline; `Some(n)` with n > 0 downsamples to at most n
    /// points, keeping each bucket's maxima.
    pub timeline: Option<usize>,
    pub placements: bool,
    /// Keep the device events (segment allocs/frees, maps/unmaps) the policy made.
    pub device_events: bool,
    /// A core is free for the driver's address placement of a policy that never reads its
    /// addresses ([`Policy::places_without_addresses`]): it then runs on a helper thread
    /// (`DeviceMemory::defer`), with the same result.
    pub defer_addresses: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstOom {
    pub event: usize,
    pub requested: u64,
    pub alloc_size: u64,
    pub allocated: u64,
    pub reserved: u64,
}

impl FirstOom {
    /// The request at `event` failed with `oom`; `stats` are the policy's at that moment.
    fn at(event: usize, requested: u64, oom: &OutOfMemory, stats: &Stats) -> FirstOom {
        FirstOom { event, requested, alloc_size: oom.alloc_size, allocated: stats.allocated, reserved: stats.reserved }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelinePoint {
    pub event: usize,
    pub time_ns: Option<i64>,
    pub allocated: u64,
    pub reserved: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementRow {
    pub event: usize,
    pub id: u64,
    pub placement: Placement,
}

#[derive(Debug, Clone)]
pub struct DeviceReplay {
    pub policy: String,
    pub device: i32,
    pub stats: Stats,
    /// Events of this device that were replayed (requests).
    pub events: usize,
    pub first_oom: Option<FirstOom>,
    pub replay_seconds: f64,
    pub timeline: Vec<TimelinePoint>,
    pub segments: Vec<SegmentInfo>,
    pub placements: Vec<PlacementRow>,
    pub device_events: Vec<DeviceEvent>,
}

/// What a caller may ask of a replay beyond [`ReplayOptions`], and what the loop reports back:
/// stop early (the state at one event, for `allocreplay.analysis`), count progress, and the
/// events where the peaks were reached.
#[derive(Debug, Default)]
pub struct Hooks<'a> {
    /// Stop after the trace event with this index (the policy's state is then the state right
    /// after it).
    pub stop_after: Option<usize>,
    /// Trace rows walked, bumped every [`PROGRESS_EVERY`] rows (and once at the end), for a
    /// progress bar polled from another thread.
    pub progress: Option<&'a AtomicU64>,
    /// Out: the first event after which reserved / allocated bytes reached their peak.
    pub peak_reserved_event: Option<usize>,
    pub peak_allocated_event: Option<usize>,
}

pub use crate::cancel::PROGRESS_EVERY;

/// A policy the engine drives: every [`Policy`] is one. The blanket impl gives each policy type
/// its own copy of the row loop ([`feed_rows`]), whose calls to `malloc`, `free_*` and `stats`
/// (several per event) are static and can be inlined; the engine pays one dynamic call per
/// batch. The registry builds policies boxed so ([`BoxedPolicy`]).
pub trait DrivenPolicy: Policy {
    /// Replays a batch of trace rows through this policy ([`DeviceReplayer::feed`]).
    #[doc(hidden)]
    fn replay_rows(&mut self, state: &mut ReplayState, batch: &RecordBatch, base: usize, hooks: &mut Hooks<'_>) -> bool;
}

impl<P: Policy> DrivenPolicy for P {
    fn replay_rows(&mut self, state: &mut ReplayState, batch: &RecordBatch, base: usize, hooks: &mut Hooks<'_>) -> bool {
        feed_rows(self, state, batch, base, hooks)
    }
}

/// A policy built for the engine (`crate::registry::build`).
pub type BoxedPolicy = Box<dyn DrivenPolicy>;

impl FromPolicy for BoxedPolicy {
    fn from_policy<P: Policy + 'static>(policy: P) -> Self {
        Box::new(policy)
    }
}

/// Replays the events of `device` in `trace` through `policy`.
pub fn replay_device(trace: &Trace, device: i32, policy: &mut dyn DrivenPolicy, opts: &ReplayOptions) -> DeviceReplay {
    replay_device_hooked(trace, device, policy, opts, &mut Hooks::default())
}

/// [`replay_device`] with [`Hooks`].
pub fn replay_device_hooked(
    trace: &Trace,
    device: i32,
    policy: &mut dyn DrivenPolicy,
    opts: &ReplayOptions,
    hooks: &mut Hooks<'_>,
) -> DeviceReplay {
    // Addresses deferred: only where nothing reads them during the replay (placements,
    // validate's recorded ones, device events, a state mid-run) and the trace is long enough
    // for a second thread to pay.
    // The host ranges the capture saw freed, for the modelled address space (validate's
    // recorded addresses need none).
    let host = if opts.recorded_addresses {
        Vec::new()
    } else {
        let whole = [Ok::<_, std::convert::Infallible>((0, trace.batch().clone()))];
        host_ranges::schedule(&trace.metadata, device, whole).unwrap_or_else(|never| match never {})
    };
    let defer = opts.defer_addresses
        && policy.places_without_addresses()
        && !opts.placements
        && !opts.recorded_addresses
        && !opts.device_events
        && hooks.stop_after.is_none()
        && trace.num_events() >= DEFER_FROM;
    if defer {
        if let Some(r) = replay_device_once(trace, device, policy, opts, hooks, true, host.clone()) {
            return r;
        }
        // The modelled address space refused a request, which the replay did not see: again,
        // with the addresses in line (the rows walked are counted again).
        if let Some(p) = hooks.progress {
            p.fetch_sub(trace.num_events() as u64, Ordering::Relaxed);
        }
        let restarted = policy.restart();
        debug_assert!(restarted, "a policy that places without addresses restarts");
    }
    replay_device_once(trace, device, policy, opts, hooks, false, host).expect("addresses in line settle")
}

/// Events from which [`ReplayOptions::defer_addresses`] starts a helper thread (below, the
/// thread costs about what it saves).
const DEFER_FROM: usize = 50_000;

/// One pass of [`replay_device_hooked`]; `None` when `defer`red addresses did not settle.
fn replay_device_once(
    trace: &Trace,
    device: i32,
    policy: &mut dyn DrivenPolicy,
    opts: &ReplayOptions,
    hooks: &mut Hooks<'_>,
    defer: bool,
    host_ranges: Vec<(usize, AddressChange)>,
) -> Option<DeviceReplay> {
    let start = Instant::now();
    let c = trace.columns();
    let n = trace.num_events();
    // The largest id is only read for the id of a recorded OOM's request (`ReplayState::oom_id`):
    // a scan of the action codes (memchr) spares most traces a pass over the ids.
    let any_oom = c.action.contains(&(Action::Oom as u8));
    let max_id = if any_oom { c.alloc_id.iter().copied().max().unwrap_or(0) } else { 0 };
    // The number of timeline points is known from one pass over two columns, so that the
    // timeline is downsampled as it is built (memory O(points), not O(events)).
    let stop = hooks.stop_after.map_or(n, |s| (s + 1).min(n));
    let requests = match opts.timeline {
        // The whole trace's count is the trace's own, counted once for every replay of it.
        Some(_) if stop == n => trace.timeline_requests(device),
        Some(_) => count_timeline_requests(&c, device, 0..stop),
        None => 0,
    };
    let mut r = DeviceReplayer::new(device, policy, opts, max_id, requests);
    r.state.start = start;
    // Where no helper thread can be started (`defer` returns false), the addresses are placed
    // in line, as without it.
    if defer {
        r.state.dev.defer();
    }
    r.set_host_ranges(host_ranges);
    r.feed(trace.batch(), 0, hooks);
    r.finish_settled()
}

/// One device's replay, fed the trace's record batches in order ([`DeviceReplayer::feed`]):
/// a trace held whole is one batch, a streamed file many. Its state is the policy's and
/// O(live allocations): nothing is kept per event (the timeline is downsampled as it is built).
pub struct DeviceReplayer<'p> {
    policy: &'p mut dyn DrivenPolicy,
    state: ReplayState,
}

/// A device replay's state besides the policy (see [`DeviceReplayer`]); the policy's
/// [`DrivenPolicy::replay_rows`] runs the loop over it.
#[doc(hidden)]
pub struct ReplayState {
    device: i32,
    opts: ReplayOptions,
    start: Instant,
    dev: DeviceMemory,
    /// Allocations whose request failed (OOM): their frees are no-ops. Ids leave the set at
    /// their `free_completed` (a checked trace never names them again).
    failed: rustc_hash::FxHashSet<u64>,
    /// The id under which a recorded OOM's request is replayed (no real allocation has it).
    oom_id: u64,
    first_oom: Option<FirstOom>,
    timeline: Option<Downsampler>,
    placements: Vec<PlacementRow>,
    events: usize,
    /// Validate: the recorded device allocations made for a request precede it in the trace.
    pending_hints: Vec<(u64, u64)>,
    peak_reserved: u64,
    peak_allocated: u64,
    /// Changes of the modelled address space the trace does not record (host ranges, the
    /// driver's local memory), by row (`host_ranges::schedule`), and the next one.
    host_ranges: Vec<(usize, AddressChange)>,
    host_next: usize,
}

impl<'p> DeviceReplayer<'p> {
    pub fn new(device: i32, policy: &'p mut dyn DrivenPolicy, opts: &ReplayOptions, max_alloc_id: u64, timeline_requests: usize) -> Self {
        let mut dev = DeviceMemory::new(opts.capacity);
        if opts.device_events {
            dev.log = Some(Vec::new());
        }
        let state = ReplayState {
            device,
            opts: opts.clone(),
            start: Instant::now(),
            dev,
            failed: Default::default(),
            oom_id: max_alloc_id + 1,
            first_oom: None,
            timeline: opts.timeline.map(|max_points| Downsampler::new(timeline_requests, max_points)),
            placements: Vec::new(),
            events: 0,
            pending_hints: Vec::new(),
            peak_reserved: 0,
            peak_allocated: 0,
            host_ranges: Vec::new(),
            host_next: 0,
        };
        DeviceReplayer { policy, state }
    }

    /// The host ranges to apply to the modelled address space before rows of the trace
    /// (`host_ranges::schedule`).
    pub(crate) fn set_host_ranges(&mut self, host_ranges: Vec<(usize, AddressChange)>) {
        self.state.host_ranges = host_ranges;
    }

    /// Replays the rows of `batch`, whose first row is event `base` of the trace. Returns false
    /// once `hooks.stop_after` is reached (the rows after it are not replayed), or once the
    /// call was cancelled (`crate::cancel`: then the caller's result is `Error::Cancelled`).
    pub fn feed(&mut self, batch: &RecordBatch, base: usize, hooks: &mut Hooks<'_>) -> bool {
        self.policy.replay_rows(&mut self.state, batch, base, hooks)
    }

    /// [`DeviceReplayer::finish`] of a replay whose addresses may have been deferred: its
    /// segments at the addresses the model gave them, or `None` when the address space refused
    /// a request (the replay must run again with the addresses in line).
    fn finish_settled(mut self) -> Option<DeviceReplay> {
        if !self.state.dev.is_deferred() {
            return Some(self.finish());
        }
        let real = self.state.dev.settle()?;
        let mut r = self.finish();
        for s in &mut r.segments {
            s.addr = *real.get(&s.addr)?;
        }
        r.segments.sort_by_key(|s| s.addr);
        Some(r)
    }

    /// The replay's result, once every batch was fed (or the replay stopped).
    pub fn finish(mut self) -> DeviceReplay {
        let timeline = self.state.timeline.take().map(Downsampler::finish).unwrap_or_default();
        DeviceReplay {
            policy: self.policy.name(),
            device: self.state.device,
            stats: self.policy.stats().clone(),
            events: self.state.events,
            first_oom: self.state.first_oom,
            replay_seconds: self.state.start.elapsed().as_secs_f64(),
            timeline,
            segments: self.policy.segments(),
            placements: self.state.placements,
            device_events: self.state.dev.log.take().unwrap_or_default(),
        }
    }
}

/// The replay loop over one batch (`DeviceReplayer::feed`), generic over the policy: called
/// from [`DrivenPolicy::replay_rows`], each policy type gets its own copy, whose calls to
/// `malloc`, `free_*` and `stats` (several per event) are static and can be inlined.
fn feed_rows<P: Policy + ?Sized>(policy: &mut P, st: &mut ReplayState, batch: &RecordBatch, base: usize, hooks: &mut Hooks<'_>) -> bool {
    let c = Columns::of(batch);
    let n = batch.num_rows();
    let (stop, stopped) = match hooks.stop_after {
        Some(s) if s < base + n => ((s + 1).saturating_sub(base), true),
        _ => (n, false),
    };
    let rows = Rows {
        c: &c,
        chunk_col: batch.column_by_name("chunk_bytes").and_then(|col| col.as_primitive_opt::<UInt64Type>()),
        base,
        // Most traces have no seed rows: then the seed bit is not read row by row.
        any_seed: c.seed.true_count() > 0,
    };
    // The rows go in runs of PROGRESS_EVERY, the progress hook bumped after each: no count
    // to check per row.
    let mut at = 0;
    while at < stop {
        // Host ranges freed (or mapped again) before this row change the modelled address space
        // first; a run ends at the next such row.
        while let Some(&(row, change)) = st.host_ranges.get(st.host_next) {
            if row > base + at {
                break;
            }
            st.dev.address_changed(change);
            st.host_next += 1;
        }
        let mut end = stop.min(at + PROGRESS_EVERY);
        if let Some(&(row, ..)) = st.host_ranges.get(st.host_next) {
            end = end.min(row.saturating_sub(base));
        }
        // A run whose rows are all on this device, with no seed and no recorded addresses to
        // offer (every replay but `validate` of a one-device trace without seeds), goes
        // through a copy of the loop that reads neither the device column nor the seed bits.
        // The check reads the run's device column once (it is in cache for the loop after).
        if !rows.any_seed && !st.opts.recorded_addresses && all_on(&c.device[at..end], st.device) {
            replay_run::<P, true>(policy, st, &rows, at..end, hooks);
        } else {
            replay_run::<P, false>(policy, st, &rows, at..end, hooks);
        }
        if let Some(p) = hooks.progress {
            p.fetch_add((end - at) as u64, Ordering::Relaxed);
        }
        at = end;
        // Asked to stop (Ctrl-C, `cancel`): the replay ends here; its caller returns
        // `Error::Cancelled` rather than the partial result.
        if at < stop && crate::cancel::requested() {
            return false;
        }
    }
    // The open bucket's last event is in this batch: its time, before the batch goes.
    if let Some(t) = st.timeline.as_mut() {
        if let Some(j) = t.open_last_event().and_then(|e| e.checked_sub(base)) {
            t.last_time = c.time_ns.is_valid(j).then(|| c.time_ns.value(j));
        }
    }
    !stopped
}

/// The batch [`feed_rows`] replays.
struct Rows<'c, 'a> {
    c: &'c Columns<'a>,
    chunk_col: Option<&'a PrimitiveArray<UInt64Type>>,
    /// The trace event of the batch's first row.
    base: usize,
    any_seed: bool,
}

/// Every value of `device` is `d` (a pass with no early exit, so that it vectorises).
fn all_on(device: &[i32], d: i32) -> bool {
    device.iter().fold(true, |all, &x| all & (x == d))
}

/// Replays the rows `run` of the batch. `PLAIN`: the rows are all on the replayed device and none is a
/// seed, and no recorded address is offered (see [`feed_rows`]). The counters the loop bumps
/// per event live in locals for the run (written back at its end), not behind `st`: the
/// policy's calls in between would make the compiler store and reload them.
#[inline(always)]
fn replay_run<P: Policy + ?Sized, const PLAIN: bool>(
    policy: &mut P,
    st: &mut ReplayState,
    rows: &Rows<'_, '_>,
    run: std::ops::Range<usize>,
    hooks: &mut Hooks<'_>,
) {
    let c = rows.c;
    let device = st.device;
    let (recorded_addresses, placements) = (!PLAIN && st.opts.recorded_addresses, st.opts.placements);
    let mut events = st.events;
    let (mut peak_reserved, mut peak_allocated) = (st.peak_reserved, st.peak_allocated);
    let mut timeline = st.timeline.take();
    // Only segment rows lack an id, and most runs have none: then no validity bit is read
    // per free (a chain of three dependent loads through the null buffer).
    let ids_valid = c.alloc_ids_valid(run.clone());
    // The columns in locals, all cut to one length: the policy's calls cannot change locals,
    // so the compiler keeps them, and `end` as the one bound, instead of reloading each
    // column through `c` and checking each index against its own length.
    let n = c.action.len();
    let (action, alloc_id, size, stream, pool) = (&c.action[..n], &c.alloc_id[..n], &c.size[..n], &c.stream[..n], &c.pool[..n]);
    let (mut next, end) = (run.start, run.end.min(n));
    while next < end {
        let j = next;
        next += 1;
        if !PLAIN && c.device[j] != device {
            continue;
        }
        let seed = !PLAIN && rows.any_seed && c.seed.value(j);
        let i = rows.base + j;
        st.dev.event = i;
        let code = action[j];
        let mut completed_next = false;
        // The requests first, tested in the order a PyTorch trace needs them: an alloc or a
        // free request, whose completion is (nearly always) the next row. Two compares that
        // the branch predictor follows beat an indirect jump through a table.
        if code == Action::Alloc as u8 {
            events += 1;
            alloc_row(policy, st, rows, j, i, (alloc_id[j], size[j], stream[j], pool[j]), seed, recorded_addresses, placements);
        } else if code == Action::FreeRequested as u8 {
            events += 1;
            let id = alloc_id[j];
            if (ids_valid || c.alloc_id_valid(j)) && (st.failed.is_empty() || !st.failed.contains(&id)) {
                // A PyTorch trace completes (nearly) every free on the next row: a policy that
                // can do both at once does (`Policy::free_at_once`), and the completion's row
                // is then an event with the same stats, below.
                let completes_next = PLAIN
                    && st.failed.is_empty()
                    && next < end
                    && action[next] == Action::FreeCompleted as u8
                    && alloc_id[next] == id
                    && (ids_valid || c.alloc_id_valid(next));
                completed_next = completes_next && policy.free_at_once(id, &mut st.dev);
                if !completed_next {
                    policy.free_requested(id, &mut st.dev);
                }
            }
        } else if code == Action::FreeCompleted as u8 {
            events += 1;
            let id = alloc_id[j];
            if (ids_valid || c.alloc_id_valid(j)) && (st.failed.is_empty() || !st.failed.remove(&id)) {
                policy.free_completed(id, &mut st.dev);
            }
        } else if other_row(policy, st, rows, j, seed) {
            events += 1;
        } else {
            continue;
        }
        let s = policy.stats();
        if s.reserved > peak_reserved {
            peak_reserved = s.reserved;
            hooks.peak_reserved_event = Some(i);
        }
        if s.allocated > peak_allocated {
            peak_allocated = s.allocated;
            hooks.peak_allocated_event = Some(i);
        }
        if let Some(t) = timeline.as_mut() {
            t.push(i, s.allocated, s.reserved, || c.time_ns.is_valid(j).then(|| c.time_ns.value(j)));
        }
        if completed_next {
            // The next row, the free's completion (see above): an event with the same stats.
            let k = next;
            events += 1;
            if let Some(t) = timeline.as_mut() {
                t.push(i + 1, s.allocated, s.reserved, || c.time_ns.is_valid(k).then(|| c.time_ns.value(k)));
            }
            next += 1;
        }
    }
    st.events = events;
    (st.peak_reserved, st.peak_allocated) = (peak_reserved, peak_allocated);
    st.timeline = timeline;
}

/// An alloc row of [`replay_run`] (event `i`, row `j`; `request`: its id, size, stream and pool):
/// the policy's `malloc` (`seed_alloc` for a seed), then its placement or its OOM. Inlined into
/// the loop, as if written there.
#[inline(always)]
fn alloc_row<P: Policy + ?Sized>(
    policy: &mut P,
    st: &mut ReplayState,
    rows: &Rows<'_, '_>,
    j: usize,
    i: usize,
    request: (u64, u64, i64, u32),
    seed: bool,
    recorded_addresses: bool,
    placements: bool,
) {
    let c = rows.c;
    let (id, size, stream, pool) = request;
    // What the recorded run did is read for seeds and for `validate` only: no policy
    // looks at it otherwise (two columns fewer to stream through per request).
    let (recorded_addr, recorded_chunk) = if seed || recorded_addresses {
        (c.addr.is_valid(j).then(|| c.addr.value(j)), rows.chunk_col.filter(|col| col.is_valid(j)).map(|col| col.value(j)))
    } else {
        (None, None)
    };
    let req = Request { event: i, id, size, stream, pool, recorded_addr, recorded_chunk };
    let dev = &mut st.dev;
    if recorded_addresses {
        dev.set_hints(st.pending_hints.drain(..));
        dev.request_hint = recorded_addr;
    }
    let res: Result<Placement, OutOfMemory> = if seed { policy.seed_alloc(&req, dev) } else { policy.malloc(&req, dev) };
    // Only `validate` sets hints (the request's address, the device allocations
    // recorded before it): otherwise there is nothing to clear.
    if recorded_addresses {
        dev.clear_hints();
    }
    match res {
        Ok(p) => {
            if placements {
                st.placements.push(PlacementRow { event: i, id, placement: p });
            }
        }
        Err(oom) => {
            st.failed.insert(id);
            st.first_oom.get_or_insert_with(|| FirstOom::at(i, req.size, &oom, policy.stats()));
        }
    }
}

/// A row of `replay_run` other than an alloc or a free (rare: out of line); returns whether it
/// was a request (an event of the replay, with a timeline point).
#[inline(never)]
fn other_row<P: Policy + ?Sized>(policy: &mut P, st: &mut ReplayState, rows: &Rows<'_, '_>, j: usize, seed: bool) -> bool {
    let c = rows.c;
    let i = rows.base + j;
    let dev = &mut st.dev;
    match Action::from_code(c.action[j]) {
        // c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc: when no block
        // could be found or made, even after freeing the cache and retrying, the allocator
        // records TraceEntry::OOM with the request's (rounded) size and throws. The request
        // is replayed: the policy must fail it too. One that serves it hands the block
        // straight back, since the caller got an exception and holds nothing.
        Some(Action::Oom) if !seed => {
            let oom_id = st.oom_id;
            let req = Request {
                event: i,
                id: oom_id,
                size: c.size[j],
                stream: c.stream[j],
                pool: c.pool[j],
                recorded_addr: None,
                recorded_chunk: None,
            };
            dev.request_hint = None;
            match policy.malloc(&req, dev) {
                Ok(_) => {
                    policy.free_requested(oom_id, dev);
                    policy.free_completed(oom_id, dev);
                }
                Err(oom) => {
                    st.first_oom.get_or_insert_with(|| FirstOom::at(i, req.size, &oom, policy.stats()));
                }
            }
            true
        }
        Some(Action::EmptyCache) => {
            policy.empty_cache(dev);
            true
        }
        Some(Action::SegmentAlloc | Action::SegmentMap) => {
            if seed {
                let addr = c.addr.value(j);
                policy.seed_segment(addr, c.size[j], c.stream[j], c.pool[j], dev);
            } else if st.opts.recorded_addresses && c.addr.is_valid(j) {
                st.pending_hints.push((c.addr.value(j), c.size[j]));
            }
            false
        }
        _ => false,
    }
}

pub use crate::trace::count_timeline_requests;

/// [`downsample`] as the points arrive: buckets of `total.div_ceil(max_points)` points, each
/// kept as its maximum stamped with its last event. Called once per replayed request: the
/// open bucket is plain fields (maxima from 0: byte counts are never negative).
struct Downsampler {
    per: usize,
    in_bucket: usize,
    allocated: u64,
    reserved: u64,
    last_event: usize,
    last_time: Option<i64>,
    out: Vec<TimelinePoint>,
}

impl Downsampler {
    fn new(total: usize, max_points: usize) -> Self {
        let per = if max_points == 0 || total <= max_points { 1 } else { total.div_ceil(max_points) };
        Downsampler {
            per,
            in_bucket: 0,
            allocated: 0,
            reserved: 0,
            last_event: 0,
            last_time: None,
            out: Vec::with_capacity(total.div_ceil(per)),
        }
    }

    /// A point: `event` and the bytes after it. The event's time is only asked for when the
    /// point closes its bucket (else [`feed_rows`] sets it at the end of the batch, from
    /// [`Self::open_last_event`]): one read of the time column per bucket, not per event.
    #[inline]
    fn push(&mut self, event: usize, allocated: u64, reserved: u64, time_ns: impl FnOnce() -> Option<i64>) {
        self.allocated = self.allocated.max(allocated);
        self.reserved = self.reserved.max(reserved);
        self.last_event = event;
        self.in_bucket += 1;
        if self.in_bucket == self.per {
            self.last_time = time_ns();
            self.close_bucket();
        }
    }

    /// The last event of the open bucket, if one is open.
    fn open_last_event(&self) -> Option<usize> {
        (self.in_bucket > 0).then_some(self.last_event)
    }

    fn close_bucket(&mut self) {
        self.out.push(TimelinePoint {
            event: self.last_event,
            time_ns: self.last_time,
            allocated: self.allocated,
            reserved: self.reserved,
        });
        (self.in_bucket, self.allocated, self.reserved) = (0, 0, 0);
    }

    fn finish(mut self) -> Vec<TimelinePoint> {
        if self.in_bucket > 0 {
            self.close_bucket();
        }
        self.out
    }
}

/// At most `max_points` points (0: all), each the maximum of its bucket of events.
pub fn downsample(points: Vec<TimelinePoint>, max_points: usize) -> Vec<TimelinePoint> {
    if max_points == 0 || points.len() <= max_points {
        return points;
    }
    let per = points.len().div_ceil(max_points);
    points
        .chunks(per)
        .map(|chunk| {
            let last = chunk[chunk.len() - 1];
            TimelinePoint {
                allocated: chunk.iter().map(|p| p.allocated).max().unwrap(),
                reserved: chunk.iter().map(|p| p.reserved).max().unwrap(),
                ..last
            }
        })
        .collect()
}

#[cfg(test)]
mod deferred_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::memory::AddressSpace;
    use crate::device::DeviceMemory;
    use crate::policy::PolicyContext;
    use crate::trace::{is_timeline_request, DeviceInfo, EventRow, FrameTable, TraceBuilder, TraceMetadata};

    /// A policy with [`Policy::free_at_once`] off: every free request and completion goes
    /// through the policy's own call.
    struct InTwoCalls(BoxedPolicy);

    impl Policy for InTwoCalls {
        fn name(&self) -> String {
            self.0.name()
        }
        fn malloc(&mut self, req: &Request, device: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
            self.0.malloc(req, device)
        }
        fn free_requested(&mut self, id: u64, device: &mut DeviceMemory) {
            self.0.free_requested(id, device)
        }
        fn free_completed(&mut self, id: u64, device: &mut DeviceMemory) {
            self.0.free_completed(id, device)
        }
        fn stats(&self) -> &Stats {
            self.0.stats()
        }
        fn segments(&self) -> Vec<SegmentInfo> {
            self.0.segments()
        }
    }

    /// A random trace of one device: allocs, frees completed on the next row or later, the
    /// odd completion with no request and rows of a second device in between.
    fn random_trace(seed: u64, two_devices: bool) -> Trace {
        let mut rng = crate::test_rng::XorShift64::new(seed);
        let mut b = TraceBuilder::with_capacity(4096);
        let (mut live, mut next_id, mut pending) = (Vec::new(), 0u64, Vec::new());
        for t in 0..3000i64 {
            let x = rng.next_u64();
            let mut row = |action, id: u64, size| {
                let mut r = EventRow::new(action, size);
                r.alloc_id = Some(id);
                r.time_ns = (t % 5 != 0).then_some(t);
                r.device = i32::from(two_devices && x.is_multiple_of(13));
                b.push(&r);
            };
            match x % 10 {
                0..=4 => {
                    let size = if x.is_multiple_of(31) { 3 << 20 } else { 1 + (x >> 16) % 300_000 };
                    row(Action::Alloc, next_id, size);
                    live.push((next_id, size));
                    next_id += 1;
                }
                5..=7 if !live.is_empty() => {
                    let (id, size) = live.swap_remove((x >> 8) as usize % live.len());
                    row(Action::FreeRequested, id, size);
                    if x.is_multiple_of(7) {
                        pending.push((id, size));
                    } else {
                        row(Action::FreeCompleted, id, size);
                    }
                }
                _ => {
                    if let Some((id, size)) = pending.pop() {
                        row(Action::FreeCompleted, id, size);
                    } else if let Some((id, size)) = live.pop() {
                        // A completion with no request before it.
                        row(Action::FreeCompleted, id, size);
                    }
                }
            }
        }
        let mut md = TraceMetadata::new("test");
        md.devices = vec![DeviceInfo { index: 0, ..Default::default() }, DeviceInfo { index: 1, ..Default::default() }];
        b.finish(md, FrameTable::default()).unwrap()
    }

    /// The vectorised counts of timeline requests and of actions (`Columns::count_actions`)
    /// equal row-by-row counts (with [`crate::trace::is_timeline_request`]), over ranges that cross its chunks' edges, on rows of every
    /// action, two devices, and seed rows.
    #[test]
    fn count_timeline_requests_counts_row_by_row() {
        let mut rng = crate::test_rng::XorShift64::new(0x5EED);
        let mut b = TraceBuilder::with_capacity(200_000);
        for i in 0..200_000u64 {
            let x = rng.next_u64();
            let action = Action::ALL[(x % Action::ALL.len() as u64) as usize];
            let mut r = EventRow::new(action, 512);
            r.alloc_id = Some(i);
            r.addr = Some(i << 9);
            r.device = i32::from(x.is_multiple_of(3));
            r.seed = action == Action::Oom && (x >> 8).is_multiple_of(2);
            b.push(&r);
        }
        let mut md = TraceMetadata::new("test");
        md.devices = vec![DeviceInfo { index: 0, ..Default::default() }, DeviceInfo { index: 1, ..Default::default() }];
        let trace = b.finish(md, FrameTable::default()).unwrap();
        let c = trace.columns();
        assert_eq!(trace.devices(), vec![0, 1]);
        assert_eq!(trace.timeline_requests(2), 0, "a device with no rows");
        for device in [0, 1] {
            // The trace's own count, kept for every replay of it.
            let whole = (0..200_000).filter(|&i| c.device[i] == device && is_timeline_request(c.action[i], c.seed.value(i))).count();
            assert_eq!(trace.timeline_requests(device), whole);
            assert_eq!(trace.timeline_requests(device), whole, "asked again");
            for rows in [0..200_000, 1..65_537, 65_535..131_073, 70_000..70_000, 199_999..200_000] {
                let want = rows.clone().filter(|&i| c.device[i] == device && is_timeline_request(c.action[i], c.seed.value(i))).count();
                assert_eq!(count_timeline_requests(&c, device, rows.clone()), want, "device {device} rows {rows:?}");
                for codes in [0..=0u8, 3..=7, 9..=9] {
                    let want = rows.clone().filter(|&i| c.device[i] == device && codes.contains(&c.action[i])).count();
                    assert_eq!(c.count_actions(device, codes.clone(), rows.clone()), want, "device {device} rows {rows:?} codes {codes:?}");
                }
            }
        }
    }

    /// Frees that the engine hands a policy as one call (`Policy::free_at_once`) leave the
    /// replay as it was: events, stats, peaks (and their events), timeline, segments, first
    /// OOM.
    #[test]
    fn frees_at_once_change_nothing() {
        let meta = TraceMetadata::new("test");
        let ctx = PolicyContext { metadata: &meta, device: None, capacity: None };
        let build = |spec: &str| crate::registry::build(spec, &ctx).unwrap();
        for seed in 1..6u64 {
            for two_devices in [false, true] {
                let trace = random_trace(seed * 0x9E37_79B9, two_devices);
                for name in ["cuda-malloc", "managed", "pytorch", "pytorch:expandable_segments:True", "pytorch:max_split_size_mb:21"] {
                    for (capacity, timeline) in [(None, Some(0)), (Some(24 << 20), Some(0)), (None, Some(7)), (Some(16 << 20), None)] {
                        let opts = ReplayOptions { capacity, timeline, ..Default::default() };
                        let replay = |p: &mut dyn DrivenPolicy| {
                            let mut hooks = Hooks::default();
                            let r = replay_device_hooked(&trace, 0, p, &opts, &mut hooks);
                            (r.events, r.stats, r.first_oom, r.timeline, r.segments, hooks.peak_reserved_event, hooks.peak_allocated_event)
                        };
                        let mut fast = build(name);
                        let a = replay(fast.as_mut());
                        let b = replay(&mut InTwoCalls(build(name)));
                        assert_eq!(a, b, "{name} seed {seed} two devices {two_devices} capacity {capacity:?} timeline {timeline:?}");
                    }
                }
            }
        }
    }

    /// A range the capture saw freed by the host (issue 29 item 1) takes the next new segment
    /// in a replay on the modelled address space, moved into the model's coordinates by where
    /// the first segment was; `validate`'s recorded addresses ignore it, and so does a trace
    /// whose history was cut.
    #[test]
    fn a_host_range_freed_in_the_run_takes_the_next_segment() {
        const MIB: u64 = 1 << 20;
        let recorded_first = 0x7f3a_4000_0000u64 + 488 * MIB;
        let trace = |seeded: bool| {
            let mut b = TraceBuilder::with_capacity(8);
            for (id, addr) in [(0u64, recorded_first), (1, recorded_first - 520 * MIB)] {
                let mut seg = EventRow::new(Action::SegmentAlloc, 20 * MIB);
                seg.addr = Some(addr);
                b.push(&seg);
                let mut r = EventRow::new(Action::Alloc, 20 * MIB);
                r.alloc_id = Some(id);
                r.addr = Some(addr);
                b.push(&r);
            }
            let mut md = TraceMetadata::new("pytorch");
            md.devices = vec![DeviceInfo { index: 0, ..Default::default() }];
            md.seeded = seeded;
            // Freed once one allocation was made: 100 MiB, 1 GiB above the first segment.
            let (s, e) = (recorded_first + 1029 * MIB, recorded_first + 1129 * MIB);
            md.extra.insert("capture".into(), serde_json::json!({"device": 0, "host_va": {"changes": [[1, s, e, 1]]}}));
            b.finish(md, FrameTable::default()).unwrap()
        };
        let second_segment = |t: &Trace, recorded_addresses: bool| {
            let ctx = PolicyContext { metadata: &t.metadata, device: None, capacity: None };
            let mut p = crate::registry::build("pytorch", &ctx).unwrap();
            let opts = ReplayOptions { recorded_addresses, ..Default::default() };
            let mut segs: Vec<u64> = replay_device(t, 0, p.as_mut(), &opts).segments.iter().map(|s| s.addr).collect();
            segs.sort();
            segs
        };
        let first = AddressSpace::new().malloc(20 * MIB).unwrap();
        // The gap in the model: first + [1029, 1129) MiB; 20 MiB go to align_down(end - 20 MiB).
        let in_gap = (first + 1109 * MIB) / (32 * MIB) * (32 * MIB);
        assert!(in_gap - 32 * MIB >= first + 1029 * MIB);
        assert_eq!(second_segment(&trace(false), false), vec![first, in_gap]);
        // Without the range (a cut history): below the context, as the model puts it.
        let below = second_segment(&trace(true), false);
        assert!(below[0] < first && below[1] == first, "{below:?}");
        assert_eq!(second_segment(&trace(false), true), vec![recorded_first - 520 * MIB, recorded_first]);
    }

    /// Downsampling as the points arrive gives what downsampling the whole timeline gives.
    #[test]
    fn streaming_downsampler_equals_downsample() {
        let mut rng = crate::test_rng::XorShift64::new(0x9E37_79B9_7F4A_7C15);
        for total in [0usize, 1, 5, 7, 1000, 1999, 2000, 2001, 4099] {
            let points: Vec<TimelinePoint> = (0..total)
                .map(|i| {
                    let x = rng.next_u64();
                    TimelinePoint { event: 3 * i, time_ns: (i % 3 != 0).then_some(i as i64), allocated: x % 1000, reserved: 1000 + x % 777 }
                })
                .collect();
            for max_points in [0usize, 1, 3, 2000] {
                let mut d = Downsampler::new(total, max_points);
                points.iter().for_each(|&p| d.push(p.event, p.allocated, p.reserved, || p.time_ns));
                if d.open_last_event().is_some() {
                    d.last_time = points.last().unwrap().time_ns;
                }
                assert_eq!(d.finish(), downsample(points.clone(), max_points), "total {total} max {max_points}");
            }
        }
    }
}
