//! Replay throughput of the policies on a real capture.
//!
//!     cargo bench -p allocreplay-core --bench replay [-- TRACE]
//!
//! `ALLOCREPLAY_BENCH_POLICIES="cuda-async;managed"` replaces the list of policies;
//! `ALLOCREPLAY_BENCH_VERBOSE=1` prints every run's M events/s, in order;
//! `ALLOCREPLAY_BENCH_THREAD=1` runs each replay on a new thread, as the Python binding does.
//!
//! Default TRACE: ../shared/traces/pytorch/gpt2_train__default.pickle.xz (52,626 events).
//! Each policy replays the whole trace repeatedly (a fresh allocator each time) for about two
//! seconds (at least three runs); events/s counts every replayed request event, over all runs
//! and for the fastest run.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry::build;

fn main() {
    let path = std::env::args().skip(1).find(|a| !a.starts_with('-')).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/pytorch/gpt2_train__default.pickle.xz"))
    });
    let trace = load(&path, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let device = trace.devices()[0];
    println!("trace: {} ({} events)", path.display(), trace.num_events());
    // ALLOCREPLAY_BENCH_POLICIES=spec;spec... replaces the list (e.g. to profile one policy).
    let custom = std::env::var("ALLOCREPLAY_BENCH_POLICIES").ok();
    let specs: Vec<String> = match &custom {
        Some(list) => list.split(';').map(str::to_string).collect(),
        None => [
            "pytorch",
            "pytorch:expandable_segments:True",
            "pytorch:max_split_size_mb:128",
            "pytorch:roundup_power2_divisions:4",
            "cuda-async",
            "cuda-malloc",
            "managed",
        ]
        .map(String::from)
        .to_vec(),
    };
    // What `allocreplay.replay()` asks for: a timeline of at most 2,000 points, no placements
    // (built when read), and a core to spare for the addresses of a policy that never reads
    // them (`ALLOCREPLAY_BENCH_IN_LINE=1`: none).
    let in_line = std::env::var_os("ALLOCREPLAY_BENCH_IN_LINE").is_some();
    let opts = ReplayOptions { timeline: Some(2000), defer_addresses: !in_line, ..ReplayOptions::default() };
    let new_thread = std::env::var_os("ALLOCREPLAY_BENCH_THREAD").is_some();
    // ALLOCREPLAY_BENCH_VERBOSE=1: every run's M events/s, in order.
    let verbose = std::env::var_os("ALLOCREPLAY_BENCH_VERBOSE").is_some();
    for spec in &specs {
        let spec = spec.as_str();
        let ctx = PolicyContext { metadata: &trace.metadata, device: trace.metadata.device(device), capacity: None };
        let (mut events, mut runs, mut best) = (0usize, 0usize, 0f64);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) || runs < 3 {
            let run = Instant::now();
            // ALLOCREPLAY_BENCH_THREAD=1: each run on a thread of its own, as the Python
            // binding's calls are (`interrupt::detach`).
            let one = || replay_device(&trace, device, build(spec, &ctx).unwrap().as_mut(), &opts);
            let r = if new_thread { std::thread::scope(|s| s.spawn(one).join().unwrap()) } else { one() };
            let rate = r.events as f64 / run.elapsed().as_secs_f64();
            if verbose {
                print!(" {:.1}", rate / 1e6);
            }
            best = best.max(rate);
            events += r.events;
            runs += 1;
        }
        if verbose {
            println!();
        }
        let s = start.elapsed().as_secs_f64();
        // The best run is the one least disturbed by other processes on a shared machine.
        println!("{spec:<40} {runs:>5} runs  {:>8.2} M events/s  (best run {:>8.2})", events as f64 / s / 1e6, best / 1e6);
    }
}
