//! The host ranges a capture saw freed or mapped again ([`crate::trace::HostChange`]), applied
//! to a replay's modelled address space at their point of the history (issue 29 item 1).
//!
//! The hook notes each range with the number of allocations the caching allocator had made
//! (`allocation.all.allocated`): the change happened before the allocation of that index, so it
//! is applied just before the trace's alloc row of that index. The model's coordinates are
//! its own ([`AddressSpace`]), so the recorded ranges are moved by the difference between where
//! the run's first segment was and where the model puts a first segment of that size (both
//! just below, or in a hole of, the CUDA context).

use arrow_array::{Array, RecordBatch};

use crate::device::memory::AddressSpace;
use crate::trace::{Action, Columns, TraceMetadata};

/// `(trace row, start, end, freed)` in the model's coordinates, by row: the ranges to add to
/// (`freed`) or take from the modelled address space before each row is replayed (the address
/// space uses only their part above its CUDA context: `AddressSpace::add_host_free`). Empty
/// when the trace has none, or when its history was cut (the alloc count of a seeded trace
/// does not start at the run's start). `batches`: the trace's record batches in order, each
/// with its first row's index (a trace held whole is one; a streamed file's are read until
/// every change has its row).
pub(crate) fn schedule<E>(
    metadata: &TraceMetadata,
    device: i32,
    batches: impl IntoIterator<Item = Result<(usize, RecordBatch), E>>,
) -> Result<Vec<(usize, u64, u64, bool)>, E> {
    let mut changes = metadata.host_changes(device);
    if changes.is_empty() || metadata.seeded {
        return Ok(Vec::new());
    }
    // In the order noted (a stable sort: the hook notes in order of `allocs` already).
    changes.sort_by_key(|f| f.allocs);
    let mut out = Vec::with_capacity(changes.len());
    let mut next = changes.iter().peekable();
    // The shift from the run's addresses to the model's, once the first segment is seen.
    let mut shift: Option<i128> = None;
    let mut allocs = 0u64;
    for batch in batches {
        let (base, batch) = batch?;
        let c = Columns::of(&batch);
        for j in 0..c.action.len() {
            if c.device[j] != device {
                continue;
            }
            if shift.is_none() && c.action[j] == Action::SegmentAlloc as u8 && c.addr.is_valid(j) {
                let Some(modelled) = AddressSpace::new().malloc(c.size[j]) else { return Ok(Vec::new()) };
                shift = Some(i128::from(modelled) - i128::from(c.addr.value(j)));
            }
            if c.action[j] != Action::Alloc as u8 {
                continue;
            }
            let Some(shift) = shift else { return Ok(Vec::new()) };
            let moved = |a: u64| u64::try_from(i128::from(a) + shift).ok();
            while let Some(f) = next.next_if(|f| f.allocs <= allocs) {
                if let (Some(s), Some(e)) = (moved(f.start), moved(f.end)) {
                    out.push((base + j, s, e, f.freed));
                }
            }
            if next.peek().is_none() {
                return Ok(out);
            }
            allocs += 1;
        }
    }
    Ok(out)
}
