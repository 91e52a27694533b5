//! The host ranges a capture saw freed or mapped again ([`crate::trace::HostChange`]), applied
//! to a replay's modelled address space at their point of the history (issue 29 item 1).
//!
//! The hook notes each range with the number of allocations the caching allocator had made
//! (`allocation.all.allocated`): the change happened before the allocation of that index, so it
//! is applied just before the trace's alloc row of that index. The model's coordinates are
//! its own ([`AddressSpace`]), so the recorded ranges are moved by the difference between where
//! the run's first segment was and where the model puts a first segment of that size (both
//! just below, or in a hole of, the CUDA context).

use arrow_array::Array;

use crate::device::memory::AddressSpace;
use crate::trace::{Action, Trace};

/// `(trace row, start, end, freed)` in the model's coordinates, by row: the ranges to add to
/// (`freed`) or take from the modelled address space before each row is replayed (the address
/// space uses only their part above its CUDA context: `AddressSpace::add_host_free`). Empty
/// when the trace has none, or when its history was cut (the alloc count of a seeded trace
/// does not start at the run's start).
pub(crate) fn schedule(trace: &Trace, device: i32) -> Vec<(usize, u64, u64, bool)> {
    let mut changes = trace.metadata.host_changes(device);
    if changes.is_empty() || trace.metadata.seeded {
        return Vec::new();
    }
    let c = trace.columns();
    let on = |j: usize| c.device[j] == device;
    let Some(first) = (0..c.action.len()).find(|&j| on(j) && c.action[j] == Action::SegmentAlloc as u8 && c.addr.is_valid(j)) else {
        return Vec::new();
    };
    let (recorded, size) = (c.addr.value(first), c.size[first]);
    let Some(modelled) = AddressSpace::new().malloc(size) else { return Vec::new() };
    let shift = i128::from(modelled) - i128::from(recorded);
    let moved = |a: u64| u64::try_from(i128::from(a) + shift).ok();
    // In the order noted (a stable sort: the hook notes in order of `allocs` already).
    changes.sort_by_key(|f| f.allocs);
    let mut out = Vec::with_capacity(changes.len());
    let mut next = changes.iter().peekable();
    let mut allocs = 0u64;
    for j in 0..c.action.len() {
        if !on(j) || c.action[j] != Action::Alloc as u8 {
            continue;
        }
        while let Some(f) = next.next_if(|f| f.allocs <= allocs) {
            if let (Some(s), Some(e)) = (moved(f.start), moved(f.end)) {
                out.push((j, s, e, f.freed));
            }
        }
        if next.peek().is_none() {
            break;
        }
        allocs += 1;
    }
    out
}
