//! XLA's offline heap planner: `GlobalDecreasingSizeBestFitHeap` in the kSpatial and kTemporal
//! orders, chosen between by `ChooseBestHeapAlgorithm`, plus `NoFragmentationStatsHeap` (the
//! max-live lower bound). Mirrors openxla/xla `xla/service/heap_simulator/heap_simulator.cc`.
//!
//! A [`HeapBuilder`] receives the calls the `HeapSimulator` makes on its algorithm (`Alloc`,
//! `Free`, `ShareWith`), in order; each call advances a logical clock exactly as
//! `GlobalDecreasingSizeBestFitHeap::Alloc/Free/ShareWith` advance `current_time_`. `plan`
//! then places every interval (`Finish`) and keeps the smaller heap.
//!
//! Speed: the time-overlap queries of `BufferIntervalTree` are answered from lists of the
//! placed chunks kept sorted by offset ([`Layout`]): a query reads one list in the order
//! `MakeFreeChunksList` walks the chunks, filtering by two integer comparisons (an interval
//! that outlives the list's window merges in a few more, already sorted), where upstream's
//! treap walks O(log n) nodes per reported interval and then sorts them. The lists are
//! compact (12 bytes an entry) and prefetched a placement ahead: at 1 M buffers they live in
//! memory, not cache, and reading them is most of the time. The
//! free chunks are judged as they are found, not listed, by a walk without data-dependent
//! branches ([`FreeChunkWalk`]), which stops at an exact fit. Where most intervals are short
//! and some live long (a generate run), chunks that every query of a window keeps are held as
//! their union (a few runs instead of hundreds of chunks), and the blocks a long query reads
//! come from a segment tree of unions. kSpatial and kTemporal run on two threads when there
//! are cores for them, and on a large trace each order is cut in time where few intervals are
//! live and its parts placed on threads of their own, the intervals crossing a cut placed where
//! the threads meet (`planner::split`: the same placements as one thread). No allocation per placement beyond reused scratch vectors and the
//! unions' runs.
//!
//! [`Layout`]: layout::Layout
//! [`FreeChunkWalk`]: free_chunks::FreeChunkWalk

mod chunk;
mod free_chunks;
mod layout;
mod planner;
mod query;

pub use planner::{plan, plan_heap_size, plan_with, plan_with_sides};

use crate::huge_pages;

/// Which order `GlobalDecreasingSizeBestFitHeap` places intervals in (`PackingStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `GetSpatialBufferIntervalCompare`: size desc, duration desc, buffer asc.
    Spatial,
    /// `GetTemporalBufferIntervalCompare`: colocated duration desc, size desc, buffer asc.
    Temporal,
}

/// `GlobalDecreasingSizeBestFitHeap::BufferInterval`.
#[derive(Debug, Clone)]
pub struct BufferInterval {
    /// The buffer's key for ties (`HloValue` id; the alloc id of a trace).
    pub key: u64,
    pub size: i64,
    pub start: i64,
    pub end: i64,
    /// Intervals that share this one's chunk (`ShareWith` calls naming it).
    pub colocations: Colocations,
    /// False for intervals created by `ShareWith`: they are placed with their canonical.
    pub need_allocation: bool,
}

/// The intervals that share an interval's chunk. Most have none, which takes one word: a
/// trace's millions of intervals are 48 bytes each, not 64 as with a `Vec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[expect(clippy::box_collection, reason = "a thin pointer: one word for the common empty case")]
pub struct Colocations(Option<Box<Vec<u32>>>);

impl Colocations {
    pub fn push(&mut self, interval: u32) {
        self.0.get_or_insert_default().push(interval);
    }
}

impl std::ops::Deref for Colocations {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        self.0.as_deref().map_or(&[], |v| v)
    }
}

impl From<Vec<u32>> for Colocations {
    fn from(v: Vec<u32>) -> Self {
        Colocations((!v.is_empty()).then(|| Box::new(v)))
    }
}

/// Records the calls of `HeapSimulator` on its heap algorithm.
#[derive(Debug, Default, Clone)]
pub struct HeapBuilder {
    pub intervals: Vec<BufferInterval>,
    /// Interval index of each buffer handle (`u32::MAX`: none yet / zero-sized).
    index_of: Vec<u32>,
    /// Buffers of size 0 (placed at offset 0, never in the heap).
    zero_sized: Vec<u32>,
    current_time: i64,
    /// `NoFragmentationStatsHeap`: current and maximum live bytes.
    live: i64,
    max_live: i64,
}

const NONE: u32 = u32::MAX;

impl HeapBuilder {
    pub fn with_capacity(buffers: usize) -> Self {
        HeapBuilder { intervals: huge_pages::with_capacity(buffers), index_of: huge_pages::with_capacity(buffers), ..Default::default() }
    }

    fn slot(&mut self, buffer: u32) -> &mut u32 {
        let b = buffer as usize;
        if b == self.index_of.len() {
            // Handles come in order (a trace's do): one more slot.
            self.index_of.push(NONE);
        } else if b > self.index_of.len() {
            self.index_of.resize(b + 1, NONE);
        }
        &mut self.index_of[b]
    }

    /// `GlobalDecreasingSizeBestFitHeap::Alloc` (and `NoFragmentationStatsHeap::Alloc`).
    /// `buffer` is a dense handle (< 2^32 - 1); `key` orders ties.
    pub fn alloc(&mut self, buffer: u32, key: u64, size: i64) {
        self.stats_alloc(size);
        // Degenerate case: 0-sized buffers are always allocated at offset 0.
        if size == 0 {
            self.zero_sized.push(buffer);
            return;
        }
        let idx = self.intervals.len() as u32;
        *self.slot(buffer) = idx;
        let start = self.current_time;
        self.intervals.push(BufferInterval { key, size, start, end: -1, colocations: Colocations::default(), need_allocation: true });
        self.current_time += 1;
    }

    /// `GlobalDecreasingSizeBestFitHeap::ShareWith`: `buffer` will share `share_with`'s chunk.
    /// `NoFragmentationStatsHeap` inherits `HeapAlgorithm::ShareWith`, which calls `Alloc`.
    pub fn share_with(&mut self, buffer: u32, key: u64, share_with: u32, size: i64) {
        self.stats_alloc(size);
        if size == 0 {
            self.zero_sized.push(buffer);
            return;
        }
        let canonical = self.index_of.get(share_with as usize).copied().unwrap_or(NONE);
        let idx = self.intervals.len() as u32;
        *self.slot(buffer) = idx;
        let start = self.current_time;
        if canonical == NONE {
            // Sharing with a buffer we never saw allocated: place it on its own.
            self.intervals.push(BufferInterval { key, size, start, end: -1, colocations: Colocations::default(), need_allocation: true });
        } else {
            self.intervals[canonical as usize].colocations.push(idx);
            self.intervals.push(BufferInterval { key, size, start, end: -1, colocations: Colocations::default(), need_allocation: false });
        }
        self.current_time += 1;
    }

    /// `GlobalDecreasingSizeBestFitHeap::Free`. Freeing an unknown or already freed buffer is
    /// ignored (upstream CHECK-fails).
    pub fn free(&mut self, buffer: u32, size: i64) {
        self.live -= size;
        let idx = self.index_of.get(buffer as usize).copied().unwrap_or(NONE);
        if idx == NONE {
            return;
        }
        let iv = &mut self.intervals[idx as usize];
        if iv.end != -1 {
            return;
        }
        iv.end = self.current_time;
        self.current_time += 1;
    }

    /// [`Self::free`] with the size `buffer` was allocated with (0 for a zero-sized or unknown
    /// buffer, which changes no live bytes).
    pub fn free_allocated(&mut self, buffer: u32) {
        let size = self.interval_of(buffer).map_or(0, |i| self.intervals[i as usize].size);
        self.free(buffer, size);
    }

    fn stats_alloc(&mut self, size: i64) {
        self.live += size;
        self.max_live = self.max_live.max(self.live);
    }

    /// Closes every interval still open (buffers that live to the end of the program).
    pub fn free_all_open(&mut self) {
        for iv in &mut self.intervals {
            if iv.end == -1 {
                iv.end = self.current_time;
                self.current_time += 1;
            }
        }
    }

    /// The bytes live now (`NoFragmentationStatsHeap`'s count).
    pub fn live_bytes(&self) -> i64 {
        self.live
    }

    /// `NoFragmentationStatsHeap::Finish`: the maximum of the live bytes.
    pub fn max_live_bytes(&self) -> i64 {
        self.max_live
    }

    /// The interval of a buffer handle, if it got one.
    pub fn interval_of(&self, buffer: u32) -> Option<u32> {
        self.index_of.get(buffer as usize).copied().filter(|&i| i != NONE)
    }

    pub fn zero_sized(&self) -> &[u32] {
        &self.zero_sized
    }
}

/// Result of one heap: `HeapSimulator::HeapResult`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapPlan {
    pub strategy: Strategy,
    pub heap_size: i64,
    /// Offset of each interval's chunk (colocations share their canonical's).
    pub offsets: Vec<i64>,
    /// Chunk size of each interval (`max_colocation_size` of its group).
    pub chunk_sizes: Vec<i64>,
}

/// The largest heap a plan is carried to (2^62 bytes): its offsets and sizes are `i64`, and a
/// placement adds at most a chunk (below 2^56 bytes in a trace) and the alignment to the heap,
/// so nothing overflows before a plan passes it; a plan that does stops (see
/// `offline::MAX_PLANNED_BYTES`).
pub const MAX_HEAP: i64 = 1 << 62;

/// Placements between two looks at the call's cancellation token (`crate::cancel`).
const CANCEL_EVERY: usize = 256;
/// Intervals [`Layout::new`] ranks between two looks at it.
///
/// [`Layout::new`]: layout::Layout::new
const CANCEL_EVERY_SLOTS: usize = 1 << 16;
