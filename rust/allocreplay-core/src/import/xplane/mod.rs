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
/// Internals, for examples and benches.
#[doc(hidden)]
pub mod events_api {
    pub use super::events::*;
}
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
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains(".xplane.pb"))
}

/// Imports the capture in `data` (already decompressed), read from `path`.
pub fn import_xplane(path: &Path, data: Vec<u8>, opts: &ImportOptions) -> Result<Trace> {
    let capture = events::parse(path, data)?;
    build_trace(path, capture, opts)
}

/// A profile directory: `<logdir>`, `<logdir>/plugins/profile`, or one run
/// `<logdir>/plugins/profile/<run>/`. The newest run (runs are named by their start time) is
/// used; a run must hold exactly one `*.xplane.pb` (one per host).
pub fn find_in_profile_dir(dir: &Path) -> Result<PathBuf> {
    let here = xplane_files(dir)?;
    if !here.is_empty() {
        return one_capture(dir, here);
    }
    let profile = if dir.join("plugins").join("profile").is_dir() {
        dir.join("plugins").join("profile")
    } else {
        dir.to_path_buf()
    };
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
    Err(Error::InvalidArgument(format!(
        "{}: holds {} captures (one per host): {}; name the file to import",
        dir.display(),
        files.len(),
        names.join(", ")
    )))
}

/// Names the allocator to import: the one asked for, else the device allocator with most
/// events, else the allocator with most events.
fn choose_allocator<'a>(path: &Path, summaries: &'a [AllocatorSummary], asked: Option<&str>) -> Result<&'a AllocatorSummary> {
    let listing = || {
        summaries.iter().map(|s| format!("{} ({} events)", s.name, s.events)).collect::<Vec<_>>().join(", ")
    };
    if let Some(name) = asked {
        return summaries.iter().find(|s| s.name == name).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{}: no allocator named '{name}' in the capture; its allocators: {}",
                path.display(),
                listing()
            ))
        });
    }
    let best = |device_only: bool| {
        summaries.iter().filter(|s| !device_only || s.is_device()).max_by(|a, b| a.events.cmp(&b.events).then(b.name.cmp(&a.name)))
    };
    Ok(best(true).or_else(|| best(false)).expect("at least one allocator"))
}

/// The BFC stats of the capture's `.json` (`memory_stats` of `jax.Device`), if any.
fn json_u64(v: &serde_json::Value, key: &str) -> Option<u64> {
    v.get(key).and_then(|x| x.as_u64().or_else(|| x.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)))
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
    let mut out = TraceBuilder::with_capacity(n);
    let mut chunk = UInt64Builder::with_capacity(n);
    let mut in_use = UInt64Builder::with_capacity(n);
    let mut peak = UInt64Builder::with_capacity(n);
    let mut frag = Float64Builder::with_capacity(n);
    let mut op = StringBuilder::new();
    let mut shape = StringBuilder::new();
    let mut data_type = StringBuilder::new();
    let mut region_type = StringBuilder::new();
    let mut step = Int64Builder::with_capacity(n);
    let mut thread = Int64Builder::with_capacity(n);
    let device = chosen.device_ordinal();
    let mut next_id: u64 = 0;
    let mut live_id: HashMap<u64, u64> = HashMap::with_capacity(1024);
    let strings = &capture.strings;
    let s = |id: Option<u32>| id.map(|i| strings[i as usize].as_str());

    let mut push_seed = |out: &mut TraceBuilder, size: u64, chunk_size: u64, addr: Option<u64>, next_id: &mut u64| {
        let mut r = EventRow::new(Action::Alloc, size);
        r.alloc_id = Some(*next_id);
        *next_id += 1;
        r.addr = addr;
        r.device = device;
        r.seed = true;
        out.push(&r);
        chunk.append_value(chunk_size);
        in_use.append_null();
        peak.append_null();
        frag.append_null();
        op.append_null();
        shape.append_null();
        data_type.append_null();
        region_type.append_null();
        step.append_null();
        thread.append_null();
    };
    // Seeds: the live buffers the window's frees reveal, lowest address first, then the
    // in-use bytes nothing in the window accounts for.
    for &(addr, requested, size) in &seeds.live {
        live_id.insert(addr, next_id);
        push_seed(&mut out, requested, size, Some(addr), &mut next_id);
    }
    if seeds.unknown_bytes > 0 {
        push_seed(&mut out, seeds.unknown_bytes, seeds.unknown_bytes, None, &mut next_id);
    }
    for e in &evs {
        let mut r = EventRow::new(if e.alloc { Action::Alloc } else { Action::FreeCompleted }, e.requested);
        r.addr = Some(e.addr);
        r.device = device;
        r.time_ns = Some(e.time_ps.div_euclid(1000));
        if e.alloc {
            r.alloc_id = Some(next_id);
            live_id.insert(e.addr, next_id);
            next_id += 1;
        } else {
            r.alloc_id = live_id.remove(&e.addr);
        }
        out.push(&r);
        chunk.append_value(e.chunk);
        in_use.append_value(e.in_use);
        peak.append_option(e.peak);
        frag.append_option(e.fragmentation);
        op.append_option(s(e.op));
        shape.append_option(s(e.shape));
        data_type.append_option(e.data_type.filter(|&v| v != 0).map(events::data_type_name).as_deref());
        region_type.append_option(s(e.region_type));
        step.append_option(e.step);
        thread.append_value(e.thread);
    }
    let mut add = |name: &str, a: ArrayRef| out.add_column(optional_field(name).expect("known optional column"), a);
    add("chunk_bytes", Arc::new(chunk.finish()));
    add("in_use_bytes", Arc::new(in_use.finish()));
    add("peak_in_use_bytes", Arc::new(peak.finish()));
    add("fragmentation", Arc::new(frag.finish()));
    add("op", Arc::new(op.finish()));
    add("shape", Arc::new(shape.finish()));
    add("data_type", Arc::new(data_type.finish()));
    add("region_type", Arc::new(region_type.finish()));
    add("step", Arc::new(step.finish()));
    add("thread_id", Arc::new(thread.finish()));

    // --- Metadata.
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
    metadata.extra.insert(
        "allocators".into(),
        serde_json::Value::Object(summaries.iter().map(|s| (s.name.clone(), s.events.into())).collect()),
    );
    metadata.extra.insert("ordering".into(), serde_json::to_value(&ordering).expect("serializes"));
    metadata.extra.insert("seed".into(), serde_json::json!({
        "buffers": seeds.live.len(),
        "buffer_bytes": seeds.live.iter().map(|&(_, _, c)| c).sum::<u64>(),
        "unknown_bytes": seeds.unknown_bytes,
        "starting_in_use_bytes": seeds.starting_in_use,
    }));
    if let Some(h) = &capture.hostname {
        metadata.extra.insert("hostname".into(), h.clone().into());
    }

    if let Some((meta_path, m)) = read_meta_json(opts, path)? {
        if metadata.source_version.is_none() {
            metadata.source_version = ["jax", "tf", "tensorflow"].iter().find_map(|k| m.get(*k)).and_then(|v| v.as_str()).map(str::to_string);
        }
        if info.total_memory.is_none() {
            info.total_memory = json_u64(&m, "device_total_bytes");
        }
        if let Some(st) = m.get("memory_stats").filter(|v| v.is_object()) {
            // jax `Device.memory_stats()` of the device allocator: bytes_limit is its
            // memory_limit (what the trace's bytes_available implies too).
            if chosen.is_device() {
                if let Some(limit) = json_u64(st, "bytes_limit") {
                    info.memory_cap = Some(limit);
                }
                let mut stats = serde_json::Map::new();
                stats.insert(device.to_string(), st.clone());
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
    }
    if let Some(f) = capture.framework {
        bfc.insert("framework".into(), f.into());
    }
    metadata.allocator_settings = serde_json::Value::Object(bfc);
    metadata.devices = vec![info];
    out.finish(metadata, FrameTable::default())
}

/// What the importer found, for `--allocator` help and `info`: allocator name -> events.
pub fn allocators_in(path: &Path, data: Vec<u8>) -> Result<BTreeMap<String, usize>> {
    let capture = events::parse(path, data)?;
    Ok(capture.summaries().into_iter().map(|s| (s.name, s.events)).collect())
}
