//! `GlobalDecreasingSizeBestFitHeap::Finish` in one order ([`Planner`], [`plan_with`]) and
//! `ChooseBestHeapAlgorithm` over kSpatial and kTemporal ([`plan`], [`plan_heap_size`]).

use super::chunk::{Chunk, Compact, Wide};
use super::free_chunks::{best_fit, FreeChunkWalk};
use super::layout::{DoesNotFit, Layout, Placed, SlotInfo, AHEAD};
use super::query::{prefetch, Scratch};
use super::{BufferInterval, HeapPlan, Strategy, CANCEL_EVERY, MAX_HEAP};
use crate::cores::joined;
use crate::huge_pages;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, OnceLock};

/// `ChooseBestHeapAlgorithm` over kSpatial and kTemporal, as
/// `BufferAssigner::AssignBuffersWithSequentialOrdering`'s `get_heap_algorithm` builds it:
/// the smaller heap wins, kSpatial on a tie (it is listed first).
///
/// The two orders share nothing they write, and the result is the same however they are run:
/// - with four cores or more, both at once, each cut in time into sides placed on threads of
///   their own (`split`);
/// - with two or three, one after the other, each cut into a side per core: the likely winner
///   (`guess`) first, and the other stopped once it has lost;
/// - where the trace is not cut (too few intervals, or too many crossing the cuts), kTemporal on
///   a second thread while kSpatial runs on this one, each stopped once the other finished
///   smaller (kTemporal at once where kSpatial finished at the live bytes);
/// - on one core, the likely winner first (`guess`, from 65,536 intervals; below, kSpatial),
///   and the other stopped once it has lost.
pub fn plan(intervals: &[BufferInterval], alignment: i64) -> HeapPlan {
    choose_best(intervals, alignment, true, None, available_cores())
}

/// [`plan`]'s heap size and order only (`offsets` and `chunk_sizes` left empty): what the
/// `offline` bound reports, without writing an offset per interval.
///
/// `max_live_bytes`: the peak of the intervals' live bytes ([`HeapBuilder::max_live_bytes`]
/// of the builder that made them), a lower bound of any heap of intervals without
/// colocations. On one core, a kSpatial heap that reaches it is the answer without kTemporal:
/// kTemporal cannot be smaller, and kSpatial wins a tie.
///
/// [`HeapBuilder::max_live_bytes`]: super::HeapBuilder::max_live_bytes
pub fn plan_heap_size(intervals: &[BufferInterval], alignment: i64, max_live_bytes: i64) -> (Strategy, i64) {
    let p = choose_best(intervals, alignment, false, Some(max_live_bytes), available_cores());
    (p.strategy, p.heap_size)
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |p| p.get())
}

/// [`plan`] and [`plan_heap_size`] as run on `cores` cores.
fn choose_best(intervals: &[BufferInterval], alignment: i64, offsets: bool, max_live_bytes: Option<i64>, cores: usize) -> HeapPlan {
    // The live bytes bound every heap only when no chunk is shared (NoFragmentationStatsHeap
    // counts a ShareWith as an allocation of its own).
    let bound = max_live_bytes.filter(|_| intervals.iter().all(|x| x.colocations.is_empty()));
    if cores >= 4 && intervals.len() >= split::SPLIT_FROM {
        // Each order cut in time into sides placed on threads of their own, both orders at
        // once.
        if let Some(split) = Split::new(intervals, alignment, (cores / 2).min(split::MAX_SIDES)) {
            return choose_best_split(&split, alignment, offsets, bound, Schedule::Race);
        }
    }
    if (2..4).contains(&cores) && intervals.len() >= guess::GUESS_FROM {
        // On two or three cores: each order cut into as many sides as there are cores, the
        // likely winner first and the other after it, stopped where it has lost (on the VM's
        // two cores, 1.0-1.45x the two orders at once unsplit on seven real captures,
        // benches/RESULTS.md, session 26).
        if let Some(split) = Split::new(intervals, alignment, cores) {
            let first = Schedule::first(guess::temporal_likely(intervals, alignment, cores));
            return choose_best_split(&split, alignment, offsets, bound, first);
        }
    }
    if intervals.len() >= PARALLEL_FROM && cores > 1 {
        // The second thread sorts kSpatial's keys, hands them over and sorts kTemporal's while
        // this one lays out the overlap structure; then kTemporal places there and kSpatial
        // (which takes longer) here.
        let built: OnceLock<Planner> = OnceLock::new();
        let (keys_tx, keys_rx) = mpsc::sync_channel(1);
        let (planner_tx, planner_rx) = mpsc::sync_channel::<&Planner>(1);
        return race_below(
            |stop| {
                let planner = built.get_or_init(|| Planner::new(intervals, alignment));
                let _ = planner_tx.send(planner);
                // Nothing comes only when the keys' thread panicked: `race` carries its panic on.
                let keys = keys_rx.recv().ok()?;
                planner.run_in_below(planner.order(Strategy::Spatial, keys), offsets, stop)
            },
            move |stop| {
                // A send fails only when this thread's partner is gone (panicked): the scope
                // carries its panic on.
                keys_tx.send(packed_order(intervals, Strategy::Spatial)).ok()?;
                let keys = packed_order(intervals, Strategy::Temporal);
                let planner = planner_rx.recv().ok()?;
                planner.run_in_below(planner.order(Strategy::Temporal, keys), offsets, stop)
            },
            bound,
        );
    }
    // One core (the only way here with a trace this large): the likely winner first, the other
    // stopped where it has lost. On the VM's one core the serving captures, where kTemporal
    // wins, took 0.65 and 0.97 s kSpatial first against 0.44 and 0.69 s guessed; the generate
    // captures, where kSpatial wins, paid the guess's kSpatial tenth (benches/RESULTS.md,
    // session 28).
    let planner = Planner::new(intervals, alignment);
    let first = Schedule::first(guess::temporal_likely(intervals, alignment, 1));
    in_turn(first, bound, |strategy, stop| planner.run_below(strategy, offsets, stop))
}

/// How [`choose_best`] runs the two orders: at once ([`race`]), or one after the other, the
/// second stopped where it has lost ([`after_spatial`], [`after_temporal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schedule {
    Race,
    SpatialFirst,
    TemporalFirst,
}

impl Schedule {
    /// One order after the other, kTemporal first where it is the likely winner
    /// ([`guess::temporal_likely`]).
    fn first(temporal_likely: bool) -> Self {
        if temporal_likely {
            Schedule::TemporalFirst
        } else {
            Schedule::SpatialFirst
        }
    }
}

/// kSpatial (`spatial`) on this thread and kTemporal (`temporal`) on a second one, under the
/// caller's cancellation token (`crate::cancel`), each given up once its heap reaches the limit
/// it is passed: the other order's heap once that one finished (kTemporal wins only with a
/// smaller heap, kSpatial ties too). The plan chosen is the same as with both run in full, but
/// the loser, which would be dropped, stops where it has lost. Whichever order stops, the other
/// finished (an order publishes its bound only once done).
fn race<S, T>(spatial: S, temporal: T) -> HeapPlan
where
    S: FnOnce(&AtomicI64) -> Option<HeapPlan>,
    T: FnOnce(&AtomicI64) -> Option<HeapPlan> + Send,
{
    race_below(spatial, temporal, None)
}

/// [`race`], kTemporal stopped at once where kSpatial finished at `bound` ([`at_bound`]).
fn race_below<S, T>(spatial: S, temporal: T, bound: Option<i64>) -> HeapPlan
where
    S: FnOnce(&AtomicI64) -> Option<HeapPlan>,
    T: FnOnce(&AtomicI64) -> Option<HeapPlan> + Send,
{
    let token = crate::cancel::current();
    let (spatial_stop, temporal_stop) = (AtomicI64::new(i64::MAX), AtomicI64::new(i64::MAX));
    let (spatial, temporal) = std::thread::scope(|scope| {
        let (token, own_stop, other_stop) = (token.as_ref(), &temporal_stop, &spatial_stop);
        let temporal = scope.spawn(move || {
            crate::cancel::within(token, || {
                let plan = temporal(own_stop);
                if let Some(p) = &plan {
                    // kSpatial loses only with a larger heap.
                    other_stop.store(p.heap_size.saturating_add(1), Ordering::Relaxed);
                }
                plan
            })
        });
        let spatial = spatial(&spatial_stop);
        if let Some(p) = &spatial {
            let stop = if at_bound(p, bound) { i64::MIN } else { p.heap_size };
            temporal_stop.store(stop, Ordering::Relaxed);
        }
        (spatial, joined(temporal))
    });
    match (spatial, temporal) {
        (Some(spatial), Some(temporal)) => smaller(spatial, temporal),
        (Some(plan), None) | (None, Some(plan)) => plan,
        (None, None) => unreachable!("an order stops only once the other finished"),
    }
}

/// One order after the other (`first`, [`Schedule::SpatialFirst`] or
/// [`Schedule::TemporalFirst`]), the second stopped where it has lost ([`after_spatial`],
/// [`after_temporal`]); `run` places an order, given up once its heap reaches the limit.
fn in_turn(first: Schedule, bound: Option<i64>, run: impl Fn(Strategy, &AtomicI64) -> Option<HeapPlan>) -> HeapPlan {
    let unbounded = AtomicI64::new(i64::MAX);
    if first == Schedule::TemporalFirst {
        let temporal = run(Strategy::Temporal, &unbounded).expect("no heap reaches i64::MAX");
        return after_temporal(temporal, |stop| run(Strategy::Spatial, stop));
    }
    let spatial = run(Strategy::Spatial, &unbounded).expect("no heap reaches i64::MAX");
    debug_assert!(bound.is_none_or(|b| spatial.heap_size >= b) || crate::cancel::requested(), "a heap below the live bytes");
    after_spatial(spatial, bound, |stop| run(Strategy::Temporal, stop))
}

/// kTemporal after kSpatial's finished `spatial`: none where kSpatial reached `bound` (the live
/// bytes, below which no heap is: kTemporal cannot be smaller, and kSpatial wins a tie), else
/// given up once its heap reaches kSpatial's (on the generate captures, about two thirds of the
/// way through its placements).
fn after_spatial(spatial: HeapPlan, bound: Option<i64>, temporal: impl FnOnce(&AtomicI64) -> Option<HeapPlan>) -> HeapPlan {
    if at_bound(&spatial, bound) {
        return spatial;
    }
    match temporal(&AtomicI64::new(spatial.heap_size)) {
        Some(temporal) => smaller(spatial, temporal),
        None => spatial,
    }
}

/// kSpatial after kTemporal's finished `temporal`, given up once its heap exceeds kTemporal's
/// (kSpatial wins a tie, so it stops only past it): where kTemporal is the likely winner
/// ([`guess::temporal_likely`]), kSpatial stops about a third of the way through its placements
/// on the serving captures.
fn after_temporal(temporal: HeapPlan, spatial: impl FnOnce(&AtomicI64) -> Option<HeapPlan>) -> HeapPlan {
    match spatial(&AtomicI64::new(temporal.heap_size.saturating_add(1))) {
        Some(spatial) => smaller(spatial, temporal),
        None => temporal,
    }
}

/// Whether kSpatial's finished `spatial` reached `bound` (the live bytes, below which no heap
/// is): kTemporal cannot be smaller, and kSpatial wins a tie, so kTemporal need not run.
fn at_bound(spatial: &HeapPlan, bound: Option<i64>) -> bool {
    bound.is_some_and(|b| spatial.heap_size <= b)
}

/// `ChooseBestHeapAlgorithm`'s pick: the smaller heap, kSpatial on a tie (it is listed first).
fn smaller(spatial: HeapPlan, temporal: HeapPlan) -> HeapPlan {
    if temporal.heap_size < spatial.heap_size {
        temporal
    } else {
        spatial
    }
}

/// [`choose_best`] on a [`Split`]: each order placed by one thread per side, both orders at
/// once ([`Schedule::Race`]), or one after the other ([`after_spatial`] or [`after_temporal`];
/// a split has no colocations, so the live bytes bound every heap).
fn choose_best_split(split: &Split, alignment: i64, offsets: bool, bound: Option<i64>, schedule: Schedule) -> HeapPlan {
    let token = crate::cancel::current();
    let token = token.as_ref();
    // Each side's overlap structure, laid out on its own thread.
    let planners: Vec<Planner> = std::thread::scope(|scope| {
        let handles: Vec<_> = split.sides[1..]
            .iter()
            .map(|side| scope.spawn(move || crate::cancel::within(token, || Planner::new(&side.iv, alignment))))
            .collect();
        let first = Planner::new(&split.sides[0].iv, alignment);
        std::iter::once(first).chain(handles.into_iter().map(joined)).collect()
    });
    let run = |strategy: Strategy, stop: &AtomicI64| split_run_below(split, &planners, strategy, offsets, stop);
    match schedule {
        Schedule::Race => race(|stop| run(Strategy::Spatial, stop), |stop| run(Strategy::Temporal, stop)),
        first => in_turn(first, bound, run),
    }
}

/// Places `strategy`'s order with one thread per side (this one the first side's), each
/// side's overlap structure laid out by `planners[side]`; the plan [`Planner::run_below`]
/// makes, or `None` once the heap reaches `stop_at`.
fn split_run_below(split: &Split, planners: &[Planner], strategy: Strategy, offsets: bool, stop_at: &AtomicI64) -> Option<HeapPlan> {
    if planners.iter().all(|p| p.layout.compact_slots()) {
        if let Ok(plan) = split_place::<Compact>(split, planners, strategy, offsets, stop_at) {
            return plan;
        }
    }
    split_place::<Wide>(split, planners, strategy, offsets, stop_at).unwrap_or_else(|_| unreachable!("every chunk fits a wide entry"))
}

/// [`split_run_below`] with list entries of type `C`.
fn split_place<C: Chunk>(
    split: &Split,
    planners: &[Planner],
    strategy: Strategy,
    offsets: bool,
    stop_at: &AtomicI64,
) -> Result<Option<HeapPlan>, DoesNotFit> {
    let alignment = planners.first().map_or(1, |p| p.alignment);
    let sync = Meetings::new(split, planners.iter().map(|p| &p.layout).collect(), alignment);
    let token = crate::cancel::current();
    let token = token.as_ref();
    let side = |s: usize| {
        crate::cancel::within(token, || {
            let mut done = sync.abort_unless_done();
            let keys = packed_order(&split.sides[s].iv, strategy).expect("a split's sides take the packed order");
            let plan = planners[s].place::<C>(&Order::Packed { keys, strategy }, offsets, stop_at, Some((&sync, s)));
            done.done = matches!(&plan, Ok(Some(p)) if p.heap_size <= MAX_HEAP) && !crate::cancel::requested();
            plan
        })
    };
    let plans: Vec<_> = std::thread::scope(|scope| {
        let others: Vec<_> = (1..split.sides.len()).map(|s| scope.spawn(move || side(s))).collect();
        let first = side(0);
        std::iter::once(first).chain(others.into_iter().map(joined)).collect()
    });
    let n = if offsets { split.intervals } else { 0 };
    if crate::cancel::requested() {
        // Cancelled: a plan of the right shape, which the callers drop.
        return Ok(Some(HeapPlan { strategy, heap_size: 0, offsets: vec![0; n], chunk_sizes: vec![0; n] }));
    }
    let mut finished = Vec::with_capacity(plans.len());
    let mut stopped = false;
    for plan in plans {
        match plan? {
            // Beyond `MAX_HEAP`: the callers refuse it.
            Some(p) if p.heap_size > MAX_HEAP => return Ok(Some(p)),
            Some(p) => finished.push(p),
            None => stopped = true,
        }
    }
    if stopped {
        return Ok(None);
    }
    let heap_size = finished.iter().map(|p| p.heap_size).max().unwrap_or(0);
    let (mut all_offsets, mut chunk_sizes) = (crate::huge_pages::filled(n, 0i64), crate::huge_pages::filled(n, 0i64));
    if offsets {
        for (side, p) in split.sides.iter().zip(&finished) {
            for (sub, &i) in side.of.iter().enumerate() {
                all_offsets[i as usize] = p.offsets[sub];
                chunk_sizes[i as usize] = p.chunk_sizes[sub];
            }
        }
    }
    Ok(Some(HeapPlan { strategy, heap_size, offsets: all_offsets, chunk_sizes }))
}

/// [`plan_with`] with the order cut into `sides` placed on threads of their own (`None` where
/// [`Split::new`] declines); for the tests and benchmarks that hold it to [`plan_with`].
#[doc(hidden)]
pub fn plan_with_sides(intervals: &[BufferInterval], alignment: i64, strategy: Strategy, sides: usize) -> Option<HeapPlan> {
    let split = Split::new(intervals, alignment, sides)?;
    let planners: Vec<Planner> = split.sides.iter().map(|side| Planner::new(&side.iv, alignment)).collect();
    split_run_below(&split, &planners, strategy, true, &AtomicI64::new(i64::MAX))
}

/// Intervals from which [`plan`] runs its two orders on two threads (below, a thread costs
/// about as much as it saves). Session 27, VM, two cores, `offline_plan -- TRACE` on
/// ../shared/traces (plan_trace, fastest of ten): ddp2gpu rank 0 and rank 1 (5,828 intervals
/// each) 0.035 s in turn against 0.027 s at once; gpt2_train default and gc06_capped (17,491)
/// 0.022 s either way, and ring20k (6,895) 0.050 against 0.051 s: there kSpatial reaches the
/// live bytes, and kTemporal stops as it finishes ([`race_below`]).
const PARALLEL_FROM: usize = 2_048;

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
        self.run_below(strategy, offsets, &AtomicI64::new(i64::MAX)).expect("no heap reaches i64::MAX")
    }

    /// [`Planner::run`], given up (`None`) as soon as the heap reaches `stop_at` (read as it
    /// places: the other order's thread may lower it): a plan that only wins with a smaller
    /// heap than one already made is not worth finishing.
    fn run_below(&self, strategy: Strategy, offsets: bool, stop_at: &AtomicI64) -> Option<HeapPlan> {
        self.run_in_below(self.order(strategy, packed_order(self.iv, strategy)), offsets, stop_at)
    }

    /// The order `strategy` places in: its packed keys when [`packed_order`] gave them.
    fn order(&self, strategy: Strategy, packed: Option<Vec<u128>>) -> Order {
        match packed {
            Some(keys) => Order::Packed { keys, strategy },
            None => Order::Listed(self.sorted_jobs(strategy), strategy),
        }
    }

    /// The plan of placing in `order`, or `None` once the heap reaches `stop_at`.
    fn run_in_below(&self, order: Order, offsets: bool, stop_at: &AtomicI64) -> Option<HeapPlan> {
        if self.layout.compact_slots() {
            if let Ok(plan) = self.place::<Compact>(&order, offsets, stop_at, None) {
                return plan;
            }
        }
        self.place::<Wide>(&order, offsets, stop_at, None).unwrap_or_else(|_| unreachable!("every chunk fits a wide entry"))
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
    ///
    /// `sync`: the [`Meetings`] of a split order and this planner's side in it (its
    /// intervals those of the side): crossing intervals are placed with the other sides.
    fn place<C: Chunk>(
        &self,
        order: &Order,
        offsets: bool,
        stop_at: &AtomicI64,
        sync: Option<(&Meetings<'_>, usize)>,
    ) -> Result<Option<HeapPlan>, DoesNotFit> {
        let at = &self.layout.at[..];
        let n = if offsets || !self.colo.is_empty() { self.iv.len() } else { 0 };
        if crate::cancel::requested() {
            // Cancelled (`crate::cancel`) before placing anything: an empty plan of the right
            // shape (zeroed pages, never written), which the callers drop (they check the
            // token once the plan returns).
            return Ok(Some(HeapPlan { strategy: order.strategy(), heap_size: 0, offsets: vec![0; n], chunk_sizes: vec![0; n] }));
        }
        // This order's structure (a side's, when split: only its own thread reads it).
        let mut placed = Placed::<C>::new(&self.layout);
        let placed = &mut placed;
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
            if t % CANCEL_EVERY == 0 && t > 0 {
                if crate::cancel::requested() {
                    break;
                }
                if sync.is_some_and(|(sync, _)| sync.aborted()) {
                    // Another side stopped.
                    return Ok(None);
                }
            }
            // In placement order the intervals are read at random: their slots are asked for
            // well ahead.
            if t + 2 * AHEAD < len {
                prefetch(std::slice::from_ref(&at[order.interval(t + 2 * AHEAD)]));
            }
            // The lists the next placement reads, on their way into the cache while this one
            // runs (most of the time goes to waiting for them otherwise).
            if t + 1 < len {
                self.layout.prefetch(placed, at[order.interval(t + 1)]);
            }
            // Further ahead, what finding those lists reads: the placements jump in time, so
            // each one's list bounds and union headers are elsewhere in memory.
            if t + AHEAD < len {
                let later = order.interval(t + AHEAD);
                self.layout.prefetch_heads(placed, at[later]);
                if n > 0 {
                    prefetch(std::slice::from_ref(&offsets[later]));
                    prefetch(std::slice::from_ref(&chunk_sizes[later]));
                }
            }
            let job = &order.job(t, at);
            let i = job.i as usize;
            let max_colocation_size = job.max_colocation_size;
            let offset = match sync.and_then(|(sync, side)| Some((sync, side, sync.crossing(side, i)?))) {
                Some((sync, side, c)) => match sync.place_crossing(side, c, job.size, placed, &mut scratch) {
                    Ok(offset) => offset,
                    Err(split::Aborted) => return Ok(None),
                },
                None => self.find_chunk_candidate(placed, &mut scratch, job),
            };
            // CommitChunkAndInterval: the chunk of the largest colocation, for all of them.
            heap_size = heap_size.max(offset + max_colocation_size);
            if heap_size >= stop_at.load(Ordering::Relaxed) {
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
                        self.layout.remove(placed, c, offsets[c], offsets[c].saturating_add(chunk_sizes[c]));
                    }
                    done[c] = true;
                }
                if n > 0 {
                    offsets[c] = offset;
                    chunk_sizes[c] = max_colocation_size;
                }
                let a = if c == i { job.at } else { self.layout.at[c] };
                self.layout.add(placed, a, offset, max_colocation_size)?;
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

mod guess;
mod split;
use split::{Meetings, Split};
#[cfg(test)]
mod tests;
