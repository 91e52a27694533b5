//! The replay engine: streams one device's request events through a policy and records what
//! the policy decided. No heap allocation per event in the loop beyond what the policy does.

pub mod device;
pub mod stats;

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

/// Replays the events of `device` in `trace` through `policy`.
pub fn replay_device(trace: &Trace, device: i32, policy: &mut dyn Policy, opts: &ReplayOptions) -> DeviceReplay {
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
    let mut timeline = Vec::new();
    let mut placements = Vec::new();
    let mut events = 0usize;
    // Validate: the recorded device allocations made for a request precede it in the trace.
    let mut pending_hints: Vec<(u64, u64)> = Vec::new();
    for i in 0..n {
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
        if opts.timeline.is_some() {
            let s = policy.stats();
            timeline.push(TimelinePoint {
                event: i,
                time_ns: c.time_ns.is_valid(i).then(|| c.time_ns.value(i)),
                allocated: s.allocated,
                reserved: s.reserved,
            });
        }
    }
    if let Some(max_points) = opts.timeline {
        timeline = downsample(timeline, max_points);
    }
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
