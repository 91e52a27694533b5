//! `ReplayOptions::defer_addresses`: a policy that never reads its addresses (`cuda-malloc`)
//! replayed with the driver's placement on a helper thread gives the replay with the placement
//! in line, to the byte: stats, peaks and their events, timeline, first OOM, and the segments at
//! the modelled addresses; and a request the modelled address space refuses (which only the
//! helper sees) makes the replay run again in line.

use super::*;
use crate::import::{load, ImportOptions};
use crate::policy::PolicyContext;
use crate::trace::{DeviceInfo, EventRow, FrameTable, TraceBuilder, TraceMetadata};

fn repo(rel: &str) -> std::path::PathBuf {
    let p = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(rel);
    assert!(p.exists(), "fixture missing: {}", p.display());
    p
}

/// The two passes of one replay, their results as text (every field), and the peak events.
fn both(trace: &Trace, spec: &str, capacity: Option<u64>) -> (String, String) {
    let ctx = PolicyContext { metadata: &trace.metadata, device: trace.metadata.device(0), capacity };
    let opts = ReplayOptions { capacity, timeline: Some(2000), defer_addresses: true, ..ReplayOptions::default() };
    let run = |defer: bool| {
        let mut policy = crate::registry::build(spec, &ctx).unwrap();
        let mut hooks = Hooks::default();
        let r = replay_device_once(trace, 0, policy.as_mut(), &opts, &mut hooks, defer, Vec::new()).expect("settled");
        let DeviceReplay { policy, device, stats, events, first_oom, timeline, segments, placements, device_events, .. } = r;
        format!(
            "{policy} {device} {stats:?} {events} {first_oom:?} {timeline:?} {segments:?} {placements:?} {device_events:?} {:?} {:?}",
            hooks.peak_reserved_event, hooks.peak_allocated_event
        )
    };
    (run(false), run(true))
}

#[test]
fn deferred_addresses_give_the_in_line_replay_on_real_captures() {
    // Captures of at least `DEFER_FROM` events, at their own limit and at limits with OOMs.
    for rel in [
        "traces/cuda/qwen2_generate__default.pickle.xz",
        "traces/cuda/mistral_generate__default.pickle.xz",
        "traces/cuda/gpt2_generate__default.pickle.xz",
    ] {
        let trace = load(&repo(rel), &ImportOptions::default()).unwrap();
        assert!(trace.num_events() >= DEFER_FROM, "{rel}: {} events", trace.num_events());
        let ctx = PolicyContext { metadata: &trace.metadata, device: trace.metadata.device(0), capacity: None };
        let mut p = crate::registry::build("cuda-malloc", &ctx).unwrap();
        let peak = replay_device(&trace, 0, p.as_mut(), &ReplayOptions::default()).stats.peak_reserved;
        for capacity in [None, Some(peak), Some(peak / 2), Some(peak / 5)] {
            let (in_line, deferred) = both(&trace, "cuda-malloc", capacity);
            assert_eq!(in_line, deferred, "{rel} at {capacity:?}");
        }
    }
}

/// A trace of `n` allocations of `size` bytes, every one kept live.
fn growing_trace(n: u64, size: u64) -> Trace {
    let mut b = TraceBuilder::with_capacity(n as usize);
    for id in 0..n {
        let mut r = EventRow::new(Action::Alloc, size);
        r.alloc_id = Some(id);
        b.push(&r);
    }
    let mut md = TraceMetadata::new("test");
    md.devices = vec![DeviceInfo { index: 0, ..Default::default() }];
    b.finish(md, FrameTable::default()).unwrap()
}

#[test]
fn a_request_the_address_space_refuses_runs_the_replay_again_in_line() {
    // 60,000 allocations of 1 GiB, unlimited capacity: the modelled 15 TiB of address space
    // runs out after ~14,000 of them, a refusal only the address space makes (an OOM).
    let trace = growing_trace(60_000, 1 << 30);
    let ctx = PolicyContext { metadata: &trace.metadata, device: trace.metadata.device(0), capacity: None };
    let opts = ReplayOptions { capacity: None, timeline: Some(50), defer_addresses: true, ..ReplayOptions::default() };
    let mut policy = crate::registry::build("cuda-malloc", &ctx).unwrap();
    assert!(
        replay_device_once(&trace, 0, policy.as_mut(), &opts, &mut Hooks::default(), true, Vec::new()).is_none(),
        "the helper saw the refusal"
    );
    let mut policy = crate::registry::build("cuda-malloc", &ctx).unwrap();
    let in_line = replay_device_once(&trace, 0, policy.as_mut(), &opts, &mut Hooks::default(), false, Vec::new()).unwrap();
    let oom = in_line.first_oom.as_ref().expect("the address space ran out");
    assert!(oom.event > 10_000 && oom.event < 16_000, "{oom:?}");
    let progress = AtomicU64::new(0);
    let mut hooks = Hooks { progress: Some(&progress), ..Hooks::default() };
    let mut policy = crate::registry::build("cuda-malloc", &ctx).unwrap();
    let again = replay_device_hooked(&trace, 0, policy.as_mut(), &opts, &mut hooks);
    assert_eq!(
        format!("{:?} {:?} {:?}", again.stats, again.first_oom, again.timeline),
        format!("{:?} {:?} {:?}", in_line.stats, in_line.first_oom, in_line.timeline)
    );
    assert_eq!(again.segments, in_line.segments);
    // The rows walked twice are counted once.
    assert_eq!(progress.load(Ordering::Relaxed), trace.num_events() as u64);
}

#[test]
fn only_policies_that_never_read_addresses_are_deferred() {
    let meta = TraceMetadata::new("test");
    let ctx = PolicyContext { metadata: &meta, device: None, capacity: None };
    for (spec, defers) in [("cuda-malloc", true), ("pytorch", false), ("bfc", false), ("cuda-async", false), ("managed", false)] {
        let p = crate::registry::build(spec, &ctx).unwrap();
        assert_eq!(p.places_without_addresses(), defers, "{spec}");
    }
}
