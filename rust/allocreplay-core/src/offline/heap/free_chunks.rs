//! `MakeFreeChunksList` + `FindUnslicedChunkCandidates` (kBestFit): the free chunks between
//! the used chunks sorted by offset, judged as they are walked ([`best_fit`], and
//! [`FreeChunkWalk`] without branches on the data).

use std::hint::select_unpredictable;

/// `MakeFreeChunksList` over the used chunks sorted by offset, each free chunk judged as the
/// list would be walked (by increasing offset, the open end last) by
/// `FindUnslicedChunkCandidates`' best fit: the first smallest that holds `max_colocation_size`
/// at its aligned start. Chunks shorter than the buffer's own `size` are not listed. `used`
/// yields (offset, end) pairs.
pub(super) fn best_fit(mut used: impl Iterator<Item = (i64, i64)>, size: i64, max_colocation_size: i64, alignment: i64) -> i64 {
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
pub(super) struct FreeChunkWalk {
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
    pub(super) fn new(size: i64, max_colocation_size: i64, alignment: i64) -> Self {
        debug_assert!(size >= 1 && max_colocation_size >= size && alignment >= 1 && alignment & (alignment - 1) == 0);
        FreeChunkWalk { need: size.max(max_colocation_size), mask: alignment - 1, run_end: 0, best_offset: -1, best_size: i64::MAX }
    }

    #[inline(always)]
    fn align(&self, x: i64) -> i64 {
        (x + self.mask) & !self.mask
    }

    /// The next used chunk `[offset, end)` by offset.
    #[inline(always)]
    pub(super) fn step(&mut self, offset: i64, end: i64) {
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
    pub(super) fn exact(&self) -> bool {
        self.best_size == self.need
    }

    /// [`Self::step`] if `keep`, else nothing.
    #[inline(always)]
    pub(super) fn step_if(&mut self, keep: bool, offset: i64, end: i64) {
        self.step(select_unpredictable(keep, offset, -1), select_unpredictable(keep, end, -1));
    }

    /// The offset chosen, once every used chunk has been stepped: the open end last.
    pub(super) fn finish(self) -> i64 {
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
pub(super) fn align_up(x: i64, a: i64) -> i64 {
    if a <= 1 {
        x
    } else if a & (a - 1) == 0 && x >= 0 {
        // A power of two (XLA's alignments are): a mask, not a division.
        (x + a - 1) & !(a - 1)
    } else {
        (x + a - 1) / a * a
    }
}

/// Walks two runs sorted by offset as one (merged as they are read); the offset picked.
///
/// [`FreeChunkWalk::step`] written out on locals and pointers: as a struct the walk's fields
/// went through memory on every step, and the indices into the two runs cost more
/// instructions than the pointers (the loop is most of the walk's time).
#[inline]
pub(super) fn walk_two(walk: FreeChunkWalk, ours: &[(i64, i64)], theirs: &[(i64, i64)]) -> i64 {
    let FreeChunkWalk { need, mask, mut run_end, mut best_offset, mut best_size } = walk;
    let (mut a, mut b) = (ours.as_ptr_range(), theirs.as_ptr_range());
    while a.start != a.end && b.start != b.end && best_size != need {
        // SAFETY: both pointers are below their ends, within their slices.
        let (p, q) = unsafe { (*a.start, *b.start) };
        let first = p.0 <= q.0;
        let offset = select_unpredictable(first, p.0, q.0);
        let end = select_unpredictable(first, p.1, q.1);
        let start = (run_end + mask) & !mask;
        let length = offset - start;
        let take = (offset >= run_end) & (length >= need) & (length < best_size);
        best_size = select_unpredictable(take, length, best_size);
        best_offset = select_unpredictable(take, start, best_offset);
        run_end = run_end.max(end);
        // SAFETY: each advances by at most one, to at most its end.
        unsafe {
            a.start = a.start.add(first as usize);
            b.start = b.start.add(!first as usize);
        }
    }
    // SAFETY: `a.start` and `b.start` lie within (or at the end of) their slices.
    let (x, y) = unsafe { (a.start.offset_from(ours.as_ptr()) as usize, b.start.offset_from(theirs.as_ptr()) as usize) };
    let mut walk = FreeChunkWalk { need, mask, run_end, best_offset, best_size };
    for &(o, e) in ours[x..].iter().chain(&theirs[y..]) {
        if walk.exact() {
            break;
        }
        walk.step(o, e);
    }
    walk.finish()
}
