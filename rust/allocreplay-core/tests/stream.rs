//! Issue #12: an `.arrow` trace streamed from its memory map, batch by batch
//! (`MappedTrace`, `replay::replay` of a `MappedTrace`), gives what the same trace loaded whole gives:
//! the checks, `info`, and every replay table.

mod common;
use common::Scratch;
use std::path::{Path, PathBuf};

use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::replay::{self, ReplayRequest};
use allocreplay_core::trace::info::trace_info;
use allocreplay_core::trace::{
    read_arrow, tile, tile_to_file, write_arrow, Action, DeviceInfo, EventRow, FrameTable, MappedTrace, Trace, TraceBuilder, TraceMetadata,
};
use allocreplay_core::units::Capacity;
use arrow_array::RecordBatch;

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(rel)
}

fn tmp(name: &str) -> Scratch {
    Scratch::file("stream", name)
}

/// The four result tables, the summary without its wall-clock column.
fn tables(runs: &[replay::Run]) -> Vec<RecordBatch> {
    let s = replay::summary_batch(runs);
    let keep: Vec<usize> = (0..s.num_columns()).filter(|&i| s.schema().field(i).name() != "replay_seconds").collect();
    vec![s.project(&keep).unwrap(), replay::timeline_batch(runs), replay::segments_batch(runs), replay::placements_batch(runs)]
}

/// Replays `path` loaded whole and streamed, under every online policy, and asserts equal results.
/// The number of policy runs that met an OOM.
fn assert_streams_as_loaded(path: &Path, capacities: &[Option<Capacity>], timeline_points: &[usize]) -> usize {
    let loaded = load(path, &ImportOptions::default()).unwrap();
    let mapped = MappedTrace::open(path).unwrap();
    assert_eq!(mapped.num_events(), loaded.num_events());
    assert_eq!(*mapped.info(), trace_info(&loaded), "{}", path.display());
    let mut ooms = 0;
    let policies: Vec<String> =
        ["pytorch", "pytorch:expandable_segments:True", "bfc", "cuda-async", "cuda-malloc", "managed"].map(String::from).to_vec();
    for &capacity in capacities {
        for &timeline_points in timeline_points {
            let req =
                ReplayRequest { policies: policies.clone(), capacity, timeline_points, placements: true, threads: 2, ..Default::default() };
            let whole = replay::replay(&loaded, &req).unwrap();
            let streamed = replay::replay(&mapped, &req).unwrap();
            assert_eq!(tables(&whole), tables(&streamed), "{} capacity {capacity:?} points {timeline_points}", path.display());
            ooms += streamed.iter().filter(|r| r.replay.first_oom.is_some()).count();
        }
    }
    ooms
}

#[test]
fn a_multi_batch_tile_streams_as_it_replays_loaded() {
    // 3 x 1,832 events in batches of 1,000 rows: batches cut through the repetitions.
    let t = load(&repo("traces/two_streams__default.pickle.xz"), &ImportOptions::default()).unwrap();
    let path = tmp("two_streams_x3.arrow");
    assert_eq!(tile_to_file(&t, 3, &path, 1000).unwrap(), 3 * t.num_events() as u64);
    let mapped = MappedTrace::open(&path).unwrap();
    assert_eq!(mapped.num_batches(), (3 * t.num_events()).div_ceil(1000));
    // The file holds the trace `tile` makes in memory.
    assert!(read_arrow(&path).unwrap().same_as(&tile(&t, 3).unwrap()));
    // Unlimited; a capacity below the peak (OOMs: failed allocations whose frees are skipped).
    assert!(assert_streams_as_loaded(&path, &[None, Some(Capacity::Bytes(1 << 30))], &[2000, 7, 0]) > 0);
}

#[test]
fn single_batch_files_stream_as_they_replay_loaded() {
    // A recorded OOM; a capture of two streams with its segments; one device of a DDP run.
    for name in ["traces/torch_oom.arrow", "traces/torch_train.arrow", "traces/torch_ddp.dev1.arrow"] {
        let ooms = assert_streams_as_loaded(&repo(name), &[None], &[2000]);
        assert_eq!(ooms > 0, name.contains("oom"), "{name}");
    }
}

fn two_device_trace(double_free: bool) -> Trace {
    let mut b = TraceBuilder::default();
    let mut push = |action, id, size, device, t| {
        let mut r = EventRow::new(action, size);
        r.alloc_id = Some(id);
        r.device = device;
        r.time_ns = Some(t);
        b.push(&r);
    };
    for k in 0..50u64 {
        push(Action::Alloc, 2 * k, (k + 1) << 20, (k % 2) as i32, 10 * k as i64);
        push(Action::Alloc, 2 * k + 1, 3 << 20, (k % 2) as i32, 10 * k as i64 + 1);
        push(Action::FreeCompleted, 2 * k, (k + 1) << 20, (k % 2) as i32, 10 * k as i64 + 2);
    }
    if double_free {
        push(Action::FreeCompleted, 40, 21 << 20, 0, 1000);
    }
    let mut md = TraceMetadata::new("test");
    md.devices = (0..2).map(|index| DeviceInfo { index, total_memory: Some(1 << 30), ..Default::default() }).collect();
    b.finish(md, FrameTable::default()).unwrap()
}

#[test]
fn two_devices_in_small_batches() {
    let path = tmp("two_devices.arrow");
    tile_to_file(&two_device_trace(false), 4, &path, 16).unwrap();
    let cap = Some(Capacity::Bytes(64 << 20));
    assert!(assert_streams_as_loaded(&path, &[None, cap], &[2000, 5]) > 0);
}

#[test]
fn a_streamed_check_fails_as_the_loaded_one() {
    // A double free in the last batch: the error names the event that freed the id first,
    // which the streamed check (one bit per freed id) finds again.
    let path = tmp("double_free.arrow");
    tile_to_file(&two_device_trace(true), 1, &path, 16).unwrap();
    let loaded = load(&path, &ImportOptions::default()).unwrap_err().to_string();
    let streamed = MappedTrace::open(&path).unwrap_err().to_string();
    assert!(loaded.contains("a double free: alloc_id 40 was freed at event 62"), "{loaded}");
    assert_eq!(streamed, loaded);
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let path = tmp("whole.arrow");
    write_arrow(&two_device_trace(false), &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    for (name, content) in
        [("empty.arrow", &bytes[..0]), ("truncated.arrow", &bytes[..bytes.len() - 20]), ("half.arrow", &bytes[..bytes.len() / 2])]
    {
        let p = tmp(name);
        std::fs::write(&p, content).unwrap();
        let e = MappedTrace::open(&p).unwrap_err().to_string();
        assert!(e.starts_with(&p.display().to_string()), "{e}");
    }
    let e = MappedTrace::open(&tmp("missing.arrow")).unwrap_err().to_string();
    assert!(e.contains("missing.arrow"), "{e}");
    // The offline bounds need the whole trace.
    let mapped = MappedTrace::open(&path).unwrap();
    let req = ReplayRequest { policies: vec!["pytorch".into(), "offline".into()], ..Default::default() };
    let e = replay::replay(&mapped, &req).unwrap_err();
    assert!(e.to_string().contains("offline"), "{e}");
}
