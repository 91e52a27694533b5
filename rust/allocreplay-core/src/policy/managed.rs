//! `managed`: every allocation a `cudaMallocManaged` (unified memory), on a device that may be
//! oversubscribed. Where the working set outgrows `--capacity` (default: the device's memory),
//! the replay does not fail: the least recently used pages are evicted to the host and
//! migrate back when touched, and the replay counts those page migrations, so users see what
//! unified memory would cost on a run that does not fit.
//!
//! Model (docs/cuda-policies.md):
//! - Layout as `cudaMalloc` (`cuda-malloc`): 512-byte rounding, small allocations share 2 MiB
//!   pages, large ones get their own; 2 MiB is also the unit the UVM driver migrates (its
//!   "VA block").
//! - The trace has no kernel accesses, only allocation events. An allocation is taken as
//!   touched when it is created (the producing kernel writes it; first touch populates pages on
//!   the GPU without a migration) and, with `touch_on_free=true` (the default), just before it
//!   is freed (its last use is usually the kernel right before the free).
//! - Touching makes all the allocation's pages resident: evicted ones migrate back
//!   (host -> device), and room is made by evicting the least recently touched pages
//!   (device -> host). Each page moved counts once in `pages_migrated`.
//! - Recency is kept per unit (a shared small page, or a large allocation) in an intrusive
//!   doubly linked list: O(1) per touch plus the units evicted; a unit may be partly resident.
//! - An allocation larger than the capacity cannot be resident at once: its overflow pages
//!   count as migrated at each touch. Under a capacity below one page no page is resident:
//!   every page streams.
//! - `reserved` is the GPU memory holding managed pages (at most the capacity); `allocated`
//!   the 512-byte rounded bytes of live allocations.

use super::cuda_malloc::{PageLayout, Placed, PAGE};
use super::entry::{PolicyEntry, PolicyKind};
use super::options::{self, OptDefault, OptionSpec, OptionType, Syntax};
use super::spec::PolicyContext;
use super::{FromPolicy, OutOfMemory, Placement, Policy, Request, SegmentInfo};
use crate::device::DeviceMemory;
use crate::device::Stats;
use crate::error::Result;

const NONE: u32 = u32::MAX;

/// The registry's entry: `managed[:touch_on_free=BOOL]`.
pub static ENTRY: PolicyEntry = PolicyEntry {
    name: "managed",
    summary: "cudaMallocManaged with oversubscription: pages migrate to the host instead of an OOM",
    models: "CUDA unified memory: 2 MiB pages, least recently used evicted on oversubscription",
    syntax: Syntax::KeyValue,
    options: &[OptionSpec::new(
        "touch_on_free",
        OptionType::Bool,
        OptDefault::Value("true"),
        "count a freed allocation's pages as touched (the program used the buffer until its free)",
    )],
    kind: PolicyKind::Online,
    framework: None,
    env: None,
    bool_words: ("true", "false"),
    recorded: false,
    search_excludes: &[],
    max_capacity: crate::device::memory::MAX_DEVICE_MEMORY,
    max_capacity_why: "what its modelled CUDA address space holds",
    peak_band: None,
};

pub fn from_spec<B: FromPolicy>(options: &str, ctx: &PolicyContext) -> Result<B> {
    const P: &str = "managed";
    let mut touch_on_free = true;
    for (k, v) in super::entry::items(&ENTRY, options)? {
        if k == "touch_on_free" {
            touch_on_free = options::parse_bool(P, k, v)?;
        }
    }
    let capacity = ctx.capacity.or(ctx.total_memory());
    let name = if options.trim().is_empty() { P.to_string() } else { format!("{P}:{}", options.trim()) };
    Ok(B::from_policy(Managed::new(name, capacity, touch_on_free)))
}

/// A unit of residency: one shared small page, or one large allocation's pages.
#[derive(Debug, Clone, Copy)]
struct Unit {
    pages: u64,
    resident: u64,
    /// Pages whose data lives on the host (evicted, or overflow of an oversized allocation).
    evicted: u64,
    prev: u32,
    next: u32,
    linked: bool,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    placed: Placed,
    size: u64,
    unit: u32,
}

#[derive(Debug)]
pub struct Managed {
    name: String,
    capacity: Option<u64>,
    touch_on_free: bool,
    stats: Stats,
    /// Addresses only: managed memory is not capped by the device model, residency is.
    va: DeviceMemory,
    layout: PageLayout,
    units: Vec<Unit>,
    free_units: Vec<u32>,
    /// Unit of each small page (by page index).
    page_unit: Vec<u32>,
    /// Most recently touched unit, and the least.
    head: u32,
    tail: u32,
    resident_pages: u64,
    slots: super::id_map::IdMap<Slot>,
}

impl Managed {
    pub fn new(name: String, capacity: Option<u64>, touch_on_free: bool) -> Self {
        Managed {
            name,
            capacity,
            touch_on_free,
            stats: Stats::default(),
            va: DeviceMemory::new(None),
            layout: PageLayout::default(),
            units: Vec::new(),
            free_units: Vec::new(),
            page_unit: Vec::new(),
            head: NONE,
            tail: NONE,
            resident_pages: 0,
            slots: Default::default(),
        }
    }

    /// Pages the capacity holds. Below one page (2 MiB) none: every page of every allocation
    /// streams through the device at each touch, as an allocation larger than the capacity
    /// does, and nothing is resident (before, one page stayed resident: reserved > capacity).
    fn cap_pages(&self, device: &DeviceMemory) -> u64 {
        let cap = self.capacity.unwrap_or(u64::MAX).min(device.capacity);
        cap / PAGE
    }

    fn new_unit(&mut self, pages: u64) -> u32 {
        let u = Unit { pages, resident: 0, evicted: 0, prev: NONE, next: NONE, linked: false };
        match self.free_units.pop() {
            Some(i) => {
                self.units[i as usize] = u;
                i
            }
            None => {
                self.units.push(u);
                (self.units.len() - 1) as u32
            }
        }
    }

    fn unlink(&mut self, u: u32) {
        let Unit { prev, next, linked, .. } = self.units[u as usize];
        if !linked {
            return;
        }
        if prev == NONE {
            self.head = next;
        } else {
            self.units[prev as usize].next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.units[next as usize].prev = prev;
        }
        let x = &mut self.units[u as usize];
        (x.prev, x.next, x.linked) = (NONE, NONE, false);
    }

    fn push_front(&mut self, u: u32) {
        let old = self.head;
        {
            let x = &mut self.units[u as usize];
            (x.prev, x.next, x.linked) = (NONE, old, true);
        }
        if old == NONE {
            self.tail = u;
        } else {
            self.units[old as usize].prev = u;
        }
        self.head = u;
    }

    fn migrate(&mut self, pages: u64) {
        self.stats.pages_migrated += pages;
        self.stats.bytes_migrated += pages * PAGE;
    }

    fn set_resident(&mut self, pages: u64) {
        if pages > self.resident_pages {
            self.stats.add_reserved((pages - self.resident_pages) * PAGE);
        } else {
            self.stats.sub_reserved((self.resident_pages - pages) * PAGE);
        }
        self.resident_pages = pages;
    }

    /// Makes `u` the most recent unit and all of its pages resident (as far as they fit),
    /// evicting the least recently used pages of other units.
    fn touch(&mut self, u: u32, device: &DeviceMemory) {
        self.unlink(u);
        self.push_front(u);
        let cap = self.cap_pages(device);
        let unit = self.units[u as usize];
        let need = unit.pages - unit.resident;
        if need == 0 {
            return;
        }
        let mut resident = self.resident_pages;
        // Evict from the LRU end (never `u`, which is at the head).
        while resident + need > cap && self.tail != u && self.tail != NONE {
            let t = self.tail;
            let over = resident + need - cap;
            let tu = &mut self.units[t as usize];
            let k = over.min(tu.resident);
            tu.resident -= k;
            tu.evicted += k;
            resident -= k;
            let empty = tu.resident == 0;
            self.migrate(k);
            if empty {
                self.unlink(t);
            }
        }
        let take = need.min(cap.saturating_sub(resident));
        let uu = &mut self.units[u as usize];
        let back = uu.evicted.min(take);
        uu.evicted -= back;
        uu.resident += take;
        let overflow = need - take;
        // Pages that cannot be resident stream through the device at each touch.
        uu.evicted = uu.pages - uu.resident;
        resident += take;
        self.migrate(back + overflow);
        self.set_resident(resident);
    }

    fn release_unit(&mut self, u: u32) {
        self.unlink(u);
        let r = self.units[u as usize].resident;
        let resident = self.resident_pages - r;
        self.set_resident(resident);
        self.free_units.push(u);
    }

    fn release(&mut self, id: u64, device: &mut DeviceMemory) {
        let Some(s) = self.slots.remove(id) else { return };
        if self.touch_on_free {
            self.touch(s.unit, device);
        }
        self.stats.sub_allocated(PageLayout::rounded(s.size), s.size);
        self.stats.num_device_free += 1;
        if self.layout.free(s.placed, s.size, &mut self.va) {
            self.release_unit(s.unit);
        }
    }
}

impl Policy for Managed {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn malloc(&mut self, req: &Request, device: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
        if let Some(oom) = super::unservable(req.size, &mut self.stats) {
            return Err(oom);
        }
        if req.size == 0 {
            self.slots.remove(req.id);
            return Ok(Placement { addr: 0, size: 0, segment: 0 });
        }
        // Managed memory is virtual: placement never fails on the device's capacity.
        let Some(placed) = self.layout.alloc(req.size, &mut self.va) else {
            self.stats.num_ooms += 1;
            return Err(OutOfMemory { alloc_size: PageLayout::rounded(req.size) });
        };
        let (unit, placement) = match placed {
            Placed::Large { addr, bytes } => (self.new_unit(bytes / PAGE), Placement { addr, size: bytes, segment: addr }),
            Placed::Small { page, addr, new_page, .. } => {
                if new_page {
                    let u = self.new_unit(1);
                    if self.page_unit.len() <= page as usize {
                        self.page_unit.resize(page as usize + 1, NONE);
                    }
                    self.page_unit[page as usize] = u;
                }
                let segment = self.layout.page_addr(page);
                (self.page_unit[page as usize], Placement { addr, size: PageLayout::rounded(req.size), segment })
            }
        };
        self.stats.num_device_alloc += 1;
        self.stats.add_allocated(PageLayout::rounded(req.size), req.size);
        self.slots.insert(req.id, Slot { placed, size: req.size, unit });
        self.touch(unit, device);
        Ok(placement)
    }

    fn free_requested(&mut self, id: u64, device: &mut DeviceMemory) {
        self.release(id, device);
    }

    fn free_completed(&mut self, id: u64, device: &mut DeviceMemory) {
        self.release(id, device);
    }

    /// `release` takes the allocation out at the request: its completion finds nothing.
    fn free_at_once(&mut self, id: u64, device: &mut DeviceMemory) -> bool {
        self.release(id, device);
        true
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    fn segments(&self) -> Vec<SegmentInfo> {
        // One row for the managed footprint: its resident bytes and live allocations.
        let live = self.slots.len() as u32;
        if live == 0 {
            return Vec::new();
        }
        vec![SegmentInfo {
            addr: 0,
            size: self.stats.reserved,
            stream: 0,
            pool: 0,
            kind: "managed",
            allocated_bytes: self.stats.allocated,
            blocks: live,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{DeviceInfo, TraceMetadata};

    const MIB: u64 = 1 << 20;

    fn req(id: u64, size: u64) -> Request {
        Request { event: id as usize, id, size, stream: 0, pool: 0, recorded_addr: None, recorded_chunk: None }
    }

    fn managed(cap: u64, touch_on_free: bool) -> (Managed, DeviceMemory) {
        (Managed::new("managed".into(), Some(cap), touch_on_free), DeviceMemory::new(None))
    }

    #[test]
    fn fits_in_memory_no_migration() {
        let (mut m, mut d) = managed(16 * MIB, true);
        m.malloc(&req(0, 6 * MIB), &mut d).unwrap();
        m.malloc(&req(1, 10 * MIB), &mut d).unwrap();
        assert_eq!(m.stats.reserved, 16 * MIB);
        m.free_requested(0, &mut d);
        m.free_requested(1, &mut d);
        assert_eq!((m.stats.pages_migrated, m.stats.reserved, m.stats.peak_reserved), (0, 0, 16 * MIB));
        assert_eq!(d.used, 0, "managed memory does not go through the device's cudaMalloc model");
    }

    #[test]
    fn lru_eviction_and_migration_back_worked_by_hand() {
        // Capacity 4 pages. A (2 pages), B (2 pages) resident. C (2 pages) evicts A's 2 pages
        // (least recent): 2 migrations. Freeing A touches it: A comes back (2) and evicts B (2,
        // the LRU now). Freeing C: resident. Freeing B: back 2, nothing to evict (A gone).
        let (mut m, mut d) = managed(4 * PAGE, true);
        m.malloc(&req(0, 2 * PAGE), &mut d).unwrap(); // A
        m.malloc(&req(1, 2 * PAGE), &mut d).unwrap(); // B
        assert_eq!(m.stats.pages_migrated, 0);
        m.malloc(&req(2, 2 * PAGE), &mut d).unwrap(); // C
        assert_eq!(m.stats.pages_migrated, 2);
        assert_eq!(m.stats.reserved, 4 * PAGE);
        m.free_requested(0, &mut d); // touch A: +2 back, +2 B evicted
        assert_eq!(m.stats.pages_migrated, 6);
        assert_eq!(m.stats.reserved, 2 * PAGE, "A freed, C resident");
        m.free_requested(2, &mut d); // C resident: no migration
        assert_eq!(m.stats.pages_migrated, 6);
        m.free_requested(1, &mut d); // B back from the host
        assert_eq!(m.stats.pages_migrated, 8);
        assert_eq!(m.stats.bytes_migrated, 8 * PAGE);
        assert_eq!(m.stats.peak_reserved, 4 * PAGE);
        assert_eq!(m.stats.reserved, 0);
    }

    #[test]
    fn without_touch_on_free_only_creation_evicts() {
        let (mut m, mut d) = managed(4 * PAGE, false);
        for i in 0..3 {
            m.malloc(&req(i, 2 * PAGE), &mut d).unwrap();
        }
        for i in 0..3 {
            m.free_requested(i, &mut d);
        }
        assert_eq!(m.stats.pages_migrated, 2);
    }

    #[test]
    fn partial_eviction_keeps_recency_order() {
        // Capacity 5 pages: A (3) then B (1) then C (2): one page of A goes (A is LRU).
        // D (1): another page of A. Touching B (free) costs nothing: B is resident.
        let (mut m, mut d) = managed(5 * PAGE, true);
        m.malloc(&req(0, 3 * PAGE), &mut d).unwrap();
        m.malloc(&req(1, PAGE + 1), &mut d).unwrap(); // 2 MiB + 1 B: its own 2 pages
        assert_eq!(m.stats.reserved, 5 * PAGE);
        m.malloc(&req(2, PAGE), &mut d).unwrap();
        assert_eq!(m.stats.pages_migrated, 1);
        assert_eq!(m.units[m.slots.get(0).unwrap().unit as usize].resident, 2);
        m.free_requested(1, &mut d);
        assert_eq!(m.stats.pages_migrated, 1);
        // A touched at its free: its evicted page comes back (1); room exists (B gone).
        m.free_requested(0, &mut d);
        assert_eq!(m.stats.pages_migrated, 2);
    }

    #[test]
    fn small_allocations_share_a_page_unit() {
        let (mut m, mut d) = managed(PAGE, true);
        let a = m.malloc(&req(0, 1000), &mut d).unwrap();
        let b = m.malloc(&req(1, 1000), &mut d).unwrap();
        assert_eq!(a.segment, b.segment);
        assert_eq!(m.stats.reserved, PAGE);
        // A large one takes the whole capacity: the small page is evicted (1 migration).
        m.malloc(&req(2, PAGE), &mut d).unwrap();
        assert_eq!(m.stats.pages_migrated, 1);
        // Freeing a small one touches the page: it comes back, the large one goes out.
        m.free_requested(0, &mut d);
        assert_eq!(m.stats.pages_migrated, 3);
    }

    #[test]
    fn an_allocation_larger_than_the_device_streams_its_overflow() {
        let (mut m, mut d) = managed(2 * PAGE, true);
        m.malloc(&req(0, 5 * PAGE), &mut d).unwrap();
        // 2 pages resident, 3 overflow pages counted at creation and again at the free.
        assert_eq!(m.stats.pages_migrated, 3);
        assert_eq!(m.stats.reserved, 2 * PAGE);
        m.free_requested(0, &mut d);
        assert_eq!(m.stats.pages_migrated, 6);
        assert_eq!(m.stats.reserved, 0);
    }

    #[test]
    fn under_a_capacity_below_one_page_every_page_streams_and_nothing_is_resident() {
        // 1 MiB holds no 2 MiB page: reserved stays 0 (never above the capacity), each touch
        // moves every page of the allocation through the device, and no request fails.
        let (mut m, mut d) = managed(MIB, true);
        m.malloc(&req(0, 1000), &mut d).unwrap();
        assert_eq!((m.stats.reserved, m.stats.pages_migrated), (0, 1));
        m.malloc(&req(1, 3 * PAGE), &mut d).unwrap();
        assert_eq!((m.stats.reserved, m.stats.pages_migrated), (0, 4));
        m.free_requested(0, &mut d);
        m.free_requested(1, &mut d);
        assert_eq!((m.stats.reserved, m.stats.peak_reserved, m.stats.pages_migrated, m.stats.num_ooms), (0, 0, 8, 0));
        assert_eq!(m.stats.allocated, 0);
        // A capacity of 0 bytes: the same.
        let (mut m, mut d) = managed(0, false);
        m.malloc(&req(0, PAGE), &mut d).unwrap();
        assert_eq!((m.stats.reserved, m.stats.pages_migrated), (0, 1));
    }

    #[test]
    fn capacity_comes_from_the_option_or_the_device() {
        let mut meta = TraceMetadata::new("pytorch");
        meta.devices.push(DeviceInfo { index: 0, total_memory: Some(8 * PAGE), ..Default::default() });
        let ctx = PolicyContext { metadata: &meta, device: meta.device(0), capacity: None };
        let mut p = from_spec::<Box<dyn Policy>>("", &ctx).unwrap();
        let mut d = DeviceMemory::new(None);
        for i in 0..9 {
            p.malloc(&req(i, PAGE), &mut d).unwrap();
        }
        assert_eq!(p.stats().pages_migrated, 1);
        assert_eq!(p.stats().peak_reserved, 8 * PAGE);
        let ctx = PolicyContext { metadata: &meta, device: meta.device(0), capacity: Some(2 * PAGE) };
        assert!(from_spec::<Box<dyn Policy>>("touch_on_free=false", &ctx).is_ok());
        let e = from_spec::<Box<dyn Policy>>("touch=1", &ctx).err().unwrap().to_string();
        assert!(e.contains("unknown option 'touch' for managed; options: touch_on_free"), "{e}");
        assert!(from_spec::<Box<dyn Policy>>("touch_on_free=maybe", &ctx).is_err());
    }
}
