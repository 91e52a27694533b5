//! Offline planning: what a static planner that knew every lifetime in advance would need.
//! XLA plans a compiled program's temporaries this way (`heap`: its heap simulator, and
//! `buffer_assignment`: how `BufferAssigner` turns the heap into the preallocated-temp
//! allocation); [`plan_trace`] applies the same planner to any trace (PyTorch, xplane) as the
//! `ideal` (max live bytes, no fragmentation) and `offline` (best-fit plan) bounds.

pub mod buffer_assignment;
pub mod heap;
mod run_pool;
pub mod tables;

use serde::Serialize;

use crate::cancel::PROGRESS_EVERY;
use crate::error::{Error, Result};
use crate::trace::{Action, Trace};

/// Alignment `plan_trace` rounds sizes to by default for a trace's source: 512 bytes for
/// PyTorch (the caching allocator's `kMinBlockSize`, `round_size`), 256 for the others (BFC's
/// `kMinAllocationSize`, XLA's GPU buffer alignment).
pub fn default_alignment(source: &str) -> u64 {
    if source == "pytorch" {
        512
    } else {
        256
    }
}

/// The largest alignment of the offline bounds: 1 GiB (XLA aligns to 64–512 bytes; sizes
/// rounded up to more would overflow the plan's arithmetic near 2^64).
pub const MAX_ALIGNMENT: u64 = 1 << 30;

/// The most bytes the offline bounds plan: 2^62 (4 EiB) live at once, and a heap of at most as
/// much (the plan's offsets are 64-bit; [`heap::MAX_HEAP`]). A trace's sizes are below 2^56,
/// so only more than 64 allocations of petabytes live at once reach it; `ideal` and `offline`
/// then say so (a row with the reason in `replay`), never a wrapped or saturated number.
pub const MAX_PLANNED_BYTES: u64 = 1 << 62;

fn beyond_planned(what: &str, device: i32, at: Option<usize>) -> Error {
    let at = at.map_or(String::new(), |i| format!(" at event {i}"));
    Error::InvalidArgument(format!(
        "device {device}: {what}{at} more than 2^62 bytes (4 EiB), the most the offline bounds (ideal, offline) plan: their offsets are 64-bit"
    ))
}

/// `alignment`, or (0) the trace's [`default_alignment`]; an error unless a power of two up
/// to [`MAX_ALIGNMENT`].
fn resolve_alignment(trace: &Trace, alignment: u64) -> Result<u64> {
    let alignment = if alignment == 0 { default_alignment(&trace.metadata.source) } else { alignment };
    if !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
        return Err(Error::InvalidArgument(format!("alignment must be a power of two from 1 to 2^30 (1 GiB), got {alignment}")));
    }
    Ok(alignment)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OfflineResult {
    pub device: i32,
    pub alignment: u64,
    /// Allocations planned (seeds included).
    pub buffers: usize,
    /// Maximum over time of the live bytes (sizes rounded up to the alignment):
    /// `NoFragmentationStatsHeap`, the lower bound of any allocator.
    pub ideal_peak_bytes: u64,
    /// Heap size of XLA's best-fit plan (`ChooseBestHeapAlgorithm` over
    /// `GlobalDecreasingSizeBestFitHeap` kSpatial / kTemporal) over the same lifetimes.
    pub offline_peak_bytes: u64,
    /// `kSpatial` or `kTemporal`: the order that gave the smaller heap.
    pub strategy: &'static str,
    pub plan_seconds: f64,
}

/// Plans the allocations of `device` in `trace` offline. Lifetimes run from `alloc` to
/// `free_completed` (to the end of the trace when never freed); seed allocations are
/// included; each size is rounded up to `alignment` (0: [`default_alignment`] of the
/// trace's source) and chunks are placed at multiples of it.
pub fn plan_trace(trace: &Trace, device: i32, alignment: u64) -> Result<OfflineResult> {
    let alignment = resolve_alignment(trace, alignment)?;
    let start = std::time::Instant::now();
    let a = alignment as i64;
    let (mut b, _, _) = lifetimes(trace, device, a, false)?;
    b.free_all_open();
    let (strategy, heap_size) = heap::plan_heap_size(&b.intervals, a, b.max_live_bytes());
    // A cancelled plan stops early with a partial heap: not an answer.
    crate::cancel::check()?;
    if heap_size > heap::MAX_HEAP {
        return Err(beyond_planned("the best-fit plan's heap grows", device, None));
    }
    Ok(OfflineResult {
        device,
        alignment,
        buffers: b.intervals.len() + b.zero_sized().len(),
        ideal_peak_bytes: b.max_live_bytes().max(0) as u64,
        offline_peak_bytes: heap_size.max(0) as u64,
        strategy: match strategy {
            heap::Strategy::Spatial => "kSpatial",
            heap::Strategy::Temporal => "kTemporal",
        },
        plan_seconds: start.elapsed().as_secs_f64(),
    })
}

const NO_HANDLE: u32 = u32::MAX;

/// The allocations of `device` as heap-builder calls: the builder and, with `by_handle`, each
/// handle's aligned size and the event that allocated it (else two empty vectors: the plan
/// alone needs neither, and they are 16 bytes an allocation to write).
fn lifetimes(trace: &Trace, device: i32, a: i64, by_handle: bool) -> Result<(heap::HeapBuilder, Vec<i64>, Vec<usize>)> {
    let c = trace.columns();
    let n = trace.num_events();
    // Dense handles for alloc ids: ids are dense per trace by construction (below the event
    // count: a vector), but be safe (any other id: a map).
    let mut dense: Vec<u32> = crate::huge_pages::filled(n, NO_HANDLE);
    let mut handle_of: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    // Counted first only where the count is kept (`by_handle`) or could reach the handles'
    // limit; else room for an allocation per event (a bound: untouched capacity is never
    // faulted in).
    let counted = (by_handle || n >= u32::MAX as usize).then(|| c.count_actions(device, Action::Alloc as u8..=Action::Alloc as u8, 0..n));
    if let Some(allocs) = counted.filter(|&a| a >= u32::MAX as usize) {
        return Err(Error::InvalidArgument(format!("{allocs} allocations: too many to plan")));
    }
    let room = counted.unwrap_or(n);
    let mut b = heap::HeapBuilder::with_capacity(room);
    let mut sizes: Vec<i64> = Vec::with_capacity(if by_handle { room } else { 0 });
    let mut events: Vec<usize> = Vec::with_capacity(if by_handle { room } else { 0 });
    let mut handles = 0u32;
    let (devices, actions, ids, row_sizes) = (&c.device[..n], &c.action[..n], &c.alloc_id[..n], &c.size[..n]);
    for from in (0..n).step_by(PROGRESS_EVERY) {
        crate::cancel::check()?;
        let to = (from + PROGRESS_EVERY).min(n);
        // Most runs of rows have every alloc id: their validity bits are not read one by one.
        let all_valid = c.alloc_ids_valid(from..to);
        for i in from..to {
            let action = actions[i];
            if (action != Action::Alloc as u8 && action != Action::FreeCompleted as u8)
                || devices[i] != device
                || !(all_valid || c.alloc_id_valid(i))
            {
                continue;
            }
            let id = ids[i];
            if action == Action::Alloc as u8 {
                // Sizes are below 2^56 (trace::check); clamp anyway so the rounding can't wrap.
                let size = i64::try_from(row_sizes[i]).unwrap_or(i64::MAX / 4).min(i64::MAX / 4);
                let size = (size + a - 1) / a * a;
                let h = handles;
                handles += 1;
                let twice = match dense.get_mut(id as usize) {
                    Some(slot) => std::mem::replace(slot, h) != NO_HANDLE,
                    None => handle_of.insert(id, h).is_some(),
                };
                if twice {
                    return Err(Error::Replay(format!("event {i}: allocation id {id} allocated twice")));
                }
                if by_handle {
                    sizes.push(size);
                    events.push(i);
                }
                if b.live_bytes() as u64 + size as u64 > MAX_PLANNED_BYTES {
                    return Err(beyond_planned("the live bytes (aligned) reach", device, Some(i)));
                }
                b.alloc(h, id, size);
            } else {
                let h = match dense.get_mut(id as usize) {
                    Some(slot) => Some(std::mem::replace(slot, NO_HANDLE)).filter(|&h| h != NO_HANDLE),
                    None => handle_of.remove(&id),
                };
                if let Some(h) = h {
                    b.free_allocated(h);
                }
            }
        }
    }
    Ok((b, sizes, events))
}

/// The lifetimes [`plan_trace`] plans for `device` (alignment 0: the default), for benches
/// that time or check [`heap::plan_with`] on a real trace.
#[doc(hidden)]
pub fn trace_intervals(trace: &Trace, device: i32, alignment: u64) -> Result<Vec<heap::BufferInterval>> {
    let alignment = resolve_alignment(trace, alignment)?;
    let (mut b, _, _) = lifetimes(trace, device, alignment as i64, false)?;
    b.free_all_open();
    Ok(b.intervals)
}

/// Where an offline bound first exceeds a capacity (`ideal` / `offline` replays with
/// `--capacity`): the first allocation event at which the live bytes (`planned = false`) or
/// the end of the plan's chunk (`planned = true`) go beyond `capacity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverCapacity {
    pub event: usize,
    /// The request's bytes, and its size rounded to the alignment.
    pub requested: u64,
    pub rounded: u64,
    /// Live bytes (aligned) just before the event.
    pub live_before: u64,
}

pub fn first_over_capacity(trace: &Trace, device: i32, alignment: u64, capacity: u64, planned: bool) -> Result<Option<OverCapacity>> {
    let alignment = resolve_alignment(trace, alignment)?;
    let (mut b, sizes, events) = lifetimes(trace, device, alignment as i64, true)?;
    b.free_all_open();
    let plan = planned.then(|| heap::plan(&b.intervals, alignment as i64));
    crate::cancel::check()?;
    if plan.as_ref().is_some_and(|p| p.heap_size > heap::MAX_HEAP) {
        return Err(beyond_planned("the best-fit plan's heap grows", device, None));
    }
    // Live bytes before each allocation, from the intervals' (start, end) in handle order.
    let c = trace.columns();
    let mut live: i128 = 0;
    let mut live_of = vec![0i128; sizes.len()];
    let mut next = 0usize;
    let mut handle_at: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for i in 0..trace.num_events() {
        if i % PROGRESS_EVERY == 0 {
            crate::cancel::check()?;
        }
        if c.device[i] != device || !c.alloc_id_valid(i) {
            continue;
        }
        match Action::from_code(c.action[i]) {
            Some(Action::Alloc) if next < events.len() && events[next] == i => {
                let h = next;
                next += 1;
                live_of[h] = live;
                let end = match &plan {
                    Some(p) => b.interval_of(h as u32).map_or(0, |k| p.offsets[k as usize] as i128 + p.chunk_sizes[k as usize] as i128),
                    None => live + sizes[h] as i128,
                };
                if end > capacity as i128 {
                    return Ok(Some(OverCapacity {
                        event: i,
                        requested: c.size[i],
                        rounded: sizes[h] as u64,
                        live_before: live.max(0) as u64,
                    }));
                }
                live += sizes[h] as i128;
                handle_at.insert(c.alloc_id[i], h);
            }
            Some(Action::FreeCompleted) => {
                if let Some(h) = handle_at.remove(&c.alloc_id[i]) {
                    live -= sizes[h] as i128;
                }
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The `ideal` bound alone: the maximum of the live bytes of `device` (sizes rounded up to
/// `alignment`, 0: [`default_alignment`]), `NoFragmentationStatsHeap` without the best-fit
/// plan — one pass over the columns, no per-event allocation. Equal to
/// [`plan_trace`]'s `ideal_peak_bytes`. Also returns the first event at which the live bytes
/// exceed `capacity`, if any.
pub fn ideal_peak(trace: &Trace, device: i32, alignment: u64, capacity: Option<u64>) -> Result<IdealPeak> {
    let alignment = resolve_alignment(trace, alignment)?;
    let c = trace.columns();
    let n = trace.num_events();
    // Live size of each allocation id (ids are dense per trace: `read_arrow` and the importers
    // guarantee it); u64::MAX = not live.
    let mut live_size: Vec<u64> = vec![u64::MAX; n];
    let (mut live, mut peak) = (0u64, 0u64);
    let mut first_over = None;
    let mask = alignment - 1;
    for i in 0..n {
        if i % PROGRESS_EVERY == 0 {
            crate::cancel::check()?;
        }
        if c.device[i] != device || !c.alloc_id_valid(i) {
            continue;
        }
        let id = c.alloc_id[i] as usize;
        if id >= n {
            return Err(Error::Replay(format!("event {i}: allocation id {id} is not dense (the trace has {n} events)")));
        }
        let action = c.action[i];
        if action == Action::Alloc as u8 {
            if live_size[id] != u64::MAX {
                return Err(Error::Replay(format!("event {i}: allocation id {id} allocated twice")));
            }
            let size = c.size[i].checked_add(mask).map_or(!mask, |s| s & !mask);
            live_size[id] = size;
            live += size;
            if live > MAX_PLANNED_BYTES {
                return Err(beyond_planned("the live bytes (aligned) reach", device, Some(i)));
            }
            if live > peak {
                peak = live;
                if first_over.is_none() && capacity.is_some_and(|cap| live > cap) {
                    first_over = Some((i, c.size[i]));
                }
            }
        } else if action == Action::FreeCompleted as u8 && live_size[id] != u64::MAX {
            live -= live_size[id];
            live_size[id] = u64::MAX;
        }
    }
    Ok(IdealPeak { alignment, peak_bytes: peak, first_over_capacity: first_over })
}

/// What [`ideal_peak`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdealPeak {
    pub alignment: u64,
    pub peak_bytes: u64,
    /// The first allocation event (index, requested bytes) at which the live bytes exceeded
    /// the capacity.
    pub first_over_capacity: Option<(usize, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{EventRow, FrameTable, TraceBuilder, TraceMetadata};

    fn trace(events: &[(Action, u64, u64)]) -> Trace {
        let mut b = TraceBuilder::with_capacity(events.len());
        for &(a, id, size) in events {
            let mut r = EventRow::new(a, size);
            r.alloc_id = Some(id);
            b.push(&r);
        }
        b.finish(TraceMetadata::new("pytorch"), FrameTable::default()).unwrap()
    }

    #[test]
    fn ideal_and_offline_on_a_hand_made_trace() {
        // 1000 B (→1024 at 512 alignment) live to the end; 600 (→1024) allocated and freed;
        // then 1500 (→1536). Live bytes: 1024, 2048, 1024, 2560 → ideal 2560. Intervals:
        // A 1024 [0,4], B 1024 [1,2], C 1536 [3,5]. kSpatial: C @0; A overlaps C → @1536;
        // B overlaps only A → the gap [0,1536) → @0. Heap 2560 = ideal.
        let t = trace(&[(Action::Alloc, 0, 1000), (Action::Alloc, 1, 600), (Action::FreeCompleted, 1, 600), (Action::Alloc, 2, 1500)]);
        let r = plan_trace(&t, 0, 0).unwrap();
        assert_eq!(r.alignment, 512);
        assert_eq!(r.buffers, 3);
        assert_eq!(r.ideal_peak_bytes, 2560);
        assert_eq!(r.offline_peak_bytes, 2560);
    }

    #[test]
    fn fragmentation_shows_as_offline_above_ideal() {
        // A 256, B 256 (freed), C 256, D 512: live bytes peak at A + C + D = 1024 = ideal;
        // a plan can only be as good or worse.
        let t = trace(&[
            (Action::Alloc, 0, 256),
            (Action::Alloc, 1, 256),
            (Action::FreeCompleted, 1, 256),
            (Action::Alloc, 2, 256),
            (Action::Alloc, 3, 512),
        ]);
        let r = plan_trace(&t, 0, 256).unwrap();
        assert_eq!(r.ideal_peak_bytes, 1024);
        assert!(r.offline_peak_bytes >= r.ideal_peak_bytes);
    }

    #[test]
    fn the_first_event_over_a_capacity() {
        // Aligned live bytes: 1024, 2048, 1024, 2560. Capacity 2048: ideal first exceeds it at
        // the third alloc (event 3, 1024 live before); capacity 1024 at the second (event 1).
        let t = trace(&[(Action::Alloc, 0, 1000), (Action::Alloc, 1, 600), (Action::FreeCompleted, 1, 600), (Action::Alloc, 2, 1500)]);
        let o = first_over_capacity(&t, 0, 512, 2048, false).unwrap().unwrap();
        assert_eq!(o, OverCapacity { event: 3, requested: 1500, rounded: 1536, live_before: 1024 });
        assert_eq!(first_over_capacity(&t, 0, 512, 1024, false).unwrap().unwrap().event, 1);
        assert_eq!(first_over_capacity(&t, 0, 512, 2560, false).unwrap(), None);
        // The plan (heap 2560) first exceeds 2048 where a chunk ends above it.
        assert!(first_over_capacity(&t, 0, 512, 2048, true).unwrap().is_some());
        assert_eq!(first_over_capacity(&t, 0, 512, 2560, true).unwrap(), None);
    }

    #[test]
    fn ideal_peak_alone_equals_the_planners_ideal_and_finds_the_first_event_over_capacity() {
        // The hand-made trace of the first test: live 1024, 2048, 1024, 2560.
        let t = trace(&[(Action::Alloc, 0, 1000), (Action::Alloc, 1, 600), (Action::FreeCompleted, 1, 600), (Action::Alloc, 2, 1500)]);
        let r = ideal_peak(&t, 0, 0, Some(2048)).unwrap();
        assert_eq!((r.alignment, r.peak_bytes), (512, 2560));
        // 2048 is reached at event 1 but not exceeded; event 3 (1500 B requested) exceeds it.
        assert_eq!(r.first_over_capacity, Some((3, 1500)));
        assert_eq!(ideal_peak(&t, 0, 0, Some(4096)).unwrap().first_over_capacity, None);
        assert_eq!(ideal_peak(&t, 0, 0, None).unwrap().peak_bytes, plan_trace(&t, 0, 0).unwrap().ideal_peak_bytes);
    }

    #[test]
    fn bad_alignment_is_an_error() {
        let t = trace(&[(Action::Alloc, 0, 1)]);
        assert!(matches!(plan_trace(&t, 0, 300), Err(Error::InvalidArgument(_))));
    }
}
