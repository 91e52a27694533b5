//! `allocreplay info`: counts and recorded peaks of a trace, computed in one pass.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use arrow_array::Array;

use super::{Action, Columns, Trace, TraceMetadata};

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
    /// What the recording could not determine and the replay assumes, one sentence each
    /// ([`assumptions`]): empty when it determines everything.
    pub assumed: Vec<String>,
}

pub fn trace_info(trace: &Trace) -> TraceInfo {
    let mut b = InfoBuilder::default();
    b.add(&trace.columns(), trace.num_events());
    b.finish(&trace.metadata)
}

/// [`trace_info`] accumulated batch by batch (a streamed file's, `MappedTrace`): its state is
/// O(live allocations + devices, streams and pools).
#[derive(Debug, Default)]
pub struct InfoBuilder {
    events: usize,
    allocs: usize,
    frees: usize,
    free_requests: usize,
    segment_events: usize,
    ooms: usize,
    empty_caches: usize,
    seed_allocs: usize,
    seed_segments: usize,
    devices: BTreeSet<i32>,
    streams: BTreeSet<(i32, i64)>,
    pools: BTreeSet<(i32, u32)>,
    /// Requested size of each live allocation.
    live_size: rustc_hash::FxHashMap<u64, u64>,
    live: u64,
    peak_live: u64,
    reserved: BTreeMap<i32, i128>,
    peak_reserved: BTreeMap<i32, u64>,
    total_reserved: i128,
    peak_total: Option<u64>,
    tmin: Option<i64>,
    tmax: Option<i64>,
    last_device: Option<i32>,
}

impl InfoBuilder {
    /// Counts the first `n` rows of `c`, the trace's next events.
    pub fn add(&mut self, c: &Columns<'_>, n: usize) {
        self.events += n;
        for i in 0..n {
            let dev = c.device[i];
            if self.last_device != Some(dev) {
                self.devices.insert(dev);
                self.last_device = Some(dev);
            }
            let Some(action) = Action::from_code(c.action[i]) else { continue };
            let seed = c.seed.value(i);
            if !seed && c.time_ns.is_valid(i) {
                let t = c.time_ns.value(i);
                self.tmin = Some(self.tmin.map_or(t, |m| m.min(t)));
                self.tmax = Some(self.tmax.map_or(t, |m| m.max(t)));
            }
            match action {
                Action::Alloc => {
                    self.streams.insert((dev, c.stream[i]));
                    self.pools.insert((dev, c.pool[i]));
                    if seed {
                        self.seed_allocs += 1
                    } else {
                        self.allocs += 1
                    }
                    self.live_size.insert(c.alloc_id[i], c.size[i]);
                    self.live += c.size[i];
                    self.peak_live = self.peak_live.max(self.live);
                }
                Action::FreeRequested => {
                    if !seed {
                        self.free_requests += 1
                    }
                }
                Action::FreeCompleted => {
                    if !seed {
                        self.frees += 1
                    }
                    if let Some(s) = self.live_size.remove(&c.alloc_id[i]) {
                        self.live -= s;
                    }
                }
                Action::SegmentAlloc | Action::SegmentMap | Action::SegmentFree | Action::SegmentUnmap => {
                    if seed {
                        self.seed_segments += 1
                    } else {
                        self.segment_events += 1
                    }
                    let delta =
                        if matches!(action, Action::SegmentAlloc | Action::SegmentMap) { c.size[i] as i128 } else { -(c.size[i] as i128) };
                    let r = self.reserved.entry(dev).or_insert(0);
                    *r += delta;
                    let p = self.peak_reserved.entry(dev).or_insert(0);
                    *p = (*p).max((*r).max(0) as u64);
                    self.total_reserved += delta;
                    let t = self.total_reserved.max(0) as u64;
                    self.peak_total = Some(self.peak_total.map_or(t, |p: u64| p.max(t)));
                }
                Action::Oom => self.ooms += 1,
                Action::EmptyCache => self.empty_caches += 1,
                Action::Snapshot => {}
            }
        }
    }

    /// Distinct device indices seen so far, ascending.
    pub fn devices(&self) -> Vec<i32> {
        self.devices.iter().copied().collect()
    }

    pub fn finish(self, metadata: &TraceMetadata) -> TraceInfo {
        TraceInfo {
            format_version: metadata.format_version,
            source: metadata.source.clone(),
            source_version: metadata.source_version.clone(),
            devices: self.devices.into_iter().collect(),
            events: self.events,
            allocs: self.allocs,
            frees: self.frees,
            free_requests: self.free_requests,
            segment_events: self.segment_events,
            ooms: self.ooms,
            empty_caches: self.empty_caches,
            streams: self.streams.len(),
            pools: self.pools.len(),
            seed_allocs: self.seed_allocs,
            seed_segments: self.seed_segments,
            peak_live_requested_bytes: self.peak_live,
            recorded_peak_reserved_bytes: self.peak_total,
            recorded_peak_reserved_bytes_per_device: self.peak_reserved,
            duration_s: self.tmin.zip(self.tmax).map(|(a, b)| (b - a) as f64 / 1e9),
            lenient_skipped: metadata.extra.get(super::check::LENIENT_SKIPPED).and_then(|v| v.as_u64()),
            assumed: assumptions(metadata, self.seed_allocs, self.seed_segments),
        }
    }
}

/// What a replay of the trace assumes where its recording is silent (issue 29): the state before
/// a truncated history (seeded from the final state, so the run's earlier peaks are unknown),
/// allocator settings an older snapshot did not record, and releases of cached segments the
/// history cannot attribute (the importers say which in `metadata.extra`).
pub fn assumptions(metadata: &TraceMetadata, seed_allocs: usize, seed_segments: usize) -> Vec<String> {
    let mut out = Vec::new();
    if metadata.seeded {
        out.push(format!(
            "the history starts mid-run (cut by the recorder's max_entries, or recording began late): the {seed_allocs} allocations and {seed_segments} segments live before its first entry are seeded from the final state, and peaks are those of the recorded part of the run; the run's earlier peaks are unknown"
        ));
    }
    for key in [super::SETTINGS_ASSUMED, super::RELEASES_ASSUMED] {
        if let Some(s) = metadata.extra.get(key).and_then(|v| v.as_str()) {
            out.push(s.to_string());
        }
    }
    out
}
