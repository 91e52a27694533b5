//! The overlap structure (`BufferIntervalTree`) of the placed chunks: its [`Layout`] (slots,
//! window and block lists), made once and shared by both orders, and what one order has
//! placed in it ([`Placed`]), added and removed.

use super::chunk::Chunk;
use super::{BufferInterval, CANCEL_EVERY_SLOTS};
use crate::huge_pages;
use crate::offline::run_pool::{RunPool, Union};

/// Per interval: its slot, `lo` (the first slot starting where it starts) and `upto` (the
/// slots starting at or before its end). Interval `j` overlaps interval `i` in time
/// (`ApplyToNodesOverlappingInTime`, inclusive ends) iff `slot_j < upto_i` and
/// `upto_j > lo_i`: the first says `start_j <= end_i`, the second `end_j >= start_i`.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotInfo {
    pub(super) slot: u32,
    pub(super) lo: u32,
    pub(super) upto: u32,
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
/// fewer, longer lists; with unions, an interval live through a window is in its union, not
/// its list, and is not counted).
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
///   caches, a few runs; each window keeps its own union and its group's joined as one,
///   `window_runs`, rebuilt when a query finds either changed);
/// - the blocks a query reads after its window are whole but for the last: a segment tree
///   over the blocks keeps the union of the chunks placed in each node's blocks, and a query
///   reads the O(log) nodes covering its whole blocks instead of every chunk of every block
///   (an interval living through most of a trace would read them all). A placement marks
///   its block's leaf and the nodes above it stale; a node is rebuilt (a leaf from its
///   block's list, a node above by merging its children) when a query reads it, so only
///   nodes that are read are ever built.
pub(super) struct Layout {
    pub(super) block: usize,
    pub(super) window: usize,
    pub(super) at: Vec<SlotInfo>,
    /// Window list k may hold `entries[list_start[k]..list_start[k + 1]]` (its members, once
    /// all placed).
    pub(super) list_start: Vec<usize>,
    /// Offsets and sizes are multiples of `1 << shift` ([`Compact`]'s unit).
    ///
    /// [`Compact`]: super::chunk::Compact
    pub(super) shift: u32,
    /// Whether chunks are kept as unions where they can be (see above).
    pub(super) unions: bool,
    /// The segment tree's leaves (block b: node `leaves + b`; node v's children `2v`, `2v +
    /// 1`).
    pub(super) leaves: usize,
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
pub(super) const FILTER_FIRST: usize = 4;
/// How many placements ahead [`Layout::prefetch_heads`] runs ([`Layout::prefetch`]: one).
pub(super) const AHEAD: usize = 4;
/// Tree nodes whose unions one placement's query prefetches at most.
pub(super) const PREFETCH_NODES: usize = 16;
/// Windows per group of [`Layout`]'s `super_through` unions.
pub(super) const SUPER: usize = 16;
/// Bound on the window lists' entries, per interval (plus a constant).
const MAX_ENTRIES_PER_INTERVAL: usize = 8;

/// The mutable half of the overlap structure: what one order has placed.
pub(super) struct Placed<C> {
    pub(super) entries: Vec<C>,
    pub(super) list_len: Vec<u32>,
    /// Block b's list: `blocks[b * block..b * block + block_len[b]]`.
    pub(super) blocks: Vec<C>,
    pub(super) block_len: Vec<u32>,
    /// Node v's union of used chunks (see [`Layout`]); stale where `stale[v]`.
    pub(super) unions: Vec<Union>,
    /// Nodes placed under since their union was merged (a stale node's ancestors are stale).
    pub(super) stale: Vec<bool>,
    /// Window list k's union of the chunks live through its window (but not its group's).
    pub(super) through: Vec<Union>,
    /// Group g's union of the chunks live through its windows `g * SUPER..(g + 1) * SUPER`.
    pub(super) super_through: Vec<Union>,
    /// Window list k's `through` and its group's `super_through` as one union, what a query
    /// of window k walks; stale where `window_stale[k]` (rebuilt when read: on the real
    /// captures, a few percent of the queries find it stale).
    pub(super) window_runs: Vec<Union>,
    pub(super) window_stale: Vec<bool>,
    /// The runs of all the unions above.
    pub(super) pool: RunPool,
}

impl<C: Chunk> Placed<C> {
    pub(super) fn new(layout: &Layout) -> Self {
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
            window_runs: vec![Union::default(); if layout.unions { lists } else { 0 }],
            window_stale: vec![false; if layout.unions { lists } else { 0 }],
            pool: RunPool::with_capacity(if layout.unions { n } else { 0 }),
        }
    }
}

/// A chunk that did not fit [`Compact`].
///
/// [`Compact`]: super::chunk::Compact
pub(super) struct DoesNotFit;

impl Layout {
    pub(super) fn new(iv: &[BufferInterval], alignment: i64, block_window: Option<(usize, usize)>) -> Self {
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
            let total: usize = layout.at.iter().map(|&a| layout.entries_of(a)).sum();
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
    ///
    /// [`Planner::place`]: super::planner
    fn cancelled(at: Vec<SlotInfo>) -> Self {
        Layout { block: 1, window: 1, at, list_start: vec![0], shift: 0, unions: false, leaves: 0 }
    }

    /// Sizes each window list for the entries it will hold.
    pub(super) fn size_lists(&mut self) {
        let lists = self.lists();
        let mut list_start = vec![0usize; lists + 1];
        for a in &self.at {
            let mut entries = 0;
            for k in self.lists_of(a.slot, a.upto).filter(|&k| !self.through(*a, k)) {
                list_start[k + 1] += 1;
                entries += 1;
            }
            debug_assert_eq!(entries, self.entries_of(*a));
        }
        for k in 0..lists {
            list_start[k + 1] += list_start[k];
        }
        self.list_start = list_start;
    }

    /// Whether the interval at `a` joins window list k's union rather than its entries: it
    /// began before the list's first slot and is live through its block.
    #[inline]
    pub(super) fn through(&self, a: SlotInfo, k: usize) -> bool {
        let p = k * self.block;
        self.unions && (a.slot as usize) < p && a.upto as usize >= p + self.block
    }

    /// How many window lists hold the interval at `a` as an entry: those of [`Self::lists_of`]
    /// but the ones whose union it joins ([`Self::through`]).
    fn entries_of(&self, a: SlotInfo) -> usize {
        let lists = self.lists_of(a.slot, a.upto);
        let (first, last) = (*lists.start(), *lists.end());
        if !self.unions {
            return last + 1 - first;
        }
        // `through` holds for k with k * block > slot and (k + 1) * block <= upto.
        let from = first.max(a.slot as usize / self.block + 1);
        let to = last.min((a.upto as usize / self.block).saturating_sub(1));
        let through = if to >= from { to + 1 - from } else { 0 };
        last + 1 - first - through
    }

    /// Whether the interval at `a` is live through every window of group `g` (then it joins
    /// the group's union).
    #[inline]
    pub(super) fn super_through(&self, a: SlotInfo, g: usize) -> bool {
        let p = g * SUPER * self.block;
        self.unions && (a.slot as usize) < p && a.upto as usize >= p + SUPER * self.block
    }

    /// Whether [`Compact`] can hold the relative slots (its offsets are checked as placed).
    ///
    /// [`Compact`]: super::chunk::Compact
    pub(super) fn compact_slots(&self) -> bool {
        self.window <= u16::MAX as usize
    }

    fn lists(&self) -> usize {
        self.at.len().div_ceil(self.block).max(1)
    }

    /// The window lists a slot belongs to: checkpoints p = k * block with p <= slot < p +
    /// window, and those after it while it is live at their start (p < upto).
    #[inline]
    pub(super) fn lists_of(&self, slot: u32, upto: u32) -> std::ops::RangeInclusive<usize> {
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
    pub(super) fn add<C: Chunk>(&self, placed: &mut Placed<C>, a: SlotInfo, offset: i64, size: i64) -> Result<(), DoesNotFit> {
        let end = offset.saturating_add(size);
        let lists = self.lists_of(a.slot, a.upto);
        let (mut k, last) = (*lists.start(), *lists.end());
        while k <= last {
            let g = k / SUPER;
            if self.super_through(a, g) {
                // Live through the whole group: k is its first window (see `lists_of`).
                placed.pool.insert(&mut placed.super_through[g], offset, end);
                let group = g * SUPER..((g + 1) * SUPER).min(placed.window_stale.len());
                placed.window_stale[group].fill(true);
                k = (g + 1) * SUPER;
                continue;
            }
            if self.through(a, k) {
                placed.pool.insert(&mut placed.through[k], offset, end);
                placed.window_stale[k] = true;
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
    pub(super) fn remove<C: Chunk>(&self, placed: &mut Placed<C>, i: usize, offset: i64, end: i64) {
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

/// Inserts `e` into `list` (sorted by offset but for its last, unused element), after the
/// entries with a smaller offset: found by a binary search, the entries after it moved up by one
/// in one copy. (An insertion sort's step from the end moved each entry as it passed it: on
/// lists of a hundred entries, most of a placement's instructions.)
#[inline]
fn insert_by_offset<C: Chunk>(list: &mut [C], e: C, shift: u32) {
    let offset = e.offset(shift);
    let len = list.len() - 1;
    let at = list[..len].partition_point(|x| x.offset(shift) < offset);
    list.copy_within(at..len, at + 1);
    list[at] = e;
}
