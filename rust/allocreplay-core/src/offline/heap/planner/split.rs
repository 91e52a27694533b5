//! One order placed on several threads: the intervals cut in time where few are live
//! ([`Split`]), each part ("side") placed by a thread of its own (`Planner::place` with a
//! [`Meetings`]; the threads are started by `planner::split_run_below`), and the few intervals that
//! cross a cut placed where every side they touch has come to them ([`Meetings::place_crossing`]).
//! The plan is the one `Planner::run` makes on one thread, placement for placement.
//!
//! Why it is the same plan. `GlobalDecreasingSizeBestFitHeap` places interval i where the free
//! chunks between the placed intervals overlapping i in time put it (`MakeFreeChunksList`): only
//! intervals before i in the order that overlap it matter. An interval that starts and ends
//! within one side overlaps only intervals that touch that side: placed by that side's thread in
//! the same order (a side places the intervals that touch it in the global order, restricted),
//! it sees the same placed intervals as on one thread. An interval that crosses a cut waits
//! until every side it touches has placed everything before it in the order; then its
//! overlapping placed intervals are those of the sides it touches (any two intervals that
//! overlap share a time, which lies in one side both touch), read by each side from its own
//! structure and walked as one list. The free chunks a walk finds are the gaps of the used
//! chunks' union, so a chunk read from two sides counts once.
//!
//! A real trace crosses its cuts with a few hundred intervals (a generate run: the weights and
//! caches) against hundreds of thousands placed: the threads wait for each other a few hundred
//! times.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::super::chunk::Chunk;
use super::super::free_chunks::{walk_two, FreeChunkWalk};
use super::super::layout::{Layout, Placed};
use super::super::query::Scratch;
use super::super::BufferInterval;

/// Intervals from which an order is split (below, the threads cost more than they save).
pub(super) const SPLIT_FROM: usize = 65_536;
/// Sides an order is cut into at most (half the cores: both orders run at once). On the GPU
/// host (16 cores), 8 sides gave offline 10.3-14.1 M events/s on four generate and serving
/// recordings against 8.2-9.7 with 4 and 4.8-5.2 unsplit (benches/RESULTS.md, session 25).
pub(super) const MAX_SIDES: usize = 8;
/// A split is given up where more than one interval in this many crosses a cut (each is a
/// wait of the sides it touches).
const CROSSING_AT_MOST_ONE_IN: usize = 64;

const NONE: u32 = u32::MAX;

/// The intervals cut in time into sides, and those that cross a cut.
pub(super) struct Split {
    /// The intervals split (of the whole).
    pub(super) intervals: usize,
    pub(super) sides: Vec<Side>,
    /// Per crossing interval: the first and last side it touches.
    crossing: Vec<(u32, u32)>,
    /// Crossing interval c's index in each side it touches:
    /// `crossing_at[crossing_start[c]..crossing_start[c + 1]]`, first side first.
    crossing_start: Vec<u32>,
    crossing_at: Vec<u32>,
}

/// The intervals that touch one side (start before its end, end at or after its start), in
/// the order of the whole.
pub(super) struct Side {
    pub(super) iv: Vec<BufferInterval>,
    /// Each one's index in the whole.
    pub(super) of: Vec<u32>,
    /// Each one's crossing index, or `NONE` for one within the side.
    crossing: Vec<u32>,
}

impl Split {
    /// The intervals cut into `sides` parts of about as many intervals each, each cut at the
    /// time where fewest are live within a quarter side of where it would fall; `None` where
    /// the plan would not gain from it: too few intervals (under 64 a side; `choose_best` splits
    /// only from `SPLIT_FROM`), too many crossing, or intervals the
    /// packed order does not cover (`packed_order`: colocations, keys that do not rise, sizes
    /// below 1), or an alignment that is not a power of two.
    pub(super) fn new(iv: &[BufferInterval], alignment: i64, sides: usize) -> Option<Split> {
        let n = iv.len();
        if sides < 2 || n < sides * 64 || alignment < 1 || alignment & (alignment - 1) != 0 || n > u32::MAX as usize / 2 {
            return None;
        }
        let mut last_key = None;
        let mut t_end = 0i64;
        for x in iv {
            if !x.need_allocation
                || !x.colocations.is_empty()
                || x.size < 1
                || x.start < 0
                || x.end < x.start
                || last_key.is_some_and(|k| k >= x.key)
            {
                return None;
            }
            u32::try_from(x.end - x.start).ok()?;
            last_key = Some(x.key);
            t_end = t_end.max(x.end);
        }
        let times = usize::try_from(t_end).ok()?.checked_add(2)?;
        if times > 4 * n + 16 {
            return None;
        }
        // crossing[c]: the intervals with start < c <= end (those a cut at c separates).
        let mut crossing = vec![0i32; times + 1];
        for x in iv {
            crossing[x.start as usize + 1] += 1;
            crossing[x.end as usize + 1] -= 1;
        }
        let mut live = 0;
        for c in crossing.iter_mut() {
            live += *c;
            *c = live;
        }
        let mut starts: Vec<i64> = iv.iter().map(|x| x.start).collect();
        // A trace's intervals come by start (`HeapBuilder` numbers them as they begin).
        if !starts.is_sorted() {
            starts.sort_unstable();
        }
        let mut cuts: Vec<i64> = Vec::with_capacity(sides - 1);
        for k in 1..sides {
            let (at, reach) = (k * n / sides, n / (4 * sides));
            let (lo, hi) = (starts[at - reach.min(at)], starts[(at + reach).min(n - 1)]);
            let lo = lo.max(cuts.last().map_or(1, |&c| c + 1));
            if lo > hi {
                return None;
            }
            let target = starts[at];
            // The fewest crossing; of those, the nearest to where the cut would fall.
            let best = (lo..=hi).min_by_key(|&c| (crossing[c as usize], (c - target).abs()))?;
            cuts.push(best);
        }
        let side_of = |t: i64| cuts.partition_point(|&c| c <= t) as u32;
        // Each side's intervals counted first, so that its vectors are filled without growing
        // (a side cut away from the middle outgrew an even share: its 10 MB copied again).
        let (mut counts, mut crossings) = (vec![0usize; sides], 0usize);
        for x in iv {
            let (first, last) = (side_of(x.start), side_of(x.end));
            crossings += (first != last) as usize;
            for count in &mut counts[first as usize..=last as usize] {
                *count += 1;
            }
        }
        if crossings > n / CROSSING_AT_MOST_ONE_IN {
            return None;
        }
        let mut out: Vec<Side> = counts
            .iter()
            .map(|&count| Side {
                iv: crate::huge_pages::with_capacity(count),
                of: crate::huge_pages::with_capacity(count),
                crossing: crate::huge_pages::with_capacity(count),
            })
            .collect();
        let mut split = Split {
            intervals: n,
            sides: Vec::new(),
            crossing: Vec::with_capacity(crossings),
            crossing_start: Vec::with_capacity(crossings + 1),
            crossing_at: Vec::new(),
        };
        split.crossing_start.push(0);
        for (i, x) in iv.iter().enumerate() {
            let (first, last) = (side_of(x.start), side_of(x.end));
            let c = if first == last {
                NONE
            } else {
                split.crossing.push((first, last));
                (split.crossing.len() - 1) as u32
            };
            for s in first..=last {
                let side = &mut out[s as usize];
                if c != NONE {
                    split.crossing_at.push(side.iv.len() as u32);
                }
                side.iv.push(x.clone());
                side.of.push(i as u32);
                side.crossing.push(c);
            }
            if c != NONE {
                split.crossing_start.push(split.crossing_at.len() as u32);
            }
        }
        split.sides = out;
        Some(split)
    }
}

/// A crossing interval's offset before it is placed.
const UNSET: i64 = i64::MIN;

/// The sides' threads' meeting points: per crossing interval how many of the sides it touches
/// have come to it, what each read of its own structure, and the offset it was given.
pub(super) struct Meetings<'s> {
    split: &'s Split,
    /// Each side's layout, and the alignment of every placement.
    layouts: Vec<&'s Layout>,
    alignment: i64,
    /// Each side's placed chunks overlapping the crossing interval it waits at, left there
    /// for the first side the interval touches.
    gathered: Vec<Mutex<Vec<(i64, i64)>>>,
    arrived: Vec<AtomicU32>,
    offset: Vec<AtomicI64>,
    /// Set when a side stopped before the end (its heap reached the limit, a chunk did not
    /// fit, the call was cancelled, a panic): the others stop at their next look.
    abort: AtomicBool,
}

/// Another side stopped: this one stops too.
pub(super) struct Aborted;

/// Sets `abort` when dropped before `done` (a side that returns early, or panics).
pub(super) struct AbortUnlessDone<'a> {
    abort: &'a AtomicBool,
    pub(super) done: bool,
}

impl Drop for AbortUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.abort.store(true, Ordering::Release);
        }
    }
}

/// Locks a side's `gathered` chunks (a lock poisoned by a panicking side: the abort flag stops
/// the rest, and the scope carries the panic on).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'s> Meetings<'s> {
    /// The meeting points of one order placed on `split`, each side's overlap structure laid
    /// out by `layouts[side]` (each side's thread keeps its own).
    pub(super) fn new(split: &'s Split, layouts: Vec<&'s Layout>, alignment: i64) -> Self {
        Meetings {
            split,
            layouts,
            alignment,
            gathered: (0..split.sides.len()).map(|_| Mutex::new(Vec::new())).collect(),
            arrived: (0..split.crossing.len()).map(|_| AtomicU32::new(0)).collect(),
            offset: (0..split.crossing.len()).map(|_| AtomicI64::new(UNSET)).collect(),
            abort: AtomicBool::new(false),
        }
    }

    /// A guard that stops the other sides unless its `done` is set before it is dropped.
    pub(super) fn abort_unless_done(&self) -> AbortUnlessDone<'_> {
        AbortUnlessDone { abort: &self.abort, done: false }
    }

    /// The crossing index of side `side`'s interval `i` (`None`: within the side).
    #[inline]
    pub(super) fn crossing(&self, side: usize, i: usize) -> Option<usize> {
        let c = self.split.sides[side].crossing[i];
        (c != NONE).then_some(c as usize)
    }

    #[inline]
    pub(super) fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    fn wait<T>(&self, ready: impl Fn() -> Option<T>) -> Result<T, Aborted> {
        let mut spins = 0u32;
        loop {
            if let Some(x) = ready() {
                return Ok(x);
            }
            if self.abort.load(Ordering::Acquire) {
                return Err(Aborted);
            }
            if spins < 256 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Crossing interval `c` of `size` bytes, come to by side `side` (its structure
    /// `placed`): its offset. Each side it touches reads the placed intervals of its own
    /// structure overlapping it, at once on their own threads; the others leave what they read
    /// in their `gathered` and wait, and the first side, once they have all come, walks it with
    /// its own and gives the interval its offset.
    pub(super) fn place_crossing<C: Chunk>(
        &self,
        side: usize,
        c: usize,
        size: i64,
        placed: &mut Placed<C>,
        scratch: &mut Scratch,
    ) -> Result<i64, Aborted> {
        let (first, last) = self.split.crossing[c];
        let at = &self.split.crossing_at[self.split.crossing_start[c] as usize..self.split.crossing_start[c + 1] as usize];
        let layout = self.layouts[side];
        let here = layout.at[at[side - first as usize] as usize];
        if side != first as usize {
            {
                let mut mine = lock(&self.gathered[side]);
                mine.clear();
                layout.gather(placed, here, &mut mine);
            }
            self.arrived[c].fetch_add(1, Ordering::Release);
            return self.wait(|| Some(self.offset[c].load(Ordering::Acquire)).filter(|&o| o != UNSET));
        }
        let mut used = std::mem::take(&mut scratch.gathered);
        used.clear();
        layout.gather(placed, here, &mut used);
        self.wait(|| (self.arrived[c].load(Ordering::Acquire) == last - first).then_some(()))?;
        for s in first as usize + 1..=last as usize {
            used.extend_from_slice(&lock(&self.gathered[s]));
        }
        used.sort_unstable();
        let offset = walk_two(FreeChunkWalk::new(size, size, self.alignment), &used, &[]);
        scratch.gathered = used;
        self.offset[c].store(offset, Ordering::Release);
        Ok(offset)
    }
}
