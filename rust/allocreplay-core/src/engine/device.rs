//! The device under a policy: a capacity, and the addresses of the memory it hands out
//! (`cudaMalloc`, `cuMemMap`, a BFC region). In `validate`, addresses come from the recorded run
//! so that best-fit ties break as they did on the GPU; otherwise from a simulated address space
//! that hands out addresses top-down, as the CUDA driver mostly does (shared/reference/findings.md).

use std::collections::BTreeMap;

use super::DeviceEvent;
use crate::trace::Action;

#[derive(Debug, Clone)]
pub struct DeviceMemory {
    /// Bytes the policy may reserve in all (a cap or the device's total memory); `u64::MAX`
    /// means unlimited.
    pub capacity: u64,
    /// Bytes currently obtained through `malloc`.
    pub used: u64,
    /// Recorded addresses offered for the next device allocations (validate mode), with the
    /// size each was recorded with: taken in order by a `malloc` of the same size.
    hints: Vec<(u64, u64)>,
    /// A recorded address for the request being served (BFC places a new region where the
    /// triggering allocation was recorded).
    pub request_hint: Option<u64>,
    /// Simulated address space: free ranges start -> end.
    free: BTreeMap<u64, u64>,
    pub num_malloc: u64,
    pub num_free: u64,
    /// Index of the event being replayed (stamped on logged device events).
    pub event: usize,
    /// Device events made, when the engine asked for them.
    pub log: Option<Vec<DeviceEvent>>,
}

/// Top of the simulated address space (a typical CUDA device VA on Linux).
const VA_TOP: u64 = 0x7f00_0000_0000;
const VA_BOTTOM: u64 = 0x7000_0000_0000;

impl DeviceMemory {
    pub fn new(capacity: Option<u64>) -> Self {
        DeviceMemory {
            capacity: capacity.unwrap_or(u64::MAX),
            used: 0,
            hints: Vec::new(),
            request_hint: None,
            free: BTreeMap::from([(VA_BOTTOM, VA_TOP)]),
            num_malloc: 0,
            num_free: 0,
            event: 0,
            log: None,
        }
    }

    /// Whether `size` more bytes fit under the capacity.
    pub fn fits(&self, size: u64) -> bool {
        self.used.checked_add(size).is_some_and(|t| t <= self.capacity)
    }

    pub fn set_hints(&mut self, hints: impl IntoIterator<Item = (u64, u64)>) {
        self.hints.clear();
        self.hints.extend(hints);
    }

    /// Takes the next recorded address offered for this request, if any.
    pub fn take_hint(&mut self) -> Option<(u64, u64)> {
        if self.hints.is_empty() {
            None
        } else {
            Some(self.hints.remove(0))
        }
    }

    pub fn clear_hints(&mut self) {
        self.hints.clear();
        self.request_hint = None;
    }

    /// `cudaMalloc(size)`: an address, or `None` when it would exceed the capacity or when
    /// the simulated address space (15 TiB, more than any device) has no room for it.
    pub fn malloc(&mut self, size: u64) -> Option<u64> {
        if !self.fits(size) {
            return None;
        }
        let addr = self.pick_address(size)?;
        self.used += size;
        self.num_malloc += 1;
        self.record(Action::SegmentAlloc, addr, size);
        Some(addr)
    }

    fn pick_address(&mut self, size: u64) -> Option<u64> {
        if let Some(pos) = self.hints.iter().position(|&(_, s)| s == size) {
            let (addr, _) = self.hints.remove(pos);
            self.carve(addr, size);
            return Some(addr);
        }
        self.take_top_checked(size)
    }

    /// `malloc` at a given address (validate: a region placed where the trace shows it).
    pub fn malloc_at(&mut self, addr: u64, size: u64) -> Option<u64> {
        if !self.fits(size) {
            return None;
        }
        self.used += size;
        self.num_malloc += 1;
        self.carve(addr, size);
        self.record(Action::SegmentAlloc, addr, size);
        Some(addr)
    }

    /// A segment that existed before the recorded history began (a seed): its bytes count as
    /// used and its range is taken, so that freeing it later balances (before, `free` of a
    /// seeded segment underflowed `used`: found by the arrow fuzz target).
    pub fn adopt(&mut self, addr: u64, size: u64) {
        self.used = self.used.saturating_add(size);
        self.carve(addr, size);
    }

    /// Reserves a virtual range (expandable segments: no physical memory, no capacity).
    pub fn reserve_virtual(&mut self, size: u64) -> u64 {
        self.take_top(size)
    }

    /// Maps `size` bytes of physical memory at `addr` (`cuMemMap`); `false` over capacity.
    pub fn map(&mut self, addr: u64, size: u64) -> bool {
        if !self.fits(size) {
            return false;
        }
        self.used += size;
        self.num_malloc += 1;
        self.record(Action::SegmentMap, addr, size);
        true
    }

    pub fn unmap(&mut self, addr: u64, size: u64) {
        self.used = self.used.saturating_sub(size);
        self.num_free += 1;
        self.record(Action::SegmentUnmap, addr, size);
    }

    #[inline]
    fn record(&mut self, action: Action, addr: u64, size: u64) {
        if let Some(log) = self.log.as_mut() {
            log.push(DeviceEvent { event: self.event, action, addr, size });
        }
    }

    /// `cudaFree`.
    pub fn free(&mut self, addr: u64, size: u64) {
        self.used = self.used.saturating_sub(size);
        self.num_free += 1;
        self.record(Action::SegmentFree, addr, size);
        self.give_back(addr, size);
    }

    /// Highest free range that fits, 2 MiB aligned, taken from its top (driver-like).
    fn take_top(&mut self, size: u64) -> u64 {
        const ALIGN: u64 = 2 << 20;
        // Out of simulated VA (never in practice): hand out addresses below.
        self.take_top_checked(size).unwrap_or_else(|| VA_BOTTOM.saturating_sub(size.div_ceil(ALIGN).saturating_mul(ALIGN)))
    }

    /// `take_top`, or `None` when no free range of the simulated address space fits: device
    /// memory is not handed out twice (a replay asking for more than 15 TiB live is an OOM).
    fn take_top_checked(&mut self, size: u64) -> Option<u64> {
        const ALIGN: u64 = 2 << 20;
        let need = size.div_ceil(ALIGN).saturating_mul(ALIGN);
        let (s, e) = self.free.iter().rev().find(|(&s, &e)| e - s >= need).map(|(&s, &e)| (s, e))?;
        let addr = e - need;
        if addr == s {
            self.free.remove(&s);
        } else {
            self.free.insert(s, addr);
        }
        Some(addr)
    }

    /// Marks [addr, addr+size) used if it lies in a free range (hinted addresses may lie
    /// outside the simulated range: then nothing to do).
    fn carve(&mut self, addr: u64, size: u64) {
        let Some((&s, &e)) = self.free.range(..=addr).next_back() else { return };
        if addr >= e || addr.saturating_add(size) > e {
            return;
        }
        self.free.remove(&s);
        if s < addr {
            self.free.insert(s, addr);
        }
        if addr + size < e {
            self.free.insert(addr + size, e);
        }
    }

    fn give_back(&mut self, addr: u64, size: u64) {
        if !(VA_BOTTOM..VA_TOP).contains(&addr) {
            return;
        }
        let mut start = addr;
        let mut end = (addr + size).div_ceil(2 << 20) * (2 << 20);
        if let Some((&s, &e)) = self.free.range(..addr).next_back() {
            if e == start {
                start = s;
                self.free.remove(&s);
            }
        }
        if let Some(&e2) = self.free.get(&end) {
            self.free.remove(&end);
            end = e2;
        }
        self.free.insert(start, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_enforced_and_freed_memory_is_reusable() {
        let mut d = DeviceMemory::new(Some(40 << 20));
        let a = d.malloc(20 << 20).unwrap();
        let b = d.malloc(20 << 20).unwrap();
        assert!(b < a, "top-down");
        assert_eq!(d.malloc(2 << 20), None);
        d.free(a, 20 << 20);
        assert_eq!(d.malloc(20 << 20), Some(a));
    }

    #[test]
    fn hints_are_used_for_matching_sizes() {
        let mut d = DeviceMemory::new(None);
        d.set_hints([(0x1000_0000, 2 << 20)]);
        assert_eq!(d.malloc(20 << 20).map(|a| a >= VA_BOTTOM), Some(true));
        assert_eq!(d.malloc(2 << 20), Some(0x1000_0000));
    }
}
