//! Which of `ChooseBestHeapAlgorithm`'s two orders will likely win, guessed before either runs,
//! so that on two or three cores the likely winner is placed first (cut into a side per core)
//! and the other stops where it has lost (`Planner::run_below`). The guess only sets which order
//! runs first: the plan chosen is the same either way (the smaller heap, kSpatial on a tie).
//!
//! The guess: both orders on the trace's first tenth (the intervals starting in the first tenth
//! of the starts, cut off there). A generate or serving run repeats itself, and its first tenth
//! already shows which order packs it tighter. With two cores or more the two orders of the
//! tenth race on two threads, the loser stopped once the other finished smaller; on one,
//! kSpatial's runs first and kTemporal's stops once it has lost (where kSpatial wins, the guess
//! then costs little more than kSpatial's tenth). Either way kTemporal's tenth is skipped where
//! kSpatial's is at the tenth's live bytes. Measured on the real captures (benches/RESULTS.md,
//! sessions 26 and 28): right on all 18 of at least [`GUESS_FROM`] intervals it was tried on
//! (`traces/cuda`, `traces/large` and two held-out recordings; kTemporal wins four), where the 2%
//! of intervals around the peak of the live bytes guessed two kTemporal winners wrong, and a
//! twentieth of the trace instead of a tenth guessed gpt2_generate wrong (session 29).

use std::sync::atomic::AtomicI64;

use super::{in_turn, race_below, BufferInterval, Planner, Schedule, Strategy};

/// Intervals from which the orders are guessed (below, both orders are cheap).
pub(super) const GUESS_FROM: usize = super::split::SPLIT_FROM;
/// The guess plans the intervals starting in the first `1 / GUESS_PART` of the starts.
const GUESS_PART: usize = 10;

/// Whether kTemporal will likely give the smaller heap (strictly: kSpatial wins a tie), the
/// tenth's two orders run on `cores` cores (two at most). False below [`GUESS_FROM`] intervals
/// and where intervals share chunks (colocations: a part of them would name intervals left
/// out).
pub(super) fn temporal_likely(iv: &[BufferInterval], alignment: i64, cores: usize) -> bool {
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
    // Where kSpatial's heap of the tenth is its live bytes, kTemporal's cannot be smaller (a
    // generate run whose kSpatial plan has no fragmentation): it is not run.
    let bound = max_live_bytes(&first, cut);
    let run = |strategy: Strategy, stop: &AtomicI64| planner.run_below(strategy, false, stop);
    let chosen = if cores < 2 {
        // One after the other, kSpatial first: kTemporal stops once it has lost.
        in_turn(Schedule::SpatialFirst, bound, run)
    } else {
        // Both orders at once, each stopped once the other finished smaller.
        race_below(|stop| run(Strategy::Spatial, stop), |stop| run(Strategy::Temporal, stop), bound)
    };
    chosen.strategy == Strategy::Temporal
}

/// The most bytes live at once among `iv` (ends inclusive, none past `last`), below which no
/// heap of them is; `None` where the times are not a trace's (negative, reversed, or far more
/// than two per interval), or the bytes overflow.
pub(super) fn max_live_bytes(iv: &[BufferInterval], last: i64) -> Option<i64> {
    let times = usize::try_from(last).ok().filter(|&t| t <= 4 * iv.len() + 16)?;
    let mut change = vec![0i128; times + 2];
    for x in iv {
        if x.start < 0 || x.end < x.start || x.end > last {
            return None;
        }
        change[x.start as usize] += i128::from(x.size);
        change[x.end as usize + 1] -= i128::from(x.size);
    }
    let (mut live, mut max) = (0i128, 0i128);
    for c in change {
        live += c;
        max = max.max(live);
    }
    i64::try_from(max).ok()
}
