//! The device under a policy: a capacity, and the addresses of the memory it hands out
//! (`cudaMalloc`, `cuMemMap`, a BFC region). In `validate`, addresses come from the recorded run
//! so that best-fit ties break as they did on the GPU; otherwise from [`AddressSpace`], a model
//! of the CUDA driver's virtual address placement measured on an H200
//! (docs/driver-address-space.md).

use rustc_hash::FxHashMap;

use super::range_tree::RangeTree;
use super::DeviceEvent;
use crate::max_tree::MaxTree;
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
/// End of the CUDA context's region in the model (rule 5's holes are below it).
const CONTEXT_END: u64 = VA_TOP + 512 * MIB;
/// The driver's local memory in a fresh context: 1 KiB of stack x 132 SMs x 2,048 threads +
/// 150 MiB, the first region of the address space, at [`VA_TOP`]; its 32 MiB blocks end at +416
/// MiB, so the 2 MiB above it are rule 5's hole at +414 MiB (an H100; docs/driver-address-space.md,
/// "The context's local memory").
const LOCAL_MEMORY_START: u64 = 414 * MIB;

pub use super::deferred::AddressChange;

/// A range carved from the free address space by a `cudaMalloc`: the allocation at its base,
/// and what is left of it above (its *holes*), which later allocations fill.
#[derive(Debug, Clone)]
struct Region {
    /// Order of creation (the context's is 0): the index of the region's largest hole in
    /// [`AddressSpace::newest_holes`].
    seq: u32,
    end: u64,
    /// Allocations living in the region.
    live: u32,
    /// The unused ranges inside the region (start, end), by address: a region carved by a
    /// `cudaMalloc` has at most one, its tail; the context's has two.
    holes: Vec<(u64, u64)>,
}

impl Region {
    fn largest_hole(&self) -> u64 {
        self.holes.iter().map(|&(s, e)| e - s).max().unwrap_or(0)
    }
}

/// The CUDA driver's placement of `cudaMalloc` allocations in the device's virtual address
/// space (driver 580.159, H200; docs/driver-address-space.md has the probes):
///
/// 1. A request takes its size rounded up to 2 MiB.
/// 2. It goes to a hole (an unused tail, or a freed range, of a live region) that fits, at the
///    hole's base: in the newest region that has one, the smallest of that region's holes that
///    fit (the lowest of equal ones).
/// 3. Otherwise a new region is carved from the free address space, top-down: from the highest
///    free range at least `R + 32 MiB` long (`R`: the size rounded up to 32 MiB), at
///    `align_down(range end - R, 32 MiB)`; the region is those `R` bytes, so what is above
///    the allocation becomes its hole (20 MiB allocations land 32 MiB apart, 2 MiB ones fill
///    the 12 MiB tails).
/// 4. A freed allocation's range becomes a hole of its region, merged with the holes beside
///    it, while anything else lives there; when the region's last allocation is freed, the
///    whole region returns to the free address space, merged with its neighbours. (Until
///    session 20 a freed range waited for its whole region: the H100 probe of `emptycache_lm`'s
///    sequence showed the driver refilling it at once, smallest hole first, and the change
///    also placed the 19 addresses of `gpt2_train__gc06_capped`'s H200 sequence the old rule
///    missed: tests/data/va-h100-580.159.txt, va-h200-580.159.txt.)
///
/// The context's own allocations leave two holes above the first region (2 MiB at +414 MiB and
/// 24 MiB at +488 MiB, in a fresh process); they are modelled too.
///
/// Rule 2 took the lowest hole until session 18: in the model's own space, where regions are
/// carved top-down, the newest region is the lowest, and both rules place every probe alike
/// but one sequence (`gpt2_train__gc06_capped`, whose freed ranges are reused: 171 of its 190
/// addresses with the newest, 168 with the lowest). Regions carved from the ranges the host
/// frees (above the context) told them apart: the driver filled the newest region's tail
/// first, high above the older, lower tails (issue 29's captures of session 18).
///
/// Both searches (the newest region with a hole that fits, the highest free range that fits)
/// are O(log n): the regions' largest holes are in a [`MaxTree`] by creation order, the free
/// ranges in a [`RangeTree`], which knows the longest range under each of its nodes.
#[derive(Debug, Clone)]
pub struct AddressSpace {
    /// Free address space: start -> end.
    free: RangeTree,
    /// Per region, by creation order ([`Region::seq`]): its largest hole's length (0: none, or
    /// no longer a region).
    newest_holes: MaxTree,
    /// The base of the region of each creation order (a freed one's base may hold a newer
    /// region since: [`Region::seq`] tells).
    by_seq: Vec<u64>,
    regions: FxHashMap<u64, Region>,
    /// Allocation address -> the base of its region and its length (2 MiB pages).
    owner: FxHashMap<u64, (u64, u64)>,
    /// Next `cuMemAddressReserve` address.
    reserve_next: u64,
    /// Where the driver's local memory is (`None` once a larger buffer found no room), and its
    /// size.
    local_memory: Option<u64>,
    local_memory_bytes: u64,
}

impl super::deferred::AddressPlacer for AddressSpace {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        AddressSpace::malloc(self, size)
    }
    fn free(&mut self, addr: u64) {
        AddressSpace::free(self, addr)
    }
    fn changed(&mut self, change: AddressChange) {
        match change {
            AddressChange::Host { start, end, freed: true } => self.add_host_free(start, end),
            AddressChange::Host { start, end, freed: false } => self.take_host(start, end),
            AddressChange::LocalMemoryGrows { bytes } => self.grow_local_memory(bytes),
            // The driver's own allocations (module code, library handles) are placed as any
            // `cudaMalloc` (docs/driver-address-space.md, "The driver's own allocations").
            AddressChange::DriverMalloc { bytes } => {
                self.malloc(bytes);
            }
        }
    }
}

impl Default for AddressSpace {
    fn default() -> Self {
        Self::new()
    }
}

impl AddressSpace {
    pub fn new() -> Self {
        let mut free = RangeTree::new();
        free.insert(VA_BOTTOM, VA_TOP, 0);
        let mut va = AddressSpace {
            free,
            newest_holes: MaxTree::default(),
            by_seq: Vec::new(),
            regions: FxHashMap::default(),
            owner: FxHashMap::default(),
            reserve_next: RESERVE_BASE,
            local_memory: Some(VA_TOP),
            local_memory_bytes: LOCAL_MEMORY_START,
        };
        // The context's region (never freed), with the hole a fresh process shows at +488 MiB,
        // and below it the local memory's, with the 2 MiB at +414 MiB.
        va.add_region(VA_TOP + 416 * MIB, CONTEXT_END, 1 << 30, vec![(VA_TOP + 488 * MIB, CONTEXT_END)]);
        va.add_region(VA_TOP, VA_TOP + 416 * MIB, 1, vec![(VA_TOP + LOCAL_MEMORY_START, VA_TOP + 416 * MIB)]);
        va.owner.insert(VA_TOP, (VA_TOP, LOCAL_MEMORY_START));
        va
    }

    /// The driver's local memory became a buffer of `bytes` (a kernel needed more stack per
    /// thread): it frees the old buffer first, then allocates the new one as any `cudaMalloc`
    /// (rules 2 and 4; measured on an H100: the buffer of 4 KiB stacks went below every region,
    /// and the one of 32 KiB stacks at `align_down(top - size, 32 MiB)` of the range the 4 KiB
    /// one had left; research/driver-probes/lmem-h100-580.159.txt). Where nothing else lives in
    /// the old buffer's region, its range returns to the free space; where something does (a 2
    /// MiB segment in the hole above the first buffer), it becomes a hole of that region.
    pub fn set_local_memory(&mut self, bytes: u64) {
        if let Some(old) = self.local_memory.take() {
            self.free(old);
        }
        self.local_memory = self.malloc(bytes);
        self.local_memory_bytes = bytes;
    }

    /// The driver's local memory grew by `bytes` ([`AddressSpace::set_local_memory`]): lazily
    /// loaded kernels needed more per thread (docs/driver-address-space.md, "The driver's own
    /// allocations during the run").
    pub fn grow_local_memory(&mut self, bytes: u64) {
        self.set_local_memory(self.local_memory_bytes + bytes);
    }

    /// Adds a region (the newest) with `live` allocations and these holes.
    fn add_region(&mut self, base: u64, end: u64, live: u32, holes: Vec<(u64, u64)>) {
        let seq = self.by_seq.len();
        if seq >= self.newest_holes.len() {
            // Twice the leaves, the values kept.
            let old: Vec<u64> = (0..self.by_seq.len()).map(|i| self.region_hole(i)).collect();
            self.newest_holes.rebuild((2 * seq).max(64), old.into_iter());
        }
        let r = Region { seq: u32::try_from(seq).expect("fewer than 4 billion regions"), end, live, holes };
        self.newest_holes.set(seq, r.largest_hole());
        self.by_seq.push(base);
        self.regions.insert(base, r);
    }

    /// The largest hole of the region of creation order `seq` (0 once freed).
    fn region_hole(&self, seq: usize) -> u64 {
        self.regions.get(&self.by_seq[seq]).filter(|r| r.seq as usize == seq).map_or(0, Region::largest_hole)
    }

    /// `cudaMalloc(size)`'s address; `None` when the modelled address space has no room (a
    /// replay asking for more than it holds live is an OOM, never an overlap).
    pub fn malloc(&mut self, size: u64) -> Option<u64> {
        let need = size.div_ceil(VA_PAGE).max(1).saturating_mul(VA_PAGE);
        // 2. The newest region's hole that fits.
        if let Some(seq) = self.by_seq.len().checked_sub(1).and_then(|last| self.newest_holes.rightmost_at_least(need, last)) {
            let base = self.by_seq[seq];
            let r = self.regions.get_mut(&base).expect("region");
            // The smallest of the region's holes that fits (the lowest of equal ones).
            let slot = (0..r.holes.len())
                .filter(|&k| r.holes[k].1 - r.holes[k].0 >= need)
                .min_by_key(|&k| r.holes[k].1 - r.holes[k].0)
                .expect("a hole that fits");
            let (s, e) = r.holes[slot];
            if s + need < e {
                r.holes[slot].0 = s + need;
            } else {
                r.holes.remove(slot);
            }
            r.live += 1;
            let largest = r.largest_hole();
            self.newest_holes.set(seq, largest);
            self.owner.insert(s, (base, need));
            return Some(s);
        }
        // 3. A new region, top-down: the highest free range at least `need + 32 MiB` long.
        // The region is the allocation's 32 MiB blocks: it reaches the range's end in the
        // model's own (aligned) ranges; in a range the host freed, what lies above stays free
        // (measured: a 16 MiB segment below a host gap's unaligned end mapped 32 MiB, and the
        // rest of the gap stayed free; issue 29).
        let (s, e, addr, end) = self.highest_region_fit(need)?;
        if s < addr {
            self.free.reshape(s, s, addr);
        } else {
            self.free.remove(s);
        }
        if end < e {
            self.free.insert(end, e, 0);
        }
        let holes = if addr + need < end { vec![(addr + need, end)] } else { Vec::new() };
        self.add_region(addr, end, 1, holes);
        self.owner.insert(addr, (addr, need));
        Some(addr)
    }

    /// Rule 3's range for a new region of `need` bytes: `(s, e, addr, end)`, the region
    /// `[addr, end)` carved from the free range `[s, e)`. The driver asks the kernel's top-down
    /// `mmap` search for the region's whole 32 MiB blocks plus 32 MiB to align them (`R + 32
    /// MiB`, `R = align_up(need, 32 MiB)`) and keeps the highest aligned `R` inside what the
    /// kernel gave, at `align_down(e - R, 32 MiB)` (docs/driver-address-space.md). In the
    /// model's own ranges, which start and end 32 MiB-aligned, that is rule 3 as written there.
    /// A range the host process freed ([`AddressSpace::add_host_free`]) starts and ends
    /// anywhere: the kernel's range must fit in it at a 2 MiB boundary (the kernel's THP
    /// alignment of large anonymous mappings), else the next range below is tried. Fitted on
    /// the host ranges of issue 29's captures of session 18: of the regions the driver started
    /// inside a host range, 146 of 146 at this address in the five fitted captures (144 with
    /// `align_down(e - need)`), 45 of 45 in five held-out ones (41).
    fn highest_region_fit(&mut self, need: u64) -> Option<(u64, u64, u64, u64)> {
        let region = need.checked_next_multiple_of(VA_ALIGN)?;
        let len = region.checked_add(VA_ALIGN)?;
        let mut skipped: Vec<(u64, u64, u64)> = Vec::new();
        let found = loop {
            let Some((s, e, tag)) = self.free.highest_fit(len) else { break None };
            if (e - len) / VA_PAGE * VA_PAGE >= s {
                let addr = (e - region) / VA_ALIGN * VA_ALIGN;
                break Some((s, e, addr, addr + region));
            }
            // Only a host range (unaligned) gets here: aside until the search is done.
            self.free.remove(s);
            skipped.push((s, e, tag));
        };
        for (s, e, tag) in skipped {
            self.free.insert(s, e, tag);
        }
        found
    }

    /// The host process freed `[start, end)` (in this model's coordinates): from now on the
    /// driver may put new regions there, as it put them in the CPU copies of a model's weights
    /// freed by `.cuda()` (docs/driver-address-space.md, "The host process's memory"). Only the
    /// part above the context's region is taken (below it the model already holds every range
    /// free), and only where it overlaps no free range or region the model has.
    pub fn add_host_free(&mut self, start: u64, end: u64) {
        let start = start.max(CONTEXT_END);
        if end <= start {
            return;
        }
        let overlaps_free = self.free.before(end).is_some_and(|(_, e, _)| e > start);
        let overlaps_region = self.regions.iter().any(|(&b, r)| b < end && r.end > start);
        if overlaps_free || overlaps_region {
            return;
        }
        self.insert_free(start, end);
    }

    /// The host process mapped `[start, end)` (in this model's coordinates) again: the driver
    /// can no longer put regions there. Only the model's free ranges above its context are
    /// changed (a region the model placed there stays: the run's own segment, or the model's
    /// miss).
    pub fn take_host(&mut self, start: u64, end: u64) {
        let start = start.max(CONTEXT_END);
        let mut below = end;
        while below > start {
            let Some((s, e, tag)) = self.free.before(below) else { break };
            if e <= start {
                break;
            }
            // [s, e) overlaps: keep what is outside [start, end).
            self.free.remove(s);
            if s < start {
                self.free.insert(s, start, tag);
            }
            if end < e {
                self.free.insert(end, e, tag);
            }
            below = s;
        }
    }

    /// Returns `[start, end)` to the free address space, merged with its free neighbours (in
    /// place where one is kept).
    fn insert_free(&mut self, start: u64, end: u64) {
        let below = self.free.before(start).filter(|&(_, e, _)| e == start).map(|(s, _, _)| s);
        let above = self.free.get(end).map(|(e, _)| e);
        match (below, above) {
            (Some(s), Some(e)) => {
                self.free.remove(end);
                self.free.reshape(s, s, e);
            }
            (Some(s), None) => {
                self.free.reshape(s, s, end);
            }
            (None, Some(e)) => {
                self.free.reshape(end, start, e);
            }
            (None, None) => self.free.insert(start, end, 0),
        }
    }

    /// `cudaFree(addr)`. Addresses the model did not hand out (recorded ones) are ignored.
    pub fn free(&mut self, addr: u64) {
        let Some((base, need)) = self.owner.remove(&addr) else { return };
        let r = self.regions.get_mut(&base).expect("region");
        r.live -= 1;
        if r.live > 0 {
            // The range becomes a hole of its region, merged with the holes beside it.
            let (mut s, mut e) = (addr, addr + need);
            let at = r.holes.partition_point(|&(hs, _)| hs < s);
            let mut from = at;
            if at > 0 && r.holes[at - 1].1 == s {
                from = at - 1;
                s = r.holes[at - 1].0;
            }
            let mut to = at;
            if to < r.holes.len() && r.holes[to].0 == e {
                e = r.holes[to].1;
                to += 1;
            }
            r.holes.splice(from..to, std::iter::once((s, e)));
            let (seq, largest) = (r.seq as usize, r.largest_hole());
            self.newest_holes.set(seq, largest);
            return;
        }
        let r = self.regions.remove(&base).expect("region");
        self.newest_holes.set(r.seq as usize, 0);
        self.insert_free(base, r.end);
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

    /// A change of the address space the trace does not record ([`AddressChange`]), in the
    /// model's coordinates.
    pub fn address_changed(&mut self, change: AddressChange) {
        use super::deferred::AddressPlacer;
        match self.deferred.as_mut() {
            Some(d) => d.changed(change),
            None => self.va.changed(change),
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
    fn a_range_the_host_freed_above_the_context_takes_the_regions_that_fit_there() {
        // A host gap of 100 MiB above the context's region, its start and end not aligned.
        let (s, e) = (T + 1029 * MIB, T + 1129 * MIB);
        let mut va = AddressSpace::new();
        va.add_host_free(s, e);
        // The first 20 MiB still fill the context's hole (rule 2 before rule 3); the next go to
        // align_down(e - 20 MiB, 32 MiB) = T + 1088 MiB, 32 MiB of the gap below it.
        assert_eq!(run_on(&mut va, &[20, 20]), vec![488, 1088]);
        // The region is one 32 MiB block (1088..1120), not up to the gap's end: 14 MiB do not
        // fit its 12 MiB tail, and the rest of the gap, 1029..1088 and 1120..1129, has no room
        // for 32 + 32 MiB: below the context.
        assert_eq!(run_on(&mut va, &[14]), vec![-32]);
        // 60 MiB take two blocks: the kernel's 96 MiB fit at 1032 (2 MiB-aligned, above 1029),
        // the region at align_down(1129 - 64) = 1056.
        let mut va = AddressSpace::new();
        va.add_host_free(s, e);
        assert_eq!(va.malloc(60 * MIB), Some(T + 1056 * MIB));
        // 70 MiB: three blocks and 32 MiB, 128 MiB, do not fit 100 MiB: below the context.
        let mut va = AddressSpace::new();
        va.add_host_free(s, e);
        assert_eq!(va.malloc(70 * MIB), Some(T - 96 * MIB));
        // The kernel's 2 MiB alignment: a gap of 64.5 MiB (1026.5..1091) holds 64 MiB only from
        // 1027, not at a 2 MiB boundary: a 20 MiB request goes below; from 1026 it fits.
        let mut va = AddressSpace::new();
        va.add_host_free(T + 1026 * MIB + MIB / 2, T + 1091 * MIB);
        assert_eq!(run_on(&mut va, &[20, 20]), vec![488, -32]);
        let mut va = AddressSpace::new();
        va.add_host_free(T + 1026 * MIB, T + 1091 * MIB);
        assert_eq!(run_on(&mut va, &[20, 20]), vec![488, 1056]);
        // Freed again, the region rejoins the gap whole: the same place next time.
        let mut va = AddressSpace::new();
        va.add_host_free(s, e);
        va.malloc(20 * MIB);
        let a = va.malloc(20 * MIB).unwrap();
        va.free(a);
        assert_eq!(va.malloc(20 * MIB), Some(a));
    }

    #[test]
    fn host_ranges_below_the_context_or_over_model_ranges_are_ignored() {
        let mut va = AddressSpace::new();
        // Below the context's end: clipped to it (here nothing is left).
        va.add_host_free(T + 400 * MIB, T + 510 * MIB);
        assert_eq!(run_on(&mut va, &[20, 20]), vec![488, -32]);
        let mut va = AddressSpace::new();
        va.add_host_free(T + 600 * MIB, T + 700 * MIB);
        // Overlapping the range just added: ignored, not double-counted.
        va.add_host_free(T + 650 * MIB, T + 800 * MIB);
        // Adjacent to it: merged, one range of 600..900 MiB, where 250 MiB fit only whole:
        // align_down(900 - 250) = 640, 40 MiB above its start.
        va.add_host_free(T + 700 * MIB, T + 900 * MIB);
        assert_eq!(run_on(&mut va, &[250]), vec![640]);
    }

    #[test]
    fn a_range_the_host_mapped_again_is_taken_from_the_free_space() {
        let mut va = AddressSpace::new();
        va.add_host_free(T + 1000 * MIB, T + 1200 * MIB);
        // The top 40 MiB mapped again: a 20 MiB region goes below them.
        va.take_host(T + 1160 * MIB, T + 1300 * MIB);
        assert_eq!(run_on(&mut va, &[20, 20]), vec![488, 1120]);
        // Taken across several free ranges and the context: only the free parts above the
        // context go.
        let mut va = AddressSpace::new();
        va.add_host_free(T + 600 * MIB, T + 700 * MIB);
        va.add_host_free(T + 800 * MIB, T + 900 * MIB);
        va.take_host(T, T + 820 * MIB);
        assert_eq!(run_on(&mut va, &[20, 2, 16]), vec![488, 414, 864]);
    }

    fn run_on(va: &mut AddressSpace, ops: &[i64]) -> Vec<i64> {
        ops.iter().map(|&op| (va.malloc(op as u64 * MIB).unwrap() as i64 - T as i64) / MIB as i64).collect()
    }

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
    fn a_range_freed_inside_a_live_region_is_reused_smallest_hole_first() {
        // emptycache_lm's pattern (tests/data/va-h100-580.159.txt): a 144 MiB region whose
        // 16 MiB tail holds seven 2 MiB allocations; the 144 MiB one, the first 2 MiB and the
        // last two are freed, four 2 MiB stay. The freed ranges are holes of the region: its
        // newest 2 MiB go to the smaller one (the last two slots and the unused 2 MiB above
        // them: 6 MiB) from its base, then to the 146 MiB one from its base.
        let mut ops = vec![144, 2, 2, 2, 2, 2, 2, 2];
        ops.extend([-1, -2, -7, -8]);
        ops.extend([2, 2, 2, 2, 32]);
        let got = run(&ops);
        let (base, tail) = (got[0], got[0] + 144);
        assert_eq!(&got[1..8], &[tail, tail + 2, tail + 4, tail + 6, tail + 8, tail + 10, tail + 12]);
        assert_eq!(&got[8..], &[tail + 10, tail + 12, tail + 14, base, base + 2]);
    }

    #[test]
    fn the_local_memory_grows_as_the_h100_probe_shows() {
        // research/driver-probes/lmem-h100-580.159.txt: MiB relative to the first cudaMalloc
        // (20 MiB, in the context's hole), with a 64 MiB one after it; a kernel needing 4 KiB
        // of stack per thread, then one needing 32 KiB, between the others.
        let mut va = AddressSpace::new();
        let mib = |x: u64| x * MIB;
        let first = va.malloc(mib(20)).unwrap() as i64;
        let rel = |va: &mut AddressSpace, sizes: &[u64]| -> Vec<i64> {
            sizes.iter().map(|&m| (va.malloc(mib(m)).unwrap() as i64 - first) / MIB as i64).collect()
        };
        assert_eq!(rel(&mut va, &[64, 20, 20, 2, 2]), vec![-552, -584, -616, -596, -594]);
        let stack = |kib: u64| kib * 1024 * 132 * 2048 + (150 << 20);
        va.set_local_memory(stack(4));
        assert_eq!((va.local_memory.unwrap() as i64 - first) / MIB as i64, -1832);
        // The 416 MiB of the first buffer went back to the free space: carved top-down.
        assert_eq!(rel(&mut va, &[20, 20, 2, 14, 18]), vec![-104, -136, -116, -168, -154]);
        va.set_local_memory(stack(32));
        assert_eq!((va.local_memory.unwrap() as i64 - first) / MIB as i64, -9224);
        assert_eq!(rel(&mut va, &[20, 20, 2, 14, 18, 64]), vec![-200, -232, -212, -264, -250, -328]);
    }

    #[test]
    fn a_local_memory_freed_under_a_live_segment_is_filled_from_its_base() {
        // gpt2_small_train and vit_b32_train (docs/driver-address-space.md): a 2 MiB segment
        // lives in the hole above the first buffer when the buffer is replaced; its range is then
        // a hole of that region, filled upwards from VA_TOP.
        let got = run(&[64, 2]);
        assert_eq!(got, vec![-64, 414]);
        let mut va = AddressSpace::new();
        run_on(&mut va, &[64, 2]);
        va.set_local_memory(4 * 1024 * 132 * 2048 + (150 << 20));
        assert_eq!(run_on(&mut va, &[20, 26, 32]), vec![0, 20, 46]);
    }

    #[test]
    fn the_local_memory_grown_by_90_mib_leaves_its_range_to_the_next_segments() {
        // traces/h100/gpt2_small_train__default: first segment 64 MiB, a 2 MiB one in the hole
        // above the local memory; the capture noted +90 MiB (the local memory's growth) at the
        // first embedding, and the next two segments (20 and 26 MiB) went to +64 and +84 MiB
        // from the first segment: the old buffer's range, from its base.
        let mut va = AddressSpace::new();
        let first = run_on(&mut va, &[64, 2])[0];
        va.grow_local_memory(90 * MIB);
        let got: Vec<i64> = run_on(&mut va, &[20, 26]).iter().map(|a| a - first).collect();
        assert_eq!(got, vec![64, 84]);
    }

    /// Replays every `### raw__*` sequence of a probe log (`a ID SIZE ADDRESS ...`, `f ID ...`:
    /// `cudaMalloc`s and `cudaFree`s made in a fresh process on the GPU) in the model: the
    /// sequences whose addresses relative to the first differ, with how many of their
    /// allocations do.
    fn probe_misses(log: &str) -> Vec<(String, usize, usize)> {
        let path = format!("{}/../../tests/data/{log}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut misses = Vec::new();
        for section in text.split("### ").skip(1).filter(|s| s.starts_with("raw__")) {
            let mut va = AddressSpace::new();
            let (mut ids, mut first, mut n, mut wrong) = (FxHashMap::default(), None, 0, 0);
            for line in section.lines().skip(1) {
                match line.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["a", id, size, addr, ..] => {
                        let (Ok(size), Ok(real)) = (size.parse::<u64>(), addr.parse::<i128>()) else { continue };
                        let model = i128::from(va.malloc(size).expect("room"));
                        ids.insert(id.to_string(), model as u64);
                        let (r0, m0) = *first.get_or_insert((real, model));
                        n += 1;
                        wrong += usize::from(real - r0 != model - m0);
                    }
                    ["f", id, ..] => {
                        if let Some(a) = ids.remove(*id) {
                            va.free(a);
                        }
                    }
                    _ => {}
                }
            }
            assert!(n > 0, "{log}: a sequence without allocations");
            if wrong > 0 {
                misses.push((section.lines().next().unwrap_or_default().to_string(), wrong, n));
            }
        }
        assert!(!misses.is_empty() || text.contains("### raw__"), "{log}: no sequence");
        misses
    }

    #[test]
    fn every_address_the_driver_gave_in_the_probes_is_placed_alike() {
        // The H200's probes (2026-12-01: fifteen synthetic patterns and sixteen captures'
        // sequences, 2,454 allocations) and the H100's (2026-12-06: six captures' sequences,
        // 600), both driver 580.159.04.
        assert_eq!(probe_misses("va-h200-580.159.txt"), vec![]);
        assert_eq!(probe_misses("va-h100-580.159.txt"), vec![]);
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
