//! CUDA-level policies on real traces. Truth:
//! - `gpt2_train__async.json` (shared/traces/pytorch): gpt2_train under
//!   `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`, peak reserved 16,642,998,272 bytes, peak
//!   allocated 15,378,173,176; its requests are those of `gpt2_train__default` (same seed).
//! - traces/cuda/ (captured on the same kind of machine for this calibration, see
//!   docs/cuda-policies.md): default-allocator traces of resnet50_train, llama_generate,
//!   bert_finetune, vit_train and t5_generate and the memory_stats of the same workloads under
//!   cudaMallocAsync; two_streams under cudaMallocAsync.
//! - tests/data/realruns-h200-580.159.txt: the peak reserved of every repeated real
//!   cudaMallocAsync run of the seven workloads.
//! - tests/data/replays-h200-580.159.txt: the same requests replayed on the GPU with
//!   cudaMalloc/cudaFree (device usage from cudaMemGetInfo).

use allocreplay_core::device::Stats;
use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry::build;
use std::path::{Path, PathBuf};

fn shared(name: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/pytorch")).join(name);
    assert!(p.exists(), "fixture missing: {}", p.display());
    p
}

fn repo(rel: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(rel);
    assert!(p.exists(), "fixture missing: {}", p.display());
    p
}

fn stat(json: &Path, key: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    v["memory_stats"][key].as_u64().unwrap_or_else(|| panic!("{} has no memory_stats[{key}]", json.display()))
}

fn replay(trace: &Path, spec: &str, capacity: Option<u64>) -> Stats {
    let t = load(trace, &ImportOptions::default()).unwrap();
    let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(0), capacity };
    let mut p = build(spec, &ctx).unwrap();
    let opts = ReplayOptions { capacity, ..Default::default() };
    replay_device(&t, 0, p.as_mut(), &opts).stats
}

fn rel_err(predicted: u64, real: u64) -> f64 {
    (predicted as f64 - real as f64).abs() / real as f64
}

/// A `REPLAY malloc <file> peak_used=N` line of the GPU replays.
fn measured_malloc_peak(workload: &str) -> u64 {
    let text = std::fs::read_to_string(repo("tests/data/replays-h200-580.159.txt")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("REPLAY malloc") && l.contains(workload))
        .unwrap_or_else(|| panic!("no malloc replay of {workload}"));
    line.rsplit("peak_used=").next().unwrap().trim().parse().unwrap()
}

#[test]
fn gpt2_cuda_async_peak_reserved_within_3_percent_of_the_real_run() {
    let real = shared("gpt2_train__async.json");
    let s = replay(&shared("gpt2_train__default.pickle.xz"), "cuda-async", None);
    let real_reserved = stat(&real, "reserved_bytes.all.peak");
    assert_eq!(real_reserved, 16_642_998_272);
    let err = rel_err(s.peak_reserved, real_reserved);
    eprintln!("gpt2_train cuda-async: predicted {} vs real {real_reserved} ({:.2}%)", s.peak_reserved, err * 100.0);
    assert!(err <= 0.03, "predicted {} vs real {real_reserved}", s.peak_reserved);
    // Used bytes are the unrounded requests, freed at cudaFreeAsync: exactly the real peak.
    assert_eq!(s.peak_allocated, stat(&real, "allocated_bytes.all.peak"));
    // Reserved memory comes in 32 MiB chunks.
    assert_eq!(s.peak_reserved % (32 << 20), 0);
}

/// A `REPLAY async <file> peak_reserved=N` line of the GPU replays (the same requests through
/// cudaMallocAsync on an idle GPU).
fn measured_async_peak(workload: &str) -> u64 {
    let text = std::fs::read_to_string(repo("tests/data/replays-h200-580.159.txt")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("REPLAY async") && l.contains(&format!("{workload}__default")))
        .unwrap_or_else(|| panic!("no async replay of {workload}"));
    line.split("peak_reserved=").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
}

/// Peak reserved bytes of every real `backend:cudaMallocAsync` run of a workload (the same
/// program and seed run 3-7 times: the driver's result varies with GPU progress).
fn real_async_runs(workload: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(repo("tests/data/realruns-h200-580.159.txt")).unwrap();
    let runs: Vec<u64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[0] == workload).then(|| f[2].parse().unwrap())
        })
        .collect();
    assert!(runs.len() >= 3, "{workload}: fewer than 3 real runs");
    runs
}

fn median(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    }
}

/// The nine workloads with real cudaMallocAsync runs: each one's requests (a default-allocator
/// trace of the same program and seed) and the async run whose used bytes are checked.
fn async_workloads() -> Vec<(&'static str, PathBuf, PathBuf)> {
    vec![
        ("gpt2_train", shared("gpt2_train__default.pickle.xz"), shared("gpt2_train__async.json")),
        ("resnet50_train", repo("traces/cuda/resnet50_train__default.pickle.xz"), repo("traces/cuda/resnet50_train__async.json")),
        ("two_streams", repo("traces/two_streams__default.pickle.xz"), repo("traces/cuda/two_streams__async.json")),
        ("llama_generate", repo("traces/cuda/llama_generate__default.pickle.xz"), repo("traces/cuda/llama_generate__async.json")),
        ("bert_finetune", repo("traces/cuda/bert_finetune__default.pickle.xz"), repo("traces/cuda/bert_finetune__async.json")),
        ("vit_train", repo("traces/cuda/vit_train__default.pickle.xz"), repo("traces/cuda/vit_train__async.json")),
        ("t5_generate", repo("traces/cuda/t5_generate__default.pickle.xz"), repo("traces/cuda/t5_generate__async.json")),
        ("gpt2_generate", repo("traces/cuda/gpt2_generate__default.pickle.xz"), repo("traces/cuda/gpt2_generate__async.json")),
        ("convnext_train", repo("traces/cuda/convnext_train__default.pickle.xz"), repo("traces/cuda/convnext_train__async.json")),
    ]
}

/// The model against the median of the repeated real runs of nine workloads (gpt2_train was
/// the calibration target; three workloads captured later overturned the first placement rule;
/// gpt2_generate and convnext_train were captured after the final rule was chosen and never
/// used to choose it, docs/cuda-policies.md). The bounds are the accuracy measured there, kept
/// so that a regression shows: mean |error| <= 3%, every workload within 7%, and within 3% on
/// at least six of the nine. Used bytes are the requests: exact.
#[test]
fn cuda_async_against_the_repeated_real_runs_of_nine_workloads() {
    let mut errors = Vec::new();
    for (name, requests, async_json) in async_workloads() {
        let s = replay(&requests, "cuda-async", None);
        let med = median(real_async_runs(name));
        let err = (s.peak_reserved as f64 - med) / med;
        eprintln!("{name:>15} cuda-async {:>14} vs median of real runs {med:>14.0}: {:+.2}%", s.peak_reserved, err * 100.0);
        assert_eq!(s.peak_allocated, stat(&async_json, "allocated_bytes.all.peak"), "{name}: used bytes");
        assert_eq!(s.peak_reserved % (32 << 20), 0, "{name}: whole chunks");
        errors.push((name, err.abs()));
    }
    let mean = errors.iter().map(|e| e.1).sum::<f64>() / errors.len() as f64;
    assert!(mean <= 0.03, "mean |error| {:.2}%", mean * 100.0);
    for (name, e) in &errors {
        assert!(*e <= 0.07, "{name}: {:.2}%", e * 100.0);
    }
    let within = errors.iter().filter(|e| e.1 <= 0.03).count();
    assert!(within >= 6, "within 3% on {within} of 9: {errors:?}");
}

/// Where the driver's own result on an idle GPU is known (the same requests replayed through
/// cudaMallocAsync, tests/data/replays-h200-580.159.txt), the model gives it to the byte
/// on resnet50_train, vit_train, t5_generate and gpt2_generate.
#[test]
fn cuda_async_equals_the_gpu_replay_on_four_workloads() {
    for name in ["resnet50_train", "vit_train", "t5_generate", "gpt2_generate"] {
        let s = replay(&repo(&format!("traces/cuda/{name}__default.pickle.xz")), "cuda-async", None);
        assert_eq!(s.peak_reserved, measured_async_peak(name), "{name}");
    }
}

#[test]
fn cuda_malloc_matches_the_gpu_replays_to_the_byte() {
    let g = replay(&shared("gpt2_train__default.pickle.xz"), "cuda-malloc", None);
    assert_eq!(g.peak_reserved, measured_malloc_peak("gpt2_train"));
    // One cudaMalloc per non-empty request and one cudaFree per free.
    assert_eq!(g.num_device_alloc, g.num_device_free + 3, "gpt2_train ends with 3 live tensors (active.all.current)");
    let t = replay(&repo("traces/two_streams__default.pickle.xz"), "cuda-malloc", None);
    assert_eq!(t.peak_reserved, measured_malloc_peak("two_streams"));
}

#[test]
fn side_by_side_on_gpt2_shows_what_caching_buys() {
    let path = shared("gpt2_train__default.pickle.xz");
    let cached = replay(&path, "pytorch", None);
    let plain = replay(&path, "cuda-malloc", None);
    let pool = replay(&path, "cuda-async", None);
    // The caching allocator made 159 cudaMallocs in the real run (num_device_alloc).
    assert_eq!(cached.num_device_alloc, stat(&shared("gpt2_train__default.json"), "num_device_alloc"));
    assert!(plain.num_device_alloc > 100 * cached.num_device_alloc);
    assert!(pool.num_device_alloc < plain.num_device_alloc / 10);
    assert!(pool.peak_reserved < cached.peak_reserved);
}

#[test]
fn managed_under_a_cap_migrates_instead_of_failing() {
    let path = shared("gpt2_train__default.pickle.xz");
    let free_run = replay(&path, "managed", None);
    assert_eq!(free_run.pages_migrated, 0, "fits on the 140 GiB device");
    assert_eq!(free_run.num_ooms, 0);
    // Half the pages the run needs: no OOM, pages migrate, residency stays under the cap.
    let cap = free_run.peak_reserved / 2;
    let capped = replay(&path, "managed", Some(cap));
    assert_eq!(capped.num_ooms, 0);
    assert!(capped.peak_reserved <= cap);
    assert!(capped.pages_migrated > 0);
    assert_eq!(capped.bytes_migrated, capped.pages_migrated * (2 << 20));
    // The same cap under cudaMalloc fails.
    assert!(replay(&path, "cuda-malloc", Some(cap)).num_ooms > 0);
}

#[test]
fn specs_build_and_bad_options_are_named() {
    let t = load(&repo("traces/two_streams__default.pickle.xz"), &ImportOptions::default()).unwrap();
    let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(0), capacity: None };
    for spec in ["cuda-async", "cuda-async:release_threshold=0", "cuda-malloc", "managed", "managed:touch_on_free=false"] {
        assert!(build(spec, &ctx).is_ok(), "{spec}");
    }
    let e = build("cuda-async:threshold=1", &ctx).err().unwrap().to_string();
    assert!(e.contains("unknown option 'threshold' for cuda-async; options: release_threshold, preallocate, chunk_size"), "{e}");
    let e = build("cuda-malloc:x=1", &ctx).err().unwrap().to_string();
    assert!(e.contains("takes no options"), "{e}");
}

/// Out of sample (issue 13, item 2): eight workloads captured on 2026-12-01 after the model was
/// chosen (research/driver-probes/asyncheld/workloads.py; three real cudaMallocAsync runs each,
/// tests/data/realruns-h200-580.159.txt). Measured against the median real run: opt_generate
/// +9.4%, gptneox_generate 0.0%, efficientnet_train +1.5%, t5_train +14.6%, mistral_generate
/// +27.3%, qwen2_generate -12.8% (its own runs differ by 20%), mobilenet_train +0.7%, swin_train
/// +0.5%: mean |error| 8.3%, worst 27.3%. Issue 13 asks for <= 2% / <= 5%; the model does not
/// reach it (docs/cuda-policies.md, "Out of sample"). The bounds keep what it reaches, and
/// used bytes (the requests) are exact on every one.
#[test]
fn cuda_async_out_of_sample_on_eight_workloads_captured_after_the_fit() {
    let names = [
        "opt_generate",
        "gptneox_generate",
        "efficientnet_train",
        "t5_train",
        "mistral_generate",
        "qwen2_generate",
        "mobilenet_train",
        "swin_train",
    ];
    let mut errors = Vec::new();
    for name in names {
        let requests = repo(&format!("traces/cuda/{name}__default.pickle.xz"));
        let s = replay(&requests, "cuda-async", None);
        let med = median(real_async_runs(name));
        let err = (s.peak_reserved as f64 - med) / med;
        eprintln!("{name:>18} cuda-async {:>14} vs median of real runs {med:>14.0}: {:+.2}%", s.peak_reserved, err * 100.0);
        assert_eq!(
            s.peak_allocated,
            stat(&repo(&format!("traces/cuda/{name}__async.json")), "allocated_bytes.all.peak"),
            "{name}: used bytes"
        );
        errors.push((name, err.abs()));
    }
    let mean = errors.iter().map(|e| e.1).sum::<f64>() / errors.len() as f64;
    assert!(mean <= 0.085, "mean |error| {:.2}%", mean * 100.0);
    for (name, e) in &errors {
        assert!(*e <= 0.28, "{name}: {:.2}%", e * 100.0);
    }
    // The vision training workloads are within 2%.
    for (name, e) in errors.iter().filter(|e| ["efficientnet_train", "mobilenet_train", "swin_train"].contains(&e.0)) {
        assert!(*e <= 0.02, "{name}: {:.2}%", e * 100.0);
    }
}
