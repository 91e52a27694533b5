//! The BFC ("best-fit with coalescing") allocator of TensorFlow and XLA / JAX, mirroring
//! `tsl::BFCAllocator` (xla/tsl/framework/bfc_allocator.{h,cc}; TensorFlow 2.16+ builds this
//! copy): 256-byte rounding, 21 size bins of free chunks ordered by (size, address), best fit,
//! the split rule with the internal-fragmentation cap, coalescing on free, regions obtained
//! from the sub-allocator (`allow_growth` doubling from 2 MiB, or one region of
//! `memory_limit`), the 0.9 back-off, garbage collection of wholly free regions, and OOM.
//! Function names below are upstream's.
//!
//! Not modelled, because the allocators that emit profiler memory events do not use them:
//! timestamped chunks (`SetTimingCounter`, TF's experimental `timestamped_allocator`), spatial
//! partitioning (`enable_spatial_partitioning`), alignments above 256 bytes (TF and XLA ask for
//! `kAllocatorAlignment` = 64, raised to 256), and region coalescing (only
//! `GpuVirtualMemAllocator` supports it; `DeviceMemAllocator`, the host and CPU sub-allocators
//! do not). The retry-on-failure wait (`AllocateRawInternalWithRetry`) cannot help in a replay:
//! no other thread frees memory while the trace stands still.

use std::collections::BTreeMap;

use super::bfc_config::{parse_bfc, parse_jax, parse_tf, BfcSettings, BfcSpec};
use super::free_blocks::FreeBlocks;
use super::spec::PolicyContext;
use super::{BlockInfo, FromPolicy, OutOfMemory, Placement, Policy, Request, SegmentInfo};
use crate::device::DeviceMemory;
use crate::device::Stats;
use crate::error::Result;

/// `kMinAllocationBits` / `kMinAllocationSize`.
pub const K_MIN_ALLOCATION_BITS: u32 = 8;
pub const K_MIN_ALLOCATION_SIZE: u64 = 1 << K_MIN_ALLOCATION_BITS;
/// `kNumBins`: the largest binned chunk size class is 256 << 21 = 512 MiB (the last bin holds
/// everything from 256 MiB up).
pub const K_NUM_BINS: usize = 21;
/// `max_internal_fragmentation_bytes_` unless a fraction is set.
pub const DEFAULT_MAX_INTERNAL_FRAGMENTATION: u64 = 128 << 20;
/// `kBackpedalFactor` (a float).
const K_BACKPEDAL_FACTOR: f32 = 0.9;

/// `kInvalidChunkHandle`.
const NONE: u32 = u32::MAX;

/// `BFCAllocator::RoundedBytes`.
#[inline]
pub fn rounded_bytes(bytes: u64) -> u64 {
    K_MIN_ALLOCATION_SIZE.saturating_mul(bytes.div_ceil(K_MIN_ALLOCATION_SIZE))
}

/// `BFCAllocator::BinNumForSize`: `min(Log2FloorNonZero(bytes >> kMinAllocationBits), kNumBins - 1)`.
#[inline]
pub fn bin_num_for_size(bytes: u64) -> usize {
    let v = (bytes >> K_MIN_ALLOCATION_BITS).max(1);
    ((63 - v.leading_zeros()) as usize).min(K_NUM_BINS - 1)
}

pub fn from_spec<B: FromPolicy>(spec: BfcSpec, ctx: &PolicyContext) -> Result<B> {
    match spec {
        BfcSpec::Bfc { name, settings } => Ok(B::from_policy(Bfc::new(name, settings).with_trace(ctx))),
        BfcSpec::Platform { name } => Ok(B::from_policy(Platform::new(name))),
    }
}

pub fn build_bfc<B: FromPolicy>(options: &str, ctx: &PolicyContext) -> Result<B> {
    from_spec(parse_bfc(options, ctx)?, ctx)
}

pub fn build_tf<B: FromPolicy>(options: &str, ctx: &PolicyContext) -> Result<B> {
    from_spec(parse_tf(options, ctx)?, ctx)
}

pub fn build_jax<B: FromPolicy>(options: &str, ctx: &PolicyContext) -> Result<B> {
    from_spec(parse_jax(options, ctx)?, ctx)
}

/// `BFCAllocator::Chunk`.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    ptr: u64,
    size: u64,
    requested_size: u64,
    in_use: bool,
    /// Physically adjacent chunks in the same region.
    prev: u32,
    next: u32,
    /// Bin the chunk is in when free (`kInvalidBinNum` = -1).
    bin_num: i8,
    /// Trace allocation id while in use.
    alloc_id: u64,
    /// Base of the region holding the chunk.
    region: u64,
}

/// `BFCAllocator::AllocationRegion` (without the per-256-byte handle array: chunks are found
/// through their allocation id, and regions walk their chunk list from `first`).
#[derive(Debug, Clone, Copy)]
struct Region {
    size: u64,
    /// The chunk at the region's base (never merged away: it has no `prev`).
    first: u32,
}

pub struct Bfc {
    name: String,
    opts: BfcSettings,
    /// `memory_limit_` (u64::MAX when unlimited).
    memory_limit: u64,
    curr_region_allocation_bytes: u64,
    max_internal_fragmentation_bytes: i64,
    chunks: Vec<Chunk>,
    /// `unused_chunk_handle_head_`: a free list threaded through `next`.
    unused_head: u32,
    /// Every bin's `free_chunks` in one ordered set, by `ChunkComparator`'s (size, ptr) (free
    /// chunks never share an address); the value is the chunk's handle. The bins are ranges of
    /// sizes in increasing order, so `FindChunkPtr`'s walk from the request's bin upwards is
    /// the set's first chunk of at least the rounded size. Sizes up to 1 MiB are kept in
    /// 256-byte classes ([`FreeBlocks`]: a bitmap's next set bit, no search tree), larger ones
    /// in a sorted map; a chunk's `bin_num` is still its upstream bin.
    free_chunks: FreeBlocks<K_MIN_ALLOCATION_SIZE>,
    /// `RegionManager::regions_`, by base address.
    regions: BTreeMap<u64, Region>,
    /// Live chunks by trace allocation id.
    live: super::id_map::IdMap<u32>,
    /// For a seeded trace replayed preallocated: where the one region starts (the lowest
    /// address the trace shows; the first chunk the allocator ever handed out sat at the
    /// region's base).
    seed_region_base: Option<u64>,
    /// For a seeded trace replayed with growing regions: the address ranges the seeds'
    /// regions covered (created before the first seed is placed).
    seed_regions: Vec<(u64, u64)>,
    stats: Stats,
    pub num_allocs: u64,
    pub largest_alloc_size: u64,
}

impl Bfc {
    /// `BFCAllocator::BFCAllocator(sub_allocator, total_memory, name, opts)`.
    pub fn new(name: String, opts: BfcSettings) -> Self {
        let total_memory = opts.memory_limit.unwrap_or(u64::MAX);
        let curr_region_allocation_bytes = if opts.allow_growth {
            // 2MiB smallest initial allocation, unless total memory available is less.
            rounded_bytes(total_memory.min(2 << 20))
        } else {
            rounded_bytes(total_memory.min(u64::MAX - K_MIN_ALLOCATION_SIZE))
        };
        // `opts.fragmentation_fraction * memory_limit_` (a double, stored in int64).
        let max_internal_fragmentation_bytes = if opts.fragmentation_fraction > 0.0 {
            (opts.fragmentation_fraction * total_memory as f64) as i64
        } else {
            DEFAULT_MAX_INTERNAL_FRAGMENTATION as i64
        };
        Bfc {
            name,
            opts,
            memory_limit: total_memory,
            curr_region_allocation_bytes,
            max_internal_fragmentation_bytes,
            chunks: Vec::with_capacity(1024),
            unused_head: NONE,
            free_chunks: FreeBlocks::default(),
            regions: BTreeMap::new(),
            live: Default::default(),
            seed_region_base: None,
            seed_regions: Vec::new(),
            stats: Stats::default(),
            num_allocs: 0,
            largest_alloc_size: 0,
        }
    }

    /// Takes from the trace what placing its seeds needs (`extra.seed.lowest_address` of a
    /// seeded xplane import).
    pub fn with_trace(mut self, ctx: &PolicyContext) -> Self {
        if ctx.metadata.seeded {
            let seed = ctx.metadata.extra.get("seed");
            self.seed_region_base = seed.and_then(|s| s.get("lowest_address")).and_then(|a| a.as_u64());
            self.seed_regions = seed
                .and_then(|s| s.get("regions"))
                .and_then(|r| r.as_array())
                .map(|r| r.iter().filter_map(|x| Some((x.get(0)?.as_u64()?, x.get(1)?.as_u64()?))).collect())
                .unwrap_or_default();
        }
        self
    }

    pub fn settings(&self) -> &BfcSettings {
        &self.opts
    }

    /// `stats_.pool_bytes`.
    pub fn pool_bytes(&self) -> u64 {
        self.stats.reserved
    }

    fn c(&self, h: u32) -> &Chunk {
        &self.chunks[h as usize]
    }
    fn cm(&mut self, h: u32) -> &mut Chunk {
        &mut self.chunks[h as usize]
    }

    /// `AllocateChunk`.
    fn allocate_chunk(&mut self) -> u32 {
        if self.unused_head != NONE {
            let h = self.unused_head;
            self.unused_head = self.c(h).next;
            return h;
        }
        let h = self.chunks.len() as u32;
        self.chunks.push(Chunk {
            ptr: 0,
            size: 0,
            requested_size: 0,
            in_use: false,
            prev: NONE,
            next: NONE,
            bin_num: -1,
            alloc_id: 0,
            region: 0,
        });
        h
    }

    /// `DeallocateChunk`.
    fn deallocate_chunk(&mut self, h: u32) {
        let head = self.unused_head;
        let c = self.cm(h);
        c.in_use = false;
        c.bin_num = -1;
        c.next = head;
        self.unused_head = h;
    }

    /// `InsertFreeChunk`.
    #[inline(always)]
    fn insert_free_chunk(&mut self, h: u32) {
        let c = self.c(h);
        debug_assert!(!c.in_use && c.bin_num == -1);
        let (size, ptr) = (c.size, c.ptr);
        let b = bin_num_for_size(size);
        self.cm(h).bin_num = b as i8;
        self.free_chunks.insert(0, size, ptr, h);
    }

    /// `RemoveFreeChunkFromBin`.
    #[inline(always)]
    fn remove_free_chunk_from_bin(&mut self, h: u32) {
        let c = *self.c(h);
        debug_assert!(!c.in_use && c.bin_num >= 0);
        let removed = self.free_chunks.remove(0, c.size, c.ptr);
        debug_assert_eq!(removed, Some(h), "could not find chunk in bin");
        self.cm(h).bin_num = -1;
    }

    /// `SplitChunk(h, num_bytes)`: `h` keeps the low `num_bytes`; the rest becomes a free chunk.
    #[inline(always)]
    fn split_chunk(&mut self, h: u32, num_bytes: u64) {
        let h_new = self.allocate_chunk();
        let c = *self.c(h);
        debug_assert!(!c.in_use && c.bin_num == -1);
        let h_neighbor = c.next;
        *self.cm(h_new) = Chunk {
            ptr: c.ptr + num_bytes,
            size: c.size - num_bytes,
            requested_size: 0,
            in_use: false,
            prev: h,
            next: h_neighbor,
            bin_num: -1,
            alloc_id: 0,
            region: c.region,
        };
        let cm = self.cm(h);
        cm.size = num_bytes;
        cm.next = h_new;
        if h_neighbor != NONE {
            self.cm(h_neighbor).prev = h_new;
        }
        self.insert_free_chunk(h_new);
    }

    /// `MergeChunks(h1, h2)`: h2 (the next of h1) is merged into h1.
    #[inline(always)]
    fn merge_chunks(&mut self, h1: u32, h2: u32) {
        let c2 = *self.c(h2);
        debug_assert!(!self.c(h1).in_use && !c2.in_use && c2.prev == h1);
        let h3 = c2.next;
        let c1 = self.cm(h1);
        c1.next = h3;
        c1.size += c2.size;
        if h3 != NONE {
            self.cm(h3).prev = h1;
        }
        self.deallocate_chunk(h2);
    }

    /// `TryToCoalesce(h, ignore_freed_at=false)`: merges with the next chunk, then into the
    /// previous one, when free. Returns the handle of the merged chunk.
    fn try_to_coalesce(&mut self, h: u32) -> u32 {
        let mut coalesced = h;
        let next = self.c(h).next;
        if next != NONE && !self.c(next).in_use {
            self.remove_free_chunk_from_bin(next);
            self.merge_chunks(h, next);
        }
        let prev = self.c(h).prev;
        if prev != NONE && !self.c(prev).in_use {
            coalesced = prev;
            self.remove_free_chunk_from_bin(prev);
            self.merge_chunks(prev, h);
        }
        coalesced
    }

    /// Marks `h` in use for request `req` (`FindChunkPtr`'s tail / `FinishChunkAllocation`).
    #[inline(always)]
    fn finish_chunk_allocation(&mut self, h: u32, req: &Request) -> Placement {
        let c = self.cm(h);
        c.in_use = true;
        c.requested_size = req.size;
        c.alloc_id = req.id;
        let (ptr, size, region) = (c.ptr, c.size, c.region);
        self.num_allocs += 1;
        self.stats.add_allocated(size, req.size);
        self.largest_alloc_size = self.largest_alloc_size.max(size);
        self.live.insert(req.id, h);
        Placement { addr: ptr, size, segment: region }
    }

    /// `ShouldSplitChunk` / the split test of `FindChunkPtr`: split when the chunk is at least
    /// twice the request, or keeping it whole would waste at least
    /// `max_internal_fragmentation_bytes_`.
    #[inline]
    fn should_split(&self, chunk_size: u64, rounded: u64) -> bool {
        chunk_size >= rounded * 2 || chunk_size as i64 - rounded as i64 >= self.max_internal_fragmentation_bytes
    }

    /// `FindChunkPtr`: from the request's bin upwards, the first free chunk (in (size, address)
    /// order) that fits: the smallest fitting chunk, lowest address on ties.
    #[inline(always)]
    fn find_chunk_ptr(&mut self, rounded: u64, req: &Request) -> Option<Placement> {
        // Upstream walks the bins from `BinNumForSize(rounded)` up, each from its first chunk,
        // skipping the chunks below `rounded` in the first: every chunk of a later bin is
        // larger than the request. That is the first chunk of at least `rounded` bytes in
        // (size, ptr) order over all bins.
        let (size, _, h) = self.free_chunks.range(0, rounded).next()?;
        self.remove_free_chunk_from_bin(h);
        if self.should_split(size, rounded) {
            self.split_chunk(h, rounded);
        }
        Some(self.finish_chunk_allocation(h, req))
    }

    /// `SubAllocator::Alloc`: the device's memory. In `validate`, a new region goes where the
    /// trace shows it: the allocation that made the pool grow sits at the new region's base,
    /// so its recorded address is the region's address (unless that overlaps a region we hold,
    /// i.e. the replay has already diverged).
    fn sub_alloc(&self, bytes: u64, dev: &mut DeviceMemory) -> Option<u64> {
        if let Some(addr) = dev.request_hint {
            if !self.overlaps(addr, bytes) {
                return dev.malloc_at(addr, bytes);
            }
        }
        dev.malloc(bytes)
    }

    fn overlaps(&self, addr: u64, size: u64) -> bool {
        let end = addr.saturating_add(size);
        self.regions.range(..end).next_back().is_some_and(|(&base, r)| base + r.size > addr)
    }

    /// Adds a region of `bytes` at `addr` holding one free chunk (the tail of `Extend`).
    fn add_region(&mut self, addr: u64, bytes: u64) -> u32 {
        self.stats.add_reserved(bytes);
        self.stats.num_device_alloc += 1;
        let h = self.allocate_chunk();
        *self.cm(h) = Chunk {
            ptr: addr,
            size: bytes,
            requested_size: 0,
            in_use: false,
            prev: NONE,
            next: NONE,
            bin_num: -1,
            alloc_id: 0,
            region: addr,
        };
        self.regions.insert(addr, Region { size: bytes, first: h });
        h
    }

    /// `Extend(alignment, rounded_bytes)`.
    fn extend(&mut self, rounded: u64, dev: &mut DeviceMemory) -> bool {
        let mut available_bytes = self.memory_limit.saturating_sub(self.stats.reserved);
        // Rounds available_bytes down to the nearest multiple of kMinAllocationSize.
        available_bytes = (available_bytes / K_MIN_ALLOCATION_SIZE) * K_MIN_ALLOCATION_SIZE;
        if rounded > available_bytes {
            return false;
        }
        // If curr_region_allocation_bytes_ is not enough to satisfy the allocation, keep
        // multiplying by a power of two until that is sufficient.
        let mut increased_allocation = false;
        while rounded > self.curr_region_allocation_bytes {
            self.curr_region_allocation_bytes = self.curr_region_allocation_bytes.saturating_mul(2);
            increased_allocation = true;
        }
        let mut bytes = self.curr_region_allocation_bytes.min(available_bytes);
        let mut mem_addr = self.sub_alloc(bytes, dev);
        // Try allocating less memory.
        while mem_addr.is_none() {
            // `RoundedBytes(bytes * kBackpedalFactor)`: size_t x float in float, truncated.
            let mut backpedal_bytes = rounded_bytes((bytes as f32 * K_BACKPEDAL_FACTOR) as u64);
            if backpedal_bytes >= bytes {
                backpedal_bytes = bytes - K_MIN_ALLOCATION_SIZE;
            }
            bytes = backpedal_bytes;
            if bytes < rounded {
                return false;
            }
            mem_addr = self.sub_alloc(bytes, dev);
        }
        if !increased_allocation {
            // Increase the region size of the next required allocation.
            self.curr_region_allocation_bytes = self.curr_region_allocation_bytes.saturating_mul(2);
        }
        let h = self.add_region(mem_addr.expect("allocated"), bytes);
        // `InsertFreeChunk(TryToCoalesce(h, false))`: a new region has no neighbours.
        self.insert_free_chunk(h);
        true
    }

    /// `DeallocateFreeRegions(rounded_bytes)`: with garbage collection on, returns every
    /// region with no chunk in use to the sub-allocator when that could make room.
    fn deallocate_free_regions(&mut self, rounded: u64, dev: &mut DeviceMemory) -> bool {
        if !self.opts.garbage_collection {
            return false;
        }
        let mut free_regions = Vec::new();
        let mut total_free_bytes = 0u64;
        for (&base, r) in &self.regions {
            let mut h = r.first;
            let mut any_use = false;
            while h != NONE {
                let c = self.c(h);
                if c.in_use {
                    any_use = true;
                    break;
                }
                h = c.next;
            }
            if !any_use {
                free_regions.push(base);
                total_free_bytes += r.size;
            }
        }
        if total_free_bytes == 0 {
            return false;
        }
        // Rough estimation to check whether deallocation can help.
        let available_bytes = self.memory_limit.saturating_sub(self.stats.reserved).saturating_add(total_free_bytes);
        if rounded > available_bytes {
            return false;
        }
        // `DeallocateRegions`.
        for base in free_regions {
            let r = self.regions.remove(&base).expect("region");
            let mut h = r.first;
            while h != NONE {
                let c = *self.c(h);
                if !c.in_use {
                    self.remove_free_chunk_from_bin(h);
                }
                self.deallocate_chunk(h);
                h = c.next;
            }
            dev.free(base, r.size);
            self.stats.sub_reserved(r.size);
            self.stats.num_device_free += 1;
        }
        true
    }

    /// `AllocateRawInternal`.
    fn allocate_raw_internal(&mut self, req: &Request, dev: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
        let rounded = rounded_bytes(req.size);
        if let Some(p) = self.find_chunk_ptr(rounded, req) {
            return Ok(p);
        }
        // Try to extend.
        if self.extend(rounded, dev) {
            if let Some(p) = self.find_chunk_ptr(rounded, req) {
                return Ok(p);
            }
        }
        // Reaching this point means that no chunks can satisfy the request. Also, the
        // unallocated bytes cannot satisfy the request. Before giving up, try deallocating
        // free regions so that the sub-allocator can combine them with the unallocated bytes
        // and form a larger region. (Upstream keeps the regions freed even when this fails.)
        if self.deallocate_free_regions(rounded, dev) && self.extend(rounded, dev) {
            if let Some(p) = self.find_chunk_ptr(rounded, req) {
                return Ok(p);
            }
        }
        self.stats.num_ooms += 1;
        Err(OutOfMemory { alloc_size: rounded })
    }

    /// `LargestBinnedFreeChunk`.
    pub fn largest_free_chunk(&self) -> u64 {
        self.free_chunks.range(0, 0).last().map_or(0, |(size, _, _)| size)
    }

    /// `GetFragmentation`: (free pool bytes - largest free chunk) / free pool bytes.
    pub fn fragmentation(&self) -> f64 {
        let available = self.stats.reserved as i64 - self.stats.allocated as i64;
        (available - self.largest_free_chunk() as i64) as f64 / available as f64
    }

    /// The chunk of a live allocation: (address, size).
    pub fn chunk_of(&self, id: u64) -> Option<(u64, u64)> {
        let h = self.live.get(id)?;
        (h != NONE).then(|| (self.c(h).ptr, self.c(h).size))
    }

    /// A seed at its recorded address: carved out of a free chunk of a region we hold, else
    /// a region of exactly its chunk (where the run had it, we do not know the region).
    fn place_seed(&mut self, addr: u64, size: u64, req: &Request, dev: &mut DeviceMemory) -> Option<Placement> {
        if let Some((&base, r)) = self.regions.range(..=addr).next_back() {
            if addr + size <= base + r.size {
                // Inside a region: the free chunk covering [addr, addr + size), if any.
                let mut h = r.first;
                while h != NONE {
                    let c = *self.c(h);
                    if c.ptr <= addr && addr < c.ptr + c.size {
                        if c.in_use || addr + size > c.ptr + c.size {
                            return None;
                        }
                        self.remove_free_chunk_from_bin(h);
                        let mut h = h;
                        if c.ptr < addr {
                            // The part below the seed stays free.
                            self.split_chunk(h, addr - c.ptr);
                            let low = h;
                            h = self.c(low).next;
                            self.remove_free_chunk_from_bin(h);
                            self.insert_free_chunk(low);
                        }
                        if self.c(h).size > size {
                            self.split_chunk(h, size);
                        }
                        return Some(self.finish_chunk_allocation(h, req));
                    }
                    h = c.next;
                }
                return None;
            }
        }
        if self.overlaps(addr, size) {
            return None;
        }
        let a = dev.malloc_at(addr, size)?;
        let h = self.add_region(a, size);
        Some(self.finish_chunk_allocation(h, req))
    }
}

impl Policy for Bfc {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn malloc(&mut self, req: &Request, dev: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
        if let Some(oom) = super::unservable(req.size, &mut self.stats) {
            return Err(oom);
        }
        if req.size == 0 {
            // `AllocateRawInternal` returns nullptr for 0 bytes (no chunk, no event).
            return Ok(Placement { addr: 0, size: 0, segment: 0 });
        }
        self.allocate_raw_internal(req, dev)
    }

    /// `DeallocateRawInternal`: `MarkFree`, then `InsertFreeChunk(TryToCoalesce(h))`.
    fn free_completed(&mut self, id: u64, _dev: &mut DeviceMemory) {
        let Some(h) = self.live.remove(id) else { return };
        if h == NONE {
            return;
        }
        let c = *self.c(h);
        self.stats.sub_allocated(c.size, c.requested_size);
        let cm = self.cm(h);
        cm.in_use = false;
        cm.requested_size = 0;
        let merged = self.try_to_coalesce(h);
        self.insert_free_chunk(merged);
    }

    /// A buffer live before the profiler started: its recorded chunk at its recorded address
    /// (a chunk the allocator had handed out, so it is not rounded or split again). Without an
    /// address (in-use bytes no event accounts for), a region of its own.
    fn seed_alloc(&mut self, req: &Request, dev: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
        if let Some(oom) = super::unservable(req.size.max(req.recorded_chunk.unwrap_or(0)), &mut self.stats) {
            return Err(oom);
        }
        let size = rounded_bytes(req.recorded_chunk.unwrap_or(req.size).max(req.size).max(1));
        if !self.opts.allow_growth && self.regions.is_empty() {
            // Preallocated: every seed sat in the one region, which starts at or below the
            // lowest address the trace shows. Create it there, as the first Extend did.
            let base = match (self.seed_region_base, req.recorded_addr) {
                (Some(b), Some(a)) => Some(b.min(a)),
                (b, a) => b.or(a),
            };
            let hint = std::mem::replace(&mut dev.request_hint, base);
            self.extend(size, dev);
            dev.request_hint = hint;
        }
        if self.opts.allow_growth && !self.seed_regions.is_empty() {
            // Growing: the regions that held the seeds, as far as the trace shows them. The
            // region sizes had doubled once per region (Extend): the next one is estimated
            // at 2 MiB x 2^regions, and at least the largest of them rounded up.
            let regions = std::mem::take(&mut self.seed_regions);
            let largest = regions.iter().map(|&(_, s)| s).max().unwrap_or(0);
            for &(addr, bytes) in &regions {
                if !self.overlaps(addr, bytes) {
                    if let Some(a) = dev.malloc_at(addr, bytes) {
                        let h = self.add_region(a, bytes);
                        self.insert_free_chunk(h);
                    }
                }
            }
            let mut curr = (2u64 << 20).saturating_mul(1u64 << regions.len().min(40));
            while curr < largest {
                curr = curr.saturating_mul(2);
            }
            self.curr_region_allocation_bytes = self.curr_region_allocation_bytes.max(curr);
        }
        match req.recorded_addr {
            Some(addr) => {
                if let Some(p) = self.place_seed(addr, size, req, dev) {
                    return Ok(p);
                }
            }
            None if !self.opts.allow_growth => {
                // In-use bytes no event accounts for, in the preallocated region: at its top,
                // out of the way of what the window allocates from the low end.
                if let Some((&base, r)) = self.regions.iter().next() {
                    let top = base + r.size;
                    if let Some(p) = top.checked_sub(size).and_then(|addr| self.place_seed(addr, size, req, dev)) {
                        return Ok(p);
                    }
                }
            }
            None => {}
        }
        match dev.malloc(size) {
            Some(a) => {
                let h = self.add_region(a, size);
                Ok(self.finish_chunk_allocation(h, req))
            }
            None => {
                self.stats.num_ooms += 1;
                Err(OutOfMemory { alloc_size: size })
            }
        }
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    fn segments(&self) -> Vec<SegmentInfo> {
        self.regions
            .iter()
            .map(|(&base, r)| {
                let (mut allocated, mut blocks, mut h) = (0u64, 0u32, r.first);
                while h != NONE {
                    let c = self.c(h);
                    if c.in_use {
                        allocated += c.size;
                    }
                    blocks += 1;
                    h = c.next;
                }
                SegmentInfo { addr: base, size: r.size, stream: 0, pool: 0, kind: "region", allocated_bytes: allocated, blocks }
            })
            .collect()
    }

    /// Every chunk of every region, in address order (`BFCAllocator::DumpMemoryLog`'s walk).
    fn blocks(&self) -> Option<Vec<BlockInfo>> {
        let mut out = Vec::new();
        for (&base, r) in &self.regions {
            let mut h = r.first;
            while h != NONE {
                let c = self.c(h);
                out.push(BlockInfo { segment: base, addr: c.ptr, size: c.size, allocated: c.in_use });
                h = c.next;
            }
        }
        Some(out)
    }
}

/// `jax:allocator=platform` (XLA_PYTHON_CLIENT_ALLOCATOR=platform): every buffer is its own
/// `cuMemAlloc` and is returned by `cuMemFree` when freed; nothing is cached. Each buffer takes
/// its size rounded up to 256 bytes (the alignment cudaMalloc guarantees); the driver's own
/// page granularity is not modelled.
pub struct Platform {
    name: String,
    live: super::id_map::IdMap<(u64, u64, u64)>,
    stats: Stats,
}

impl Platform {
    pub fn new(name: String) -> Self {
        Platform { name, live: Default::default(), stats: Stats::default() }
    }
}

impl Policy for Platform {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn malloc(&mut self, req: &Request, dev: &mut DeviceMemory) -> Result<Placement, OutOfMemory> {
        if let Some(oom) = super::unservable(req.size, &mut self.stats) {
            return Err(oom);
        }
        let size = rounded_bytes(req.size);
        if size == 0 {
            return Ok(Placement { addr: 0, size: 0, segment: 0 });
        }
        let addr = match dev.request_hint {
            Some(a) => dev.malloc_at(a, size),
            None => dev.malloc(size),
        };
        let Some(addr) = addr else {
            self.stats.num_ooms += 1;
            return Err(OutOfMemory { alloc_size: size });
        };
        self.stats.num_device_alloc += 1;
        self.stats.add_reserved(size);
        self.stats.add_allocated(size, req.size);
        self.live.insert(req.id, (addr, size, req.size));
        Ok(Placement { addr, size, segment: addr })
    }

    fn free_completed(&mut self, id: u64, dev: &mut DeviceMemory) {
        let Some((addr, size, req)) = self.live.remove(id) else { return };
        if size == 0 {
            return;
        }
        dev.free(addr, size);
        self.stats.num_device_free += 1;
        self.stats.sub_reserved(size);
        self.stats.sub_allocated(size, req);
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    fn segments(&self) -> Vec<SegmentInfo> {
        let mut v: Vec<SegmentInfo> = self
            .live
            .values()
            .filter(|l| l.1 > 0)
            .map(|&(addr, size, _)| SegmentInfo { addr, size, stream: 0, pool: 0, kind: "buffer", allocated_bytes: size, blocks: 1 })
            .collect();
        v.sort_by_key(|s| s.addr);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const BASE: u64 = 0x1000_0000;

    fn req(id: u64, size: u64) -> Request {
        Request { event: id as usize, id, size, stream: 0, pool: 0, recorded_addr: None, recorded_chunk: None }
    }

    fn bfc(allow_growth: bool, limit: u64) -> Bfc {
        Bfc::new(
            "test".into(),
            BfcSettings { allow_growth, garbage_collection: false, fragmentation_fraction: 0.0, memory_limit: Some(limit) },
        )
    }

    /// A device whose next region goes at `addr` (as validate places them).
    fn at(dev: &mut DeviceMemory, addr: u64) -> &mut DeviceMemory {
        dev.request_hint = Some(addr);
        dev
    }

    #[test]
    fn rounding_and_bins_follow_kmin_allocation_size() {
        // RoundedBytes: multiples of 256.
        assert_eq!([rounded_bytes(1), rounded_bytes(256), rounded_bytes(257), rounded_bytes(1000)], [256, 256, 512, 1024]);
        // BinNumForSize: bin b holds [256 << b, 256 << (b + 1)); the last bin is unbounded.
        assert_eq!(bin_num_for_size(256), 0);
        assert_eq!(bin_num_for_size(511), 0);
        assert_eq!(bin_num_for_size(512), 1);
        assert_eq!(bin_num_for_size(256 << 19), 19);
        assert_eq!(bin_num_for_size((256 << 20) - 1), 19);
        assert_eq!(bin_num_for_size(256 << 20), 20);
        assert_eq!(bin_num_for_size(80 << 30), 20);
    }

    #[test]
    fn best_fit_by_size_then_address_and_the_split_rule() {
        // One preallocated 1 MiB region at BASE; chunks a..f carved in order from its low end.
        let mut p = bfc(false, MIB);
        let mut dev = DeviceMemory::new(None);
        let sizes = [1024u64, 256, 2048, 256, 1024, 256];
        let mut addr = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let d = at(&mut dev, BASE);
            addr.push(p.malloc(&req(i as u64, s), d).unwrap().addr);
            d.clear_hints();
        }
        // FindChunkPtr splits every request off the low end of the big free chunk.
        let mut expect = BASE;
        for (i, &s) in sizes.iter().enumerate() {
            assert_eq!(addr[i], expect);
            expect += s;
        }
        assert_eq!(p.stats().reserved, MIB, "one region of memory_limit");
        // Free a (1024 @ BASE), c (2048 @ BASE+1280), e (1024 @ BASE+3584): three holes.
        for id in [0, 2, 4] {
            p.free_completed(id, &mut dev);
        }
        // 1000 B -> 1024: the smallest chunk that fits, lowest address among equal sizes: a's.
        assert_eq!(p.malloc(&req(10, 1000), &mut dev).unwrap(), Placement { addr: BASE, size: 1024, segment: BASE });
        // Again: e's hole (the other 1024-byte chunk), not c's larger one.
        assert_eq!(p.malloc(&req(11, 1024), &mut dev).unwrap().addr, BASE + 3584);
        // 1500 B -> 1536 from c's 2048-byte hole: 2048 < 2 * 1536 and the 512-byte rest is
        // under the 128 MiB cap: no split, the caller gets all 2048 bytes.
        assert_eq!(p.malloc(&req(12, 1500), &mut dev).unwrap(), Placement { addr: BASE + 1280, size: 2048, segment: BASE });
        // 256 B: no 256-byte hole left; the smallest free chunk is the tail of the region.
        let tail = BASE + sizes.iter().sum::<u64>();
        assert_eq!(p.malloc(&req(13, 1), &mut dev).unwrap(), Placement { addr: tail, size: 256, segment: BASE });
        assert_eq!(p.stats().allocated, 1024 + 256 + 2048 + 256 + 1024 + 256 + 256);
    }

    #[test]
    fn split_rule_internal_fragmentation_cap() {
        // A 300 MiB free chunk (one preallocated region).
        let cases = [
            // (request, fragmentation_fraction, chunk given): 200 MiB: 300 < 400 and 100 MiB
            // < 128 MiB -> the whole 300 MiB chunk.
            (200 * MIB, 0.0, 300 * MIB),
            // 170 MiB: 300 < 340 but 130 MiB >= 128 MiB -> split.
            (170 * MIB, 0.0, 170 * MIB),
            // 150 MiB: 300 >= 2 x 150 -> split.
            (150 * MIB, 0.0, 150 * MIB),
            // With fragmentation_fraction 0.25 of the 300 MiB limit the cap is 75 MiB: 200 MiB
            // leaves 100 MiB >= 75 MiB -> split.
            (200 * MIB, 0.25, 200 * MIB),
        ];
        for (request, fraction, chunk) in cases {
            let mut p = Bfc::new(
                "t".into(),
                BfcSettings {
                    allow_growth: false,
                    garbage_collection: false,
                    fragmentation_fraction: fraction,
                    memory_limit: Some(300 * MIB),
                },
            );
            let mut dev = DeviceMemory::new(None);
            let got = p.malloc(&req(0, request), &mut dev).unwrap();
            assert_eq!(got.size, chunk, "request {request} fraction {fraction}");
            assert_eq!(p.largest_free_chunk(), 300 * MIB - chunk);
        }
    }

    #[test]
    fn free_coalesces_with_next_then_previous() {
        let mut p = bfc(false, 4096);
        let mut dev = DeviceMemory::new(None);
        for id in 0..4 {
            p.malloc(&req(id, 1024), &mut dev).unwrap();
        }
        assert_eq!(p.largest_free_chunk(), 0);
        p.free_completed(0, &mut dev);
        p.free_completed(2, &mut dev);
        // Two separate 1 KiB holes: fragmentation = (2048 - 1024) / 2048.
        assert_eq!(p.largest_free_chunk(), 1024);
        assert_eq!(p.fragmentation(), 0.5);
        // Freeing b merges a, b and c into one 3 KiB chunk.
        p.free_completed(1, &mut dev);
        assert_eq!(p.largest_free_chunk(), 3072);
        assert_eq!(p.segments()[0].blocks, 2);
        p.free_completed(3, &mut dev);
        assert_eq!(p.largest_free_chunk(), 4096);
        assert_eq!(p.segments()[0].blocks, 1);
        assert_eq!(p.fragmentation(), 0.0);
        // Freeing an unknown or already freed id does nothing.
        p.free_completed(3, &mut dev);
        p.free_completed(99, &mut dev);
        assert_eq!(p.stats().allocated, 0);
    }

    #[test]
    fn allow_growth_regions_double_from_2_mib() {
        let mut p = bfc(true, 100 * MIB);
        let mut dev = DeviceMemory::new(None);
        // 1 MiB: a 2 MiB region; the next region target doubles to 4 MiB.
        p.malloc(&req(0, MIB), &mut dev).unwrap();
        // 1.5 MiB does not fit in the remaining 1 MiB: a 4 MiB region (target -> 8 MiB).
        p.malloc(&req(1, 3 * MIB / 2), &mut dev).unwrap();
        // 20 MiB: the target doubles 8 -> 16 -> 32 MiB until it fits, and is not doubled again.
        p.malloc(&req(2, 20 * MIB), &mut dev).unwrap();
        // 40 MiB: 32 -> 64 MiB, but only 100 - 38 = 62 MiB are left under the limit.
        p.malloc(&req(3, 40 * MIB), &mut dev).unwrap();
        let mut sizes: Vec<u64> = p.segments().iter().map(|s| s.size).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![2 * MIB, 4 * MIB, 32 * MIB, 62 * MIB]);
        assert_eq!(p.pool_bytes(), 100 * MIB);
        // Nothing is left: 1 more MiB is an OOM, and the failed request changes nothing.
        let before = p.stats().clone();
        assert_eq!(p.malloc(&req(4, 23 * MIB), &mut dev), Err(OutOfMemory { alloc_size: 23 * MIB }));
        assert_eq!(p.stats().allocated, before.allocated);
        assert_eq!(p.stats().reserved, before.reserved);
        assert_eq!(p.stats().num_ooms, 1);
    }

    #[test]
    fn extend_backs_off_by_0_9_when_the_device_refuses() {
        // Preallocating 100 MiB on a device with 64 MiB free: Extend retries with
        // RoundedBytes(bytes * 0.9f) until the sub-allocator succeeds.
        let mut p = bfc(false, 100 * MIB);
        let mut dev = DeviceMemory::new(Some(64 * MIB));
        p.malloc(&req(0, 256), &mut dev).unwrap();
        let mut bytes = 100 * MIB;
        while bytes > 64 * MIB {
            bytes = rounded_bytes((bytes as f32 * 0.9f32) as u64);
        }
        // 100 -> 90 -> 81 -> 72.9 -> 65.61 -> 59.049 MiB (each rounded up to 256 bytes).
        assert!(bytes > 59 * MIB && bytes < 60 * MIB);
        assert_eq!(p.pool_bytes(), bytes);
        // A request larger than what the device can give at all fails once the back-off goes
        // below it.
        let mut p = bfc(false, 100 * MIB);
        let mut dev = DeviceMemory::new(Some(10 * MIB));
        assert_eq!(p.malloc(&req(0, 20 * MIB), &mut dev), Err(OutOfMemory { alloc_size: 20 * MIB }));
        assert_eq!(p.pool_bytes(), 0);
    }

    #[test]
    fn garbage_collection_frees_whole_free_regions_to_fit_a_larger_one() {
        for gc in [false, true] {
            let mut p = Bfc::new(
                "t".into(),
                BfcSettings { allow_growth: true, garbage_collection: gc, fragmentation_fraction: 0.0, memory_limit: Some(8 * MIB) },
            );
            let mut dev = DeviceMemory::new(None);
            p.malloc(&req(0, 2 * MIB), &mut dev).unwrap(); // region 2 MiB, next target 4 MiB
            p.free_completed(0, &mut dev);
            // 7 MiB: the free 2 MiB chunk is too small and only 6 MiB are left to extend.
            let r = p.malloc(&req(1, 7 * MIB), &mut dev);
            if gc {
                // DeallocateFreeRegions returns the 2 MiB region (8 - 2 + 2 >= 7), then
                // Extend doubles the target 4 -> 8 MiB and gets all 8 MiB; the request takes the
                // whole chunk (8 < 2 x 7 and 1 MiB < 128 MiB: no split).
                assert_eq!(r.unwrap().size, 8 * MIB);
                assert_eq!(p.pool_bytes(), 8 * MIB);
                assert_eq!(p.segments().len(), 1);
                assert_eq!(dev.used, 8 * MIB);
            } else {
                assert_eq!(r, Err(OutOfMemory { alloc_size: 7 * MIB }));
                assert_eq!(p.pool_bytes(), 2 * MIB);
            }
        }
    }

    #[test]
    fn validate_places_new_regions_at_the_recorded_address() {
        let mut p = bfc(true, 64 * MIB);
        let mut dev = DeviceMemory::new(None);
        let r0 = p.malloc(&req(0, MIB), at(&mut dev, 0x5000_0000)).unwrap();
        assert_eq!(r0, Placement { addr: 0x5000_0000, size: MIB, segment: 0x5000_0000 });
        // A second region below the first, where the "driver" put it.
        let r1 = p.malloc(&req(1, 3 * MIB), at(&mut dev, 0x4000_0000)).unwrap();
        assert_eq!(r1.segment, 0x4000_0000);
        // Equal-size holes in both regions: the lower address wins the tie.
        p.free_completed(0, &mut dev);
        p.free_completed(1, &mut dev);
        dev.clear_hints();
        let r2 = p.malloc(&req(2, 512 * 1024), &mut dev).unwrap();
        assert_eq!(r2.addr, 0x5000_0000, "the 2 MiB region's whole chunk is the best fit");
        // A hint inside a region we hold is ignored (the replay diverged): simulated address.
        let r3 = p.malloc(&req(3, 16 * MIB), at(&mut dev, 0x4000_0000 + MIB)).unwrap();
        assert_ne!(r3.segment, 0x4000_0000 + MIB);
    }

    #[test]
    fn seeds_take_their_recorded_chunk_and_address() {
        let mut p = bfc(true, 64 * MIB);
        let mut dev = DeviceMemory::new(None);
        let mut seed = req(0, 1000);
        seed.recorded_addr = Some(0x7000_0000);
        seed.recorded_chunk = Some(4096);
        let s = p.seed_alloc(&seed, &mut dev).unwrap();
        assert_eq!(s, Placement { addr: 0x7000_0000, size: 4096, segment: 0x7000_0000 });
        assert_eq!(p.stats().allocated, 4096);
        // Freed, its chunk is reusable.
        p.free_completed(0, &mut dev);
        assert_eq!(p.largest_free_chunk(), 4096);
        // A seed inside a region we hold is carved out at its address.
        // (8 KiB does not fit the free 4 KiB chunk: a 2 MiB region at the hint.)
        p.malloc(&req(1, 8192), at(&mut dev, 0x6000_0000)).unwrap();
        let mut seed = req(2, 300);
        seed.recorded_addr = Some(0x6000_0000 + 16384);
        seed.recorded_chunk = Some(512);
        assert_eq!(p.seed_alloc(&seed, &mut dev).unwrap(), Placement { addr: 0x6000_0000 + 16384, size: 512, segment: 0x6000_0000 });
        let blocks: u32 = p.segments().iter().find(|s| s.addr == 0x6000_0000).unwrap().blocks;
        assert_eq!(blocks, 4, "in use 8 KiB | free 8 KiB | seed 512 | free rest");
        assert_eq!(p.stats().allocated, 8192 + 512);
        // The 8 KiB below the seed is a free chunk like any other.
        assert_eq!(p.malloc(&req(3, 8192), &mut dev).unwrap().addr, 0x6000_0000 + 8192);
    }

    #[test]
    fn seeds_of_a_preallocated_allocator_share_its_one_region() {
        // 1 MiB preallocated; the trace's lowest address is BASE, its seeds at BASE + 4096 and
        // BASE + 8192, then 2 KiB no event accounts for.
        let mut md = crate::trace::TraceMetadata::new("test");
        md.seeded = true;
        md.extra.insert("seed".into(), serde_json::json!({"lowest_address": BASE}));
        let ctx = PolicyContext { metadata: &md, device: None, capacity: None };
        let mut p = bfc(false, MIB).with_trace(&ctx);
        let mut dev = DeviceMemory::new(None);
        for (id, off) in [(0u64, 4096u64), (1, 8192)] {
            let mut s = req(id, 1000);
            s.recorded_addr = Some(BASE + off);
            s.recorded_chunk = Some(1024);
            assert_eq!(p.seed_alloc(&s, &mut dev).unwrap(), Placement { addr: BASE + off, size: 1024, segment: BASE });
        }
        let unknown = req(2, 2048);
        assert_eq!(p.seed_alloc(&unknown, &mut dev).unwrap(), Placement { addr: BASE + MIB - 2048, size: 2048, segment: BASE });
        assert_eq!((p.pool_bytes(), p.segments().len()), (MIB, 1));
        // The window's first allocation takes the smallest hole: the 3 KiB between the seeds.
        assert_eq!(p.malloc(&req(3, 3000), &mut dev).unwrap().addr, BASE + 5120);
        // Then the 4 KiB below the first seed.
        assert_eq!(p.malloc(&req(4, 4000), &mut dev).unwrap().addr, BASE);
    }

    #[test]
    fn zero_byte_requests_take_nothing() {
        let mut p = bfc(true, MIB);
        let mut dev = DeviceMemory::new(None);
        assert_eq!(p.malloc(&req(0, 0), &mut dev).unwrap().size, 0);
        p.free_completed(0, &mut dev);
        assert_eq!((p.stats().allocated, p.stats().reserved), (0, 0));
    }

    #[test]
    fn platform_allocator_gives_each_buffer_its_own_device_allocation() {
        let mut p = Platform::new("jax:allocator=platform".into());
        let mut dev = DeviceMemory::new(Some(MIB));
        let a = p.malloc(&req(0, 1000), &mut dev).unwrap();
        assert_eq!(a.size, 1024);
        p.malloc(&req(1, 512 * 1024), &mut dev).unwrap();
        assert_eq!(p.stats().reserved, 1024 + 512 * 1024);
        p.free_completed(0, &mut dev);
        assert_eq!(p.stats().reserved, 512 * 1024);
        assert_eq!(dev.used, 512 * 1024);
        assert!(p.malloc(&req(2, MIB), &mut dev).is_err());
    }
}
