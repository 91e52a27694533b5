//! Planning 1 M buffers offline (`offline::plan_trace`: NoFragmentationStatsHeap plus XLA's
//! GlobalDecreasingSizeBestFit in kSpatial and kTemporal order). The trace is synthetic and
//! deterministic: sizes log-uniform from 512 B to 64 MiB, about 256 allocations live at a
//! time (each new allocation past that frees a random live one), like a training step.
//! Run: `cargo bench -p allocreplay-core --bench offline_plan` (optionally `-- N`), or
//! `-- TRACE` to plan a real trace (any format `allocreplay.load` reads) instead: `plan_trace`
//! `ROUNDS` times (default 3), then each order alone and split (skipped with `ONLY_PLAN` set).

use std::time::Instant;

use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::offline::heap::{plan_with, plan_with_sides, Strategy};
use allocreplay_core::offline::{default_alignment, plan_trace, trace_intervals};
use allocreplay_core::trace::{EventRow, FrameTable, TraceBuilder, TraceMetadata};
use allocreplay_core::Action;
use std::hash::{Hash, Hasher};

fn main() {
    let arg = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if let Some(path) = arg.as_deref().filter(|a| a.parse::<usize>().is_err()) {
        let trace = load(std::path::Path::new(path), &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let device = trace.devices()[0];
        for _ in 0..std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3) {
            let t = Instant::now();
            let r = plan_trace(&trace, device, 0).expect("plan");
            let s = t.elapsed().as_secs_f64();
            println!(
                "offline_plan: {path}: {} events, {} buffers planned in {s:.3}s = {:.2} M events/s; ideal {} offline {} ({})",
                trace.num_events(),
                r.buffers,
                trace.num_events() as f64 / s / 1e6,
                r.ideal_peak_bytes,
                r.offline_peak_bytes,
                r.strategy
            );
        }
        if std::env::var_os("ONLY_PLAN").is_some() {
            return;
        }
        // Both orders' placements, hashed: a change to the planner must leave them equal.
        let intervals = trace_intervals(&trace, device, 0).expect("intervals");
        for strategy in [Strategy::Spatial, Strategy::Temporal] {
            let t = Instant::now();
            let p = plan_with(&intervals, default_alignment(&trace.metadata.source) as i64, strategy);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            p.offsets.hash(&mut h);
            p.heap_size.hash(&mut h);
            println!("{strategy:?}: {:.3}s alone, heap {}, placements hash {:016x}", t.elapsed().as_secs_f64(), p.heap_size, h.finish());
            // The same order cut in time and placed by one thread per side: the same plan.
            for sides in [2, 4, 8] {
                let t = Instant::now();
                let Some(p) = plan_with_sides(&intervals, default_alignment(&trace.metadata.source) as i64, strategy, sides) else {
                    println!("  {sides} sides: not split");
                    continue;
                };
                let s = t.elapsed().as_secs_f64();
                let mut h = std::collections::hash_map::DefaultHasher::new();
                p.offsets.hash(&mut h);
                p.heap_size.hash(&mut h);
                println!("  {sides} sides: {s:.3}s, heap {}, placements hash {:016x}", p.heap_size, h.finish());
            }
        }
        return;
    }
    let n: usize = arg.and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let live_target = 256usize;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let t0 = Instant::now();
    let mut b = TraceBuilder::with_capacity(2 * n);
    let mut live: Vec<(u64, u64)> = Vec::with_capacity(live_target + 1);
    for id in 0..n as u64 {
        let bits = 9 + next() % 18; // 512 B .. 64 MiB
        let size = (1u64 << bits) + (next() % (1u64 << bits)) / 512 * 512;
        let mut r = EventRow::new(Action::Alloc, size);
        r.alloc_id = Some(id);
        b.push(&r);
        live.push((id, size));
        if live.len() > live_target {
            let k = (next() % live.len() as u64) as usize;
            let (fid, fsize) = live.swap_remove(k);
            let mut r = EventRow::new(Action::FreeCompleted, fsize);
            r.alloc_id = Some(fid);
            b.push(&r);
        }
    }
    let trace = b.finish(TraceMetadata::new("synthetic"), FrameTable::default()).expect("trace");
    let build_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let r = plan_trace(&trace, 0, 256).expect("plan");
    let plan_s = t1.elapsed().as_secs_f64();
    println!(
        "offline_plan: {} buffers ({} events, built in {:.2}s) planned in {:.3}s = {:.0} buffers/s; ideal {} offline {} (+{:.2}%, {})",
        r.buffers,
        trace.num_events(),
        build_s,
        plan_s,
        r.buffers as f64 / plan_s,
        r.ideal_peak_bytes,
        r.offline_peak_bytes,
        100.0 * (r.offline_peak_bytes as f64 / r.ideal_peak_bytes as f64 - 1.0),
        r.strategy
    );
}
