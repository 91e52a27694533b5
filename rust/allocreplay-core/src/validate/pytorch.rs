//! Validation of the `pytorch` policy against a PyTorch snapshot: every allocation's address,
//! the segment events (segment_alloc/free, map/unmap: order, sizes, addresses), peaks, and the
//! retries and OOMs the run's final `memory_stats()` recorded.

use serde::Serialize;

use crate::engine::{replay_device, ReplayOptions};
use crate::error::{Error, Result};
use crate::policy::PolicyContext;
use crate::registry;
use crate::trace::info::trace_info;
use crate::trace::{Action, Trace};
use arrow_array::Array;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PytorchValidation {
    pub device: i32,
    pub policy: String,
    /// Memory cap replayed (the run's `set_per_process_memory_fraction`), if any.
    pub capacity: Option<u64>,
    /// The device limit the replay ran under and where it came from
    /// (`replay::default_limit`: `recorded_cap`, `device_total_minus_cuda_context`, ...).
    pub device_limit: Option<u64>,
    pub capacity_source: String,
    /// Recorded (non-seed) allocations compared.
    pub allocs: usize,
    /// Share of allocations placed at the recorded address.
    pub address_match: f64,
    pub first_address_mismatch_event: Option<usize>,
    /// Segment events identical in action, size and order.
    pub segment_events_match: bool,
    /// ... and in address.
    pub segment_addresses_match: bool,
    pub segment_events_recorded: usize,
    pub segment_events_replayed: usize,
    pub first_segment_mismatch: Option<usize>,
    pub peak_reserved_recorded: Option<u64>,
    pub peak_reserved_replayed: u64,
    pub peak_allocated_recorded: Option<u64>,
    pub peak_allocated_replayed: u64,
    pub num_alloc_retries_recorded: Option<u64>,
    pub num_alloc_retries_replayed: u64,
    pub num_ooms_recorded: Option<u64>,
    pub num_ooms_replayed: u64,
    /// `validate --no-addresses`: the replay placed new segments in the modelled driver
    /// address space (device::memory::AddressSpace) instead of at the recorded addresses, as
    /// any what-if prediction does; `ok` then asks for the recorded peaks, retries, OOMs and
    /// segment event sizes, not for equal addresses.
    pub no_addresses: bool,
    /// Set when the snapshot recorded no `allocator_settings` (older layouts) and the
    /// importer assumed them: what it assumed.
    pub settings_assumed: Option<String>,
    /// The history was truncated: peaks of allocated memory and counters from the run's
    /// metadata cover the whole run, not the tail, and are not compared.
    pub seeded: bool,
    /// What the recording could not determine and the replay assumed
    /// (`trace::info::assumptions`), one sentence each.
    pub assumed: Vec<String>,
    /// `no_addresses`: what the capture noted for the modelled address space (host ranges, the
    /// driver's own memory) and whether it was applied, one sentence each
    /// (`engine::host_ranges::address_notes`); empty otherwise.
    pub address_notes: Vec<String>,
    pub ok: bool,
}

fn stat(trace: &Trace, device: i32, key: &str) -> Option<u64> {
    trace.metadata.extra.get("recorded_stats")?.get(device.to_string())?.get(key)?.as_u64()
}

pub fn validate_pytorch(trace: &Trace, device: i32) -> Result<PytorchValidation> {
    validate_pytorch_with(trace, device, false)
}

/// [`validate_pytorch`], with `no_addresses`: the replay does not borrow the recorded segment
/// addresses (what-if mode), so the comparison shows what the driver address model decides.
pub fn validate_pytorch_with(trace: &Trace, device: i32, no_addresses: bool) -> Result<PytorchValidation> {
    if trace.metadata.source != "pytorch" {
        return Err(Error::InvalidArgument(format!(
            "validate with the pytorch policy needs a PyTorch snapshot; this trace comes from '{}'",
            trace.metadata.source
        )));
    }
    let dev_info = trace.metadata.device(device);
    let (capacity, device_limit, source) = crate::replay::default_limit(trace, device, None)?;
    let ctx = PolicyContext { metadata: &trace.metadata, device: dev_info, capacity };
    let mut policy = registry::build("pytorch:recorded", &ctx)?;
    let opts = ReplayOptions {
        capacity: device_limit,
        recorded_addresses: !no_addresses,
        timeline: None,
        placements: true,
        device_events: true,
        ..ReplayOptions::default()
    };
    let r = replay_device(trace, device, policy.as_mut(), &opts);
    crate::cancel::check()?;

    let c = trace.columns();
    // Addresses.
    let mut allocs = 0usize;
    let mut matched = 0usize;
    let mut first_address_mismatch_event = None;
    let mut placed = r.placements.iter().peekable();
    for i in 0..trace.num_events() {
        if c.device[i] != device || c.action[i] != Action::Alloc as u8 || c.seed.value(i) {
            continue;
        }
        allocs += 1;
        while placed.peek().is_some_and(|p| p.event < i) {
            placed.next();
        }
        let replayed = placed.peek().filter(|p| p.event == i).map(|p| p.placement.addr);
        if c.addr.is_valid(i) && replayed == Some(c.addr.value(i)) {
            matched += 1;
        } else if first_address_mismatch_event.is_none() {
            first_address_mismatch_event = Some(i);
        }
    }
    // Segment events.
    let recorded: Vec<(usize, Action, u64, u64)> = (0..trace.num_events())
        .filter(|&i| c.device[i] == device && !c.seed.value(i))
        .filter_map(|i| {
            let a = Action::from_code(c.action[i])?;
            matches!(a, Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap)
                .then(|| (i, a, c.addr.value(i), c.size[i]))
        })
        .collect();
    let replayed = &r.device_events;
    let mut first_segment_mismatch = None;
    let mut addresses_match = recorded.len() == replayed.len();
    for (k, (rec, rep)) in recorded.iter().zip(replayed.iter()).enumerate() {
        if rec.1 != rep.action || rec.3 != rep.size {
            first_segment_mismatch = Some(k);
            break;
        }
        if rec.2 != rep.addr {
            addresses_match = false;
        }
    }
    if first_segment_mismatch.is_none() && recorded.len() != replayed.len() {
        first_segment_mismatch = Some(recorded.len().min(replayed.len()));
    }
    let segment_events_match = first_segment_mismatch.is_none();

    let info = trace_info(trace);
    let seeded = trace.metadata.seeded;
    // A truncated history's replay covers the recorded part of the run: compare it with that
    // part's peak (its segment events from the seeded state), not with the whole run's.
    let window_peak = info.recorded_peak_reserved_bytes_per_device.get(&device).copied();
    let peak_reserved_recorded = if seeded { window_peak } else { stat(trace, device, "reserved_bytes.all.peak").or(window_peak) };
    let (peak_allocated_recorded, retries_recorded, ooms_recorded) = if seeded {
        (None, None, None)
    } else {
        (stat(trace, device, "allocated_bytes.all.peak"), stat(trace, device, "num_alloc_retries"), stat(trace, device, "num_ooms"))
    };
    let address_match = if allocs == 0 { 1.0 } else { matched as f64 / allocs as f64 };
    let s = &r.stats;
    let ok = (no_addresses || matched == allocs)
        && segment_events_match
        && peak_reserved_recorded.is_none_or(|p| p == s.peak_reserved)
        && peak_allocated_recorded.is_none_or(|p| p == s.peak_allocated)
        && retries_recorded.is_none_or(|p| p == s.num_alloc_retries)
        && ooms_recorded.is_none_or(|p| p == s.num_ooms);
    Ok(PytorchValidation {
        device,
        policy: r.policy,
        capacity,
        device_limit,
        capacity_source: source.name().to_string(),
        allocs,
        address_match,
        first_address_mismatch_event,
        segment_events_match,
        segment_addresses_match: addresses_match && segment_events_match,
        segment_events_recorded: recorded.len(),
        segment_events_replayed: replayed.len(),
        first_segment_mismatch,
        peak_reserved_recorded,
        peak_reserved_replayed: s.peak_reserved,
        peak_allocated_recorded,
        peak_allocated_replayed: s.peak_allocated,
        num_alloc_retries_recorded: retries_recorded,
        num_alloc_retries_replayed: s.num_alloc_retries,
        num_ooms_recorded: ooms_recorded,
        num_ooms_replayed: s.num_ooms,
        no_addresses,
        settings_assumed: trace.metadata.extra.get(crate::trace::SETTINGS_ASSUMED).and_then(|v| v.as_str()).map(str::to_string),
        assumed: info.assumed.clone(),
        address_notes: if no_addresses { crate::engine::host_ranges::address_notes(&trace.metadata, device) } else { Vec::new() },
        seeded,
        ok,
    })
}
