//! `cuda-malloc`: no caching. Every allocation is a `cudaMalloc` and every free a `cudaFree`, as
//! under `PYTORCH_NO_CUDA_MEMORY_CACHING=1` (`CUDACachingAllocator`'s uncached path:
//! `cudaMalloc` in `allocate`, `uncached_delete` -> `cudaFree`), TF's
//! `TF_GPU_ALLOCATOR=cuda_malloc` and JAX's `XLA_PYTHON_CLIENT_ALLOCATOR=platform`.
//!
//! What the driver does with such calls (probed on driver 580.159, H200, through
//! `cudaMemGetInfo`; docs/cuda-policies.md):
//! - sizes are rounded up to 512 bytes;
//! - a request of 2 MiB or more gets its own pages: the size rounded up to 2 MiB
//!   (2 MiB + 1 B takes 4 MiB);
//! - smaller requests share 2 MiB pages: 64 allocations of 1 B take one page, 512 B apart;
//!   64 of 1 MiB take 32 pages. A page goes back to the driver when its last allocation is freed.
//!
//! Replaying gpt2_train's and two_streams' requests through this model gives the device usage
//! that the same requests gave on the GPU through `cudaMalloc`/`cudaFree` to the byte
//! (tests/cuda_policies.rs). `num_device_alloc` / `num_device_free` count the driver calls, so a
//! side-by-side replay shows what a caching allocator saves.

use std::collections::{BTreeMap, BTreeSet};

use super::options::{self, Syntax};
use super::registry::{PolicyEntry, PolicyKind};
use super::spec::PolicyContext;
use super::{OutOfMemory, Placement, Policy, Request, SegmentInfo};
use crate::engine::device::DeviceMemory;
use crate::engine::stats::Stats;
use crate::error::Result;

/// `cudaMalloc` alignment of sub-page allocations.
pub const MALLOC_ALIGN: u64 = 512;
/// The driver's page: large allocations are rounded to it, small ones share it.
pub const PAGE: u64 = 2 << 20;

/// The registry's entry: `cuda-malloc` (no options).
pub static ENTRY: PolicyEntry = PolicyEntry {
    name: "cuda-malloc",
    summary: "no caching: a cudaMalloc / cudaFree per allocation (JAX's allocator=platform, PYTORCH_NO_CUDA_MEMORY_CACHING)",
    models: "the driver's cudaMalloc: small allocations packed in shared 2 MiB pages, large ones in their own",
    syntax: Syntax::KeyValue,
    options: &[],
    kind: PolicyKind::Online(from_spec),
    framework: None,
    env: None,
    bool_words: ("true", "false"),
    recorded: false,
    search_excludes: &[],
};

pub fn from_spec(options: &str, _ctx: &PolicyContext) -> Result<Box<dyn Policy>> {
    options::items(&ENTRY, options)?;
    Ok(Box::new(CudaMalloc::new()))
}

#[derive(Debug, Clone, Copy, Default)]
struct Page {
    addr: u64,
    live: u32,
}

/// Where the driver put an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    /// In a shared 2 MiB page (index into the layout's pages), at `off` within it.
    Small { page: u32, off: u64, addr: u64, new_page: bool },
    /// Its own pages.
    Large { addr: u64, bytes: u64 },
}

/// The driver's layout of `cudaMalloc`-style allocations: small ones packed into shared 2 MiB
/// pages (best fit over the pages' free ranges, O(log n)), large ones in their own pages. The
/// memory comes from `DeviceMemory::malloc` (capacity, addresses).
#[derive(Debug, Default)]
pub(crate) struct PageLayout {
    pages: Vec<Page>,
    free_slots: Vec<u32>,
    /// Free ranges inside live pages: (page, offset) -> end, and (length, page, offset).
    by_addr: BTreeMap<(u32, u64), u64>,
    by_size: BTreeSet<(u64, u32, u64)>,
}

impl PageLayout {
    /// Bytes the allocation sets aside (512-byte rounded; page-rounded when large).
    pub(crate) fn rounded(size: u64) -> u64 {
        let r = size.max(1).div_ceil(MALLOC_ALIGN).saturating_mul(MALLOC_ALIGN);
        if r >= PAGE {
            r.div_ceil(PAGE).saturating_mul(PAGE)
        } else {
            r
        }
    }

    /// Places `size` bytes; `None` when the device has no room (nothing changed then).
    pub(crate) fn alloc(&mut self, size: u64, device: &mut DeviceMemory) -> Option<Placed> {
        let r = Self::rounded(size);
        if r >= PAGE {
            let addr = device.malloc(r)?;
            return Some(Placed::Large { addr, bytes: r });
        }
        let (page, off, new_page) = match self.by_size.range((r, 0, 0)..).next().copied() {
            Some((len, page, off)) => {
                self.by_size.remove(&(len, page, off));
                self.by_addr.remove(&(page, off));
                if len > r {
                    self.by_addr.insert((page, off + r), off + len);
                    self.by_size.insert((len - r, page, off + r));
                }
                (page, off, false)
            }
            None => {
                let addr = device.malloc(PAGE)?;
                let page = match self.free_slots.pop() {
                    Some(i) => {
                        self.pages[i as usize] = Page { addr, live: 0 };
                        i
                    }
                    None => {
                        self.pages.push(Page { addr, live: 0 });
                        (self.pages.len() - 1) as u32
                    }
                };
                self.by_addr.insert((page, r), PAGE);
                self.by_size.insert((PAGE - r, page, r));
                (page, 0, true)
            }
        };
        let p = &mut self.pages[page as usize];
        p.live += 1;
        Some(Placed::Small { page, off, addr: p.addr + off, new_page })
    }

    /// Frees an allocation; returns true when it released a whole page (small) or its pages.
    pub(crate) fn free(&mut self, placed: Placed, size: u64, device: &mut DeviceMemory) -> bool {
        match placed {
            Placed::Large { addr, bytes } => {
                device.free(addr, bytes);
                true
            }
            Placed::Small { page, off, .. } => {
                let r = Self::rounded(size);
                let (mut start, mut end) = (off, off + r);
                if let Some((&(pg, s), &e)) = self.by_addr.range(..(page, start)).next_back() {
                    if pg == page && e == start {
                        self.by_addr.remove(&(pg, s));
                        self.by_size.remove(&(e - s, pg, s));
                        start = s;
                    }
                }
                if let Some(&e) = self.by_addr.get(&(page, end)) {
                    self.by_addr.remove(&(page, end));
                    self.by_size.remove(&(e - end, page, end));
                    end = e;
                }
                let p = &mut self.pages[page as usize];
                p.live -= 1;
                if p.live == 0 {
                    debug_assert_eq!((start, end), (0, PAGE));
                    device.free(p.addr, PAGE);
                    self.free_slots.push(page);
                    true
                } else {
                    self.by_addr.insert((page, start), end);
                    self.by_size.insert((end - start, page, start));
                    false
                }
            }
        }
    }

    pub(crate) fn page_addr(&self, page: u32) -> u64 {
        self.pages[page as usize].addr
    }

    /// Live pages: (address, live allocations).
    pub(crate) fn live_pages(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.pages.iter().filter(|p| p.live > 0).map(|p| (p.addr, p.live))
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    placed: Placed,
    size: u64,
}

#[derive(Debug, Default)]
pub struct CudaMalloc {
    stats: Stats,
    layout: PageLayout,
    /// Live allocations by id (`None`: none, or a zero-byte request).
    slots: super::id_map::IdMap<Slot>,
    /// Large allocations live, with their bytes, for `segments` (address -> (bytes, requested)).
    large: BTreeMap<u64, (u64, u64)>,
    small_allocated: BTreeMap<u64, u64>,
}

impl CudaMalloc {
    pub fn new() -> Self {
        Self::default()
    }

    fn release(&mut self, id: u64, device: &mut DeviceMemory) {
        let Some(s) = self.slots.remove(id) else { return };
        let rounded = PageLayout::rounded(s.size);
        self.stats.sub_allocated(rounded, s.size);
        // cudaFree
        self.stats.num_device_free += 1;
        match s.placed {
            Placed::Large { addr, bytes } => {
                self.large.remove(&addr);
                self.stats.sub_reserved(bytes);
            }
            Placed::Small { page, .. } => {
                let pa = self.layout.page_addr(page);
                if let Some(v) = self.small_allocated.get_mut(&pa) {
                    *v -= rounded;
                }
            }
        }
        if self.layout.free(s.placed, s.size, device) {
            if let Placed::Small { page, .. } = s.placed {
                self.small_allocated.remove(&self.layout.page_addr(page));
                self.stats.sub_reserved(PAGE);
            }
        }
    }
}

impl Policy for CudaMalloc {
    fn name(&self) -> String {
        "cuda-malloc".into()
    }

    fn malloc(&mut self, req: &Request, device: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
        if let Some(oom) = super::unservable(req.size, &mut self.stats) {
            return Err(oom);
        }
        if req.size == 0 {
            // allocate(0) returns nullptr without a cudaMalloc.
            self.slots.remove(req.id);
            return Ok(Placement { addr: 0, size: 0, segment: 0 });
        }
        let Some(placed) = self.layout.alloc(req.size, device) else {
            self.stats.num_ooms += 1;
            return Err(OutOfMemory { alloc_size: PageLayout::rounded(req.size).max(PAGE) });
        };
        let rounded = PageLayout::rounded(req.size);
        self.stats.num_device_alloc += 1;
        self.stats.add_allocated(rounded, req.size);
        self.slots.insert(req.id, Slot { placed, size: req.size });
        Ok(match placed {
            Placed::Large { addr, bytes } => {
                self.stats.add_reserved(bytes);
                self.large.insert(addr, (bytes, req.size));
                Placement { addr, size: bytes, segment: addr }
            }
            Placed::Small { page, addr, new_page, .. } => {
                let pa = self.layout.page_addr(page);
                if new_page {
                    self.stats.add_reserved(PAGE);
                }
                *self.small_allocated.entry(pa).or_insert(0) += rounded;
                Placement { addr, size: rounded, segment: pa }
            }
        })
    }

    /// `uncached_delete` calls `cudaFree` when the program frees (streams do not matter:
    /// `cudaFree` synchronises the device).
    fn free_requested(&mut self, id: u64, device: &mut DeviceMemory) {
        self.release(id, device);
    }

    fn free_completed(&mut self, id: u64, device: &mut DeviceMemory) {
        self.release(id, device);
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    fn segments(&self) -> Vec<SegmentInfo> {
        let mut out: Vec<SegmentInfo> = self
            .large
            .iter()
            .map(|(&addr, &(bytes, requested))| SegmentInfo {
                addr,
                size: bytes,
                stream: 0,
                pool: 0,
                kind: "large",
                allocated_bytes: PageLayout::rounded(requested),
                blocks: 1,
            })
            .collect();
        out.extend(self.layout.live_pages().map(|(addr, live)| SegmentInfo {
            addr,
            size: PAGE,
            stream: 0,
            pool: 0,
            kind: "small",
            allocated_bytes: self.small_allocated.get(&addr).copied().unwrap_or(0),
            blocks: live,
        }));
        out.sort_by_key(|s| s.addr);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceMetadata;

    const MIB: u64 = 1 << 20;

    fn req(id: u64, size: u64) -> Request {
        Request { event: id as usize, id, size, stream: 0, pool: 0, recorded_addr: None, recorded_chunk: None }
    }

    /// 64 allocations of `size`, as in the driver probe; returns (reserved, first offsets).
    fn sixty_four(size: u64) -> (u64, Vec<u64>) {
        let mut d = DeviceMemory::new(None);
        let mut p = CudaMalloc::new();
        let a: Vec<u64> = (0..64).map(|i| p.malloc(&req(i, size), &mut d).unwrap().addr).collect();
        assert_eq!(d.used, p.stats.reserved);
        (p.stats.reserved, a[..4].iter().map(|x| x.wrapping_sub(a[0])).collect())
    }

    #[test]
    fn driver_granularity_as_probed() {
        // Probe M (64 cudaMallocs each; used bytes from cudaMemGetInfo):
        assert_eq!(sixty_four(1), (2 * MIB, vec![0, 512, 1024, 1536]));
        assert_eq!(sixty_four(512).0, 2 * MIB);
        assert_eq!(sixty_four(4096), (2 * MIB, vec![0, 4096, 8192, 12288]));
        assert_eq!(sixty_four(64 << 10).0, 4 * MIB);
        // Two 1 MiB allocations per page (the next page's address is the device model's).
        let (r, offs) = sixty_four(MIB);
        assert_eq!((r, offs[1]), (64 * MIB, MIB));
        assert_eq!(sixty_four(2 * MIB - 512).0, 128 * MIB);
        assert_eq!(sixty_four(2 * MIB).0, 128 * MIB);
        assert_eq!(sixty_four(2 * MIB + 1).0, 256 * MIB);
        assert_eq!(sixty_four(3 * MIB).0, 256 * MIB);
        assert_eq!(sixty_four(5 * MIB + 1).0, 384 * MIB);
    }

    #[test]
    fn every_alloc_and_free_is_a_driver_call_and_pages_go_back_when_empty() {
        let mut d = DeviceMemory::new(None);
        let mut p = CudaMalloc::new();
        let a = p.malloc(&req(0, 1000), &mut d).unwrap(); // 1024 B in page 1
        let b = p.malloc(&req(1, 3000), &mut d).unwrap(); // 3072 B right after
        assert_eq!(b.addr - a.addr, 1024);
        assert_eq!(a.segment, b.segment);
        let c = p.malloc(&req(2, 5 * MIB), &mut d).unwrap(); // own 6 MiB
        assert_eq!(c.size, 6 * MIB);
        assert_eq!(p.stats.reserved, 8 * MIB);
        assert_eq!(p.stats.allocated, 1024 + 3072 + 6 * MIB);
        p.free_requested(0, &mut d);
        p.free_completed(0, &mut d); // already freed: no second cudaFree
        assert_eq!(p.stats.reserved, 8 * MIB);
        // The freed 1 KiB at the page's start is the best fit for 600 B.
        assert_eq!(p.malloc(&req(3, 600), &mut d).unwrap().addr, a.addr);
        for id in [1, 2, 3] {
            p.free_requested(id, &mut d);
        }
        assert_eq!((p.stats.reserved, d.used, p.stats.allocated), (0, 0, 0));
        assert_eq!((p.stats.num_device_alloc, p.stats.num_device_free), (4, 4));
        assert_eq!(p.stats.peak_reserved, 8 * MIB);
        assert!(p.segments().is_empty());
    }

    #[test]
    fn out_of_memory_changes_nothing() {
        let mut d = DeviceMemory::new(Some(4 * MIB));
        let mut p = CudaMalloc::new();
        p.malloc(&req(0, 3 * MIB), &mut d).unwrap();
        let before = p.stats.clone();
        assert_eq!(p.malloc(&req(1, 1), &mut d), Err(OutOfMemory { alloc_size: PAGE }));
        assert_eq!(p.stats.num_ooms, 1);
        assert_eq!((p.stats.reserved, p.stats.allocated), (before.reserved, before.allocated));
        // The failed id's frees are no-ops.
        p.free_requested(1, &mut d);
        assert_eq!(p.stats.num_device_free, 0);
    }

    #[test]
    fn takes_no_options() {
        let meta = TraceMetadata::new("pytorch");
        let ctx = PolicyContext { metadata: &meta, device: None, capacity: None };
        assert!(from_spec("", &ctx).is_ok());
        let e = from_spec("x=1", &ctx).err().unwrap().to_string();
        assert!(e.contains("takes no options"), "{e}");
    }
}
