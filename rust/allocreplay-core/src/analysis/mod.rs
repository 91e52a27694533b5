//! Where the memory goes: the state a policy is in at one event of a replay (its peak, its
//! first OOM, or any event) — the allocations live then, every segment with its blocks and
//! free holes — as Arrow tables for `allocreplay.analysis`. The replay runs twice: once to find
//! the event, once stopped right after it (no per-event snapshot is kept).

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Int32Builder, Int64Builder, StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field};

use crate::device::DeviceEvent;
use crate::engine::{replay_device_hooked, FirstOom, Hooks, ReplayOptions};
use crate::error::{Error, Result};
use crate::policy::{BlockInfo, PolicyContext, SegmentInfo};
use crate::registry;
use crate::trace::{Action, Trace};
use crate::units::Capacity;

/// Which event to take the state at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The first event after which reserved bytes were at their peak.
    PeakReserved,
    /// The first event after which allocated bytes were at their peak.
    PeakAllocated,
    /// The first request the policy failed (devices without one are left out).
    FirstOom,
    /// After the event with this trace index.
    Event(usize),
    /// After the last event.
    End,
}

impl At {
    pub fn parse(text: &str) -> Result<At> {
        match text {
            "peak" | "peak_reserved" => Ok(At::PeakReserved),
            "peak_allocated" => Ok(At::PeakAllocated),
            "oom" | "first_oom" => Ok(At::FirstOom),
            "end" => Ok(At::End),
            t => t
                .parse::<usize>()
                .map(At::Event)
                .map_err(|_| Error::InvalidArgument(format!("at='{t}': expected peak, peak_allocated, oom, end or an event index"))),
        }
    }
}

/// An allocation live at the state's event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAlloc {
    pub alloc_id: u64,
    /// Trace index of its `alloc` event.
    pub alloc_event: usize,
    pub addr: u64,
    /// Bytes the policy set aside (block / chunk size).
    pub size: u64,
    /// Bytes the program asked for.
    pub requested: u64,
    pub stream: i64,
    pub pool: u32,
    pub segment: u64,
    pub stack_id: Option<u32>,
    pub alloc_time_ns: Option<i64>,
    /// The program freed it (`free_requested`), the allocator has not taken it back yet.
    pub free_requested: bool,
}

/// A policy's state on one device right after one event.
#[derive(Debug, Clone)]
pub struct State {
    pub policy: String,
    pub device: i32,
    pub event: usize,
    pub time_ns: Option<i64>,
    pub allocated: u64,
    pub reserved: u64,
    pub capacity: Option<u64>,
    pub first_oom: Option<FirstOom>,
    pub live: Vec<LiveAlloc>,
    pub segments: Vec<SegmentInfo>,
    /// Every block of every segment, allocated or free, by segment then address.
    pub blocks: Vec<BlockInfo>,
    /// The device allocations the policy made up to the event (`device_events` asked).
    pub device_events: Vec<DeviceEvent>,
    /// Where every request up to the event was placed: (trace index, alloc id, addr, block size,
    /// segment).
    pub placements: Vec<crate::engine::PlacementRow>,
}

impl State {
    /// The largest free block (hole) of any segment.
    pub fn largest_free_block(&self) -> u64 {
        self.blocks.iter().filter(|b| !b.allocated).map(|b| b.size).max().unwrap_or(0)
    }
}

/// Options of [`state_at`].
#[derive(Debug, Clone)]
pub struct StateRequest {
    pub policy: String,
    pub capacity: Option<Capacity>,
    pub at: At,
    /// Keep the device events and every placement (for export).
    pub history: bool,
}

/// The state of `req.policy` at `req.at` on every device of `trace` (devices without an OOM
/// are left out for [`At::FirstOom`]).
pub fn state_at(trace: &Trace, req: &StateRequest) -> Result<Vec<State>> {
    // Online specs always parse (their options are checked when built); a bound, or a bound
    // whose options do not, has no state.
    if !matches!(registry::PolicySpec::parse(&req.policy), Ok(registry::PolicySpec::Online { .. })) {
        return Err(Error::InvalidArgument(format!(
            "{}: an offline bound has no allocator state to look at; pick an allocator policy",
            req.policy
        )));
    }
    let mut out = Vec::new();
    for d in trace.devices() {
        let info = trace.metadata.device(d);
        // The limit replay uses (replay::metadata_limit): --capacity, else the recorded cap,
        // else (PyTorch) the device's memory less the CUDA context's share.
        let (explicit, limit, source) = crate::replay::metadata_limit(&trace.metadata, d, req.capacity)?;
        registry::parse(&req.policy)?.0.check_capacity(limit, source.name())?;
        let ctx = PolicyContext { metadata: &trace.metadata, device: info, capacity: explicit };
        let opts = ReplayOptions { capacity: limit, ..Default::default() };
        // Pass 1: where is the event?
        let event = match req.at {
            At::Event(e) => Some(e.min(trace.num_events().saturating_sub(1))),
            At::End => None,
            at => {
                let mut p = registry::build(&req.policy, &ctx)?;
                let mut hooks = Hooks::default();
                let r = replay_device_hooked(trace, d, p.as_mut(), &opts, &mut hooks);
                crate::cancel::check()?;
                match at {
                    At::PeakReserved => hooks.peak_reserved_event,
                    At::PeakAllocated => hooks.peak_allocated_event,
                    _ => match r.first_oom {
                        Some(o) => Some(o.event),
                        None => continue,
                    },
                }
            }
        };
        // Pass 2: stopped right after it, with the placements.
        let mut p = registry::build(&req.policy, &ctx)?;
        let opts = ReplayOptions { placements: true, device_events: req.history, ..opts };
        let mut hooks = Hooks { stop_after: event, ..Default::default() };
        let r = replay_device_hooked(trace, d, p.as_mut(), &opts, &mut hooks);
        crate::cancel::check()?;
        let event = event.unwrap_or(trace.num_events().saturating_sub(1));
        let live = live_allocations(trace, d, event, &r.placements);
        let segments = p.segments();
        let blocks = p.blocks().unwrap_or_else(|| blocks_from_placements(&segments, &live));
        let c = trace.columns();
        out.push(State {
            policy: r.policy,
            device: d,
            event,
            time_ns: (event < trace.num_events() && c.time_ns.is_valid(event)).then(|| c.time_ns.value(event)),
            allocated: r.stats.allocated,
            reserved: r.stats.reserved,
            capacity: limit,
            first_oom: r.first_oom,
            live,
            segments,
            blocks,
            device_events: r.device_events,
            placements: if req.history { r.placements } else { Vec::new() },
        });
    }
    Ok(out)
}

/// The placed allocations of `device` not taken back (`free_completed`) by `event`.
fn live_allocations(trace: &Trace, device: i32, event: usize, placements: &[crate::engine::PlacementRow]) -> Vec<LiveAlloc> {
    let c = trace.columns();
    let stack = trace.column("stack_id").and_then(|s| s.as_any().downcast_ref::<arrow_array::UInt32Array>());
    let n = c.alloc_id.iter().copied().max().map_or(0, |m| m as usize + 1);
    // 0: not freed, 1: free requested, 2: free completed.
    let mut freed = vec![0u8; n];
    for i in 0..trace.num_events().min(event + 1) {
        if c.device[i] != device || !c.alloc_id_valid(i) {
            continue;
        }
        match Action::from_code(c.action[i]) {
            Some(Action::FreeRequested) => freed[c.alloc_id[i] as usize] = freed[c.alloc_id[i] as usize].max(1),
            Some(Action::FreeCompleted) => freed[c.alloc_id[i] as usize] = 2,
            _ => {}
        }
    }
    placements
        .iter()
        .filter(|p| p.event <= event && p.placement.size > 0 && freed.get(p.id as usize).copied().unwrap_or(0) < 2)
        .map(|p| LiveAlloc {
            alloc_id: p.id,
            alloc_event: p.event,
            addr: p.placement.addr,
            size: p.placement.size,
            requested: c.size[p.event],
            stream: c.stream[p.event],
            pool: c.pool[p.event],
            segment: p.placement.segment,
            stack_id: stack.filter(|s| s.is_valid(p.event)).map(|s| s.value(p.event)),
            alloc_time_ns: c.time_ns.is_valid(p.event).then(|| c.time_ns.value(p.event)),
            free_requested: freed.get(p.id as usize).copied() == Some(1),
        })
        .collect()
}

/// For policies that keep no block list: the live allocations of each segment, and the gaps
/// between them as free blocks.
fn blocks_from_placements(segments: &[SegmentInfo], live: &[LiveAlloc]) -> Vec<BlockInfo> {
    let mut out = Vec::new();
    for s in segments {
        let mut inside: Vec<&LiveAlloc> = live.iter().filter(|a| a.addr >= s.addr && a.addr < s.addr + s.size).collect();
        inside.sort_by_key(|a| a.addr);
        let mut cur = s.addr;
        for a in inside {
            if a.addr > cur {
                out.push(BlockInfo { segment: s.addr, addr: cur, size: a.addr - cur, allocated: false });
            }
            out.push(BlockInfo { segment: s.addr, addr: a.addr, size: a.size, allocated: true });
            cur = cur.max(a.addr + a.size);
        }
        if cur < s.addr + s.size {
            out.push(BlockInfo { segment: s.addr, addr: cur, size: s.addr + s.size - cur, allocated: false });
        }
    }
    out
}

use crate::trace::schema::record_batch as batch;

/// One row per (policy, device) state: `policy`, `device`, `event`, `time_ns`,
/// `allocated_bytes`, `reserved_bytes`, `capacity_bytes`, `largest_free_block_bytes`,
/// `free_cached_bytes` (free blocks in all), `first_oom_event`, `first_oom_requested_bytes`,
/// `first_oom_alloc_bytes` (what the policy tried to get from the device).
pub fn states_batch(states: &[State]) -> RecordBatch {
    let mut policy = StringBuilder::new();
    let mut device = Int32Builder::new();
    let mut time = Int64Builder::new();
    type Column<'a> = (&'a str, Box<dyn Fn(&State) -> Option<u64>>);
    let u: Vec<Column> = vec![
        ("event", Box::new(|s| Some(s.event as u64))),
        ("allocated_bytes", Box::new(|s| Some(s.allocated))),
        ("reserved_bytes", Box::new(|s| Some(s.reserved))),
        ("capacity_bytes", Box::new(|s| s.capacity)),
        ("largest_free_block_bytes", Box::new(|s| Some(s.largest_free_block()))),
        ("free_cached_bytes", Box::new(|s| Some(s.blocks.iter().filter(|b| !b.allocated).map(|b| b.size).sum()))),
        ("live_allocations", Box::new(|s| Some(s.live.len() as u64))),
        ("first_oom_event", Box::new(|s| s.first_oom.as_ref().map(|o| o.event as u64))),
        ("first_oom_requested_bytes", Box::new(|s| s.first_oom.as_ref().map(|o| o.requested))),
        ("first_oom_alloc_bytes", Box::new(|s| s.first_oom.as_ref().map(|o| o.alloc_size))),
    ];
    for s in states {
        policy.append_value(&s.policy);
        device.append_value(s.device);
        time.append_option(s.time_ns);
    }
    let mut fields = vec![Field::new("policy", DataType::Utf8, false), Field::new("device", DataType::Int32, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(policy.finish()), Arc::new(device.finish())];
    for (name, f) in u {
        let mut b = UInt64Builder::new();
        for s in states {
            b.append_option(f(s));
        }
        fields.push(Field::new(name, DataType::UInt64, true));
        columns.push(Arc::new(b.finish()));
        if name == "event" {
            fields.push(Field::new("time_ns", DataType::Int64, true));
            columns.push(Arc::new(std::mem::take(&mut time).finish()));
        }
    }
    batch(fields, columns)
}

/// One row per live allocation: `policy`, `device`, `event` (the state's), `alloc_id`,
/// `alloc_event`, `addr`, `size` (block), `requested_bytes`, `stream`, `pool`, `segment`,
/// `stack_id`, `free_requested`, `age_events` (trace rows since its alloc), `age_ns`.
pub fn live_batch(states: &[State]) -> RecordBatch {
    let mut policy = StringBuilder::new();
    let mut device = Int32Builder::new();
    let (mut event, mut id, mut aev, mut addr, mut size, mut req, mut seg, mut age) = (
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
    );
    let (mut stream, mut age_ns) = (Int64Builder::new(), Int64Builder::new());
    let mut pool = UInt32Builder::new();
    let mut stack = UInt32Builder::new();
    let mut pending = BooleanBuilder::new();
    for s in states {
        for a in &s.live {
            policy.append_value(&s.policy);
            device.append_value(s.device);
            event.append_value(s.event as u64);
            id.append_value(a.alloc_id);
            aev.append_value(a.alloc_event as u64);
            addr.append_value(a.addr);
            size.append_value(a.size);
            req.append_value(a.requested);
            stream.append_value(a.stream);
            pool.append_value(a.pool);
            seg.append_value(a.segment);
            stack.append_option(a.stack_id);
            pending.append_value(a.free_requested);
            age.append_value(s.event.saturating_sub(a.alloc_event) as u64);
            age_ns.append_option(s.time_ns.zip(a.alloc_time_ns).map(|(t, t0)| t - t0));
        }
    }
    let fields = vec![
        Field::new("policy", DataType::Utf8, false),
        Field::new("device", DataType::Int32, false),
        Field::new("event", DataType::UInt64, false),
        Field::new("alloc_id", DataType::UInt64, false),
        Field::new("alloc_event", DataType::UInt64, false),
        Field::new("addr", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("requested_bytes", DataType::UInt64, false),
        Field::new("stream", DataType::Int64, false),
        Field::new("pool", DataType::UInt32, false),
        Field::new("segment", DataType::UInt64, false),
        Field::new("stack_id", DataType::UInt32, true),
        Field::new("free_requested", DataType::Boolean, false),
        Field::new("age_events", DataType::UInt64, false),
        Field::new("age_ns", DataType::Int64, true),
    ];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(policy.finish()),
        Arc::new(device.finish()),
        Arc::new(event.finish()),
        Arc::new(id.finish()),
        Arc::new(aev.finish()),
        Arc::new(addr.finish()),
        Arc::new(size.finish()),
        Arc::new(req.finish()),
        Arc::new(stream.finish()),
        Arc::new(pool.finish()),
        Arc::new(seg.finish()),
        Arc::new(stack.finish()),
        Arc::new(pending.finish()),
        Arc::new(age.finish()),
        Arc::new(age_ns.finish()),
    ];
    batch(fields, columns)
}

/// One row per block: `policy`, `device`, `event`, `segment`, `addr`, `size`, `allocated`
/// (false: a free hole), `alloc_id` (the live allocation at that address, if any).
pub fn blocks_batch(states: &[State]) -> RecordBatch {
    let mut policy = StringBuilder::new();
    let mut device = Int32Builder::new();
    let (mut event, mut seg, mut addr, mut size, mut id) =
        (UInt64Builder::new(), UInt64Builder::new(), UInt64Builder::new(), UInt64Builder::new(), UInt64Builder::new());
    let mut alloc = BooleanBuilder::new();
    for s in states {
        let by_addr: std::collections::HashMap<u64, u64> = s.live.iter().map(|a| (a.addr, a.alloc_id)).collect();
        for b in &s.blocks {
            policy.append_value(&s.policy);
            device.append_value(s.device);
            event.append_value(s.event as u64);
            seg.append_value(b.segment);
            addr.append_value(b.addr);
            size.append_value(b.size);
            alloc.append_value(b.allocated);
            id.append_option(if b.allocated { by_addr.get(&b.addr).copied() } else { None });
        }
    }
    let fields = vec![
        Field::new("policy", DataType::Utf8, false),
        Field::new("device", DataType::Int32, false),
        Field::new("event", DataType::UInt64, false),
        Field::new("segment", DataType::UInt64, false),
        Field::new("addr", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("allocated", DataType::Boolean, false),
        Field::new("alloc_id", DataType::UInt64, true),
    ];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(policy.finish()),
        Arc::new(device.finish()),
        Arc::new(event.finish()),
        Arc::new(seg.finish()),
        Arc::new(addr.finish()),
        Arc::new(size.finish()),
        Arc::new(alloc.finish()),
        Arc::new(id.finish()),
    ];
    batch(fields, columns)
}

/// One row per segment: `policy`, `device`, `event`, `addr`, `size`, `stream`, `pool`, `kind`,
/// `allocated_bytes`, `free_bytes`, `blocks`, `holes` (free blocks), `largest_hole_bytes`.
pub fn segments_batch(states: &[State]) -> RecordBatch {
    let mut policy = StringBuilder::new();
    let mut device = Int32Builder::new();
    let mut kind = StringBuilder::new();
    let (mut event, mut addr, mut size, mut alloc, mut free, mut largest) = (
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
    );
    let (mut stream, mut pool, mut blocks, mut holes) =
        (Int64Builder::new(), UInt32Builder::new(), UInt32Builder::new(), UInt32Builder::new());
    for s in states {
        for g in &s.segments {
            let own: Vec<&BlockInfo> = s.blocks.iter().filter(|b| b.segment == g.addr).collect();
            let free_blocks: Vec<u64> = own.iter().filter(|b| !b.allocated).map(|b| b.size).collect();
            policy.append_value(&s.policy);
            device.append_value(s.device);
            event.append_value(s.event as u64);
            addr.append_value(g.addr);
            size.append_value(g.size);
            stream.append_value(g.stream);
            pool.append_value(g.pool);
            kind.append_value(g.kind);
            alloc.append_value(g.allocated_bytes);
            free.append_value(free_blocks.iter().sum());
            blocks.append_value(own.len() as u32);
            holes.append_value(free_blocks.len() as u32);
            largest.append_value(free_blocks.iter().copied().max().unwrap_or(0));
        }
    }
    let fields = vec![
        Field::new("policy", DataType::Utf8, false),
        Field::new("device", DataType::Int32, false),
        Field::new("event", DataType::UInt64, false),
        Field::new("addr", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("stream", DataType::Int64, false),
        Field::new("pool", DataType::UInt32, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("allocated_bytes", DataType::UInt64, false),
        Field::new("free_bytes", DataType::UInt64, false),
        Field::new("blocks", DataType::UInt32, false),
        Field::new("holes", DataType::UInt32, false),
        Field::new("largest_hole_bytes", DataType::UInt64, false),
    ];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(policy.finish()),
        Arc::new(device.finish()),
        Arc::new(event.finish()),
        Arc::new(addr.finish()),
        Arc::new(size.finish()),
        Arc::new(stream.finish()),
        Arc::new(pool.finish()),
        Arc::new(kind.finish()),
        Arc::new(alloc.finish()),
        Arc::new(free.finish()),
        Arc::new(blocks.finish()),
        Arc::new(holes.finish()),
        Arc::new(largest.finish()),
    ];
    batch(fields, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{DeviceInfo, EventRow, FrameTable, TraceBuilder, TraceMetadata};

    const MIB: u64 = 1 << 20;

    /// Device 0, PyTorch's allocator: a, b, c = 1000 B each (each rounded to 1024 B, the
    /// 512-byte kMinBlockSize multiple, carved from one 2 MiB small segment, kSmallBuffer),
    /// then a and c are freed.
    fn trace() -> Trace {
        let mut b = TraceBuilder::with_capacity(8);
        let mut push = |action, id, size: u64, t: i64| {
            let mut r = EventRow::new(action, size);
            r.alloc_id = Some(id);
            r.time_ns = Some(t);
            r.stack_id = Some(id as u32);
            b.push(&r);
        };
        push(Action::Alloc, 0, 1000, 100);
        push(Action::Alloc, 1, 1000, 200);
        push(Action::Alloc, 2, 1000, 300);
        push(Action::FreeRequested, 0, 1000, 400);
        push(Action::FreeCompleted, 0, 1000, 400);
        push(Action::FreeRequested, 2, 1000, 500);
        let mut md = TraceMetadata::new("test");
        md.devices = vec![DeviceInfo { index: 0, total_memory: Some(64 * MIB), ..Default::default() }];
        b.finish(md, FrameTable::default()).unwrap()
    }

    fn state(at: At) -> State {
        let req = StateRequest { policy: "pytorch".into(), capacity: None, at, history: true };
        let mut v = state_at(&trace(), &req).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0)
    }

    #[test]
    fn peak_allocated_is_after_the_third_alloc_with_all_three_live() {
        let s = state(At::PeakAllocated);
        assert_eq!(s.event, 2);
        assert_eq!(s.allocated, 3 * 1024);
        assert_eq!(s.reserved, 2 * MIB);
        assert_eq!(s.live.iter().map(|a| a.alloc_id).collect::<Vec<_>>(), vec![0, 1, 2]);
        // Ages: 2 events and 200 ns since a; 0 since c.
        assert_eq!((s.live[0].alloc_event, s.live[0].alloc_time_ns), (0, Some(100)));
        assert_eq!(s.time_ns, Some(300));
        // One segment: three 1 KiB blocks and the rest of the 2 MiB free, one hole.
        assert_eq!(s.segments.len(), 1);
        let free: Vec<u64> = s.blocks.iter().filter(|b| !b.allocated).map(|b| b.size).collect();
        assert_eq!(free, vec![2 * MIB - 3 * 1024]);
    }

    #[test]
    fn peak_reserved_is_the_first_event_that_reached_it() {
        // The 2 MiB segment is obtained for a; reserved never grows after.
        assert_eq!(state(At::PeakReserved).event, 0);
    }

    #[test]
    fn at_the_end_a_is_a_hole_and_c_is_pending() {
        let s = state(At::End);
        assert_eq!(s.event, 5);
        let live: Vec<(u64, bool)> = s.live.iter().map(|a| (a.alloc_id, a.free_requested)).collect();
        assert_eq!(live, vec![(1, false), (2, true)]);
        // a's block (freed, not merged: b follows it) is a 1 KiB hole below b; c stays held
        // until free_completed, so the tail is the other hole.
        let holes: Vec<u64> = s.blocks.iter().filter(|b| !b.allocated).map(|b| b.size).collect();
        assert_eq!(holes.len(), 2);
        assert!(holes.contains(&1024) && holes.contains(&(2 * MIB - 3 * 1024)), "{holes:?}");
        assert_eq!(s.largest_free_block(), 2 * MIB - 3 * 1024);
        let seg = segments_batch(std::slice::from_ref(&s));
        assert_eq!(seg.num_rows(), 1);
        // History: one segment_alloc before the first alloc, then the requests.
        let h = crate::export::history_batch(&trace(), std::slice::from_ref(&s));
        let actions: Vec<String> =
            h.column(1).as_any().downcast_ref::<arrow_array::StringArray>().unwrap().iter().map(|a| a.unwrap().to_string()).collect();
        assert_eq!(actions, ["segment_alloc", "alloc", "alloc", "alloc", "free_requested", "free_completed", "free_requested"]);
    }

    #[test]
    fn first_oom_state_has_the_largest_hole_smaller_than_the_request() {
        // Under a 2 MiB cap, a 3 MiB request after the three allocs cannot be served; the
        // segment's largest hole is 2 MiB - 3 KiB.
        let mut b = TraceBuilder::with_capacity(4);
        for (id, size) in [(0u64, 1000u64), (1, 3 * MIB)] {
            let mut r = EventRow::new(Action::Alloc, size);
            r.alloc_id = Some(id);
            b.push(&r);
        }
        let md = TraceMetadata::new("test");
        let t = b.finish(md, FrameTable::default()).unwrap();
        let req = StateRequest { policy: "pytorch".into(), capacity: Some(Capacity::Bytes(2 * MIB)), at: At::FirstOom, history: false };
        let s = &state_at(&t, &req).unwrap()[0];
        assert_eq!(s.event, 1);
        assert_eq!(s.first_oom.as_ref().map(|o| o.requested), Some(3 * MIB));
        assert_eq!(s.largest_free_block(), 2 * MIB - 1024);
        // Without an OOM, no state.
        let req = StateRequest { capacity: None, ..req };
        assert!(state_at(&t, &req).unwrap().is_empty());
    }

    #[test]
    fn offline_bounds_have_no_state() {
        let req = StateRequest { policy: "ideal".into(), capacity: None, at: At::End, history: false };
        assert!(matches!(state_at(&trace(), &req), Err(Error::InvalidArgument(_))));
        assert!(matches!(At::parse("nope"), Err(Error::InvalidArgument(_))));
        assert_eq!(At::parse("17").unwrap(), At::Event(17));
    }

    #[test]
    fn progress_counts_every_row_of_every_replay_once() {
        use crate::engine::PROGRESS_EVERY;
        use crate::replay::{replay, ReplayRequest, Source};
        use std::sync::atomic::Ordering;
        use std::sync::Arc;
        // Two devices, 2.5 progress chunks each: the chunk bumps and the remainder at the end.
        let n = PROGRESS_EVERY * 5 / 2;
        let mut b = TraceBuilder::with_capacity(2 * n);
        for d in 0..2 {
            for i in 0..n / 2 {
                let mut r = EventRow::new(Action::Alloc, 512);
                r.alloc_id = Some((d * n + 2 * i) as u64);
                r.device = d as i32;
                b.push(&r);
                r.action = Action::FreeCompleted;
                b.push(&r);
            }
        }
        let t = b.finish(TraceMetadata::new("test"), FrameTable::default()).unwrap();
        let progress = Arc::new(crate::cancel::Progress::default());
        let req = ReplayRequest {
            policies: vec!["pytorch".into(), "bfc".into()],
            threads: 2,
            progress: Some(progress.clone()),
            ..Default::default()
        };
        replay(&t, &req).unwrap();
        // 2 policies x 2 devices, each replay walking every row of the trace.
        let total = Source::from(&t).progress_total(&req);
        assert_eq!(total, 4 * t.num_events() as u64);
        assert_eq!(progress.total.load(Ordering::Relaxed), total);
        assert_eq!(progress.done.load(Ordering::Relaxed), total);
    }
}
