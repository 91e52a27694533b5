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

use std::num::NonZeroU64;

use rustc_hash::FxHashMap;

use super::class_bitmap::{ClassBitmap, CLASSES};
use super::entry::{PolicyEntry, PolicyKind};
use super::options::Syntax;
use super::spec::PolicyContext;
use super::{FromPolicy, OutOfMemory, Placement, Policy, Request, SegmentInfo};
use crate::device::DeviceMemory;
use crate::device::Stats;
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

pub fn from_spec<B: FromPolicy>(options: &str, _ctx: &PolicyContext) -> Result<B> {
    super::entry::items(&ENTRY, options)?;
    Ok(B::from_policy(CudaMalloc::new()))
}

#[derive(Debug, Clone)]
struct Page {
    addr: u64,
    live: u32,
    /// Rounded bytes of the live allocations in the page.
    allocated: u64,
    /// Boundary tags of the page's free ranges, one per 512-byte unit: a free range's length
    /// in units at its first and at its last unit, 0 everywhere else (all 0 once the page is
    /// released). The ranges next to a freed block are read there, not searched for. A fixed
    /// length, indexed through [`unit`]: no bounds checks on the hot paths.
    tags: Box<[u16; UNITS]>,
}

/// 512-byte units of a page.
const UNITS: usize = (PAGE / MALLOC_ALIGN) as usize;

/// The unit of byte offset `off` in a page (`off < PAGE`), masked into the tags' bounds: the
/// identity on every offset a page holds, and no bounds check where it is used.
#[inline(always)]
fn unit(off: u64) -> usize {
    debug_assert!(off < PAGE);
    (off / MALLOC_ALIGN) as usize & (UNITS - 1)
}

impl Page {
    /// Marks the bytes `start..end` one free range.
    #[inline(always)]
    fn tag_free(&mut self, start: u64, end: u64) {
        let len = ((end - start) / MALLOC_ALIGN) as u16;
        self.tags[unit(start)] = len;
        self.tags[unit(end - MALLOC_ALIGN)] = len;
    }

    /// Unmarks the free range of bytes `start..end`.
    #[inline(always)]
    fn untag(&mut self, start: u64, end: u64) {
        self.tags[unit(start)] = 0;
        self.tags[unit(end - MALLOC_ALIGN)] = 0;
    }

    /// The start of the free range ending at byte `end`, if one does.
    #[inline(always)]
    fn free_ending_at(&self, end: u64) -> Option<u64> {
        if end == 0 {
            return None;
        }
        let len = self.tags[unit(end - MALLOC_ALIGN)];
        (len > 0).then(|| end - u64::from(len) * MALLOC_ALIGN)
    }

    /// The end of the free range starting at byte `start`, if one does.
    #[inline(always)]
    fn free_starting_at(&self, start: u64) -> Option<u64> {
        if start >= PAGE {
            return None;
        }
        let len = self.tags[unit(start)];
        (len > 0).then(|| start + u64::from(len) * MALLOC_ALIGN)
    }
}

/// `v.remove(i)`, with no call to `memmove` when `i` is the last index: the lists here are
/// short (most classes hold one range, most pages a few), and that is the common case.
#[inline]
fn remove_at<T>(v: &mut Vec<T>, i: usize) {
    if i + 1 == v.len() {
        v.pop();
    } else {
        v.remove(i);
    }
}

// Length classes of the free ranges inside shared pages: multiples of 512 bytes, up to a page.
const _: () = assert!(CLASSES as u64 == PAGE / MALLOC_ALIGN);

/// The free ranges of every shared page in the driver's best-fit order (length, page, offset),
/// by length class: a bitmap of the classes that hold a range (two levels of `u64`), and per
/// class its ranges as `page << 32 | offset`, in order. The shortest fitting range is the first
/// set bit at or after the request's class: no search tree.
///
/// A class's least range is kept apart from its list: a best fit reads it with no list to
/// follow, and most classes hold one range at most (a real trace's inserts go to an empty
/// class two times in three), so their lists are seldom touched.
#[derive(Debug)]
struct FreeBySize {
    /// The classes that hold a range (class `c`: ranges of `(c + 1) * 512` bytes).
    bits: ClassBitmap,
    /// Indexed by [`FreeBySize::class`], masked into bounds: no bounds checks.
    classes: Box<[Class; CLASSES]>,
}

/// One length class of [`FreeBySize`]: its least range and the list of the others side by
/// side (32 bytes, one cache line), not in two arrays: a best fit, and the removal or insert
/// that follows it, read both, and the classes are too many (4,096) to stay in the L1 cache.
#[derive(Debug, Clone)]
struct Class {
    /// The least range ([`NO_RANGE`] when the class is empty).
    first: u64,
    /// The other ranges, sorted from the largest down: the next least, which replaces `first`
    /// when that is taken, is popped from the end, with no other range to move.
    rest: Vec<u64>,
}

/// [`Class::first`] of an empty class (no range has that key: offsets are below a page).
const NO_RANGE: u64 = u64::MAX;

impl Default for FreeBySize {
    fn default() -> Self {
        let classes = vec![Class { first: NO_RANGE, rest: Vec::new() }; CLASSES].into_boxed_slice();
        FreeBySize { bits: ClassBitmap::default(), classes: classes.try_into().expect("CLASSES classes") }
    }
}

impl FreeBySize {
    #[inline]
    fn class(len: u64) -> usize {
        debug_assert!(len > 0 && len <= PAGE && len.is_multiple_of(MALLOC_ALIGN));
        ((len / MALLOC_ALIGN) as usize - 1) & (CLASSES - 1)
    }

    #[inline(always)]
    fn insert(&mut self, len: u64, page: u32, off: u64) {
        let c = Self::class(len);
        let key = (u64::from(page) << 32) | off;
        let class = &mut self.classes[c];
        if class.first == NO_RANGE {
            class.first = key;
            self.bits.set(c);
            return;
        }
        // The larger of the two goes to the list.
        let key = if key < class.first { std::mem::replace(&mut class.first, key) } else { key };
        let i = class.rest.partition_point(|&k| k > key);
        class.rest.insert(i, key);
    }

    #[inline(always)]
    fn remove(&mut self, len: u64, page: u32, off: u64) {
        let c = Self::class(len);
        let key = (u64::from(page) << 32) | off;
        let class = &mut self.classes[c];
        if class.first != key {
            let i = class.rest.partition_point(|&k| k > key);
            debug_assert_eq!(class.rest.get(i), Some(&key), "free range not found");
            remove_at(&mut class.rest, i);
        } else {
            self.take_first(c);
        }
    }

    /// Removes class `c`'s least range (the class is not empty).
    #[inline]
    fn take_first(&mut self, c: usize) {
        let class = &mut self.classes[c & (CLASSES - 1)];
        if let Some(next) = class.rest.pop() {
            class.first = next;
        } else {
            class.first = NO_RANGE;
            self.bits.clear(c);
        }
    }

    /// The shortest free range of at least `len` bytes, the lowest (page, offset) among equals,
    /// taken out of the set: (length, page, offset).
    #[inline]
    fn take_best_fit(&mut self, len: u64) -> Option<(u64, u32, u64)> {
        let c = self.bits.next_set(Self::class(len))?;
        let key = self.classes[c & (CLASSES - 1)].first;
        self.take_first(c);
        Some(((c as u64 + 1) * MALLOC_ALIGN, (key >> 32) as u32, key & 0xffff_ffff))
    }
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
/// pages (best fit over the pages' free ranges), large ones in their own pages. The memory
/// comes from `DeviceMemory::malloc` (capacity, addresses).
#[derive(Debug, Default)]
pub(crate) struct PageLayout {
    pages: Vec<Page>,
    free_slots: Vec<u32>,
    by_size: FreeBySize,
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
    /// Inlined into the engine's loop with `malloc`, as `free_small` is with `free_at_once`
    /// and `FreeBySize::remove` with it: as calls, the three cost 8% of cuda-malloc's
    /// instructions on traces/large/opt350_serve (callgrind, three replays: 1,384 M -> 1,264 M).
    #[inline(always)]
    pub(crate) fn alloc(&mut self, size: u64, device: &mut DeviceMemory) -> Option<Placed> {
        let r = Self::rounded(size);
        if r >= PAGE {
            let addr = device.malloc(r)?;
            return Some(Placed::Large { addr, bytes: r });
        }
        let (page, off, new_page) = match self.by_size.take_best_fit(r) {
            Some((len, page, off)) => {
                let p = &mut self.pages[page as usize];
                p.untag(off, off + len);
                if len > r {
                    // The rest of the range stays free.
                    p.tag_free(off + r, off + len);
                    self.by_size.insert(len - r, page, off + r);
                }
                (page, off, false)
            }
            None => {
                let addr = device.malloc(PAGE)?;
                let page = match self.free_slots.pop() {
                    Some(i) => {
                        // A released page's tags are all 0 again (`free_small`).
                        let p = &mut self.pages[i as usize];
                        (p.addr, p.live, p.allocated) = (addr, 0, 0);
                        i
                    }
                    None => {
                        self.pages.push(Page { addr, live: 0, allocated: 0, tags: Box::new([0; UNITS]) });
                        (self.pages.len() - 1) as u32
                    }
                };
                self.pages[page as usize].tag_free(r, PAGE);
                self.by_size.insert(PAGE - r, page, r);
                (page, 0, true)
            }
        };
        let p = &mut self.pages[page as usize];
        p.live += 1;
        p.allocated += r;
        Some(Placed::Small { page, off, addr: p.addr + off, new_page })
    }

    /// Frees an allocation; returns true when it released a whole page (small) or its pages.
    pub(crate) fn free(&mut self, placed: Placed, size: u64, device: &mut DeviceMemory) -> bool {
        match placed {
            Placed::Large { addr, bytes } => {
                device.free(addr, bytes);
                true
            }
            Placed::Small { page, off, .. } => self.free_small(page, off, Self::rounded(size), device),
        }
    }

    /// Frees the `r` (rounded) bytes at `off` in shared page `page`; returns true when that
    /// released the page.
    #[inline(always)]
    pub(crate) fn free_small(&mut self, page: u32, off: u64, r: u64, device: &mut DeviceMemory) -> bool {
        let (start, end) = (off, off + r);
        let p = &mut self.pages[page as usize];
        p.live -= 1;
        p.allocated -= r;
        // The free ranges just below and just above, merged with the freed one.
        let below = p.free_ending_at(start);
        let above = p.free_starting_at(end);
        if let Some(o) = below {
            p.untag(o, start);
            self.by_size.remove(start - o, page, o);
        }
        if let Some(e) = above {
            p.untag(end, e);
            self.by_size.remove(e - end, page, end);
        }
        let (merged_start, merged_end) = (below.unwrap_or(start), above.unwrap_or(end));
        if p.live == 0 {
            debug_assert_eq!((merged_start, merged_end), (0, PAGE));
            debug_assert!(p.tags.iter().all(|&t| t == 0));
            device.free(p.addr, PAGE);
            self.free_slots.push(page);
            return true;
        }
        p.tag_free(merged_start, merged_end);
        self.by_size.insert(merged_end - merged_start, page, merged_start);
        false
    }

    pub(crate) fn page_addr(&self, page: u32) -> u64 {
        self.pages[page as usize].addr
    }

    /// Live pages: (address, live allocations, their rounded bytes).
    pub(crate) fn live_pages(&self) -> impl Iterator<Item = (u64, u32, u64)> + '_ {
        self.pages.iter().filter(|p| p.live > 0).map(|p| (p.addr, p.live, p.allocated))
    }
}

/// A live allocation: its requested size and where it lies, in two words. Not a [`Placed`]:
/// copying that enum out of the map and back into a call went through overlapping stack
/// stores, read back at other widths (a store-forwarding stall on every free); the shared
/// page and offset are one word for the same reason. The size is never 0 (a zero-byte
/// request takes no slot), so an `Option<Slot>` is 16 bytes too: the id map's pages, read at
/// every free and written at every malloc, hold four slots a cache line, not two.
#[derive(Debug, Clone, Copy)]
struct Slot {
    size: NonZeroU64,
    /// `page << 32 | offset` in a shared page, or a large allocation's address (its pages start
    /// there) with the [`LARGE`] bit set.
    loc: u64,
}

/// The bit of [`Slot::loc`] that marks a large allocation: above any device address, and above
/// `page << 32` (pages are far fewer than 2^31).
const LARGE: u64 = 1 << 63;

#[derive(Debug, Default)]
pub struct CudaMalloc {
    stats: Stats,
    layout: PageLayout,
    /// Live allocations by id (`None`: none, or a zero-byte request).
    slots: super::id_map::IdMap<Slot>,
    /// Large allocations live, with their bytes, for `segments` (address -> (bytes, requested)).
    large: FxHashMap<u64, (u64, u64)>,
}

impl CudaMalloc {
    pub fn new() -> Self {
        Self::default()
    }

    /// Inlined (as `malloc` and `FreeBySize::insert`): called once or twice per event, these
    /// were calls that LLVM would not inline, each passing its arguments and result through
    /// the stack (about 4 % of cuda-malloc's replay time on qwen2x).
    #[inline(always)]
    fn release(&mut self, id: u64, device: &mut DeviceMemory) {
        let Some(s) = self.slots.remove(id) else { return };
        let size = s.size.get();
        let rounded = PageLayout::rounded(size);
        self.stats.sub_allocated(rounded, size);
        // cudaFree
        self.stats.num_device_free += 1;
        if s.loc & LARGE != 0 {
            let addr = s.loc & !LARGE;
            device.free(addr, rounded);
            self.large.remove(&addr);
            self.stats.sub_reserved(rounded);
        } else if self.layout.free_small((s.loc >> 32) as u32, s.loc & 0xffff_ffff, rounded, device) {
            // The page's last allocation: the page goes back to the driver.
            self.stats.sub_reserved(PAGE);
        }
    }
}

impl Policy for CudaMalloc {
    fn name(&self) -> String {
        "cuda-malloc".into()
    }

    #[inline(always)]
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
        let size = NonZeroU64::new(req.size).expect("a zero-byte request returned above");
        let slot = match placed {
            Placed::Large { addr, .. } => {
                debug_assert_eq!(addr & LARGE, 0, "a device address below 2^63");
                Slot { size, loc: addr | LARGE }
            }
            Placed::Small { page, off, .. } => {
                debug_assert!(page < 1 << 31 && off < 1 << 32);
                Slot { size, loc: (u64::from(page) << 32) | off }
            }
        };
        self.slots.insert(req.id, slot);
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

    /// `release` takes the allocation out at the request: its completion finds nothing.
    /// Inlined into the engine's loop (its one caller per policy), as `malloc` is: as a call
    /// it saved and restored the loop's registers at every free.
    #[inline(always)]
    fn free_at_once(&mut self, id: u64, device: &mut DeviceMemory) -> bool {
        self.release(id, device);
        true
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Pages and large allocations are found by index and id, never by address: the driver's
    /// placement (`DeviceMemory`'s address space) only shows in the segments and placements.
    fn places_without_addresses(&self) -> bool {
        true
    }

    fn restart(&mut self) -> bool {
        *self = CudaMalloc::new();
        true
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
        out.extend(self.layout.live_pages().map(|(addr, live, allocated)| SegmentInfo {
            addr,
            size: PAGE,
            stream: 0,
            pool: 0,
            kind: "small",
            allocated_bytes: allocated,
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

    #[test]
    fn a_slot_and_an_empty_one_are_two_words() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 16);
    }

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

    /// The layout against a brute-force model of the driver's best fit (every free range of
    /// every live page scanned for the least (length, page, offset)) over random mixes of
    /// small and large allocations and frees: same offsets, same pages, same releases.
    #[test]
    fn best_fit_matches_a_scan_of_every_free_range() {
        let mut rng = crate::test_rng::XorShift64::new(0x1234_5678_9abc_def1);
        let mut d = DeviceMemory::new(None);
        let mut layout = PageLayout::default();
        // The model: per page slot, its live allocations as (offset, rounded size).
        let mut model: Vec<Option<Vec<(u64, u64)>>> = Vec::new();
        let mut live: Vec<(Placed, u64)> = Vec::new();
        let model_free = |allocs: &Vec<(u64, u64)>| {
            let mut a = allocs.clone();
            a.sort();
            let (mut out, mut at) = (Vec::new(), 0);
            for (o, r) in a {
                if o > at {
                    out.push((at, o));
                }
                at = o + r;
            }
            if at < PAGE {
                out.push((at, PAGE));
            }
            out
        };
        for step in 0..20_000 {
            let x = rng.next_u64();
            if live.is_empty() || x % 100 < 55 {
                let size = match x % 7 {
                    0 => 1 + (x >> 8) % (3 * MIB),
                    1 | 2 => 1 + (x >> 8) % (256 << 10),
                    _ => 1 + (x >> 8) % 8192,
                };
                let r = PageLayout::rounded(size);
                let want = (r < PAGE).then(|| {
                    model
                        .iter()
                        .enumerate()
                        .filter_map(|(pg, a)| a.as_ref().map(|a| (pg, model_free(a))))
                        .flat_map(|(pg, f)| f.into_iter().map(move |(o, e)| (e - o, pg as u32, o)))
                        .filter(|&(len, _, _)| len >= r)
                        .min()
                });
                let placed = layout.alloc(size, &mut d).unwrap();
                match (placed, want) {
                    (Placed::Small { page, off, new_page, .. }, Some(w)) => {
                        match w {
                            Some((_, wp, wo)) => assert_eq!((new_page, page, off), (false, wp, wo), "step {step}"),
                            None => {
                                assert!(new_page && off == 0, "step {step}");
                                if model.len() <= page as usize {
                                    model.resize(page as usize + 1, None);
                                }
                                assert!(model[page as usize].is_none(), "step {step}: slot reused while live");
                                model[page as usize] = Some(Vec::new());
                            }
                        }
                        model[page as usize].as_mut().unwrap().push((off, r));
                    }
                    (Placed::Large { bytes, .. }, None) => assert_eq!(bytes, r),
                    other => panic!("step {step}: {other:?}"),
                }
                live.push((placed, size));
            } else {
                let (placed, size) = live.swap_remove((x >> 8) as usize % live.len());
                let released = layout.free(placed, size, &mut d);
                if let Placed::Small { page, off, .. } = placed {
                    let a = model[page as usize].as_mut().unwrap();
                    a.retain(|&(o, _)| o != off);
                    assert_eq!(released, a.is_empty(), "step {step}");
                    if a.is_empty() {
                        model[page as usize] = None;
                    }
                }
            }
        }
    }

    #[test]
    fn takes_no_options() {
        let meta = TraceMetadata::new("pytorch");
        let ctx = PolicyContext { metadata: &meta, device: None, capacity: None };
        assert!(from_spec::<Box<dyn Policy>>("", &ctx).is_ok());
        let e = from_spec::<Box<dyn Policy>>("x=1", &ctx).err().unwrap().to_string();
        assert!(e.contains("takes no options"), "{e}");
    }
}
