//! PyTorch memory snapshots (`torch.cuda.memory._snapshot()`, `_dump_snapshot`): the
//! `device_traces` history becomes events; the final `segments` seed the state of a history
//! whose start the ring buffer dropped (walking back from the end, as
//! `torch/cuda/_memory_viz.py`'s `_segments_and_blocks_at` does); `allocator_settings` go to
//! the metadata verbatim.

use std::collections::{BTreeMap, HashMap};

use rustc_hash::FxHashMap;
use std::path::Path;

use super::growing::Growing;
use super::pickle::{self, Pickle, PickleError, Value};
use super::{read_meta_json, ImportOptions};
use crate::error::{Error, Result};
use crate::prefault::{drop_in_background, Prefaulter};
use crate::trace::{Action, DeviceInfo, EventRow, FrameInterner, PoolInfo, Trace, TraceBuilder, TraceMetadata};

/// Sizes are below 2^56 (64 PiB): larger values are corrupt, and keeping them there leaves
/// the policies' rounding arithmetic far from overflow.
pub const MAX_SIZE: u64 = 1 << 56;

/// A size: an integer from 0 to 2^56 - 1 (else the reason, for the message).
fn size_value(p: &Pickle, v: Value) -> std::result::Result<u64, String> {
    match v {
        Value::Int(i) if (0..MAX_SIZE as i64).contains(&i) => Ok(i as u64),
        _ => Err(format!("is {}, not a size (an integer from 0 to 2^56 - 1)", shown(p, v))),
    }
}

/// Metadata key (in `extra`) of the `oom` entries whose request was beyond [`MAX_SIZE`]:
/// `{"device", "entry", "size"}` each, `size` the request as the snapshot records it.
pub const CLAMPED_OOMS: &str = "oom_requests_beyond_max_size";

/// The size an `oom` entry's request is held at when it is [`MAX_SIZE`] or more (a shape bug
/// asking for petabytes, as upstream's `test_out_of_memory` does with 8 × 10^18 bytes): the
/// largest size a trace holds, which every policy fails (`policy::MAX_REQUEST` is 2^55), so
/// replaying it is an OOM as it was in the run.
pub const OOM_BEYOND_MAX_SIZE: u64 = MAX_SIZE - 1;

/// An `oom` entry's requested size: any integer of 64 bits (`_dump_snapshot` writes the
/// `size_t` as an `int64_t`, so 2^63 and more come back negative) or more. `Ok((held, Some(recorded)))`
/// when it is held at [`OOM_BEYOND_MAX_SIZE`].
fn oom_size(p: &Pickle, v: Value) -> std::result::Result<(u64, Option<serde_json::Value>), String> {
    match v {
        Value::Int(i) if (0..MAX_SIZE as i64).contains(&i) => Ok((i as u64, None)),
        Value::Int(i) => Ok((OOM_BEYOND_MAX_SIZE, Some((i as u64).into()))),
        Value::BigInt(f) if f >= 0.0 => {
            Ok((OOM_BEYOND_MAX_SIZE, Some(serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into))))
        }
        _ => Err(format!("is {}, not a size (an integer from 0 to 2^64 - 1)", shown(p, v))),
    }
}

/// An address: a non-negative integer.
fn address_value(p: &Pickle, v: Value) -> std::result::Result<u64, String> {
    match v {
        Value::Int(i) if i >= 0 => Ok(i as u64),
        _ => Err(format!("is {}, not an address (a non-negative integer)", shown(p, v))),
    }
}

/// A `time_us` in nanoseconds; a time whose nanoseconds do not fit 64 bits (292,000 years)
/// is an error rather than a value that saturates past the backwards-time check.
fn time_ns(us: i64) -> std::result::Result<i64, String> {
    us.checked_mul(1000).ok_or_else(|| format!("is {us}: microseconds beyond what 64 bits of nanoseconds hold (|t| < 2^63 ns)"))
}

fn int_value(p: &Pickle, v: Value) -> std::result::Result<i64, String> {
    match v {
        Value::Int(i) => Ok(i),
        _ => Err(format!("is {}, not an integer of 64 bits", shown(p, v))),
    }
}

/// A value as a message shows it: numbers by value, others by type.
fn shown(p: &Pickle, v: Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::BigInt(f) => format!("{f:.0}"),
        Value::Float(f) => format!("the float {f}"),
        Value::Str(_) => format!("the string {:?}", p.str(v).unwrap_or("").chars().take(40).collect::<String>()),
        other => format!("a {}", Pickle::type_name(other)),
    }
}

/// A segment of the final state (`snapshot['segments']`).
#[derive(Debug, Clone)]
struct FinalSegment {
    device: i32,
    address: u64,
    total_size: u64,
    stream: i64,
    pool: u32,
    is_expandable: bool,
    /// Live blocks: (address, requested size, pending free).
    live_blocks: Vec<(u64, u64, bool)>,
}

/// Inputs from this size on are parsed with a prefaulting thread (`crate::prefault`) and free
/// their arenas on another thread; below it, starting threads would cost more than it saves.
const LARGE_INPUT: usize = 16 << 20;

/// Prefaulter slots of the decoded entries (after the parser's) and of the columns, in the
/// order they are filled.
const ENTRIES_SLOT: usize = pickle::ARENA_SLOTS;
const BUILDER_SLOTS: usize = ENTRIES_SLOT + 1;

pub fn import_snapshot(path: &Path, data: &[u8], opts: &ImportOptions) -> Result<Trace> {
    let prefault = if data.len() >= LARGE_INPUT { Prefaulter::start() } else { None };
    let p = parse_snapshot(path, pickle::parse_prefaulted(data, &ENTRY_KEYS, prefault.as_ref()), prefault.as_ref())?;
    import_parsed(path, data, p, prefault, opts)
}

/// [`import_snapshot`] of a file that `input`'s reader is still reading: parsed as it is read
/// (`pickle::parse_growing`), then imported from the whole file's bytes. A failed read (the
/// file shrank, an I/O error, a cancelled call) is reported rather than the parse's error on
/// the bytes it cut short.
pub(crate) fn import_growing(path: &Path, input: &Growing, opts: &ImportOptions) -> Result<Trace> {
    let prefault = if input.total() >= LARGE_INPUT { Prefaulter::start() } else { None };
    let parsed = pickle::parse_growing(input, &ENTRY_KEYS, prefault.as_ref());
    input.finish()?;
    let data = input.prefix(input.total());
    let p = parse_snapshot(path, parsed.map(|p| p.with_whole_input(data)), prefault.as_ref())?;
    import_parsed(path, data, p, prefault, opts)
}

/// The trace of a parsed snapshot (`data`: the pickle's bytes).
fn import_parsed(path: &Path, data: &[u8], p: Pickle<'_>, prefault: Option<Prefaulter>, opts: &ImportOptions) -> Result<Trace> {
    let bad = |m: String| Error::format(path, m);
    let traces = device_traces(&p, path)?;

    let mut metadata = TraceMetadata::new("pytorch");
    metadata.source_path = Some(path.display().to_string());
    if let Some(s) = p.get(p.root, "allocator_settings") {
        metadata.allocator_settings = p.to_json(s).map_err(|e| bad(format!("'allocator_settings': {e}")))?;
    }
    let (finals, pools) = final_segments(&p, path, data.len())?;
    metadata.pools = pools;

    let fit = FreeBlockFit::from_settings(&metadata.allocator_settings);
    let Histories { mut out, frames, mut devices_seen, seeded, clamped_ooms, chunks, unsure_releases } =
        import_histories(&p, traces, &finals, fit, path, data.len(), opts, prefault.as_ref())?;
    drop(prefault);
    // Devices in the segments with no history at all.
    for s in &finals {
        if !devices_seen.contains(&s.device) {
            devices_seen.push(s.device);
        }
    }
    devices_seen.sort_unstable();
    metadata.seeded = seeded;

    // Capture metadata (.json beside our captures): device memory, cap, version, final stats.
    let meta = read_meta_json(opts, path)?;
    metadata.devices = devices_seen.iter().map(|&d| DeviceInfo { index: d, ..Default::default() }).collect();
    if let Some((meta_path, m)) = meta {
        capture_json(&meta_path, &m, &devices_seen, &mut metadata)?;
    }
    if metadata.allocator_settings.is_null() {
        assume_allocator_settings(&mut metadata);
    }
    note_unsure_releases(&mut metadata, unsure_releases);
    if !clamped_ooms.is_empty() {
        metadata.extra.insert(CLAMPED_OOMS.into(), serde_json::Value::Array(clamped_ooms));
    }
    if !chunks.is_empty() {
        add_chunk_column(&mut out, chunks);
    }
    let trace = out.finish(metadata, frames.interner.finish());
    if data.len() >= LARGE_INPUT {
        p.drop_in_background();
    }
    trace
}

/// The pickle of a snapshot, parsed with its history entries stored as records
/// ([`ENTRY_KEYS`]), its error as the load's; the parser's prefaulter slots are released once
/// it is done.
fn parse_snapshot<'a>(
    path: &Path,
    parsed: std::result::Result<Pickle<'a>, PickleError>,
    prefault: Option<&Prefaulter>,
) -> Result<Pickle<'a>> {
    let p = parsed.map_err(|e| match e {
        _ if crate::cancel::requested() => Error::Cancelled,
        PickleError::Corrupt(m) => Error::format(path, m),
        PickleError::Unsafe(m) => Error::unsafe_pickle(path, m),
    })?;
    if let Some(pf) = prefault {
        for slot in 0..pickle::ARENA_SLOTS {
            pf.clear(slot);
        }
    }
    Ok(p)
}

/// `snapshot['device_traces']`: one history (a list of entries) per device.
fn device_traces<'p>(p: &'p Pickle, path: &Path) -> Result<&'p [Value]> {
    let bad = |m: String| Error::format(path, m);
    if p.dict(p.root).is_none() {
        return Err(bad(format!(
            "not a PyTorch memory snapshot: the pickle holds a {}, not the dict written by torch.cuda.memory._dump_snapshot",
            Pickle::type_name(p.root)
        )));
    }
    let Some(traces) = p.get(p.root, "device_traces") else {
        return Err(bad(format!(
            "not a PyTorch memory snapshot: no 'device_traces' key (keys: {}); record with torch.cuda.memory._record_memory_history() before _dump_snapshot",
            p.keys(p.root).join(", ")
        )));
    };
    p.list(traces).ok_or_else(|| bad("'device_traces' is not a list".into()))
}

/// The final state (`snapshot['segments']`), and the pools its segments name.
fn final_segments(p: &Pickle, path: &Path, input_len: usize) -> Result<(Vec<FinalSegment>, Vec<PoolInfo>)> {
    let bad = |m: String| Error::format(path, m);
    // Pools: index 0 is the default pool (0, 0); private pools get indices in order seen.
    let mut pool_index: HashMap<(i64, i64), u32> = HashMap::from([((0, 0), 0)]);
    let segments = match p.get(p.root, "segments") {
        Some(v) => p.list(v).ok_or_else(|| bad("'segments' is not a list".into()))?.to_vec(),
        None => Vec::new(),
    };
    let mut finals: Vec<FinalSegment> = Vec::with_capacity(segments.len());
    // Blocks are read once per segment that lists them: a blocks list shared by many segments
    // (memo references) would multiply; the total is bounded by the input's size.
    let mut blocks_seen = 0usize;
    for (i, &s) in segments.iter().enumerate() {
        let pool_id = match p.get(s, "segment_pool_id").and_then(|v| p.list(v)) {
            Some([a, b]) => (p.int(*a).unwrap_or(0), p.int(*b).unwrap_or(0)),
            _ => (0, 0),
        };
        let next = pool_index.len() as u32;
        let pool = *pool_index.entry(pool_id).or_insert(next);
        finals.push(final_segment(p, path, s, i, pool, &mut blocks_seen, input_len)?);
    }
    let mut pools: Vec<((i64, i64), u32)> = pool_index.into_iter().collect();
    pools.sort_by_key(|&(_, i)| i);
    let pools = pools
        .iter()
        .map(|&((a, b), i)| PoolInfo { index: i, id: vec![a, b], kind: if i == 0 { "default".into() } else { "private".into() } })
        .collect();
    Ok((finals, pools))
}

/// Segment `i` of the final state (`s`), in pool `pool`; `blocks_seen` counts the blocks the
/// segments listed so far.
fn final_segment(
    p: &Pickle,
    path: &Path,
    s: Value,
    i: usize,
    pool: u32,
    blocks_seen: &mut usize,
    input_len: usize,
) -> Result<FinalSegment> {
    let bad = |m: String| Error::format(path, m);
    let req = |k: &str| -> Result<Value> { p.get(s, k).ok_or_else(|| bad(format!("segment {i} has no '{k}'"))) };
    let int = |k: &str| -> Result<i64> { p.int(req(k)?).ok_or_else(|| bad(format!("segment {i}: '{k}' is not an integer"))) };
    let live_blocks = live_blocks(p, path, s, i, blocks_seen, input_len)?;
    let device = int("device")?;
    let device = i32::try_from(device)
        .ok()
        .filter(|&d| d >= 0)
        .ok_or_else(|| bad(format!("segment {i}: 'device' {device} is not a device index (0 to 2^31 - 1)")))?;
    let address = address_value(p, req("address")?).map_err(|m| bad(format!("segment {i}: 'address' {m}")))?;
    let total_size = size_value(p, req("total_size")?).map_err(|m| bad(format!("segment {i}: 'total_size' {m}")))?;
    Ok(FinalSegment {
        device,
        address,
        total_size,
        stream: int("stream")?,
        pool,
        is_expandable: p.get(s, "is_expandable").map(|v| v == Value::Bool(true)).unwrap_or(false),
        live_blocks,
    })
}

/// The blocks of segment `i` (`s`) live at the end (`active_allocated`,
/// `active_pending_free`): (address, requested size, pending free).
fn live_blocks(p: &Pickle, path: &Path, s: Value, i: usize, blocks_seen: &mut usize, input_len: usize) -> Result<Vec<(u64, u64, bool)>> {
    let bad = |m: String| Error::format(path, m);
    let mut live_blocks = Vec::new();
    let Some(blocks) = p.get(s, "blocks").and_then(|v| p.list(v)) else { return Ok(live_blocks) };
    *blocks_seen += blocks.len();
    if *blocks_seen > input_len {
        return Err(bad(format!(
            "the segments list more blocks than the file has bytes ({input_len}): shared references expand the snapshot; refused"
        )));
    }
    for (j, &b) in blocks.iter().enumerate() {
        let state = p.get(b, "state").and_then(|v| p.str(v)).unwrap_or("");
        if state == "active_allocated" || state == "active_pending_free" {
            let at = || format!("segment {i} block {j}");
            let addr = p.get(b, "address").ok_or_else(|| bad(format!("{}: block without address", at())))?;
            let addr = address_value(p, addr).map_err(|m| bad(format!("{}: 'address' {m}", at())))?;
            let req = match p.get(b, "requested_size").or_else(|| p.get(b, "size")) {
                Some(v) => size_value(p, v).map_err(|m| bad(format!("{}: 'requested_size' {m}", at())))?,
                None => return Err(bad(format!("{}: block has neither 'requested_size' nor 'size'", at()))),
            };
            live_blocks.push((addr, req, state == "active_pending_free"));
        }
    }
    Ok(live_blocks)
}

/// Every device's events, as [`import_histories`] builds them.
struct Histories {
    out: TraceBuilder,
    frames: Stacks,
    /// Devices with a history or final segments, in order seen.
    devices_seen: Vec<i32>,
    /// A device needed seed events.
    seeded: bool,
    /// `oom` entries whose request is beyond what a trace holds (MAX_SIZE): see `oom_size`.
    clamped_ooms: Vec<serde_json::Value>,
    /// (row, block size) of seed allocations whose block size the history reveals.
    chunks: Vec<(usize, u64)>,
    /// Runs of segment releases the history cannot attribute ([`Release::Unsure`]).
    unsure_releases: usize,
}

/// Decodes each device's history and emits its seed and events (`import_device`).
#[allow(clippy::too_many_arguments)]
fn import_histories(
    p: &Pickle,
    traces: &[Value],
    finals: &[FinalSegment],
    fit: FreeBlockFit,
    path: &Path,
    input_len: usize,
    opts: &ImportOptions,
    prefault: Option<&Prefaulter>,
) -> Result<Histories> {
    let total: usize = traces.iter().map(|&t| p.list(t).map_or(0, |l| l.len())).sum();
    // Every entry of a real snapshot is a dict of its own (tens of bytes); lists shared through
    // memo references could name the same entries millions of times from a small file.
    if total > input_len {
        return Err(Error::format(
            path,
            format!("device_traces hold {total} entries, more than the file's {input_len} bytes: shared references expand the snapshot; refused"),
        ));
    }
    // Seeds (segments, blocks live before the history) and empty_cache events come on top of
    // the entries: room for the final state's, and some.
    let final_blocks: usize = finals.iter().map(|s| s.live_blocks.len() + 1).sum();
    let out = TraceBuilder::with_capacity(total + 2 * final_blocks + 64);
    if let Some(pf) = prefault {
        out.prefault(pf, BUILDER_SLOTS);
    }
    let mut h = Histories {
        out,
        frames: Stacks::new(p),
        devices_seen: Vec::new(),
        seeded: false,
        clamped_ooms: Vec::new(),
        chunks: Vec::new(),
        unsure_releases: 0,
    };
    let mut classes = StrClasses::new(p);
    let mut next_id: u64 = 0;
    for (dev, &entries) in traces.iter().enumerate() {
        let dev = dev as i32;
        let entries = p.list(entries).ok_or_else(|| Error::format(path, format!("device_traces[{dev}] is not a list")))?;
        let dev_finals: Vec<&FinalSegment> = finals.iter().filter(|s| s.device == dev).collect();
        if entries.is_empty() && dev_finals.is_empty() {
            continue;
        }
        h.devices_seen.push(dev);
        let parsed = parse_entries(p, entries, dev, path, &mut classes, prefault, &mut h.clamped_ooms)?;
        // A snapshot that lists segments records the final state: its history must lead there.
        let strict = !opts.lenient && !finals.is_empty();
        let (seeded, unsure) = import_device(
            p,
            &parsed,
            &dev_finals,
            fit,
            dev,
            &mut h.out,
            &mut h.frames,
            &mut next_id,
            &mut h.chunks,
            strict.then_some(path),
        )?;
        h.seeded |= seeded;
        h.unsure_releases += unsure;
        if let Some(pf) = prefault {
            pf.clear(ENTRIES_SLOT);
            drop_in_background(parsed);
        }
    }
    Ok(h)
}

/// What the capture's `.json` (`m`, read from `meta_path`) adds: the devices' memory and cap,
/// the torch version, the final memory stats (`recorded_stats`, by device), and the rest of
/// it under `capture`.
fn capture_json(meta_path: &Path, m: &serde_json::Value, devices_seen: &[i32], metadata: &mut TraceMetadata) -> Result<()> {
    metadata.source_version = m.get("torch").and_then(|v| v.as_str()).map(str::to_string);
    let total = super::meta_u64(meta_path, m, "", "device_total_bytes")?;
    let name = m.get("device_name").and_then(|v| v.as_str()).map(str::to_string);
    let cap = super::meta_u64(meta_path, m, "", "cap_bytes")?.filter(|&c| c > 0);
    for d in &mut metadata.devices {
        d.total_memory = total;
        d.name = name.clone();
        d.memory_cap = cap;
    }
    let mut stats = serde_json::Map::new();
    if let Some(s) = m.get("memory_stats") {
        let dev = devices_seen.first().copied().unwrap_or(0);
        stats.insert(dev.to_string(), s.clone());
    }
    if let Some(serde_json::Value::Object(per)) = m.get("memory_stats_per_device") {
        for (k, v) in per {
            stats.insert(k.clone(), v.clone());
        }
    }
    metadata.extra.insert("recorded_stats".into(), serde_json::Value::Object(stats));
    metadata.extra.insert("meta_path".into(), meta_path.display().to_string().into());
    // Checked here, so that a replay can rely on them (`TraceMetadata::host_changes`,
    // `TraceMetadata::driver_memory_changes`).
    if let Some(v) = m.get(crate::trace::HOST_VA) {
        crate::trace::parse_host_va(v).map_err(|e| Error::format(meta_path, format!("'{}' {e}", crate::trace::HOST_VA)))?;
    }
    if let Some(v) = m.get(crate::trace::DRIVER_MEMORY) {
        crate::trace::parse_driver_memory(v).map_err(|e| Error::format(meta_path, format!("'{}' {e}", crate::trace::DRIVER_MEMORY)))?;
    }
    let mut capture = m.as_object().cloned().unwrap_or_default();
    capture.remove("memory_stats");
    capture.remove("memory_stats_per_device");
    metadata.extra.insert("capture".into(), serde_json::Value::Object(capture));
    Ok(())
}

/// The `chunk_bytes` column: the block size of the seed allocations at the rows `chunks`
/// name, null elsewhere.
fn add_chunk_column(out: &mut TraceBuilder, chunks: Vec<(usize, u64)>) {
    // A few seed rows of millions: zeroed values (pages the allocator maps lazily, never
    // touched but at those rows) and a validity mask, not a `Vec<Option<u64>>` of 16 bytes
    // a row written out and copied again.
    let mut values = vec![0u64; out.len()];
    let mut valid = vec![false; out.len()];
    for (row, c) in chunks {
        values[row] = c;
        valid[row] = true;
    }
    let col = arrow_array::UInt64Array::new(values.into(), Some(arrow_buffer::NullBuffer::from(valid)));
    let field = crate::trace::schema::optional_field("chunk_bytes").expect("known column");
    out.add_column(field, std::sync::Arc::new(col));
}

/// One history entry, decoded: 40 bytes (there is one per event, 4 M in a large snapshot,
/// and every page of them is a first-touch fault: an `Option<i64>` time and a `Value` frames
/// made it 64).
struct Entry {
    addr: u64,
    size: u64,
    stream: i64,
    /// `time_us` × 1000 when `has_time`.
    time: i64,
    /// The entry's `frames` list or tuple (index shared by both, [`NO_FRAMES`] for any other
    /// value or none).
    frames: u32,
    action: Action,
    has_time: bool,
}

/// `Entry::frames` of an entry without a frames list (a container index below it: see
/// `parse_entries`).
const NO_FRAMES: u32 = u32::MAX;

impl Entry {
    #[inline]
    fn time_ns(&self) -> Option<i64> {
        self.has_time.then_some(self.time)
    }

    /// The entry's row on device `dev` (its pool and alloc id left to the caller).
    #[inline]
    fn row(&self, dev: i32, stack_id: Option<u32>) -> EventRow {
        let mut r = EventRow::new(self.action, self.size);
        r.addr = Some(self.addr);
        r.stream = self.stream;
        r.device = dev;
        r.time_ns = self.time_ns();
        r.stack_id = stack_id;
        r
    }

    /// The `empty_cache` row that goes before the entry when it starts a run of releases that
    /// was the program's ([`release_at`]).
    fn empty_cache_row(&self, dev: i32) -> EventRow {
        let mut ec = EventRow::new(Action::EmptyCache, 0);
        ec.device = dev;
        ec.time_ns = self.time_ns();
        ec
    }

    /// The frames as the value they were in the pickle (`None`: no list).
    #[inline]
    fn frames(&self) -> Value {
        if self.frames == NO_FRAMES {
            Value::None
        } else {
            Value::List(self.frames)
        }
    }
}

/// What a string of the pickle is to the entry decoder, decided once per string object: the
/// pickler memoizes dict keys and action names, so the same few objects recur in every entry.
struct StrClasses {
    class: Vec<u8>,
}

const S_UNSEEN: u8 = 0;
const S_OTHER: u8 = 1;
const S_ACTION: u8 = 2;
const S_ADDR: u8 = 3;
const S_SIZE: u8 = 4;
const S_STREAM: u8 = 5;
const S_TIME_US: u8 = 6;
const S_FRAMES: u8 = 7;
/// `S_ACTION_NAME | code`: the name of an `Action`.
const S_ACTION_NAME: u8 = 0x80;

impl StrClasses {
    fn new(p: &Pickle) -> Self {
        StrClasses { class: vec![S_UNSEEN; p.str_count()] }
    }

    #[inline]
    fn of(&mut self, p: &Pickle, v: Value) -> u8 {
        let Value::Str(i) = v else { return S_OTHER };
        let c = self.class[i as usize];
        if c != S_UNSEEN {
            return c;
        }
        let c = match p.str(v).unwrap_or("") {
            "action" => S_ACTION,
            "addr" => S_ADDR,
            "size" => S_SIZE,
            "stream" => S_STREAM,
            "time_us" => S_TIME_US,
            "frames" => S_FRAMES,
            other => Action::parse(other).map_or(S_OTHER, |a| S_ACTION_NAME | a as u8),
        };
        self.class[i as usize] = c;
        c
    }
}

/// The keys of a history entry, in the order of their `S_*` classes (`S_ACTION` first): the
/// parser stores the entries as records of these (`pickle::parse_with_records`).
const ENTRY_KEYS: [&str; 8] = ["action", "addr", "size", "stream", "time_us", "frames", "compile_context", "user_metadata"];

fn parse_entries(
    p: &Pickle,
    entries: &[Value],
    dev: i32,
    path: &Path,
    classes: &mut StrClasses,
    prefault: Option<&Prefaulter>,
    clamped_ooms: &mut Vec<serde_json::Value>,
) -> Result<Vec<Entry>> {
    let mut out: Vec<Entry> = crate::huge_pages::with_capacity(entries.len());
    if let Some(pf) = prefault {
        pf.ahead(ENTRIES_SLOT, &out, usize::MAX);
    }
    let threads = crate::cores::threads_for(entries.len());
    let slots = &mut out.spare_capacity_mut()[..entries.len()];
    if threads < 2 {
        decode_entries(p, entries, 0, slots, dev, path, classes, clamped_ooms)?;
    } else {
        let chunk = entries.len().div_ceil(threads);
        let done: Vec<Result<Vec<serde_json::Value>>> = std::thread::scope(|s| {
            let workers: Vec<_> = entries
                .chunks(chunk)
                .zip(slots.chunks_mut(chunk))
                .enumerate()
                .map(|(t, (entries, slots))| {
                    s.spawn(move || {
                        let (mut classes, mut clamped) = (StrClasses::new(p), Vec::new());
                        decode_entries(p, entries, t * chunk, slots, dev, path, &mut classes, &mut clamped).map(|()| clamped)
                    })
                })
                .collect();
            workers.into_iter().map(crate::cores::joined).collect()
        });
        // The first error in the entries' order, as one thread would find it.
        for clamped in done {
            clamped_ooms.extend(clamped?);
        }
    }
    // SAFETY: `decode_entries` wrote every slot of `entries.len()` (it returns an error
    // otherwise, and the entries written are then dropped as uninitialised memory: `Entry`
    // owns nothing).
    unsafe { out.set_len(entries.len()) };
    Ok(out)
}

/// Decodes `entries` (from `first`, the index of `entries[0]` in the device's history) into
/// `slots`, one each; the first bad entry is the error.
#[allow(clippy::too_many_arguments)]
fn decode_entries(
    p: &Pickle,
    entries: &[Value],
    first: usize,
    slots: &mut [std::mem::MaybeUninit<Entry>],
    dev: i32,
    path: &Path,
    classes: &mut StrClasses,
    clamped_ooms: &mut Vec<serde_json::Value>,
) -> Result<()> {
    for ((i, &e), slot) in entries.iter().enumerate().zip(slots) {
        let i = first + i;
        if let Some(entry) = p.record(e).and_then(|rec| record_entry(p, rec, classes)) {
            slot.write(entry);
            continue;
        }
        let (mut action, mut addr, mut size, mut stream, mut time, mut frames) = (None, None, None, 0i64, None, Value::None);
        let at = |key: &str, m: String| Error::format(path, format!("device_traces[{dev}][{i}]: '{key}' {m}"));
        let mut field = |class: u8, v: Value| -> Result<()> {
            match class {
                S_ACTION => action = Some(v),
                S_ADDR => addr = Some(address_value(p, v).map_err(|m| at("addr", m))?),
                S_SIZE => size = Some(v),
                S_STREAM => stream = int_value(p, v).map_err(|m| at("stream", m))?,
                S_TIME_US => {
                    time = match v {
                        Value::None => None,
                        _ => Some(time_ns(int_value(p, v).map_err(|m| at("time_us", m))?).map_err(|m| at("time_us", m))?),
                    }
                }
                S_FRAMES => frames = v,
                _ => {}
            }
            Ok(())
        };
        if let Some(rec) = p.record(e) {
            // Field k holds ENTRY_KEYS[k], whose class is S_ACTION + k.
            for (k, &f) in rec.iter().enumerate().take(6) {
                if let Some(v) = p.unpack(f) {
                    field(S_ACTION + k as u8, v)?;
                }
            }
        } else {
            let items = p
                .dict(e)
                .ok_or_else(|| Error::format(path, format!("device_traces[{dev}][{i}] is a {}, not a dict", Pickle::type_name(e))))?;
            for &(k, v) in items.iter() {
                field(classes.of(p, k), v)?;
            }
        }
        let name = action.ok_or_else(|| Error::format(path, format!("device_traces[{dev}][{i}] has no 'action'")))?;
        let code = classes.of(p, name);
        let action = (code & S_ACTION_NAME != 0).then(|| Action::from_code(code & !S_ACTION_NAME)).flatten().ok_or_else(|| {
            let shown = p.str(name).map_or_else(|| format!("a {}", Pickle::type_name(name)), |s| format!("'{s}'"));
            Error::format(path, format!("device_traces[{dev}][{i}]: unknown action {shown}"))
        })?;
        // Upstream writes every key of an entry (`addr` is `device_free` in an `oom` entry): a
        // missing one is a damaged entry, not a 0.
        let missing = |key: &str| {
            Error::format(
                path,
                format!("device_traces[{dev}][{i}] ({}) has no '{key}': every {} entry records it", action.as_str(), action.as_str()),
            )
        };
        let addr = match addr {
            Some(a) => a,
            None if matches!(action, Action::Oom | Action::Snapshot) => 0,
            None => return Err(missing("addr")),
        };
        let size = match (size, action) {
            (Some(v), Action::Oom) => {
                let (held, recorded) = oom_size(p, v).map_err(|m| at("size", m))?;
                if let Some(recorded) = recorded {
                    clamped_ooms.push(serde_json::json!({"device": dev, "entry": i, "size": recorded}));
                }
                held
            }
            (Some(v), _) => size_value(p, v).map_err(|m| at("size", m))?,
            (None, Action::Snapshot) => 0,
            (None, _) => return Err(missing("size")),
        };
        let frames = match frames {
            // Lists and tuples share one index space and read the same (`Pickle::list`).
            Value::List(l) | Value::Tuple(l) if l != NO_FRAMES => l,
            Value::List(_) | Value::Tuple(_) => {
                return Err(Error::format(path, format!("device_traces[{dev}][{i}]: the pickle holds more than 4 billion containers")))
            }
            _ => NO_FRAMES,
        };
        let (has_time, time) = (time.is_some(), time.unwrap_or(0));
        slot.write(Entry { addr, size, stream, time, frames, action, has_time });
    }
    Ok(())
}

/// An entry stored as a record whose fields are what a snapshot writes (an action name, ints
/// in range, a time or None, a frames list or none), decoded from the packed words directly;
/// `None` for anything else, which the general decoding in `parse_entries` then reads (and
/// reports, if it is an error). Same result as that decoding, without a `Value` per field.
#[inline]
fn record_entry(p: &Pickle, rec: &[u64; pickle::RECORD_FIELDS], classes: &mut StrClasses) -> Option<Entry> {
    use pickle::{ABSENT, P_INT, P_LIST, P_NONE, P_STR, P_TUPLE};
    let int = |f: u64| -> Option<i64> { (f & 0xf == P_INT).then_some((f as i64) >> 4) };
    // Absent ints are 0, as in `parse_entries`.
    let int_or_0 = |f: u64| if f == ABSENT { Some(0) } else { int(f) };
    let [action, addr, size, stream, time_us, frames, ..] = *rec;
    if action & 0xf != P_STR {
        return None;
    }
    let code = classes.of(p, Value::Str((action >> 4) as u32));
    let action = if code & S_ACTION_NAME != 0 { Action::from_code(code & !S_ACTION_NAME)? } else { return None };
    // A missing addr or size is an error, reported by `parse_entries`.
    if (addr == ABSENT && !matches!(action, Action::Oom | Action::Snapshot)) || (size == ABSENT && action != Action::Snapshot) {
        return None;
    }
    let addr = u64::try_from(int_or_0(addr)?).ok()?;
    let size = int_or_0(size)?;
    if !(0..MAX_SIZE as i64).contains(&size) {
        return None;
    }
    let stream = int_or_0(stream)?;
    let (has_time, time) = match time_us {
        ABSENT | P_NONE => (false, 0),
        f => (true, time_ns(int(f)?).ok()?),
    };
    let frames = match (frames & 0xf, (frames >> 4) as u32) {
        (P_LIST | P_TUPLE, l) if frames != ABSENT && l != NO_FRAMES => l,
        (P_LIST | P_TUPLE, _) if frames != ABSENT => return None,
        _ => NO_FRAMES,
    };
    Some(Entry { addr, size: size as u64, stream, time, frames, action, has_time })
}

/// Emits one device's seed and history. Returns whether a seed was needed, and the runs of
/// releases it could not attribute.
#[allow(clippy::too_many_arguments)]
fn import_device(
    p: &Pickle,
    parsed: &[Entry],
    finals: &[&FinalSegment],
    fit: FreeBlockFit,
    dev: i32,
    out: &mut TraceBuilder,
    frames: &mut Stacks,
    next_id: &mut u64,
    chunks: &mut Vec<(usize, u64)>,
    strict: Option<&Path>,
) -> Result<(bool, usize)> {
    let mut pools = DevicePools::new(finals);
    pools.fit = fit;
    // The walk back to the state before the history and the walk forward matching frees to
    // allocations are independent: on two cores for a long history.
    let (before, matched) = if crate::cores::threads_for(parsed.len()) > 1 {
        std::thread::scope(|s| {
            let back = s.spawn(|| state_before(parsed, finals, &pools, dev, strict));
            let matched = match_frees(parsed);
            (crate::cores::joined(back), matched)
        })
    } else {
        (state_before(parsed, finals, &pools, dev, strict), match_frees(parsed))
    };
    let before = before?;
    let seeded = !before.segs.is_empty() || !before.live.is_empty() || !before.mapped.is_empty();
    let mut seed_ids = emit_seeds(&before, parsed, dev, &mut pools, out, next_id, chunks);
    let unsure = emit_history(p, parsed, &matched, dev, &mut pools, &mut seed_ids, out, frames, next_id);
    Ok((seeded, unsure))
}

/// [`match_frees`] of a free whose allocation the history does not hold: a seed's, if one is
/// live at its address (or none).
const FROM_SEEDS: u32 = u32::MAX;

/// For each free (requested or completed) in `parsed`, the rank among the history's allocs
/// of the alloc it frees: the last one at its address not yet freed; [`FROM_SEEDS`] if none
/// is (other entries: 0). The id map of upstream's trace, without the seeds, known only once
/// the walk back is done: a history alloc replaces the seed at its address, and
/// `emit_history` removes that seed too. Ranks fit: every entry is a container of the pickle,
/// whose indexes are `u32`s.
fn match_frees(parsed: &[Entry]) -> Vec<u32> {
    let mut rank_at: FxHashMap<u64, u32> = FxHashMap::default();
    // The live allocations only (thousands), as `emit_seeds`' map.
    rank_at.reserve(seeds_hint(parsed.len()));
    let mut allocs = 0u32;
    parsed
        .iter()
        .map(|e| match e.action {
            Action::Alloc => {
                rank_at.insert(e.addr, allocs);
                allocs += 1;
                0
            }
            Action::FreeRequested => rank_at.get(&e.addr).copied().unwrap_or(FROM_SEEDS),
            Action::FreeCompleted => rank_at.remove(&e.addr).unwrap_or(FROM_SEEDS),
            _ => 0,
        })
        .collect()
}

/// One device's state before its first recorded entry.
struct StateBefore {
    /// Live blocks: addr -> (requested size, stream, pending free).
    live: FxHashMap<u64, (u64, i64, bool)>,
    /// Segments (non-expandable): addr -> (size, stream, pool).
    segs: BTreeMap<u64, (u64, i64, u32)>,
    /// Mapped pages of expandable segments: addr -> (size, stream, pool), as ranges.
    mapped: BTreeMap<u64, (u64, i64, u32)>,
}

/// The pool of an address on one device: from the final segments, and the segments live at
/// the point the events are emitted up to.
struct DevicePools {
    /// Pool of each final segment, by address.
    final_pool: FxHashMap<u64, u32>,
    /// Expandable segments of the final state: (base, size, pool).
    expandable_ranges: Vec<(u64, u64, u32)>,
    /// With every segment in the default pool (no CUDA graphs / mempools), every lookup
    /// would answer 0: skip them.
    single_pool: bool,
    /// Live segments: addr -> (end, pool).
    seg_pool: BTreeMap<u64, (u64, u32)>,
    /// Which free blocks the recorded settings let a request take ([`empty_cache_at`]).
    fit: FreeBlockFit,
}

impl DevicePools {
    fn new(finals: &[&FinalSegment]) -> Self {
        let mut final_pool: FxHashMap<u64, u32> = FxHashMap::default();
        let mut expandable_ranges: Vec<(u64, u64, u32)> = Vec::new();
        for s in finals {
            final_pool.insert(s.address, s.pool);
            if s.is_expandable {
                expandable_ranges.push((s.address, s.total_size, s.pool));
            }
        }
        let single_pool = finals.iter().all(|s| s.pool == 0);
        DevicePools {
            final_pool,
            expandable_ranges,
            single_pool,
            seg_pool: BTreeMap::new(),
            fit: FreeBlockFit { max_split: u64::MAX, known: false },
        }
    }

    /// The pool of the live segment (or the expandable range) holding `addr`; 0 if none does.
    #[inline]
    fn of(&self, addr: u64) -> u32 {
        if self.single_pool {
            return 0;
        }
        if let Some((_, &(end, pool))) = self.seg_pool.range(..=addr).next_back() {
            if addr < end {
                return pool;
            }
        }
        for &(base, size, pool) in &self.expandable_ranges {
            if addr >= base && addr < base + size.max(1) * 16 {
                return pool;
            }
        }
        0
    }
}

/// Walks back from the final state to the state before the first recorded entry.
fn state_before(parsed: &[Entry], finals: &[&FinalSegment], pools: &DevicePools, dev: i32, strict: Option<&Path>) -> Result<StateBefore> {
    let mut live: FxHashMap<u64, (u64, i64, bool)> = FxHashMap::default();
    let mut segs: BTreeMap<u64, (u64, i64, u32)> = BTreeMap::new();
    for s in finals {
        if !s.is_expandable {
            segs.insert(s.address, (s.total_size, s.stream, s.pool));
        }
        for &(a, req, pending) in &s.live_blocks {
            live.insert(a, (req, s.stream, pending));
        }
    }
    // Mapped ranges at the end are not listed page by page; rebuild them by replaying the
    // map/unmap events forward from the final mapped totals is not possible, so track the
    // net effect backwards: each unmap (backwards) adds, each map (backwards) removes.
    let mut map_delta: BTreeMap<u64, i128> = BTreeMap::new();
    // Strict (`strict` names the file): the history must lead to the final segments.
    let contradiction = |k: usize, e: &Entry, why: &str| -> Result<()> {
        match strict {
            Some(path) => Err(Error::format(
                path,
                format!(
                    "device_traces[{dev}][{k}] ({} of {} bytes at {:#x}): {why}: the snapshot's segments contradict its history; pass --lenient (Python: lenient=True) to load it anyway, seeded from the segments",
                    e.action.as_str(),
                    e.size,
                    e.addr
                ),
            )),
            None => Ok(()),
        }
    };
    let expandable_at = |a: u64| {
        pools.expandable_ranges.iter().any(|&(base, size, _)| a >= base && a < base.saturating_add(size.max(1).saturating_mul(16)))
    };
    for (k, e) in parsed.iter().enumerate().rev() {
        match e.action {
            Action::Alloc => {
                let was_live = live.remove(&e.addr).is_some();
                if !was_live {
                    contradiction(k, e, "the history allocates this block and never frees it, but the final segments hold no block there")?;
                }
            }
            Action::FreeCompleted => {
                let was_allocated = live.insert(e.addr, (e.size, e.stream, true)).is_some_and(|b| !b.2);
                if was_allocated {
                    contradiction(k, e, "the history frees this block last, but the final segments hold it allocated")?;
                }
            }
            Action::FreeRequested => {
                if let Some(b) = live.get_mut(&e.addr) {
                    b.2 = false;
                } else {
                    live.insert(e.addr, (e.size, e.stream, false));
                }
            }
            Action::SegmentAlloc => {
                let was_listed = segs.remove(&e.addr).is_some();
                if !was_listed && !expandable_at(e.addr) {
                    contradiction(k, e, "the history allocates this segment and never frees it, but the final segments do not list it")?;
                }
            }
            Action::SegmentFree => {
                let pool = pools.final_pool.get(&e.addr).copied().unwrap_or(0);
                if segs.insert(e.addr, (e.size, e.stream, pool)).is_some() {
                    contradiction(k, e, "the history frees this segment last, but the final segments list it")?;
                }
            }
            Action::SegmentMap => *map_delta.entry(e.addr).or_insert(0) -= e.size as i128,
            Action::SegmentUnmap => *map_delta.entry(e.addr).or_insert(0) += e.size as i128,
            _ => {}
        }
    }
    let mapped = mapped_before(&pools.expandable_ranges, &map_delta);
    Ok(StateBefore { live, segs, mapped })
}

/// Expandable segments: the final mapped size of each range minus what the history mapped
/// (plus what it unmapped) is what was mapped before it; seed it as one map at the base.
fn mapped_before(expandable_ranges: &[(u64, u64, u32)], map_delta: &BTreeMap<u64, i128>) -> BTreeMap<u64, (u64, i64, u32)> {
    let mut mapped: BTreeMap<u64, (u64, i64, u32)> = BTreeMap::new();
    for &(base, size, pool) in expandable_ranges {
        let hist: i128 = map_delta.iter().filter(|(&a, _)| a >= base && a < base + size.max(1) * 16).map(|(_, &d)| d).sum();
        let before = size as i128 + hist;
        if before > 0 {
            mapped.insert(base, (u64::try_from(before).unwrap_or(u64::MAX), 0, pool));
        }
    }
    mapped
}

/// Seed events: segments, then live allocations, lowest address first. Returns the alloc id
/// of each live allocation, by address.
fn emit_seeds(
    before: &StateBefore,
    parsed: &[Entry],
    dev: i32,
    pools: &mut DevicePools,
    out: &mut TraceBuilder,
    next_id: &mut u64,
    chunks: &mut Vec<(usize, u64)>,
) -> FxHashMap<u64, u64> {
    for (&addr, &(size, stream, pool)) in before.segs.iter() {
        let mut r = EventRow::new(Action::SegmentAlloc, size);
        r.addr = Some(addr);
        r.stream = stream;
        r.device = dev;
        r.pool = pool;
        r.seed = true;
        out.push(&r);
        pools.seg_pool.insert(addr, (addr + size, pool));
    }
    for (&addr, &(size, stream, pool)) in before.mapped.iter() {
        let mut r = EventRow::new(Action::SegmentMap, size);
        r.addr = Some(addr);
        r.stream = stream;
        r.device = dev;
        r.pool = pool;
        r.seed = true;
        out.push(&r);
    }
    let mut id_at: FxHashMap<u64, u64> = FxHashMap::default();
    // It holds the live allocations only (thousands): sized from the history's length (a
    // million slots for 4 M entries), every lookup was a cache miss (perf: 8% of the load).
    id_at.reserve(seeds_hint(parsed.len()));
    let mut seeds: Vec<(u64, u64, i64, bool)> = before.live.iter().map(|(&a, &(s, st, pend))| (a, s, st, pend)).collect();
    seeds.sort_unstable();
    let seed_chunk = infer_seed_chunks(&seeds, &before.segs, parsed);
    for (k, &(addr, size, stream, pending)) in seeds.iter().enumerate() {
        if let Some(c) = seed_chunk[k] {
            chunks.push((out.len(), c));
        }
        let id = *next_id;
        *next_id += 1;
        id_at.insert(addr, id);
        let mut r = EventRow::new(Action::Alloc, size);
        r.alloc_id = Some(id);
        r.addr = Some(addr);
        r.stream = stream;
        r.device = dev;
        r.pool = pools.of(addr);
        r.seed = true;
        out.push(&r);
        if pending {
            r.action = Action::FreeRequested;
            out.push(&r);
        }
    }
    id_at
}

/// The `alloc_id` of history entry `e`, an alloc or a free ([`match_frees`]' `matched`): as
/// one map from address to id would give it, the seeds' ids in it first (`seed_ids`, from
/// which a history alloc removes the seed it replaces), each alloc the next id.
#[inline]
fn history_alloc_id(e: &Entry, matched: u32, first_id: u64, next_id: &mut u64, seed_ids: &mut FxHashMap<u64, u64>) -> Option<u64> {
    match (e.action, matched) {
        (Action::Alloc, _) => {
            if !seed_ids.is_empty() {
                seed_ids.remove(&e.addr);
            }
            *next_id += 1;
            Some(*next_id - 1)
        }
        (Action::FreeRequested, FROM_SEEDS) => seed_ids.get(&e.addr).copied(),
        (Action::FreeCompleted, FROM_SEEDS) => seed_ids.remove(&e.addr),
        (_, rank) => Some(first_id + u64::from(rank)),
    }
}

/// The recorded history, with an `empty_cache` event before each run of segment releases
/// that was the program's ([`release_at`]). Returns the runs it could not attribute.
fn emit_history(
    p: &Pickle,
    parsed: &[Entry],
    matched: &[u32],
    dev: i32,
    pools: &mut DevicePools,
    seed_ids: &mut FxHashMap<u64, u64>,
    out: &mut TraceBuilder,
    frames: &mut Stacks,
    next_id: &mut u64,
) -> usize {
    let threads = crate::cores::threads_for(parsed.len());
    if pools.single_pool && threads > 1 {
        return emit_history_parallel(p, parsed, matched, dev, pools, seed_ids, out, frames, next_id, threads);
    }
    let mut unsure = 0;
    // The id of the history's first alloc: `match_frees`' ranks count from it.
    let first_id = *next_id;
    for (k, e) in parsed.iter().enumerate() {
        let release = release_at(parsed, k, pools);
        unsure += usize::from(release == Some(Release::Unsure));
        if release == Some(Release::Program) {
            out.push(&e.empty_cache_row(dev));
        }
        let mut r = e.row(dev, frames.stack(p, e.frames()));
        match e.action {
            Action::SegmentAlloc if !pools.single_pool => {
                let pool = seg_pool_for(&pools.final_pool, e.addr);
                pools.seg_pool.insert(e.addr, (e.addr + e.size, pool));
                r.pool = pool;
            }
            Action::SegmentFree if !pools.single_pool => {
                r.pool = pools.of(e.addr);
                pools.seg_pool.remove(&e.addr);
            }
            Action::SegmentAlloc | Action::SegmentFree => {}
            Action::SegmentMap | Action::SegmentUnmap => r.pool = pools.of(e.addr),
            Action::Alloc | Action::FreeRequested | Action::FreeCompleted => {
                r.alloc_id = history_alloc_id(e, matched[k], first_id, next_id, seed_ids);
                r.pool = pools.of(e.addr);
            }
            Action::Oom => {
                // `addr` of an oom entry is the device's free bytes, not an address.
            }
            Action::Snapshot | Action::EmptyCache => {}
        }
        out.push(&r);
    }
    unsure
}

/// [`emit_history`] in `parts` parts on as many threads, for a history whose segments are
/// all in the default pool (every row's pool is 0): the same rows. What carries over from
/// entry to entry is found first: each part's allocs and runs of releases (on the threads),
/// the stack ids (interned in order, on a thread of its own) and the ids of the frees of
/// seeds (in order, while a seed is left); then each part writes its rows into the columns
/// (`TraceBuilder::push_parallel`).
#[allow(clippy::too_many_arguments)]
fn emit_history_parallel(
    p: &Pickle,
    parsed: &[Entry],
    matched: &[u32],
    dev: i32,
    pools: &DevicePools,
    seed_ids: &mut FxHashMap<u64, u64>,
    out: &mut TraceBuilder,
    frames: &mut Stacks,
    next_id: &mut u64,
    parts: usize,
) -> usize {
    debug_assert!(pools.single_pool);
    let chunk = parsed.len().div_ceil(parts.max(1)).max(1);
    let ranges: Vec<(usize, usize)> = (0..parsed.len()).step_by(chunk).map(|a| (a, (a + chunk).min(parsed.len()))).collect();
    // A capture records stacks for all its entries or for none: looked for at both ends, the
    // stacks are interned while the parts are scanned (else only if a part finds one).
    let stacked = parsed.iter().take(1024).chain(parsed.iter().rev().take(1024)).any(|e| e.frames != NO_FRAMES);
    let (scans, stacks, seed_frees) = std::thread::scope(|s| {
        let stacks = stacked.then(|| s.spawn(|| stack_ids(p, parsed, frames)));
        let scans: Vec<_> = ranges.iter().map(|&(a, b)| s.spawn(move || scan_part(parsed, a..b, pools))).collect();
        let seed_frees = seed_frees(parsed, matched, seed_ids);
        let scans: Vec<PartScan> = scans.into_iter().map(crate::cores::joined).collect();
        (scans, stacks.map(crate::cores::joined), seed_frees)
    });
    let stacks = match stacks {
        Some(stacks) => stacks,
        None if scans.iter().any(|sc| sc.stacked) => stack_ids(p, parsed, frames),
        None => None,
    };
    // The id of the history's first alloc: `match_frees`' ranks count from it; each part's
    // first alloc id follows the allocs of the parts before it.
    let first_id = *next_id;
    let first_ids: Vec<u64> = scans.iter().scan(first_id, |id, sc| Some(std::mem::replace(id, *id + sc.allocs))).collect();
    let counts: Vec<usize> = ranges.iter().zip(&scans).map(|(&(a, b), sc)| b - a + sc.programs.len()).collect();
    let of_seed = |k: usize| seed_frees.binary_search_by_key(&(k as u32), |&(j, _)| j).ok().and_then(|i| seed_frees[i].1);
    out.push_parallel(&counts, |t, w| {
        let (mut id, mut programs) = (first_ids[t], scans[t].programs.iter().peekable());
        // The seeds' part of `history_alloc_id` is done (`seed_frees`): none left here.
        let mut no_seeds = FxHashMap::default();
        for k in ranges[t].0..ranges[t].1 {
            let e = &parsed[k];
            if programs.next_if_eq(&&(k as u32)).is_some() {
                w.push(&e.empty_cache_row(dev));
            }
            let mut r = e.row(dev, stacks.as_ref().and_then(|s| s[k]));
            r.alloc_id = match (e.action, matched[k]) {
                (Action::FreeRequested | Action::FreeCompleted, FROM_SEEDS) => of_seed(k),
                (Action::Alloc | Action::FreeRequested | Action::FreeCompleted, m) => {
                    history_alloc_id(e, m, first_id, &mut id, &mut no_seeds)
                }
                _ => None,
            };
            w.push(&r);
        }
    });
    *next_id = first_id + scans.iter().map(|sc| sc.allocs).sum::<u64>();
    scans.iter().map(|sc| sc.unsure).sum()
}

/// What a part of the history carries over to the rows after it ([`emit_history_parallel`]).
struct PartScan {
    allocs: u64,
    /// The entries before which an `empty_cache` row goes (runs of releases that were the
    /// program's), in order.
    programs: Vec<u32>,
    /// Runs of releases [`release_at`] could not attribute.
    unsure: usize,
    /// Whether an entry of the part has a frames list.
    stacked: bool,
}

fn scan_part(parsed: &[Entry], part: std::ops::Range<usize>, pools: &DevicePools) -> PartScan {
    let mut scan = PartScan { allocs: 0, programs: Vec::new(), unsure: 0, stacked: false };
    for k in part {
        scan.stacked |= parsed[k].frames != NO_FRAMES;
        match parsed[k].action {
            Action::Alloc => scan.allocs += 1,
            Action::SegmentFree | Action::SegmentUnmap => match release_at(parsed, k, pools) {
                Some(Release::Program) => scan.programs.push(k as u32),
                Some(Release::Unsure) => scan.unsure += 1,
                _ => {}
            },
            _ => {}
        }
    }
    scan
}

/// Each entry's stack id, interned in the entries' order (`None`: no entry has a stack).
fn stack_ids(p: &Pickle, parsed: &[Entry], frames: &mut Stacks) -> Option<Vec<Option<u32>>> {
    let mut ids: Option<Vec<Option<u32>>> = None;
    for (k, e) in parsed.iter().enumerate() {
        let id = frames.stack(p, e.frames());
        match &mut ids {
            Some(ids) => ids.push(id),
            None if id.is_some() => {
                let mut v = Vec::with_capacity(parsed.len());
                v.resize(k, None);
                v.push(id);
                ids = Some(v);
            }
            None => {}
        }
    }
    ids
}

/// The ids [`history_alloc_id`] gives the frees of seeds (`matched` [`FROM_SEEDS`]), by entry
/// index: a history alloc replaces the seed at its address. Frees not listed get none.
fn seed_frees(parsed: &[Entry], matched: &[u32], seed_ids: &mut FxHashMap<u64, u64>) -> Vec<(u32, Option<u64>)> {
    let mut out = Vec::new();
    // The ids of allocs and of matched frees are not kept here.
    let mut unused_next = 0;
    for (k, e) in parsed.iter().enumerate() {
        if seed_ids.is_empty() {
            break;
        }
        match (e.action, matched[k]) {
            (Action::Alloc, m) => {
                history_alloc_id(e, m, 0, &mut unused_next, seed_ids);
            }
            (Action::FreeRequested | Action::FreeCompleted, FROM_SEEDS) => {
                out.push((k as u32, history_alloc_id(e, FROM_SEEDS, 0, &mut unused_next, seed_ids)))
            }
            _ => {}
        }
    }
    out
}

/// Who made a run of segment releases ([`release_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// The program: torch.cuda.empty_cache(). An `empty_cache` event goes before the run.
    Program,
    /// The allocator, inside a malloc.
    Allocator,
    /// Either, as far as the history shows: replayed as the allocator's, and said so
    /// (`extra.releases_assumed`).
    Unsure,
}

/// Who made the run of segment releases that starts at entry `k` (`None`: no run starts there).
///
/// torch.cuda.empty_cache() records no entry of its own, only the segment frees (or
/// unmaps) of DeviceCachingAllocator::release_cached_blocks. Every release the allocator
/// makes by itself happens inside malloc (release_available_cached_blocks, the retry's
/// release_cached_blocks, garbage_collect_cached_blocks) and is followed by that malloc's
/// segment_alloc / segment_map or its oom. A run of frees of default-pool segments
/// followed by anything else was the program's: an `empty_cache` event goes before it.
///
/// A run followed by a segment_alloc is the program's too when a segment it freed could have
/// served that malloc's request ([`could_have_served`]): upstream's `malloc` releases cached
/// blocks only after `get_free_block` found none that fits. (An `empty_cache()` is usually
/// followed by exactly that: the cache is empty, so the next request makes a segment.)
#[inline]
fn release_at(parsed: &[Entry], k: usize, pools: &DevicePools) -> Option<Release> {
    let is_release = |a: Action| matches!(a, Action::SegmentFree | Action::SegmentUnmap);
    if !(is_release(parsed[k].action) && (k == 0 || !is_release(parsed[k - 1].action))) {
        return None;
    }
    let end = (k..parsed.len()).find(|&j| !is_release(parsed[j].action)).unwrap_or(parsed.len());
    if !(k..end).all(|j| pools.of(parsed[j].addr) == 0) {
        return Some(Release::Allocator);
    }
    Some(match parsed.get(end).map(|n| n.action) {
        Some(Action::SegmentAlloc) if pools.fit.could_have_served(&parsed[k..end], &parsed[end + 1..]) => Release::Program,
        // A request no freed segment could serve: a malloc that failed, released the cache and
        // retried, or an empty_cache() just before a request larger than anything it freed.
        Some(Action::SegmentAlloc) => Release::Unsure,
        Some(Action::SegmentMap | Action::Oom) => Release::Allocator,
        _ => Release::Program,
    })
}

/// Says in `extra.releases_assumed` how many runs of releases [`release_at`] could not
/// attribute, unless the capture's counters account for them: each of the allocator's own
/// releases before a new segment is a retry (`alloc_block(.., isRetry)` counts
/// `num_alloc_retries`), so as many recorded retries as unsure runs explain them all.
fn note_unsure_releases(metadata: &mut TraceMetadata, unsure: usize) {
    let retries: Option<u64> = metadata
        .extra
        .get("recorded_stats")
        .and_then(|s| s.as_object())
        .map(|per| per.values().filter_map(|d| d.get("num_alloc_retries").and_then(|v| v.as_u64())).sum());
    if unsure == 0 || (!metadata.seeded && retries == Some(unsure as u64)) {
        return;
    }
    metadata.extra.insert(
        crate::trace::RELEASES_ASSUMED.into(),
        format!(
            "{unsure} release(s) of cached segments just before a new one could be the program's torch.cuda.empty_cache() or the allocator's own release on a failed cudaMalloc (the request was larger than every segment released): replayed as the allocator's"
        )
        .into(),
    );
}

/// What `get_free_block` lets a request take, under the recorded settings.
#[derive(Debug, Clone, Copy)]
struct FreeBlockFit {
    /// `max_split_size` (`u64::MAX`: unlimited, upstream's default).
    max_split: u64,
    /// False when the settings round requests in ways not mirrored here
    /// (`roundup_power2_divisions`): then a release before a new segment is never taken for
    /// the program's, as before this rule.
    known: bool,
}

impl FreeBlockFit {
    fn from_settings(settings: &serde_json::Value) -> Self {
        let max_split = settings.get("max_split_size").and_then(|v| v.as_i64()).filter(|&v| v > 0).map_or(u64::MAX, |v| v as u64);
        let power2 = settings.get("roundup_power2_divisions").is_some_and(|d| match d {
            serde_json::Value::Object(m) => m.values().any(|v| v.as_u64().unwrap_or(0) > 0),
            serde_json::Value::Array(a) => a.iter().any(|v| v.as_u64().unwrap_or(0) > 0),
            serde_json::Value::Number(n) => n.as_u64().unwrap_or(0) > 0,
            _ => false,
        });
        FreeBlockFit { max_split, known: !power2 }
    }

    /// Whether one of the segments `freed` (whole, so one free block each) could have served
    /// the request recorded after the segment_alloc that follows them (`after`: its `alloc`
    /// entry comes first, as `DeviceCachingAllocator::malloc` records it once `alloc_block`
    /// returned). Mirrors `get_pool` (requests up to kSmallSize = 1 MiB from the small pool,
    /// whose segments are kSmallBuffer = 2 MiB; larger ones from the large pool, whose segments
    /// are never 2 MiB: 20 MiB under kMinLargeAlloc, rounded-up sizes of 10 MiB and more above),
    /// `round_size` (512 bytes), and `get_free_block`: the request's stream, a block at least
    /// its size, and neither of its oversize rules.
    fn could_have_served(self, freed: &[Entry], after: &[Entry]) -> bool {
        const SMALL_SIZE: u64 = 1 << 20;
        const SMALL_BUFFER: u64 = 2 << 20;
        const LARGE_BUFFER: u64 = 20 << 20;
        if !self.known {
            return false;
        }
        let Some(req) = after.iter().take(4).find(|e| e.action == Action::Alloc) else { return false };
        let small = req.size <= SMALL_SIZE;
        let size = req.size.max(1).div_ceil(512) * 512;
        let fits = |b: u64| {
            b >= size
                && !(size < self.max_split && b >= self.max_split)
                && !(size >= self.max_split && b >= size.saturating_add(LARGE_BUFFER))
        };
        freed.iter().any(|f| f.action == Action::SegmentFree && f.stream == req.stream && (f.size == SMALL_BUFFER) == small && fits(f.size))
    }
}

/// Snapshots of PyTorch releases before `_snapshot()` recorded `allocator_settings` (older
/// layouts) carry no settings: assume the release's defaults (the modelled ones —
/// max_split_size unlimited, no garbage collection, no expandable segments, no power-of-2
/// rounding — are the same in every release from 2.0 on), with the `PYTORCH_CUDA_ALLOC_CONF` the
/// capture's `.json` names if it names one, and say so in `extra.allocator_settings_assumed`.
fn assume_allocator_settings(metadata: &mut TraceMetadata) {
    let conf = metadata
        .extra
        .get("capture")
        .and_then(|c| c.get("alloc_conf").or_else(|| c.get("PYTORCH_CUDA_ALLOC_CONF")))
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let version = metadata.source_version.clone().unwrap_or_else(|| "an unknown version".into());
    metadata.allocator_settings = serde_json::json!({ "PYTORCH_CUDA_ALLOC_CONF": conf });
    metadata.extra.insert(
        crate::trace::SETTINGS_ASSUMED.into(),
        format!(
            "the snapshot records no allocator_settings (an older PyTorch layout); assumed the defaults of PyTorch ({version}){}",
            if conf.is_empty() { String::new() } else { format!(" with PYTORCH_CUDA_ALLOC_CONF={conf} from the capture's .json") }
        )
        .into(),
    );
}

/// A starting capacity for the map of live allocations.
fn seeds_hint(entries: usize) -> usize {
    (entries / 4).min(1 << 12)
}

fn seg_pool_for(final_pool: &FxHashMap<u64, u32>, addr: u64) -> u32 {
    final_pool.get(&addr).copied().unwrap_or(0)
}

/// Stack interning with caches keyed by the pickle's object identity: the snapshot's pickler
/// memoizes frame dicts shared between entries, so each distinct frame dict (and each shared
/// frames list) is decoded once, and looking up a known stack allocates nothing.
struct Stacks {
    interner: FrameInterner,
    /// Frame id + 1 of each dict (0: not seen), stack id + 1 of each list: zero-initialized,
    /// so that the allocator's zeroed pages serve as they are, never written but where used (a
    /// snapshot has a dict per history entry: 16 MB of u32::MAX written at 4 M entries).
    frame_of_dict: Vec<u32>,
    stack_of_list: Vec<u32>,
    buf: Vec<u32>,
}

impl Stacks {
    fn new(p: &Pickle) -> Self {
        Stacks {
            interner: FrameInterner::default(),
            frame_of_dict: vec![0; p.dict_count()],
            stack_of_list: vec![0; p.list_count()],
            buf: Vec::with_capacity(64),
        }
    }

    fn stack(&mut self, p: &Pickle, frames: Value) -> Option<u32> {
        let list = p.list(frames)?;
        if list.is_empty() {
            return None;
        }
        if let Value::List(l) = frames {
            let known = self.stack_of_list[l as usize];
            if known != 0 {
                return Some(known - 1);
            }
        }
        self.buf.clear();
        for &f in list {
            let known = match f {
                Value::Dict(d) => self.frame_of_dict[d as usize],
                _ => 0,
            };
            let id = if known != 0 {
                known - 1
            } else {
                let filename = p.get(f, "filename").and_then(|v| p.str(v)).unwrap_or("?");
                let line = p.get(f, "line").and_then(|v| p.int(v)).unwrap_or(0);
                let name = p.get(f, "name").and_then(|v| p.str(v)).unwrap_or("?");
                let id = self.interner.frame(filename, line, name);
                if let Value::Dict(d) = f {
                    // An id of u32::MAX is stored as "not seen": looked up again next time.
                    self.frame_of_dict[d as usize] = id.wrapping_add(1);
                }
                id
            };
            self.buf.push(id);
        }
        let id = self.interner.stack(&self.buf);
        if let Value::List(l) = frames {
            self.stack_of_list[l as usize] = id.wrapping_add(1);
        }
        Some(id)
    }
}

/// The block size of allocations live before a truncated history began, where the history
/// shows it: best fit always places an allocation at the front of a free block, so the first
/// recorded allocation landing between a seed allocation and the next live block (before the
/// seed is freed) marks where the seed's block ended. Without this, an unsplit tail
/// (`should_split` keeps remainders <= 1 MiB with the allocation) would look like free space.
fn infer_seed_chunks(seeds: &[(u64, u64, i64, bool)], segs: &BTreeMap<u64, (u64, i64, u32)>, parsed: &[Entry]) -> Vec<Option<u64>> {
    let n = seeds.len();
    let mut out = vec![None; n];
    if n == 0 {
        return out;
    }
    // Region of each seed: up to the next seed in the same segment, or the segment's end.
    let limit: Vec<u64> = (0..n)
        .map(|k| {
            let a = seeds[k].0;
            let seg_end = segs.range(..=a).next_back().map(|(&s, &(sz, _, _))| s + sz).filter(|&e| e > a);
            let next = seeds.get(k + 1).map(|s| s.0);
            match (seg_end, next) {
                (Some(e), Some(nx)) => e.min(nx),
                (Some(e), None) => e,
                (None, Some(nx)) => nx,
                (None, None) => u64::MAX,
            }
        })
        .collect();
    let mut closed = vec![false; n];
    for e in parsed {
        let a = e.addr;
        let k = match seeds.binary_search_by_key(&a, |s| s.0) {
            Ok(k) => {
                if matches!(e.action, Action::FreeCompleted) {
                    closed[k] = true;
                }
                continue;
            }
            Err(0) => continue,
            Err(k) => k - 1,
        };
        if closed[k] || a >= limit[k] {
            continue;
        }
        if matches!(e.action, Action::Alloc) {
            if a >= seeds[k].0 + seeds[k].1 {
                out[k] = Some(a - seeds[k].0);
            }
            closed[k] = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn e(action: Action, size: u64, stream: i64) -> Entry {
        Entry { addr: 0, size, stream, time: 0, frames: NO_FRAMES, action, has_time: false }
    }

    fn fit(settings: serde_json::Value) -> FreeBlockFit {
        FreeBlockFit::from_settings(&settings)
    }

    /// A 20 MiB segment freed, then a new segment for the request `req` on `stream`.
    fn served(f: FreeBlockFit, freed: u64, req: u64, stream: i64) -> bool {
        f.could_have_served(&[e(Action::SegmentFree, freed, 0)], &[e(Action::Alloc, req, stream)])
    }

    #[test]
    fn a_freed_segment_serves_a_request_of_its_pool_and_stream_that_fits() {
        let d = fit(serde_json::json!({"max_split_size": -1}));
        assert!(served(d, 20 * MIB, 10 * MIB, 0));
        assert!(served(d, 20 * MIB, 20 * MIB, 0));
        // Larger than the freed block: the malloc could have failed and released it.
        assert!(!served(d, 20 * MIB, 20 * MIB + 1, 0));
        // Another stream's blocks are never searched (get_free_block keys on the stream).
        assert!(!served(d, 20 * MIB, 10 * MIB, 7));
        // A small request (<= 1 MiB) comes from the small pool, whose segments are 2 MiB.
        assert!(!served(d, 20 * MIB, 4096, 0));
        assert!(served(d, 2 * MIB, 4096, 0));
        assert!(!served(d, 2 * MIB, 2 * MIB, 0));
    }

    #[test]
    fn max_split_sizes_oversize_rules_are_mirrored() {
        let f = fit(serde_json::json!({"max_split_size": 128 * MIB}));
        // A small request never takes a block of max_split_size or more.
        assert!(!served(f, 200 * MIB, 20 * MIB, 0));
        assert!(served(f, 100 * MIB, 20 * MIB, 0));
        // A large one takes it only within kLargeBuffer (20 MiB) of its size.
        assert!(served(f, 200 * MIB, 190 * MIB, 0));
        assert!(!served(f, 240 * MIB, 150 * MIB, 0));
    }

    #[test]
    fn unmirrored_rounding_leaves_the_old_reading() {
        let f = fit(serde_json::json!({"roundup_power2_divisions": {"1": 0, "2": 4}}));
        assert!(!served(f, 20 * MIB, 10 * MIB, 0));
        assert!(served(fit(serde_json::Value::Null), 20 * MIB, 10 * MIB, 0));
    }

    proptest::proptest! {
        /// The ids `match_frees` and `history_alloc_id` give are those of one map from address
        /// to id holding the seeds first (upstream's trace as `emit_history` read it before):
        /// over a few addresses, so allocs replace live seeds, frees of freed or never-allocated
        /// addresses occur, and requests come before frees or without them.
        #[test]
        fn frees_get_the_ids_one_map_would_give(ops in proptest::collection::vec((0u8..3, 0u64..6), 0..60), seeded in proptest::collection::vec(0u64..6, 0..4)) {
            let actions = [Action::Alloc, Action::FreeRequested, Action::FreeCompleted];
            let parsed: Vec<Entry> = ops.iter().map(|&(a, addr)| Entry { addr, ..e(actions[a as usize], 512, 0) }).collect();
            let seeds: FxHashMap<u64, u64> = seeded.iter().enumerate().map(|(i, &a)| (a, i as u64)).collect();
            let first_id = seeds.len() as u64;
            // One map, as before.
            let (mut id_at, mut next, mut want) = (seeds.clone(), first_id, Vec::new());
            for x in &parsed {
                want.push(match x.action {
                    Action::Alloc => {
                        id_at.insert(x.addr, next);
                        next += 1;
                        Some(next - 1)
                    }
                    Action::FreeRequested => id_at.get(&x.addr).copied(),
                    _ => id_at.remove(&x.addr),
                });
            }
            let matched = match_frees(&parsed);
            let (mut seed_ids, mut next_id) = (seeds, first_id);
            let got: Vec<Option<u64>> = parsed.iter().zip(&matched).map(|(x, &m)| history_alloc_id(x, m, first_id, &mut next_id, &mut seed_ids)).collect();
            proptest::prop_assert_eq!(got, want);
        }

        /// A long history's rows written in parts on threads are the rows written one by one:
        /// alloc ids across the parts' seams, frees of seeds, `empty_cache` rows before runs
        /// of releases, stack ids interned in order, the next id and the unsure runs.
        #[test]
        fn a_history_emitted_in_parts_is_the_history_emitted_in_order(
            ops in proptest::collection::vec((0u8..6, 0u64..6, 0u8..4, proptest::bool::ANY), 0..80),
            seeded in proptest::collection::vec(0u64..6, 0..4),
            parts in 1usize..6,
        ) {
            // [[f@a.py:1], [g@b.py:2, f@a.py:1], []], pickled by Python (protocol 4).
            const STACKS: &[u8] = b"\x80\x04\x95_\x00\x00\x00\x00\x00\x00\x00]\x94(]\x94}\x94(\x8c\x08filename\x94\x8c\x04a.py\x94\x8c\x04line\x94K\x01\x8c\x04name\x94\x8c\x01f\x94ua]\x94(}\x94(h\x03\x8c\x04b.py\x94h\x05K\x02h\x06\x8c\x01g\x94u}\x94(h\x03h\x04h\x05K\x01h\x06h\x07ue]\x94e.";
            let p = pickle::parse(STACKS).expect("pickle");
            let lists: Vec<u32> = p.list(p.root).expect("list").iter().map(|v| match v { Value::List(l) => *l, _ => NO_FRAMES }).collect();
            let actions = [Action::Alloc, Action::FreeRequested, Action::FreeCompleted, Action::SegmentAlloc, Action::SegmentFree, Action::Oom];
            let parsed: Vec<Entry> = ops
                .iter()
                .enumerate()
                .map(|(k, &(a, addr, f, timed))| Entry {
                    addr,
                    frames: lists.get(f as usize).copied().unwrap_or(NO_FRAMES),
                    time: k as i64 * 1000,
                    has_time: timed,
                    ..e(actions[a as usize], (addr + 1) * MIB, 0)
                })
                .collect();
            let matched = match_frees(&parsed);
            let seeds: FxHashMap<u64, u64> = seeded.iter().enumerate().map(|(i, &a)| (a, i as u64)).collect();
            let run = |parallel: bool| {
                let mut pools = DevicePools::new(&[]);
                pools.fit = fit(serde_json::Value::Null);
                let (mut seed_ids, mut next_id) = (seeds.clone(), seeds.len() as u64);
                let (mut out, mut frames) = (TraceBuilder::with_capacity(4), Stacks::new(&p));
                out.push(&EventRow::new(Action::SegmentAlloc, 2 * MIB));
                let unsure = if parallel {
                    emit_history_parallel(&p, &parsed, &matched, 3, &pools, &mut seed_ids, &mut out, &mut frames, &mut next_id, parts)
                } else {
                    emit_history(&p, &parsed, &matched, 3, &mut pools, &mut seed_ids, &mut out, &mut frames, &mut next_id)
                };
                let trace = out.finish(TraceMetadata::new("pytorch"), frames.interner.finish()).expect("trace");
                let nulls: Vec<_> = trace.batch().columns().iter().map(|c| c.nulls().cloned()).collect();
                (trace.batch().clone(), nulls, trace.frames.clone(), next_id, unsure)
            };
            proptest::prop_assert_eq!(run(true), run(false));
        }
    }
}
