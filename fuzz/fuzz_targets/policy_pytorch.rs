//! The `pytorch` policy on random request streams, its invariants checked at every step
//! (`registry::invariants::run_checked`): no overlapping live blocks, allocated <= reserved <=
//! capacity, failed requests change nothing, all freed -> allocated 0.
#![no_main]
use allocreplay_core::registry::invariants::{ops_from_bytes, run_checked};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    // The first byte picks the capacity: none, or 2^(16 + b % 26) bytes (64 KiB to 2 TiB,
    // caps below one 2 MiB page included).
    let capacity = if data[0] % 4 == 0 { None } else { Some(1u64 << (16 + data[0] % 26)) };
    let ops = ops_from_bytes(&data[1..]);
    if let Err(e) = run_checked("pytorch", &ops, capacity) {
        panic!("pytorch, capacity {capacity:?}: {e}");
    }
});
