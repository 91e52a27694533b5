//! The device under a policy: a capacity, and the addresses of the memory it hands out
//! (`cudaMalloc`, `cuMemMap`, a BFC region). In `validate`, addresses come from the recorded run
//! so that best-fit ties break as they did on the GPU; otherwise from [`AddressSpace`], a model
//! of the CUDA driver's virtual address placement measured on an H200
//! (docs/driver-address-space.md).

use rustc_hash::FxHashMap;

use super::range_tree::RangeTree;
use super::DeviceEvent;
use crate::trace::Action;

const MIB: u64 = 1 << 20;
/// The driver's page: every `cudaMalloc` takes a multiple of 2 MiB of address space.
const VA_PAGE: u64 = 2 * MIB;
/// A new range is placed at a 32 MiB-aligned address.
const VA_ALIGN: u64 = 32 * MIB;
/// Top of the range new `cudaMalloc` regions are carved from (downwards). Absolute values
/// differ from run to run on the GPU; only the layout relative to it is modelled.
const VA_TOP: u64 = 0x7f00_0000_0000;
const VA_BOTTOM: u64 = 0x7000_0000_0000;
/// The largest device memory the policies that place memory in this address space model
/// (their registry entries' `max_capacity`): the largest `cudaMalloc` it takes, the 15 TiB from
/// [`VA_BOTTOM`] to [`VA_TOP`] less the 32 MiB a new range needs above its allocation (rule 2
/// of docs/driver-address-space.md). A device of more memory would hold allocations this
/// address space has no room for: a replay under a larger limit is refused, not clamped.
pub const MAX_DEVICE_MEMORY: u64 = VA_TOP - VA_BOTTOM - VA_ALIGN;
/// Where `cuMemAddressReserve` hands out ranges (upwards): 0x3_0200_0000 on the H200
/// (probe `vmm`, and every expandable-segments capture's first segment).
const RESERVE_BASE: u64 = 0x3_0200_0000;

/// A range carved from the free address space by a `cudaMalloc`: the allocation at its base,
/// and what is left of it above (its *holes*), which later allocations fill.
#[derive(Debug, Clone)]
struct Region {
    end: u64,
    /// Allocations living in the region.
    live: u32,
    /// Starts of the unused ranges inside the region (in [`AddressSpace::holes`]): a region
    /// carved by a `cudaMalloc` has at most one, its tail; the context's has two.
    holes: Vec<u64>,
}

/// The CUDA driver's placement of `cudaMalloc` allocations in the device's virtual address
/// space (driver 580.159, H200; docs/driver-address-space.md has the probes):
///
/// 1. A request takes its size rounded up to 2 MiB.
/// 2. It goes to the lowest hole (unused tail of a live region) that fits, at the hole's base.
/// 3. Otherwise a new region is carved from the free address space, top-down: from the highest
///    free range at least `size + 32 MiB` long, at `align_down(range end - size, 32 MiB)`; the
///    region reaches up to the range's end, so what is above the allocation becomes its hole
///    (20 MiB allocations land 32 MiB apart, 2 MiB ones fill the 12 MiB tails).
/// 4. A freed allocation's range stays with its region until the region's last allocation is
///    freed; then the whole region returns to the free address space, merged with its
///    neighbours.
///
/// The context's own allocations leave two holes above the first region (2 MiB at +414 MiB and
/// 24 MiB at +488 MiB, in a fresh process); they are modelled too.
#[derive(Debug, Clone)]
///
/// Both searches (the lowest hole that fits, the highest free range that fits) are O(log n):
/// the holes of every region and the free ranges are each kept in a [`RangeTree`], which knows
/// the longest range under each of its nodes.
pub struct AddressSpace {
    /// Free address space: start -> end.
    free: RangeTree,
    /// Every region's holes: start -> end, tagged with the region's base.
    holes: RangeTree,
    regions: FxHashMap<u64, Region>,
    /// Allocation address -> the base of its region.
    owner: FxHashMap<u64, u64>,
    /// Next `cuMemAddressReserve` address.
    reserve_next: u64,
}

impl super::deferred::AddressPlacer for AddressSpace {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        AddressSpace::malloc(self, size)
    }
    fn free(&mut self, addr: u64) {
        AddressSpace::free(self, addr)
    }
}

impl Default for AddressSpace {
    fn default() -> Self {
        Self::new()
    }
}

impl AddressSpace {
    pub fn new() -> Self {
        let mut regions = FxHashMap::default();
        let mut holes = RangeTree::new();
        // The context's region (never freed), with the holes a fresh process shows.
        let base = VA_TOP + 400 * MIB;
        let context_holes = [(VA_TOP + 414 * MIB, VA_TOP + 416 * MIB), (VA_TOP + 488 * MIB, VA_TOP + 512 * MIB)];
        for (s, e) in context_holes {
            holes.insert(s, e, base);
        }
        regions.insert(base, Region { end: VA_TOP + 512 * MIB, live: 1 << 30, holes: context_holes.iter().map(|h| h.0).collect() });
        let mut free = RangeTree::new();
        free.insert(VA_BOTTOM, VA_TOP, 0);
        AddressSpace { free, holes, regions, owner: FxHashMap::default(), reserve_next: RESERVE_BASE }
    }

    /// `cudaMalloc(size)`'s address; `None` when the modelled address space has no room (a
    /// replay asking for more than it holds live is an OOM, never an overlap).
    pub fn malloc(&mut self, size: u64) -> Option<u64> {
        let need = size.div_ceil(VA_PAGE).max(1).saturating_mul(VA_PAGE);
        // 2. The lowest hole that fits.
        if let Some((s, e, base)) = self.holes.lowest_fit(need) {
            let r = self.regions.get_mut(&base).expect("region");
            let slot = r.holes.iter().position(|&h| h == s).expect("hole of its region");
            if s + need < e {
                // The hole's tail keeps its place among the holes: shrunk in place.
                self.holes.reshape(s, s + need, e);
                r.holes[slot] = s + need;
            } else {
                self.holes.remove(s);
                r.holes.swap_remove(slot);
            }
            r.live += 1;
            self.owner.insert(s, base);
            return Some(s);
        }
        // 3. A new region, top-down: the highest free range at least `need + 32 MiB` long.
        let (s, e, _) = self.free.highest_fit(need.checked_add(VA_ALIGN)?)?;
        let addr = (e - need) / VA_ALIGN * VA_ALIGN;
        if s < addr {
            self.free.reshape(s, s, addr);
        } else {
            self.free.remove(s);
        }
        let mut holes = Vec::new();
        if addr + need < e {
            self.holes.insert(addr + need, e, addr);
            holes.push(addr + need);
        }
        self.regions.insert(addr, Region { end: e, live: 1, holes });
        self.owner.insert(addr, addr);
        Some(addr)
    }

    /// `cudaFree(addr)`. Addresses the model did not hand out (recorded ones) are ignored.
    pub fn free(&mut self, addr: u64) {
        let Some(base) = self.owner.remove(&addr) else { return };
        let r = self.regions.get_mut(&base).expect("region");
        r.live -= 1;
        if r.live > 0 {
            return;
        }
        let r = self.regions.remove(&base).expect("region");
        for h in r.holes {
            self.holes.remove(h);
        }
        // Merged with the free neighbours, in place where one is kept.
        let below = self.free.before(base).filter(|&(_, e, _)| e == base).map(|(s, _, _)| s);
        let above = self.free.get(r.end).map(|(e, _)| e);
        match (below, above) {
            (Some(s), Some(e)) => {
                self.free.remove(r.end);
                self.free.reshape(s, s, e);
            }
            (Some(s), None) => {
                self.free.reshape(s, s, r.end);
            }
            (None, Some(e)) => {
                self.free.reshape(r.end, base, e);
            }
            (None, None) => self.free.insert(base, r.end, 0),
        }
    }

    /// `cuMemAddressReserve(size)`: upwards from [`RESERVE_BASE`], 32 MiB aligned.
    pub fn reserve(&mut self, size: u64) -> u64 {
        let addr = self.reserve_next;
        self.reserve_next = (addr + size).div_ceil(VA_ALIGN) * VA_ALIGN;
        addr
    }
}

#[derive(Debug)]
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
    /// The driver's address space, for allocations with no recorded address.
    pub va: AddressSpace,
    pub num_malloc: u64,
    pub num_free: u64,
    /// Index of the event being replayed (stamped on logged device events).
    pub event: usize,
    /// Device events made, when the engine asked for them.
    pub log: Option<Vec<DeviceEvent>>,
    /// Addresses placed on a helper thread ([`DeviceMemory::defer`]).
    deferred: Option<Box<super::deferred::Deferred>>,
}

impl DeviceMemory {
    pub fn new(capacity: Option<u64>) -> Self {
        DeviceMemory {
            capacity: capacity.unwrap_or(u64::MAX),
            used: 0,
            hints: Vec::new(),
            request_hint: None,
            va: AddressSpace::new(),
            num_malloc: 0,
            num_free: 0,
            event: 0,
            log: None,
            deferred: None,
        }
    }

    /// From now on `malloc` returns tokens, unique stand-ins for addresses, and the driver's
    /// placement runs on a helper thread (`device::deferred`): for a policy whose decisions
    /// never read the addresses it is given. False when no thread could be started.
    pub(crate) fn defer(&mut self) -> bool {
        debug_assert!(self.hints.is_empty() && self.log.is_none(), "validate and device events need addresses in line");
        self.deferred = super::deferred::Deferred::start(AddressSpace::new()).map(Box::new);
        self.deferred.is_some()
    }

    /// Whether addresses are deferred ([`DeviceMemory::defer`]).
    pub(crate) fn is_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// The end of a deferred replay: the address the model gave each live token, or `None`
    /// when the replay must run again with addresses in line (the address space refused a
    /// request: the sequential replay would have seen an OOM there).
    pub(crate) fn settle(&mut self) -> Option<rustc_hash::FxHashMap<u64, u64>> {
        self.deferred.take()?.settle()
    }

    #[cold]
    fn not_deferred(&mut self) {
        if let Some(d) = self.deferred.as_mut() {
            d.unsupported();
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
        let addr = match self.deferred.as_mut() {
            Some(d) => d.malloc(size),
            None => self.pick_address(size)?,
        };
        self.used += size;
        self.num_malloc += 1;
        self.record(Action::SegmentAlloc, addr, size);
        Some(addr)
    }

    fn pick_address(&mut self, size: u64) -> Option<u64> {
        if let Some(pos) = self.hints.iter().position(|&(_, s)| s == size) {
            let (addr, _) = self.hints.remove(pos);
            return Some(addr);
        }
        self.va.malloc(size)
    }

    /// `malloc` at a given address (validate: a region placed where the trace shows it).
    pub fn malloc_at(&mut self, addr: u64, size: u64) -> Option<u64> {
        self.not_deferred();
        if !self.fits(size) {
            return None;
        }
        self.used += size;
        self.num_malloc += 1;
        self.record(Action::SegmentAlloc, addr, size);
        Some(addr)
    }

    /// A segment that existed before the recorded history began (a seed): its bytes count as
    /// used and its range is taken, so that freeing it later balances (before, `free` of a
    /// seeded segment underflowed `used`: found by the arrow fuzz target).
    pub fn adopt(&mut self, addr: u64, size: u64) {
        let _ = addr; // recorded addresses are not in the modelled address space
        self.used = self.used.saturating_add(size);
    }

    /// Reserves a virtual range (expandable segments: no physical memory, no capacity).
    pub fn reserve_virtual(&mut self, size: u64) -> u64 {
        self.not_deferred();
        self.va.reserve(size)
    }

    /// Maps `size` bytes of physical memory at `addr` (`cuMemMap`); `false` over capacity.
    pub fn map(&mut self, addr: u64, size: u64) -> bool {
        self.not_deferred();
        if !self.fits(size) {
            return false;
        }
        self.used += size;
        self.num_malloc += 1;
        self.record(Action::SegmentMap, addr, size);
        true
    }

    pub fn unmap(&mut self, addr: u64, size: u64) {
        self.not_deferred();
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
        match self.deferred.as_mut() {
            Some(d) => d.free(addr),
            None => self.va.free(addr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = VA_TOP;

    /// Runs `cudaMalloc`s (MiB) and frees (index of an earlier malloc, as `-(i + 1)`) and
    /// returns each malloc's address relative to the model's top, in MiB.
    fn run(ops: &[i64]) -> Vec<i64> {
        let mut va = AddressSpace::new();
        let mut addrs = Vec::new();
        for &op in ops {
            if op > 0 {
                addrs.push(va.malloc(op as u64 * MIB).unwrap());
            } else {
                va.free(addrs[(-op - 1) as usize]);
            }
        }
        addrs.iter().map(|&a| (a as i64 - T as i64) / MIB as i64).collect()
    }

    // Expected layouts: the real driver's (tests/data/va-h200-580.159.txt, probes of
    // the same name), relative to the top of the first region the probe carved.

    #[test]
    fn p01_20_mib_allocations_land_32_mib_apart_after_the_context_hole() {
        // The first fits the context's 24 MiB hole; then regions top-down, 32 MiB apart.
        assert_eq!(run(&[20, 20, 20, 20]), vec![488, -32, -64, -96]);
    }

    #[test]
    fn p06_tails_of_40_mib_regions_take_20_mib_lowest_first() {
        let got = run(&[40, 40, 40, 40, 20, 20, 20, 20, 20, 20, 2, 2]);
        assert_eq!(got, vec![-64, -128, -192, -256, -216, -152, -88, -24, 488, -288, -268, -266]);
    }

    #[test]
    fn p05_a_freed_slot_between_live_regions_is_not_reused() {
        // Eight 20 MiB, free the 3rd, 5th and 7th: the next 20 MiB go below the last region.
        let mut ops = vec![20; 8];
        ops.extend([-3, -5, -7, 20, 20]);
        let got = run(&ops);
        assert_eq!(&got[..8], &[488, -32, -64, -96, -128, -160, -192, -224]);
        assert_eq!(&got[8..], &[-256, -288]);
    }

    #[test]
    fn p10_freeing_every_region_returns_the_range_top_down() {
        // Ten 20 MiB (one in the context hole), all freed, then 40 MiB ones reuse the range from
        // its top (the first region's top) down, 32 MiB aligned; 20 MiB then fill their tails.
        let mut ops = vec![20; 10];
        ops.extend((1..=10).map(|i| -i));
        ops.extend([40, 40, 20]);
        let got = run(&ops);
        assert_eq!(&got[10..], &[-64, -128, -88]);
    }

    #[test]
    fn p12_a_freed_80_mib_region_is_reused_while_it_holds_size_plus_32_mib() {
        // 80 MiB regions are 96 MiB apart; free the 2nd and 4th; 20 MiB go to the context hole,
        // then the 2nd's range twice (64 MiB left, then 32 MiB: too small), then the 4th's.
        let mut ops = vec![80; 6];
        ops.extend([-2, -4, 20, 20, 20, 20]);
        let got = run(&ops);
        assert_eq!(&got[..6], &[-96, -192, -288, -384, -480, -576]);
        assert_eq!(&got[6..], &[488, -128, -160, -320]);
    }

    #[test]
    fn capacity_is_enforced() {
        let mut d = DeviceMemory::new(Some(40 << 20));
        let a = d.malloc(20 << 20).unwrap();
        let b = d.malloc(20 << 20).unwrap();
        assert_ne!(a, b);
        assert_eq!(d.malloc(2 << 20), None);
        d.free(a, 20 << 20);
        assert!(d.malloc(20 << 20).is_some());
    }

    #[test]
    fn hints_are_used_for_matching_sizes() {
        let mut d = DeviceMemory::new(None);
        d.set_hints([(0x1000_0000, 2 << 20)]);
        assert_eq!(d.malloc(20 << 20).map(|a| a >= VA_BOTTOM), Some(true));
        assert_eq!(d.malloc(2 << 20), Some(0x1000_0000));
    }

    #[test]
    fn address_reservations_go_upwards_32_mib_aligned() {
        // gpt2_train__expandable: the large pool's reservation (20 MiB segments for 9/8 of the
        // device's memory) at 0x302000000, the small pool's next at 0x2a56000000.
        let mut va = AddressSpace::new();
        let total = 150_109_880_320u64;
        let large = (total + total / 8).div_ceil(20 * MIB) * 20 * MIB;
        assert_eq!(va.reserve(large), 0x3_0200_0000);
        assert_eq!(va.reserve(1 << 30), 0x2a_5600_0000);
    }
}
