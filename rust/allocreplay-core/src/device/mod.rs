//! The device under a policy: its memory and the addresses the driver hands out
//! ([`memory`]), what a policy counts ([`stats`]), and the device allocations a replay records
//! ([`DeviceEvent`]). Below both the policies, which allocate from it, and the engine, which
//! drives them; it knows neither.

mod deferred;
pub mod memory;
mod range_tree;
pub mod stats;

use crate::trace::Action;

pub use memory::DeviceMemory;
pub use stats::Stats;

/// A device allocation the policy made during the replay (what PyTorch records as
/// segment_alloc / segment_free / segment_map / segment_unmap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceEvent {
    pub event: usize,
    pub action: Action,
    pub addr: u64,
    pub size: u64,
}
