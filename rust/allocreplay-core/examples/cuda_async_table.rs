//! Peak reserved of `cuda-async` against the real runs under `backend:cudaMallocAsync` (their
//! median, over 3-7 runs of the same program) and the GPU replays of the same requests, on the
//! nine workloads of docs/cuda-policies.md:
//! `cargo run -p allocreplay-core --example cuda_async_table [SPEC]`.
use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry::build;
use std::path::PathBuf;

fn main() {
    let spec = std::env::args().nth(1).unwrap_or_else(|| "cuda-async".into());
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let shared = root.join("../shared/traces/pytorch");
    let data = root.join("tests/data");
    let replays = std::fs::read_to_string(data.join("replays-h200-580.159.txt")).expect("replays file");
    let runs = std::fs::read_to_string(data.join("realruns-h200-580.159.txt")).expect("real runs file");
    let cuda = root.join("traces/cuda");
    let cases = [
        ("gpt2_train", shared.join("gpt2_train__default.pickle.xz")),
        ("resnet50_train", cuda.join("resnet50_train__default.pickle.xz")),
        ("two_streams", root.join("traces/two_streams__default.pickle.xz")),
        ("llama_generate", cuda.join("llama_generate__default.pickle.xz")),
        ("bert_finetune", cuda.join("bert_finetune__default.pickle.xz")),
        ("vit_train", cuda.join("vit_train__default.pickle.xz")),
        ("t5_generate", cuda.join("t5_generate__default.pickle.xz")),
        ("gpt2_generate", cuda.join("gpt2_generate__default.pickle.xz")),
        ("convnext_train", cuda.join("convnext_train__default.pickle.xz")),
    ];
    println!("| workload | real runs | median | GPU replay | {spec} | vs median | vs replay |");
    println!("|---|---|---|---|---|---|---|");
    for (name, trace) in cases {
        let mut peaks: Vec<u64> = runs
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3 && f[0] == name).then(|| f[2].parse().unwrap())
            })
            .collect();
        peaks.sort_unstable();
        let n = peaks.len();
        let median = if n % 2 == 1 { peaks[n / 2] as f64 } else { (peaks[n / 2 - 1] + peaks[n / 2]) as f64 / 2.0 };
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
        let pct = |x: f64| 100.0 * (s.peak_reserved as f64 - x) / x;
        println!("| {name} | {n} | {median:.0} | {replay} | {} | {:+.1}% | {:+.1}% |", s.peak_reserved, pct(median), pct(replay as f64));
    }
}
