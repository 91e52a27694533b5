//! Allocator policies, one module per allocator, all behind [`Policy`]. A policy sees the
//! request events of one device in recorded order and makes the decisions the real allocator
//! would: rounding, which cached block serves a request, when to get or return device memory.

pub mod bfc;
pub mod bfc_config;
pub mod bounds;
mod class_bitmap;
pub mod cuda_async;
pub mod cuda_malloc;
pub mod entry;
mod free_blocks;
mod id_map;
pub mod managed;
pub mod options;
pub mod pytorch;
pub mod pytorch_config;
mod sorted_map;
pub mod spec;

pub use entry::{PeakBand, PolicyEntry, PolicyKind};
pub use spec::PolicyContext;

/// Requests of 2^55 bytes (32 PiB) or more fail in every policy, as the real allocators fail
/// them: no device has that much, and below it the policies' rounding (at most doubling a
/// size: power-of-two divisions) stays below 2^56, where `pytorch` packs sizes into its block
/// keys. A request near 2^64 used to wrap to a 0-byte block.
pub const MAX_REQUEST: u64 = 1 << 55;

/// The OOM of a request of `size` bytes that no allocator can serve (counted in `stats`);
/// `None` for any other size.
#[inline]
pub(crate) fn unservable(size: u64, stats: &mut Stats) -> Option<OutOfMemory> {
    if size < MAX_REQUEST {
        return None;
    }
    stats.num_ooms += 1;
    Some(OutOfMemory { alloc_size: size })
}

use crate::device::DeviceMemory;
use crate::device::Stats;

/// What a policy's constructor boxes it into (each `from_spec` is generic in it): a plain
/// `Box<dyn Policy>`, or the engine's box, which gives every policy type its own copy of the
/// row loop (`engine::BoxedPolicy`). The policies so never name the engine above them.
pub trait FromPolicy {
    fn from_policy<P: Policy + 'static>(policy: P) -> Self;
}

impl FromPolicy for Box<dyn Policy> {
    fn from_policy<P: Policy + 'static>(policy: P) -> Self {
        Box::new(policy)
    }
}

/// One allocation request.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Index of the event in the trace.
    pub event: usize,
    /// Dense allocation id (pairs the frees with this request).
    pub id: u64,
    /// Requested bytes (unrounded).
    pub size: u64,
    pub stream: i64,
    /// Index into the trace's pool table (0 = default pool; others are private pools such as
    /// CUDA-graph pools).
    pub pool: u32,
    /// The address the recorded run returned, when known, for a seed allocation or in a replay
    /// at the recorded addresses (`validate`); `None` in other replays.
    pub recorded_addr: Option<u64>,
    /// The block / chunk size the recorded run gave it, when the trace knows it
    /// (`chunk_bytes`: BFC's allocation_bytes, seeds of a truncated PyTorch history); like
    /// `recorded_addr`, only for seeds and in `validate`.
    pub recorded_chunk: Option<u64>,
}

/// Where a request was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub addr: u64,
    /// Bytes the allocator set aside (rounded / block / chunk size).
    pub size: u64,
    /// Base address of the segment / region / mapping holding it.
    pub segment: u64,
}

/// A failed request: the policy's state is unchanged by it (the program saw an exception).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Bytes the allocator tried to obtain from the device when it gave up.
    pub alloc_size: u64,
}

/// One segment (cudaMalloc'd range, expandable mapping, BFC region) at the end of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub addr: u64,
    pub size: u64,
    pub stream: i64,
    pub pool: u32,
    /// `small` / `large` for PyTorch; `region` for BFC, ...
    pub kind: &'static str,
    pub allocated_bytes: u64,
    pub blocks: u32,
}

/// One block of a segment (PyTorch `Block`, BFC `Chunk`): allocated, or a free hole the
/// allocator caches. Listed by [`Policy::blocks`] for `allocreplay.analysis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// Base address of the segment / region (as in [`SegmentInfo::addr`]).
    pub segment: u64,
    pub addr: u64,
    pub size: u64,
    /// Held by an allocation (including one freed by the program but still in use by another
    /// stream); false: a free, cached hole.
    pub allocated: bool,
}

pub trait Policy {
    /// The spec string the policy was built from, normalised.
    fn name(&self) -> String;

    /// Serves a request. Must not change any state when it returns `Err`.
    fn malloc(&mut self, req: &Request, device: &mut DeviceMemory) -> Result<Placement, OutOfMemory>;

    /// The program released an allocation. Most policies do nothing until `free_completed`.
    fn free_requested(&mut self, _id: u64, _device: &mut DeviceMemory) {}

    /// The allocator takes the memory back (merges, caches or returns it).
    fn free_completed(&mut self, id: u64, device: &mut DeviceMemory);

    /// `free_requested` and, on the next row, `free_completed` of the same id, as one call:
    /// where the policy does that faster than the two and the completion changes neither the
    /// allocated nor the reserved bytes (the engine then records both events with the stats
    /// after this call). Returns false, having done nothing, where it does not (the default):
    /// the engine then makes the two calls.
    fn free_at_once(&mut self, _id: u64, _device: &mut DeviceMemory) -> bool {
        false
    }

    /// Places an allocation that was live before the recorded history began (a seed of a
    /// truncated trace) at its recorded address when the policy can; by default it is served
    /// like any request.
    fn seed_alloc(&mut self, req: &Request, device: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
        self.malloc(req, device)
    }

    /// A segment that existed before the recorded history began (seed). By default ignored:
    /// the policy creates what it needs when seed allocations arrive.
    fn seed_segment(&mut self, _addr: u64, _size: u64, _stream: i64, _pool: u32, _device: &mut DeviceMemory) {}

    /// The program asked the allocator to release its cache (`torch.cuda.empty_cache()`).
    /// Policies without a cache of free device memory have nothing to do.
    fn empty_cache(&mut self, _device: &mut DeviceMemory) {}

    fn stats(&self) -> &Stats;

    fn segments(&self) -> Vec<SegmentInfo>;

    /// Every block of every segment, address order within a segment, when the policy keeps
    /// blocks (PyTorch, BFC); `None` otherwise (analysis then takes the allocations it placed
    /// and calls the rest of each segment free).
    fn blocks(&self) -> Option<Vec<BlockInfo>> {
        None
    }

    /// Whether the policy's decisions never read the addresses `DeviceMemory` hands it (they
    /// only go into its placements and segments, as `cuda-malloc`'s do): the engine may then
    /// place its device memory on a helper thread (`DeviceMemory::defer`). Such a policy can
    /// start over ([`Policy::restart`]).
    fn places_without_addresses(&self) -> bool {
        false
    }

    /// Back to the state it was built in, for a replay run again; false when the policy
    /// cannot (every policy whose [`Policy::places_without_addresses`] is false).
    fn restart(&mut self) -> bool {
        false
    }
}
