//! The overlap structure's queries: the placed chunks overlapping an interval in time, read by
//! offset into a [`FreeChunkWalk`] (or listed one by one, for colocations); the segment tree's
//! unions, rebuilt where a query reads them; and the prefetches of what a placement will read.

use std::hint::select_unpredictable;

use super::chunk::Chunk;
use super::free_chunks::{walk_two, FreeChunkWalk};
use super::layout::{Layout, Placed, SlotInfo, FILTER_FIRST, PREFETCH_NODES, SUPER};
use crate::offline::run_pool::{merge_into, Union};

impl Layout {
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

    /// Rebuilds window list k's `window_runs` if stale.
    #[inline]
    fn refresh_window<C: Chunk>(&self, placed: &mut Placed<C>, k: usize) {
        if placed.window_stale[k] {
            let mut runs = placed.window_runs[k];
            placed.pool.set_union_of(&mut runs, placed.through[k], placed.super_through[k / SUPER]);
            placed.window_runs[k] = runs;
            placed.window_stale[k] = false;
        }
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
    pub(super) fn prefetch<C: Chunk>(&self, placed: &Placed<C>, a: SlotInfo) {
        let (k, _, _, blocks, upto) = self.query(a);
        prefetch(self.list(placed, k));
        if self.unions {
            prefetch(placed.pool.get(placed.window_runs[k]));
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
    pub(super) fn prefetch_heads<C: Chunk>(&self, placed: &Placed<C>, a: SlotInfo) {
        let k = a.lo as usize / self.block;
        prefetch(std::slice::from_ref(&self.list_start[k]));
        prefetch(std::slice::from_ref(&placed.list_len[k]));
        if self.unions {
            prefetch(std::slice::from_ref(&placed.window_runs[k]));
            prefetch(std::slice::from_ref(&placed.window_stale[k]));
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
    pub(super) fn overlapping<C: Chunk>(&self, placed: &Placed<C>, a: SlotInfo, out: &mut impl FnMut(i64, i64)) {
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

    /// The placed chunks `(offset, end)` overlapping the interval at `a` in time, appended to
    /// `out` in no set order: with unions, what [`Self::best_fit`] walks (the window list's
    /// chunks kept, its runs, the tree's unions and the last blocks' chunks kept), else
    /// [`Self::overlapping`]'s.
    pub(super) fn gather<C: Chunk>(&self, placed: &mut Placed<C>, a: SlotInfo, out: &mut Vec<(i64, i64)>) {
        if !self.unions {
            self.overlapping(placed, a, &mut |o, e| out.push((o, e)));
            return;
        }
        let (k, hi, lo, blocks, upto) = self.query(a);
        let whole = self.whole_blocks(&blocks, upto);
        self.tree_nodes(whole.clone(), |v| self.refresh(placed, v));
        self.refresh_window(placed, k);
        let placed = &*placed;
        let s = self.shift;
        out.extend(self.list(placed, k).iter().filter(|e| e.rel_slot() < hi && e.rel_upto() > lo).map(|e| (e.offset(s), e.end(s))));
        out.extend_from_slice(placed.pool.get(placed.window_runs[k]));
        self.tree_nodes(whole.clone(), |v| out.extend_from_slice(placed.pool.get(placed.unions[v])));
        for b in whole.end..blocks.end {
            let (list, hi) = self.block_list(placed, b, upto);
            out.extend(list.iter().filter(|e| e.rel_slot() < hi).map(|e| (e.offset(s), e.end(s))));
        }
    }

    /// [`Self::overlapping`] by offset, into `walk`; the offset it picks.
    #[inline]
    pub(super) fn best_fit<C: Chunk>(&self, placed: &mut Placed<C>, a: SlotInfo, mut walk: FreeChunkWalk, scratch: &mut Scratch) -> i64 {
        let (k, hi, lo, blocks, upto) = self.query(a);
        let whole = if self.unions { self.whole_blocks(&blocks, upto) } else { blocks.start..blocks.start };
        self.tree_nodes(whole.clone(), |v| self.refresh(placed, v));
        if self.unions {
            self.refresh_window(placed, k);
        }
        let placed = &*placed;
        let s = self.shift;
        let list = self.list(placed, k);
        let Scratch { buf, tmp, bounds, next_bounds, .. } = scratch;
        // The runs live through the window: its own and (few, long-lived) its group's, as one
        // union.
        let runs = if self.unions { placed.pool.get(placed.window_runs[k]) } else { &[][..] };
        // A free chunk of exactly the size needed can't be beaten (only a strictly smaller
        // one replaces the best): the walks stop there.
        if blocks.is_empty() && list.len() > FILTER_FIRST * runs.len() {
            // A long list and few runs: the list's entries kept, merged with the runs as they
            // come.
            let (mut x, mut y) = (0, 0);
            while x < list.len() && y < runs.len() && !walk.exact() {
                let (e, (o, end)) = (list[x], runs[y]);
                let first = e.offset(s) <= o;
                let keep = !first | ((e.rel_slot() < hi) & (e.rel_upto() > lo));
                walk.step_if(keep, select_unpredictable(first, e.offset(s), o), select_unpredictable(first, e.end(s), end));
                x += first as usize;
                y += !first as usize;
            }
            for &e in &list[x..] {
                walk.step_if((e.rel_slot() < hi) & (e.rel_upto() > lo), e.offset(s), e.end(s));
            }
            for &(o, end) in &runs[y..] {
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
            // The query ends within its window (most do): the kept chunks and the runs.
            return walk_two(walk, buf, runs);
        }
        if !runs.is_empty() {
            buf.extend_from_slice(runs);
            bounds.push(buf.len());
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

/// Reused buffers of the queries that merge several lists.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) buf: Vec<(i64, i64)>,
    tmp: Vec<(i64, i64)>,
    /// Where each sorted run of `buf` starts (and the last ends).
    bounds: Vec<usize>,
    next_bounds: Vec<usize>,
    /// The chunks a crossing interval's query gathers from the sides it touches
    /// (`planner::split`).
    pub(super) gathered: Vec<(i64, i64)>,
}

/// Appends the chunks of `list` that `keep` keeps to `buf` as one run.
#[inline(always)]
fn push_run<C: Chunk>(buf: &mut Vec<(i64, i64)>, bounds: &mut Vec<usize>, list: &[C], shift: u32, keep: impl Fn(C) -> bool) {
    let at = buf.len();
    // Every entry is written after the kept ones, into room not filled first (filling it
    // cost a third of the loop).
    buf.reserve(list.len());
    let room = buf.spare_capacity_mut()[..list.len()].as_mut_ptr();
    let mut kept = 0;
    for &e in list {
        // SAFETY: `kept` is at most the entries passed, below `list.len()`: within `room`.
        unsafe { (*room.add(kept)).write((e.offset(shift), e.end(shift))) };
        kept += keep(e) as usize;
    }
    // SAFETY: the first `kept` entries of `room` were written (each before `kept` passed it).
    unsafe { buf.set_len(at + kept) };
    if kept > 0 {
        bounds.push(at + kept);
    }
}

/// Prefetches the cache lines of `s` (a hint: nothing on other targets).
#[inline(always)]
pub(super) fn prefetch<T>(s: &[T]) {
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
