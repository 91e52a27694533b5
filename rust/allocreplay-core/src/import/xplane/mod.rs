//! TensorFlow / JAX profiler captures (`*.xplane.pb`, optionally `.gz`/`.xz`/`.zst`, or a
//! profile directory `plugins/profile/<run>/`): the BFC allocators' `MemoryAllocation` /
//! `MemoryDeallocation` events become the trace. Field-level documentation (which stat becomes
//! which column, how events of several threads are ordered, what becomes a seed) is in
//! docs/xplane-import.md; keep the two in step.
//!
//! Where the events come from: `BFCAllocator::AddTraceMe` (xla/tsl/framework/bfc_allocator.cc)
//! emits one instant TraceMe per allocation and per deallocation, under the allocator's lock,
//! after the allocator's state changed: every event carries the chunk it handed out or took
//! back (`allocation_bytes`, `addr`), the caller's request (`requested_bytes`), and the
//! allocator's stats after it (`bytes_allocated` = bytes in use, `peak_bytes_in_use`,
//! `fragmentation`, `bytes_available` = memory_limit - bytes_reserved - bytes_in_use). The
//! profiler puts them on plane "/host:CPU", one line per thread.

mod events;
pub mod proto;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, StringBuilder, UInt64Builder};
use arrow_array::ArrayRef;

use super::{read_meta_json, ImportOptions};
use crate::error::{Error, Result};
use crate::trace::schema::optional_field;
use crate::trace::{Action, DeviceInfo, EventRow, FrameTable, Trace, TraceBuilder, TraceMetadata};
pub use events::{AllocatorSummary, MemEvent, ParsedCapture};

/// True if `data` may be a serialized XSpace: its first field is `planes` (field 1,
/// length-delimited), as every XSpace with a plane starts. Only a first guess: the importer
/// checks the rest and says clearly when the protobuf is something else.
pub fn looks_like_xspace(data: &[u8]) -> bool {
    data.first() == Some(&0x0a)
}

/// True if the path names an xplane capture by its file name (`*.xplane.pb[.gz|.xz|.zst]`).
pub fn is_xplane_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| [".xplane.pb", ".xplane.pb.gz", ".xplane.pb.xz", ".xplane.pb.zst"].iter().any(|s| n.ends_with(s)))
}

/// Imports the capture in `data` (already decompressed), read from `path`.
pub fn import_xplane(path: &Path, data: Vec<u8>, opts: &ImportOptions) -> Result<Trace> {
    let capture = events::parse(path, data)?;
    build_trace(path, capture, opts)
}

/// A profile directory: `<logdir>`, `<logdir>/plugins/profile`, or one run
/// `<logdir>/plugins/profile/<run>/`. The newest run (runs are named by their start time) is
/// used; the directory chosen must hold exactly one `*.xplane.pb` (several are several hosts of
/// one run, or separate runs copied together: which one to import is the user's call).
pub fn find_in_profile_dir(dir: &Path) -> Result<PathBuf> {
    let here = xplane_files(dir)?;
    if !here.is_empty() {
        return one_capture(dir, here);
    }
    let profile = if dir.join("plugins").join("profile").is_dir() { dir.join("plugins").join("profile") } else { dir.to_path_buf() };
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&profile)
        .map_err(|e| Error::io(&profile, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    runs.sort();
    for run in runs.iter().rev() {
        let files = xplane_files(run)?;
        if !files.is_empty() {
            return one_capture(run, files);
        }
    }
    Err(Error::UnknownFormat {
        path: dir.to_path_buf(),
        message: "is a directory with no profiler capture: expected *.xplane.pb in it or under plugins/profile/<run>/".into(),
    })
}

fn xplane_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_xplane_name(p))
        .collect();
    files.sort();
    Ok(files)
}

fn one_capture(dir: &Path, files: Vec<PathBuf>) -> Result<PathBuf> {
    if files.len() == 1 {
        return Ok(files.into_iter().next().unwrap());
    }
    let names: Vec<String> = files.iter().filter_map(|f| f.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
    Err(Error::invalid_input(dir, format!("holds {} profiler captures ({}); name the one to import", files.len(), names.join(", "))))
}

/// Names the allocator to import: the one asked for, else the device allocator with most
/// events, else the allocator with most events.
fn choose_allocator<'a>(path: &Path, summaries: &'a [AllocatorSummary], asked: Option<&str>) -> Result<&'a AllocatorSummary> {
    let listing = || summaries.iter().map(|s| format!("{} ({} events)", s.name, s.events)).collect::<Vec<_>>().join(", ");
    if let Some(name) = asked {
        return summaries.iter().find(|s| s.name == name).ok_or_else(|| {
            Error::invalid_input(path, format!("no allocator named '{name}' in the capture; its allocators: {}", listing()))
        });
    }
    let best = |device_only: bool| {
        summaries.iter().filter(|s| !device_only || s.is_device()).max_by(|a, b| a.events.cmp(&b.events).then(b.name.cmp(&a.name)))
    };
    Ok(best(true).or_else(|| best(false)).expect("at least one allocator"))
}

fn build_trace(path: &Path, mut capture: ParsedCapture, opts: &ImportOptions) -> Result<Trace> {
    let summaries = capture.summaries();
    if summaries.is_empty() {
        return Err(Error::format(
            path,
            format!(
                "the capture has no memory events (no MemoryAllocation / MemoryDeallocation on plane /host:CPU among its {} host events); \
                 profile with host_tracer_level >= 2 (TensorFlow) and make sure the allocator is BFC (TF_CPU_ALLOCATOR_USE_BFC=true on CPU; \
                 JAX's XLA_PYTHON_CLIENT_ALLOCATOR=platform and TF_GPU_ALLOCATOR=cuda_malloc_async emit none)",
                capture.host_events
            ),
        ));
    }
    let chosen = choose_allocator(path, &summaries, opts.allocator.as_deref())?.clone();
    let mut evs: Vec<MemEvent> = capture.take_events(chosen.index);
    let ordering = events::order_by_chain(&mut evs);
    let seeds = events::seeds(&evs);

    // --- Rows.
    let n = evs.len() + seeds.live.len() + usize::from(seeds.unknown_bytes > 0);
    let mut rows = Rows::with_capacity(n, chosen.device_ordinal());
    // Seeds: the live buffers the window's frees reveal, lowest address first, then the
    // in-use bytes nothing in the window accounts for.
    for &(addr, requested, size) in &seeds.live {
        rows.live_id.insert(addr, rows.next_id);
        rows.push_seed(requested, size, Some(addr));
    }
    if seeds.unknown_bytes > 0 {
        rows.push_seed(seeds.unknown_bytes, seeds.unknown_bytes, None);
    }
    for e in &evs {
        rows.push_event(e, &capture.strings);
    }
    let out = rows.finish();

    // --- Metadata.
    let metadata = trace_metadata(path, &mut capture, &chosen, &summaries, &evs, &ordering, &seeds, opts)?;
    out.finish(metadata, FrameTable::default())
}

/// The trace's rows as they are built, with the optional columns of the BFC events beside
/// them (null in a seed's row, but its `chunk_bytes`).
struct Rows {
    out: TraceBuilder,
    device: i32,
    next_id: u64,
    /// Alloc id of each live buffer, by address.
    live_id: HashMap<u64, u64>,
    chunk: UInt64Builder,
    in_use: UInt64Builder,
    peak: UInt64Builder,
    frag: Float64Builder,
    op: StringBuilder,
    shape: StringBuilder,
    data_type: StringBuilder,
    region_type: StringBuilder,
    step: Int64Builder,
    thread: Int64Builder,
}

impl Rows {
    fn with_capacity(n: usize, device: i32) -> Self {
        Rows {
            out: TraceBuilder::with_capacity(n),
            device,
            next_id: 0,
            live_id: HashMap::with_capacity(1024),
            chunk: UInt64Builder::with_capacity(n),
            in_use: UInt64Builder::with_capacity(n),
            peak: UInt64Builder::with_capacity(n),
            frag: Float64Builder::with_capacity(n),
            op: StringBuilder::new(),
            shape: StringBuilder::new(),
            data_type: StringBuilder::new(),
            region_type: StringBuilder::new(),
            step: Int64Builder::with_capacity(n),
            thread: Int64Builder::with_capacity(n),
        }
    }

    /// A seed allocation of `size` bytes in a chunk of `chunk_size`, at `addr` if known.
    fn push_seed(&mut self, size: u64, chunk_size: u64, addr: Option<u64>) {
        let mut r = EventRow::new(Action::Alloc, size);
        r.alloc_id = Some(self.next_id);
        self.next_id += 1;
        r.addr = addr;
        r.device = self.device;
        r.seed = true;
        self.out.push(&r);
        self.chunk.append_value(chunk_size);
        self.in_use.append_null();
        self.peak.append_null();
        self.frag.append_null();
        self.op.append_null();
        self.shape.append_null();
        self.data_type.append_null();
        self.region_type.append_null();
        self.step.append_null();
        self.thread.append_null();
    }

    /// The row of a recorded event (`strings`: the capture's interned strings).
    fn push_event(&mut self, e: &MemEvent, strings: &[String]) {
        let s = |id: Option<u32>| id.map(|i| strings[i as usize].as_str());
        let mut r = EventRow::new(if e.alloc { Action::Alloc } else { Action::FreeCompleted }, e.requested);
        r.addr = Some(e.addr);
        r.device = self.device;
        r.time_ns = Some(i64::try_from(e.time_ps.div_euclid(1000)).expect("events::parse refuses times beyond 64 bits of ns"));
        if e.alloc {
            r.alloc_id = Some(self.next_id);
            self.live_id.insert(e.addr, self.next_id);
            self.next_id += 1;
        } else {
            r.alloc_id = self.live_id.remove(&e.addr);
        }
        self.out.push(&r);
        self.chunk.append_value(e.chunk);
        self.in_use.append_value(e.in_use);
        self.peak.append_option(e.peak);
        self.frag.append_option(e.fragmentation);
        self.op.append_option(s(e.op));
        self.shape.append_option(s(e.shape));
        self.data_type.append_option(e.data_type.filter(|&v| v != 0).map(events::data_type_name).as_deref());
        self.region_type.append_option(s(e.region_type));
        self.step.append_option(e.step);
        self.thread.append_value(e.thread);
    }

    /// The rows with the optional columns added.
    fn finish(mut self) -> TraceBuilder {
        let mut add = |name: &str, a: ArrayRef| self.out.add_column(optional_field(name).expect("known optional column"), a);
        add("chunk_bytes", Arc::new(self.chunk.finish()));
        add("in_use_bytes", Arc::new(self.in_use.finish()));
        add("peak_in_use_bytes", Arc::new(self.peak.finish()));
        add("fragmentation", Arc::new(self.frag.finish()));
        add("op", Arc::new(self.op.finish()));
        add("shape", Arc::new(self.shape.finish()));
        add("data_type", Arc::new(self.data_type.finish()));
        add("region_type", Arc::new(self.region_type.finish()));
        add("step", Arc::new(self.step.finish()));
        add("thread_id", Arc::new(self.thread.finish()));
        self.out
    }
}

/// The trace's metadata: the device (the GPU plane's name and memory when the allocator is a
/// device's), the allocator's settings as `allocator_settings`, how the events were ordered
/// and what was seeded, then what the capture's `.json` adds (`capture_json`).
fn trace_metadata(
    path: &Path,
    capture: &mut ParsedCapture,
    chosen: &AllocatorSummary,
    summaries: &[AllocatorSummary],
    evs: &[MemEvent],
    ordering: &events::OrderingReport,
    seeds: &events::Seeds,
    opts: &ImportOptions,
) -> Result<TraceMetadata> {
    let device = chosen.device_ordinal();
    let mut metadata = TraceMetadata::new("xplane");
    metadata.source_path = Some(path.display().to_string());
    metadata.source_version = capture.version.clone();
    metadata.seeded = !seeds.live.is_empty() || seeds.unknown_bytes > 0;
    let gpu = capture.gpus.get(&device).filter(|_| chosen.is_device());
    let mut info = DeviceInfo {
        index: device,
        name: Some(gpu.and_then(|g| g.name.clone()).unwrap_or_else(|| chosen.name.clone())),
        total_memory: gpu.and_then(|g| g.memory_size),
        memory_cap: chosen.memory_limit,
    };
    let mut bfc = serde_json::Map::new();
    bfc.insert("allocator_name".into(), chosen.name.clone().into());
    if let Some(l) = chosen.memory_limit {
        bfc.insert("memory_limit".into(), l.into());
    }
    if let Some(g) = gpu {
        if let Some((major, minor)) = g.compute_capability {
            bfc.insert("compute_capability".into(), format!("{major}.{minor}").into());
        }
    }
    bfc.insert("final_peak_bytes_in_use".into(), evs.iter().filter_map(|e| e.peak).max().into());
    metadata.extra.insert("allocator".into(), chosen.name.clone().into());
    metadata
        .extra
        .insert("allocators".into(), serde_json::Value::Object(summaries.iter().map(|s| (s.name.clone(), s.events.into())).collect()));
    metadata.extra.insert("ordering".into(), serde_json::to_value(ordering).expect("serializes"));
    let lowest_address = evs.iter().map(|e| e.addr).chain(seeds.live.iter().map(|&(a, _, _)| a)).min();
    metadata.extra.insert(
        "seed".into(),
        serde_json::json!({
            "lowest_address": lowest_address,
            "buffers": seeds.live.len(),
            "buffer_bytes": seeds.live.iter().map(|&(_, _, c)| c).sum::<u64>(),
            "unknown_bytes": seeds.unknown_bytes,
            "gap_bytes": seeds.gap_bytes,
            "regions": seeds.regions.iter().map(|&(a, s)| [a, s]).collect::<Vec<_>>(),
            "starting_in_use_bytes": seeds.starting_in_use,
        }),
    );
    if let Some(h) = &capture.hostname {
        metadata.extra.insert("hostname".into(), h.clone().into());
    }
    if let Some((meta_path, m)) = read_meta_json(opts, path)? {
        capture_json(&meta_path, &m, capture, chosen, &mut metadata, &mut info, &mut bfc)?;
    }
    if let Some(f) = capture.framework {
        bfc.insert("framework".into(), f.into());
    }
    metadata.allocator_settings = serde_json::Value::Object(bfc);
    metadata.devices = vec![info];
    Ok(metadata)
}

/// What the capture's `.json` (`m`, read from `meta_path`) adds: the framework and its
/// version, the device's memory, the device allocator's final stats and memory limit, the
/// environment.
fn capture_json(
    meta_path: &Path,
    m: &serde_json::Value,
    capture: &mut ParsedCapture,
    chosen: &AllocatorSummary,
    metadata: &mut TraceMetadata,
    info: &mut DeviceInfo,
    bfc: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<()> {
    if metadata.source_version.is_none() {
        metadata.source_version = ["jax", "tf", "tensorflow"].iter().find_map(|k| m.get(*k)).and_then(|v| v.as_str()).map(str::to_string);
    }
    if info.total_memory.is_none() {
        info.total_memory = super::meta_u64(meta_path, m, "", "device_total_bytes")?;
    }
    if let Some(st) = m.get("memory_stats").filter(|v| v.is_object()) {
        // jax `Device.memory_stats()` of the device allocator: bytes_limit is its
        // memory_limit (what the trace's bytes_available implies too).
        if chosen.is_device() {
            if let Some(limit) = super::meta_u64(meta_path, st, "memory_stats.", "bytes_limit")? {
                info.memory_cap = Some(limit);
            }
            let mut stats = serde_json::Map::new();
            stats.insert(info.index.to_string(), st.clone());
            metadata.extra.insert("recorded_stats".into(), serde_json::Value::Object(stats));
        }
    }
    if capture.framework.is_none() {
        capture.framework = if m.get("jax").is_some() {
            Some("jax")
        } else if m.get("tf").is_some() || m.get("tensorflow").is_some() {
            Some("tf")
        } else {
            None
        };
    }
    if let Some(env) = m.get("env").filter(|v| v.is_object()) {
        bfc.insert("env".into(), env.clone());
    }
    metadata.extra.insert("meta_path".into(), meta_path.display().to_string().into());
    let mut cap = m.as_object().cloned().unwrap_or_default();
    cap.remove("memory_stats");
    metadata.extra.insert("capture".into(), serde_json::Value::Object(cap));
    Ok(())
}

/// What the importer found, for `--allocator` help and `info`: allocator name -> events.
pub fn allocators_in(path: &Path, data: Vec<u8>) -> Result<BTreeMap<String, usize>> {
    let capture = events::parse(path, data)?;
    Ok(capture.summaries().into_iter().map(|s| (s.name, s.events)).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::proto::*;
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, UInt64Type};
    use bytes::Bytes;
    use prost::Message;

    /// One memory event of a hand-made capture.
    #[derive(Clone, Copy)]
    pub(crate) struct Ev {
        pub alloc: bool,
        pub time_ns: i64,
        pub requested: u64,
        pub chunk: u64,
        pub addr: u64,
        pub in_use: u64,
        pub allocator: &'static str,
    }

    pub(crate) fn ev(alloc: bool, time_ns: i64, requested: u64, chunk: u64, addr: u64, in_use: u64) -> Ev {
        Ev { alloc, time_ns, requested, chunk, addr, in_use, allocator: "GPU_0_bfc" }
    }

    fn int(id: i64, v: i64) -> XStat {
        XStat { metadata_id: id, value: Some(XStatValue::Int64(v)) }
    }

    /// An XSpace with a `/host:CPU` plane whose lines (threads) hold `lines`' events, plus one
    /// ordinary event per line, and a `/device:GPU:0` plane with 80 GiB. Stats are written the
    /// way the profiler writes them: names interned in stat_metadata, strings as ref_value.
    pub(crate) fn capture(lines: &[(i64, Vec<Ev>)]) -> Vec<u8> {
        let names = [
            "allocator_name",
            "bytes_reserved",
            "bytes_allocated",
            "bytes_available",
            "fragmentation",
            "peak_bytes_in_use",
            "requested_bytes",
            "allocation_bytes",
            "addr",
            "tf_op",
            "GPU_0_bfc",
            "gpu_host_bfc",
            "MatMul",
            "bfc_cpu_allocator_for_gpu",
        ];
        let stat_metadata: HashMap<i64, XStatMetadata> =
            names.iter().enumerate().map(|(i, n)| (i as i64 + 1, XStatMetadata { id: i as i64 + 1, name: n.to_string() })).collect();
        let ref_of = |s: &str| names.iter().position(|n| *n == s).unwrap() as u64 + 1;
        let event_metadata: HashMap<i64, XEventMetadata> = ["MemoryAllocation", "MemoryDeallocation", "MatMul"]
            .iter()
            .enumerate()
            .map(|(i, n)| (i as i64 + 1, XEventMetadata { id: i as i64 + 1, name: n.to_string(), display_name: String::new() }))
            .collect();
        let limit: i64 = 1 << 30;
        let xlines = lines
            .iter()
            .map(|(id, evs)| {
                let mut events: Vec<XEvent> = evs
                    .iter()
                    .map(|e| XEvent {
                        metadata_id: if e.alloc { 1 } else { 2 },
                        offset_ps: (e.time_ns - 1000) * 1000,
                        duration_ps: 0,
                        num_occurrences: 0,
                        stats: vec![
                            XStat { metadata_id: 1, value: Some(XStatValue::Ref(ref_of(e.allocator))) },
                            int(2, 0),
                            int(3, e.in_use as i64),
                            int(4, limit - e.in_use as i64),
                            XStat { metadata_id: 5, value: Some(XStatValue::Double(0.0)) },
                            int(6, e.in_use as i64),
                            int(7, e.requested as i64),
                            int(8, e.chunk as i64),
                            XStat { metadata_id: 9, value: Some(XStatValue::Uint64(e.addr)) },
                            XStat { metadata_id: 10, value: Some(XStatValue::Ref(ref_of("MatMul"))) },
                        ],
                    })
                    .collect();
                events.push(XEvent { metadata_id: 3, offset_ps: 5, duration_ps: 10, num_occurrences: 0, stats: vec![] });
                XLine {
                    id: *id,
                    name: format!("thread {id}"),
                    timestamp_ns: 1000,
                    events,
                    duration_ps: 0,
                    display_id: 0,
                    display_name: String::new(),
                }
            })
            .collect();
        let host = XPlane { id: 1, name: "/host:CPU".into(), lines: xlines, event_metadata, stat_metadata, stats: vec![] };
        let gpu = XPlane {
            id: 2,
            name: "/device:GPU:0".into(),
            lines: vec![],
            event_metadata: HashMap::new(),
            stat_metadata: HashMap::from([(1, XStatMetadata { id: 1, name: "memory_size".into() })]),
            stats: vec![XStat { metadata_id: 1, value: Some(XStatValue::Uint64(80 << 30)) }],
        };
        let space = XSpaceRaw {
            planes: vec![Bytes::from(gpu.encode_to_vec()), Bytes::from(host.encode_to_vec())],
            errors: vec![],
            warnings: vec![],
            hostnames: vec!["h".into()],
        };
        space.encode_to_vec()
    }

    fn import(data: Vec<u8>, opts: &ImportOptions) -> Result<Trace> {
        import_xplane(Path::new("/nonexistent/test.xplane.pb"), data, opts)
    }

    /// Two threads whose events share timestamps, written thread B first: the serialized
    /// order (by the in-use chain) is e1 (A), e2 (B), e3 (A), e4 (B). At the start 4096 bytes
    /// are in use: a 1 KiB buffer at 0x9000 that e3 frees, and 3 KiB nothing in the window
    /// accounts for.
    fn two_threads() -> Vec<(i64, Vec<Ev>)> {
        let e1 = ev(true, 100, 500, 512, 0x1000, 4608);
        let e2 = ev(true, 100, 200, 256, 0x2000, 4864);
        let e3 = ev(false, 200, 1000, 1024, 0x9000, 3840);
        let e4 = ev(false, 200, 500, 512, 0x1000, 3328);
        vec![(2, vec![e2, e4]), (1, vec![e1, e3])]
    }

    #[test]
    fn events_follow_the_in_use_chain_and_seeds_cover_the_start() {
        let t = import(capture(&two_threads()), &ImportOptions::default()).unwrap();
        let c = t.columns();
        // Seeds: the 1 KiB buffer (its request as size, its chunk in chunk_bytes), then the
        // 3 KiB no event explains; then e1, e2, e3, e4.
        let actions: Vec<Action> = c.action.iter().map(|&a| Action::from_code(a).unwrap()).collect();
        assert_eq!(actions, [Action::Alloc, Action::Alloc, Action::Alloc, Action::Alloc, Action::FreeCompleted, Action::FreeCompleted]);
        let seeds: Vec<bool> = (0..6).map(|i| c.seed.value(i)).collect();
        assert_eq!(seeds, [true, true, false, false, false, false]);
        assert_eq!(c.size, &[1000, 3072, 500, 200, 1000, 500]);
        let chunk: Vec<Option<u64>> = t.column("chunk_bytes").unwrap().as_primitive::<UInt64Type>().iter().collect();
        assert_eq!(chunk, [Some(1024), Some(3072), Some(512), Some(256), Some(1024), Some(512)]);
        let addr: Vec<Option<u64>> = c.addr.iter().collect();
        assert_eq!(addr, [Some(0x9000), None, Some(0x1000), Some(0x2000), Some(0x9000), Some(0x1000)]);
        // Frees pair with their allocation (the seed for 0x9000, e1 for 0x1000).
        assert_eq!([c.alloc_id[4], c.alloc_id[5]], [c.alloc_id[0], c.alloc_id[2]]);
        let in_use: Vec<Option<u64>> = t.column("in_use_bytes").unwrap().as_primitive::<UInt64Type>().iter().collect();
        assert_eq!(in_use, [None, None, Some(4608), Some(4864), Some(3840), Some(3328)]);
        let threads: Vec<Option<i64>> = t.column("thread_id").unwrap().as_primitive::<Int64Type>().iter().collect();
        assert_eq!(threads[2..], [Some(1), Some(2), Some(1), Some(2)]);
        assert_eq!(t.column("op").unwrap().as_string::<i32>().value(2), "MatMul");
        // time_ns: line timestamp 1000 ns + offset.
        assert_eq!(c.time_ns.value(2), 100);
        let md = &t.metadata;
        assert!(md.seeded);
        assert_eq!(md.extra["ordering"]["breaks_by_time"], 3);
        assert_eq!(md.extra["ordering"]["breaks"], 0);
        assert_eq!(md.extra["seed"]["unknown_bytes"], 3072);
        assert_eq!(md.devices[0].total_memory, Some(80 << 30));
        // bytes_available + bytes_allocated + bytes_reserved = memory_limit (1 GiB here).
        assert_eq!(md.devices[0].memory_cap, Some(1 << 30));
        assert_eq!(md.extra["allocator"], "GPU_0_bfc");
    }

    /// [`capture`] of [`two_threads`] with every line's `timestamp_ns` set to `ts` and, when
    /// given, the first event of the first line (thread 2) at `offset_ps` from it.
    fn capture_at(ts: i64, first_offset_ps: Option<i64>) -> Vec<u8> {
        let mut space = XSpaceRaw::decode(Bytes::from(capture(&two_threads()))).unwrap();
        let mut host = XPlane::decode(space.planes[1].clone()).unwrap();
        for line in &mut host.lines {
            line.timestamp_ns = ts;
        }
        if let Some(o) = first_offset_ps {
            host.lines[0].events[0].offset_ps = o;
        }
        space.planes[1] = Bytes::from(host.encode_to_vec());
        space.encode_to_vec()
    }

    #[test]
    fn times_beyond_64_bits_of_nanoseconds_are_errors_naming_the_event_not_saturated() {
        // Issue 28, class 1 (the rule of a PyTorch snapshot's `time_us`): the event time
        // `timestamp_ns * 1000 + offset_ps` saturated at 2^63 - 1 picoseconds. A line starting
        // at 2^63 - 1 ns (events 900 and 800 ns before it) became 2^63 - 1 ps - 900 ns, i.e.
        // 9.2e15 ns: a silently wrong time. It is now exact, in nanoseconds.
        let t = import(capture_at(i64::MAX, None), &ImportOptions::default()).unwrap();
        let times: Vec<i64> = (2..6).map(|i| t.columns().time_ns.value(i)).collect();
        assert_eq!(times, [i64::MAX - 900, i64::MAX - 900, i64::MAX - 800, i64::MAX - 800]);
        // Also a time the picoseconds could not hold but nanoseconds can (107 days).
        let t = import(capture_at(9_300_000_000_000_000, None), &ImportOptions::default()).unwrap();
        assert_eq!(t.columns().time_ns.value(2), 9_300_000_000_000_000 - 900);
        // Beyond 64 bits of nanoseconds, either way: an error naming the event.
        for (ts, offset) in [(i64::MAX, 1_000_000), (i64::MIN, -1)] {
            let e = import(capture_at(ts, Some(offset)), &ImportOptions::default()).unwrap_err();
            assert!(matches!(e, Error::Format { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!(
                    "/nonexistent/test.xplane.pb: plane /host:CPU, line \"thread 2\" (id 2), memory event 0: its time (the line's timestamp_ns {ts} + the event's offset_ps {offset}) is beyond what 64 bits of nanoseconds hold (|t| < 2^63 ns)"
                )
            );
        }
    }

    #[test]
    fn the_seeded_trace_replays_exactly_under_bfc() {
        let t = import(capture(&two_threads()), &ImportOptions::default()).unwrap();
        let v = crate::validate::bfc::validate_bfc(&t, 0, None).unwrap();
        assert_eq!((v.events, v.chunk_match, v.in_use_match), (4, 1.0, 1.0), "{v:?}");
        assert!(v.seeded);
    }

    #[test]
    fn allocator_choice_default_explicit_and_unknown() {
        let mut host = ev(true, 50, 10, 256, 0x5000, 256);
        host.allocator = "gpu_host_bfc";
        let mut host2 = host;
        host2.addr = 0x5100;
        host2.in_use = 512;
        host2.time_ns = 60;
        // Two host events, one device event: the device allocator is the default anyway.
        let lines = vec![(1, vec![host, host2, ev(true, 70, 100, 256, 0x1000, 256)])];
        let t = import(capture(&lines), &ImportOptions::default()).unwrap();
        assert_eq!(t.metadata.extra["allocator"], "GPU_0_bfc");
        assert_eq!(t.num_events(), 1);
        assert_eq!(t.metadata.extra["allocators"]["gpu_host_bfc"], 2);
        let opts = ImportOptions { allocator: Some("gpu_host_bfc".into()), ..Default::default() };
        let t = import(capture(&lines), &opts).unwrap();
        assert_eq!(t.num_events(), 2);
        // A host allocator is not device 0's GPU: no device memory from the GPU plane.
        assert_eq!(t.metadata.devices[0].total_memory, None);
        let opts = ImportOptions { allocator: Some("GPU_1_bfc".into()), ..Default::default() };
        match import(capture(&lines), &opts) {
            Err(Error::InvalidInput { message: m, .. }) => assert!(m.contains("GPU_1_bfc") && m.contains("gpu_host_bfc (2 events)"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    fn one_line(e: &Error) -> String {
        let m = e.to_string();
        assert!(!m.contains('\n'), "one line: {m}");
        m
    }

    #[test]
    fn a_protobuf_that_is_not_an_xspace_is_refused() {
        // A pprof-like message: field 1 holds messages of varints, field 2 a non-UTF-8 "string".
        #[derive(Clone, PartialEq, prost::Message)]
        struct ValueType {
            #[prost(int64, tag = "1")]
            a: i64,
            #[prost(int64, tag = "2")]
            b: i64,
        }
        #[derive(Clone, PartialEq, prost::Message)]
        struct Other {
            #[prost(message, repeated, tag = "1")]
            v: Vec<ValueType>,
            #[prost(bytes = "vec", tag = "2")]
            raw: Vec<u8>,
        }
        let data = Other { v: vec![ValueType { a: 3, b: 4 }], raw: vec![0xff, 0xfe] }.encode_to_vec();
        let e = import(data, &ImportOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Format { .. }));
        assert!(one_line(&e).contains("not a profiler capture"), "{e}");
        // A well-formed protobuf whose top-level messages are not planes.
        let data = Other { v: vec![ValueType { a: 3, b: 4 }], raw: vec![] }.encode_to_vec();
        let e = import(data, &ImportOptions::default()).unwrap_err();
        assert!(one_line(&e).contains("not a profiler capture"), "{e}");
    }

    #[test]
    fn a_truncated_capture_is_refused() {
        // Cut inside a plane (a cut exactly between two top-level fields, e.g. before the
        // trailing hostname, still parses: protobuf cannot tell).
        let data = capture(&two_threads());
        for cut in [data.len() / 2, data.len() - 10, 7] {
            let e = import(data[..cut].to_vec(), &ImportOptions::default()).unwrap_err();
            assert!(matches!(e, Error::Format { .. }));
            assert!(one_line(&e).contains("truncated"), "cut at {cut}: {e}");
        }
        let e = import(Vec::new(), &ImportOptions::default()).unwrap_err();
        assert!(one_line(&e).contains("empty"), "{e}");
    }

    #[test]
    fn a_corrupt_event_is_refused_naming_its_line() {
        // Host-plane lines are read by hand: an event whose metadata_id is cut off (a varint
        // with no last byte) inside an intact line, and a line cut inside an event.
        let plane = |line: Vec<u8>| {
            let host = proto::XPlaneLazy {
                name: "/host:CPU".into(),
                lines: vec![Bytes::from(line)],
                event_metadata: HashMap::from([(
                    1,
                    XEventMetadata { id: 1, name: "MemoryAllocation".into(), display_name: String::new() },
                )]),
                ..Default::default()
            };
            XSpaceRaw { planes: vec![Bytes::from(host.encode_to_vec())], errors: vec![], warnings: vec![], hostnames: vec![] }
                .encode_to_vec()
        };
        // name = "t" (field 2), then events (field 4): one of 1 byte, 0x08 0x80 (cut varint).
        let e = import(plane(vec![0x12, 1, b't', 0x22, 2, 0x08, 0x80]), &ImportOptions::default()).unwrap_err();
        assert!(one_line(&e).contains("truncated or corrupt profiler capture: an event on line t ends early"), "{e}");
        let e = import(plane(vec![0x12, 1, b't', 0x22, 5, 0x08, 0x01]), &ImportOptions::default()).unwrap_err();
        assert!(one_line(&e).contains("a line of plane /host:CPU ends early"), "{e}");
        // A line name that is not UTF-8.
        let e = import(plane(vec![0x12, 1, 0xff]), &ImportOptions::default()).unwrap_err();
        assert!(one_line(&e).contains("not a profiler capture") && one_line(&e).contains("not UTF-8"), "{e}");
    }

    #[test]
    fn a_capture_without_memory_events_is_refused() {
        // Lines with ordinary events only.
        let e = import(capture(&[(1, vec![]), (2, vec![])]), &ImportOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Format { .. }));
        let m = one_line(&e);
        assert!(m.contains("no memory events") && m.contains("2 host events"), "{m}");
        // No host plane at all.
        let gpu = XPlane {
            id: 2,
            name: "/device:GPU:0".into(),
            lines: vec![],
            event_metadata: HashMap::new(),
            stat_metadata: HashMap::new(),
            stats: vec![],
        };
        let space = XSpaceRaw { planes: vec![Bytes::from(gpu.encode_to_vec())], errors: vec![], warnings: vec![], hostnames: vec![] };
        let e = import(space.encode_to_vec(), &ImportOptions::default()).unwrap_err();
        assert!(one_line(&e).contains("no memory events"), "{e}");
    }

    #[test]
    fn load_detects_compressed_captures_and_profile_directories() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("allocreplay-xplane-{}", std::process::id()));
        let run = dir.join("plugins").join("profile").join("2026_01_01_00_00_00");
        std::fs::create_dir_all(&run).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&capture(&two_threads())).unwrap();
        std::fs::write(run.join("host.xplane.pb.gz"), gz.finish().unwrap()).unwrap();
        // The log directory, the profile directory and the run directory all find it.
        for p in [dir.clone(), dir.join("plugins").join("profile"), run.clone()] {
            let t = crate::import::load(&p, &ImportOptions::default()).unwrap();
            assert_eq!(t.metadata.source, "xplane");
            assert_eq!(t.num_events(), 6);
        }
        // Two hosts in a run: say which.
        std::fs::write(run.join("other.xplane.pb"), capture(&two_threads())).unwrap();
        match crate::import::load(&dir, &ImportOptions::default()) {
            Err(Error::InvalidInput { message: m, .. }) => assert!(m.contains("host.xplane.pb.gz") && m.contains("other.xplane.pb"), "{m}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A profiler started late: a real capture's main allocator without its first `skip`
    /// events (in chain order), rebuilt as a capture and imported: what the cut-off part left
    /// live becomes seeds. Returns the trace and the number of events kept.
    fn late_start(path: &str, skip: usize) -> (Trace, usize) {
        let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces")).join(path);
        assert!(p.exists(), "fixture missing: {}", p.display());
        let data = crate::import::compression::decompress(&p, std::fs::read(&p).unwrap()).unwrap();
        let mut cap = events::parse(&p, data).unwrap();
        let s = cap.summaries().into_iter().max_by_key(|s| s.events).unwrap();
        let mut evs = cap.take_events(s.index);
        events::order_by_chain(&mut evs);
        let name: &'static str = match s.name.as_str() {
            "GPU_0_bfc" => "GPU_0_bfc",
            "bfc_cpu_allocator_for_gpu" => "bfc_cpu_allocator_for_gpu",
            other => panic!("unexpected allocator {other}"),
        };
        let kept: Vec<Ev> = evs[skip..]
            .iter()
            .map(|e| Ev {
                alloc: e.alloc,
                time_ns: (e.time_ps / 1000) as i64 + 1000,
                requested: e.requested,
                chunk: e.chunk,
                addr: e.addr,
                in_use: e.in_use,
                allocator: name,
            })
            .collect();
        let n = kept.len();
        (import(capture(&[(1, kept)]), &ImportOptions::default()).unwrap(), n)
    }

    #[test]
    fn a_late_start_of_a_growing_allocator_replays_exactly() {
        // kerascnn (TF's CPU BFC, growing regions) cut at three points. The seeds give the
        // bytes in use when the window opens; the regions that held them are rebuilt from the
        // runs of contiguous chunks around them, and buffers live throughout the window fill
        // the gaps between chunks: every later decision is the recorded one.
        for skip in [500, 2000, 4000] {
            let (t, n) = late_start("tf/kerascnn__bfc.xplane.pb", skip);
            assert!(t.metadata.seeded);
            let v = crate::validate::bfc::validate_bfc(&t, 0, Some("bfc:allow_growth=true,memory_limit=64GiB")).unwrap();
            assert_eq!(v.events, n);
            assert_eq!((v.chunk_match, v.in_use_match), (1.0, 1.0), "skip {skip}: {v:?}");
            assert_eq!(v.peak_in_use_replayed, 165_345_280, "the full run's peak is inside every window");
        }
    }

    #[test]
    fn a_late_start_of_a_preallocated_allocator_replays_exactly() {
        // jaxlm__default (one preallocated region) cut at three points: the seeds sit in the one
        // region, which starts at the lowest address the trace shows; the rest is decided by
        // best fit inside it, as in the full run.
        for skip in [300, 1000, 1500, 2000, 3000] {
            let (t, n) = late_start("jax/jaxlm__default.xplane.pb.xz", skip);
            let v = crate::validate::bfc::validate_bfc(&t, 0, Some("bfc:allow_growth=false,memory_limit=112583507968")).unwrap();
            assert_eq!(v.events, n);
            assert_eq!((v.chunk_match, v.in_use_match), (1.0, 1.0), "skip {skip}: {v:?}");
        }
    }
}
