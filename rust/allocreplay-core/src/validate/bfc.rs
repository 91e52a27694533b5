//! Validation of the `bfc` policy against a TensorFlow / JAX profiler capture: every memory
//! event records the chunk the real allocator handed out or took back (`allocation_bytes`)
//! and its bytes in use after the event (`bytes_allocated`), so the replay is checked event by
//! event; then the peak in use, and the pool size where the run's `.json` gives it.
//!
//! Best-fit ties break by address, and real regions come from the driver or the OS at
//! arbitrary addresses: a replay that numbers its regions itself drifts from the real layout
//! without any visible error until much later. So, as the PyTorch validation uses the recorded
//! segment addresses, this one places each new region where the trace shows it: the
//! allocation that made the pool grow sits at the new region's base
//! (`ReplayOptions::recorded_addresses`; see `Bfc::sub_alloc`).

use arrow_array::Array;
use serde::Serialize;

use crate::engine::{replay_device, DeviceReplay, DrivenPolicy, ReplayOptions};
use crate::error::{Error, Result};
use crate::policy::bfc::Bfc;
use crate::policy::bfc_config::{recorded_settings, spec_of, BfcSettings, BfcSpec};
use crate::policy::{self, PolicyContext};
use crate::registry;
use crate::trace::{Action, Trace};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BfcValidation {
    pub device: i32,
    /// The allocator the trace recorded (`GPU_0_bfc`, `bfc_cpu_allocator_for_gpu`, ...).
    pub allocator: Option<String>,
    /// The policy replayed, as an explicit spec.
    pub policy: String,
    /// `given` (a spec was passed), `recorded` (from the capture: allocator kind, `.json`,
    /// environment), or `inferred` (the capture does not say whether the allocator grew or
    /// was preallocated; both were replayed and the one matching more events is reported).
    pub settings_source: String,
    /// Recorded (non-seed) memory events compared, and of which kind.
    pub events: usize,
    pub allocs: usize,
    pub frees: usize,
    /// Share of events whose replayed chunk has the recorded size (`allocation_bytes`).
    pub chunk_match: f64,
    /// Share of events after which the replayed bytes in use equal the recorded
    /// `bytes_allocated`.
    pub in_use_match: f64,
    /// Share of allocations placed at the recorded address.
    pub address_match: f64,
    pub chunk_mismatches: usize,
    pub in_use_mismatches: usize,
    /// Trace row of the first event that differs.
    pub first_chunk_mismatch_event: Option<usize>,
    pub first_in_use_mismatch_event: Option<usize>,
    /// The run's peak bytes in use: the `.json`'s `peak_bytes_in_use`, else the largest
    /// `peak_bytes_in_use` an event recorded.
    pub peak_in_use_recorded: Option<u64>,
    pub peak_in_use_replayed: u64,
    /// The recorded peak was reached before the profiling window (a seeded trace): the
    /// replay is compared with the largest in-use bytes inside the window instead.
    pub peak_before_window: bool,
    /// Final pool size (`pool_bytes`), where the run's `.json` gives it.
    pub pool_bytes_recorded: Option<u64>,
    pub pool_bytes_replayed: u64,
    pub peak_pool_bytes_recorded: Option<u64>,
    pub peak_pool_bytes_replayed: u64,
    pub regions_replayed: usize,
    pub ooms_replayed: u64,
    pub seeded: bool,
    pub ok: bool,
}

fn recorded_stat(trace: &Trace, device: i32, key: &str) -> Option<u64> {
    trace.metadata.extra.get("recorded_stats")?.get(device.to_string())?.get(key)?.as_u64()
}

/// Validates the BFC replay of `device`'s events. `spec`: the policy to replay (`bfc:...`,
/// `tf...`, `jax...`); `None` replays the settings the capture recorded.
pub fn validate_bfc(trace: &Trace, device: i32, spec: Option<&str>) -> Result<BfcValidation> {
    let (Some(_), Some(_)) = (trace.optional_u64("chunk_bytes"), trace.optional_u64("in_use_bytes")) else {
        return Err(Error::InvalidArgument(format!(
            "validate with the bfc policy needs a BFC trace (a TensorFlow / JAX profiler capture, whose events record chunk sizes and bytes in use); this trace comes from '{}'",
            trace.metadata.source
        )));
    };
    let info = trace.metadata.device(device);
    if !trace.devices().contains(&device) {
        return Err(Error::InvalidArgument(format!("the trace has no events on device {device} (devices: {:?})", trace.devices())));
    }
    let ctx = PolicyContext { metadata: &trace.metadata, device: info, capacity: None };
    // The sub-allocator's memory: the device's (cudaMalloc fails beyond it).
    let opts = ReplayOptions {
        capacity: info.and_then(|d| d.total_memory),
        recorded_addresses: true,
        timeline: Some(0),
        placements: true,
        device_events: false,
        defer_addresses: false,
    };
    // A replay cut short by a cancellation (`crate::cancel`) is an error, not a validation.
    let run = |policy: &mut dyn DrivenPolicy| {
        let r = replay_device(trace, device, policy, &opts);
        crate::cancel::check().map(|()| r)
    };

    if let Some(spec) = spec {
        let mut p = registry::build(spec, &ctx)?;
        let r = run(p.as_mut())?;
        return Ok(compare(trace, device, &r, "given"));
    }
    let recorded = recorded_settings(&ctx)?;
    let candidates: Vec<BfcSettings> = if recorded.allow_growth_known {
        vec![recorded.settings.clone()]
    } else {
        let mut other = recorded.settings.clone();
        other.allow_growth = !other.allow_growth;
        vec![recorded.settings.clone(), other]
    };
    let source = if recorded.allow_growth_known { "recorded" } else { "inferred" };
    let mut best: Option<BfcValidation> = None;
    for s in candidates {
        let name = spec_of(&s);
        // Built through the registry path so the replay is the one `bfc:...` gives.
        let BfcSpec::Bfc { settings, .. } = policy::bfc_config::parse_bfc(name.trim_start_matches("bfc:"), &ctx)? else {
            unreachable!("bfc specs build BFC allocators")
        };
        let mut p = Bfc::new(name, settings).with_trace(&ctx);
        let r = run(&mut p)?;
        let v = compare(trace, device, &r, source);
        let better = best.as_ref().is_none_or(|b| (v.chunk_match + v.in_use_match) > (b.chunk_match + b.in_use_match));
        if better {
            best = Some(v);
        }
        if best.as_ref().is_some_and(|b| b.ok) {
            break;
        }
    }
    Ok(best.expect("at least one candidate"))
}

fn compare(trace: &Trace, device: i32, r: &DeviceReplay, settings_source: &str) -> BfcValidation {
    let c = trace.columns();
    let n = trace.num_events();
    let chunk_col = trace.optional_u64("chunk_bytes").expect("checked");
    let in_use_col = trace.optional_u64("in_use_bytes").expect("checked");
    let peak_col = trace.optional_u64("peak_in_use_bytes");

    // Replayed chunk of each allocation (by id) and of each alloc event; in use after each
    // event.
    let max_id = c.alloc_id.iter().copied().max().unwrap_or(0) as usize;
    let mut chunk_of_id: Vec<Option<u64>> = vec![None; if n == 0 { 0 } else { max_id + 1 }];
    let mut addr_at: Vec<Option<u64>> = vec![None; n];
    for p in &r.placements {
        chunk_of_id[p.id as usize] = Some(p.placement.size);
        addr_at[p.event] = Some(p.placement.addr);
    }
    let mut in_use_after: Vec<Option<u64>> = vec![None; n];
    for t in &r.timeline {
        in_use_after[t.event] = Some(t.allocated);
    }

    let (mut events, mut allocs, mut frees) = (0usize, 0usize, 0usize);
    let (mut chunk_bad, mut in_use_bad, mut addr_ok) = (0usize, 0usize, 0usize);
    let (mut first_chunk, mut first_in_use) = (None, None);
    let mut window_max_in_use = 0u64;
    let mut peak_col_max: Option<u64> = None;
    for i in 0..n {
        if c.device[i] != device || c.seed.value(i) {
            continue;
        }
        let action = Action::from_code(c.action[i]);
        let alloc = match action {
            Some(Action::Alloc) => true,
            Some(Action::FreeCompleted) => false,
            _ => continue,
        };
        events += 1;
        if alloc {
            allocs += 1
        } else {
            frees += 1
        }
        let replayed_chunk = if c.alloc_id_valid(i) { chunk_of_id.get(c.alloc_id[i] as usize).copied().flatten() } else { None };
        let recorded_chunk = chunk_col.is_valid(i).then(|| chunk_col.value(i));
        if recorded_chunk.is_none() || replayed_chunk != recorded_chunk {
            chunk_bad += 1;
            first_chunk.get_or_insert(i);
        }
        let recorded_in_use = in_use_col.is_valid(i).then(|| in_use_col.value(i));
        if let Some(u) = recorded_in_use {
            window_max_in_use = window_max_in_use.max(u);
        }
        if recorded_in_use.is_none() || in_use_after[i] != recorded_in_use {
            in_use_bad += 1;
            first_in_use.get_or_insert(i);
        }
        if alloc && c.addr.is_valid(i) && addr_at[i] == Some(c.addr.value(i)) {
            addr_ok += 1;
        }
        if let Some(p) = peak_col.filter(|p| p.is_valid(i)).map(|p| p.value(i)) {
            peak_col_max = Some(peak_col_max.map_or(p, |m: u64| m.max(p)));
        }
    }
    let share = |bad: usize, of: usize| if of == 0 { 1.0 } else { (of - bad) as f64 / of as f64 };
    let peak_in_use_recorded = recorded_stat(trace, device, "peak_bytes_in_use").or(peak_col_max);
    let seeded = trace.metadata.seeded;
    let peak_before_window = seeded && peak_in_use_recorded.is_some_and(|p| p > window_max_in_use);
    let peak_target = if peak_before_window { Some(window_max_in_use) } else { peak_in_use_recorded };
    let pool_bytes_recorded = recorded_stat(trace, device, "pool_bytes");
    let peak_pool_bytes_recorded = recorded_stat(trace, device, "peak_pool_bytes");
    let s = &r.stats;
    let ok = chunk_bad == 0
        && in_use_bad == 0
        && s.num_ooms == 0
        && peak_target.is_none_or(|p| p == s.peak_allocated)
        && pool_bytes_recorded.is_none_or(|p| p == s.reserved)
        && peak_pool_bytes_recorded.is_none_or(|p| p == s.peak_reserved);
    BfcValidation {
        device,
        allocator: trace.metadata.extra.get("allocator").and_then(|v| v.as_str()).map(str::to_string),
        policy: r.policy.clone(),
        settings_source: settings_source.to_string(),
        events,
        allocs,
        frees,
        chunk_match: share(chunk_bad, events),
        in_use_match: share(in_use_bad, events),
        address_match: share(allocs - addr_ok, allocs),
        chunk_mismatches: chunk_bad,
        in_use_mismatches: in_use_bad,
        first_chunk_mismatch_event: first_chunk,
        first_in_use_mismatch_event: first_in_use,
        peak_in_use_recorded,
        peak_in_use_replayed: s.peak_allocated,
        peak_before_window,
        pool_bytes_recorded,
        pool_bytes_replayed: s.reserved,
        peak_pool_bytes_recorded,
        peak_pool_bytes_replayed: s.peak_reserved,
        regions_replayed: r.segments.len(),
        ooms_replayed: s.num_ooms,
        seeded,
        ok,
    }
}
