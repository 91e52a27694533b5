//! The PyTorch importer on the real captures in shared/traces/pytorch (see its README.md for the
//! recorded values quoted here). A missing fixture fails the test.

use std::path::PathBuf;

use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::trace::info::trace_info;
use allocreplay_core::trace::{read_arrow, write_arrow};

fn shared(name: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/pytorch")).join(name);
    assert!(p.is_file(), "missing fixture {} (shared/ must sit beside the repository)", p.display());
    p
}

#[test]
fn ring20k_seeds_state_and_reaches_the_full_runs_peak_reserved() {
    let t = load(&shared("gpt2_train__default_ring20k.pickle.xz"), &ImportOptions::default()).unwrap();
    let info = trace_info(&t);
    assert!(t.metadata.seeded);
    assert!(info.seed_segments > 0 && info.seed_allocs > 0, "{info:?}");
    // README table: 20000 trace entries (the ring buffer's size).
    assert_eq!(info.events - info.seed_allocs - info.seed_segments - count_seed_free_requests(&t), 20000);
    // gpt2_train__default_ring20k.json memory_stats["reserved_bytes.all.peak"] = 22733127680:
    // the seeded state plus the recorded segment events reach the full run's peak.
    assert_eq!(info.recorded_peak_reserved_bytes, Some(22_733_127_680));
    // Sidecar .json found automatically: the H200's total memory.
    assert_eq!(t.metadata.devices[0].total_memory, Some(150_109_880_320));
}

fn count_seed_free_requests(t: &allocreplay_core::Trace) -> usize {
    let c = t.columns();
    (0..t.num_events()).filter(|&i| c.seed.value(i) && c.action[i] == allocreplay_core::Action::FreeRequested as u8).count()
}

#[test]
fn full_history_peak_reserved_matches_memory_stats() {
    // gpt2_train__default.json / two_streams__default.json: reserved_bytes.all.peak.
    for (name, peak) in [("gpt2_train__default.pickle.xz", 22_733_127_680u64), ("two_streams__default.pickle.xz", 3_011_510_272)] {
        let t = load(&shared(name), &ImportOptions::default()).unwrap();
        let info = trace_info(&t);
        assert!(!t.metadata.seeded, "{name}");
        assert_eq!(info.recorded_peak_reserved_bytes, Some(peak), "{name}");
    }
}

#[test]
fn arrow_round_trip_is_identical() {
    let t = load(&shared("compiled_mlp__default.pickle.xz"), &ImportOptions::default()).unwrap();
    let dir = std::env::temp_dir().join(format!("allocreplay-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("t.arrow");
    write_arrow(&t, &out).unwrap();
    let back = read_arrow(&out).unwrap();
    assert!(t.same_as(&back));
    // compiled_mlp uses a CUDA-graph private pool (segment_pool_id (0, 1)).
    assert!(back.metadata.pools.iter().any(|p| p.id == vec![0, 1] && p.kind == "private"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn mutated_real_snapshots_give_errors_not_panics() {
    // Random byte changes to a real capture (decompressed): each import succeeds or returns an
    // error; none may panic.
    use allocreplay_core::import::compression::decompress;
    use allocreplay_core::import::pytorch::import_snapshot;
    let path = shared("two_streams__default.pickle.xz");
    let data = decompress(&path, std::fs::read(&path).unwrap()).unwrap();
    let fake = std::path::Path::new("mutated.pickle");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut errors = 0;
    for _ in 0..300 {
        let mut m = data.clone();
        for _ in 0..4 {
            let i = (next() % m.len() as u64) as usize;
            m[i] = next() as u8;
        }
        if import_snapshot(fake, &m, &ImportOptions::default()).is_err() {
            errors += 1;
        }
    }
    // Most single-byte changes land in numbers and still import; some must be refused.
    assert!(errors > 0);
}

fn repo_trace(name: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces")).join(name);
    assert!(p.is_file(), "missing fixture {}", p.display());
    p
}

/// The `empty_cache` events of a trace, each with the action of the event after it.
fn empty_caches(t: &allocreplay_core::Trace) -> Vec<u8> {
    let c = t.columns();
    (0..t.num_events()).filter(|&i| c.action[i] == allocreplay_core::Action::EmptyCache as u8).map(|i| c.action[i + 1]).collect()
}

#[test]
fn empty_cache_calls_are_inferred_where_the_program_made_them() {
    // traces/emptycache_lm: research/driver-probes/midrun.py `emptycache` calls
    // torch.cuda.empty_cache() after steps 2 and 4 of 6, each time with cached segments to free.
    let t = load(&repo_trace("emptycache_lm.pickle.xz"), &ImportOptions::default()).unwrap();
    let ec = empty_caches(&t);
    assert_eq!(ec, vec![allocreplay_core::Action::SegmentFree as u8; 2], "each before its burst of segment frees");
    assert_eq!(trace_info(&t).empty_caches, 2);
}

#[test]
fn releases_inside_malloc_are_not_taken_for_empty_cache() {
    // None of the shared captures' scripts calls empty_cache; the capped runs free cached
    // segments inside malloc (retries: gpt2_train__default_capped's 3) and the gc06 run through
    // garbage_collect_cached_blocks: those frees are followed by the malloc's segment_alloc.
    for name in [
        "gpt2_train__default_capped",
        "gpt2_train__gc06_capped",
        "gpt2_train__split128",
        "gpt2_train__expandable_capped",
        "compiled_mlp__default",
    ] {
        let t = load(&shared(&format!("{name}.pickle.xz")), &ImportOptions::default()).unwrap();
        assert!(empty_caches(&t).is_empty(), "{name}");
    }
}

#[test]
fn a_mid_run_recording_starts_from_the_state_the_run_had_when_recording_began() {
    // traces/midrun_lm: warm-up, empty_cache, then _record_memory_history. Its .json holds
    // memory_stats() taken just before recording began: 156 allocations of 323,379,200 bytes
    // in 29 segments of 536,870,912 bytes. The seeds rebuilt from the history and the final
    // segments must be exactly that state.
    let t = load(&repo_trace("midrun_lm.pickle.xz"), &ImportOptions::default()).unwrap();
    assert!(t.metadata.seeded);
    let c = t.columns();
    let (mut allocs, mut alloc_bytes, mut segs, mut seg_bytes) = (0, 0u64, 0, 0u64);
    for i in (0..t.num_events()).filter(|&i| c.seed.value(i)) {
        match allocreplay_core::Action::from_code(c.action[i]).unwrap() {
            allocreplay_core::Action::Alloc => {
                allocs += 1;
                alloc_bytes += c.size[i];
            }
            allocreplay_core::Action::SegmentAlloc => {
                segs += 1;
                seg_bytes += c.size[i];
            }
            _ => {}
        }
    }
    assert_eq!((allocs, segs, seg_bytes), (156, 29, 536_870_912));
    assert!(alloc_bytes <= 323_379_200, "{alloc_bytes}");
    // allocated_bytes counts blocks as the allocator cut them: replay the seeds and read the
    // allocated bytes after the last one.
    let last_seed = (0..t.num_events()).filter(|&i| c.seed.value(i)).max().unwrap();
    let md = &t.metadata;
    let ctx = allocreplay_core::policy::PolicyContext { metadata: md, device: md.device(0), capacity: None };
    let mut p = allocreplay_core::registry::build("pytorch:recorded", &ctx).unwrap();
    let opts = allocreplay_core::engine::ReplayOptions { timeline: Some(0), ..Default::default() };
    let r = allocreplay_core::engine::replay_device(&t, 0, p.as_mut(), &opts);
    let at_start = r.timeline.iter().rfind(|pt| pt.event <= last_seed).unwrap();
    assert_eq!((at_start.allocated, at_start.reserved), (323_379_200, 536_870_912));
}

/// The parser's records (and their straight-line decoding of Python's entry opcodes) read every
/// real capture as the plain parser does: the same JSON for the whole snapshot.
#[test]
fn records_read_every_capture_as_plain_dicts() {
    use allocreplay_core::import::compression::decompress;
    use allocreplay_core::import::pickle::{parse, parse_with_records};
    let keys = ["action", "addr", "size", "stream", "time_us", "frames", "compile_context", "user_metadata"];
    let dir = shared("gpt2_train__default.pickle.xz").parent().unwrap().to_path_buf();
    let mut checked = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if !path.to_string_lossy().ends_with(".pickle.xz") {
            continue;
        }
        let data = decompress(&path, std::fs::read(&path).unwrap()).unwrap();
        let (plain, rec) = (parse(&data).unwrap(), parse_with_records(&data, &keys).unwrap());
        assert_eq!(plain.to_json(plain.root).unwrap(), rec.to_json(rec.root).unwrap(), "{}", path.display());
        let traces = rec.list(rec.get(rec.root, "device_traces").unwrap()).unwrap();
        let entries: Vec<_> = traces.iter().flat_map(|&t| rec.list(t).unwrap().to_vec()).collect();
        assert!(entries.iter().all(|&e| rec.record(e).is_some()), "{}: every entry a record", path.display());
        checked += 1;
    }
    assert!(checked >= 10, "{checked} captures");
}
