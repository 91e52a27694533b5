//! Peak reserved of `cuda-async` vs the real runs under `backend:cudaMallocAsync` (and the GPU
//! replays of the same requests) on the four calibration workloads:
//! `cargo run -p allocreplay-core --example cuda_async_table [SPEC]`.
use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::{build, PolicyContext};
use std::path::PathBuf;

fn main() {
    let spec = std::env::args().nth(1).unwrap_or_else(|| "cuda-async".into());
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let shared = root.join("../shared/traces/pytorch");
    let replays = std::fs::read_to_string(root.join("tools/driver-probes/replays-h200-580.159.txt")).expect("replays file");
    let cases = [
        ("gpt2_train", shared.join("gpt2_train__default.pickle.xz"), shared.join("gpt2_train__async.json")),
        ("resnet50_train", root.join("traces/cuda/resnet50_train__default.pickle.xz"), root.join("traces/cuda/resnet50_train__async.json")),
        ("two_streams", shared.join("two_streams__default.pickle.xz"), root.join("traces/cuda/two_streams__async.json")),
        ("llama_generate", root.join("traces/cuda/llama_generate__default.pickle.xz"), root.join("traces/cuda/llama_generate__async.json")),
    ];
    println!("| workload | real run | GPU replay | {spec} | vs real | vs replay |");
    println!("|---|---|---|---|---|---|");
    for (name, trace, json) in cases {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let real = v["memory_stats"]["reserved_bytes.all.peak"].as_u64().unwrap();
        let replay: u64 = replays
            .lines()
            .find(|l| l.starts_with("REPLAY async") && l.contains(&format!("{name}__default")))
            .and_then(|l| l.split("peak_reserved=").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let t = load(&trace, &ImportOptions::default()).unwrap();
        let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(0), capacity: None };
        let mut p = build(&spec, &ctx).unwrap();
        let s = replay_device(&t, 0, p.as_mut(), &ReplayOptions::default()).stats;
        let pct = |x: u64| 100.0 * (s.peak_reserved as f64 - x as f64) / x as f64;
        println!("| {name} | {real} | {replay} | {} | {:+.1}% | {:+.1}% |", s.peak_reserved, pct(real), pct(replay));
    }
}
