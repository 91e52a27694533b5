//! One policy driven over a device's memory through the `Policy` trait, as the replay engine
//! drives it: the allocator of the upstream ports (`tests/upstream_*.rs`), each of which adds the
//! wrappers that name upstream's API.

use allocreplay_core::device::DeviceMemory;
use allocreplay_core::engine::DrivenPolicy;
use allocreplay_core::policy::{OutOfMemory, Placement, Policy, Request};

/// A policy (by default one the registry built, `BoxedPolicy`'s) over the device memory it
/// allocates from; allocations are ids, numbered in the order they were asked for.
#[allow(dead_code)] // each test crate compiles this module and uses part of it
pub struct PolicyDriver<P: ?Sized = dyn DrivenPolicy> {
    pub policy: Box<P>,
    pub dev: DeviceMemory,
    next_id: u64,
}

#[allow(dead_code)] // each test crate compiles this module and uses part of it
impl<P: Policy + ?Sized> PolicyDriver<P> {
    /// `policy` over `dev`, nothing allocated yet.
    pub fn over(policy: Box<P>, dev: DeviceMemory) -> Self {
        PolicyDriver { policy, dev, next_id: 0 }
    }

    /// A request of `size` bytes on `stream`, in pool `pool`, with a fresh id: that id and where
    /// the policy placed it, or the policy's out-of-memory.
    pub fn malloc_on(&mut self, size: u64, stream: i64, pool: u32) -> Result<(u64, Placement), OutOfMemory> {
        let id = self.next_id;
        self.next_id += 1;
        let req = Request { event: id as usize, id, size, stream, pool, recorded_addr: None, recorded_chunk: None };
        self.policy.malloc(&req, &mut self.dev).map(|p| (id, p))
    }

    /// A request of `size` bytes on the default stream and pool ([`Self::malloc_on`]).
    pub fn malloc(&mut self, size: u64) -> Result<(u64, Placement), OutOfMemory> {
        self.malloc_on(size, 0, 0)
    }

    /// Frees the allocation `id`: `free_requested` + `free_completed`.
    pub fn free(&mut self, id: u64) {
        self.policy.free_requested(id, &mut self.dev);
        self.policy.free_completed(id, &mut self.dev);
    }
}
