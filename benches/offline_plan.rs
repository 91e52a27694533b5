//! Planning 1 M buffers offline (`offline::plan_trace`: NoFragmentationStatsHeap plus XLA's
//! GlobalDecreasingSizeBestFit in kSpatial and kTemporal order). The trace is synthetic and
//! deterministic: sizes log-uniform from 512 B to 64 MiB, about 256 allocations live at a
//! time (each new allocation past that frees a random live one), like a training step.
//! Run: `cargo bench -p allocreplay-core --bench offline_plan` (optionally `-- N`).

use std::time::Instant;

use allocreplay_core::offline::plan_trace;
use allocreplay_core::trace::{EventRow, FrameTable, TraceBuilder, TraceMetadata};
use allocreplay_core::Action;

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1_000_000);
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
