//! The replay engine: streams one device's request events through a policy and records what
//! the policy decided. No heap allocation per event in the loop beyond what the policy does.

pub mod device;
mod range_tree;
pub mod stats;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow_array::Array;

use crate::policy::{OutOfMemory, Placement, Policy, Request, SegmentInfo};
use crate::trace::{Action, Trace};
use device::DeviceMemory;
use stats::Stats;

/// A device allocation the policy made during the replay (what PyTorch records as
/// segment_alloc / segment_free / segment_map / segment_unmap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceEvent {
    pub event: usize,
    pub action: Action,
    pub addr: u64,
    pub size: u64,
}

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstOom {
    pub event: usize,
    pub requested: u64,
    pub alloc_size: u64,
    pub allocated: u64,
    pub reserved: u64,
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

/// Rows between two bumps of [`Hooks::progress`]: rare enough not to slow the loop.
pub const PROGRESS_EVERY: usize = 1 << 14;

/// Replays the events of `device` in `trace` through `policy`.
pub fn replay_device(trace: &Trace, device: i32, policy: &mut dyn Policy, opts: &ReplayOptions) -> DeviceReplay {
    replay_device_hooked(trace, device, policy, opts, &mut Hooks::default())
}

/// [`replay_device`] with [`Hooks`].
pub fn replay_device_hooked(
    trace: &Trace,
    device: i32,
    policy: &mut dyn Policy,
    opts: &ReplayOptions,
    hooks: &mut Hooks<'_>,
) -> DeviceReplay {
    let start = Instant::now();
    let c = trace.columns();
    let chunk_col = trace.optional_u64("chunk_bytes");
    let n = trace.num_events();
    let mut dev = DeviceMemory::new(opts.capacity);
    if opts.device_events {
        dev.log = Some(Vec::new());
    }
    // Allocation ids are dense per trace: a request that failed (OOM) is remembered so that
    // its frees are no-ops.
    let max_id = c.alloc_id.iter().copied().max().unwrap_or(0) as usize;
    let mut failed = vec![false; if n == 0 { 0 } else { max_id + 1 }];
    // The id under which a recorded OOM's request is replayed (no real allocation has it).
    let oom_id = max_id as u64 + 1;
    let mut first_oom = None;
    // The timeline is downsampled as it is built (memory O(points), not O(events)): the number
    // of points is known from one pass over two columns.
    let stop = hooks.stop_after.map_or(n, |s| (s + 1).min(n));
    let mut timeline = opts.timeline.map(|max_points| {
        let requests = (0..stop).filter(|&i| c.device[i] == device && is_timeline_request(c.action[i], c.seed.value(i))).count();
        Downsampler::new(requests, max_points)
    });
    let mut placements = Vec::new();
    let mut events = 0usize;
    // Validate: the recorded device allocations made for a request precede it in the trace.
    let mut pending_hints: Vec<(u64, u64)> = Vec::new();
    let (mut peak_reserved, mut peak_allocated) = (0u64, 0u64);
    let mut reported = 0usize;
    for i in 0..stop {
        if let Some(p) = hooks.progress {
            if i - reported == PROGRESS_EVERY {
                p.fetch_add(PROGRESS_EVERY as u64, Ordering::Relaxed);
                reported = i;
            }
        }
        if c.device[i] != device {
            continue;
        }
        let Some(action) = Action::from_code(c.action[i]) else { continue };
        let seed = c.seed.value(i);
        dev.event = i;
        match action {
            Action::Alloc => {
                events += 1;
                let id = c.alloc_id[i];
                let recorded_addr = c.addr.is_valid(i).then(|| c.addr.value(i));
                let recorded_chunk = chunk_col.filter(|col| col.is_valid(i)).map(|col| col.value(i));
                let req = Request { event: i, id, size: c.size[i], stream: c.stream[i], pool: c.pool[i], recorded_addr, recorded_chunk };
                if opts.recorded_addresses {
                    dev.set_hints(pending_hints.drain(..));
                    dev.request_hint = recorded_addr;
                }
                let res: Result<Placement, OutOfMemory> =
                    if seed { policy.seed_alloc(&req, &mut dev) } else { policy.malloc(&req, &mut dev) };
                dev.clear_hints();
                match res {
                    Ok(p) => {
                        if opts.placements {
                            placements.push(PlacementRow { event: i, id, placement: p });
                        }
                    }
                    Err(oom) => {
                        failed[id as usize] = true;
                        if first_oom.is_none() {
                            let s = policy.stats();
                            first_oom = Some(FirstOom {
                                event: i,
                                requested: req.size,
                                alloc_size: oom.alloc_size,
                                allocated: s.allocated,
                                reserved: s.reserved,
                            });
                        }
                    }
                }
            }
            Action::FreeRequested => {
                events += 1;
                let id = c.alloc_id[i];
                if c.alloc_id_valid(i) && !failed[id as usize] {
                    policy.free_requested(id, &mut dev);
                }
            }
            Action::FreeCompleted => {
                events += 1;
                let id = c.alloc_id[i];
                if c.alloc_id_valid(i) && !failed[id as usize] {
                    policy.free_completed(id, &mut dev);
                }
            }
            // c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc: when no block
            // could be found or made, even after freeing the cache and retrying, the allocator
            // records TraceEntry::OOM with the request's (rounded) size and throws. The request
            // is replayed: the policy must fail it too. One that serves it hands the block
            // straight back, since the caller got an exception and holds nothing.
            Action::Oom if !seed => {
                events += 1;
                let req = Request {
                    event: i,
                    id: oom_id,
                    size: c.size[i],
                    stream: c.stream[i],
                    pool: c.pool[i],
                    recorded_addr: None,
                    recorded_chunk: None,
                };
                dev.request_hint = None;
                match policy.malloc(&req, &mut dev) {
                    Ok(_) => {
                        policy.free_requested(oom_id, &mut dev);
                        policy.free_completed(oom_id, &mut dev);
                    }
                    Err(oom) => {
                        if first_oom.is_none() {
                            let s = policy.stats();
                            first_oom = Some(FirstOom {
                                event: i,
                                requested: req.size,
                                alloc_size: oom.alloc_size,
                                allocated: s.allocated,
                                reserved: s.reserved,
                            });
                        }
                    }
                }
            }
            Action::EmptyCache => {
                events += 1;
                policy.empty_cache(&mut dev);
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                if seed {
                    let addr = c.addr.value(i);
                    policy.seed_segment(addr, c.size[i], c.stream[i], c.pool[i], &mut dev);
                } else if opts.recorded_addresses && c.addr.is_valid(i) {
                    pending_hints.push((c.addr.value(i), c.size[i]));
                }
                continue;
            }
            _ => continue,
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
            t.push(TimelinePoint {
                event: i,
                time_ns: c.time_ns.is_valid(i).then(|| c.time_ns.value(i)),
                allocated: s.allocated,
                reserved: s.reserved,
            });
        }
    }
    if let Some(p) = hooks.progress {
        p.fetch_add((stop - reported) as u64, Ordering::Relaxed);
    }
    let timeline = timeline.map(Downsampler::finish).unwrap_or_default();
    DeviceReplay {
        policy: policy.name(),
        device,
        stats: policy.stats().clone(),
        events,
        first_oom,
        replay_seconds: start.elapsed().as_secs_f64(),
        timeline,
        segments: policy.segments(),
        placements,
        device_events: dev.log.take().unwrap_or_default(),
    }
}

/// At most `max_points` points (0: all), each the maximum of its bucket of events.
/// The events that add a timeline point: the requests replayed (allocs, frees, a recorded OOM
/// outside the seed).
fn is_timeline_request(action: u8, seed: bool) -> bool {
    matches!(Action::from_code(action), Some(Action::Alloc | Action::FreeRequested | Action::FreeCompleted))
        || (action == Action::Oom as u8 && !seed)
}

/// [`downsample`] as the points arrive: buckets of `total.div_ceil(max_points)` points, each
/// kept as its maximum stamped with its last event.
struct Downsampler {
    per: usize,
    in_bucket: usize,
    bucket: Option<TimelinePoint>,
    out: Vec<TimelinePoint>,
}

impl Downsampler {
    fn new(total: usize, max_points: usize) -> Self {
        let per = if max_points == 0 || total <= max_points { 1 } else { total.div_ceil(max_points) };
        Downsampler { per, in_bucket: 0, bucket: None, out: Vec::with_capacity(total.div_ceil(per)) }
    }

    #[inline]
    fn push(&mut self, p: TimelinePoint) {
        self.bucket = Some(match self.bucket {
            None => p,
            Some(b) => TimelinePoint { allocated: b.allocated.max(p.allocated), reserved: b.reserved.max(p.reserved), ..p },
        });
        self.in_bucket += 1;
        if self.in_bucket == self.per {
            self.out.extend(self.bucket.take());
            self.in_bucket = 0;
        }
    }

    fn finish(mut self) -> Vec<TimelinePoint> {
        self.out.extend(self.bucket.take());
        self.out
    }
}

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
mod tests {
    use super::*;

    /// Downsampling as the points arrive gives what downsampling the whole timeline gives.
    #[test]
    fn streaming_downsampler_equals_downsample() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for total in [0usize, 1, 5, 7, 1000, 1999, 2000, 2001, 4099] {
            let points: Vec<TimelinePoint> = (0..total)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    TimelinePoint { event: 3 * i, time_ns: (i % 3 != 0).then_some(i as i64), allocated: x % 1000, reserved: 1000 + x % 777 }
                })
                .collect();
            for max_points in [0usize, 1, 3, 2000] {
                let mut d = Downsampler::new(total, max_points);
                points.iter().for_each(|&p| d.push(p));
                assert_eq!(d.finish(), downsample(points.clone(), max_points), "total {total} max {max_points}");
            }
        }
    }
}
