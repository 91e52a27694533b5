//! Property tests on random request streams, for every policy (docs/bad-inputs.md): live
//! blocks never overlap, allocated <= reserved <= capacity (or an OOM), a failed request
//! changes nothing, everything freed -> allocated 0 (`registry::invariants::run_checked`), and
//! a replay's results do not depend on the number of threads.

use allocreplay_core::registry::invariants::{run_checked, Op};
use allocreplay_core::replay::{replay, ReplayRequest};
use allocreplay_core::trace::{DeviceInfo, EventRow, FrameTable, TraceBuilder};
use allocreplay_core::units::Capacity;
use allocreplay_core::{Action, Trace, TraceMetadata};
use proptest::prelude::*;

const POLICIES: &[&str] = &[
    "pytorch",
    "pytorch:expandable_segments:True",
    "pytorch:max_split_size_mb:32,roundup_power2_divisions:4",
    // Panicked or looped before release_available_cached_blocks skipped expandable blocks.
    "pytorch:expandable_segments:True,max_split_size_mb:32",
    "pytorch:expandable_segments:True,max_split_size_mb:32,roundup_power2_divisions:[64:8,256:4,>:1],max_non_split_rounding_mb:64",
    "bfc",
    "bfc:allow_growth=true",
    "jax:allocator=platform",
    "cuda-async",
    "cuda-async:release_threshold=0",
    "cuda-malloc",
    "managed",
];

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..4096,
        8 => 0u64..(8 << 20),
        2 => (1u64 << 20)..(1u64 << 32),
        1 => Just(u64::MAX),
        1 => (1u64 << 56)..u64::MAX,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (size(), 0i64..3).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        1 => any::<usize>().prop_map(Op::FreeRequested),
        2 => any::<usize>().prop_map(Op::FreeCompleted),
    ]
}

fn capacity() -> impl Strategy<Value = Option<u64>> {
    // From 64 KiB, powers of two and anything below 4 MiB: caps under one 2 MiB page included
    // (where `managed` kept a page resident, reserved > capacity).
    prop_oneof![Just(None), (16u32..36).prop_map(|b| Some(1u64 << b)), (0u64..(4 << 20)).prop_map(Some)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_policy_keeps_its_invariants(ops in prop::collection::vec(op(), 0..160), cap in capacity()) {
        for spec in POLICIES {
            if let Err(e) = run_checked(spec, &ops, cap) {
                return Err(TestCaseError::fail(format!("{spec}, capacity {cap:?}: {e}")));
            }
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count(ops in prop::collection::vec(op(), 1..120), cap in 24u32..34) {
        let t = trace_of(&ops);
        let req = |threads| ReplayRequest {
            policies: POLICIES.iter().map(|s| s.to_string()).chain(["ideal".into(), "offline".into()]).collect(),
            capacity: Some(Capacity::Bytes(1 << cap)),
            threads,
            ..Default::default()
        };
        let one = replay(&t, &req(1)).unwrap();
        let four = replay(&t, &req(4)).unwrap();
        prop_assert_eq!(one.len(), four.len());
        for (a, b) in one.iter().zip(&four) {
            prop_assert_eq!((&a.spec, a.replay.device), (&b.spec, b.replay.device));
            prop_assert_eq!(format!("{:?}", a.replay.stats), format!("{:?}", b.replay.stats), "{}", a.spec);
            prop_assert_eq!(&a.replay.first_oom, &b.replay.first_oom, "{}", a.spec);
            prop_assert_eq!(&a.replay.placements, &b.replay.placements, "{}", a.spec);
        }
    }
}

/// The ops as a two-device trace (sizes clamped below 2^56, as `trace::check` requires): even
/// allocations on device 0, odd on device 1.
fn trace_of(ops: &[Op]) -> Trace {
    let mut b = TraceBuilder::with_capacity(ops.len() * 2);
    let mut live: Vec<(u64, u64, i32, bool)> = Vec::new();
    let mut next = 0u64;
    let push = |b: &mut TraceBuilder, a, id, size, stream, dev| {
        let mut r = EventRow::new(a, size);
        r.alloc_id = Some(id);
        r.stream = stream;
        r.device = dev;
        b.push(&r);
    };
    for &op in ops {
        match op {
            Op::Alloc { size, stream } => {
                let size = size % (1 << 40);
                let dev = (next % 2) as i32;
                push(&mut b, Action::Alloc, next, size, stream, dev);
                live.push((next, size, dev, false));
                next += 1;
            }
            Op::FreeRequested(k) if !live.is_empty() => {
                let i = k % live.len();
                if !live[i].3 {
                    live[i].3 = true;
                    push(&mut b, Action::FreeRequested, live[i].0, live[i].1, 0, live[i].2);
                }
            }
            Op::FreeCompleted(k) if !live.is_empty() => {
                let (id, size, dev, _) = live.remove(k % live.len());
                push(&mut b, Action::FreeCompleted, id, size, 0, dev);
            }
            _ => {}
        }
    }
    let mut md = TraceMetadata::new("test");
    md.devices = (0..2).map(|index| DeviceInfo { index, total_memory: Some(80 << 30), ..Default::default() }).collect();
    b.finish(md, FrameTable::default()).unwrap()
}
