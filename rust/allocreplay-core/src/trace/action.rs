//! What happened at one event. The codes are the keys of the `action` dictionary column and
//! are part of the file format (see traces/README.md): never renumber them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A request for `size` bytes (the size the program asked for, unrounded).
    Alloc = 0,
    /// The program released the allocation (PyTorch `free_requested`); the memory may stay
    /// in use by other streams until `FreeCompleted`.
    FreeRequested = 1,
    /// The allocator took the block back (PyTorch `free_completed`, BFC deallocation).
    FreeCompleted = 2,
    /// The allocator obtained device memory (`cudaMalloc`, a BFC region).
    SegmentAlloc = 3,
    /// The allocator returned device memory (`cudaFree`).
    SegmentFree = 4,
    /// Expandable segments: physical pages mapped into a reserved virtual range.
    SegmentMap = 5,
    /// Expandable segments: physical pages unmapped.
    SegmentUnmap = 6,
    /// An out-of-memory error; `size` is the rounded request, `addr` the device's free bytes.
    Oom = 7,
    /// A snapshot marker (PyTorch `snapshot`).
    Snapshot = 8,
    /// The program asked the allocator to release its cache (`torch.cuda.empty_cache()`).
    /// PyTorch records no entry for it: the importer infers it from segment frees with no
    /// allocation behind them (traces/README.md). Every policy replays it.
    EmptyCache = 9,
}

impl Action {
    /// All actions in code order: the dictionary of the `action` column.
    pub const ALL: [Action; 10] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Oom,
        Action::Snapshot,
        Action::EmptyCache,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
            Action::EmptyCache => "empty_cache",
        }
    }

    pub fn from_code(code: u8) -> Option<Action> {
        Action::ALL.get(code as usize).copied()
    }

    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.iter().copied().find(|a| a.as_str() == name)
    }

    /// True for the events a program issues (what every policy replays); false for the
    /// recorded decisions of the allocator that ran.
    pub fn is_request(self) -> bool {
        matches!(self, Action::Alloc | Action::FreeRequested | Action::FreeCompleted | Action::EmptyCache)
    }
}

/// The events that add a timeline point: the requests replayed (allocs, frees, a recorded OOM
/// outside the seed).
pub fn is_timeline_request(action: u8, seed: bool) -> bool {
    matches!(Action::from_code(action), Some(Action::Alloc | Action::FreeRequested | Action::FreeCompleted))
        || (action == Action::Oom as u8 && !seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_names_are_pytorch_actions() {
        for (i, a) in Action::ALL.iter().enumerate() {
            assert_eq!(*a as u8 as usize, i);
            assert_eq!(Action::from_code(i as u8), Some(*a));
            assert_eq!(Action::parse(a.as_str()), Some(*a));
        }
        // The names are those of PyTorch's TraceEntry actions (torch/cuda/_memory_viz.py).
        assert_eq!(Action::FreeCompleted.as_str(), "free_completed");
        assert_eq!(Action::EmptyCache.as_str(), "empty_cache");
        assert_eq!(Action::from_code(10), None);
    }
}
