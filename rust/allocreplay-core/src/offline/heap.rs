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
//! are cores for them. No allocation per placement beyond reused scratch vectors and the
//! unions' runs.

use std::hint::select_unpredictable;

use super::run_pool::{merge_into, RunPool, Union};
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
        if b >= self.index_of.len() {
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

/// `ChooseBestHeapAlgorithm` over kSpatial and kTemporal, as
/// `BufferAssigner::AssignBuffersWithSequentialOrdering`'s `get_heap_algorithm` builds it:
/// the smaller heap wins, kSpatial on a tie (it is listed first).
///
/// The two orders share nothing they write: with more than one core and enough intervals to
/// be worth a thread, kTemporal runs on a second thread while kSpatial runs on this one (the
/// result is the same either way). On one thread kTemporal runs second and stops once its heap
/// reaches kSpatial's, where it can no longer win.
pub fn plan(intervals: &[BufferInterval], alignment: i64) -> HeapPlan {
    choose_best(intervals, alignment, true, None)
}

/// [`plan`]'s heap size and order only (`offsets` and `chunk_sizes` left empty): what the
/// `offline` bound reports, without writing an offset per interval.
///
/// `max_live_bytes`: the peak of the intervals' live bytes ([`HeapBuilder::max_live_bytes`]
/// of the builder that made them), a lower bound of any heap of intervals without
/// colocations. On one core, a kSpatial heap that reaches it is the answer without kTemporal:
/// kTemporal cannot be smaller, and kSpatial wins a tie.
pub fn plan_heap_size(intervals: &[BufferInterval], alignment: i64, max_live_bytes: i64) -> (Strategy, i64) {
    let p = choose_best(intervals, alignment, false, Some(max_live_bytes));
    (p.strategy, p.heap_size)
}

fn choose_best(intervals: &[BufferInterval], alignment: i64, offsets: bool, max_live_bytes: Option<i64>) -> HeapPlan {
    let parallel = intervals.len() >= PARALLEL_FROM && std::thread::available_parallelism().is_ok_and(|p| p.get() > 1);
    let (spatial, temporal) = if parallel {
        // kSpatial takes longer: its keys are sorted on the second thread while this one lays
        // out the overlap structure, and kTemporal then runs there.
        // The second thread runs under the caller's cancellation token (`crate::cancel`).
        let token = crate::cancel::current();
        let token = token.as_ref();
        let (planner, spatial_keys) = std::thread::scope(|s| {
            let keys = s.spawn(|| packed_order(intervals, Strategy::Spatial));
            (Planner::new(intervals, alignment), join(keys))
        });
        std::thread::scope(|s| {
            let temporal = s.spawn(|| crate::cancel::within(token, || planner.run(Strategy::Temporal, offsets)));
            let spatial = planner.run_in(planner.order(Strategy::Spatial, spatial_keys), offsets);
            (spatial, join(temporal))
        })
    } else {
        let planner = Planner::new(intervals, alignment);
        let spatial = planner.run(Strategy::Spatial, offsets);
        // The live bytes bound every heap only when no chunk is shared (NoFragmentationStatsHeap
        // counts a ShareWith as an allocation of its own).
        if let Some(bound) = max_live_bytes.filter(|_| planner.colo.is_empty()) {
            debug_assert!(spatial.heap_size >= bound || crate::cancel::requested(), "a heap below the live bytes");
            if spatial.heap_size <= bound {
                return spatial;
            }
        }
        // kTemporal wins only with a smaller heap: it stops once its heap reaches kSpatial's
        // (on the generate captures, about two thirds of the way through its placements).
        match planner.run_below(Strategy::Temporal, offsets, spatial.heap_size) {
            Some(temporal) => (spatial, temporal),
            None => return spatial,
        }
    };
    if temporal.heap_size < spatial.heap_size {
        temporal
    } else {
        spatial
    }
}

/// A scoped thread's result (its panic carried on).
fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// The largest heap a plan is carried to (2^62 bytes): its offsets and sizes are `i64`, and a
/// placement adds at most a chunk (below 2^56 bytes in a trace) and the alignment to the heap,
/// so nothing overflows before a plan passes it; a plan that does stops (see
/// `offline::MAX_PLANNED_BYTES`).
pub const MAX_HEAP: i64 = 1 << 62;

/// Placements between two looks at the call's cancellation token (`crate::cancel`).
const CANCEL_EVERY: usize = 256;
/// Intervals [`Layout::new`] ranks between two looks at it.
const CANCEL_EVERY_SLOTS: usize = 1 << 16;

/// Intervals from which [`plan`] runs its two orders on two threads (below, a thread costs
/// more than it saves).
const PARALLEL_FROM: usize = 20_000;

/// One strategy only (`GlobalDecreasingSizeBestFitHeap::Finish`).
pub fn plan_with(intervals: &[BufferInterval], alignment: i64, strategy: Strategy) -> HeapPlan {
    Planner::new(intervals, alignment).run(strategy, true)
}

/// What both orders share: the intervals' transitive colocations and the layout of the
/// overlap structure. Each [`Planner::run`] fills a [`Placed`] of its own.
struct Planner<'a> {
    iv: &'a [BufferInterval],
    alignment: i64,
    /// Transitive colocations of each canonical interval (`GetTransitiveColocations`),
    /// flattened: `colo[colo_start[i]..colo_start[i+1]]`. These and the three below are
    /// empty when no interval has colocations (a trace's never do).
    colo_start: Vec<u32>,
    colo: Vec<u32>,
    /// Per interval: min colocation start, max colocation end, max colocation size (read
    /// through the methods of the same names).
    min_start: Vec<i64>,
    max_end: Vec<i64>,
    max_size: Vec<i64>,
    layout: Layout,
}

impl<'a> Planner<'a> {
    fn new(iv: &'a [BufferInterval], alignment: i64) -> Self {
        Self::with_layout(iv, alignment, None)
    }

    /// `block_window`: force [`Layout`]'s block and window (tests use tiny ones).
    fn with_layout(iv: &'a [BufferInterval], alignment: i64, block_window: Option<(usize, usize)>) -> Self {
        let layout = Layout::new(iv, alignment.max(1), block_window);
        if iv.iter().all(|x| x.colocations.is_empty()) {
            // Each interval is its own group: nothing to gather (the accessors read the
            // interval).
            let (colo_start, colo) = (Vec::new(), Vec::new());
            let (min_start, max_end, max_size) = (Vec::new(), Vec::new(), Vec::new());
            return Planner { iv, alignment: alignment.max(1), colo_start, colo, min_start, max_end, max_size, layout };
        }
        let n = iv.len();
        let mut colo_start = Vec::with_capacity(n + 1);
        let mut colo = Vec::new();
        let (mut min_start, mut max_end, mut max_size) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let mut stack: Vec<u32> = Vec::new();
        let mut seen: Vec<u32> = vec![u32::MAX; n];
        for (i, x) in iv.iter().enumerate() {
            colo_start.push(colo.len() as u32);
            let (mut lo, mut hi, mut sz) = (x.start, x.end, x.size);
            // GetTransitiveColocations: worklist over colocations of colocations.
            stack.clear();
            stack.push(i as u32);
            while let Some(item) = stack.pop() {
                for &c in iv[item as usize].colocations.iter() {
                    if seen[c as usize] != i as u32 {
                        seen[c as usize] = i as u32;
                        colo.push(c);
                        stack.push(c);
                        let ci = &iv[c as usize];
                        lo = lo.min(ci.start);
                        hi = hi.max(ci.end);
                        sz = sz.max(ci.size);
                    }
                }
            }
            min_start.push(lo);
            max_end.push(hi);
            max_size.push(sz);
        }
        colo_start.push(colo.len() as u32);
        Planner { iv, alignment: alignment.max(1), colo_start, colo, min_start, max_end, max_size, layout }
    }

    fn colocations(&self, i: usize) -> &[u32] {
        if self.colo.is_empty() {
            return &[];
        }
        &self.colo[self.colo_start[i] as usize..self.colo_start[i + 1] as usize]
    }

    /// The earliest start of interval `i`'s colocation group.
    fn min_start(&self, i: usize) -> i64 {
        self.min_start.get(i).copied().unwrap_or(self.iv[i].start)
    }

    /// The latest end of interval `i`'s colocation group.
    fn max_end(&self, i: usize) -> i64 {
        self.max_end.get(i).copied().unwrap_or(self.iv[i].end)
    }

    /// The largest size in interval `i`'s colocation group.
    fn max_size(&self, i: usize) -> i64 {
        self.max_size.get(i).copied().unwrap_or(self.iv[i].size)
    }

    /// One order's plan; `offsets`: whether to return each interval's offset and chunk size.
    fn run(&self, strategy: Strategy, offsets: bool) -> HeapPlan {
        self.run_below(strategy, offsets, i64::MAX).expect("no heap reaches i64::MAX")
    }

    /// [`Planner::run`], given up (`None`) as soon as the heap reaches `stop_at`: a plan that
    /// only wins with a smaller heap than one already made is not worth finishing.
    fn run_below(&self, strategy: Strategy, offsets: bool, stop_at: i64) -> Option<HeapPlan> {
        self.run_in_below(self.order(strategy, packed_order(self.iv, strategy)), offsets, stop_at)
    }

    /// The order `strategy` places in: its packed keys when [`packed_order`] gave them.
    fn order(&self, strategy: Strategy, packed: Option<Vec<u128>>) -> Order {
        match packed {
            Some(keys) => Order::Packed { keys, strategy },
            None => Order::Listed(self.sorted_jobs(strategy), strategy),
        }
    }

    /// The plan of placing in `order`.
    fn run_in(&self, order: Order, offsets: bool) -> HeapPlan {
        self.run_in_below(order, offsets, i64::MAX).expect("no heap reaches i64::MAX")
    }

    /// The plan of placing in `order`, or `None` once the heap reaches `stop_at`.
    fn run_in_below(&self, order: Order, offsets: bool, stop_at: i64) -> Option<HeapPlan> {
        if self.layout.compact_slots() {
            if let Ok(plan) = self.place::<Compact>(&order, offsets, stop_at) {
                return plan;
            }
        }
        self.place::<Wide>(&order, offsets, stop_at).unwrap_or_else(|_| unreachable!("every chunk fits a wide entry"))
    }

    /// `GetSortedBufferIntervals` + `buffer_interval_compare_`: what each placement reads of its
    /// interval, in placement order.
    fn sorted_jobs(&self, strategy: Strategy) -> Vec<Job> {
        let iv = self.iv;
        // The keys gathered first: the sort then reads no interval.
        let mut keyed: Vec<(i64, i64, u64, u32)> = (0..iv.len())
            .filter(|&i| iv[i].need_allocation)
            .map(|i| {
                let x = &iv[i];
                match strategy {
                    Strategy::Spatial => (-x.size, x.start - x.end, x.key, i as u32),
                    Strategy::Temporal => (self.min_start(i) - self.max_end(i), -x.size, x.key, i as u32),
                }
            })
            .collect();
        if crate::cancel::requested() {
            // Cancelled (`crate::cancel`): nothing will be placed; no sort.
            return Vec::new();
        }
        keyed.sort_unstable();
        // In sorted order the intervals are read at random: each one's fields are asked for a
        // few ahead.
        (0..keyed.len())
            .map(|t| {
                if let Some(&(_, _, _, later)) = keyed.get(t + 16) {
                    let later = later as usize;
                    prefetch(std::slice::from_ref(&iv[later]));
                    if let Some(m) = self.max_size.get(later) {
                        prefetch(std::slice::from_ref(m));
                    }
                    prefetch(std::slice::from_ref(&self.layout.at[later]));
                }
                self.job(keyed[t].3 as usize)
            })
            .collect()
    }

    fn job(&self, i: usize) -> Job {
        Job {
            i: i as u32,
            size: self.iv[i].size,
            max_colocation_size: self.max_size(i),
            at: self.layout.at[i],
            colocated: !self.colocations(i).is_empty(),
        }
    }

    /// Places the intervals in `order` with list entries of type `C`; `offsets`: whether to
    /// keep each one's offset and chunk size (colocations need them anyway). `Ok(None)`: the
    /// heap reached `stop_at` (placing stopped there).
    fn place<C: Chunk>(&self, order: &Order, offsets: bool, stop_at: i64) -> Result<Option<HeapPlan>, DoesNotFit> {
        let at = &self.layout.at[..];
        let n = if offsets || !self.colo.is_empty() { self.iv.len() } else { 0 };
        if crate::cancel::requested() {
            // Cancelled (`crate::cancel`) before placing anything: an empty plan of the right
            // shape (zeroed pages, never written), which the callers drop (they check the
            // token once the plan returns).
            return Ok(Some(HeapPlan { strategy: order.strategy(), heap_size: 0, offsets: vec![0; n], chunk_sizes: vec![0; n] }));
        }
        let mut placed = Placed::<C>::new(&self.layout);
        let mut scratch = Scratch::default();
        let (mut offsets, mut chunk_sizes) = (huge_pages::filled(n, 0i64), huge_pages::filled(n, 0i64));
        // Only colocations can be placed twice (intervals not built by `HeapBuilder`).
        let mut done = vec![false; if self.colo.is_empty() { 0 } else { n }];
        let mut heap_size = 0i64;
        let len = order.len();
        for t in 0..len {
            // Cancelled (`crate::cancel`): the plan so far, which the callers drop (they check
            // the token once the plan returns). Looked at often: a placement can take
            // milliseconds (the first, largest intervals of kSpatial overlap most others).
            if t % CANCEL_EVERY == 0 && t > 0 && crate::cancel::requested() {
                break;
            }
            // In placement order the intervals are read at random: their slots are asked for
            // well ahead.
            if t + 2 * AHEAD < len {
                prefetch(std::slice::from_ref(&at[order.interval(t + 2 * AHEAD)]));
            }
            // The lists the next placement reads, on their way into the cache while this one
            // runs (most of the time goes to waiting for them otherwise).
            if t + 1 < len {
                self.layout.prefetch(&placed, at[order.interval(t + 1)]);
            }
            // Further ahead, what finding those lists reads: the placements jump in time, so
            // each one's list bounds and union headers are elsewhere in memory.
            if t + AHEAD < len {
                let later = order.interval(t + AHEAD);
                self.layout.prefetch_heads(&placed, at[later]);
                if n > 0 {
                    prefetch(std::slice::from_ref(&offsets[later]));
                    prefetch(std::slice::from_ref(&chunk_sizes[later]));
                }
            }
            let job = &order.job(t, at);
            let i = job.i as usize;
            let max_colocation_size = job.max_colocation_size;
            let offset = self.find_chunk_candidate(&mut placed, &mut scratch, job);
            // CommitChunkAndInterval: the chunk of the largest colocation, for all of them.
            heap_size = heap_size.max(offset + max_colocation_size);
            if heap_size >= stop_at {
                return Ok(None);
            }
            if heap_size > MAX_HEAP {
                // Beyond what 64-bit offsets plan safely (each placement adds less than
                // 2^56 + the alignment: nothing has overflowed yet). The plan stops here; its
                // callers refuse a heap above `MAX_HEAP` (`offline::MAX_PLANNED_BYTES`).
                break;
            }
            let colocations = if job.colocated { self.colocations(i) } else { &[] };
            for c in std::iter::once(i).chain(colocations.iter().map(|&c| c as usize)) {
                if !done.is_empty() {
                    if done[c] {
                        // Placed again: the new chunk replaces the old one, as in upstream's
                        // tree node.
                        self.layout.remove(&mut placed, c, offsets[c], offsets[c].saturating_add(chunk_sizes[c]));
                    }
                    done[c] = true;
                }
                if n > 0 {
                    offsets[c] = offset;
                    chunk_sizes[c] = max_colocation_size;
                }
                let a = if c == i { job.at } else { self.layout.at[c] };
                self.layout.add(&mut placed, a, offset, max_colocation_size)?;
            }
        }
        Ok(Some(HeapPlan { strategy: order.strategy(), heap_size, offsets, chunk_sizes }))
    }

    /// `MakeFreeChunksList` + `FindUnslicedChunkCandidates` (kBestFit, no preferred offset):
    /// the used chunks of the placed intervals overlapping `i` (and its colocations) in time,
    /// by offset, walked once; each free chunk is judged as found (by increasing offset, the
    /// open end last), keeping the first smallest that fits.
    fn find_chunk_candidate<C: Chunk>(&self, placed: &mut Placed<C>, scratch: &mut Scratch, job: &Job) -> i64 {
        let (size, max_colocation_size) = (job.size, job.max_colocation_size);
        if !job.colocated && size >= 1 && max_colocation_size >= size && self.alignment & (self.alignment - 1) == 0 {
            // The common case: the chunks come sorted from the overlap structure.
            let walk = FreeChunkWalk::new(size, max_colocation_size, self.alignment);
            return self.layout.best_fit(placed, job.at, walk, scratch);
        }
        // Colocated intervals (XLA's in-place users), or sizes / alignments the walk's
        // shortcuts don't cover: collect the chunks of every member's lifetime and sort them.
        let buf = &mut scratch.buf;
        buf.clear();
        let mut push = |o: i64, e: i64| buf.push((o, e));
        self.layout.overlapping(placed, job.at, &mut push);
        for &c in self.colocations(job.i as usize) {
            self.layout.overlapping(placed, self.layout.at[c as usize], &mut push);
        }
        buf.sort_unstable();
        best_fit(buf.iter().copied(), size, max_colocation_size, self.alignment)
    }
}

/// [`Planner::sorted_jobs`] for the common case, faster: no colocations and keys that rise
/// with the interval index (a trace's allocation ids do), so that ties on the key are
/// ties on the index. Each order's comparison is then one `u128` (kSpatial: size desc,
/// duration desc, index; kTemporal: duration desc, size desc, index), from which a
/// placement takes its interval and size ([`Order::Packed`]). `None` when the case does
/// not hold (or the values do not fit the packing).
fn packed_order(iv: &[BufferInterval], strategy: Strategy) -> Option<Vec<u128>> {
    if iv.len() > u32::MAX as usize {
        return None;
    }
    let mut packed: Vec<u128> = huge_pages::with_capacity(iv.len());
    let mut last_key = None;
    for (i, x) in iv.iter().enumerate() {
        if !x.need_allocation || !x.colocations.is_empty() || last_key.is_some_and(|k| k >= x.key) || x.size < 1 {
            return None;
        }
        last_key = Some(x.key);
        let duration = u32::try_from(x.end - x.start).ok()?;
        let (size, i) = (x.size as u64, i as u128);
        packed.push(match strategy {
            Strategy::Spatial => (u128::from(!size) << 64) | (u128::from(!duration) << 32) | i,
            Strategy::Temporal => (u128::from(!duration) << 96) | (u128::from(!size) << 32) | i,
        });
    }
    if crate::cancel::requested() {
        // Cancelled (`crate::cancel`): nothing will be placed; no sort.
        return Some(Vec::new());
    }
    packed.sort_unstable();
    Some(packed)
}

/// The intervals to place, in order.
enum Order {
    /// Each placement's [`Job`] gathered.
    Listed(Vec<Job>, Strategy),
    /// [`packed_order`]'s keys: a job is its key's interval and size, and the
    /// interval's slots (no colocations).
    Packed { keys: Vec<u128>, strategy: Strategy },
}

impl Order {
    fn strategy(&self) -> Strategy {
        match self {
            Order::Listed(_, strategy) | Order::Packed { strategy, .. } => *strategy,
        }
    }

    fn len(&self) -> usize {
        match self {
            Order::Listed(jobs, _) => jobs.len(),
            Order::Packed { keys, .. } => keys.len(),
        }
    }

    /// The interval placed `t`-th.
    #[inline]
    fn interval(&self, t: usize) -> usize {
        match self {
            Order::Listed(jobs, _) => jobs[t].i as usize,
            Order::Packed { keys, .. } => keys[t] as u32 as usize,
        }
    }

    #[inline]
    fn job(&self, t: usize, at: &[SlotInfo]) -> Job {
        match self {
            Order::Listed(jobs, _) => jobs[t],
            Order::Packed { keys, strategy } => {
                let k = keys[t];
                let size = match strategy {
                    Strategy::Spatial => !((k >> 64) as u64),
                    Strategy::Temporal => !((k >> 32) as u64),
                } as i64;
                let i = k as u32;
                Job { i, size, max_colocation_size: size, at: at[i as usize], colocated: false }
            }
        }
    }
}

/// One placement's view of its interval (gathered in placement order).
#[derive(Clone, Copy)]
struct Job {
    i: u32,
    size: i64,
    max_colocation_size: i64,
    at: SlotInfo,
    colocated: bool,
}

/// `MakeFreeChunksList` over the used chunks sorted by offset, each free chunk judged as the
/// list would be walked (by increasing offset, the open end last) by
/// `FindUnslicedChunkCandidates`' best fit: the first smallest that holds `max_colocation_size`
/// at its aligned start. Chunks shorter than the buffer's own `size` are not listed. `used`
/// yields (offset, end) pairs.
fn best_fit(mut used: impl Iterator<Item = (i64, i64)>, size: i64, max_colocation_size: i64, alignment: i64) -> i64 {
    let mut best_offset = -1i64;
    let mut best_size = i64::MAX;
    let mut consider = |start: i64, end: i64| {
        let aligned_start = align_up(start, alignment);
        if end - max_colocation_size < aligned_start {
            return;
        }
        let size = end - start;
        if best_offset < 0 || size < best_size {
            best_size = size;
            best_offset = aligned_start;
        }
    };
    let mut current_free_chunk_start = 0i64;
    if let Some((o0, e0)) = used.next() {
        let (mut current_offset, mut current_end) = (o0, e0);
        for (o, e) in used {
            if o < current_end {
                current_end = current_end.max(e);
            } else {
                if current_offset - current_free_chunk_start >= size {
                    consider(current_free_chunk_start, current_offset);
                }
                current_free_chunk_start = current_free_chunk_start.max(align_up(current_end, alignment));
                current_offset = o;
                current_end = e;
            }
        }
        if current_offset - current_free_chunk_start >= size {
            consider(current_free_chunk_start, current_offset);
        }
        current_free_chunk_start = current_free_chunk_start.max(align_up(current_end, alignment));
    }
    consider(current_free_chunk_start, i64::MAX);
    best_offset
}

/// [`best_fit`] as a state machine fed one used chunk at a time, without branches on the
/// data, for the common case: `size >= 1`, `max_colocation_size >= size` and a power-of-two
/// alignment. It keeps only the highest end so far (`run_end`): a chunk starting at or above
/// it starts a run, and the free chunk before that run is `[align(run_end), offset)` — what
/// `best_fit` lists there (its free start is the aligned end of the run before, the highest
/// end so far; at first 0), judged here as the run starts rather than as the next one does:
/// the same free chunks in the same order. An entry `(-1, -1)` changes nothing, which is how
/// chunks filtered out are skipped without a branch. Only two values carry from one chunk to
/// the next (the highest end, and the best so far), so chunks follow each other faster than
/// through `best_fit`'s run bookkeeping.
#[derive(Clone, Copy)]
struct FreeChunkWalk {
    /// A free chunk must be this long to be listed and to fit (`max(size,
    /// max_colocation_size)`).
    need: i64,
    /// `alignment - 1`.
    mask: i64,
    run_end: i64,
    best_offset: i64,
    best_size: i64,
}

impl FreeChunkWalk {
    fn new(size: i64, max_colocation_size: i64, alignment: i64) -> Self {
        debug_assert!(size >= 1 && max_colocation_size >= size && alignment >= 1 && alignment & (alignment - 1) == 0);
        FreeChunkWalk { need: size.max(max_colocation_size), mask: alignment - 1, run_end: 0, best_offset: -1, best_size: i64::MAX }
    }

    #[inline(always)]
    fn align(&self, x: i64) -> i64 {
        (x + self.mask) & !self.mask
    }

    /// The next used chunk `[offset, end)` by offset.
    #[inline(always)]
    fn step(&mut self, offset: i64, end: i64) {
        // The free chunk [start, offset) before a run starting here: listed when at least
        // `size` long, fits `max_colocation_size` from its (aligned) start, and is kept when
        // shorter than the best so far (the first of equal ones wins).
        let start = self.align(self.run_end);
        let length = offset - start;
        let take = (offset >= self.run_end) & (length >= self.need) & (length < self.best_size);
        self.best_size = select_unpredictable(take, length, self.best_size);
        self.best_offset = select_unpredictable(take, start, self.best_offset);
        self.run_end = self.run_end.max(end);
    }

    /// Whether the best free chunk so far is exactly as long as needed: no later one can
    /// replace it.
    #[inline(always)]
    fn exact(&self) -> bool {
        self.best_size == self.need
    }

    /// [`Self::step`] if `keep`, else nothing.
    #[inline(always)]
    fn step_if(&mut self, keep: bool, offset: i64, end: i64) {
        self.step(select_unpredictable(keep, offset, -1), select_unpredictable(keep, end, -1));
    }

    /// The offset chosen, once every used chunk has been stepped: the open end last.
    fn finish(self) -> i64 {
        let start = self.align(self.run_end);
        let length = i64::MAX - start;
        if i64::MAX - self.need >= start && (self.best_offset < 0 || length < self.best_size) {
            start
        } else {
            self.best_offset
        }
    }
}

/// `ComputeAlignedChunkEnd` (alignment 1: unchanged).
#[inline]
fn align_up(x: i64, a: i64) -> i64 {
    if a <= 1 {
        x
    } else if a & (a - 1) == 0 && x >= 0 {
        // A power of two (XLA's alignments are): a mask, not a division.
        (x + a - 1) & !(a - 1)
    } else {
        (x + a - 1) / a * a
    }
}

/// A placed chunk as a list of the overlap structure keeps it: `[offset, end)` and the two
/// slot numbers its time filter compares, relative to the list's first slot (see
/// [`Layout`]). Two encodings: [`Compact`] (12 bytes: the lists are read from memory on every
/// placement, so their size is most of the time) when the chunks fit it, else [`Wide`].
trait Chunk: Copy + Default + Send + 'static {
    /// None when the values don't fit.
    fn pack(offset: i64, end: i64, rel_slot: u32, rel_upto: u32, shift: u32) -> Option<Self>;
    fn offset(self, shift: u32) -> i64;
    fn end(self, shift: u32) -> i64;
    fn rel_slot(self) -> u32;
    fn rel_upto(self) -> u32;
}

/// Offsets and ends in units of `1 << shift` bytes (a power of two dividing the alignment
/// and every size, so every offset and end) below 2^32, relative slots below 2^16.
#[derive(Debug, Clone, Copy, Default)]
struct Compact {
    offset: u32,
    end: u32,
    rel_slot: u16,
    rel_upto: u16,
}

impl Chunk for Compact {
    #[inline(always)]
    fn pack(offset: i64, end: i64, rel_slot: u32, rel_upto: u32, shift: u32) -> Option<Self> {
        let unit = |x: i64| u32::try_from(x >> shift).ok().filter(|&u| (u as i64) << shift == x);
        Some(Compact {
            offset: unit(offset)?,
            end: unit(end)?,
            rel_slot: u16::try_from(rel_slot).ok()?,
            rel_upto: u16::try_from(rel_upto).ok()?,
        })
    }
    #[inline(always)]
    fn offset(self, shift: u32) -> i64 {
        (self.offset as i64) << shift
    }
    #[inline(always)]
    fn end(self, shift: u32) -> i64 {
        (self.end as i64) << shift
    }
    #[inline(always)]
    fn rel_slot(self) -> u32 {
        self.rel_slot as u32
    }
    #[inline(always)]
    fn rel_upto(self) -> u32 {
        self.rel_upto as u32
    }
}

/// Any chunk (24 bytes).
#[derive(Debug, Clone, Copy, Default)]
struct Wide {
    offset: i64,
    end: i64,
    rel_slot: u32,
    rel_upto: u32,
}

impl Chunk for Wide {
    #[inline(always)]
    fn pack(offset: i64, end: i64, rel_slot: u32, rel_upto: u32, _shift: u32) -> Option<Self> {
        Some(Wide { offset, end, rel_slot, rel_upto })
    }
    #[inline(always)]
    fn offset(self, _shift: u32) -> i64 {
        self.offset
    }
    #[inline(always)]
    fn end(self, _shift: u32) -> i64 {
        self.end
    }
    #[inline(always)]
    fn rel_slot(self) -> u32 {
        self.rel_slot
    }
    #[inline(always)]
    fn rel_upto(self) -> u32 {
        self.rel_upto
    }
}

/// Per interval: its slot, `lo` (the first slot starting where it starts) and `upto` (the
/// slots starting at or before its end). Interval `j` overlaps interval `i` in time
/// (`ApplyToNodesOverlappingInTime`, inclusive ends) iff `slot_j < upto_i` and
/// `upto_j > lo_i`: the first says `start_j <= end_i`, the second `end_j >= start_i`.
#[derive(Debug, Clone, Copy)]
struct SlotInfo {
    slot: u32,
    lo: u32,
    upto: u32,
}

/// The placed chunks by time overlap (`BufferIntervalTree`), kept sorted by offset so that a
/// query reads them in the order `MakeFreeChunksList` walks them — no sort per placement.
///
/// Intervals are ranked by start into slots. Every `block` slots a window list k (at slot
/// p = k * block) holds, by offset, the placed intervals that are live at the start of slot p
/// and began before it, plus those of slots p .. p + `window`. Interval i's overlap query —
/// the intervals live at its start plus those starting before its end — is then list
/// k = lo_i / block filtered by the two slot comparisons of [`SlotInfo`], and, when i ends
/// beyond the window, the block lists (each block's slots alone, by offset) after it, merged
/// in. A list stores slots relative to its first slot, clamped where the comparisons no
/// longer change (a slot before p: 0; an `upto` past p + block: block), which keeps them
/// small. Placing an interval inserts it into the window lists it belongs to (those of the
/// `window / block` checkpoints before it and of every checkpoint it is live at) and into its
/// block's list. `block` doubles until the window lists hold at most
/// [`MAX_ENTRIES_PER_INTERVAL`] entries per interval (a trace where much lives long gets
/// fewer, longer lists).
///
/// Unions. The free chunks of the walk are the gaps of the used chunks' union, so where
/// every query keeps a set of chunks, that set can be kept as its union: disjoint runs by
/// offset, far fewer than the chunks where much lives long. This holds when no interval is
/// ever placed twice (no colocations: nothing is removed) and every query takes the walk
/// (sizes of at least 1, a power-of-two alignment). Then
/// - an interval live through the whole of window k (it began before p, `upto >= p +
///   block`) passes every filter of list k: it joins list k's union (`through`), not its
///   entries — or, when it is live through all [`SUPER`] windows of k's group, the group's
///   union (`super_through`), which spares a long-lived interval an insert per window (a
///   group's union holds the few regions that live long, a generate run's weights and
///   caches: its queries merge it with their kept chunks, a few runs each);
/// - the blocks a query reads after its window are whole but for the last: a segment tree
///   over the blocks keeps the union of the chunks placed in each node's blocks, and a query
///   reads the O(log) nodes covering its whole blocks instead of every chunk of every block
///   (an interval living through most of a trace would read them all). A placement marks
///   its block's leaf and the nodes above it stale; a node is rebuilt (a leaf from its
///   block's list, a node above by merging its children) when a query reads it, so only
///   nodes that are read are ever built.
struct Layout {
    block: usize,
    window: usize,
    at: Vec<SlotInfo>,
    /// Window list k may hold `entries[list_start[k]..list_start[k + 1]]` (its members, once
    /// all placed).
    list_start: Vec<usize>,
    /// Offsets and sizes are multiples of `1 << shift` ([`Compact`]'s unit).
    shift: u32,
    /// Whether chunks are kept as unions where they can be (see above).
    unions: bool,
    /// The segment tree's leaves (block b: node `leaves + b`; node v's children `2v`, `2v +
    /// 1`).
    leaves: usize,
}

/// The slots of a checkpoint's block, and how many blocks its window spans (measured on the
/// offline_plan bench: smaller blocks and longer windows put each interval in more lists).
const BLOCK: usize = 512;
/// The same with unions (on the real qwen2 capture tiled twice, blocks of 32 and 64 slots
/// were fastest, 128 ~10% slower, 512 ~2× slower; with the unions in one pool and the
/// group's union merged by each query, 64 ~8% faster than 32 and 128 ~25% slower).
const BLOCK_WITH_UNIONS: usize = 64;
/// Unions are kept when half the intervals span at most this many slots.
const SHORT_MEDIAN: u32 = 16;
const WINDOW_BLOCKS: usize = 1;
/// A window list longer than this many times its runs is merged with them as it is read;
/// a shorter one is filtered first (fewer steps of the merge).
const FILTER_FIRST: usize = 4;
/// How many placements ahead [`Layout::prefetch_heads`] runs ([`Layout::prefetch`]: one).
const AHEAD: usize = 4;
/// Tree nodes whose unions one placement's query prefetches at most.
const PREFETCH_NODES: usize = 16;
/// Windows per group of [`Layout`]'s `super_through` unions.
const SUPER: usize = 16;
/// Bound on the window lists' entries, per interval (plus a constant).
const MAX_ENTRIES_PER_INTERVAL: usize = 8;

/// The mutable half of the overlap structure: what one order has placed.
struct Placed<C> {
    entries: Vec<C>,
    list_len: Vec<u32>,
    /// Block b's list: `blocks[b * block..b * block + block_len[b]]`.
    blocks: Vec<C>,
    block_len: Vec<u32>,
    /// Node v's union of used chunks (see [`Layout`]); stale where `stale[v]`.
    unions: Vec<Union>,
    /// Nodes placed under since their union was merged (a stale node's ancestors are stale).
    stale: Vec<bool>,
    /// Window list k's union of the chunks live through its window (but not its group's).
    through: Vec<Union>,
    /// Group g's union of the chunks live through its windows `g * SUPER..(g + 1) * SUPER`.
    super_through: Vec<Union>,
    /// The runs of all the unions above.
    pool: RunPool,
}

impl<C: Chunk> Placed<C> {
    fn new(layout: &Layout) -> Self {
        let lists = layout.list_start.len() - 1;
        let n = layout.at.len();
        Placed {
            entries: huge_pages::filled(layout.list_start[lists], C::default()),
            list_len: vec![0; lists],
            blocks: huge_pages::filled(n, C::default()),
            block_len: vec![0; n.div_ceil(layout.block).max(1)],
            unions: huge_pages::filled(2 * layout.leaves, Union::default()),
            stale: vec![false; 2 * layout.leaves],
            through: vec![Union::default(); if layout.unions { lists } else { 0 }],
            super_through: vec![Union::default(); if layout.unions { lists.div_ceil(SUPER) } else { 0 }],
            pool: RunPool::with_capacity(if layout.unions { n } else { 0 }),
        }
    }
}

/// A chunk that did not fit [`Compact`].
struct DoesNotFit;

impl Layout {
    fn new(iv: &[BufferInterval], alignment: i64, block_window: Option<(usize, usize)>) -> Self {
        let n = iv.len();
        let mut by_start: Vec<u32> = huge_pages::with_capacity(n);
        by_start.extend(0..n as u32);
        by_start.sort_unstable_by_key(|&i| iv[i as usize].start);
        let mut starts: Vec<i64> = huge_pages::with_capacity(n);
        starts.extend(by_start.iter().map(|&i| iv[i as usize].start));
        let mut at = huge_pages::filled(n, SlotInfo { slot: 0, lo: 0, upto: 0 });
        let mut lo = 0usize;
        for (slot, &i) in by_start.iter().enumerate() {
            if slot % CANCEL_EVERY_SLOTS == 0 && crate::cancel::requested() {
                return Self::cancelled(at);
            }
            if starts[slot] != starts[lo] {
                lo = slot;
            }
            // The slots starting at or before its end (at least its own): searched forward
            // from its slot by doubling steps, as most intervals end soon after they start.
            let end = iv[i as usize].end;
            let (mut known, mut probe, mut step) = (slot + 1, slot + 1, 1);
            while probe < n && starts[probe] <= end {
                known = probe + 1;
                probe += step;
                step *= 2;
            }
            let upto = known + starts[known..probe.min(n)].partition_point(|&s| s <= end);
            at[i as usize] = SlotInfo { slot: slot as u32, lo: lo as u32, upto: upto as u32 };
        }
        let shift = iv.iter().map(|x| x.size.trailing_zeros()).fold(alignment.trailing_zeros(), u32::min).min(62);
        // Unions (see above) pay where most intervals are short and the rest live long (a
        // generate run: weights and caches through all of it, activations for a few slots).
        // Where intervals live long in general, the unions hold about as many runs as
        // chunks, and plain lists of longer blocks are faster (offline_plan's synthetic
        // trace: ~1.3× slower with unions).
        let unions = iv.iter().all(|x| x.colocations.is_empty() && x.size >= 1)
            && alignment & (alignment - 1) == 0
            && (block_window.is_some() || median_slots(&at) <= SHORT_MEDIAN);
        let default = if unions { (BLOCK_WITH_UNIONS, BLOCK_WITH_UNIONS * WINDOW_BLOCKS) } else { (BLOCK, BLOCK * WINDOW_BLOCKS) };
        let (mut block, mut window) = block_window.unwrap_or(default);
        // A window of whole blocks, at least one: the blocks a query reads after it then
        // start past its own block and hold none of the window's slots.
        block = block.max(1);
        window = window.div_ceil(block).max(1) * block;
        let mut layout = Layout { block, window, at, list_start: Vec::new(), shift, unions, leaves: 0 };
        loop {
            if crate::cancel::requested() {
                return Self::cancelled(layout.at);
            }
            let total: usize = layout.at.iter().map(|a| layout.lists_of(a.slot, a.upto).count()).sum();
            if block_window.is_some() || total <= MAX_ENTRIES_PER_INTERVAL * n + 65_536 || block >= n {
                break;
            }
            layout.block *= 2;
            layout.window *= 2;
        }
        if layout.unions {
            layout.leaves = layout.lists().next_power_of_two();
        }
        if crate::cancel::requested() {
            return Self::cancelled(layout.at);
        }
        layout.size_lists();
        layout
    }

    /// What [`Layout::new`] returns once the call was cancelled (`crate::cancel`): the slots
    /// as far as they were ranked, no list. Nothing is placed in it: [`Planner::place`] looks
    /// at the token before it starts.
    fn cancelled(at: Vec<SlotInfo>) -> Self {
        Layout { block: 1, window: 1, at, list_start: vec![0], shift: 0, unions: false, leaves: 0 }
    }

    /// Sizes each window list for the entries it will hold.
    fn size_lists(&mut self) {
        let lists = self.lists();
        let mut list_start = vec![0usize; lists + 1];
        for a in &self.at {
            for k in self.lists_of(a.slot, a.upto).filter(|&k| !self.through(*a, k)) {
                list_start[k + 1] += 1;
            }
        }
        for k in 0..lists {
            list_start[k + 1] += list_start[k];
        }
        self.list_start = list_start;
    }

    /// Whether the interval at `a` joins window list k's union rather than its entries: it
    /// began before the list's first slot and is live through its block.
    #[inline]
    fn through(&self, a: SlotInfo, k: usize) -> bool {
        let p = k * self.block;
        self.unions && (a.slot as usize) < p && a.upto as usize >= p + self.block
    }

    /// Whether the interval at `a` is live through every window of group `g` (then it joins
    /// the group's union).
    #[inline]
    fn super_through(&self, a: SlotInfo, g: usize) -> bool {
        let p = g * SUPER * self.block;
        self.unions && (a.slot as usize) < p && a.upto as usize >= p + SUPER * self.block
    }

    /// Rebuilds the stale nodes at and under `v`: a leaf from its block's list, a node above
    /// from its children.
    fn refresh<C: Chunk>(&self, placed: &mut Placed<C>, v: usize) {
        if !placed.stale[v] {
            return;
        }
        let mut node = placed.unions[v];
        if v >= self.leaves {
            let b = v - self.leaves;
            let list = &placed.blocks[b * self.block..b * self.block + placed.block_len[b] as usize];
            placed.pool.set_joined(&mut node, list.iter().map(|e| (e.offset(self.shift), e.end(self.shift))));
        } else {
            self.refresh(placed, 2 * v);
            self.refresh(placed, 2 * v + 1);
            placed.pool.set_union_of(&mut node, placed.unions[2 * v], placed.unions[2 * v + 1]);
        }
        placed.unions[v] = node;
        placed.stale[v] = false;
    }

    /// Of a query's `blocks` (ending before slot `upto`), those it reads whole.
    #[inline]
    fn whole_blocks(&self, blocks: &std::ops::Range<usize>, upto: u32) -> std::ops::Range<usize> {
        blocks.start..blocks.end.min(upto as usize / self.block).max(blocks.start)
    }

    /// The nodes whose blocks make up `blocks`, each block in one (the segment tree's
    /// canonical cover, bottom up).
    #[inline]
    fn tree_nodes(&self, blocks: std::ops::Range<usize>, mut f: impl FnMut(usize)) {
        let (mut l, mut r) = (blocks.start + self.leaves, blocks.end + self.leaves);
        while l < r {
            if l & 1 == 1 {
                f(l);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                f(r);
            }
            l >>= 1;
            r >>= 1;
        }
    }

    /// Whether [`Compact`] can hold the relative slots (its offsets are checked as placed).
    fn compact_slots(&self) -> bool {
        self.window <= u16::MAX as usize
    }

    fn lists(&self) -> usize {
        self.at.len().div_ceil(self.block).max(1)
    }

    /// The window lists a slot belongs to: checkpoints p = k * block with p <= slot < p +
    /// window, and those after it while it is live at their start (p < upto).
    #[inline]
    fn lists_of(&self, slot: u32, upto: u32) -> std::ops::RangeInclusive<usize> {
        let slot = slot as usize;
        let first = if slot >= self.window { (slot - self.window) / self.block + 1 } else { 0 };
        let last = ((upto as usize - 1) / self.block).min(self.lists() - 1);
        first..=last
    }

    /// Interval `a` as list entry relative to slot `p`, a list's first.
    #[inline]
    fn entry<C: Chunk>(&self, a: SlotInfo, p: usize, offset: i64, end: i64) -> Result<C, DoesNotFit> {
        let rel_slot = (a.slot as usize).saturating_sub(p) as u32;
        let rel_upto = (a.upto as usize - p).min(self.block) as u32;
        C::pack(offset, end, rel_slot, rel_upto, self.shift).ok_or(DoesNotFit)
    }

    /// Records the interval at `a` placed at `[offset, offset + size)`.
    fn add<C: Chunk>(&self, placed: &mut Placed<C>, a: SlotInfo, offset: i64, size: i64) -> Result<(), DoesNotFit> {
        let end = offset.saturating_add(size);
        let lists = self.lists_of(a.slot, a.upto);
        let (mut k, last) = (*lists.start(), *lists.end());
        while k <= last {
            let g = k / SUPER;
            if self.super_through(a, g) {
                // Live through the whole group: k is its first window (see `lists_of`).
                placed.pool.insert(&mut placed.super_through[g], offset, end);
                k = (g + 1) * SUPER;
                continue;
            }
            if self.through(a, k) {
                placed.pool.insert(&mut placed.through[k], offset, end);
            } else {
                let start = self.list_start[k];
                let len = placed.list_len[k] as usize;
                insert_by_offset(&mut placed.entries[start..start + len + 1], self.entry(a, k * self.block, offset, end)?, self.shift);
                placed.list_len[k] += 1;
            }
            k += 1;
        }
        let b = a.slot as usize / self.block;
        let start = b * self.block;
        let len = placed.block_len[b] as usize;
        insert_by_offset(&mut placed.blocks[start..start + len + 1], self.entry(a, start, offset, end)?, self.shift);
        placed.block_len[b] += 1;
        if self.unions {
            let mut v = self.leaves + b;
            while v > 0 && !placed.stale[v] {
                placed.stale[v] = true;
                v /= 2;
            }
        }
        Ok(())
    }

    /// Undoes [`Self::add`] of interval `i` at `[offset, end)` (an entry equal to its in every
    /// field is dropped from each list: equal entries are interchangeable).
    fn remove<C: Chunk>(&self, placed: &mut Placed<C>, i: usize, offset: i64, end: i64) {
        // Only colocations are placed twice, and with them there is no tree to undo.
        debug_assert!(!self.unions, "a union cannot drop a chunk");
        let a = self.at[i];
        let s = self.shift;
        let drop_from = |list: &mut [C], len: &mut u32, p: usize| {
            let Ok(want) = self.entry::<C>(a, p, offset, end) else { return };
            let same = |e: &C| {
                e.offset(s) == want.offset(s)
                    && e.end(s) == want.end(s)
                    && e.rel_slot() == want.rel_slot()
                    && e.rel_upto() == want.rel_upto()
            };
            if let Some(at) = list[..*len as usize].iter().position(same) {
                list.copy_within(at + 1..*len as usize, at);
                *len -= 1;
            }
        };
        for k in self.lists_of(a.slot, a.upto) {
            drop_from(&mut placed.entries[self.list_start[k]..self.list_start[k + 1]], &mut placed.list_len[k], k * self.block);
        }
        let b = a.slot as usize / self.block;
        let stop = ((b + 1) * self.block).min(placed.blocks.len());
        drop_from(&mut placed.blocks[b * self.block..stop], &mut placed.block_len[b], b * self.block);
    }

    /// Interval `i`'s query: the window list it reads, its filter (relative to the list's
    /// first slot: keep `rel_slot < hi && rel_upto > lo`), and the blocks after that window up
    /// to its end (`b0..b1`; empty when the window covers it).
    #[inline]
    fn query(&self, a: SlotInfo) -> (usize, u32, u32, std::ops::Range<usize>, u32) {
        let k = a.lo as usize / self.block;
        let p = k * self.block;
        let covered = p + self.window;
        let blocks = if (a.upto as usize) > covered { covered / self.block..(a.upto as usize - 1) / self.block + 1 } else { 0..0 };
        let hi = (a.upto as usize - p).min(self.window) as u32;
        (k, hi, (a.lo as usize - p) as u32, blocks, a.upto)
    }

    /// Asks the cache for what placing the interval at `a` will read: its query's lists and
    /// those it will be inserted into.
    #[inline]
    fn prefetch<C: Chunk>(&self, placed: &Placed<C>, a: SlotInfo) {
        let (k, _, _, blocks, upto) = self.query(a);
        prefetch(self.list(placed, k));
        if self.unions {
            prefetch(placed.pool.get(placed.through[k]));
            prefetch(placed.pool.get(placed.super_through[k / SUPER]));
            // The nodes its query reads or rebuilds (their headers came at `prefetch_heads`).
            let mut budget = PREFETCH_NODES;
            self.tree_nodes(self.whole_blocks(&blocks, upto), |v| {
                self.visit_rebuild(placed, v, &mut budget, &mut |u| prefetch(placed.pool.get(placed.unions[u])));
            });
            // The unions it joins.
            self.joined_unions(placed, a, |u| prefetch(placed.pool.get(*u)));
        }
        let whole_end = if self.unions { self.whole_blocks(&blocks, upto).end } else { blocks.start };
        for b in (whole_end..blocks.end).take(2) {
            prefetch(self.block_list(placed, b, upto).0);
        }
        for k in self.lists_of(a.slot, a.upto).filter(|&j| j != k).take(2) {
            prefetch(self.list(placed, k));
        }
        prefetch(self.block_list(placed, a.slot as usize / self.block, upto).0);
    }

    /// What [`Self::prefetch`] reads to find the lists: their bounds and union headers.
    #[inline]
    fn prefetch_heads<C: Chunk>(&self, placed: &Placed<C>, a: SlotInfo) {
        let k = a.lo as usize / self.block;
        prefetch(std::slice::from_ref(&self.list_start[k]));
        prefetch(std::slice::from_ref(&placed.list_len[k]));
        if self.unions {
            prefetch(std::slice::from_ref(&placed.through[k]));
            prefetch(std::slice::from_ref(&placed.super_through[k / SUPER]));
            let (_, _, _, blocks, upto) = self.query(a);
            let mut budget = PREFETCH_NODES;
            self.tree_nodes(self.whole_blocks(&blocks, upto), |v| {
                self.visit_rebuild(placed, v, &mut budget, &mut |u| {
                    prefetch(std::slice::from_ref(&placed.unions[u]));
                    if u >= self.leaves && placed.stale[u] {
                        let b = u - self.leaves;
                        prefetch(std::slice::from_ref(&placed.block_len[b]));
                        prefetch(&placed.blocks[b * self.block..((b + 1) * self.block).min(placed.blocks.len())]);
                    }
                });
            });
            self.joined_unions(placed, a, |u| prefetch(std::slice::from_ref(u)));
        }
        let b = a.slot as usize / self.block;
        prefetch(std::slice::from_ref(&placed.block_len[b]));
    }

    /// Calls `f` on node `v` and, when it is stale, on the nodes [`Self::refresh`] reads to
    /// rebuild it (its children, and theirs under a stale one), at most `budget` in all.
    fn visit_rebuild<C: Chunk>(&self, placed: &Placed<C>, v: usize, budget: &mut usize, f: &mut impl FnMut(usize)) {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        f(v);
        if v < self.leaves && placed.stale[v] {
            self.visit_rebuild(placed, 2 * v, budget, f);
            self.visit_rebuild(placed, 2 * v + 1, budget, f);
        }
    }

    /// Calls `f` on the first few unions [`Self::add`] will insert the interval at `a` into
    /// (`through` and `super_through`).
    #[inline]
    fn joined_unions<C: Chunk>(&self, placed: &Placed<C>, a: SlotInfo, mut f: impl FnMut(&Union)) {
        let lists = self.lists_of(a.slot, a.upto);
        let (mut k, last) = (*lists.start(), *lists.end());
        for _ in 0..2 {
            if k > last {
                break;
            }
            let g = k / SUPER;
            if self.super_through(a, g) {
                f(&placed.super_through[g]);
                k = (g + 1) * SUPER;
                continue;
            }
            if self.through(a, k) {
                f(&placed.through[k]);
            }
            k += 1;
        }
    }

    #[inline]
    fn list<'p, C: Chunk>(&self, placed: &'p Placed<C>, k: usize) -> &'p [C] {
        let start = self.list_start[k];
        &placed.entries[start..start + placed.list_len[k] as usize]
    }

    /// Block `b`'s list, and the relative slot a query ending before `upto` keeps below.
    #[inline]
    fn block_list<'p, C: Chunk>(&self, placed: &'p Placed<C>, b: usize, upto: u32) -> (&'p [C], u32) {
        let start = b * self.block;
        (&placed.blocks[start..start + placed.block_len[b] as usize], (upto as usize - start).min(self.block) as u32)
    }

    /// The placed chunks `(offset, end)` overlapping the interval at `a` in time, in no set
    /// order.
    fn overlapping<C: Chunk>(&self, placed: &Placed<C>, a: SlotInfo, out: &mut impl FnMut(i64, i64)) {
        debug_assert!(!self.unions, "chunks kept as unions are not listed one by one");
        let (k, hi, lo, blocks, upto) = self.query(a);
        let s = self.shift;
        for e in self.list(placed, k) {
            if e.rel_slot() < hi && e.rel_upto() > lo {
                out(e.offset(s), e.end(s));
            }
        }
        for b in blocks {
            let (list, hi) = self.block_list(placed, b, upto);
            for e in list {
                if e.rel_slot() < hi {
                    out(e.offset(s), e.end(s));
                }
            }
        }
    }

    /// [`Self::overlapping`] by offset, into `walk`; the offset it picks.
    #[inline]
    fn best_fit<C: Chunk>(&self, placed: &mut Placed<C>, a: SlotInfo, mut walk: FreeChunkWalk, scratch: &mut Scratch) -> i64 {
        let (k, hi, lo, blocks, upto) = self.query(a);
        let whole = if self.unions { self.whole_blocks(&blocks, upto) } else { blocks.start..blocks.start };
        self.tree_nodes(whole.clone(), |v| self.refresh(placed, v));
        let placed = &*placed;
        let s = self.shift;
        let list = self.list(placed, k);
        let Scratch { buf, tmp, bounds, next_bounds } = scratch;
        // The runs live through the window: its own and (few, long-lived) its group's.
        let (through, group) = match self.unions {
            true => (placed.pool.get(placed.through[k]), placed.pool.get(placed.super_through[k / SUPER])),
            false => (&[][..], &[][..]),
        };
        // A free chunk of exactly the size needed can't be beaten (only a strictly smaller
        // one replaces the best): the walks stop there.
        if blocks.is_empty() && group.is_empty() && list.len() > FILTER_FIRST * through.len() {
            // A long list and few runs: the list's entries kept, merged with the runs as they
            // come.
            let (mut x, mut y) = (0, 0);
            while x < list.len() && y < through.len() && !walk.exact() {
                let (e, (o, end)) = (list[x], through[y]);
                let first = e.offset(s) <= o;
                let keep = !first | ((e.rel_slot() < hi) & (e.rel_upto() > lo));
                walk.step_if(keep, select_unpredictable(first, e.offset(s), o), select_unpredictable(first, e.end(s), end));
                x += first as usize;
                y += !first as usize;
            }
            for &e in &list[x..] {
                walk.step_if((e.rel_slot() < hi) & (e.rel_upto() > lo), e.offset(s), e.end(s));
            }
            for &(o, end) in &through[y..] {
                walk.step(o, end);
            }
            return walk.finish();
        }
        // The window list's chunks kept, the runs live through the window and, when it ends
        // beyond the window, each block's chunks, as sorted runs in one buffer, merged
        // pairwise until two are left, which the walk merges (filtered first, the list's
        // chunks merge with the runs in fewer steps).
        // Without branches on the data: every entry is written, the length advances by
        // whether it is kept; a merge takes the smaller head and advances that side.
        buf.clear();
        bounds.clear();
        bounds.push(0);
        push_run(buf, bounds, list, s, |e| (e.rel_slot() < hi) & (e.rel_upto() > lo));
        if blocks.is_empty() {
            // The query ends within its window (most do): the kept chunks (with the group's
            // runs merged in) and the window's runs.
            if group.is_empty() {
                return walk_two(walk, buf, through);
            }
            tmp.resize(buf.len() + group.len(), (0, 0));
            merge_into(buf, group, tmp);
            return walk_two(walk, tmp, through);
        }
        for runs in [through, group] {
            if !runs.is_empty() {
                buf.extend_from_slice(runs);
                bounds.push(buf.len());
            }
        }
        self.tree_nodes(whole.clone(), |v| {
            if !placed.unions[v].is_empty() {
                buf.extend_from_slice(placed.pool.get(placed.unions[v]));
                bounds.push(buf.len());
            }
        });
        for b in whole.end..blocks.end {
            let (list, hi) = self.block_list(placed, b, upto);
            push_run(buf, bounds, list, s, |e| e.rel_slot() < hi);
        }
        while bounds.len() > 3 {
            // Same length as `buf`, its contents all overwritten (resized only to grow).
            if tmp.len() < buf.len() {
                tmp.resize(buf.len(), (0, 0));
            }
            tmp.truncate(buf.len());
            next_bounds.clear();
            next_bounds.push(0);
            for pair in bounds.windows(3).step_by(2) {
                merge_into(&buf[pair[0]..pair[1]], &buf[pair[1]..pair[2]], &mut tmp[pair[0]..pair[2]]);
                next_bounds.push(pair[2]);
            }
            if bounds.len() % 2 == 0 {
                // An odd run out: copied as it is.
                let (a, b) = (bounds[bounds.len() - 2], bounds[bounds.len() - 1]);
                tmp[a..b].copy_from_slice(&buf[a..b]);
                next_bounds.push(b);
            }
            std::mem::swap(buf, tmp);
            std::mem::swap(bounds, next_bounds);
        }
        let middle = if bounds.len() == 3 { bounds[1] } else { buf.len() };
        let (ours, theirs) = buf.split_at(middle);
        walk_two(walk, ours, theirs)
    }
}

/// Walks two runs sorted by offset as one (merged as they are read); the offset picked.
#[inline]
fn walk_two(mut walk: FreeChunkWalk, ours: &[(i64, i64)], theirs: &[(i64, i64)]) -> i64 {
    let (mut x, mut y) = (0, 0);
    while x < ours.len() && y < theirs.len() && !walk.exact() {
        let (p, q) = (ours[x], theirs[y]);
        let first = p.0 <= q.0;
        let (o, e) = select_unpredictable(first, p, q);
        walk.step(o, e);
        x += first as usize;
        y += !first as usize;
    }
    for &(o, e) in ours[x..].iter().chain(&theirs[y..]) {
        if walk.exact() {
            break;
        }
        walk.step(o, e);
    }
    walk.finish()
}

/// The median of the intervals' spans in slots (`upto - slot`), over a sample of at most
/// ~4,096 of them.
fn median_slots(at: &[SlotInfo]) -> u32 {
    let mut spans: Vec<u32> = at.iter().step_by(at.len().div_ceil(4096).max(1)).map(|a| a.upto - a.slot).collect();
    if spans.is_empty() {
        return 0;
    }
    let middle = spans.len() / 2;
    *spans.select_nth_unstable(middle).1
}

/// Reused buffers of the queries that merge several lists.
#[derive(Default)]
struct Scratch {
    buf: Vec<(i64, i64)>,
    tmp: Vec<(i64, i64)>,
    /// Where each sorted run of `buf` starts (and the last ends).
    bounds: Vec<usize>,
    next_bounds: Vec<usize>,
}

/// Appends the chunks of `list` that `keep` keeps to `buf` as one run.
#[inline]
fn push_run<C: Chunk>(buf: &mut Vec<(i64, i64)>, bounds: &mut Vec<usize>, list: &[C], shift: u32, keep: impl Fn(C) -> bool) {
    let at = buf.len();
    buf.resize(at + list.len() + 1, (0, 0));
    let mut end = at;
    for &e in list {
        buf[end] = (e.offset(shift), e.end(shift));
        end += keep(e) as usize;
    }
    buf.truncate(end);
    if end > at {
        bounds.push(end);
    }
}

/// Prefetches the cache lines of `s` (a hint: nothing on other targets).
#[inline(always)]
fn prefetch<T>(s: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = s.as_ptr() as *const i8;
        for offset in (0..std::mem::size_of_val(s)).step_by(64) {
            // SAFETY: SSE is part of x86_64; a prefetch reads nothing (and `p + offset` lies
            // within `s`).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = s;
}

/// Inserts `e` into `list` (sorted by offset but for its last, unused element), after the
/// entries with a smaller offset: an insertion sort's step from the end, each entry moved as
/// it is passed (lists are short: a call to `memmove` cost more than the moves).
#[inline]
fn insert_by_offset<C: Chunk>(list: &mut [C], e: C, shift: u32) {
    let offset = e.offset(shift);
    let mut at = list.len() - 1;
    while at > 0 && list[at - 1].offset(shift) >= offset {
        list[at] = list[at - 1];
        at -= 1;
    }
    list[at] = e;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(key: u64, size: i64, start: i64, end: i64) -> BufferInterval {
        BufferInterval { key, size, start, end, colocations: Colocations::default(), need_allocation: true }
    }

    #[test]
    fn disjoint_lifetimes_reuse_offset_zero() {
        // Two buffers that never overlap in time share offset 0: heap = the larger one.
        let p = plan(&[iv(0, 100, 0, 1), iv(1, 300, 2, 3)], 1);
        assert_eq!(p.heap_size, 300);
        assert_eq!(p.offsets, vec![0, 0]);
    }

    #[test]
    fn spatial_places_largest_first_then_best_fit_gap() {
        // GlobalDecreasingSizeBestFitHeap (kSpatial): A(400,[0,9]) at 0; B(300,[0,3]) above A at 400;
        // C(300,[5,9]) overlaps A only: the gap [400, inf) → 400; D(100,[4,4]) overlaps A only
        // (B ended at 3, C starts at 5): free chunks [400, inf) → 400. Heap = 700.
        let ivs = [iv(0, 400, 0, 9), iv(1, 300, 0, 3), iv(2, 300, 5, 9), iv(3, 100, 4, 4)];
        let p = plan_with(&ivs, 1, Strategy::Spatial);
        assert_eq!(p.offsets, vec![0, 400, 400, 400]);
        assert_eq!(p.heap_size, 700);
    }

    #[test]
    fn best_fit_picks_the_smallest_gap_that_fits() {
        // Placed first (size order): A 500 @0 [0,9], B 400 @500 [0,9] ... make holes: X(200,[0,1])
        // and Y(100,[0,1]) leave gaps once they end. Build directly: chunks live during [5,6]:
        // A @0 size 100, B @300 size 100, C @1000 size 100 → free [100,300) (200 bytes),
        // [400,1000) (600 bytes), [1100, inf). A 150-byte buffer takes the 200-byte gap.
        let ivs = [iv(0, 100, 0, 9), iv(1, 100, 0, 9), iv(2, 100, 0, 9), iv(3, 150, 5, 6)];
        let planner = Planner::new(&ivs, 1);
        let (layout, mut placed) = (&planner.layout, Placed::<Wide>::new(&planner.layout));
        for (i, offset) in [(0, 0), (1, 300), (2, 1000)] {
            assert!(layout.add(&mut placed, layout.at[i], offset, 100).is_ok());
        }
        let mut scratch = Scratch::default();
        let job = |max_colocation_size| Job { i: 3, size: 150, max_colocation_size, at: layout.at[3], colocated: false };
        assert_eq!(planner.find_chunk_candidate(&mut placed, &mut scratch, &job(150)), 100);
        // 250 bytes: [100,300) too small → [400,1000).
        assert_eq!(planner.find_chunk_candidate(&mut placed, &mut scratch, &job(250)), 400);
        // 700 bytes: only the open end.
        assert_eq!(planner.find_chunk_candidate(&mut placed, &mut scratch, &job(700)), 1100);
    }

    #[test]
    fn free_chunks_start_at_the_aligned_end_of_used_chunks() {
        // MakeFreeChunksList: the free space after a used chunk starts at its aligned end.
        // A 10 bytes @0 live at the same time: with alignment 256 the next buffer goes at 256.
        let p = plan(&[iv(0, 10, 0, 3), iv(1, 5, 1, 2)], 256);
        assert_eq!(p.offsets, vec![0, 256]);
        assert_eq!(p.heap_size, 261);
    }

    #[test]
    fn choose_best_takes_the_smaller_heap_of_spatial_and_temporal() {
        // kSpatial: big(100,[0,1]) @0, then the long ones (50,[0,9]) ×2 above → 200; the short
        // 60 at [2,3] fits at 0 (big ended) → heap 200. kTemporal places long ones first:
        // L1 @0, L2 @50, big @100, small (60,[2,3]) @100 → 200 too. Equal: kSpatial kept.
        let ivs = [iv(0, 100, 0, 1), iv(1, 50, 0, 9), iv(2, 50, 0, 9), iv(3, 60, 2, 3)];
        let s = plan_with(&ivs, 1, Strategy::Spatial);
        let t = plan_with(&ivs, 1, Strategy::Temporal);
        assert_eq!(s.offsets, vec![0, 100, 150, 0]);
        assert_eq!(t.offsets, vec![100, 0, 50, 100]);
        assert_eq!((s.heap_size, t.heap_size), (200, 200));
        assert_eq!(plan(&ivs, 1).strategy, Strategy::Spatial);
    }

    /// `plan_heap_size` with the live-bytes bound (on one core: kTemporal skipped when kSpatial
    /// reaches the bound) gives what both orders give, on random lifetimes, some of whose
    /// kSpatial heaps reach the bound and some not.
    #[test]
    fn heap_size_with_the_live_bytes_bound_is_the_best_of_both_orders() {
        let (mut at_bound, mut above) = (0, 0);
        for seed in 1..=60u64 {
            let mut rng = crate::test_rng::XorShift64::new(seed * 0x9E37_79B9);
            let mut b = HeapBuilder::default();
            let mut live: Vec<(u32, i64)> = Vec::new();
            let keep = 1 + (seed % 12) as usize;
            for h in 0..300u32 {
                let x = rng.next_u64();
                let size = 256 * (1 + (x % 64) as i64);
                b.alloc(h, u64::from(h), size);
                live.push((h, size));
                while live.len() > keep || (!live.is_empty() && (x >> 40).is_multiple_of(5)) {
                    let (f, fs) = live.swap_remove((x >> 20) as usize % live.len());
                    b.free(f, fs);
                }
            }
            b.free_all_open();
            let (s, t) = (plan_with(&b.intervals, 256, Strategy::Spatial), plan_with(&b.intervals, 256, Strategy::Temporal));
            let spatial_heap = s.heap_size;
            let want = if t.heap_size < s.heap_size { t } else { s };
            let bound = b.max_live_bytes();
            assert!(want.heap_size >= bound, "seed {seed}: heap {} below the live bytes {bound}", want.heap_size);
            if spatial_heap == bound {
                at_bound += 1;
            } else {
                above += 1;
            }
            assert_eq!(plan_heap_size(&b.intervals, 256, bound), (want.strategy, want.heap_size), "seed {seed}");
            // With offsets (and kTemporal given up once its heap reaches kSpatial's).
            assert_eq!(plan(&b.intervals, 256), want, "seed {seed}");
        }
        assert!(at_bound > 0 && above > 0, "both cases: {at_bound} at the bound, {above} above");
    }

    /// `run_below` gives the whole plan when the heap stays below `stop_at`, and nothing once
    /// it reaches it.
    #[test]
    fn run_below_stops_when_the_heap_reaches_its_limit() {
        let ivs = [iv(0, 100, 0, 1), iv(1, 50, 0, 9), iv(2, 50, 0, 9), iv(3, 60, 2, 3)];
        let planner = Planner::new(&ivs, 1);
        for strategy in [Strategy::Spatial, Strategy::Temporal] {
            let full = plan_with(&ivs, 1, strategy);
            assert_eq!(planner.run_below(strategy, true, full.heap_size + 1).as_ref(), Some(&full));
            assert_eq!(planner.run_below(strategy, true, full.heap_size), None);
            assert_eq!(planner.run_below(strategy, false, 1), None);
        }
    }

    #[test]
    fn share_with_places_colocations_in_the_canonical_chunk() {
        // HeapSimulator::ShareBuffer: an in-place user shares its operand's chunk; the group is
        // placed once with the largest size, and both live ranges block the chunk.
        let mut b = HeapBuilder::default();
        b.alloc(0, 0, 64); // t0
        b.alloc(1, 1, 32); // t1
        b.free(0, 64); // t2
        b.share_with(2, 2, 0, 64); // t3: shares 0's chunk
        b.free(1, 32); // t4
        b.alloc(3, 3, 64); // t5
        b.free(2, 64); // t6
        b.free(3, 64); // t7
        let ivs = &b.intervals;
        assert_eq!((ivs[0].start, ivs[0].end, ivs[2].start, ivs[2].end), (0, 2, 3, 6));
        let p = plan(ivs, 1);
        assert_eq!(p.offsets[2], p.offsets[0]);
        // Buffer 3 [5,7] overlaps 2 [3,6], which holds 0's chunk: it cannot go there.
        assert_ne!(p.offsets[3], p.offsets[0]);
        assert_eq!(p.heap_size, 128);
        // NoFragmentationStatsHeap counts ShareWith as an Alloc: 64+32 → free 64 → +64 (share)
        // → 96+64... live: 64, 96, 32, 96, 64, 128, 64, 0 → max 128.
        assert_eq!(b.max_live_bytes(), 128);
    }

    #[test]
    fn two_threads_give_what_one_gives() {
        // Enough intervals for `plan` to run kTemporal on a thread of its own.
        let mut rng = crate::test_rng::XorShift64::new(0x9E37_79B9_7F4A_7C15);
        let mut b = HeapBuilder::default();
        let mut live: Vec<(u32, i64)> = Vec::new();
        for h in 0..PARALLEL_FROM as u32 + 100 {
            let x = rng.next_u64();
            let size = 256 * (1 + (x % 4096) as i64);
            b.alloc(h, h as u64, size);
            live.push((h, size));
            if live.len() > 64 {
                let (f, fs) = live.swap_remove((x >> 20) as usize % live.len());
                b.free(f, fs);
            }
        }
        b.free_all_open();
        let (s, t) = (plan_with(&b.intervals, 256, Strategy::Spatial), plan_with(&b.intervals, 256, Strategy::Temporal));
        let want = if t.heap_size < s.heap_size { t } else { s };
        assert_eq!(plan_heap_size(&b.intervals, 256, b.max_live_bytes()), (want.strategy, want.heap_size));
        assert_eq!(plan(&b.intervals, 256), want);
    }

    #[test]
    fn zero_sized_buffers_take_no_space() {
        let mut b = HeapBuilder::default();
        b.alloc(0, 0, 0);
        b.alloc(1, 1, 16);
        b.free(0, 0);
        b.free(1, 16);
        assert_eq!(b.intervals.len(), 1);
        assert_eq!(b.zero_sized(), &[0]);
        assert_eq!(plan(&b.intervals, 256).heap_size, 16);
    }

    fn query<C: Chunk>(layout: &Layout, placed: &Placed<C>, i: usize) -> Vec<(i64, i64)> {
        let mut out = vec![];
        layout.overlapping(placed, layout.at[i], &mut |o, e| out.push((o, e)));
        out.sort();
        out
    }

    impl Layout {
        /// Every chunk listed one by one, as with colocations.
        fn without_unions(&mut self) {
            (self.unions, self.leaves) = (false, 0);
            self.size_lists();
        }
    }

    fn overlap_query_cases<C: Chunk>() {
        // 0 [0,4] @10 and 1 [5,9] @20 placed; 2 [4,5] touches both ends; 3 [0,0] only 0;
        // 4 [10,12] none; 5 [2,3] (unplaced) is not reported to 3.
        let ivs = [iv(0, 1, 0, 4), iv(1, 1, 5, 9), iv(2, 1, 4, 5), iv(3, 1, 0, 0), iv(4, 1, 10, 12), iv(5, 1, 2, 3)];
        for bw in [None, Some((1, 1)), Some((2, 2)), Some((1, 3))] {
            let mut planner = Planner::with_layout(&ivs, 1, bw);
            planner.layout.without_unions();
            let (layout, mut placed) = (&planner.layout, Placed::<C>::new(&planner.layout));
            assert!(layout.add(&mut placed, layout.at[0], 10, 1).is_ok());
            assert!(layout.add(&mut placed, layout.at[1], 20, 1).is_ok());
            assert_eq!(query(layout, &placed, 2), vec![(10, 11), (20, 21)], "{bw:?}");
            assert_eq!(query(layout, &placed, 3), vec![(10, 11)], "{bw:?}");
            assert!(query(layout, &placed, 4).is_empty(), "{bw:?}");
            // Placed again elsewhere: removed, then added.
            layout.remove(&mut placed, 0, 10, 11);
            assert!(layout.add(&mut placed, layout.at[0], 30, 2).is_ok());
            assert_eq!(query(layout, &placed, 3), vec![(30, 32)], "{bw:?}");
            assert_eq!(query(layout, &placed, 2), vec![(20, 21), (30, 32)], "{bw:?}");
        }
    }

    #[test]
    fn overlap_query_is_inclusive_and_skips_unplaced() {
        overlap_query_cases::<Compact>();
        overlap_query_cases::<Wide>();
    }

    #[test]
    fn compact_entries_refuse_what_they_cannot_hold() {
        // Offsets and ends in units of 1 << shift below 2^32; relative slots below 2^16.
        assert!(Compact::pack(256 << 20, 512 << 20, 3, 4, 8).is_some());
        assert!(Compact::pack(1 << 40, (1 << 40) + 256, 0, 1, 8).is_none());
        assert!(Compact::pack(100, 200, 0, 1, 8).is_none(), "not a multiple of the unit");
        assert!(Compact::pack(0, 256, 1 << 16, 1, 8).is_none());
        let c = Compact::pack(0xFFFF_FFFF << 8, 0xFFFF_FFFF << 8, 65_535, 65_535, 8).unwrap();
        assert_eq!((c.offset(8), c.end(8), c.rel_slot(), c.rel_upto()), (0xFFFF_FFFF << 8, 0xFFFF_FFFF << 8, 65_535, 65_535));
    }

    /// The overlap structure against a scan of every placed interval, on random lifetimes
    /// (equal starts included) placed in random order, for layouts from one slot per block up.
    fn overlap_structure_cases<C: Chunk>() {
        let mut rng = crate::test_rng::XorShift64::new(0x2545_F491_4F6C_DD1Du64);
        let mut rnd = |m: u64| rng.below(m);
        for round in 0..40 {
            let n = 1 + rnd(if round < 20 { 30 } else { 300 }) as usize;
            let horizon = 1 + rnd(2 * n as u64 + 1) as i64;
            let ivs: Vec<BufferInterval> = (0..n)
                .map(|k| {
                    let start = rnd(horizon as u64) as i64;
                    let longest = 1 + rnd(horizon as u64);
                    let end = start + rnd(longest) as i64;
                    iv(k as u64, 1, start, end)
                })
                .collect();
            let mut order: Vec<usize> = (0..n).collect();
            for k in (1..n).rev() {
                order.swap(k, rnd(k as u64 + 1) as usize);
            }
            // Chunks that overlap and touch each other, so that unions merge them.
            let chunks: Vec<(i64, i64)> = (0..n)
                .map(|_| {
                    let o = rnd(80) as i64;
                    (o, o + 1 + rnd(9) as i64)
                })
                .collect();
            for (unions, bw) in [false, true]
                .into_iter()
                .flat_map(|u| [None, Some((1, 1)), Some((1, 4)), Some((3, 6)), Some((4, 4)), Some((16, 32))].map(|bw| (u, bw)))
            {
                let mut planner = Planner::with_layout(&ivs, 1, bw);
                // No colocations, sizes of at least 1: unions, unless the default layout
                // finds the intervals long (then the plain lists alone are tested).
                assert!(planner.layout.unions || bw.is_none());
                if unions && !planner.layout.unions {
                    continue;
                }
                if !unions {
                    planner.layout.without_unions();
                }
                let (layout, mut placed) = (&planner.layout, Placed::<C>::new(&planner.layout));
                let mut done: Vec<usize> = Vec::new();
                let mut scratch = Scratch::default();
                for (step, &p) in order.iter().enumerate() {
                    let q = order[rnd(n as u64) as usize];
                    let mut want: Vec<(i64, i64)> =
                        done.iter().filter(|&&j| ivs[j].start <= ivs[q].end && ivs[j].end >= ivs[q].start).map(|&j| chunks[j]).collect();
                    want.sort();
                    if !unions {
                        assert_eq!(query(layout, &placed, q), want, "round {round} step {step} {bw:?}");
                    }
                    // The sorted walk agrees with best_fit over the scan.
                    let walk = FreeChunkWalk::new(2, 4, 2);
                    assert_eq!(layout.best_fit(&mut placed, layout.at[q], walk, &mut scratch), best_fit(want.iter().copied(), 2, 4, 2));
                    assert!(layout.add(&mut placed, layout.at[p], chunks[p].0, chunks[p].1 - chunks[p].0).is_ok());
                    done.push(p);
                }
            }
        }
    }

    #[test]
    fn overlap_structure_matches_a_brute_force_scan() {
        overlap_structure_cases::<Compact>();
        overlap_structure_cases::<Wide>();
    }

    /// The planner as upstream writes it (every placed interval tested for overlap, the free
    /// chunk list built, then searched), on random intervals with colocations.
    fn reference(iv: &[BufferInterval], alignment: i64, strategy: Strategy) -> Vec<i64> {
        let planner = Planner::new(iv, alignment);
        let mut order: Vec<usize> = (0..iv.len()).filter(|&i| iv[i].need_allocation).collect();
        match strategy {
            Strategy::Spatial => order.sort_by_key(|&i| (-iv[i].size, iv[i].start - iv[i].end, iv[i].key, i)),
            Strategy::Temporal => order.sort_by_key(|&i| (planner.min_start(i) - planner.max_end(i), -iv[i].size, iv[i].key, i)),
        }
        let a = alignment.max(1);
        let mut offsets = vec![-1i64; iv.len()];
        let mut placed: Vec<usize> = Vec::new();
        for &i in &order {
            let max_size = planner.max_size(i);
            let mut used = Vec::new();
            let mut spans = vec![(iv[i].start, iv[i].end)];
            spans.extend(planner.colocations(i).iter().map(|&c| (iv[c as usize].start, iv[c as usize].end)));
            for &(s, e) in &spans {
                for &p in &placed {
                    if iv[p].start <= e && iv[p].end >= s {
                        used.push((offsets[p], planner.max_size_of_chunk(p, &offsets, &order)));
                    }
                }
            }
            used.sort_by_key(|&(o, _)| o);
            let mut free = Vec::new();
            let mut cfs = 0i64;
            if let Some(&(o0, s0)) = used.first() {
                let (mut co, mut ce) = (o0, o0 + s0);
                for &(o, s) in &used[1..] {
                    if o < ce {
                        ce = ce.max(o + s);
                    } else {
                        if co - cfs >= iv[i].size {
                            free.push((cfs, co));
                        }
                        cfs = cfs.max(align_up(ce, a));
                        co = o;
                        ce = o + s;
                    }
                }
                if co - cfs >= iv[i].size {
                    free.push((cfs, co));
                }
                cfs = cfs.max(align_up(ce, a));
            }
            free.push((cfs, i64::MAX));
            let (mut best, mut best_size) = (-1i64, i64::MAX);
            for &(s, e) in &free {
                let al = align_up(s, a);
                if e - max_size < al {
                    continue;
                }
                if best < 0 || e - s < best_size {
                    best_size = e - s;
                    best = al;
                }
            }
            offsets[i] = best;
            placed.push(i);
            for &c in planner.colocations(i) {
                offsets[c as usize] = best;
                placed.push(c as usize);
            }
        }
        offsets
    }

    impl Planner<'_> {
        /// The chunk size an interval was placed with: its canonical's max colocation size.
        fn max_size_of_chunk(&self, p: usize, _offsets: &[i64], order: &[usize]) -> i64 {
            if self.iv[p].need_allocation {
                return self.max_size(p);
            }
            let canonical = order.iter().find(|&&c| self.colocations(c).contains(&(p as u32))).expect("canonical");
            self.max_size(*canonical)
        }
    }

    #[test]
    fn placements_match_the_upstream_algorithm_on_random_intervals() {
        let mut rng = crate::test_rng::XorShift64::new(0x9E37_79B9_7F4A_7C15u64);
        let mut rnd = |m: u64| rng.below(m);
        for round in 0..60 {
            let n = 1 + rnd(if round < 30 { 40 } else { 400 }) as u32;
            let mut b = HeapBuilder::default();
            let mut live: Vec<(u32, i64)> = Vec::new();
            let max_live = 1 + rnd(64) as usize;
            for h in 0..n {
                let big = rnd(3) == 0;
                let size = if rnd(10) == 0 { 0 } else { 1 + rnd(if big { 5000 } else { 300 }) as i64 };
                // Odd rounds share chunks (colocations: block lists merged); even ones don't
                // (the segment tree of unions).
                if !live.is_empty() && round % 2 == 1 && rnd(4) == 0 {
                    let (with, wsize) = live[rnd(live.len() as u64) as usize];
                    b.share_with(h, h as u64 ^ 5, with, size.max(wsize.min(size + 1)));
                } else if round % 4 == 0 {
                    // Keys that rise with the index: the packed order (`Order::Packed`).
                    b.alloc(h, h as u64, size);
                } else {
                    b.alloc(h, (h as u64 * 7919) % 97, size);
                }
                live.push((h, size));
                while live.len() > max_live || (!live.is_empty() && rnd(3) == 0) {
                    let (f, fs) = live.swap_remove(rnd(live.len() as u64) as usize);
                    b.free(f, fs);
                }
            }
            b.free_all_open();
            for alignment in [1, 64] {
                for strategy in [Strategy::Spatial, Strategy::Temporal] {
                    let want = reference(&b.intervals, alignment, strategy);
                    for bw in [None, Some((1, 1)), Some((1, 3)), Some((2, 8)), Some((8, 16))] {
                        let got = Planner::with_layout(&b.intervals, alignment, bw).run(strategy, true);
                        assert_eq!(got.offsets, want, "round {round} n {n} {strategy:?} a {alignment} block, window {bw:?}");
                    }
                }
            }
        }
    }
}
