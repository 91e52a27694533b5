//! XLA's offline heap planner: `GlobalDecreasingSizeBestFitHeap` in the kSpatial and kTemporal
//! orders, chosen between by `ChooseBestHeapAlgorithm`, plus `NoFragmentationStatsHeap` (the
//! max-live lower bound). Mirrors openxla/xla `xla/service/heap_simulator/heap_simulator.cc`.
//!
//! A [`HeapBuilder`] receives the calls the `HeapSimulator` makes on its algorithm (`Alloc`,
//! `Free`, `ShareWith`), in order; each call advances a logical clock exactly as
//! `GlobalDecreasingSizeBestFitHeap::Alloc/Free/ShareWith` advance `current_time_`. `plan`
//! then places every interval (`Finish`) and keeps the smaller heap.
//!
//! Speed: the time-overlap queries of `BufferIntervalTree` are answered from all intervals
//! sorted by start plus checkpoints listing the intervals live at regular points
//! ([`PlacedTree`]): a query reads the intervals live at its start and those starting during
//! it, contiguously, where upstream's treap walks O(log n) nodes per reported interval. The
//! free chunks are judged as they are found, not listed. No allocation per placement beyond
//! one reused scratch vector.

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
    pub colocations: Vec<u32>,
    /// False for intervals created by `ShareWith`: they are placed with their canonical.
    pub need_allocation: bool,
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
        HeapBuilder { intervals: Vec::with_capacity(buffers), index_of: Vec::with_capacity(buffers), ..Default::default() }
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
        self.intervals.push(BufferInterval { key, size, start, end: -1, colocations: Vec::new(), need_allocation: true });
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
            self.intervals.push(BufferInterval { key, size, start, end: -1, colocations: Vec::new(), need_allocation: true });
        } else {
            self.intervals[canonical as usize].colocations.push(idx);
            self.intervals.push(BufferInterval { key, size, start, end: -1, colocations: Vec::new(), need_allocation: false });
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
pub fn plan(intervals: &[BufferInterval], alignment: i64) -> HeapPlan {
    let mut planner = Planner::new(intervals, alignment);
    let spatial = planner.run(Strategy::Spatial);
    let temporal = planner.run(Strategy::Temporal);
    if temporal.heap_size < spatial.heap_size {
        temporal
    } else {
        spatial
    }
}

/// One strategy only (`GlobalDecreasingSizeBestFitHeap::Finish`).
pub fn plan_with(intervals: &[BufferInterval], alignment: i64, strategy: Strategy) -> HeapPlan {
    Planner::new(intervals, alignment).run(strategy)
}

struct Planner<'a> {
    iv: &'a [BufferInterval],
    alignment: i64,
    /// Transitive colocations of each canonical interval (`GetTransitiveColocations`),
    /// flattened: `colo[colo_start[i]..colo_start[i+1]]`.
    colo_start: Vec<u32>,
    colo: Vec<u32>,
    /// Per interval: min colocation start, max colocation end, max colocation size.
    min_start: Vec<i64>,
    max_end: Vec<i64>,
    max_size: Vec<i64>,
    tree: PlacedTree,
    used: Vec<(i64, i64)>,
    packed: Vec<u64>,
    /// Largest chunk size (bits it needs, for packing).
    max_chunk_size: u64,
}

impl<'a> Planner<'a> {
    fn new(iv: &'a [BufferInterval], alignment: i64) -> Self {
        Self::with_lists(iv, alignment, None)
    }

    /// `sorted_lists`: force [`PlacedTree`]'s choice (tests cover both ways).
    fn with_lists(iv: &'a [BufferInterval], alignment: i64, sorted_lists: Option<bool>) -> Self {
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
                for &c in &iv[item as usize].colocations {
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
        let max_chunk_size = max_size.iter().copied().max().unwrap_or(0).max(0) as u64;
        Planner {
            iv,
            alignment: alignment.max(1),
            colo_start,
            colo,
            min_start,
            max_end,
            max_size,
            tree: PlacedTree::new(iv, sorted_lists),
            used: Vec::new(),
            packed: Vec::new(),
            max_chunk_size,
        }
    }

    fn colocations(&self, i: usize) -> &[u32] {
        &self.colo[self.colo_start[i] as usize..self.colo_start[i + 1] as usize]
    }

    fn run(&mut self, strategy: Strategy) -> HeapPlan {
        let n = self.iv.len();
        // GetSortedBufferIntervals + buffer_interval_compare_.
        let mut order: Vec<u32> = (0..n as u32).filter(|&i| self.iv[i as usize].need_allocation).collect();
        let iv = self.iv;
        match strategy {
            Strategy::Spatial => order.sort_unstable_by_key(|&i| {
                let x = &iv[i as usize];
                (-x.size, x.start - x.end, x.key, i)
            }),
            Strategy::Temporal => {
                let (lo, hi) = (&self.min_start, &self.max_end);
                order.sort_unstable_by_key(|&i| {
                    let x = &iv[i as usize];
                    (lo[i as usize] - hi[i as usize], -x.size, x.key, i)
                })
            }
        }
        self.tree.clear();
        let mut offsets = vec![0i64; n];
        let mut chunk_sizes = vec![0i64; n];
        let mut heap_size = 0i64;
        for &i in &order {
            let i = i as usize;
            let max_colocation_size = self.max_size[i];
            let offset = self.find_chunk_candidate(i, max_colocation_size);
            // CommitChunkAndInterval: the chunk of the largest colocation, for all of them.
            heap_size = heap_size.max(offset + max_colocation_size);
            offsets[i] = offset;
            chunk_sizes[i] = max_colocation_size;
            self.tree.add(i, offset, max_colocation_size);
            let (a, b) = (self.colo_start[i] as usize, self.colo_start[i + 1] as usize);
            for k in a..b {
                let c = self.colo[k] as usize;
                offsets[c] = offset;
                chunk_sizes[c] = max_colocation_size;
                self.tree.add(c, offset, max_colocation_size);
            }
        }
        HeapPlan { strategy, heap_size, offsets, chunk_sizes }
    }

    /// `MakeFreeChunksList` + `FindUnslicedChunkCandidates` (kBestFit, no preferred offset).
    /// The free chunks are not collected: each is judged as the list would be walked (by
    /// increasing offset, the open end last), keeping the first smallest that fits.
    fn find_chunk_candidate(&mut self, i: usize, max_colocation_size: i64) -> i64 {
        let size = self.iv[i].size;
        // The used chunks by offset; equal offsets merge into one run whatever their order.
        // Those of intervals live at the last checkpoint come sorted from its list; the rest
        // (started since) are collected and sorted, as single words (offset above size) when
        // both fit in 64 bits: about twice as fast as pairs.
        let size_bits = 64 - self.max_chunk_size.leading_zeros();
        let offset_bits = 64 - (self.tree.max_chunk_end as u64).leading_zeros();
        let packable = size_bits + offset_bits <= 64 && size_bits < 64;
        if self.tree.sorted_lists && self.colocations(i).is_empty() {
            let (start, k, lo, hi) = self.tree.query_parts(i);
            let listed = self.tree.live_at(k, start);
            if packable {
                let mut packed = std::mem::take(&mut self.packed);
                packed.clear();
                self.tree.slots_at(lo, hi, start, &mut |o: i64, s: i64| packed.push(((o as u64) << size_bits) | s as u64));
                packed.sort_unstable();
                let mask = (1u64 << size_bits) - 1;
                let rest = packed.iter().map(|&k| ((k >> size_bits) as i64, (k & mask) as i64));
                let offset = best_fit(MergeByOffset::new(listed, rest), size, max_colocation_size, self.alignment);
                self.packed = packed;
                return offset;
            }
            let mut used = std::mem::take(&mut self.used);
            used.clear();
            self.tree.slots_at(lo, hi, start, &mut |o: i64, s: i64| used.push((o, s)));
            used.sort_unstable();
            let offset = best_fit(MergeByOffset::new(listed, used.iter().copied()), size, max_colocation_size, self.alignment);
            self.used = used;
            return offset;
        }
        if packable {
            let mut packed = std::mem::take(&mut self.packed);
            packed.clear();
            let mut push = |o: i64, s: i64| packed.push(((o as u64) << size_bits) | s as u64);
            self.tree.overlapping_interval(i, &mut push);
            for &c in self.colocations(i) {
                self.tree.overlapping_interval(c as usize, &mut push);
            }
            packed.sort_unstable();
            let mask = (1u64 << size_bits) - 1;
            let sorted = packed.iter().map(|&k| ((k >> size_bits) as i64, (k & mask) as i64));
            let offset = best_fit(sorted, size, max_colocation_size, self.alignment);
            self.packed = packed;
            offset
        } else {
            let mut used = std::mem::take(&mut self.used);
            used.clear();
            let mut push = |o: i64, s: i64| used.push((o, s));
            self.tree.overlapping_interval(i, &mut push);
            for &c in self.colocations(i) {
                self.tree.overlapping_interval(c as usize, &mut push);
            }
            used.sort_unstable();
            let offset = best_fit(used.iter().copied(), size, max_colocation_size, self.alignment);
            self.used = used;
            offset
        }
    }
}

/// Two streams of (offset, size), each sorted by offset, as one sorted by offset (ties in
/// either order: equal offsets merge into one run).
struct MergeByOffset<A: Iterator<Item = (i64, i64)>, B: Iterator<Item = (i64, i64)>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A: Iterator<Item = (i64, i64)>, B: Iterator<Item = (i64, i64)>> MergeByOffset<A, B> {
    fn new(a: A, b: B) -> Self {
        MergeByOffset { a: a.peekable(), b: b.peekable() }
    }
}

impl<A: Iterator<Item = (i64, i64)>, B: Iterator<Item = (i64, i64)>> Iterator for MergeByOffset<A, B> {
    type Item = (i64, i64);

    #[inline]
    fn next(&mut self) -> Option<(i64, i64)> {
        match (self.a.peek(), self.b.peek()) {
            (Some(x), Some(y)) => {
                if x.0 <= y.0 {
                    self.a.next()
                } else {
                    self.b.next()
                }
            }
            (Some(_), None) => self.a.next(),
            _ => self.b.next(),
        }
    }
}

/// `MakeFreeChunksList` over the used chunks sorted by offset, each free chunk judged as the
/// list would be walked (by increasing offset, the open end last) by
/// `FindUnslicedChunkCandidates`' best fit: the first smallest that holds `max_colocation_size`
/// at its aligned start. Chunks shorter than the buffer's own `size` are not listed.
#[inline]
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
    if let Some((o0, s0)) = used.next() {
        let (mut current_offset, mut current_end) = (o0, o0 + s0);
        for (o, s) in used {
            if o < current_end {
                current_end = current_end.max(o + s);
            } else {
                if current_offset - current_free_chunk_start >= size {
                    consider(current_free_chunk_start, current_offset);
                }
                current_free_chunk_start = current_free_chunk_start.max(align_up(current_end, alignment));
                current_offset = o;
                current_end = o + s;
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

/// The placed chunks, queried by time overlap (`BufferIntervalTree`): all intervals sorted by
/// start into slots; each slot holds its end once placed (-1 before) and its chunk.
///
/// Every `stride` slots a checkpoint lists the earlier slots whose interval is still live at
/// the last start before it. A query `[start, end]` takes the last checkpoint at or before
/// `start`: the intervals overlapping it are that checkpoint's live ones that end at or after
/// `start`, and the slots from the checkpoint up to the last starting at or before `end`.
/// So a query reads about (intervals live at `start`) + `stride` + (intervals starting during
/// it) contiguous entries, and only placed ones are reported. The stride grows until the lists
/// hold at most about eight times as many entries as there are intervals (a trace where everything
/// lives long gets few checkpoints).
struct PlacedTree {
    /// Interval index → slot.
    slot_of: Vec<u32>,
    /// Slot → start of its interval (sorted).
    starts: Vec<i64>,
    /// Slot → end of its interval.
    ends: Vec<i64>,
    /// Slot → the number of slots starting at or before its end (a query's upper bound,
    /// found once rather than by a binary search per query).
    upto_end: Vec<u32>,
    /// Slot → end if placed (else -1) and chunk: one cache line read per candidate.
    placed: Vec<PlacedSlot>,
    /// Highest end of a placed chunk (bounds the offsets a query returns).
    max_chunk_end: i64,
    stride: usize,
    /// Checkpoint k (at slot k * stride) can list the slots before it whose end is at or after
    /// the start of slot k * stride - 1: room for them at `live[live_start[k]..live_start[k +
    /// 1]]`. The first `live_len[k]` entries are those placed so far, by chunk offset
    /// (`live_off`: their offsets, for the binary search of an insertion).
    live_start: Vec<u32>,
    /// False: each list holds all its members from the start, in slot order.
    sorted_lists: bool,
    live_len: Vec<u32>,
    live: Vec<u32>,
    live_off: Vec<i64>,
}

/// Mean entries per checkpoint list above which the lists are kept sorted by offset.
const SORTED_LISTS_FROM: usize = 512;

#[derive(Debug, Clone, Copy)]
struct PlacedSlot {
    /// The interval's end once placed, -1 before.
    end: i64,
    offset: i64,
    size: i64,
}

impl PlacedSlot {
    const EMPTY: PlacedSlot = PlacedSlot { end: -1, offset: 0, size: 0 };
}

impl PlacedTree {
    fn new(iv: &[BufferInterval], sorted_lists: Option<bool>) -> Self {
        let n = iv.len();
        let mut by_start: Vec<u32> = (0..n as u32).collect();
        by_start.sort_unstable_by_key(|&i| iv[i as usize].start);
        let mut slot_of = vec![0u32; n];
        let mut starts = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        for (slot, &i) in by_start.iter().enumerate() {
            slot_of[i as usize] = slot as u32;
            starts.push(iv[i as usize].start);
            ends.push(iv[i as usize].end);
        }
        // Checkpoint k >= 1 at slot p = k * stride holds the slots j < p with ends[j] >=
        // starts[p - 1]: p minus the intervals ending before starts[p - 1] (all of which start
        // before it too).
        let mut sorted_ends = ends.clone();
        sorted_ends.sort_unstable();
        let mut by_end: Vec<u32> = (0..n as u32).collect();
        by_end.sort_unstable_by_key(|&j| ends[j as usize]);
        let mut upto_end = vec![0u32; n];
        let mut hi = 0usize;
        for &j in &by_end {
            while hi < n && starts[hi] <= ends[j as usize] {
                hi += 1;
            }
            upto_end[j as usize] = hi as u32;
        }
        let list_len = |p: usize| p.saturating_sub(sorted_ends.partition_point(|&e| e < starts[p - 1]));
        let pick_stride = |min: usize| {
            let mut stride = min;
            let sum = |stride: usize| (1..=(n.max(1) - 1) / stride).map(|k| list_len(k * stride)).sum::<usize>();
            let mut total = sum(stride);
            while stride < n && total > 8 * n + 1024 {
                stride *= 2;
                total = sum(stride);
            }
            (stride, total)
        };
        let (mut stride, total) = pick_stride(32);
        // Many intervals live at each checkpoint (gpt2_train: ~640 on average, its weights and
        // optimizer state): keep the lists sorted by offset as intervals are placed, sparing
        // each query a sort of all of them. Few (the offline_plan bench: ~256): static lists,
        // sorted per query, cost less than the insertions.
        let sorted_lists = sorted_lists.unwrap_or(total > SORTED_LISTS_FROM * (n / stride).max(1));
        if sorted_lists {
            stride = pick_stride(128).0;
        }
        let checkpoints = if n == 0 { 1 } else { (n - 1) / stride + 1 };
        // Slot j belongs to checkpoints k > j / stride while starts[k * stride - 1] <= ends[j]:
        // counted, then filled.
        let (st, en) = (&starts, &ends);
        let member_of = |j: usize| (j / stride + 1..checkpoints).take_while(move |&k| st[k * stride - 1] <= en[j]);
        let mut live_start = vec![0u32; checkpoints + 1];
        for j in 0..n {
            for k in member_of(j) {
                live_start[k + 1] += 1;
            }
        }
        for k in 0..checkpoints {
            live_start[k + 1] += live_start[k];
        }
        let total = live_start[checkpoints] as usize;
        let mut live = vec![0u32; total];
        let mut live_len = vec![0u32; checkpoints];
        if !sorted_lists {
            // Every member listed once and for all; unplaced ones fail the `end >= start` test.
            for j in 0..n {
                for k in member_of(j) {
                    live[(live_start[k] + live_len[k]) as usize] = j as u32;
                    live_len[k] += 1;
                }
            }
        }
        PlacedTree {
            slot_of,
            starts,
            ends,
            upto_end,
            placed: vec![PlacedSlot::EMPTY; n],
            max_chunk_end: 0,
            stride,
            live_start,
            sorted_lists,
            live_len,
            live,
            live_off: if sorted_lists { vec![0; total] } else { Vec::new() },
        }
    }

    fn clear(&mut self) {
        self.placed.iter_mut().for_each(|p| *p = PlacedSlot::EMPTY);
        if self.sorted_lists {
            self.live_len.iter_mut().for_each(|l| *l = 0);
        }
        self.max_chunk_end = 0;
    }

    fn add(&mut self, interval: usize, offset: i64, size: i64) {
        let slot = self.slot_of[interval] as usize;
        self.placed[slot] = PlacedSlot { end: self.ends[slot], offset, size };
        self.max_chunk_end = self.max_chunk_end.max(offset.saturating_add(size));
        if !self.sorted_lists {
            return;
        }
        // Into the lists of the checkpoints it is live at, by offset.
        let checkpoints = self.live_len.len();
        let mut k = slot / self.stride + 1;
        while k < checkpoints && self.starts[k * self.stride - 1] <= self.ends[slot] {
            let a = self.live_start[k] as usize;
            let len = self.live_len[k] as usize;
            let at = a + self.live_off[a..a + len].partition_point(|&o| o < offset);
            self.live.copy_within(at..a + len, at + 1);
            self.live_off.copy_within(at..a + len, at + 1);
            self.live[at] = slot as u32;
            self.live_off[at] = offset;
            self.live_len[k] += 1;
            k += 1;
        }
    }

    /// The parts of an interval's overlap query: the checkpoint whose placed list holds the
    /// earlier slots still live (filter on `end >= start`), and the slots `lo..hi` after it.
    #[inline]
    fn query_parts(&self, interval: usize) -> (i64, usize, usize, usize) {
        let slot = self.slot_of[interval] as usize;
        let (start, at, hi) = (self.starts[slot], slot + 1, self.upto_end[slot] as usize);
        let k = (at / self.stride).min(self.live_len.len() - 1);
        (start, k, (k * self.stride).min(hi), hi)
    }

    /// The placed chunks in checkpoint `k`'s list that are live at or after `start`, by offset.
    #[inline]
    fn live_at(&self, k: usize, start: i64) -> impl Iterator<Item = (i64, i64)> + '_ {
        let a = self.live_start[k] as usize;
        self.live[a..a + self.live_len[k] as usize].iter().filter_map(move |&j| {
            let p = &self.placed[j as usize];
            (p.end >= start).then_some((p.offset, p.size))
        })
    }

    /// The placed chunks of slots `lo..hi` live at or after `start`.
    #[inline]
    fn slots_at(&self, lo: usize, hi: usize, start: i64, out: &mut impl FnMut(i64, i64)) {
        for p in &self.placed[lo..hi] {
            if p.end >= start {
                out(p.offset, p.size);
            }
        }
    }

    /// The chunks of placed intervals with `start' <= end && end' >= start`
    /// (`ApplyToNodesOverlappingInTime`, inclusive ends).
    #[cfg(test)]
    fn overlapping(&self, start: i64, end: i64, out: &mut Vec<(i64, i64)>) {
        // Slots [0, hi) have start' <= end; [0, at) have start' <= start.
        let hi = self.starts.partition_point(|&s| s <= end);
        let at = self.starts[..hi].partition_point(|&s| s <= start);
        self.overlapping_slots(start, at, hi, &mut |o, s| out.push((o, s)));
    }

    /// [`Self::overlapping`] of an interval's own lifetime. The slots up to and including its
    /// own start at or before its start (all of them when starts are distinct, as the
    /// builder's are; any fewer only means a longer scan).
    #[inline]
    fn overlapping_interval(&self, interval: usize, out: &mut impl FnMut(i64, i64)) {
        let slot = self.slot_of[interval] as usize;
        self.overlapping_slots(self.starts[slot], slot + 1, self.upto_end[slot] as usize, out);
    }

    /// Slots [0, hi) start at or before the query's end, [0, at) at or before its `start`
    /// (or `at` lower: then more slots are scanned).
    #[inline]
    fn overlapping_slots(&self, start: i64, at: usize, hi: usize, out: &mut impl FnMut(i64, i64)) {
        // The last checkpoint p = k * stride <= at: starts[p - 1] <= start, so every slot
        // before p still live at `start` is in its list.
        let k = (at / self.stride).min(self.live_len.len() - 1);
        for (o, s) in self.live_at(k, start) {
            out(o, s);
        }
        self.slots_at((k * self.stride).min(hi), hi, start, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(key: u64, size: i64, start: i64, end: i64) -> BufferInterval {
        BufferInterval { key, size, start, end, colocations: vec![], need_allocation: true }
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
        let mut planner = Planner::new(&ivs, 1);
        planner.tree.clear();
        planner.tree.add(0, 0, 100);
        planner.tree.add(1, 300, 100);
        planner.tree.add(2, 1000, 100);
        assert_eq!(planner.find_chunk_candidate(3, 150), 100);
        // 250 bytes: [100,300) too small → [400,1000).
        assert_eq!(planner.find_chunk_candidate(3, 250), 400);
        // 700 bytes: only the open end.
        assert_eq!(planner.find_chunk_candidate(3, 700), 1100);
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

    #[test]
    fn overlap_query_is_inclusive_and_skips_unplaced() {
        let ivs = [iv(0, 1, 0, 4), iv(1, 1, 5, 9), iv(2, 1, 4, 5)];
        let mut t = PlacedTree::new(&ivs, None);
        t.add(0, 10, 1);
        t.add(1, 20, 1);
        let mut out = vec![];
        t.overlapping(4, 5, &mut out);
        out.sort();
        assert_eq!(out, vec![(10, 1), (20, 1)]);
        out.clear();
        t.overlapping(10, 12, &mut out);
        assert!(out.is_empty());
        out.clear();
        t.overlapping(0, 0, &mut out);
        assert_eq!(out, vec![(10, 1)]);
    }

    /// The planner as upstream writes it (every placed interval tested for overlap, the free
    /// chunk list built, then searched), on random intervals with colocations.
    fn reference(iv: &[BufferInterval], alignment: i64, strategy: Strategy) -> Vec<i64> {
        let planner = Planner::new(iv, alignment);
        let mut order: Vec<usize> = (0..iv.len()).filter(|&i| iv[i].need_allocation).collect();
        match strategy {
            Strategy::Spatial => order.sort_by_key(|&i| (-iv[i].size, iv[i].start - iv[i].end, iv[i].key, i)),
            Strategy::Temporal => order.sort_by_key(|&i| (planner.min_start[i] - planner.max_end[i], -iv[i].size, iv[i].key, i)),
        }
        let a = alignment.max(1);
        let mut offsets = vec![-1i64; iv.len()];
        let mut placed: Vec<usize> = Vec::new();
        for &i in &order {
            let max_size = planner.max_size[i];
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
                return self.max_size[p];
            }
            let canonical = order.iter().find(|&&c| self.colocations(c).contains(&(p as u32))).expect("canonical");
            self.max_size[*canonical]
        }
    }

    #[test]
    fn placements_match_the_upstream_algorithm_on_random_intervals() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for round in 0..60 {
            let n = 1 + rnd(if round < 30 { 40 } else { 400 }) as u32;
            let mut b = HeapBuilder::default();
            let mut live: Vec<(u32, i64)> = Vec::new();
            let max_live = 1 + rnd(64) as usize;
            for h in 0..n {
                let big = rnd(3) == 0;
                let size = if rnd(10) == 0 { 0 } else { 1 + rnd(if big { 5000 } else { 300 }) as i64 };
                if !live.is_empty() && rnd(4) == 0 {
                    let (with, wsize) = live[rnd(live.len() as u64) as usize];
                    b.share_with(h, h as u64 ^ 5, with, size.max(wsize.min(size + 1)));
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
                    for lists in [None, Some(false), Some(true)] {
                        let got = Planner::with_lists(&b.intervals, alignment, lists).run(strategy);
                        assert_eq!(got.offsets, want, "round {round} n {n} {strategy:?} a {alignment} sorted lists {lists:?}");
                    }
                }
            }
        }
    }
}
