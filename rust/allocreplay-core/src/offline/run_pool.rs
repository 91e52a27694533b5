//! The unions of used chunks that the planner's overlap structure keeps ([`super::heap`]'s
//! `Layout`): each a list of disjoint runs `(offset, end)` by offset, none touching another.
//!
//! All the unions of one plan live in one [`RunPool`]: a [`Union`] is a 16-byte header
//! naming its runs in the pool. A plan keeps hundreds of thousands of small unions (about
//! 300,000 on the qwen2 capture tiled twice) and changes them about once a placement; as
//! separate vectors each grew by `realloc` (~5% of a plan in malloc and free) and each read
//! chased a 24-byte header to a buffer elsewhere. In the pool a union grows into a block twice
//! as large (the blocks it leaves are reused by the next union of that size), and the whole
//! pool is freed at once.

use crate::huge_pages;

/// One union's runs: `len` of them at `start` in the pool, with room for `cap`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Union {
    start: u64,
    len: u32,
    cap: u32,
}

impl Union {
    pub(super) fn is_empty(self) -> bool {
        self.len == 0
    }
}

/// The runs of a plan's unions.
pub(super) struct RunPool {
    runs: Vec<(i64, i64)>,
    /// Blocks given back by unions that grew, by the log2 of their room (a `u32`).
    free: Vec<Vec<u64>>,
    /// The runs of a union being built (merged before they are copied in).
    scratch: Vec<(i64, i64)>,
}

/// The room of a union's first block.
const FIRST_ROOM: usize = 8;

impl RunPool {
    /// A pool expecting about `runs` runs in all.
    pub(super) fn with_capacity(runs: usize) -> Self {
        RunPool { runs: huge_pages::with_capacity(runs), free: vec![Vec::new(); u32::BITS as usize + 1], scratch: Vec::new() }
    }

    /// The runs of `u`.
    #[inline]
    pub(super) fn get(&self, u: Union) -> &[(i64, i64)] {
        &self.runs[u.start as usize..u.start as usize + u.len as usize]
    }

    /// Room for `len` runs in `u`, its runs kept (moved to a larger block when they don't fit).
    #[inline]
    fn reserve(&mut self, u: &mut Union, len: usize) {
        if len <= u.cap as usize {
            return;
        }
        let room = len.next_power_of_two().max(FIRST_ROOM);
        let class = room.trailing_zeros() as usize;
        let start = match self.free[class].pop() {
            Some(start) => start as usize,
            None => {
                let start = self.runs.len();
                self.runs.resize(start + room, (0, 0));
                start
            }
        };
        let old = u.start as usize;
        self.runs.copy_within(old..old + u.len as usize, start);
        if u.cap > 0 {
            self.free[u.cap.trailing_zeros() as usize].push(u.start);
        }
        u.start = start as u64;
        u.cap = room as u32;
    }

    /// Adds `[offset, end)` to `u`, merging the runs it overlaps or touches: the union of the
    /// chunks, which is all the free-chunk walk depends on (a chunk starting where the used
    /// ones before it end lists no free chunk).
    pub(super) fn insert(&mut self, u: &mut Union, offset: i64, end: i64) {
        let runs = self.get(*u);
        let first = runs.partition_point(|r| r.1 < offset);
        // The runs it joins follow `first` (a chunk mostly joins none or one): found by a scan.
        let mut past = first;
        while past < runs.len() && runs[past].0 <= end {
            past += 1;
        }
        if first == past {
            self.reserve(u, u.len as usize + 1);
            let (start, len) = (u.start as usize, u.len as usize);
            self.runs.copy_within(start + first..start + len, start + first + 1);
            self.runs[start + first] = (offset, end);
            u.len += 1;
        } else {
            let (start, len) = (u.start as usize, u.len as usize);
            let runs = &mut self.runs[start..start + len];
            runs[first] = (runs[first].0.min(offset), runs[past - 1].1.max(end));
            runs.copy_within(past..len, first + 1);
            u.len -= (past - first - 1) as u32;
        }
    }

    /// Sets `out` to the union of `a` and `b`.
    pub(super) fn set_union_of(&mut self, out: &mut Union, a: Union, b: Union) {
        let mut merged = std::mem::take(&mut self.scratch);
        merged.resize(a.len as usize + b.len as usize, (0, 0));
        merge_into(self.get(a), self.get(b), &mut merged);
        join_runs(&mut merged);
        self.set(out, &merged);
        self.scratch = merged;
    }

    /// Sets `out` to the union of `chunks` (sorted by offset).
    pub(super) fn set_joined(&mut self, out: &mut Union, chunks: impl Iterator<Item = (i64, i64)>) {
        let mut joined = std::mem::take(&mut self.scratch);
        joined.clear();
        joined.extend(chunks);
        join_runs(&mut joined);
        self.set(out, &joined);
        self.scratch = joined;
    }

    /// Sets `out`'s runs to `runs`.
    fn set(&mut self, out: &mut Union, runs: &[(i64, i64)]) {
        out.len = 0;
        self.reserve(out, runs.len());
        let start = out.start as usize;
        self.runs[start..start + runs.len()].copy_from_slice(runs);
        out.len = runs.len() as u32;
    }
}

/// `a` and `b` (sorted by offset) merged into `out` (as long as both), without branches on
/// the data.
#[inline]
pub(super) fn merge_into(a: &[(i64, i64)], b: &[(i64, i64)], out: &mut [(i64, i64)]) {
    let (mut x, mut y) = (0, 0);
    while x < a.len() && y < b.len() {
        let (p, q) = (a[x], b[y]);
        let first = p.0 <= q.0;
        out[x + y] = std::hint::select_unpredictable(first, p, q);
        x += first as usize;
        y += !first as usize;
    }
    let at = x + y;
    let rest = if x < a.len() { &a[x..] } else { &b[y..] };
    out[at..at + rest.len()].copy_from_slice(rest);
}

/// Chunks sorted by offset joined, in place, into runs as [`RunPool::insert`] keeps them,
/// without branches on the data: each chunk is written after the last run, which advances
/// unless the chunk overlaps or touches that run (then the run takes its end).
fn join_runs(runs: &mut Vec<(i64, i64)>) {
    let mut len = 0;
    for i in 0..runs.len() {
        let (o, e) = runs[i];
        let last = runs[len.max(1) - 1];
        let join = (len > 0) & (o <= last.1);
        runs[len.max(1) - 1].1 = std::hint::select_unpredictable(join, last.1.max(e), last.1);
        runs[len] = (o, e);
        len += !join as usize;
    }
    runs.truncate(len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unions_join_chunks_that_overlap_or_touch() {
        let mut pool = RunPool::with_capacity(0);
        let mut u = Union::default();
        for (o, e) in [(10, 20), (30, 40), (20, 25), (50, 50), (45, 46), (0, 5), (38, 47)] {
            pool.insert(&mut u, o, e);
        }
        // [10,20)+[20,25) touch; [30,40)+[45,46) bridged by [38,47); [50,50) stays apart.
        assert_eq!(pool.get(u), [(0, 5), (10, 25), (30, 47), (50, 50)]);
        let mut other = Union::default();
        pool.set_joined(&mut other, [(5, 6), (26, 30), (49, 51)].into_iter());
        let mut out = Union::default();
        pool.set_union_of(&mut out, u, other);
        assert_eq!(pool.get(out), [(0, 6), (10, 25), (26, 47), (49, 51)]);
        let mut chunks = vec![(0, 3), (1, 2), (3, 4), (6, 9), (7, 8)];
        join_runs(&mut chunks);
        assert_eq!(chunks, vec![(0, 4), (6, 9)]);
    }

    #[test]
    fn unions_that_grow_and_shrink_keep_their_runs_apart() {
        // Many unions filled in turns, so that each outgrows its block while the others sit
        // beside it, against plain sorted vectors.
        let mut pool = RunPool::with_capacity(4);
        let mut unions = [Union::default(); 7];
        let mut want: Vec<Vec<(i64, i64)>> = vec![Vec::new(); 7];
        let mut rng = crate::test_rng::XorShift64::new(3);
        for step in 0..4000 {
            let k = rng.below(7) as usize;
            let o = rng.below(10_000) as i64;
            let e = o + rng.below(40) as i64;
            pool.insert(&mut unions[k], o, e);
            // The reference: every run overlapping or touching [lo, hi) merged into it, until
            // none is left (a run joined may widen it to reach another).
            let (mut lo, mut hi) = (o, e);
            loop {
                let before = want[k].len();
                want[k].retain(|&(a, b)| {
                    let joins = b >= lo && a <= hi;
                    if joins {
                        lo = lo.min(a);
                        hi = hi.max(b);
                    }
                    !joins
                });
                if want[k].len() == before {
                    break;
                }
            }
            want[k].push((lo, hi));
            want[k].sort_unstable();
            if step % 500 == 499 {
                // Rebuilds too: a union set from another's runs.
                let j = (k + 1) % 7;
                let src = unions[k];
                pool.set_union_of(&mut unions[j], src, Union::default());
                want[j] = want[k].clone();
            }
            for (u, w) in unions.iter().zip(&want) {
                assert_eq!(pool.get(*u), &w[..], "step {step}");
            }
        }
    }
}
