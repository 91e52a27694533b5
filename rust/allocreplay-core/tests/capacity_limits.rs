//! Issue 28, class 2 (docs/bad-inputs.md, *Capacities per policy*): each policy models device
//! memories up to its registry entry's `max_capacity`, and a replay under a larger limit is a
//! row with the reason (naming the policy and that capacity), never a clamp. Before, at
//! `--capacity` 2^56 - 1 (the largest the command line takes), every policy that places memory
//! in the modelled CUDA address space (15 TiB) failed a 16 TiB request as an OOM though the
//! capacity held it, `cuda-async` (its pool's 1 TiB range) a 14 TiB one, and
//! `pytorch:expandable_segments:True` panicked (its reservations went past 2^56).

use allocreplay_core::device::memory::MAX_DEVICE_MEMORY;
use allocreplay_core::policy::MAX_REQUEST;
use allocreplay_core::registry::REGISTRY;
use allocreplay_core::replay::{replay, ReplayRequest, Run};
use allocreplay_core::trace::{DeviceInfo, EventRow, FrameTable, TraceBuilder};
use allocreplay_core::units::{Capacity, MAX_CAPACITY};
use allocreplay_core::{Action, Error, TraceMetadata};

/// Every registry policy, and the settings that take another path to memory.
fn specs() -> Vec<String> {
    let mut v: Vec<String> = REGISTRY.iter().map(|e| e.name.to_string()).collect();
    v.extend(
        ["pytorch:expandable_segments:True", "bfc:allow_growth=true", "jax:allocator=platform", "cuda-async:release_threshold=0"]
            .map(String::from),
    );
    v
}

fn max_capacity(spec: &str) -> u64 {
    let name = spec.split(':').next().unwrap();
    REGISTRY.iter().find(|e| e.name == name).unwrap().max_capacity
}

/// A trace of allocations of `sizes`, all live to the end, on a device without recorded memory.
fn trace(sizes: &[u64]) -> allocreplay_core::Trace {
    let mut b = TraceBuilder::with_capacity(sizes.len());
    for (i, &s) in sizes.iter().enumerate() {
        let mut r = EventRow::new(Action::Alloc, s);
        r.alloc_id = Some(i as u64);
        b.push(&r);
    }
    let mut md = TraceMetadata::new("pytorch");
    md.devices = vec![DeviceInfo { index: 0, ..Default::default() }];
    b.finish(md, FrameTable::default()).unwrap()
}

fn run(sizes: &[u64], spec: &str, capacity: u64) -> Run {
    let req = ReplayRequest { policies: vec![spec.into()], capacity: Some(Capacity::Bytes(capacity)), threads: 1, ..Default::default() };
    let mut runs = replay(&trace(sizes), &req).unwrap_or_else(|e| panic!("{spec} at {capacity}: {e}"));
    runs.remove(0)
}

#[test]
fn the_stated_ranges() {
    // 15 TiB less 32 MiB: the largest cudaMalloc the modelled address space takes.
    assert_eq!(MAX_DEVICE_MEMORY, (15 << 40) - (32 << 20));
    for e in REGISTRY {
        let want = match e.name {
            "ideal" | "offline" => MAX_CAPACITY,
            "cuda-async" => 1 << 40,
            _ => MAX_DEVICE_MEMORY,
        };
        assert_eq!(e.max_capacity, want, "{}", e.name);
    }
}

#[test]
fn at_its_largest_capacity_every_policy_serves_what_fits_and_fails_what_does_not() {
    for spec in specs() {
        let cap = max_capacity(&spec);
        // Half the capacity (below the largest request any allocator serves), then what no
        // longer fits beside it.
        let first = (cap / 2).min(MAX_REQUEST - 1);
        let second = cap - first + (1 << 30);
        let r = run(&[first, second], &spec, cap);
        assert_eq!(r.error, None, "{spec}");
        assert_eq!(r.capacity, Some(cap), "{spec}");
        let oom = r.replay.first_oom.map(|o| o.event);
        assert!(r.replay.stats.peak_allocated >= first, "{spec}: the first request was not served: {:?}", r.replay.stats);
        // `managed` oversubscribes (the second is resident in part, and migrates): it fails
        // the second request only because the address space has no room for both.
        assert_eq!(oom, Some(1), "{spec}: {:?}", r.replay.stats);
        // The bounds report their peak (the live bytes, the plan's heap) also over the capacity.
        assert!(r.replay.stats.peak_reserved <= cap || cap == MAX_CAPACITY, "{spec}");
    }
}

#[test]
fn beyond_its_largest_capacity_a_policy_is_a_row_with_the_reason() {
    for spec in specs() {
        let cap = max_capacity(&spec);
        let name = spec.split(':').next().unwrap();
        let r = run(&[4096], &spec, cap + 1);
        let e = r.error.unwrap_or_else(|| panic!("{spec}: replayed at {} bytes", cap + 1));
        assert!(
            e.starts_with(&format!("{name} models device memories up to {cap} bytes ("))
                && e.contains(&format!("the limit of this replay is {} bytes (--capacity)", cap + 1)),
            "{spec}: {e}"
        );
    }
}

#[test]
fn at_2_pow_56_minus_1_the_bounds_plan_and_the_allocators_say_why_they_cannot() {
    // The largest capacity `--capacity` takes, a request near it, then one more byte than is
    // left: the bounds plan both (the second over the capacity: an OOM at event 1); every
    // allocator is a row with its reason (before: OOMs, or a panic).
    let cap = (1u64 << 56) - 1;
    for spec in specs() {
        let r = run(&[cap - (1 << 31), 1 << 31], &spec, cap);
        if max_capacity(&spec) == MAX_CAPACITY {
            assert_eq!(r.error, None, "{spec}");
            assert_eq!(r.replay.first_oom.map(|o| o.event), Some(1), "{spec}");
        } else {
            assert!(r.error.as_deref().is_some_and(|e| e.contains("models device memories up to")), "{spec}: {:?}", r.error);
            assert_eq!(r.replay.stats.num_ooms, 0, "{spec}: a row that could not run counts nothing");
        }
    }
}

#[test]
fn the_bounds_plan_up_to_2_pow_62_live_bytes_and_say_so_beyond() {
    // 64 allocations of 2^56 - 1 bytes (2^56 each once aligned) live at once: 2^62, the most
    // the bounds plan (64-bit offsets). Before, the planner's live bytes overflowed (a panic
    // with overflow checks, a wrapped number without) from 128 of them.
    let huge = (1u64 << 56) - 1;
    for spec in ["ideal", "offline"] {
        let r = run(&vec![huge; 64], spec, MAX_CAPACITY);
        assert_eq!(r.error, None, "{spec}");
        assert_eq!(r.replay.stats.peak_reserved, 1 << 62, "{spec}");
        let r = run(&vec![huge; 300], spec, MAX_CAPACITY);
        let e = r.error.unwrap_or_else(|| panic!("{spec}: planned 300 x 2^56 bytes"));
        assert!(e.starts_with(&format!("{spec}: device 0: the live bytes (aligned) reach at event 64 more than 2^62 bytes")), "{e}");
    }
    let e = allocreplay_core::offline::plan_trace(&trace(&vec![huge; 65]), 0, 0).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("more than 2^62 bytes (4 EiB)")), "{e}");
}

#[test]
fn options_beyond_what_a_policy_models_are_spec_errors() {
    let t = trace(&[4096]);
    for (spec, says) in [
        ("bfc:memory_limit=16TiB", "the pool's memory limit is 17592186044416 bytes, more than 16492640862208 bytes (15.00 TiB)"),
        ("tf:memory_limit=16TiB", "the pool's memory limit is"),
        ("jax:memory_limit=16TiB", "the pool's memory limit is"),
        ("cuda-async:preallocate=2TiB", "preallocate is 2199023255552 bytes, more than the pool's reserved address range"),
        ("cuda-async:chunk_size=2TiB", "chunk_size is 2199023255552 bytes"),
    ] {
        let req = ReplayRequest { policies: vec![spec.into()], threads: 1, ..Default::default() };
        let e = replay(&t, &req).unwrap_err();
        assert!(matches!(&e, Error::PolicySpec(m) if m.contains(says)), "{spec}: {e}");
    }
    // jax's pool from its fraction of the device: twice a device of the largest memory
    // modelled is beyond it, a row with the reason (on an 80 GiB device the spec runs).
    let r = run(&[4096], "jax:mem_fraction=2", MAX_DEVICE_MEMORY);
    let e = r.error.unwrap();
    assert!(e.ends_with("the pool's memory limit is 32985281724416 bytes, more than 16492640862208 bytes (15.00 TiB), what the modelled CUDA address space holds"), "{e}");
    assert_eq!(run(&[4096], "jax:mem_fraction=2", 80 << 30).error, None);
}
