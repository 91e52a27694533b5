//! Upstream XLA's tests of `GlobalDecreasingSizeBestFitHeap` (and `NoFragmentationStatsHeap`),
//! ported onto `offline::heap`.
//!
//! Source: openxla/xla `xla/service/heap_simulator/heap_simulator_test.cc` at commit
//! 665631ec9cf81f6212110f1a0184170bf5e04404 (the tests below read the same in the older
//! `xla/service/heap_simulator_test.cc`). Every expected offset, chunk size and heap size is
//! the one upstream's test states.
//!
//! Mapping. `HeapAlgorithmTestBase` makes `buffer_a_` .. `buffer_i_` as `HloValue`s with ids
//! 0 .. 8, in that order: here they are the handles `A` .. `I`, each with its id as the key
//! that breaks ties (`std::cref(*x.buffer)` in the comparisons). Upstream's
//! `heap.Alloc / Free / ShareWith` become `HeapBuilder::alloc / free / share_with`, which advance
//! the clock as `current_time_` does (one tick per call; a zero-sized buffer takes none and is
//! placed at 0). `heap.Finish()` of a `GlobalDecreasingSizeBestFitHeap<HloValue>(alignment)` is
//! `plan_with(.., alignment, Strategy::Spatial)`: the constructor's `type` defaults to kSpatial.
//! A chunk of `result.chunk_map` is an interval's `(offsets[i], chunk_sizes[i])`: a colocated
//! buffer's chunk is its group's, `max_colocation_size` bytes long.
//!
//! Skipped (not expressible as intervals placed by `plan` / `plan_with`):
//! - `FindGlobalDecreasingSizeBestFitTest.ChunkCandidate`: preferred offsets, and chunks found
//!   and committed one by one in the test's own order (`FindChunkCandidate` /
//!   `CommitChunkAndInterval` called directly, not `Finish`'s sorted order).
//! - `FindGlobalDecreasingSizeBestFitTest.FindChunkCandidates`: slicing
//!   (`SlicedBufferInterval::Slice`, sliced colocations).
//! - `ConstrainedGlobalDecreasingSizeBestFitHeapTest.{DecreasingSize,
//!   DecreasingSizeWithAlignment, ColocatedII, DecreasingSizeFastMerge, DecreasingSizeFastSplit,
//!   PhaseWindowEndClustersByExpiry, PhaseWindowOrdersByStartTime}`: a `size_limit_per_heap`
//!   that splits the buffers over several heaps (`heap_results.size() > 1`), and the kFastMerge
//!   / kFastSplit / kPhaseWindow / kPhaseWindowEnd orders; the engine plans one heap, in the
//!   kSpatial and kTemporal orders only.
//! - `IntervalTreeTest.*`: the treap `BufferIntervalTree` itself (node layout after `Remove`,
//!   `NumChunksOverlappingInTime`, ASCII art, `MemoryUsedInInterval`, `HeapSizeInInterval`);
//!   the engine's overlap structure is private and has no such API.
//! - `SlicedBufferIntervalTest.*`, `SlicedAllocationFinderTest.*`,
//!   `SliceTimePermutationIteratorTest.*`: slicing (and, for `Repacks`, repacking).
//! - `BreadthFirstMidpointIteratorTest.*`: an iterator of memory-space assignment, not of the
//!   heap.
//! - `MinimumMemoryForSequenceTest.*`, `HeapSimulatorTest.*` (including
//!   `AsyncCallImplicitSharding`, which runs a `GlobalDecreasingSizeBestFitHeap` through
//!   `HeapSimulator::Run`, and `UnionFindSizeUpdate`): HLO modules, schedules and alias analysis.
//! - The benchmarks (`BM_*`) are not tests.
//!
//! Upstream has no test of `ChooseBestHeapAlgorithm` or of the kTemporal order at this commit
//! (kTemporal appears only in `BM_GlobalDecreasingSizeBestFitHeap_Temporal`), so none is ported.

use allocreplay_core::offline::heap::{plan_with, HeapBuilder, HeapPlan, Strategy};

// `buffer_a_` .. `buffer_i_`: handle = `HloValue` id.
const A: u32 = 0;
const B: u32 = 1;
const C: u32 = 2;
const D: u32 = 3;
const E: u32 = 4;

/// `heap.Alloc(buffer, size)`.
fn alloc(h: &mut HeapBuilder, buffer: u32, size: i64) {
    h.alloc(buffer, u64::from(buffer), size);
}

/// `heap.ShareWith(buffer, share_with, size)`.
fn share_with(h: &mut HeapBuilder, buffer: u32, share_with: u32, size: i64) {
    h.share_with(buffer, u64::from(buffer), share_with, size);
}

/// `GlobalDecreasingSizeBestFitHeap<HloValue>(alignment).Finish()` (kSpatial).
fn finish(h: &HeapBuilder, alignment: i64) -> HeapPlan {
    let p = plan_with(&h.intervals, alignment, Strategy::Spatial);
    assert_eq!(p.strategy, Strategy::Spatial);
    p
}

/// `result.chunk_map.at(buffer)` as `(offset, size)`.
fn chunk(h: &HeapBuilder, p: &HeapPlan, buffer: u32) -> (i64, i64) {
    let i = h.interval_of(buffer).unwrap_or_else(|| panic!("buffer {buffer} has no interval")) as usize;
    (p.offsets[i], p.chunk_sizes[i])
}

// heap_simulator_test.cc: NoFragmentationStatsHeapTest.Empty
#[test]
fn no_fragmentation_stats_heap_empty() {
    let heap = HeapBuilder::default();
    assert_eq!(heap.max_live_bytes(), 0);
}

// heap_simulator_test.cc: NoFragmentationStatsHeapTest.Simple
#[test]
fn no_fragmentation_stats_heap_simple() {
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 10);
    alloc(&mut heap, B, 20);
    alloc(&mut heap, C, 30);
    alloc(&mut heap, D, 30);
    heap.free(A, 10);
    heap.free(B, 20);
    heap.free(C, 30);
    heap.free(D, 30);
    assert_eq!(heap.max_live_bytes(), 90);
}

// heap_simulator_test.cc: NoFragmentationStatsHeapTest.Mixed
#[test]
fn no_fragmentation_stats_heap_mixed() {
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 10); // max: A

    alloc(&mut heap, B, 20); // max: A+B
    heap.free(B, 20);

    alloc(&mut heap, C, 30); // max: A+C
    heap.free(C, 30);

    alloc(&mut heap, D, 5); // max: A+C
    heap.free(D, 5);

    heap.free(A, 10);
    assert_eq!(heap.max_live_bytes(), 40);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.Empty
#[test]
fn global_decreasing_size_best_fit_heap_empty() {
    let heap = HeapBuilder::default();
    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 0);
    // One heap result (a `HeapPlan`), with an empty chunk map.
    assert!(result.offsets.is_empty());
    assert!(result.chunk_sizes.is_empty());
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.DecreasingSize
#[test]
fn global_decreasing_size_best_fit_heap_decreasing_size() {
    // space
    //   ^
    //   |  +---a---+
    //   |      +-------+
    //   |      +---c---+
    //   |    +-------+
    //   |    |   b   |
    //   |    +-------+
    //   |         +-------+
    //   |         |       |
    //   |         |   d   |
    //   |         +-------+
    //   -----------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 10);
    alloc(&mut heap, B, 30);
    alloc(&mut heap, C, 20);
    alloc(&mut heap, D, 40);
    heap.free(A, 10);
    heap.free(B, 30);
    heap.free(C, 20);
    heap.free(D, 40);

    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 100);
    assert_eq!(chunk(&heap, &result, A).1, 10);
    assert_eq!(chunk(&heap, &result, B).1, 30);
    assert_eq!(chunk(&heap, &result, C).1, 20);
    assert_eq!(chunk(&heap, &result, D).1, 40);

    assert_eq!(chunk(&heap, &result, A).0, 90);
    assert_eq!(chunk(&heap, &result, B).0, 40);
    assert_eq!(chunk(&heap, &result, C).0, 70);
    assert_eq!(chunk(&heap, &result, D).0, 0);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.DecreasingSizeWithAlignment
#[test]
fn global_decreasing_size_best_fit_heap_decreasing_size_with_alignment() {
    // space
    //   ^
    //   |      +-------+
    //   |      +---b---+
    //   |            +-------+
    //   |            |       |
    //   |            |   d   |
    //   |  +---a---+ +-------+
    //   |
    //   |         +-------+
    //   |         |       |
    //   |         |   c   |
    //   |         |       |
    //   |         +-------+
    //   ---------------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 10);
    alloc(&mut heap, B, 20);
    alloc(&mut heap, C, 50);
    heap.free(A, 10);
    alloc(&mut heap, D, 40);
    heap.free(B, 20);
    heap.free(C, 50);
    heap.free(D, 40);

    let result = finish(&heap, 20);
    assert_eq!(result.heap_size, 120);
    assert_eq!(chunk(&heap, &result, A).1, 10);
    assert_eq!(chunk(&heap, &result, B).1, 20);
    assert_eq!(chunk(&heap, &result, C).1, 50);
    assert_eq!(chunk(&heap, &result, D).1, 40);

    assert_eq!(chunk(&heap, &result, A).0, 60);
    assert_eq!(chunk(&heap, &result, B).0, 100);
    assert_eq!(chunk(&heap, &result, C).0, 0);
    assert_eq!(chunk(&heap, &result, D).0, 60);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.BestFit
#[test]
fn global_decreasing_size_best_fit_heap_best_fit() {
    // space
    //   ^
    //   |    +-------+
    //   |    +---b---+
    //   |         +-------+
    //   |         |   d   |
    //   | +--a--+ +-------+
    //   |      +-------+
    //   |      |       |
    //   |      |   c   |
    //   |      +-------+
    //   |           +-------+
    //   |           |       |
    //   |           |   e   |
    //   |           |       |
    //   |           +-------+
    //   ---------------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 10);
    alloc(&mut heap, B, 20);
    alloc(&mut heap, C, 40);
    heap.free(A, 10);
    alloc(&mut heap, D, 30);
    alloc(&mut heap, E, 50);
    heap.free(B, 20);
    heap.free(C, 40);
    heap.free(D, 30);
    heap.free(E, 50);

    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 140);
    assert_eq!(chunk(&heap, &result, A).1, 10);
    assert_eq!(chunk(&heap, &result, B).1, 20);
    assert_eq!(chunk(&heap, &result, C).1, 40);
    assert_eq!(chunk(&heap, &result, D).1, 30);
    assert_eq!(chunk(&heap, &result, E).1, 50);

    assert_eq!(chunk(&heap, &result, A).0, 90);
    assert_eq!(chunk(&heap, &result, B).0, 120);
    assert_eq!(chunk(&heap, &result, C).0, 50);
    assert_eq!(chunk(&heap, &result, D).0, 90);
    assert_eq!(chunk(&heap, &result, E).0, 0);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.Colocated
#[test]
fn global_decreasing_size_best_fit_heap_colocated() {
    // space      colocate
    //   ^   +--------------+
    //   |   v              v
    //   |+------+      +-------+
    //   ||      |      |       |
    //   ||      |+----+|       |
    //   |+--a---++-b--++---c---+
    //   ---------------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 40);
    heap.free(A, 40);
    alloc(&mut heap, B, 20);
    heap.free(B, 20);
    share_with(&mut heap, C, A, 40);
    heap.free(C, 40);

    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 40);
    assert_eq!(chunk(&heap, &result, A).1, 40);
    assert_eq!(chunk(&heap, &result, B).1, 20);
    assert_eq!(chunk(&heap, &result, C).1, 40);

    assert_eq!(chunk(&heap, &result, A).0, 0);
    assert_eq!(chunk(&heap, &result, B).0, 0);
    assert_eq!(chunk(&heap, &result, C).0, 0);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.ColocatedII
#[test]
fn global_decreasing_size_best_fit_heap_colocated_ii() {
    // space
    //   ^       +---------------+
    //   |       +-------b-------+
    //   |+------+      +-------+
    //   ||      |      |       |
    //   ||      |      |       | <--- colocate with a
    //   |+--a---+      +---c---+
    //   ---------------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 40);
    heap.free(A, 40);
    alloc(&mut heap, B, 20);

    share_with(&mut heap, C, A, 40);
    heap.free(C, 40);
    heap.free(B, 20);

    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 60);
    assert_eq!(chunk(&heap, &result, A).1, 40);
    assert_eq!(chunk(&heap, &result, B).1, 20);
    assert_eq!(chunk(&heap, &result, C).1, 40);

    assert_eq!(chunk(&heap, &result, A).0, 0);
    assert_eq!(chunk(&heap, &result, B).0, 40);
    assert_eq!(chunk(&heap, &result, C).0, 0);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.ColocatedIII
#[test]
fn global_decreasing_size_best_fit_heap_colocated_iii() {
    // space
    //   ^+------+      +-------+
    //   ||      |      |       | <--- colocate with a
    //   |+--a---+      +---c---+
    //   |       +---------------+
    //   |       |               |
    //   |       |               |
    //   |       +-------b-------+
    //   ---------------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 10);
    heap.free(A, 10);
    alloc(&mut heap, B, 30);

    share_with(&mut heap, C, A, 10);
    heap.free(C, 10);
    heap.free(B, 30);

    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 40);
    assert_eq!(chunk(&heap, &result, A).1, 10);
    assert_eq!(chunk(&heap, &result, B).1, 30);
    assert_eq!(chunk(&heap, &result, C).1, 10);

    assert_eq!(chunk(&heap, &result, A).0, 30);
    assert_eq!(chunk(&heap, &result, B).0, 0);
    assert_eq!(chunk(&heap, &result, C).0, 30);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.ColocatedDifferentSize1
#[test]
fn global_decreasing_size_best_fit_heap_colocated_different_size1() {
    // space
    //   ^
    //   |         +---------------+
    //   |+------+ +-------b-------+
    //   ||      |      +-------+
    //   ||      |      |       | <--- colocate with a
    //   |+--a---+      +---c---+
    //   ---------------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 40);
    heap.free(A, 40);
    alloc(&mut heap, B, 20);

    share_with(&mut heap, C, A, 30);
    heap.free(C, 30);
    heap.free(B, 20);

    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 60);
    assert_eq!(chunk(&heap, &result, A).1, 40);
    assert_eq!(chunk(&heap, &result, B).1, 20);
    assert_eq!(chunk(&heap, &result, C).1, 40);

    assert_eq!(chunk(&heap, &result, A).0, 0);
    assert_eq!(chunk(&heap, &result, B).0, 40);
    assert_eq!(chunk(&heap, &result, C).0, 0);
}

// heap_simulator_test.cc: GlobalDecreasingSizeBestFitHeapTest.ColocatedDifferentSize2
#[test]
fn global_decreasing_size_best_fit_heap_colocated_different_size2() {
    // space
    //   ^         +-------------+
    //   |         +-----b-------+
    //   |              +-------+
    //   |+------+      |       |
    //   ||      |      |       |
    //   ||      |      |       | <--- colocate with a
    //   |+--a---+      +---c---+
    //   ---------------------> time
    let mut heap = HeapBuilder::default();
    alloc(&mut heap, A, 40);
    heap.free(A, 40);
    alloc(&mut heap, B, 20);

    share_with(&mut heap, C, A, 50);
    heap.free(C, 50);
    heap.free(B, 20);

    let result = finish(&heap, 1);
    assert_eq!(result.heap_size, 70);
    assert_eq!(chunk(&heap, &result, A).1, 50);
    assert_eq!(chunk(&heap, &result, B).1, 20);
    assert_eq!(chunk(&heap, &result, C).1, 50);

    assert_eq!(chunk(&heap, &result, A).0, 0);
    assert_eq!(chunk(&heap, &result, B).0, 50);
    assert_eq!(chunk(&heap, &result, C).0, 0);
}
