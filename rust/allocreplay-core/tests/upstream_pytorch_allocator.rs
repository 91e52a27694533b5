//! Upstream PyTorch's tests of the CUDA caching allocator, ported onto the `pytorch` policy.
//!
//! Source: pytorch/pytorch `test/test_cuda.py` at commit
//! 000e43cdff99f30291164c1f2e90133f19fa83fb (the version with `TestCudaMallocAsync`,
//! `TestMemPool`, `torch.accelerator`), and `test/test_cuda_expandable_segments.py` at
//! 079f90097f3a95c53dee49374203a895885478f4, which runs `TestCuda` and `TestMemPool` again with
//! `expandable_segments:True`: the `TestCuda` tests below run under both settings, as there.
//! Every expected value is the one upstream's test states or computes (its helpers, such as
//! `power2_div`, are ported literally), never one read off this engine.
//!
//! Mapping. A tensor of `n` bytes is a request of `n` bytes (`torch.rand(k)`: `4 * k`,
//! `torch.ones(k, dtype=int8)`: `k`); `del t` is `free_requested` + `free_completed` (no stream
//! holds it up); `torch.cuda.empty_cache()` is `Policy::empty_cache`. A `torch.cuda.Stream` is a
//! request stream, a graph's or `MemPool`'s private pool a request pool (`Request::pool`). The
//! device is an H200 as torch reports it (`total_memory` 150,109,880,320 bytes, the device of
//! tests/import_pytorch.rs's capture): the `DeviceMemory` capacity (what `cudaMalloc` can take;
//! the CUDA context and other processes are not modelled), and `mem_get_info()`'s total.
//! `set_per_process_memory_fraction(f)` is the option `per_process_memory_fraction:f`, which
//! caps the allocator at `(size_t)(f * total)` as `setMemoryFraction` does. Stats:
//! `memory_allocated()` / `active_bytes.all.*` / `allocated_bytes.all.*` = `Stats::allocated`
//! (no stream holds a block, so active = allocated), `requested_bytes.all.*` =
//! `Stats::requested`, `max_memory_reserved()` = `Stats::peak_reserved` (each test starts from a
//! fresh allocator, as upstream's `reset_peak_memory_stats`); a cumulative stat's delta
//! (`*.allocated`) across one request is the current value's delta, as nothing is freed in
//! between. Per-pool stats (`segment.small_pool.current`, ...) are summed from
//! `Policy::segments` / `Policy::blocks` by the segment's kind. An OOM upstream (a raised
//! `OutOfMemoryError`) is an `Err(OutOfMemory)`.
//!
//! Settings changed mid-run. The policy's settings are fixed when it is built; upstream's
//! `_set_allocator_settings` changes them between requests:
//! - `test_allocator_settings` is split into one allocator per setting, each holding the
//!   tensors upstream holds at that point: at every step upstream measures, its cache has no
//!   free block (every tensor fills its segment exactly, and `empty_cache` ran), so the measured
//!   block depends only on the settings in force.
//! - `test_max_split_expandable` and `test_garbage_collect_expandable` mix expandable and
//!   ordinary segments in one allocator, which one policy cannot: each runs twice, all
//!   `expandable_segments:False` and all `expandable_segments:True`, asserting what upstream
//!   asserts (the OOM, and that the last request is served). The mixed free list itself is not
//!   exercised (API gap: no mid-run setting changes).
//! - `test_set_per_process_memory_fraction` sets the fraction after its first 4 KiB tensor; the
//!   policy has it from the start, which changes nothing: that tensor's 2 MiB segment is far
//!   under the cap.
//!
//! Skipped (semantics the engine does not model):
//! - Host / pinned memory: `test_pinned_memory_*`, `test_host_memory_stats`,
//!   `test_cudart_register`, `test_caching_pinned_memory`, `TestCachingHostAllocatorCudaGraph.*`.
//! - Streams, events and GPU timing (when a stream's work ends decides when a block returns):
//!   `test_record_stream`, `test_record_stream_on_shifted_view`,
//!   `test_caching_allocator_record_stream_oom` (100 x 160 MiB freed behind `record_stream`; it
//!   asserts only that no OOM is raised, which depends on when the GPU finishes `y += x`),
//!   `test_streaming_backwards_*`, `test_graph_record_stream`, `test_graph_capture_reclaim_*`.
//! - Graph lifetime: a private pool released when its graph is deleted (the engine never
//!   releases private pools): the post-delete half of
//!   `test_graph_memory_stats_and_use_result_after_destroy_graph` (its capture half is ported),
//!   `test_graph_two_successive`, `test_graph_three_successive`, `test_graph_concurrent_replay`,
//!   `test_memory_stats_of_multiple_generators_and_graphs` (also: generator-state allocations),
//!   `TestBlockStateAbsorption.*` (checkpointing a pool's state), `test_cuda_graph_*`.
//! - `MemPool` features: `use_on_oom` (`test_mempool_limited_memory_with_allocator`,
//!   `test_deleted_mempool_not_used_on_oom`), `no_split` (`test_mempool_no_split`), pluggable
//!   allocators' callbacks and lifetimes (`test_mempool_empty_cache_inactive`,
//!   `test_tensor_delete_after_allocator_delete`, `test_mempool_expandable`: a pluggable pool is
//!   never expandable), `test_mempool_id`, `test_mempool_multithread` (ids only).
//! - Kernels' own allocations (cuBLAS workspaces, matmul temporaries, autocast caches, compiled
//!   regions): `test_cublas_workspace_explicit_allocation`, `test_matmul_memory_use`,
//!   `test_autocast_cache_leak`, `test_memory_compile_regions`,
//!   `test_repeat_graph_capture_cublas_workspace_memory`, `test_graph_capture_oom` (capture).
//! - History recording / snapshots' frames and plots: `test_memory_snapshot*`,
//!   `test_memory_plots*`, `test_cpp_memory_snapshot_pickle`, `test_memory_profiler_viz`,
//!   `test_direct_traceback`, `test_cycles`, `TestFXMemoryProfiler.*`.
//! - `test_allocator_backend`: which backend torch selects at load time (`backend:` is parsed
//!   from the environment before, and apart from, the other options); `pytorch` refuses
//!   `backend:cudaMallocAsync` by design (that allocator is the policy `cuda-async`).
//! - `test_allocator_fuzz`: random requests whose only assertions are the tensors' contents.
//! - `test_allocate_in_thread_to_pool`: two threads' requests interleaved by the scheduler.
//! - `test_cachingAllocator_raw_alloc`'s first half (`caching_allocator_enable(False)`: no
//!   caching allocator at all); its second half is ported.
//! - `test_get_per_process_memory_fraction`'s `torch.rand(3)` values (random); its limits are
//!   ported. `test_set_per_process_memory_fraction`'s `TypeError` for the int `1` (a string
//!   option has no Python type).
//! - Everything else in the file exercises no allocator decision (devices, RNG, kernels, NVML,
//!   autocast, optimizers, GDS, green contexts).
//!
//! Not assertable (API gaps): the cumulative `active_bytes.all.freed` of `test_memory_stats`
//! (`Stats` has no cumulative counters) and `reset_peak_memory_stats` (no reset: its effect,
//! each peak set to its current value, is asserted on the current values).

mod common;

use std::collections::HashMap;

use allocreplay_core::device::{DeviceMemory, Stats};
use allocreplay_core::engine::BoxedPolicy;
use allocreplay_core::policy::pytorch_config::PytorchConfig;
use allocreplay_core::policy::{OutOfMemory, Placement, PolicyContext};
use allocreplay_core::registry::build;
use allocreplay_core::trace::DeviceInfo;
use allocreplay_core::{Error, TraceMetadata};
use common::policy_driver::PolicyDriver;

/// `torch.cuda.get_device_properties(0).total_memory` (and `mem_get_info()[1]`) of the device.
const TOTAL_MEMORY: u64 = 150_109_880_320;
const MB: u64 = 1024 * 1024;

/// `EXPANDABLE_SEGMENTS` off (test_cuda.py) and on (test_cuda_expandable_segments.py).
const RUNNERS: [&str; 2] = ["", "expandable_segments:True"];

/// Joins PYTORCH_CUDA_ALLOC_CONF parts.
fn conf(parts: &[&str]) -> String {
    parts.iter().filter(|p| !p.is_empty()).copied().collect::<Vec<_>>().join(",")
}

fn metadata() -> TraceMetadata {
    let mut md = TraceMetadata::new("pytorch");
    md.devices = vec![DeviceInfo { index: 0, total_memory: Some(TOTAL_MEMORY), ..Default::default() }];
    md
}

/// The `pytorch` policy under PYTORCH_CUDA_ALLOC_CONF `conf`, as the registry builds it.
fn try_build(conf: &str) -> Result<BoxedPolicy, Error> {
    let md = metadata();
    let ctx = PolicyContext { metadata: &md, device: md.devices.first(), capacity: None };
    let spec = if conf.is_empty() { "pytorch".to_string() } else { format!("pytorch:{conf}") };
    build(&spec, &ctx)
}

/// `torch._C._accelerator_setAllocatorSettings(conf)` raises `ValueError`: a spec error.
fn assert_rejected(conf: &str) {
    match try_build(conf) {
        Err(Error::PolicySpec(_)) => {}
        Err(e) => panic!("{conf}: rejected, but not as a spec error: {e}"),
        Ok(_) => panic!("{conf}: accepted"),
    }
}

/// One device under one allocator: tensors are allocation ids; `del t` is `free(t)`.
type Cuda = PolicyDriver;

impl Cuda {
    fn new(conf: &str) -> Cuda {
        let policy = try_build(conf).unwrap_or_else(|e| panic!("{conf}: {e}"));
        Cuda::over(policy, DeviceMemory::new(Some(TOTAL_MEMORY)))
    }

    /// A tensor of `bytes` on `stream`, in pool `pool` (0: the default pool).
    fn alloc_on(&mut self, bytes: u64, stream: i64, pool: u32) -> Result<(u64, Placement), OutOfMemory> {
        self.malloc_on(bytes, stream, pool)
    }

    fn alloc(&mut self, bytes: u64) -> Result<u64, OutOfMemory> {
        self.alloc_on(bytes, 0, 0).map(|(id, _)| id)
    }

    fn empty_cache(&mut self) {
        self.policy.empty_cache(&mut self.dev);
    }

    fn stats(&self) -> Stats {
        self.policy.stats().clone()
    }

    /// The segments of pool `pool` (`torch.cuda.memory.memory_snapshot(pool.id)`,
    /// `pool.snapshot()`).
    fn segments_of_pool(&self, pool: u32) -> usize {
        self.policy.segments().iter().filter(|s| s.pool == pool).count()
    }

    /// Active bytes of pool `pool` (the sum of its segments' `active_size`).
    fn active_of_pool(&self, pool: u32) -> u64 {
        self.policy.segments().iter().filter(|s| s.pool == pool).map(|s| s.allocated_bytes).sum()
    }

    /// `memory_stats()`'s `segment.`, `reserved_bytes.`, `active.` and `active_bytes.` of the
    /// `small_pool` or `large_pool` (`kind`), `.current`.
    fn pool_stats(&self, kind: &str) -> [i64; 4] {
        let segments = self.policy.segments();
        let kind_of: HashMap<u64, &str> = segments.iter().map(|s| (s.addr, s.kind)).collect();
        let mut st = [0i64; 4];
        for s in segments.iter().filter(|s| s.kind == kind) {
            st[0] += 1;
            st[1] += s.size as i64;
        }
        for b in self.policy.blocks().expect("pytorch lists its blocks") {
            if b.allocated && kind_of.get(&b.segment) == Some(&kind) {
                st[2] += 1;
                st[3] += b.size as i64;
            }
        }
        st
    }
}

/// c10 `format_size` (the size in an OOM message).
fn format_size(size: u64) -> String {
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= 1048576 {
        format!("{:.2} KiB", size as f64 / 1024.0)
    } else if size <= 1073741824 {
        format!("{:.2} MiB", size as f64 / 1048576.0)
    } else {
        format!("{:.2} GiB", size as f64 / 1073741824.0)
    }
}

// test_cuda.py: TestCuda.test_memory_allocation
#[test]
fn test_memory_allocation() {
    for runner in RUNNERS {
        let mut c = Cuda::new(runner);
        c.empty_cache();
        let size = 1;
        let prev = c.stats().allocated;
        let mem = c.alloc(size).unwrap();
        assert!(c.stats().allocated > prev, "{runner}");
        c.free(mem);
        assert_eq!(c.stats().allocated, prev, "{runner}");
    }
}

// test_cuda.py: TestCuda.test_memory_stats
#[test]
fn test_memory_stats() {
    for runner in RUNNERS {
        let mut c = Cuda::new(runner);
        c.empty_cache();
        let s = c.stats();
        let (prev_allocated, prev_reserved) = (s.allocated, s.reserved);
        let (prev_max_allocated, prev_max_reserved) = (s.peak_allocated, s.peak_reserved);
        assert_eq!(prev_allocated, prev_max_allocated, "{runner}");
        assert_eq!(prev_reserved, prev_max_reserved, "{runner}");
        // Activate 1kB memory
        let prev_active_current = c.stats().allocated;
        // tmp = torch.randn(256, device="cuda")
        let tmp = c.alloc(256 * 4).unwrap();
        // Detect if the current active memory is 1kB
        assert_eq!(c.stats().allocated, 1024 + prev_active_current, "{runner}");
        // (active_bytes.all.freed == 0: no cumulative counter, see the top.)
        c.free(tmp);
        c.empty_cache();
        assert_eq!(c.stats().allocated, prev_active_current, "{runner}");
        // (active_bytes.all.freed == 1024: no cumulative counter.)
        // reset_peak_memory_stats() sets each peak to its current value:
        assert_eq!(c.stats().allocated, prev_max_allocated, "{runner}");
        assert_eq!(c.stats().reserved, prev_max_reserved, "{runner}");
    }
}

// test_cuda.py: TestCuda.test_out_of_memory
#[test]
fn test_out_of_memory() {
    for runner in RUNNERS {
        let mut c = Cuda::new(runner);
        let tensor = c.alloc(1024 * 4).unwrap(); // torch.zeros(1024)
        let before = c.stats();
        // "Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of"
        let oom = c.alloc(1024 * 1024 * 1024 * 800000000).unwrap_err();
        assert_eq!(format_size(oom.alloc_size), "800000000.00 GiB", "{runner}");
        // "Tried to allocate more than 1EB memory"
        assert!(c.alloc(1024 * 1024 * 1024 * 8000000000).is_err(), "{runner}");
        // ensure out of memory error doesn't disturb subsequent kernel
        let after = c.stats();
        assert_eq!((after.allocated, after.reserved), (before.allocated, before.reserved), "{runner}");
        c.free(tensor);
        assert_eq!(c.stats().allocated, 0, "{runner}");
    }
}

// test_cuda.py: TestCuda.test_out_of_memory_retry
#[test]
fn test_out_of_memory_retry() {
    for runner in RUNNERS {
        let mut c = Cuda::new(runner);
        c.empty_cache();
        let total_memory = TOTAL_MEMORY;
        let size = (total_memory as f64 * 0.5) as u64;
        let a = c.alloc(size).unwrap_or_else(|e| panic!("{runner}: {e:?}"));
        assert!(c.alloc(size).is_err(), "{runner}: b served beside a");
        c.free(a);
        let b = c.alloc(size).unwrap_or_else(|e| panic!("{runner}: b after del a: {e:?}"));
        c.free(b);
        c.empty_cache();
    }
}

// test_cuda.py: TestCuda.test_set_per_process_memory_fraction
#[test]
fn test_set_per_process_memory_fraction() {
    // test invalid fraction value.
    for bad in ["-0.1", "2.0"] {
        assert_rejected(&format!("per_process_memory_fraction:{bad}"));
    }
    for runner in RUNNERS {
        // set_per_process_memory_fraction(0.5, 0) (set after `tensor` upstream; see the top).
        let mut c = Cuda::new(&conf(&[runner, "per_process_memory_fraction:0.5"]));
        let tensor = c.alloc(1024 * 4).unwrap(); // torch.zeros(1024)
        c.empty_cache();
        let total_memory = TOTAL_MEMORY;

        // test 0.499 allocation is ok.
        let application = (total_memory as f64 * 0.499) as u64 - c.stats().peak_reserved;
        let tmp_tensor = c.alloc(application).unwrap_or_else(|e| panic!("{runner}: 0.499: {e:?}"));
        c.free(tmp_tensor);
        c.empty_cache();

        let application = (total_memory as f64 * 0.5) as u64;
        // it will get OOM when try to allocate more than half memory.
        assert!(c.alloc(application).is_err(), "{runner}: half the memory served");

        // ensure out of memory error doesn't disturb subsequent kernel
        assert_eq!(c.stats().allocated, 1024 * 4, "{runner}");
        c.free(tensor);
    }
}

// test_cuda.py: TestCuda.test_get_per_process_memory_fraction (the limiting cases; the
// torch.rand(3) values are random) and TestCudaMallocAsync.test_allocator_memory_fraction_setting
#[test]
fn test_per_process_memory_fraction_setting() {
    for value in ["1.0", "0.0", "0.5"] {
        let c = PytorchConfig::parse(&format!("per_process_memory_fraction:{value}")).unwrap();
        assert_eq!(c.per_process_memory_fraction, value.parse::<f64>().unwrap());
    }
    for bad in ["-0.1", "1.1"] {
        let e = PytorchConfig::parse(&format!("per_process_memory_fraction:{bad}")).unwrap_err().to_string();
        assert!(e.contains("per_process_memory_fraction is invalid"), "{bad}: {e}");
        assert_rejected(&format!("per_process_memory_fraction:{bad}"));
    }
}

/// test_max_split_expandable / test_garbage_collect_expandable's set-up: the fraction that
/// allows `120 MiB + pre_reserved`, computed as upstream computes it.
fn fraction_allowed_120mb(c: &Cuda) -> (f64, u64) {
    let mb = 1024 * 1024;
    let all_memory = TOTAL_MEMORY;
    let pre_reserved = c.stats().reserved;
    let total_allowed = 120 * mb + pre_reserved;
    let fraction_allowed = total_allowed as f64 / all_memory as f64;
    (fraction_allowed, total_allowed)
}

// test_cuda.py: TestCudaMallocAsync.test_max_split_expandable (split: all expandable_segments
// False, then all True; see the top)
#[test]
fn test_max_split_expandable() {
    for expandable in ["False", "True"] {
        let settings = format!("expandable_segments:{expandable},max_split_size_mb:40");
        let mut fresh = Cuda::new(&settings);
        fresh.empty_cache();
        let (fraction_allowed, total_allowed) = fraction_allowed_120mb(&fresh);
        assert_eq!((fraction_allowed * TOTAL_MEMORY as f64).round() as u64, total_allowed);
        let mut c = Cuda::new(&format!("{settings},per_process_memory_fraction:{fraction_allowed}"));
        let alloc = |c: &mut Cuda, n: u64| c.alloc(n * MB);
        let a = alloc(&mut c, 40).unwrap();
        let b = alloc(&mut c, 40).unwrap();
        let cc = alloc(&mut c, 40).unwrap();
        assert!(alloc(&mut c, 40).is_err(), "{settings}: a fourth 40 MiB under a 120 MiB cap");
        c.free(a);
        c.free(b);
        c.free(cc);
        // force release_cached_blocks to run with some expandable segments in the free list
        alloc(&mut c, 120).unwrap_or_else(|e| panic!("{settings}: 120 MiB after del a, b, c: {e:?}"));
    }
}

// test_cuda.py: TestCudaMallocAsync.test_garbage_collect_expandable (split: all
// expandable_segments False, then all True; see the top)
#[test]
fn test_garbage_collect_expandable() {
    for expandable in ["False", "True"] {
        let settings = format!("expandable_segments:{expandable},garbage_collection_threshold:0.5");
        let mut fresh = Cuda::new(&settings);
        fresh.empty_cache();
        let (fraction_allowed, total_allowed) = fraction_allowed_120mb(&fresh);
        assert_eq!(fraction_allowed * TOTAL_MEMORY as f64, total_allowed as f64);
        let mut c = Cuda::new(&format!("{settings},per_process_memory_fraction:{fraction_allowed}"));
        let alloc = |c: &mut Cuda, n: u64| c.alloc(n * MB);
        let a = alloc(&mut c, 40).unwrap();
        let b = alloc(&mut c, 40).unwrap();
        c.free(a);
        c.free(b);
        // causes GC to run.
        alloc(&mut c, 80).unwrap_or_else(|e| panic!("{settings}: 80 MiB after del a, b: {e:?}"));
    }
}

/// test_allocator_settings' helper, as upstream writes it (Python floats).
fn power2_div(size: u64, div_factor: u64) -> f64 {
    let mut pow2: u64 = 1;
    while pow2 < size {
        pow2 *= 2;
    }
    if pow2 == size {
        return pow2 as f64;
    }
    let step = pow2 as f64 / 2.0 / div_factor as f64;
    let mut ret = pow2 as f64 / 2.0;
    while ret < size as f64 {
        ret += step;
    }
    ret
}

/// One step of test_allocator_settings under settings `conf`: an allocator holding the tensors
/// `live` (their bytes), after `empty_cache`; returns the (allocated, requested) deltas of one
/// more tensor of `nbytes`.
fn allocator_settings_step(conf: &str, live: &[u64], nbytes: u64) -> (u64, u64) {
    let mut c = Cuda::new(conf);
    for &n in live {
        c.alloc(n).unwrap();
    }
    c.empty_cache();
    let (start_mem, start_requested) = (c.stats().allocated, c.stats().requested);
    c.alloc(nbytes).unwrap_or_else(|e| panic!("{conf}: {e:?}"));
    (c.stats().allocated - start_mem, c.stats().requested - start_requested)
}

// test_cuda.py: TestCudaMallocAsync.test_allocator_settings (split per setting; see the top)
#[test]
fn test_allocator_settings() {
    let nelems = 21 * 1024 * 1024;
    let nbytes = 4 * nelems; // floats are 4 bytes

    let nelems_big = 100 * 1024 * 1024;
    let nbytes_big = 4 * nelems_big; // floats are 4 bytes

    // x = torch.rand(nelems) under ""
    let (reg_mem, _) = allocator_settings_step("", &[], nbytes);
    assert_eq!(reg_mem, nbytes);

    // test roundup_power2_divisions single value syntax: y, x live
    let (pow2_div4_mem, requested) = allocator_settings_step("roundup_power2_divisions:4", &[nbytes], nbytes);
    assert_eq!(pow2_div4_mem as f64, power2_div(nbytes, 4));
    assert_eq!(requested, nbytes);

    // "garbage_collection_threshold:0.5", then with max_split_size_mb:40: should have reset the
    // power2 divisions now. z; x, y live.
    for settings in ["garbage_collection_threshold:0.5", "garbage_collection_threshold:0.5,max_split_size_mb:40"] {
        let (reg_mem, _) = allocator_settings_step(settings, &[nbytes, nbytes], nbytes);
        assert_eq!(reg_mem, nbytes, "{settings}");
    }

    // roundup_power2_divisions knob array syntax: w; x, y, z live
    let knob = "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]";
    let (pow2_div8_mem, _) = allocator_settings_step(knob, &[nbytes; 3], nbytes);
    assert_eq!(pow2_div8_mem as f64, power2_div(nbytes, 8));

    // v = torch.rand(nelems_big); x, y, z, w live
    let (pow2_div2_mem, _) = allocator_settings_step(knob, &[nbytes; 4], nbytes_big);
    assert_eq!(pow2_div2_mem as f64, power2_div(nbytes_big, 2));

    // "release_lock_on_cudamalloc:True": a new w; x, y, z, the old w, v live
    let (reg_mem, _) = allocator_settings_step("release_lock_on_cudamalloc:True", &[nbytes, nbytes, nbytes, nbytes, nbytes_big], nbytes);
    assert_eq!(reg_mem, nbytes);

    for bad in [
        "foo:1,bar:2",
        "garbage_collection_threshold:1.2",
        "max_split_size_mb:2",
        "release_lock_on_cudamalloc:none",
        "pinned_use_cuda_host_register:none",
        "pinned_num_register_threads:none",
        "pinned_num_register_threads:1024",
    ] {
        assert_rejected(bad);
    }
}

// test_cuda.py: TestCudaMallocAsync.test_cachingAllocator_raw_alloc (the caching allocator
// enabled: the second half)
#[test]
fn test_caching_allocator_raw_alloc() {
    let mut c = Cuda::new("");
    c.empty_cache();
    // size of allocation
    let raw_alloc_size = 1024 * 1024; // 1 MB
    let start = c.stats().requested;
    let mem_ptr = c.alloc(raw_alloc_size).unwrap();
    let finish = c.stats().requested;
    c.free(mem_ptr);
    // For an active caching allocator, result matches raw_alloc_size
    assert_eq!(finish - start, raw_alloc_size);
}

// test_cuda.py: TestCudaMallocAsync.test_raises_oom (max_split_size_mb_setting False, True)
#[test]
fn test_raises_oom() {
    for max_split_size_mb_setting in [false, true] {
        let mut c = Cuda::new(if max_split_size_mb_setting { "max_split_size_mb:1024" } else { "" });
        if max_split_size_mb_setting {
            c.empty_cache();
        }
        // torch.empty(1024 * 1024 * 1024 * 1024, device="cuda"): float32
        assert!(c.alloc(1024 * 1024 * 1024 * 1024 * 4).is_err(), "max_split_size_mb {max_split_size_mb_setting}");
    }
}

// test_cuda.py: TestCudaMallocAsync.test_notifies_oom (the observer is called on the OOM path,
// where `num_ooms` is counted)
#[test]
fn test_notifies_oom() {
    let mut c = Cuda::new("");
    let x = c.stats().num_ooms;
    assert!(c.alloc(1024 * 1024 * 1024 * 1024 * 4).is_err());
    assert_eq!(c.stats().num_ooms, x + 1);
}

// test_cuda.py: TestCuda.test_graph_memory_stats_and_use_result_after_destroy_graph, the
// pre-capture to post-capture deltas (not expandable segments); the post-delete half needs the
// graph's private pool released, which the engine does not model (see the top).
#[test]
fn test_graph_memory_stats_pre_to_post_capture() {
    let k_small_size: u64 = 1048576;
    let k_small_buffer: i64 = 2097152;
    let k_large_buffer: i64 = 20971520;
    let k_min_large_alloc: u64 = 10485760;
    let k_round_large: i64 = 2097152;

    let elem: u64 = 4;

    // this was annoying to write but stresses the expectations pretty rigorously
    let cases: [(u64, i64, i64, &str); 5] = [
        (512 / elem, 1, k_small_buffer, "small"),
        (k_small_size / elem, 2, 2 * k_small_buffer, "small"),
        ((k_small_size + 512) / elem, 1, k_large_buffer, "large"),
        ((k_min_large_alloc - 512) / elem, 2, 2 * k_large_buffer, "large"),
        (
            (k_min_large_alloc + 512) / elem,
            3,
            3 * (k_round_large * ((k_min_large_alloc as i64 + 512 + k_round_large - 1) / k_round_large)),
            "large",
        ),
    ];

    let mut c = Cuda::new("");
    c.empty_cache();
    let s: i64 = 1; // torch.cuda.Stream()
    for (case, (numel, delta_cuda_mallocs, delta_cuda_malloc_bytes, pool_string)) in cases.into_iter().enumerate() {
        let graph_pool = case as u32 + 1; // each CUDAGraph() captures into a new private pool
        let (delta_active_blocks, delta_active_bytes) = if pool_string == "small" {
            // one from "b" plus a sneaky two from CUDAGraph's one-element rng seed and offset
            // holders; + 1024 for CUDAGraph's rng seed and offset holders each
            (3, (numel * elem + 1024) as i64)
        } else {
            // We only check the large pool, which isn't affected by rng offset holder
            (1, (numel * elem) as i64)
        };

        // with torch.cuda.stream(s): a = torch.ones((numel,), device="cuda")
        let (a, _) = c.alloc_on(numel * elem, s, 0).unwrap();
        let precapture_stats = c.pool_stats(pool_string);

        // g.capture_begin(): the rng seed and offset holders (one int64 each, default pool)
        let mut graph_held = Vec::new();
        for _ in 0..2 {
            graph_held.push(c.alloc_on(8, s, 0).unwrap().0);
        }
        // b = a.clone(); for _ in range(5): b = b.clone() + 1
        let (mut b, _) = c.alloc_on(numel * elem, s, graph_pool).unwrap();
        for _ in 0..5 {
            let (t, _) = c.alloc_on(numel * elem, s, graph_pool).unwrap(); // b.clone()
            let (u, _) = c.alloc_on(numel * elem, s, graph_pool).unwrap(); // ... + 1
            c.free(t);
            c.free(b);
            b = u;
        }
        // g.capture_end()
        let postcapture_stats = c.pool_stats(pool_string);

        let expecteds = [delta_cuda_mallocs, delta_cuda_malloc_bytes, delta_active_blocks, delta_active_bytes];
        let names = ["segment", "reserved_bytes", "active", "active_bytes"];
        for i in 0..4 {
            let current = postcapture_stats[i] - precapture_stats[i];
            assert_eq!(
                current, expecteds[i],
                "Pre to post capture delta of {}.{pool_string}_pool.current = {current}, expected = {}, numel = {numel}",
                names[i], expecteds[i]
            );
        }

        // del a, b (and the graph: its pool is never released here); empty_cache()
        c.free(a);
        c.free(b);
        for h in graph_held {
            c.free(h);
        }
        c.empty_cache();
    }
}

// test_cuda.py: TestMemPool.test_mempool_empty_cache
#[test]
fn test_mempool_empty_cache() {
    let mut c = Cuda::new("");
    c.empty_cache();
    let pool = 1; // torch.cuda.MemPool()
    let (x, _) = c.alloc_on(1024 * 1024 * 4, 0, 0).unwrap();
    let (y, _) = c.alloc_on(1024 * 1024 * 4, 0, pool).unwrap(); // with torch.cuda.use_mem_pool(pool)
    c.free(y);
    c.free(x);
    // del pool
    assert!(!c.policy.segments().is_empty(), "expected more than one segment");
}

// test_cuda.py: TestMemPool.test_mempool_with_allocator (the pool's segments; the pluggable
// allocator's callbacks are not modelled)
#[test]
fn test_mempool_with_allocator() {
    let mut c = Cuda::new("");
    let pool = 1;
    let nelem_1mb = 1024 * 1024 / 4;
    let (_out_0, _) = c.alloc_on(nelem_1mb * 4, 0, pool).unwrap();
    let _out_non_pool = c.alloc(nelem_1mb * 4).unwrap();
    // pool should have 1 segment since we made a small allocation (1 MB) above and so the
    // CUDACachingAllocator packed it into a 2 MB buffer
    assert_eq!(c.segments_of_pool(pool), 1);
    let (_out_1, _) = c.alloc_on(nelem_1mb * 4, 0, pool).unwrap();
    // pool should still have 1 segment since we made another small allocation (1 MB) that got
    // packed into the existing 2 MB buffer
    assert_eq!(c.segments_of_pool(pool), 1);
    let (_out_2, _) = c.alloc_on(nelem_1mb * 4, 0, pool).unwrap();
    // pool now should have 2 segments since the CUDACachingAllocator had to make a new 2 MB
    // buffer to accommodate out_2
    assert_eq!(c.segments_of_pool(pool), 2);
    assert_eq!(c.segments_of_pool(pool), 2);
}

// test_cuda.py: TestMemPool.test_mempool_emptycache_multithread (the four threads' requests, one
// pool each)
#[test]
fn test_mempool_emptycache_multithread() {
    let num_threads = 4;
    let mut c = Cuda::new("");
    let pools: Vec<u32> = (1..=num_threads).collect();
    for &pool in &pools {
        let (x, _) = c.alloc_on(4 * 4, 0, pool).unwrap(); // torch.randn(4)
        c.free(x);
        c.empty_cache();
    }
    // empty_cache should have done nothing under mempool context
    for &p in &pools {
        assert_eq!(c.segments_of_pool(p), 1, "Expected to have a single segment");
    }
}

// test_cuda.py: TestMemPool.test_nested_mempool
#[test]
fn test_nested_mempool() {
    let mut c = Cuda::new("");
    c.empty_cache();
    let (pool1, pool2, pool3) = (1, 2, 3);
    let nelem_1mb = 1024 * 1024 / 4;
    let mut data = Vec::new();
    let mut allocate_data = |c: &mut Cuda, pool: u32| data.push(c.alloc_on(nelem_1mb * 20 * 4, 0, pool).unwrap().0);
    // with use_mem_pool(pool1): allocate; with pool2: allocate; with pool3: allocate; (pool2)
    // allocate; (pool1) allocate
    for pool in [pool1, pool2, pool3, pool2, pool1] {
        allocate_data(&mut c, pool);
    }
    assert_eq!(c.segments_of_pool(pool1), 2);
    assert_eq!(c.segments_of_pool(pool2), 2);
    assert_eq!(c.segments_of_pool(pool3), 1);
}

// test_cuda.py: TestMemPool.test_mempool_ctx_multithread (the two threads' requests in the order
// the test's events impose)
#[test]
fn test_mempool_ctx_multithread() {
    let mut c = Cuda::new("");
    c.empty_cache();
    assert_eq!(c.policy.segments().len(), 0, "Expected empty pool in the beginning");
    let nelem = 1024 * 1024;
    let pool = 1;
    // main thread: out1 outside the pool, out inside it, del out
    let _out1 = c.alloc(nelem).unwrap();
    let (out, _) = c.alloc_on(nelem, 0, pool).unwrap();
    c.free(out);
    // side thread (no pool context of its own)
    let _side = c.alloc(nelem).unwrap();
    assert_eq!(c.policy.segments().len(), 2, "Expected to have 2 segments allocated");
    assert_eq!(c.active_of_pool(0), 2097152, "Expected to have 2MB allocated in the default pool");
    assert_eq!(c.active_of_pool(pool), 0, "Expected to have 0 bytes allocated in the custom pool");
}
