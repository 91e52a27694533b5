//! `allocreplay info`: counts and recorded peaks of a trace, computed in one pass.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use arrow_array::Array;

use super::{Action, Trace};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TraceInfo {
    pub format_version: u32,
    pub source: String,
    pub source_version: Option<String>,
    pub devices: Vec<i32>,
    pub events: usize,
    /// `alloc` events recorded in the history (seeded allocations not counted).
    pub allocs: usize,
    /// `free_completed` events recorded in the history.
    pub frees: usize,
    pub free_requests: usize,
    pub segment_events: usize,
    pub ooms: usize,
    /// `empty_cache` events (user cache releases the importer inferred).
    pub empty_caches: usize,
    pub streams: usize,
    pub pools: usize,
    /// Allocations and segments synthesized from the final state of a truncated history.
    pub seed_allocs: usize,
    pub seed_segments: usize,
    /// Maximum over time of the summed requested sizes of live allocations (an allocation is
    /// live from `alloc` to `free_completed`).
    pub peak_live_requested_bytes: u64,
    /// Maximum running sum of recorded segment sizes (segment_alloc/free, map/unmap), seeds
    /// included, over all devices; `None` when the source records no segments.
    pub recorded_peak_reserved_bytes: Option<u64>,
    pub recorded_peak_reserved_bytes_per_device: BTreeMap<i32, u64>,
    pub duration_s: Option<f64>,
    /// Events a lenient load skipped (`trace::check`); `None` for a strict load.
    pub lenient_skipped: Option<u64>,
}

pub fn trace_info(trace: &Trace) -> TraceInfo {
    let c = trace.columns();
    let n = trace.num_events();
    let mut allocs = 0;
    let mut frees = 0;
    let mut free_requests = 0;
    let mut segment_events = 0;
    let mut ooms = 0;
    let mut empty_caches = 0;
    let mut seed_allocs = 0;
    let mut seed_segments = 0;
    let mut streams = BTreeSet::new();
    let mut pools = BTreeSet::new();
    let mut live_size: Vec<u64> = Vec::new();
    let mut live: u64 = 0;
    let mut peak_live: u64 = 0;
    let mut reserved: BTreeMap<i32, i128> = BTreeMap::new();
    let mut peak_reserved: BTreeMap<i32, u64> = BTreeMap::new();
    let mut total_reserved: i128 = 0;
    let mut peak_total: Option<u64> = None;
    let (mut tmin, mut tmax) = (i64::MAX, i64::MIN);
    for i in 0..n {
        let Some(action) = Action::from_code(c.action[i]) else { continue };
        let seed = c.seed.value(i);
        if !seed && c.time_ns.is_valid(i) {
            let t = c.time_ns.value(i);
            tmin = tmin.min(t);
            tmax = tmax.max(t);
        }
        let dev = c.device[i];
        match action {
            Action::Alloc => {
                streams.insert((dev, c.stream[i]));
                pools.insert((dev, c.pool[i]));
                if seed {
                    seed_allocs += 1
                } else {
                    allocs += 1
                }
                let id = c.alloc_id[i] as usize;
                if live_size.len() <= id {
                    live_size.resize(id + 1, 0);
                }
                live_size[id] = c.size[i];
                live += c.size[i];
                peak_live = peak_live.max(live);
            }
            Action::FreeRequested => {
                if !seed {
                    free_requests += 1
                }
            }
            Action::FreeCompleted => {
                if !seed {
                    frees += 1
                }
                let id = c.alloc_id[i] as usize;
                if let Some(s) = live_size.get_mut(id) {
                    live -= *s;
                    *s = 0;
                }
            }
            Action::SegmentAlloc | Action::SegmentMap | Action::SegmentFree | Action::SegmentUnmap => {
                if seed {
                    seed_segments += 1
                } else {
                    segment_events += 1
                }
                let delta =
                    if matches!(action, Action::SegmentAlloc | Action::SegmentMap) { c.size[i] as i128 } else { -(c.size[i] as i128) };
                let r = reserved.entry(dev).or_insert(0);
                *r += delta;
                let p = peak_reserved.entry(dev).or_insert(0);
                *p = (*p).max((*r).max(0) as u64);
                total_reserved += delta;
                let t = total_reserved.max(0) as u64;
                peak_total = Some(peak_total.map_or(t, |p: u64| p.max(t)));
            }
            Action::Oom => ooms += 1,
            Action::EmptyCache => empty_caches += 1,
            Action::Snapshot => {}
        }
    }
    TraceInfo {
        format_version: trace.metadata.format_version,
        source: trace.metadata.source.clone(),
        source_version: trace.metadata.source_version.clone(),
        devices: trace.devices(),
        events: n,
        allocs,
        frees,
        free_requests,
        segment_events,
        ooms,
        empty_caches,
        streams: streams.len(),
        pools: pools.len(),
        seed_allocs,
        seed_segments,
        peak_live_requested_bytes: peak_live,
        recorded_peak_reserved_bytes: peak_total,
        recorded_peak_reserved_bytes_per_device: peak_reserved,
        duration_s: (tmax >= tmin).then(|| (tmax - tmin) as f64 / 1e9),
        lenient_skipped: trace.metadata.extra.get(super::check::LENIENT_SKIPPED).and_then(|v| v.as_u64()),
    }
}
