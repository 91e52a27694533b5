//! `allocreplay replay`: every device of a trace under every requested policy, and the results
//! as Arrow record batches (summary, timeline, segments, placements) for the Python layer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::builder::{Float64Builder, Int32Builder, Int64Builder, StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{DataType, Field};

use crate::cancel::Progress;
use crate::engine::{replay_device_hooked, BoxedPolicy, DeviceReplay, DeviceReplayer, DrivenPolicy, FirstOom, Hooks, ReplayOptions};
use crate::error::{Error, Result};
use crate::policy::PolicyContext;
use crate::registry::{self, Bound, PolicySpec};
use crate::trace::{Action, MappedTrace, Trace, TraceMetadata};
use crate::units::Capacity;

/// What to replay and what to keep.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// Policy specification strings (`pytorch`, `pytorch:expandable_segments:True`, ...).
    pub policies: Vec<String>,
    /// `--capacity`; `None`: the limit the recorded run had ([`default_limit`]).
    pub capacity: Option<Capacity>,
    /// Timeline points kept per (policy, device), each the maximum of its bucket; 0 keeps all.
    pub timeline_points: usize,
    pub placements: bool,
    /// Worker threads (0: as many as the machine has cores).
    pub threads: usize,
    /// Counts the trace rows walked as the replays go, for a progress bar: `total` is set to
    /// [`Source::progress_total`] when the replay starts.
    pub progress: Option<Arc<Progress>>,
    /// What builds each policy: [`registry::build`], or a test's own policies.
    pub factory: PolicyFactory,
}

impl Default for ReplayRequest {
    fn default() -> Self {
        ReplayRequest {
            policies: vec!["pytorch".into()],
            capacity: None,
            timeline_points: 2000,
            placements: true,
            threads: 0,
            progress: None,
            factory: registry::build,
        }
    }
}

/// One (policy, device) replay, with the capacity it ran under.
#[derive(Debug, Clone)]
pub struct Run {
    pub spec: String,
    pub capacity: Option<u64>,
    /// Where `capacity` came from (a [`CapacitySource`] name).
    pub capacity_source: &'static str,
    pub replay: DeviceReplay,
    /// Why the policy could not run on this device of the trace (e.g. `jax` needs the
    /// device's memory, which a TensorFlow capture may not record); `replay` is then empty and
    /// the summary row holds this reason in its `error` column, its numbers null.
    pub error: Option<String>,
}

/// Bytes of device memory a PyTorch process cannot give its caching allocator: the CUDA
/// context plus what cuBLAS, cuBLASLt and the attention kernels load on first use. Measured on
/// an NVIDIA H200 (driver 580.159.04, torch 2.11.0+cu130; tests/data/va-h200-580.159.txt,
/// `footprint`): `total - free - memory_reserved()` was 552,402,944 bytes after `torch.cuda.init()`
/// and 726,466,560 after a matmul, a bf16 matmul and SDPA; filling the device through the caching
/// allocator then stopped at 149,369,651,200 reserved bytes with 13,762,560 free (less than the
/// next 20 MiB segment), i.e. at `total - 726,466,560`.
pub const PYTORCH_CUDA_CONTEXT_BYTES: u64 = 726_466_560;

/// Where a replay's device limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// `--capacity`.
    Explicit,
    /// The recorded run's `set_per_process_memory_fraction` cap (trace or sidecar).
    RecordedCap,
    /// A PyTorch run without a cap: the device's memory minus [`PYTORCH_CUDA_CONTEXT_BYTES`]
    /// (where `cudaMalloc` starts failing).
    DeviceMinusContext,
    /// Another source's trace: the device's total memory.
    DeviceTotal,
    /// No limit known.
    Unlimited,
}

impl CapacitySource {
    pub fn name(self) -> &'static str {
        match self {
            CapacitySource::Explicit => "--capacity",
            CapacitySource::RecordedCap => "recorded_cap",
            CapacitySource::DeviceMinusContext => "device_total_minus_cuda_context",
            CapacitySource::DeviceTotal => "device_total",
            CapacitySource::Unlimited => "unlimited",
        }
    }
}

/// The limit a replay of `device` runs under: `(cap, device_limit, source)`. `cap` acts as the
/// policy's own limit (PyTorch: `set_per_process_memory_fraction`, which also turns on
/// `garbage_collection_threshold`); `device_limit` is where the device refuses memory.
/// `--capacity` wins; otherwise a PyTorch trace replays at its recorded cap, or without one at
/// the device's memory less the CUDA context's share.
pub fn default_limit(trace: &Trace, device: i32, explicit: Option<Capacity>) -> Result<(Option<u64>, Option<u64>, CapacitySource)> {
    metadata_limit(&trace.metadata, device, explicit)
}

/// [`default_limit`] from the trace's metadata alone (a streamed trace's).
pub fn metadata_limit(
    metadata: &TraceMetadata,
    device: i32,
    explicit: Option<Capacity>,
) -> Result<(Option<u64>, Option<u64>, CapacitySource)> {
    let info = metadata.device(device);
    if let Some(c) = explicit {
        let cap = c.resolve(info.map(|i| i.index), info.and_then(|i| i.total_memory))?;
        return Ok((Some(cap), Some(cap), CapacitySource::Explicit));
    }
    let pytorch = metadata.source == "pytorch";
    if let Some(cap) = info.and_then(|i| i.memory_cap).filter(|_| pytorch) {
        return Ok((Some(cap), Some(cap), CapacitySource::RecordedCap));
    }
    match info.and_then(|i| i.total_memory) {
        Some(total) if pytorch => Ok((None, Some(total.saturating_sub(PYTORCH_CUDA_CONTEXT_BYTES)), CapacitySource::DeviceMinusContext)),
        Some(total) => Ok((None, Some(total), CapacitySource::DeviceTotal)),
        None => Ok((None, None, CapacitySource::Unlimited)),
    }
}

/// Builds a policy for one spec and device: [`registry::build`], or a test's factory.
pub type PolicyFactory = fn(&str, &PolicyContext) -> Result<BoxedPolicy>;

/// One (policy, device) to replay: the capacity given (`explicit`), the device's limit, and
/// why the policy cannot run there, if it cannot.
struct Job<'s> {
    spec: &'s PolicySpec,
    device: i32,
    explicit: Option<u64>,
    limit: Option<u64>,
    source: CapacitySource,
    error: Option<String>,
}

/// Replays every device of `source` under every policy of `req`: the one replay entry of the
/// core. `source` is a trace held whole (`&Trace`) or an `.arrow` file streamed batch by batch
/// (`&MappedTrace`, `allocreplay replay BIG.arrow`), where each (policy, device) replay makes
/// its own pass over the file's record batches, so memory is the policies' state and one batch
/// per replay running, whatever the trace's length; the results are those of the same trace
/// loaded whole. The offline bounds (`ideal`, `offline`) need every lifetime at once and are
/// refused on a streamed file. `req.progress`, when given, counts the trace rows walked.
pub fn replay<'a>(source: impl Into<Source<'a>>, req: &ReplayRequest) -> Result<Vec<Run>> {
    let source = source.into();
    let specs = parse_specs(req)?;
    if let (Source::Mapped(_), Some(spec)) = (source, specs.iter().find(|s| matches!(s, PolicySpec::Bound { .. }))) {
        return Err(Error::InvalidArgument(format!(
            "{}: an offline bound needs the whole trace in memory; it cannot be replayed from a streamed file",
            spec.text()
        )));
    }
    if let Some(p) = &req.progress {
        p.start(source.progress_total(req));
    }
    run_jobs(source, &specs, req)
}

/// Where a replay's events come from.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// A trace held whole.
    Memory(&'a Trace),
    /// A file streamed batch by batch.
    Mapped(&'a MappedTrace),
}

impl<'a> From<&'a Trace> for Source<'a> {
    fn from(t: &'a Trace) -> Self {
        Source::Memory(t)
    }
}

impl<'a> From<&'a MappedTrace> for Source<'a> {
    fn from(t: &'a MappedTrace) -> Self {
        Source::Mapped(t)
    }
}

impl<'a> Source<'a> {
    /// Trace rows a replay of `req` walks in all (every device's replay walks the whole
    /// trace): the total that `req.progress` counts up to.
    pub fn progress_total(self, req: &ReplayRequest) -> u64 {
        let (events, devices) = match self {
            Source::Memory(t) => (t.num_events(), t.devices().len()),
            Source::Mapped(t) => (t.num_events(), t.devices().len()),
        };
        (events * devices * req.policies.len()) as u64
    }

    fn metadata(self) -> &'a TraceMetadata {
        match self {
            Source::Memory(t) => &t.metadata,
            Source::Mapped(t) => &t.metadata,
        }
    }

    fn devices(self) -> Vec<i32> {
        match self {
            Source::Memory(t) => t.devices(),
            Source::Mapped(t) => t.devices(),
        }
    }

    /// One (policy, device) replay.
    fn replay(self, device: i32, policy: &mut dyn DrivenPolicy, opts: &ReplayOptions, hooks: &mut Hooks<'_>) -> Result<DeviceReplay> {
        match self {
            Source::Memory(t) => Ok(replay_device_hooked(t, device, policy, opts, hooks)),
            Source::Mapped(t) => {
                let mut r = DeviceReplayer::new(device, policy, opts, t.max_alloc_id(), t.timeline_requests(device));
                if !opts.recorded_addresses {
                    // A pass over the batches that reaches the last host change's row (moves
                    // come early in a run), only for a capture that noted some.
                    r.set_host_ranges(crate::engine::host_ranges::schedule(&t.metadata, device, t.batches()?)?);
                }
                for b in t.batches()? {
                    let (base, batch) = b?;
                    if !r.feed(&batch, base, hooks) {
                        break;
                    }
                }
                Ok(r.finish())
            }
        }
    }
}

/// The request's specs, each parsed once (`registry::PolicySpec`).
fn parse_specs(req: &ReplayRequest) -> Result<Vec<PolicySpec>> {
    if req.policies.is_empty() {
        return Err(Error::InvalidArgument("no policy to replay".into()));
    }
    req.policies.iter().map(|s| PolicySpec::parse(s)).collect()
}

fn run_jobs(source: Source<'_>, specs: &[PolicySpec], req: &ReplayRequest) -> Result<Vec<Run>> {
    let factory = req.factory;
    let progress = req.progress.as_deref().map(|p| &p.done);
    let metadata = source.metadata();
    let devices = source.devices();
    // Resolve capacities and check every spec on every device before replaying anything, so a
    // typo in the last --policy fails at once.
    let mut jobs: Vec<Job> = Vec::new();
    for spec in specs {
        for &d in &devices {
            let info = metadata.device(d);
            let (explicit, device_limit, source) = metadata_limit(metadata, d, req.capacity)?;
            let ctx = PolicyContext { metadata, device: info, capacity: explicit };
            let mut error = None;
            // A limit beyond what the policy models: a row with the reason (issue 28 class 2).
            let beyond = registry::parse(spec.text()).ok().and_then(|(entry, _)| entry.check_capacity(device_limit, source.name()).err());
            if let Some(e) = beyond {
                error = Some(e.to_string());
            } else if let PolicySpec::Online { text } = spec {
                if let Err(e) = factory(text, &ctx) {
                    // A valid spec that only lacks what this trace does not record runs in the
                    // other rows; a spec that fails anyway (a typo) stops everything.
                    if !builds_with_known_memory(text, metadata, d, info, explicit, factory) {
                        return Err(e);
                    }
                    error = Some(e.to_string());
                }
            }
            jobs.push(Job { spec, device: d, explicit, limit: device_limit, source, error });
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = if req.threads == 0 { cores } else { req.threads }.min(jobs.len()).max(1);
    // Fewer replays than cores: a policy that never reads its addresses places them on one of
    // the idle ones (`ReplayOptions::defer_addresses`).
    let defer_addresses = jobs.len() < cores;
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Run>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let work = || loop {
        if crate::cancel::requested() {
            break;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(Job { spec, device: d, explicit, limit, source: capacity_source, error }) = jobs.get(i) else { break };
        let text = spec.text();
        if let Some(e) = error {
            results.lock().unwrap()[i] =
                Some(Ok(Run { capacity_source: capacity_source.name(), ..failed_run(text, *d, *limit, e.clone()) }));
            continue;
        }
        let ctx = PolicyContext { metadata, device: metadata.device(*d), capacity: *explicit };
        if let (PolicySpec::Bound { bound, alignment, .. }, Source::Memory(trace)) = (spec, source) {
            let run = match offline_run(trace, text, *bound, *d, *alignment, *limit) {
                // A trace beyond what the bounds plan (`offline::MAX_PLANNED_BYTES`; the spec's
                // alignment was checked when it was parsed): a row with the reason.
                Err(Error::InvalidArgument(m)) => Ok(failed_run(text, *d, *limit, format!("{text}: {m}"))),
                r => r,
            }
            .map(|r| Run { capacity_source: capacity_source.name(), ..r });
            if let Some(p) = progress {
                p.fetch_add(trace.num_events() as u64, Ordering::Relaxed);
            }
            results.lock().unwrap()[i] = Some(run);
            continue;
        }
        let run = match factory(text, &ctx) {
            Ok(mut p) => {
                let opts = ReplayOptions {
                    capacity: *limit,
                    recorded_addresses: false,
                    timeline: Some(req.timeline_points),
                    placements: req.placements,
                    device_events: false,
                    defer_addresses,
                };
                let mut hooks = Hooks { progress, ..Default::default() };
                source.replay(*d, p.as_mut(), &opts, &mut hooks).map(|replay| Run {
                    spec: text.to_string(),
                    capacity: *limit,
                    capacity_source: capacity_source.name(),
                    replay,
                    error: None,
                })
            }
            Err(e) => Ok(Run { capacity_source: capacity_source.name(), ..failed_run(text, *d, *limit, e.to_string()) }),
        };
        results.lock().unwrap()[i] = Some(run);
    };
    if threads == 1 {
        work();
    } else {
        // The workers run under the caller's cancellation token (`crate::cancel`).
        let token = crate::cancel::current();
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads).map(|_| s.spawn(|| crate::cancel::within(token.as_ref(), work))).collect();
            // A worker's panic (a bug) goes on with its own payload: left to the scope, it
            // would become "a scoped thread panicked", and the bindings' internal error would
            // lose what went wrong.
            let mut first_panic = None;
            for w in workers {
                if let Err(payload) = w.join() {
                    first_panic.get_or_insert(payload);
                }
            }
            if let Some(payload) = first_panic {
                std::panic::resume_unwind(payload);
            }
        });
    }
    // Cancelled: jobs were cut short or never ran; nothing partial is returned.
    crate::cancel::check()?;
    results.into_inner().unwrap().into_iter().map(|r| r.expect("every job ran")).collect()
}

/// True when `spec` builds for another device than this one: once the device's total memory
/// is known, or on an ordinary device (80 GiB, no cap, no `--capacity`). The spec is then
/// valid, and only this trace (which does not record the memory) or this limit (a pool larger
/// than the policy models, e.g. `jax:mem_fraction=2` of a device of 15 TiB) keeps it from
/// running here.
fn builds_with_known_memory(
    spec: &str,
    metadata: &TraceMetadata,
    device: i32,
    info: Option<&crate::trace::DeviceInfo>,
    capacity: Option<u64>,
    factory: PolicyFactory,
) -> bool {
    let mut probe = info.cloned().unwrap_or(crate::trace::DeviceInfo { index: device, ..Default::default() });
    if probe.total_memory.is_none() {
        probe.total_memory = Some(1 << 40);
        if factory(spec, &PolicyContext { metadata, device: Some(&probe), capacity }).is_ok() {
            return true;
        }
    }
    let ordinary = crate::trace::DeviceInfo { index: device, total_memory: Some(80 << 30), ..Default::default() };
    factory(spec, &PolicyContext { metadata, device: Some(&ordinary), capacity: None }).is_ok()
}

/// The row of a policy that could not run on `device`: its reason, no numbers.
pub(crate) fn failed_run(spec: &str, device: i32, capacity: Option<u64>, error: String) -> Run {
    Run {
        spec: spec.to_string(),
        capacity,
        capacity_source: CapacitySource::Unlimited.name(),
        replay: DeviceReplay {
            policy: spec.to_string(),
            device,
            stats: Default::default(),
            events: 0,
            first_oom: None,
            replay_seconds: 0.0,
            timeline: Vec::new(),
            segments: Vec::new(),
            placements: Vec::new(),
            device_events: Vec::new(),
        },
        error: Some(error),
    }
}

/// A summary-only run of an offline bound: `peak_reserved` is the bound itself (`ideal`: max
/// live bytes; `offline`: XLA's best-fit heap), `peak_allocated` the live-bytes peak.
/// The runner of `registry::PolicySpec::Bound` (its own kind: planned, not a built policy).
fn offline_run(trace: &Trace, spec: &str, bound: Bound, device: i32, alignment: u64, capacity: Option<u64>) -> Result<Run> {
    let start = std::time::Instant::now();
    // `ideal` needs only the live bytes (one pass); `offline` runs XLA's best-fit planner,
    // whose lifetimes pass counts the same live bytes (`NoFragmentationStatsHeap`).
    let (alignment, ideal_peak, peak) = if bound == Bound::Ideal {
        let ideal = crate::offline::ideal_peak(trace, device, alignment, None)?;
        (ideal.alignment, ideal.peak_bytes, ideal.peak_bytes)
    } else {
        let plan = crate::offline::plan_trace(trace, device, alignment)?;
        (plan.alignment, plan.ideal_peak_bytes, plan.offline_peak_bytes)
    };
    let c = trace.columns();
    let events = c.count_actions(device, Action::Alloc as u8..=Action::FreeCompleted as u8, 0..trace.num_events());
    // Over a capacity: the first OOM is the event where the live bytes first exceed it (for
    // `offline`, when only the plan's fragmentation does, the first allocation whose chunk
    // the plan puts beyond it).
    let over = |planned| crate::offline::first_over_capacity(trace, device, alignment, capacity.unwrap_or(u64::MAX), planned);
    let first = match capacity.filter(|&cap| peak > cap) {
        Some(_) => match over(false)? {
            Some(o) => Some(o),
            None if bound != Bound::Ideal => over(true)?,
            None => None,
        },
        None => None,
    };
    let first_oom = first.map(|o| FirstOom {
        event: o.event,
        requested: o.requested,
        alloc_size: o.rounded,
        allocated: o.live_before,
        reserved: o.live_before,
    });
    let stats = crate::device::Stats {
        peak_allocated: ideal_peak,
        peak_reserved: peak,
        num_ooms: u64::from(first_oom.is_some()),
        ..Default::default()
    };
    Ok(Run {
        spec: spec.to_string(),
        capacity,
        capacity_source: CapacitySource::Unlimited.name(),
        replay: DeviceReplay {
            policy: spec.to_string(),
            device,
            stats,
            events,
            first_oom,
            replay_seconds: start.elapsed().as_secs_f64(),
            timeline: Vec::new(),
            segments: Vec::new(),
            placements: Vec::new(),
            device_events: Vec::new(),
        },
        error: None,
    })
}

use crate::trace::schema::record_batch as batch;

/// The four tables of a replay's result.
#[derive(Debug, Clone)]
pub struct ResultTables {
    pub summary: RecordBatch,
    pub timeline: RecordBatch,
    pub segments: RecordBatch,
    pub placements: RecordBatch,
}

/// [`summary_batch`], [`timeline_batch`], [`segments_batch`] and [`placements_batch`] of `runs`:
/// what every front end returns.
pub fn result_tables(runs: &[Run]) -> ResultTables {
    ResultTables {
        summary: summary_batch(runs),
        timeline: timeline_batch(runs),
        segments: segments_batch(runs),
        placements: placements_batch(runs),
    }
}

/// One row per (policy, device).
pub fn summary_batch(runs: &[Run]) -> RecordBatch {
    let n = runs.len();
    let mut policy = StringBuilder::new();
    let mut device = Int32Builder::with_capacity(n);
    // Each run's peak range, worked out once for its two columns and `fits`.
    let ranges: Vec<(u64, u64)> = runs.iter().map(peak_range).collect();
    let u = |f: &dyn Fn(usize, &Run) -> Option<u64>| {
        let mut b = UInt64Builder::with_capacity(n);
        for (i, r) in runs.iter().enumerate() {
            b.append_option(if r.error.is_some() { None } else { f(i, r) });
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let cols_u64: Vec<(&str, ArrayRef)> = vec![
        ("peak_allocated_bytes", u(&|_, r| Some(r.replay.stats.peak_allocated))),
        ("peak_reserved_bytes", u(&|_, r| Some(r.replay.stats.peak_reserved))),
        ("peak_requested_bytes", u(&|_, r| Some(r.replay.stats.peak_requested))),
        ("num_device_alloc", u(&|_, r| Some(r.replay.stats.num_device_alloc))),
        ("num_device_free", u(&|_, r| Some(r.replay.stats.num_device_free))),
        ("num_alloc_retries", u(&|_, r| Some(r.replay.stats.num_alloc_retries))),
        ("num_ooms", u(&|_, r| Some(r.replay.stats.num_ooms))),
        ("pages_migrated", u(&|_, r| Some(r.replay.stats.pages_migrated))),
        ("bytes_migrated", u(&|_, r| Some(r.replay.stats.bytes_migrated))),
        ("first_oom_event", u(&|_, r| r.replay.first_oom.as_ref().map(|o| o.event as u64))),
        ("first_oom_requested_bytes", u(&|_, r| r.replay.first_oom.as_ref().map(|o| o.requested))),
        ("events", u(&|_, r| Some(r.replay.events as u64))),
        ("final_allocated_bytes", u(&|_, r| Some(r.replay.stats.allocated))),
        ("final_reserved_bytes", u(&|_, r| Some(r.replay.stats.reserved))),
        ("capacity_bytes", u(&|_, r| r.capacity)),
        // The range real runs land in where the allocator varies run to run (`cuda-async`;
        // `PolicyEntry::peak_band`); the replay's own peak for the deterministic ones.
        ("peak_reserved_low_bytes", u(&|i, _| Some(ranges[i].0))),
        ("peak_reserved_high_bytes", u(&|i, _| Some(ranges[i].1))),
    ];
    let mut secs = Float64Builder::with_capacity(n);
    let mut error = StringBuilder::new();
    let mut capacity_source = StringBuilder::with_capacity(n, n * 16);
    for r in runs {
        policy.append_value(&r.replay.policy);
        device.append_value(r.replay.device);
        secs.append_option(r.error.is_none().then_some(r.replay.replay_seconds));
        error.append_option(r.error.as_deref());
        capacity_source.append_value(r.capacity_source);
    }
    let mut fields = vec![Field::new("policy", DataType::Utf8, false), Field::new("device", DataType::Int32, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(policy.finish()), Arc::new(device.finish())];
    for (name, col) in cols_u64 {
        let nullable = col.null_count() > 0 || matches!(name, "first_oom_event" | "first_oom_requested_bytes" | "capacity_bytes");
        fields.push(Field::new(name, DataType::UInt64, nullable));
        columns.push(col);
    }
    fields.push(Field::new("capacity_source", DataType::Utf8, false));
    columns.push(Arc::new(capacity_source.finish()));
    // Whether the workload fits the limit: no OOM, and the high end of the peak's range within
    // the limit (issue 29: a "fits" for cuda-async is judged at its range's high end). Null
    // where the policy could not run.
    let fits: BooleanArray = runs
        .iter()
        .zip(&ranges)
        .map(|(r, &(_, high))| r.error.is_none().then(|| r.replay.stats.num_ooms == 0 && r.capacity.is_none_or(|cap| high <= cap)))
        .collect();
    fields.push(Field::new("fits", DataType::Boolean, fits.null_count() > 0));
    columns.push(Arc::new(fits));
    let failed = runs.iter().any(|r| r.error.is_some());
    fields.push(Field::new("replay_seconds", DataType::Float64, failed));
    columns.push(Arc::new(secs.finish()));
    // Null on every row that ran.
    fields.push(Field::new("error", DataType::Utf8, true));
    columns.push(Arc::new(error.finish()));
    batch(fields, columns)
}

/// `(low, high)` of a run's peak reserved: its policy's [`crate::policy::PeakBand`] around the
/// replay's peak, or the peak itself.
fn peak_range(r: &Run) -> (u64, u64) {
    let peak = r.replay.stats.peak_reserved;
    match registry::parse(&r.spec).ok().and_then(|(entry, _)| entry.peak_band) {
        Some(band) => band.around(peak),
        None => (peak, peak),
    }
}

fn key_columns(runs: &[Run], count: impl Fn(&Run) -> usize) -> (Vec<Field>, Vec<ArrayRef>) {
    let total: usize = runs.iter().map(&count).sum();
    let mut policy = StringBuilder::with_capacity(total, total * 8);
    let mut device = Int32Builder::with_capacity(total);
    for r in runs {
        for _ in 0..count(r) {
            policy.append_value(&r.replay.policy);
            device.append_value(r.replay.device);
        }
    }
    (
        vec![Field::new("policy", DataType::Utf8, false), Field::new("device", DataType::Int32, false)],
        vec![Arc::new(policy.finish()), Arc::new(device.finish())],
    )
}

/// Allocated and reserved bytes after each replayed event, downsampled (each point the
/// maximum of its bucket, stamped with the bucket's last event).
pub fn timeline_batch(runs: &[Run]) -> RecordBatch {
    let (mut fields, mut columns) = key_columns(runs, |r| r.replay.timeline.len());
    let (mut ev, mut t, mut a, mut res) = (UInt64Builder::new(), Int64Builder::new(), UInt64Builder::new(), UInt64Builder::new());
    for p in runs.iter().flat_map(|r| &r.replay.timeline) {
        ev.append_value(p.event as u64);
        t.append_option(p.time_ns);
        a.append_value(p.allocated);
        res.append_value(p.reserved);
    }
    fields.extend([
        Field::new("event", DataType::UInt64, false),
        Field::new("time_ns", DataType::Int64, true),
        Field::new("allocated_bytes", DataType::UInt64, false),
        Field::new("reserved_bytes", DataType::UInt64, false),
    ]);
    columns.extend([Arc::new(ev.finish()) as ArrayRef, Arc::new(t.finish()), Arc::new(a.finish()), Arc::new(res.finish())]);
    batch(fields, columns)
}

/// The segments each policy holds at the end of the replay.
pub fn segments_batch(runs: &[Run]) -> RecordBatch {
    let (mut fields, mut columns) = key_columns(runs, |r| r.replay.segments.len());
    let (mut addr, mut size, mut stream, mut pool, mut kind, mut alloc, mut blocks) = (
        UInt64Builder::new(),
        UInt64Builder::new(),
        Int64Builder::new(),
        UInt32Builder::new(),
        StringBuilder::new(),
        UInt64Builder::new(),
        UInt32Builder::new(),
    );
    for s in runs.iter().flat_map(|r| &r.replay.segments) {
        addr.append_value(s.addr);
        size.append_value(s.size);
        stream.append_value(s.stream);
        pool.append_value(s.pool);
        kind.append_value(s.kind);
        alloc.append_value(s.allocated_bytes);
        blocks.append_value(s.blocks);
    }
    fields.extend([
        Field::new("addr", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("stream", DataType::Int64, false),
        Field::new("pool", DataType::UInt32, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("allocated_bytes", DataType::UInt64, false),
        Field::new("blocks", DataType::UInt32, false),
    ]);
    columns.extend([
        Arc::new(addr.finish()) as ArrayRef,
        Arc::new(size.finish()),
        Arc::new(stream.finish()),
        Arc::new(pool.finish()),
        Arc::new(kind.finish()),
        Arc::new(alloc.finish()),
        Arc::new(blocks.finish()),
    ]);
    batch(fields, columns)
}

/// Where each request was placed (one row per served `alloc`).
pub fn placements_batch(runs: &[Run]) -> RecordBatch {
    let (mut fields, mut columns) = key_columns(runs, |r| r.replay.placements.len());
    let total: usize = runs.iter().map(|r| r.replay.placements.len()).sum();
    let (mut ev, mut id, mut addr, mut size, mut seg) = (
        UInt64Builder::with_capacity(total),
        UInt64Builder::with_capacity(total),
        UInt64Builder::with_capacity(total),
        UInt64Builder::with_capacity(total),
        UInt64Builder::with_capacity(total),
    );
    for p in runs.iter().flat_map(|r| &r.replay.placements) {
        ev.append_value(p.event as u64);
        id.append_value(p.id);
        addr.append_value(p.placement.addr);
        size.append_value(p.placement.size);
        seg.append_value(p.placement.segment);
    }
    fields.extend([
        Field::new("event", DataType::UInt64, false),
        Field::new("alloc_id", DataType::UInt64, false),
        Field::new("addr", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("segment", DataType::UInt64, false),
    ]);
    columns.extend([
        Arc::new(ev.finish()) as ArrayRef,
        Arc::new(id.finish()),
        Arc::new(addr.finish()),
        Arc::new(size.finish()),
        Arc::new(seg.finish()),
    ]);
    batch(fields, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceMemory;
    use crate::device::Stats;
    use crate::policy::{OutOfMemory, Placement, Policy, Request, SegmentInfo};
    use crate::trace::{Action, DeviceInfo, EventRow, FrameTable, TraceBuilder, TraceMetadata};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, UInt64Type};
    use std::collections::HashMap;

    /// A test-only policy: every request gets its own device allocation of the requested size
    /// rounded up to 1 KiB, returned on free_completed. Simple enough to work out by hand.
    struct OnePerRequest {
        stats: Stats,
        live: HashMap<u64, (u64, u64, u64)>,
    }

    impl Policy for OnePerRequest {
        fn name(&self) -> String {
            "one_per_request".into()
        }
        fn malloc(&mut self, req: &Request, dev: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
            let size = req.size.div_ceil(1024) * 1024;
            let Some(addr) = dev.malloc(size) else {
                self.stats.num_ooms += 1;
                return Err(OutOfMemory { alloc_size: size });
            };
            self.stats.num_device_alloc += 1;
            self.stats.add_reserved(size);
            self.stats.add_allocated(size, req.size);
            self.live.insert(req.id, (addr, size, req.size));
            Ok(Placement { addr, size, segment: addr })
        }
        fn free_completed(&mut self, id: u64, dev: &mut DeviceMemory) {
            let (addr, size, req) = self.live.remove(&id).unwrap();
            dev.free(addr, size);
            self.stats.num_device_free += 1;
            self.stats.sub_reserved(size);
            self.stats.sub_allocated(size, req);
        }
        fn stats(&self) -> &Stats {
            &self.stats
        }
        fn segments(&self) -> Vec<SegmentInfo> {
            let mut v: Vec<_> = self
                .live
                .values()
                .map(|&(addr, size, _)| SegmentInfo { addr, size, stream: 0, pool: 0, kind: "test", allocated_bytes: size, blocks: 1 })
                .collect();
            v.sort_by_key(|s| s.addr);
            v
        }
    }

    /// [`replay`] of a trace held whole with the test's own policies.
    fn replay_with(t: &Trace, req: &ReplayRequest, factory: PolicyFactory) -> Result<Vec<Run>> {
        replay(t, &ReplayRequest { factory, ..req.clone() })
    }

    fn factory(spec: &str, _ctx: &PolicyContext) -> Result<BoxedPolicy> {
        match spec {
            "one_per_request" => Ok(Box::new(OnePerRequest { stats: Stats::default(), live: HashMap::new() })),
            other => Err(Error::PolicySpec(format!("unknown policy '{other}'"))),
        }
    }

    /// Device 0: alloc a=1000 B, alloc b=3000 B, free a, alloc c=5000 B (OOM under a 8 KiB cap:
    /// 1 KiB + 3 KiB + 5 KiB > 8 KiB only while a is live... a is freed first, so 3 + 5 = 8 KiB
    /// fits). Device 1: alloc 2048 B.
    fn tiny_trace(total: Option<u64>) -> Trace {
        let mut b = TraceBuilder::with_capacity(8);
        let mut push = |action, id, size, device| {
            let mut r = EventRow::new(action, size);
            r.alloc_id = Some(id);
            r.device = device;
            b.push(&r);
        };
        push(Action::Alloc, 0, 1000, 0);
        push(Action::Alloc, 1, 3000, 0);
        push(Action::Alloc, 2, 2048, 1);
        push(Action::FreeRequested, 0, 1000, 0);
        push(Action::FreeCompleted, 0, 1000, 0);
        push(Action::Alloc, 3, 5000, 0);
        let mut md = TraceMetadata::new("test");
        md.devices = vec![
            DeviceInfo { index: 0, total_memory: total, ..Default::default() },
            DeviceInfo { index: 1, total_memory: total, ..Default::default() },
        ];
        b.finish(md, FrameTable::default()).unwrap()
    }

    /// Device 0: alloc a=3000 B (3 KiB), then the real allocator failed a request of 6144 B
    /// (an `oom` entry), then a is freed.
    fn oom_trace(total: u64) -> Trace {
        let mut b = TraceBuilder::with_capacity(4);
        let mut a = EventRow::new(Action::Alloc, 3000);
        a.alloc_id = Some(0);
        b.push(&a);
        b.push(&EventRow::new(Action::Oom, 6144));
        a.action = Action::FreeRequested;
        b.push(&a);
        a.action = Action::FreeCompleted;
        b.push(&a);
        let mut md = TraceMetadata::new("test");
        md.devices = vec![DeviceInfo { index: 0, total_memory: Some(total), ..Default::default() }];
        b.finish(md, FrameTable::default()).unwrap()
    }

    #[test]
    fn a_recorded_oom_is_replayed_as_its_request() {
        let req = ReplayRequest { policies: vec!["one_per_request".into()], threads: 1, ..Default::default() };
        // 8 KiB: 3 KiB live + 6 KiB does not fit: the replay fails it as the real run did.
        let s = summary_batch(&replay_with(&oom_trace(8192), &req, factory).unwrap());
        assert_eq!(col_u64(&s, "num_ooms"), vec![Some(1)]);
        assert_eq!(col_u64(&s, "first_oom_event"), vec![Some(1)]);
        assert_eq!(col_u64(&s, "peak_reserved_bytes"), vec![Some(3072)]);
        // 16 KiB: served (peak 3 KiB + 6 KiB) and handed straight back; no OOM.
        let s = summary_batch(&replay_with(&oom_trace(16384), &req, factory).unwrap());
        assert_eq!(col_u64(&s, "num_ooms"), vec![Some(0)]);
        assert_eq!(col_u64(&s, "first_oom_event"), vec![None]);
        assert_eq!(col_u64(&s, "peak_reserved_bytes"), vec![Some(9216)]);
    }

    fn col_u64(b: &RecordBatch, name: &str) -> Vec<Option<u64>> {
        b.column_by_name(name).unwrap().as_primitive::<UInt64Type>().iter().collect()
    }

    #[test]
    fn summary_rows_per_policy_and_device_worked_by_hand() {
        let t = tiny_trace(None);
        let req = ReplayRequest { policies: vec!["one_per_request".into()], threads: 2, ..Default::default() };
        let runs = replay_with(&t, &req, factory).unwrap();
        let s = summary_batch(&runs);
        assert_eq!(s.num_rows(), 2);
        let dev: Vec<i32> = s.column_by_name("device").unwrap().as_primitive::<Int32Type>().values().to_vec();
        assert_eq!(dev, vec![0, 1]);
        // Device 0: 1 KiB + 3 KiB live, then 3 KiB + 5 KiB (=5120): peak 8192 reserved and
        // allocated; requested peak max(1000+3000, 3000+5000) = 8000.
        assert_eq!(col_u64(&s, "peak_reserved_bytes"), vec![Some(8192), Some(2048)]);
        assert_eq!(col_u64(&s, "peak_allocated_bytes"), vec![Some(8192), Some(2048)]);
        assert_eq!(col_u64(&s, "peak_requested_bytes"), vec![Some(8000), Some(2048)]);
        assert_eq!(col_u64(&s, "num_device_alloc"), vec![Some(3), Some(1)]);
        assert_eq!(col_u64(&s, "num_device_free"), vec![Some(1), Some(0)]);
        assert_eq!(col_u64(&s, "first_oom_event"), vec![None, None]);
        // Requests replayed on device 0: 3 allocs + free_requested + free_completed.
        assert_eq!(col_u64(&s, "events"), vec![Some(5), Some(1)]);
        assert_eq!(col_u64(&s, "capacity_bytes"), vec![None, None]);
        let src = s.column_by_name("capacity_source").unwrap().as_string::<i32>();
        assert_eq!((src.value(0), src.value(1)), ("unlimited", "unlimited"));
        let p = placements_batch(&runs);
        assert_eq!(p.num_rows(), 4);
        let seg = segments_batch(&runs);
        // Live at the end, by address: c and b on device 0, the 2 KiB one on device 1 (a takes
        // the context's 2 MiB hole, b the 24 MiB one above it; c reuses a's freed range, the
        // smallest hole: docs/driver-address-space.md, rules 3 and 4).
        assert_eq!(col_u64(&seg, "size"), vec![Some(5120), Some(3072), Some(2048)]);
        let tl = timeline_batch(&runs);
        assert_eq!(tl.num_rows(), 6);
        assert_eq!(col_u64(&tl, "reserved_bytes")[..5], [Some(1024), Some(4096), Some(4096), Some(3072), Some(8192)]);
    }

    #[test]
    fn capacity_caps_the_device_and_reports_the_first_oom() {
        // 6 KiB: the 5000-byte request (5 KiB on top of 3 KiB) does not fit: OOM at event 5.
        let t = tiny_trace(None);
        let req = ReplayRequest { policies: vec!["one_per_request".into()], capacity: Some(Capacity::Bytes(6144)), ..Default::default() };
        let runs = replay_with(&t, &req, factory).unwrap();
        let s = summary_batch(&runs);
        assert_eq!(col_u64(&s, "first_oom_event"), vec![Some(5), None]);
        assert_eq!(col_u64(&s, "first_oom_requested_bytes"), vec![Some(5000), None]);
        assert_eq!(col_u64(&s, "num_ooms"), vec![Some(1), Some(0)]);
        assert_eq!(col_u64(&s, "capacity_bytes"), vec![Some(6144), Some(6144)]);
        // A fraction of the recorded total memory: 0.5 of 12 KiB = 6 KiB, same result.
        let t = tiny_trace(Some(12288));
        let req = ReplayRequest { policies: vec!["one_per_request".into()], capacity: Some(Capacity::Fraction(0.5)), ..Default::default() };
        let s = summary_batch(&replay_with(&t, &req, factory).unwrap());
        assert_eq!(col_u64(&s, "first_oom_event"), vec![Some(5), None]);
        // Without --capacity, a trace of another source than PyTorch: the recorded total memory.
        let t = tiny_trace(Some(4096));
        let req = ReplayRequest { policies: vec!["one_per_request".into()], ..Default::default() };
        let s = summary_batch(&replay_with(&t, &req, factory).unwrap());
        assert_eq!(col_u64(&s, "first_oom_event"), vec![Some(5), None]);
        assert_eq!(s.column_by_name("capacity_source").unwrap().as_string::<i32>().value(0), "device_total");
        // A fraction without a recorded total is an argument error, before any replay.
        let t = tiny_trace(None);
        let req = ReplayRequest { policies: vec!["one_per_request".into()], capacity: Some(Capacity::Fraction(0.5)), ..Default::default() };
        assert!(matches!(replay_with(&t, &req, factory), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn a_policy_that_needs_unrecorded_memory_fails_in_its_own_row() {
        // `needs_memory` builds only when the device's total memory is known; tiny_trace(None)
        // records none, so its rows carry the reason and the other policy's rows are replayed.
        let needs_memory = |spec: &str, ctx: &PolicyContext| -> Result<BoxedPolicy> {
            match spec {
                "needs_memory" if ctx.device.and_then(|d| d.total_memory).is_none() => {
                    Err(Error::PolicySpec("needs_memory: the trace does not record the device's memory".into()))
                }
                "needs_memory" => factory("one_per_request", ctx),
                other => factory(other, ctx),
            }
        };
        let t = tiny_trace(None);
        let req = ReplayRequest { policies: vec!["needs_memory".into(), "one_per_request".into()], threads: 1, ..Default::default() };
        let s = summary_batch(&replay_with(&t, &req, needs_memory).unwrap());
        assert_eq!(s.num_rows(), 4);
        let errors: Vec<Option<&str>> = s.column_by_name("error").unwrap().as_string::<i32>().iter().collect();
        assert!(errors[0].is_some_and(|e| e.contains("does not record")), "{errors:?}");
        assert_eq!((errors[1].is_some(), errors[2], errors[3]), (true, None, None));
        assert_eq!(col_u64(&s, "peak_reserved_bytes"), vec![None, None, Some(8192), Some(2048)]);
        // With the memory recorded, the same policy runs.
        let s = summary_batch(&replay_with(&tiny_trace(Some(1 << 20)), &req, needs_memory).unwrap());
        assert_eq!(s.column_by_name("error").unwrap().null_count(), 4);
        // A spec that does not build even with the memory known is a typo: nothing runs.
        let req = ReplayRequest { policies: vec!["one_per_request".into(), "needs_memry".into()], ..Default::default() };
        assert!(matches!(replay_with(&t, &req, needs_memory), Err(Error::PolicySpec(_))));
    }

    #[test]
    fn a_pytorch_trace_replays_at_its_recorded_cap_else_the_device_minus_the_context() {
        let mut t = tiny_trace(Some(150_109_880_320));
        t.metadata.source = "pytorch".into();
        let (cap, limit, src) = default_limit(&t, 0, None).unwrap();
        assert_eq!((cap, limit, src), (None, Some(150_109_880_320 - PYTORCH_CUDA_CONTEXT_BYTES), CapacitySource::DeviceMinusContext));
        // The fill on the H200 stopped at 149,369,651,200 reserved bytes with 13,762,560 free.
        assert_eq!(limit, Some(149_369_651_200 + 13_762_560));
        t.metadata.devices[0].memory_cap = Some(1 << 30);
        assert_eq!(default_limit(&t, 0, None).unwrap(), (Some(1 << 30), Some(1 << 30), CapacitySource::RecordedCap));
        // --capacity overrides both.
        assert_eq!(default_limit(&t, 0, Some(Capacity::Bytes(4096))).unwrap(), (Some(4096), Some(4096), CapacitySource::Explicit));
    }

    #[test]
    fn unknown_policy_fails_before_replaying() {
        let t = tiny_trace(None);
        let req = ReplayRequest { policies: vec!["one_per_request".into(), "nope".into()], ..Default::default() };
        assert!(matches!(replay_with(&t, &req, factory), Err(Error::PolicySpec(m)) if m.contains("nope")));
        // The registry lists the known names.
        let req = ReplayRequest { policies: vec!["nope:x".into()], ..Default::default() };
        match replay(&t, &req) {
            Err(Error::PolicySpec(m)) => assert!(m.contains("nope") && m.contains("pytorch"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// A policy with a bug: its first request panics.
    struct PanicsOnMalloc(Stats);

    impl Policy for PanicsOnMalloc {
        fn name(&self) -> String {
            "panics".into()
        }
        fn malloc(&mut self, _req: &Request, _dev: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
            panic!("the test policy's own message")
        }
        fn free_completed(&mut self, _id: u64, _dev: &mut DeviceMemory) {}
        fn stats(&self) -> &Stats {
            &self.0
        }
        fn segments(&self) -> Vec<SegmentInfo> {
            Vec::new()
        }
    }

    #[test]
    fn a_worker_threads_panic_reaches_the_caller_with_its_own_message() {
        // Two devices on two threads: the panic crosses the scoped threads with its payload
        // (the bindings report it as an internal error), not as "a scoped thread panicked".
        let t = tiny_trace(None);
        let req = ReplayRequest { policies: vec!["panics".into()], threads: 2, ..Default::default() };
        let panicking = |_: &str, _: &PolicyContext| -> Result<BoxedPolicy> { Ok(Box::new(PanicsOnMalloc(Stats::default()))) };
        let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| replay_with(&t, &req, panicking))).unwrap_err();
        let message = payload.downcast_ref::<&str>().map(|m| m.to_string()).or_else(|| payload.downcast_ref::<String>().cloned());
        assert_eq!(message.as_deref(), Some("the test policy's own message"));
    }
}
