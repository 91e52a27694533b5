//! How XLA's `BufferAssigner` (openxla/xla `xla/service/buffer_assignment.cc`) turns a
//! program's temporaries into its `preallocated-temp` allocation, reproduced from a dump:
//!
//! 1. `AssignBuffersWithSequentialOrdering`: the heap simulator replays each heap trace (one
//!    per color) into `ChooseBestHeapAlgorithm` {kSpatial, kTemporal}
//!    `GlobalDecreasingSizeBestFitHeap` (see `heap`) with the color's alignment; the heap
//!    becomes one temp allocation per color.
//! 2. Before that, `AssignSingleHloBuffer` gave tuple-shaped buffers (the index tables of
//!    multi-output ops) allocations of their own; they are temps too.
//! 3. `CombineTempAllocations`: `std::partition` (Hoare's scheme in libstdc++ and libc++)
//!    moves the temp allocations to the end of the allocation list — which reorders them —
//!    and each color's temps are laid end to end, each at `RoundUpTo(size so far, alignment)`.
//!    The list before the partition is: global-computation allocations in the order of
//!    `AssignBuffersForComputations` (size desc, live-out first, post-order position), then
//!    the heap allocations by color, then the thread-local allocations.

use std::collections::HashMap;

use serde::Serialize;

use super::heap::{self, HeapBuilder, HeapPlan};
use crate::error::{Error, Result};
use crate::import::xla::{HeapEventKind, XlaProgram};
use crate::trace::{Action, EventRow, FrameTable, Trace, TraceBuilder};

/// `allocreplay plan DUMP_DIR --json`: one object per program, exactly these keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProgramPlan {
    pub program: String,
    /// XLA's preallocated-temp allocation(s), as recorded in the dump.
    pub recorded_temp_bytes: i64,
    /// Ours: the heap planned from the heap-simulator trace, combined as XLA combines it.
    pub planned_temp_bytes: i64,
    /// Max live bytes of the heap-planned temps (`NoFragmentationStatsHeap`) plus the
    /// temps with allocations of their own.
    pub lower_bound_bytes: i64,
    /// Entry parameter allocations (memory_analysis `argument_size_in_bytes`).
    pub argument_bytes: i64,
    /// Maybe-live-out allocations (memory_analysis `output_size_in_bytes`).
    pub output_bytes: i64,
}

/// The full result of planning a program's temps.
#[derive(Debug, Clone)]
pub struct TempPlan {
    pub alignment: i64,
    /// Per heap trace: its color, the plan and the value index of each interval.
    pub heaps: Vec<(i64, HeapPlan)>,
    /// Per color: the combined temp allocation's size.
    pub combined_size: HashMap<i64, i64>,
    /// Planned offset in the combined allocation of every temp value (by value index).
    pub offsets: HashMap<u32, i64>,
    /// Planned chunk size of every temp value.
    pub sizes: HashMap<u32, i64>,
    pub lower_bound_bytes: i64,
}

impl TempPlan {
    pub fn planned_temp_bytes(&self) -> i64 {
        self.combined_size.values().sum()
    }
}

/// Replays a heap trace into a [`HeapBuilder`] as `HeapSimulator` calls its algorithm:
/// `Alloc` with the buffer's size, `ShareWith` with the size of the shared group (sizes of a
/// SHARE_WITH group are its largest member's, as `HeapSimulator::ShareBuffer` merges them;
/// the canonical value gets the group size too, as its `HloBuffer` does), `Free`.
pub fn heap_builder(p: &XlaProgram, events: &[crate::import::xla::HeapEvent]) -> (HeapBuilder, Vec<u32>) {
    // Group sizes (union-find over SHARE_WITH).
    let mut parent: HashMap<u32, u32> = HashMap::new();
    fn find(parent: &mut HashMap<u32, u32>, x: u32) -> u32 {
        let mut r = x;
        while let Some(&q) = parent.get(&r) {
            if q == r {
                break;
            }
            r = q;
        }
        parent.insert(x, r);
        r
    }
    for e in events {
        parent.entry(e.value).or_insert(e.value);
        if e.kind == HeapEventKind::ShareWith {
            parent.entry(e.share_with).or_insert(e.share_with);
            let (a, b) = (find(&mut parent, e.value), find(&mut parent, e.share_with));
            if a != b {
                parent.insert(a, b);
            }
        }
    }
    let mut group_size: HashMap<u32, i64> = HashMap::new();
    let keys: Vec<u32> = parent.keys().copied().collect();
    for v in keys {
        let r = find(&mut parent, v);
        let s = p.values[v as usize].size;
        let g = group_size.entry(r).or_insert(0);
        *g = (*g).max(s);
    }
    let mut b = HeapBuilder::with_capacity(events.len() / 2 + 1);
    let mut handles: Vec<u32> = Vec::new(); // handle -> value index
    let mut handle_of: HashMap<u32, u32> = HashMap::new();
    let mut handle = |v: u32, handles: &mut Vec<u32>| -> u32 {
        *handle_of.entry(v).or_insert_with(|| {
            handles.push(v);
            (handles.len() - 1) as u32
        })
    };
    for e in events {
        let r = find(&mut parent, e.value);
        let size = group_size[&r];
        let key = p.values[e.value as usize].id;
        match e.kind {
            HeapEventKind::Alloc => {
                let h = handle(e.value, &mut handles);
                b.alloc(h, key, size);
            }
            HeapEventKind::ShareWith => {
                let h = handle(e.value, &mut handles);
                let s = handle(e.share_with, &mut handles);
                b.share_with(h, key, s, size);
            }
            HeapEventKind::Free => {
                let h = handle(e.value, &mut handles);
                b.free(h, size);
            }
        }
    }
    (b, handles)
}

/// Plans a program's temps: heap simulation per trace, then `CombineTempAllocations`.
pub fn plan_temps(p: &XlaProgram) -> TempPlan {
    let alignment = p.alignment();
    let SimulatedHeaps { plans: heaps, chunks: heap_chunks, in_heap, max_live_bytes } = simulate_heaps(p, alignment);
    let mut lower = max_live_bytes;
    let mut list = allocation_list(p, &in_heap, heap_chunks.len(), &mut lower);
    let first = partition_temps(&mut list);
    let (combined_size, offsets, sizes) = combine_temp_allocations(&list[first..], &heap_chunks, alignment);
    TempPlan { alignment, heaps, combined_size, offsets, sizes, lower_bound_bytes: lower }
}

/// The temps one heap trace planned: its color, its heap size and `(value, offset, chunk
/// size)` of each of its values.
struct HeapChunks {
    color: i64,
    heap_size: i64,
    chunks: Vec<(u32, i64, i64)>,
}

/// What the heap simulation of every heap trace gives [`plan_temps`].
struct SimulatedHeaps {
    /// Per heap trace: its color and plan.
    plans: Vec<(i64, HeapPlan)>,
    /// Per heap trace, sorted by color.
    chunks: Vec<HeapChunks>,
    /// By value index: planned by a heap.
    in_heap: Vec<bool>,
    /// The heaps' max live bytes, summed.
    max_live_bytes: i64,
}

/// `AssignBuffersWithSequentialOrdering`: each non-empty heap trace replayed into the heap
/// algorithm with the color's alignment.
fn simulate_heaps(p: &XlaProgram, alignment: i64) -> SimulatedHeaps {
    let mut heaps = Vec::new();
    let mut heap_chunks: Vec<HeapChunks> = Vec::new();
    let mut in_heap = vec![false; p.values.len()];
    let mut lower = 0i64;
    for events in &p.heap_traces {
        if events.is_empty() {
            continue;
        }
        let color = p.values[events[0].value as usize].color;
        let (b, handles) = heap_builder(p, events);
        lower += b.max_live_bytes();
        let plan = heap::plan(&b.intervals, alignment);
        let mut chunks = Vec::with_capacity(handles.len());
        for (h, &vi) in handles.iter().enumerate() {
            in_heap[vi as usize] = true;
            match b.interval_of(h as u32) {
                Some(i) => chunks.push((vi, plan.offsets[i as usize], plan.chunk_sizes[i as usize])),
                // Degenerate case: 0-sized buffers are allocated at offset 0.
                None => chunks.push((vi, 0, 0)),
            }
        }
        heap_chunks.push(HeapChunks { color, heap_size: plan.heap_size, chunks });
        heaps.push((color, plan));
    }
    heap_chunks.sort_by_key(|h| h.color);
    SimulatedHeaps { plans: heaps, chunks: heap_chunks, in_heap, max_live_bytes: lower }
}

/// An entry of the allocation list before CombineTempAllocations.
#[derive(Clone)]
enum ListEntry {
    NonTemp,
    /// A temp with an allocation of its own: color, size, its values.
    Own(i64, i64, Vec<u32>),
    /// The heap of a color (index into the heaps' chunks).
    Heap(usize),
}

/// The allocation list before CombineTempAllocations: the global-computation allocations in
/// `AssignBuffersForComputations`' order, then the `heaps` heap allocations by color, then the
/// thread-local allocations. The temps with allocations of their own (the values no heap
/// planned) add their sizes to `lower_bound`.
fn allocation_list(p: &XlaProgram, in_heap: &[bool], heaps: usize, lower_bound: &mut i64) -> Vec<ListEntry> {
    let mut global: Vec<((i64, i64, i64), ListEntry)> = Vec::new();
    let mut thread_local = 0usize;
    for a in &p.allocations {
        if a.is_thread_local {
            thread_local += 1;
            continue;
        }
        if a.is_preallocated_temp() {
            // Values not planned by the heap: group by offset, one allocation each.
            let mut groups: Vec<(i64, Vec<u32>)> = Vec::new();
            for &(vi, off, _) in &a.assigned {
                if in_heap[vi as usize] {
                    continue;
                }
                match groups.iter_mut().find(|g| g.0 == off) {
                    Some(g) => g.1.push(vi),
                    None => groups.push((off, vec![vi])),
                }
            }
            for (_, vals) in groups {
                let size = vals.iter().map(|&v| p.values[v as usize].size).max().unwrap_or(0);
                let pos = vals.iter().map(|&v| p.values[v as usize].position).min().unwrap_or(i64::MAX);
                *lower_bound += size;
                global.push(((-size, 0, pos), ListEntry::Own(p.values[vals[0] as usize].color, size, vals)));
            }
        } else {
            let pos = a.assigned.iter().map(|&(v, _, _)| p.values[v as usize].position).min().unwrap_or(i64::MAX);
            global.push(((-a.size, if a.maybe_live_out { 0 } else { 1 }, pos), ListEntry::NonTemp));
        }
    }
    // AssignBuffersForComputations' order: size desc, live-out first, position.
    global.sort_by_key(|g| g.0);
    let mut list: Vec<ListEntry> = global.into_iter().map(|g| g.1).collect();
    list.extend((0..heaps).map(ListEntry::Heap));
    list.extend(std::iter::repeat_n(ListEntry::NonTemp, thread_local));
    list
}

/// std::partition(allocations_, !IsPreallocatedTempBuffer), bidirectional iterators: the
/// non-temps first, the temps after them (reordered by the swaps); returns where the temps
/// begin.
fn partition_temps(list: &mut [ListEntry]) -> usize {
    let is_temp = |e: &ListEntry| !matches!(e, ListEntry::NonTemp);
    let (mut first, mut last) = (0usize, list.len());
    'outer: loop {
        loop {
            if first == last {
                break 'outer;
            }
            if is_temp(&list[first]) {
                break;
            }
            first += 1;
        }
        loop {
            last -= 1;
            if first == last {
                break 'outer;
            }
            if !is_temp(&list[last]) {
                break;
            }
        }
        list.swap(first, last);
        first += 1;
    }
    first
}

/// Per color, the combined temp allocation's size; per temp value, its offset in it and its
/// chunk size.
type Combined = (HashMap<i64, i64>, HashMap<u32, i64>, HashMap<u32, i64>);

/// CombineTempAllocations: each color's temps (`temps`, in list order) end to end, each at
/// `RoundUpTo(size so far, alignment)`.
fn combine_temp_allocations(temps: &[ListEntry], heaps: &[HeapChunks], alignment: i64) -> Combined {
    let mut combined_size: HashMap<i64, i64> = HashMap::new();
    let mut offsets = HashMap::new();
    let mut sizes = HashMap::new();
    for e in temps {
        let (color, size) = match e {
            ListEntry::NonTemp => continue,
            ListEntry::Own(c, s, _) => (*c, *s),
            ListEntry::Heap(h) => (heaps[*h].color, heaps[*h].heap_size),
        };
        let base = match combined_size.get_mut(&color) {
            None => {
                combined_size.insert(color, size);
                0
            }
            Some(total) => {
                let base = (*total + alignment - 1) / alignment * alignment;
                *total = base + size;
                base
            }
        };
        match e {
            ListEntry::Own(_, s, vals) => {
                for &v in vals {
                    offsets.insert(v, base);
                    sizes.insert(v, *s);
                }
            }
            ListEntry::Heap(h) => {
                for &(v, off, s) in &heaps[*h].chunks {
                    offsets.insert(v, base + off);
                    sizes.insert(v, s);
                }
            }
            ListEntry::NonTemp => {}
        }
    }
    (combined_size, offsets, sizes)
}

/// The `plan` row of a program.
pub fn plan_program(p: &XlaProgram) -> ProgramPlan {
    let t = plan_temps(p);
    let sum = |f: &dyn Fn(&crate::import::xla::XlaAllocation) -> bool| p.allocations.iter().filter(|a| f(a)).map(|a| a.size).sum();
    ProgramPlan {
        program: p.program.clone(),
        recorded_temp_bytes: sum(&|a| a.is_preallocated_temp()),
        planned_temp_bytes: t.planned_temp_bytes(),
        lower_bound_bytes: t.lower_bound_bytes,
        argument_bytes: sum(&|a| a.is_entry_computation_parameter),
        output_bytes: sum(&|a| a.maybe_live_out),
    }
}

/// `allocreplay plan DUMP_DIR`: every program of a dump directory.
pub fn plan_dump(dir: &std::path::Path) -> Result<Vec<ProgramPlan>> {
    let mut plans = Vec::new();
    for p in crate::import::xla::load_dump(dir)? {
        crate::cancel::check()?;
        plans.push(plan_program(&p));
    }
    // A plan cut short by a cancellation is not returned.
    crate::cancel::check()?;
    Ok(plans)
}

/// The most events [`runtime_trace`] makes (a trace of about 1 GB in memory).
pub const MAX_RUNTIME_EVENTS: usize = 10_000_000;

/// The allocations the JAX runtime makes when it runs a program `calls` times
/// (`GpuExecutable::ExecuteAsyncOnStreamImpl` through PjRt): the arguments exist before the
/// first call (one allocation per entry parameter allocation); each call allocates every
/// maybe-live-out allocation and the temp arena (each preallocated-temp allocation), runs,
/// frees the temp arena; the previous call's outputs are freed once the new ones exist (a
/// training loop `p = step(p)` drops them), and the first call drops the arguments. Sizes
/// are the allocation sizes; the runtime allocator (BFC) rounds them itself. `time_ns` is the
/// call number.
///
/// The trace is bounded: a `calls` whose trace would exceed [`MAX_RUNTIME_EVENTS`] events is
/// refused (`plan --runtime --calls N`, `xla_runtime(calls=N)`).
pub fn runtime_trace(p: &XlaProgram, calls: usize) -> Result<Trace> {
    let params = p.allocations.iter().filter(|a| a.is_entry_computation_parameter).count() as u128;
    let outs = p.allocations.iter().filter(|a| a.maybe_live_out && !a.is_entry_computation_parameter).count() as u128;
    let temps = p.allocations.iter().filter(|a| a.is_preallocated_temp()).count() as u128;
    let events = params + calls as u128 * (outs + 2 * temps) + if calls == 0 { 0 } else { params + (calls as u128 - 1) * outs };
    if events > MAX_RUNTIME_EVENTS as u128 {
        return Err(Error::InvalidArgument(format!(
            "{calls} calls of {} make a trace of {events} events, more than the limit of {MAX_RUNTIME_EVENTS}; ask for at most {} calls",
            p.program,
            (MAX_RUNTIME_EVENTS as u128).saturating_sub(2 * params) / (2 * outs + 2 * temps).max(1)
        )));
    }
    let mut b = TraceBuilder::with_capacity(events as usize);
    let mut names = Vec::new();
    let mut next_id = 0u64;
    let ev = |b: &mut TraceBuilder, names: &mut Vec<Option<String>>, a: Action, id: u64, size: i64, call: i64| {
        let mut r = EventRow::new(a, size.max(0) as u64);
        r.alloc_id = Some(id);
        r.time_ns = Some(call);
        b.push(&r);
        names.push(Some(p.program.clone()));
    };
    let mut live_inputs: Vec<(u64, i64)> = Vec::new();
    for a in p.allocations.iter().filter(|a| a.is_entry_computation_parameter) {
        ev(&mut b, &mut names, Action::Alloc, next_id, a.size, 0);
        live_inputs.push((next_id, a.size));
        next_id += 1;
    }
    for call in 0..calls as i64 {
        let mut outputs = Vec::new();
        for a in p.allocations.iter().filter(|a| a.maybe_live_out && !a.is_entry_computation_parameter) {
            ev(&mut b, &mut names, Action::Alloc, next_id, a.size, call);
            outputs.push((next_id, a.size));
            next_id += 1;
        }
        let mut temps = Vec::new();
        for a in p.allocations.iter().filter(|a| a.is_preallocated_temp()) {
            ev(&mut b, &mut names, Action::Alloc, next_id, a.size, call);
            temps.push((next_id, a.size));
            next_id += 1;
        }
        for (id, size) in temps {
            ev(&mut b, &mut names, Action::FreeCompleted, id, size, call);
        }
        for (id, size) in std::mem::replace(&mut live_inputs, outputs) {
            ev(&mut b, &mut names, Action::FreeCompleted, id, size, call);
        }
    }
    crate::import::xla::trace::add_program_column(&mut b, names);
    let mut m = crate::import::xla::trace::metadata(std::slice::from_ref(p), &p.prefix);
    m.extra.insert("runtime_calls".into(), calls.into());
    b.finish(m, FrameTable::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::xla::{AssignmentSource, HeapEvent, XlaAllocation, XlaValue};
    use std::path::PathBuf;

    fn value(id: u64, size: i64) -> XlaValue {
        XlaValue { id, name: format!("v{id}{{}}"), size, color: 0, position: id as i64, live: None, is_tuple_shape: false }
    }

    fn ev(kind: HeapEventKind, value: u32) -> HeapEvent {
        HeapEvent { kind, value, share_with: u32::MAX }
    }

    /// A program: two heap values (1000 B and 3000 B, overlapping), two tuple tables of 16 B,
    /// one live-out value, and (optionally) a thread-local allocation.
    fn program(thread_local: bool) -> XlaProgram {
        let values = vec![value(0, 1000), value(1, 3000), value(2, 16), value(3, 16), value(4, 8)];
        let mut allocations = vec![
            XlaAllocation { index: 0, size: 8, maybe_live_out: true, assigned: vec![(4, 0, 8)], ..Default::default() },
            XlaAllocation { index: 1, size: 0, assigned: vec![(0, 0, 0), (1, 0, 0), (2, 0, 16), (3, 0, 0)], ..Default::default() },
        ];
        if thread_local {
            allocations.push(XlaAllocation { index: 2, size: 4, is_thread_local: true, ..Default::default() });
        }
        // The dump's temp allocation lists tuples at distinct offsets; only grouping matters.
        allocations[1].assigned[3].1 = 256;
        let heap_traces =
            vec![vec![ev(HeapEventKind::Alloc, 0), ev(HeapEventKind::Alloc, 1), ev(HeapEventKind::Free, 0), ev(HeapEventKind::Free, 1)]];
        XlaProgram {
            program: "module_1.test".into(),
            module_name: "test".into(),
            platform: "sm_9.0a_gpu".into(),
            prefix: PathBuf::new(),
            source: AssignmentSource::Proto,
            values,
            allocations,
            heap_traces,
            schedule_end: None,
        }
    }

    #[test]
    fn combine_temp_allocations_with_thread_locals_after_the_temps() {
        // Pre-combine list (size desc): [T2(16), T3(16), L8 (live-out 8)], heap H, thread-local
        // TL. Hoare partition: swap(T2, TL) → [TL, T3, L8, H, T2]; from the left T3, from the
        // right (H is a temp) L8: swap → [TL, L8, T3, H, T2]. Run = T3, H, T2.
        // Heap: 3000 @0, 1000 @3072 (aligned) → 4072. Combined: T3 @0 (16), H @256 (4072),
        // T2 @ RoundUp(256+4072, 256) = 4352 → size 4368.
        let p = program(true);
        let t = plan_temps(&p);
        assert_eq!(t.offsets[&3], 0);
        assert_eq!(t.offsets[&1], 256);
        assert_eq!(t.offsets[&0], 256 + 3072);
        assert_eq!(t.offsets[&2], 4352);
        assert_eq!(t.planned_temp_bytes(), 4368);
        // Lower bound: max live 4000 + the tables 32.
        assert_eq!(t.lower_bound_bytes, 4032);
    }

    #[test]
    fn combine_temp_allocations_without_thread_locals_keeps_the_heap_last() {
        // [T2, T3, L8, H]: swap(0, 2) → [L8, T3, T2, H]: run T3, T2, H (H never moved).
        // T3 @0, T2 @256, H @512 → 512 + 4072 = 4584.
        let t = plan_temps(&program(false));
        assert_eq!((t.offsets[&3], t.offsets[&2], t.offsets[&1]), (0, 256, 512));
        assert_eq!(t.planned_temp_bytes(), 4584);
    }

    #[test]
    fn runtime_trace_frees_the_arena_after_each_call() {
        let mut p = program(false);
        p.allocations[1].size = 4584;
        p.allocations.push(XlaAllocation { index: 9, size: 100, is_entry_computation_parameter: true, ..Default::default() });
        let t = runtime_trace(&p, 2).unwrap();
        let c = t.columns();
        let acts: Vec<(u8, u64, u64)> = (0..t.num_events()).map(|i| (c.action[i], c.alloc_id[i], c.size[i])).collect();
        let (a, f) = (Action::Alloc as u8, Action::FreeCompleted as u8);
        assert_eq!(
            acts,
            vec![
                (a, 0, 100),  // argument
                (a, 1, 8),    // call 0: output
                (a, 2, 4584), // temp arena
                (f, 2, 4584),
                (f, 0, 100), // arguments dropped
                (a, 3, 8),   // call 1
                (a, 4, 4584),
                (f, 4, 4584),
                (f, 1, 8), // call 0's outputs dropped
            ]
        );
    }
}
