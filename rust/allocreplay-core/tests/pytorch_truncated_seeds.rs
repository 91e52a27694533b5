//! A truncated recording (`gpt2_train__default_ring20k`: the ring buffer kept 20,000 entries,
//! so the live segments and allocations at the start of the window are seeded from the final
//! state, traces/README.md *Seeds*) replayed under settings other than the recorded ones, under
//! a cap below the seeds. The seeds, placed at their recorded addresses, leave free parts of
//! their segments larger than `max_split_size`, which upstream never has; `pytorch` used to
//! release such a part as a whole segment in `release_available_cached_blocks`, and `tune`
//! reported "the policy panicked: attempt to subtract with overflow" (`should_split`).

use allocreplay_core::engine::{replay_device, replay_device_hooked, Hooks, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry::build;
use allocreplay_core::trace::Trace;
use allocreplay_core::units::Capacity;
use arrow_array::Array;
use std::path::PathBuf;

const CAP: u64 = 4 << 30;

/// The settings `tune` reported the panic for, and a few more of the same kind.
const SPECS: &[&str] = &[
    "pytorch:max_split_size_mb:256,roundup_power2_divisions:4,max_non_split_rounding_mb:256",
    "pytorch:max_split_size_mb:256,roundup_power2_divisions:2,max_non_split_rounding_mb:64",
    "pytorch:max_split_size_mb:64",
];

fn ring20k() -> Trace {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/pytorch/gpt2_train__default_ring20k.pickle.xz"));
    assert!(p.exists(), "fixture missing: {} (the shared traces must sit beside the repository)", p.display());
    let t = load(&p, &ImportOptions::default()).unwrap();
    assert!(t.metadata.seeded);
    t
}

/// The policy's own view after replaying up to (and including) event `stop` (the whole trace
/// when `None`): every segment is a run of contiguous blocks from its base, the segments add up
/// to the reserved bytes, and their held blocks to at least the allocated bytes.
fn check_structure(t: &Trace, spec: &str, stop: Option<usize>) {
    let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(0), capacity: Some(CAP) };
    let mut p = build(spec, &ctx).unwrap();
    let opts = ReplayOptions { capacity: Some(CAP), ..Default::default() };
    let r = replay_device_hooked(t, 0, p.as_mut(), &opts, &mut Hooks { stop_after: stop, ..Default::default() });
    let at = format!("{spec} after event {stop:?}");
    let stats = p.stats().clone();
    assert_eq!(r.stats, stats, "{at}");
    assert!(stats.allocated <= stats.reserved, "{at}: allocated {} > reserved {}", stats.allocated, stats.reserved);
    let segments = p.segments();
    let blocks = p.blocks().unwrap();
    assert_eq!(segments.iter().map(|s| s.size).sum::<u64>(), stats.reserved, "{at}: segments vs reserved");
    let held: u64 = blocks.iter().filter(|b| b.allocated).map(|b| b.size).sum();
    assert!(held >= stats.allocated && held <= stats.reserved, "{at}: held {held}, {stats:?}");
    for s in &segments {
        let mine: Vec<_> = blocks.iter().filter(|b| b.segment == s.addr).collect();
        assert_eq!(mine.len(), s.blocks as usize, "{at}: segment {:#x}", s.addr);
        let mut end = s.addr;
        for b in mine {
            assert_eq!(b.addr, end, "{at}: segment {:#x} has a hole or an overlap", s.addr);
            end += b.size;
        }
        assert_eq!(end, s.addr + s.size, "{at}: segment {:#x}", s.addr);
    }
    let mut spans: Vec<(u64, u64)> = segments.iter().map(|s| (s.addr, s.addr + s.size)).collect();
    spans.sort_unstable();
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{at}: segments overlap");
}

#[test]
fn ring20k_under_max_split_size_at_4gib_replays_soundly() {
    let t = ring20k();
    let n = t.num_events();
    for &spec in SPECS {
        let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(0), capacity: Some(CAP) };
        let mut p = build(spec, &ctx).unwrap();
        let opts = ReplayOptions { capacity: Some(CAP), timeline: Some(0), ..Default::default() };
        let r = replay_device(&t, 0, p.as_mut(), &opts);
        // The seeds (null time) hold more than the cap: only the policy's own growth is capped.
        let mut prev_reserved = 0;
        for point in &r.timeline {
            assert!(point.allocated <= point.reserved, "{spec}: event {}: {point:?}", point.event);
            if point.time_ns.is_some() && point.reserved > prev_reserved {
                assert!(point.reserved <= CAP, "{spec}: event {} grows reserved beyond the cap: {point:?}", point.event);
            }
            prev_reserved = point.reserved;
        }
        let s = &r.stats;
        assert!(s.allocated <= s.reserved && s.reserved <= CAP, "{spec}: {s:?}");
        assert!(s.num_ooms > 0, "{spec}: 4 GiB is far below the run's peak");
        // Deterministic: the same replay again gives the same numbers.
        let mut again = build(spec, &ctx).unwrap();
        assert_eq!(replay_device(&t, 0, again.as_mut(), &opts).stats, r.stats, "{spec}");
        for stop in (0..n).step_by(2500).chain([n - 1]) {
            check_structure(&t, spec, Some(stop));
        }
    }
}

#[test]
fn tune_over_ring20k_at_4gib_has_no_panicked_rows() {
    let t = ring20k();
    let specs: Vec<String> = SPECS.iter().map(|s| s.to_string()).collect();
    let b = allocreplay_core::tune::sweep(&[&t], &specs, Some(Capacity::Bytes(CAP)), 2).unwrap();
    let error = b.column_by_name("error").unwrap();
    assert_eq!(error.null_count(), specs.len(), "{:?}", arrow_array::cast::AsArray::as_string::<i32>(error));
}
