//! Which of `ChooseBestHeapAlgorithm`'s two orders will likely win, guessed before either runs,
//! so that on two or three cores the likely winner is placed first (cut into a side per core)
//! and the other stops where it has lost (`Planner::run_below`). The guess only sets which order
//! runs first: the plan chosen is the same either way (the smaller heap, kSpatial on a tie).
//!
//! The guess: both orders on the trace's first tenth (the intervals starting in the first tenth
//! of the starts, cut off there). A generate or serving run repeats itself, and its first tenth
//! already shows which order packs it tighter. Measured on the real captures (benches/RESULTS.md,
//! session 26): right on all 16 of at least [`GUESS_FROM`] intervals it was tried on
//! (`traces/cuda`, `traces/large` and two held-out recordings; kTemporal wins four), where the 2% of
//! intervals around the peak of the live bytes guessed two kTemporal winners wrong. It costs a
//! tenth of both orders' placements, run at once on two threads, the loser stopped once the
//! other finished smaller.

use super::{race, BufferInterval, Planner, Strategy};

/// Intervals from which the orders are guessed (below, both orders are cheap).
pub(super) const GUESS_FROM: usize = super::split::SPLIT_FROM;
/// The guess plans the intervals starting in the first `1 / GUESS_PART` of the starts.
const GUESS_PART: usize = 10;

/// Whether kTemporal will likely give the smaller heap (strictly: kSpatial wins a tie). False
/// below [`GUESS_FROM`] intervals and where intervals share chunks (colocations: a part of them
/// would name intervals left out).
pub(super) fn temporal_likely(iv: &[BufferInterval], alignment: i64) -> bool {
    if iv.len() < GUESS_FROM || iv.iter().any(|x| !x.colocations.is_empty() || !x.need_allocation) {
        return false;
    }
    // A trace's intervals come by start (`HeapBuilder` numbers them as they begin): the first
    // tenth is a prefix, found by a binary search rather than by selecting among all the starts.
    let (cut, part) = if iv.is_sorted_by_key(|x| x.start) {
        let cut = iv[iv.len() / GUESS_PART].start;
        (cut, &iv[..iv.partition_point(|x| x.start <= cut)])
    } else {
        let mut starts: Vec<i64> = iv.iter().map(|x| x.start).collect();
        let (_, &mut cut, _) = starts.select_nth_unstable(iv.len() / GUESS_PART);
        (cut, iv)
    };
    let first: Vec<BufferInterval> = part
        .iter()
        .filter(|x| x.start <= cut)
        .map(|x| BufferInterval {
            key: x.key,
            size: x.size,
            start: x.start,
            end: x.end.min(cut),
            colocations: Default::default(),
            need_allocation: true,
        })
        .collect();
    let planner = Planner::new(&first, alignment);
    // Both orders at once (the caller has two cores or more), each stopped once the other
    // finished smaller.
    race(|stop| planner.run_below(Strategy::Spatial, false, stop), |stop| planner.run_below(Strategy::Temporal, false, stop)).strategy
        == Strategy::Temporal
}
