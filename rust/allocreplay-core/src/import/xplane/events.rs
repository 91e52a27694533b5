//! Reading the memory events out of an XSpace, ordering them as the allocator serialized them,
//! and finding what was live before the profiling window (seeds).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use bytes::Bytes;
use prost::Message;
use serde::Serialize;

use super::proto::{
    event_metadata_id, Fields, WireError, XEvent, XPlaneLazy, XPlaneName, XPlaneStats, XSpaceRaw, XStat, XStatMetadata, XStatValue,
};
use crate::error::{Error, Result};

/// One MemoryAllocation / MemoryDeallocation event.
#[derive(Debug, Clone, PartialEq)]
pub struct MemEvent {
    pub alloc: bool,
    /// Index into [`ParsedCapture::allocators`].
    pub allocator: u32,
    /// `line.timestamp_ns * 1000 + offset_ps`, exactly (128 bits: both are 64-bit values);
    /// [`parse`] refuses an event whose time in nanoseconds does not fit 64 bits.
    pub time_ps: i128,
    /// The line (thread) id.
    pub thread: i64,
    /// Position in the file (line by line): the tie-break for equal timestamps.
    pub seq: u32,
    /// `requested_bytes`: what the caller asked for.
    pub requested: u64,
    /// `allocation_bytes`: the chunk's size.
    pub chunk: u64,
    /// `addr`: the chunk's address.
    pub addr: u64,
    /// `bytes_allocated`: the allocator's bytes in use after the event.
    pub in_use: u64,
    pub peak: Option<u64>,
    pub fragmentation: Option<f64>,
    /// `bytes_available + bytes_allocated + bytes_reserved` = the allocator's memory_limit.
    pub limit: Option<u64>,
    /// Interned strings (indices into [`ParsedCapture::strings`]).
    pub op: Option<u32>,
    pub shape: Option<u32>,
    pub region_type: Option<u32>,
    pub data_type: Option<i64>,
    /// The `id` stat: the step id of the annotation.
    pub step: Option<i64>,
}

impl MemEvent {
    /// In-use bytes before the event, from the one after it.
    #[inline]
    pub fn in_use_before(&self) -> Option<u64> {
        if self.alloc {
            self.in_use.checked_sub(self.chunk)
        } else {
            self.in_use.checked_add(self.chunk)
        }
    }
}

/// A GPU as the device plane (`/device:GPU:N`) describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuInfo {
    pub name: Option<String>,
    /// `memory_size`: total device memory.
    pub memory_size: Option<u64>,
    pub compute_capability: Option<(i64, i64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorSummary {
    pub index: u32,
    pub name: String,
    pub events: usize,
    pub allocs: usize,
    pub frees: usize,
    /// The allocator's memory_limit, as its events' stats imply.
    pub memory_limit: Option<u64>,
}

impl AllocatorSummary {
    /// Device allocators (`GPU_0_bfc`, ...) as opposed to host ones (`xla_gpu_host_bfc`,
    /// `gpu_host_bfc`, `bfc_cpu_allocator_for_gpu`).
    pub fn is_device(&self) -> bool {
        let n = self.name.to_ascii_lowercase();
        !n.contains("host") && !n.contains("cpu")
    }

    /// The device ordinal in the name (`GPU_1_bfc` -> 1), else 0.
    pub fn device_ordinal(&self) -> i32 {
        if !self.is_device() {
            return 0;
        }
        let digits: String = self.name.chars().skip_while(|c| !c.is_ascii_digit()).take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().unwrap_or(0)
    }
}

#[derive(Debug, Default)]
pub struct ParsedCapture {
    pub allocators: Vec<String>,
    pub events: Vec<MemEvent>,
    pub strings: Vec<String>,
    /// Device planes by ordinal.
    pub gpus: HashMap<i32, GpuInfo>,
    /// Framework version from the `/host:metadata` plane.
    pub version: Option<String>,
    /// `jax` or `tf`, when the capture says.
    pub framework: Option<&'static str>,
    pub hostname: Option<String>,
    /// All events on the host plane (for the "no memory events" message).
    pub host_events: usize,
}

impl ParsedCapture {
    pub fn summaries(&self) -> Vec<AllocatorSummary> {
        let mut out: Vec<AllocatorSummary> = self
            .allocators
            .iter()
            .enumerate()
            .map(|(i, n)| AllocatorSummary { index: i as u32, name: n.clone(), events: 0, allocs: 0, frees: 0, memory_limit: None })
            .collect();
        for e in &self.events {
            let s = &mut out[e.allocator as usize];
            s.events += 1;
            if e.alloc {
                s.allocs += 1
            } else {
                s.frees += 1
            }
            if s.memory_limit.is_none() {
                s.memory_limit = e.limit;
            }
        }
        out.retain(|s| s.events > 0);
        out
    }

    /// Removes and returns the events of one allocator.
    pub fn take_events(&mut self, allocator: u32) -> Vec<MemEvent> {
        let all = std::mem::take(&mut self.events);
        let (mine, rest): (Vec<_>, Vec<_>) = all.into_iter().partition(|e| e.allocator == allocator);
        self.events = rest;
        mine
    }
}

/// The stats of a memory event that the importer reads (by `stat_metadata` name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    AllocatorName,
    BytesReserved,
    BytesAllocated,
    BytesAvailable,
    Fragmentation,
    Peak,
    Requested,
    AllocationBytes,
    Addr,
    TfOp,
    Id,
    RegionType,
    DataType,
    Shape,
}

fn key_of(name: &str) -> Option<Key> {
    Some(match name {
        "allocator_name" => Key::AllocatorName,
        "bytes_reserved" => Key::BytesReserved,
        "bytes_allocated" => Key::BytesAllocated,
        "bytes_available" => Key::BytesAvailable,
        "fragmentation" => Key::Fragmentation,
        "peak_bytes_in_use" => Key::Peak,
        "requested_bytes" => Key::Requested,
        "allocation_bytes" => Key::AllocationBytes,
        "addr" => Key::Addr,
        "tf_op" => Key::TfOp,
        "id" => Key::Id,
        "region_type" => Key::RegionType,
        "data_type" => Key::DataType,
        "shape" => Key::Shape,
        _ => return None,
    })
}

fn decode_error(path: &Path, what: &str, e: prost::DecodeError) -> Error {
    // prost names our structs (`XSpaceRaw.planes: ...`); say it in the .proto's terms.
    let text = e.to_string().replace("failed to decode Protobuf message: ", "").replace("XSpaceRaw", "XSpace").replace("Lazy", "");
    let truncated = text.contains("underflow") || text.contains("EOF") || text.contains("invalid varint");
    capture_error(path, what, &text, truncated)
}

/// [`decode_error`] for the messages read by hand ([`Fields`]).
fn wire_error(path: &Path, what: &str, e: WireError) -> Error {
    capture_error(path, what, &e.to_string(), e.is_truncated())
}

fn capture_error(path: &Path, what: &str, text: &str, truncated: bool) -> Error {
    Error::format(
        path,
        if truncated {
            format!("truncated or corrupt profiler capture: {what} ends early ({text})")
        } else {
            format!("not a profiler capture: the protobuf does not decode as an XSpace (*.xplane.pb) at {what} ({text})")
        },
    )
}

/// Interns the strings of stat values.
#[derive(Default)]
struct Strings {
    list: Vec<String>,
    index: HashMap<String, u32>,
    by_ref: HashMap<u64, u32>,
}

impl Strings {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
    fn value(&mut self, v: &XStatValue, stat_md: &HashMap<i64, XStatMetadata>) -> Option<u32> {
        match v {
            XStatValue::Str(s) => (!s.is_empty()).then(|| self.intern(s)),
            XStatValue::Ref(r) => {
                if let Some(&i) = self.by_ref.get(r) {
                    return Some(i);
                }
                let name = stat_md.get(&(*r as i64)).map(|m| m.name.as_str())?;
                if name.is_empty() {
                    return None;
                }
                let i = self.intern(name);
                self.by_ref.insert(*r, i);
                Some(i)
            }
            XStatValue::Bytes(b) => std::str::from_utf8(b).ok().filter(|s| !s.is_empty()).map(|s| self.intern(s)),
            _ => None,
        }
    }
}

fn as_i64(v: &XStatValue) -> Option<i64> {
    match v {
        XStatValue::Int64(x) => Some(*x),
        XStatValue::Uint64(x) => Some(*x as i64),
        XStatValue::Double(d) if d.is_finite() => Some(*d as i64),
        XStatValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Byte counts and addresses: int64 values are the bits of a size_t / uintptr_t.
fn as_u64(v: &XStatValue) -> Option<u64> {
    match v {
        XStatValue::Uint64(x) => Some(*x),
        XStatValue::Int64(x) => Some(*x as u64),
        XStatValue::Double(d) if d.is_finite() && *d >= 0.0 => Some(*d as u64),
        XStatValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn as_f64(v: &XStatValue) -> Option<f64> {
    match v {
        XStatValue::Double(d) => Some(*d),
        XStatValue::Int64(x) => Some(*x as f64),
        XStatValue::Uint64(x) => Some(*x as f64),
        XStatValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn plane_stat<'a>(p: &'a XPlaneStats, name: &str) -> Option<&'a XStatValue> {
    p.stats.iter().find(|s| p.stat_metadata.get(&s.metadata_id).is_some_and(|m| m.name == name)).and_then(|s| s.value.as_ref())
}

/// Decodes the XSpace in `data` and collects every memory event of every allocator.
pub fn parse(path: &Path, data: Vec<u8>) -> Result<ParsedCapture> {
    let data = Bytes::from(data);
    if data.is_empty() {
        return Err(Error::format(path, "empty file: not a profiler capture (XSpace protobuf)"));
    }
    let space = XSpaceRaw::decode(data).map_err(|e| decode_error(path, "its top level", e))?;
    let mut out = ParsedCapture { hostname: space.hostnames.first().cloned(), ..Default::default() };
    let mut host: Option<Bytes> = None;
    let mut names = Vec::with_capacity(space.planes.len());
    for (i, raw) in space.planes.iter().enumerate() {
        let head = XPlaneName::decode(raw.clone()).map_err(|e| decode_error(path, &format!("plane {i}"), e))?;
        if head.name == "/host:CPU" {
            host = Some(raw.clone());
        } else if let Some(ordinal) = head.name.strip_prefix("/device:GPU:").and_then(|n| n.parse::<i32>().ok()) {
            let p = XPlaneStats::decode(raw.clone()).map_err(|e| decode_error(path, &format!("plane {}", head.name), e))?;
            let name = match plane_stat(&p, "gpu_device_name") {
                Some(XStatValue::Str(s)) => Some(s.clone()),
                _ => None,
            };
            let cc = plane_stat(&p, "compute_cap_major").and_then(as_i64).zip(plane_stat(&p, "compute_cap_minor").and_then(as_i64));
            out.gpus.insert(ordinal, GpuInfo { name, memory_size: plane_stat(&p, "memory_size").and_then(as_u64), compute_capability: cc });
        } else if head.name == "/host:metadata" {
            let p = XPlaneStats::decode(raw.clone()).map_err(|e| decode_error(path, "plane /host:metadata", e))?;
            for (key, framework) in [("jax_version", "jax"), ("tf_version", "tf"), ("tensorflow_version", "tf")] {
                if let Some(XStatValue::Str(s)) = plane_stat(&p, key) {
                    out.version = Some(s.clone());
                    out.framework = Some(framework);
                    break;
                }
            }
        }
        names.push(head.name);
    }
    if names.is_empty() || !names.iter().any(|n| n.starts_with('/')) {
        return Err(Error::format(
            path,
            format!(
                "not a profiler capture: the protobuf decodes, but none of its {} top-level messages is a profiler plane (named /host:... or /device:...); expected an XSpace (*.xplane.pb)",
                names.len()
            ),
        ));
    }
    let Some(host) = host else {
        return Err(Error::format(
            path,
            format!("the capture has no memory events: it has no /host:CPU plane (planes: {})", names.join(", ")),
        ));
    };
    let plane = XPlaneLazy::decode(host).map_err(|e| decode_error(path, "plane /host:CPU", e))?;

    // Which events are memory events: two event metadata ids among thousands, sorted for a
    // binary search (a hash per event was a tenth of the import).
    let mut kinds: Vec<(i64, bool)> = plane
        .event_metadata
        .iter()
        .filter_map(|(id, m)| match m.name.as_str() {
            "MemoryAllocation" => Some((*id, true)),
            "MemoryDeallocation" => Some((*id, false)),
            _ => None,
        })
        .collect();
    kinds.sort_unstable();
    // And which stats we read.
    let keys: HashMap<i64, Key> = plane.stat_metadata.iter().filter_map(|(id, m)| key_of(&m.name).map(|k| (*id, k))).collect();
    let mut strings = Strings::default();
    let mut allocator_of: HashMap<u32, u32> = HashMap::new();
    let mut seq: u32 = 0;
    let mut memory: Vec<(&[u8], bool)> = Vec::new();
    for raw in &plane.lines {
        crate::cancel::check()?;
        memory.clear();
        let line = read_line(raw, &kinds, &mut memory).map_err(|(what, e)| wire_error(path, &what, e))?;
        out.host_events += line.events;
        let base_ps = i128::from(line.timestamp_ns) * 1000;
        for (k, &(raw, alloc)) in memory.iter().enumerate() {
            let ev = XEvent::decode(raw).map_err(|e| decode_error(path, &format!("an event on line {}", line.name), e))?;
            let e = read_event(
                path,
                &ev.stats,
                alloc,
                &keys,
                &plane.stat_metadata,
                &mut strings,
                &mut allocator_of,
                &mut out.allocators,
                line.name,
            )?;
            let Some(mut e) = e else { continue };
            // A time that 64 bits of nanoseconds cannot hold is an error naming the event, never
            // a saturated value (which let a later, smaller time pass as ordered): the rule of
            // `time_us` in PyTorch snapshots (docs/bad-inputs.md, issue 28 class 1).
            e.time_ps = base_ps + i128::from(ev.offset_ps);
            if i64::try_from(e.time_ps.div_euclid(1000)).is_err() {
                return Err(Error::format(
                    path,
                    format!(
                        "plane /host:CPU, line {:?} (id {}), memory event {k}: its time (the line's timestamp_ns {} + the event's offset_ps {}) is beyond what 64 bits of nanoseconds hold (|t| < 2^63 ns)",
                        line.name, line.id, line.timestamp_ns, ev.offset_ps
                    ),
                ));
            }
            e.thread = line.id;
            e.seq = seq;
            seq += 1;
            out.events.push(e);
        }
    }
    out.strings = strings.list;
    Ok(out)
}

/// The head of an `XLine` and how many events it has.
struct LineHead<'a> {
    id: i64,
    name: &'a str,
    timestamp_ns: i64,
    events: usize,
}

/// Reads one line of the host plane by hand: its head (`int64 id = 1; string name = 2;
/// int64 timestamp_ns = 3;`) and, of its `repeated XEvent events = 4`, only each event's
/// `metadata_id`: the memory events (`kinds`) go into `memory` with whether each is an
/// allocation, in file order, still serialized. The display fields (9-11) are not read. An
/// error comes with where it is, for the message.
fn read_line<'a>(
    raw: &'a [u8],
    kinds: &[(i64, bool)],
    memory: &mut Vec<(&'a [u8], bool)>,
) -> std::result::Result<LineHead<'a>, (String, WireError)> {
    let mut head = LineHead { id: 0, name: "", timestamp_ns: 0, events: 0 };
    let in_line = |e| ("a line of plane /host:CPU".to_string(), e);
    for field in Fields::new(raw) {
        let (number, value) = field.map_err(in_line)?;
        match number {
            1 => head.id = value.int64(1).map_err(in_line)?,
            2 => head.name = value.string(2).map_err(in_line)?,
            3 => head.timestamp_ns = value.int64(3).map_err(in_line)?,
            4 => {
                let event = value.message(4).map_err(in_line)?;
                head.events += 1;
                if kinds.is_empty() {
                    continue;
                }
                let id = event_metadata_id(event).map_err(|e| (format!("an event on line {}", head.name), e))?;
                if let Ok(k) = kinds.binary_search_by_key(&id, |&(id, _)| id) {
                    memory.push((event, kinds[k].1));
                }
            }
            _ => {}
        }
    }
    Ok(head)
}

#[allow(clippy::too_many_arguments)]
fn read_event(
    path: &Path,
    stats: &[XStat],
    alloc: bool,
    keys: &HashMap<i64, Key>,
    stat_md: &HashMap<i64, XStatMetadata>,
    strings: &mut Strings,
    allocator_of: &mut HashMap<u32, u32>,
    allocators: &mut Vec<String>,
    line: &str,
) -> Result<Option<MemEvent>> {
    let mut e = MemEvent {
        alloc,
        allocator: 0,
        time_ps: 0,
        thread: 0,
        seq: 0,
        requested: 0,
        chunk: 0,
        addr: 0,
        in_use: 0,
        peak: None,
        fragmentation: None,
        limit: None,
        op: None,
        shape: None,
        region_type: None,
        data_type: None,
        step: None,
    };
    let (mut name, mut chunk, mut addr, mut in_use) = (None, None, None, None);
    let (mut reserved, mut available) = (None, None);
    for s in stats {
        let (Some(key), Some(v)) = (keys.get(&s.metadata_id), s.value.as_ref()) else { continue };
        match key {
            Key::AllocatorName => name = strings.value(v, stat_md),
            Key::BytesReserved => reserved = as_u64(v),
            Key::BytesAllocated => in_use = as_u64(v),
            Key::BytesAvailable => available = as_i64(v),
            Key::Fragmentation => e.fragmentation = as_f64(v),
            Key::Peak => e.peak = as_u64(v),
            Key::Requested => e.requested = as_u64(v).unwrap_or(0),
            Key::AllocationBytes => chunk = as_u64(v),
            Key::Addr => addr = as_u64(v),
            Key::TfOp => e.op = strings.value(v, stat_md),
            Key::Id => e.step = as_i64(v),
            Key::RegionType => e.region_type = strings.value(v, stat_md),
            Key::DataType => e.data_type = as_i64(v),
            Key::Shape => e.shape = strings.value(v, stat_md),
        }
    }
    let what = if alloc { "MemoryAllocation" } else { "MemoryDeallocation" };
    let Some(name) = name else {
        // Not a BFC event (some other allocator emitting the same name without stats).
        return Ok(None);
    };
    let missing = |stat: &str| {
        Error::format(path, format!("a {what} event on thread '{line}' has no '{stat}' stat; the capture is from a profiler too old to replay (TF >= 2.3 / any JAX records it)"))
    };
    e.chunk = chunk.ok_or_else(|| missing("allocation_bytes"))?;
    e.addr = addr.ok_or_else(|| missing("addr"))?;
    e.in_use = in_use.ok_or_else(|| missing("bytes_allocated"))?;
    if let Some(avail) = available {
        let limit = avail as i128 + e.in_use as i128 + reserved.unwrap_or(0) as i128;
        e.limit = u64::try_from(limit).ok();
    }
    let next = allocators.len() as u32;
    let idx = *allocator_of.entry(name).or_insert_with(|| {
        allocators.push(strings.list[name as usize].clone());
        next
    });
    e.allocator = idx;
    Ok(Some(e))
}

/// How the events were ordered (see docs/xplane-import.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OrderingReport {
    pub events: usize,
    pub threads: usize,
    /// Events whose in-use-before does not continue the previous event's in-use-after, in
    /// timestamp order.
    pub breaks_by_time: usize,
    /// The same after ordering by the in-use chain.
    pub breaks: usize,
    /// Events that the chain placed elsewhere than their timestamp put them.
    pub moved: usize,
}

/// How far ahead (in events, in timestamp order) the chain looks for the event that continues
/// it. Threads' clocks differ by microseconds, not by thousands of allocator calls.
const CHAIN_WINDOW: usize = 256;

/// Orders one allocator's events as the allocator serialized them. Every event records the
/// allocator's bytes in use after it (`bytes_allocated`), and the event's chunk says how that
/// changed, so consecutive events form a chain `in_use_after(k) == in_use_before(k + 1)`.
/// Events are sorted by timestamp (file order on ties); then, whenever the next event by time
/// does not continue the chain, the first event within the next `CHAIN_WINDOW` that does — and
/// that is consistent with the addresses in use (no allocation of a live address, no free of a
/// freed one) — is taken instead. Where nothing continues it (the start, or an event the
/// profiler dropped), the chain (re)starts at the head's timestamp with the event that no
/// other event of that timestamp can precede ([`chain_start`]).
pub fn order_by_chain(events: &mut Vec<MemEvent>) -> OrderingReport {
    events.sort_by_key(|e| (e.time_ps, e.seq));
    let n = events.len();
    let mut report = OrderingReport { events: n, ..Default::default() };
    report.threads = events.iter().map(|e| e.thread).collect::<HashSet<_>>().len();
    report.breaks_by_time = (1..n).filter(|&k| events[k].in_use_before() != Some(events[k - 1].in_use)).count();
    if report.breaks_by_time == 0 {
        return report;
    }
    let mut taken = vec![false; n];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut live: HashSet<u64> = HashSet::with_capacity(1024);
    let mut freed: HashSet<u64> = HashSet::with_capacity(1024);
    let mut state: Option<u64> = None;
    let mut head = 0usize;
    let consistent = |e: &MemEvent, live: &HashSet<u64>, freed: &HashSet<u64>| {
        if e.alloc {
            !live.contains(&e.addr)
        } else {
            live.contains(&e.addr) || !freed.contains(&e.addr)
        }
    };
    while order.len() < n {
        while taken[head] {
            head += 1;
        }
        let mut pick = None;
        if let Some(s) = state {
            let mut j = head;
            let mut seen = 0;
            while j < n && seen < CHAIN_WINDOW {
                if !taken[j] {
                    seen += 1;
                    let e = &events[j];
                    if e.in_use_before() == Some(s) && consistent(e, &live, &freed) {
                        pick = Some(j);
                        break;
                    }
                }
                j += 1;
            }
        }
        let j = match pick {
            Some(j) => j,
            None => {
                if state.is_some() {
                    report.breaks += 1;
                }
                chain_start(events, &taken, head)
            }
        };
        if j != head {
            report.moved += 1;
        }
        taken[j] = true;
        let e = &events[j];
        if e.alloc {
            live.insert(e.addr);
            freed.remove(&e.addr);
        } else {
            live.remove(&e.addr);
            freed.insert(e.addr);
        }
        state = Some(e.in_use);
        order.push(j);
    }
    // Apply the permutation.
    let mut slots: Vec<Option<MemEvent>> = std::mem::take(events).into_iter().map(Some).collect();
    *events = order.into_iter().map(|j| slots[j].take().expect("each event once")).collect();
    report
}

/// Where a chain (re)starts: among the untaken events sharing the head's timestamp (threads
/// whose events the clock could not tell apart), the first that no other of them can precede
/// (no other's in-use-after is its in-use-before); the head if none or all can.
fn chain_start(events: &[MemEvent], taken: &[bool], head: usize) -> usize {
    let t = events[head].time_ps;
    let group: Vec<usize> =
        (head..events.len()).take_while(|&j| events[j].time_ps == t).filter(|&j| !taken[j]).take(CHAIN_WINDOW).collect();
    if group.len() < 2 {
        return head;
    }
    group
        .iter()
        .copied()
        .find(|&j| {
            let before = events[j].in_use_before();
            !group.iter().any(|&k| k != j && Some(events[k].in_use) == before)
        })
        .unwrap_or(head)
}

/// What was live when the window opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seeds {
    /// Buffers the window frees without having allocated them: (address, requested bytes,
    /// chunk bytes), by address.
    pub live: Vec<(u64, u64, u64)>,
    /// In-use bytes at the start that no free in the window accounts for (buffers live
    /// throughout the window) and that no gap between the window's chunks can hold.
    pub unknown_bytes: u64,
    /// Of the buffers live throughout the window, the bytes placed in gaps between the
    /// window's chunks (included in `live`).
    pub gap_bytes: u64,
    /// The allocator's bytes in use before the first event.
    pub starting_in_use: u64,
    /// (start, size) of the address ranges the seeds' regions at least covered.
    pub regions: Vec<(u64, u64)>,
}

pub fn seeds(events: &[MemEvent]) -> Seeds {
    let mut live: HashSet<u64> = HashSet::with_capacity(1024);
    let mut allocated: HashSet<u64> = HashSet::with_capacity(1024);
    let mut seeded: Vec<(u64, u64, u64)> = Vec::new();
    let mut seen_free: HashSet<u64> = HashSet::new();
    for e in events {
        if e.alloc {
            live.insert(e.addr);
            allocated.insert(e.addr);
        } else if !live.remove(&e.addr) && !allocated.contains(&e.addr) && seen_free.insert(e.addr) {
            // A buffer from before the window. (A free of an address the window allocated and
            // freed already, or freed twice, follows a dropped event: not another seed.)
            seeded.push((e.addr, e.requested, e.chunk));
        }
    }
    let starting = events.first().and_then(|e| e.in_use_before()).unwrap_or(0);
    let seeded_bytes: u64 = seeded.iter().map(|&(_, _, c)| c).sum();
    let mut unknown = starting.saturating_sub(seeded_bytes);
    let mut gap_bytes = 0;
    if unknown > 0 {
        // Buffers live throughout the window occupy memory no event of the window touches:
        // the gaps between the chunks the window allocates and frees. Fill them lowest first
        // (long-lived buffers are the oldest, low in their regions), whole gaps only.
        let mut spans: Vec<(u64, u64)> =
            events.iter().map(|e| (e.addr, e.addr + e.chunk)).chain(seeded.iter().map(|&(a, _, c)| (a, a + c))).collect();
        spans.sort_unstable();
        let mut end = None::<u64>;
        for (a, b) in spans {
            if let Some(e) = end {
                if a > e && a - e <= unknown {
                    seeded.push((e, a - e, a - e));
                    unknown -= a - e;
                    gap_bytes += a - e;
                    if unknown == 0 {
                        break;
                    }
                }
            }
            end = Some(end.map_or(b, |e| e.max(b)));
        }
    }
    seeded.sort_unstable();
    // The regions that held the seeds: the runs of contiguous chunks (the window's and the
    // seeds') that contain a seed. Where a region ended beyond its last chunk is not recorded.
    let mut regions: Vec<(u64, u64)> = Vec::new();
    if !seeded.is_empty() {
        let mut spans: Vec<(u64, u64, bool)> =
            events.iter().map(|e| (e.addr, e.addr + e.chunk, false)).chain(seeded.iter().map(|&(a, _, c)| (a, a + c, true))).collect();
        spans.sort_unstable();
        let mut cur: Option<(u64, u64, bool)> = None;
        for (a, b, seed) in spans {
            cur = match cur {
                Some((s, e, has)) if a <= e => Some((s, e.max(b), has || seed)),
                Some((s, e, has)) => {
                    if has {
                        regions.push((s, e - s));
                    }
                    Some((a, b, seed))
                }
                None => Some((a, b, seed)),
            };
        }
        if let Some((s, e, true)) = cur {
            regions.push((s, e - s));
        }
    }
    Seeds { live: seeded, unknown_bytes: unknown, gap_bytes, starting_in_use: starting, regions }
}

/// TensorFlow's `DataType` enum (tensorflow/core/framework/types.proto), the `data_type` stat
/// of TF captures; other values are kept as numbers.
pub fn data_type_name(v: i64) -> String {
    let name = match v {
        1 => "float",
        2 => "double",
        3 => "int32",
        4 => "uint8",
        5 => "int16",
        6 => "int8",
        7 => "string",
        8 => "complex64",
        9 => "int64",
        10 => "bool",
        11 => "qint8",
        12 => "quint8",
        13 => "qint32",
        14 => "bfloat16",
        15 => "qint16",
        16 => "quint16",
        17 => "uint16",
        18 => "complex128",
        19 => "half",
        20 => "resource",
        21 => "variant",
        22 => "uint32",
        23 => "uint64",
        24 => "float8_e5m2",
        25 => "float8_e4m3fn",
        _ => return v.to_string(),
    };
    name.to_string()
}
