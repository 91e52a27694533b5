//! xplane import speed and BFC replay speed, on one core.
//!
//! Run: `cargo bench -p allocreplay-core --bench bfc`.
//!
//! 1. Import: the jaxlm__default capture (shared/traces/jax), decompressed in memory first (the
//!    xz decoding is not timed): the whole import, in host-plane events per second (the
//!    importer reads every event's header to find the memory events) and memory events.
//! 2. Replay: the capture's GPU_0_bfc requests replicated K times (each copy's allocations
//!    freed at its end, ids renumbered), replayed under `bfc` (growing regions) and `jax`
//!    (one preallocated region), in events per second.

use std::path::PathBuf;
use std::time::Instant;

use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::compression::decompress;
use allocreplay_core::import::xplane::import_xplane;
use allocreplay_core::import::ImportOptions;
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::trace::{EventRow, FrameTable, TraceBuilder};
use allocreplay_core::{Action, Trace};

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let out = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(out);
    }
    (best, last.unwrap())
}

/// The requests of `t` replicated `copies` times; what a copy leaves live is freed at its end.
fn replicate(t: &Trace, copies: usize) -> Trace {
    let c = t.columns();
    let n = t.num_events();
    let ids = c.alloc_id.iter().copied().max().unwrap_or(0) + 1;
    let mut b = TraceBuilder::with_capacity(n * copies + 64 * copies);
    for k in 0..copies as u64 {
        let mut live = std::collections::BTreeMap::new();
        for i in 0..n {
            let Some(action) = Action::from_code(c.action[i]).filter(|a| a.is_request()) else { continue };
            let mut r = EventRow::new(action, c.size[i]);
            r.alloc_id = Some(c.alloc_id[i] + k * ids);
            match action {
                Action::Alloc => {
                    live.insert(c.alloc_id[i], c.size[i]);
                }
                _ => {
                    live.remove(&c.alloc_id[i]);
                }
            }
            b.push(&r);
        }
        for (id, size) in live {
            let mut r = EventRow::new(Action::FreeCompleted, size);
            r.alloc_id = Some(id + k * ids);
            b.push(&r);
        }
    }
    b.finish(t.metadata.clone(), FrameTable::default()).unwrap()
}

fn main() {
    // `cargo test` builds benches and runs them without `--bench`: stay quick there.
    if !std::env::args().any(|a| a == "--bench") {
        println!("bfc bench: run with `cargo bench -p allocreplay-core --bench bfc`");
        return;
    }
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/jax/jaxlm__default.xplane.pb.xz"));
    assert!(path.is_file(), "missing {} (shared/ must sit beside the repository)", path.display());
    let data = decompress(&path, std::fs::read(&path).unwrap()).unwrap();
    let opts = ImportOptions::default();
    let (secs, t) = best_of(5, || import_xplane(&path, data.clone(), &opts).unwrap());
    let host_events = 1_159_273.0; // events on the capture's /host:CPU plane
    println!(
        "import  {:.1} MB xplane.pb: {:>7.1} ms  {:>6.2} M host events/s  ({} memory events of GPU_0_bfc)",
        data.len() as f64 / 1e6,
        secs * 1e3,
        host_events / secs / 1e6,
        t.num_events()
    );

    let copies: usize = std::env::var("ALLOCREPLAY_BENCH_COPIES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let big = replicate(&t, copies);
    let n = big.num_events();
    for spec in ["bfc:allow_growth=true,memory_limit=112583507968", "jax"] {
        let info = big.metadata.device(0);
        let ctx = PolicyContext { metadata: &big.metadata, device: info, capacity: None };
        let ropts = ReplayOptions { capacity: info.and_then(|d| d.total_memory), ..Default::default() };
        let (secs, r) = best_of(3, || {
            let mut p = allocreplay_core::registry::build(spec, &ctx).unwrap();
            replay_device(&big, 0, p.as_mut(), &ropts)
        });
        assert!(r.first_oom.is_none());
        println!(
            "replay  {spec:<48} {n:>9} events  {:>7.1} ms  {:>6.2} M events/s  (peak in use {})",
            secs * 1e3,
            n as f64 / secs / 1e6,
            r.stats.peak_allocated
        );
    }
}
