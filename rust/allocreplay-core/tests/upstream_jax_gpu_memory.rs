//! Upstream's tests of what JAX / XLA's GPU client does with its allocator flags
//! (XLA_PYTHON_CLIENT_PREALLOCATE, XLA_PYTHON_CLIENT_MEM_FRACTION, XLA_PYTHON_CLIENT_ALLOCATOR),
//! ported onto the `jax` policy (`jax[:OPTIONS]`, built by the registry as `replay` builds it) and
//! driven through the `Policy` trait. Every expected value is upstream's, computed as its test
//! computes it; each test names the upstream test it mirrors.
//!
//! Upstream files read:
//! - jax-ml/jax @ 055a88344ffe252f tests/gpu_memory_flags_test.py, and tests/BUILD @
//!   e9925ee03d5b5d44 (it runs that test twice: `gpu_memory_flags_test` with
//!   XLA_PYTHON_CLIENT_PREALLOCATE=1, `gpu_memory_flags_test_no_preallocation` with =0).
//! - openxla/xla @ 5e3aa3216c92f55f xla/pjrt/gpu/se_gpu_pjrt_client_test.cc (the one test about
//!   the allocator's stats: GetAllocatorStatsTest).
//! - openxla/xla @ f91f11402e4caf1a xla/pjrt/c/pjrt_c_api_gpu_test.cc (PjrtCApiGpuAllocatorTest).
//! - openxla/xla @ 09e3c08df4e08bdb xla/pjrt/gpu/allocator_config_test.cc (MemFraction: how the
//!   memory fraction string is read).
//! - Semantics of the checks: jaxlib xla_client.py `generate_pjrt_gpu_plugin_options` (the env
//!   vars become the PJRT options `allocator`, `memory_fraction`, `preallocate`; preallocation is
//!   off only for "false", "False", "0"), xla/pjrt/c/pjrt_c_api_gpu_internal.cc (the options into
//!   `GpuAllocatorConfig`; an unknown allocator is Unimplemented), xla/pjrt/gpu/gpu_helpers.cc @
//!   963f4888a34643ab `CreateBFCAllocator` (`tsl::BFCAllocator` of `total_memory *
//!   memory_fraction` bytes, `allow_growth = !preallocate`), xla/pjrt/gpu/allocator_config.{h,cc}
//!   @ 09e3c08df4e08bdb (a bare fraction is a `FixedMemFraction`: "the pool never grows;
//!   `fraction` is a hard cap"), xla/tsl/framework/bfc_allocator.cc @ 80c095fc2f5ba8b1 (the
//!   constructor allocates nothing: `pool_bytes = 0`, `bytes_limit = total_memory`; the first
//!   `Extend` obtains `RoundedBytes(total_memory)` when preallocating, 2 MiB when growing).
//!
//! Mapping: a GPU client is one policy per device, built by `registry::build` from the `jax` spec
//! of the env vars (XLA_PYTHON_CLIENT_PREALLOCATE=v is `preallocate=v`, with v read as upstream
//! reads it; XLA_PYTHON_CLIENT_MEM_FRACTION=f is `mem_fraction=f`; XLA_PYTHON_CLIENT_ALLOCATOR=a is
//! `allocator=a`, and `cuda_async` is the `cuda-async` policy, as the `jax` entry's `allocator`
//! option says) on a device of the H200's total memory (150,109,880,320 bytes, what the project's
//! H200 traces record; upstream's tests read the real GPU's). `memory_stats()` / `GetAllocatorStats`:
//! pool_bytes = `Stats::reserved`, peak_bytes_in_use = `Stats::peak_allocated`, bytes_limit = the
//! policy's `memory_limit` (`parse_jax`). A buffer upstream puts on the device is a request of its
//! size. Creating a client is building the policy: a client-creation error is an `Error::PolicySpec`.
//!
//! Not ported (upstream test: why):
//! - No upstream test states bytes_limit in bytes: gpu_memory_flags_test reads it from the
//!   device and compares pool_bytes with it, as the port does with the policy's limit.
//! - allocator_config_test.cc
//!   - GpuAllocatorConfigTest.ExplicitPolicyOverridesNumericFraction,
//!     MemFractionTest.StartIsThePreallocatedFraction, MemFractionTest.ToStringRoundTrips: the
//!     model has no `MemFraction` object (the fraction goes straight to a byte limit), no
//!     `memory_fraction_policy` and no string form of a fraction.
//!   - MemFractionTest.PlusSuffixGrowsToAllDeviceMemory, RangeSetsStartAndCap, EqualEndsAreFixed,
//!     and the `START+` / `START-CAP` cases of ScientificNotation: the model takes no
//!     `START+` / `START-CAP` grammar (`FlexMemFraction`: a preallocated pool that grows to a cap,
//!     which XLA gives only the spatially partitioned BFC pool, not modelled). The malformed
//!     strings of RejectsMalformedInput are ported: they must be refused whatever the grammar.
//! - se_gpu_pjrt_client_test.cc: the other tests (transfers, FFI, layouts, topology, DMA,
//!   autotuning) do not touch the allocator.
//! - pjrt_c_api_gpu_test.cc: the other tests (buffers, executables, topology, custom calls) do
//!   not touch the allocator.

mod common;

use allocreplay_core::device::DeviceMemory;
use allocreplay_core::engine::BoxedPolicy;
use allocreplay_core::policy::bfc_config::{parse_jax, BfcSpec};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry;
use allocreplay_core::trace::{DeviceInfo, TraceMetadata};
use allocreplay_core::Error;
use common::policy_driver::PolicyDriver;

/// The H200's total memory, as the project's H200 traces record it (tests/import_pytorch.rs).
const H200_TOTAL: u64 = 150_109_880_320;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn h200() -> (TraceMetadata, DeviceInfo) {
    let dev = DeviceInfo { index: 0, total_memory: Some(H200_TOTAL), ..Default::default() };
    let mut md = TraceMetadata::new("xplane");
    md.devices = vec![dev.clone()];
    (md, dev)
}

/// `registry::build(spec)` on the H200, as `replay` builds a policy for a device.
fn build(spec: &str) -> Result<BoxedPolicy, Error> {
    let (md, dev) = h200();
    registry::build(spec, &PolicyContext { metadata: &md, device: Some(&dev), capacity: None })
}

/// The `memory_limit` (BFC's `bytes_limit`) the `jax` options give on the H200; `None` for the
/// platform allocator, which has none.
fn bytes_limit(options: &str) -> Option<u64> {
    let (md, dev) = h200();
    match parse_jax(options, &PolicyContext { metadata: &md, device: Some(&dev), capacity: None }).unwrap() {
        BfcSpec::Bfc { settings, .. } => Some(settings.memory_limit.expect("jax always has a limit")),
        BfcSpec::Platform { .. } => None,
    }
}

/// One device of a GPU client: its allocator over the device's memory.
type Device = PolicyDriver;

impl Device {
    fn new(spec: &str) -> Self {
        let allocator = build(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        Device::over(allocator, DeviceMemory::new(Some(H200_TOTAL)))
    }

    /// A buffer of `bytes` on the device: whether the allocator served it.
    fn allocate(&mut self, bytes: u64) -> bool {
        self.malloc(bytes).is_ok()
    }

    /// `memory_stats()["pool_bytes"]`.
    fn pool_bytes(&self) -> u64 {
        self.policy.stats().reserved
    }

    /// `memory_stats()["peak_bytes_in_use"]`.
    fn peak_bytes_in_use(&self) -> u64 {
        self.policy.stats().peak_allocated
    }
}

/// The `jax` spec of XLA_PYTHON_CLIENT_PREALLOCATE (unset: the defaults).
fn spec_of_preallocate(env: Option<&str>) -> String {
    match env {
        Some(v) => format!("jax:preallocate={v}"),
        None => "jax".to_string(),
    }
}

/// gpu_memory_flags_test.py, GpuMemoryAllocationTest.test_gpu_memory_allocation, with
/// XLA_PYTHON_CLIENT_PREALLOCATE as `env` (XLA_PYTHON_CLIENT_ALLOCATOR unset, as the test
/// requires).
fn test_gpu_memory_allocation(env: Option<&str>) {
    let falsey_values = ["0", "False", "false"];
    let preallocate = !falsey_values.contains(&env.unwrap_or("1"));
    let spec = spec_of_preallocate(env);
    let mut device = Device::new(&spec);
    // mem_stats = device.memory_stats(); assertEqual(mem_stats["pool_bytes"], 0)
    assert_eq!(device.pool_bytes(), 0, "{spec}");
    // x = jax.lax.add(1, 2).block_until_ready(): its two int32 operands and its int32 result.
    for _ in 0..3 {
        assert!(device.allocate(4), "{spec}");
    }
    let bytes_limit = bytes_limit(spec.strip_prefix("jax:").unwrap_or("")).unwrap();
    if preallocate {
        // assertEqual(mem_stats["pool_bytes"], mem_stats["bytes_limit"])
        assert_eq!(device.pool_bytes(), bytes_limit, "{spec}");
    } else {
        // assertLessEqual(mem_stats["pool_bytes"], mem_stats["bytes_limit"] // 2)
        assert!(device.pool_bytes() <= bytes_limit / 2, "{spec}: pool {} limit {bytes_limit}", device.pool_bytes());
    }
}

#[test]
fn gpu_memory_flags_test_with_preallocate_1() {
    // tests/BUILD `gpu_memory_flags_test`: XLA_PYTHON_CLIENT_PREALLOCATE=1.
    test_gpu_memory_allocation(Some("1"));
}

#[test]
fn gpu_memory_flags_test_no_preallocation() {
    // tests/BUILD `gpu_memory_flags_test_no_preallocation`: XLA_PYTHON_CLIENT_PREALLOCATE=0.
    test_gpu_memory_allocation(Some("0"));
}

#[test]
fn gpu_memory_flags_test_other_spellings() {
    // The test's own reading of the variable: unset is "1"; "False" and "false" are its other
    // falsey values; anything else preallocates.
    for env in [None, Some("False"), Some("false"), Some("true"), Some("True")] {
        test_gpu_memory_allocation(env);
    }
}

#[test]
fn se_gpu_pjrt_client_test_get_allocator_stats_test() {
    // StreamExecutorGpuClientTest.GetAllocatorStatsTest: DefaultOptions() (two devices, the
    // default allocator: BFC, memory_fraction 0.75, preallocate); on each device a buffer of
    // LiteralUtil::CreateR0<int32_t>(0), then ASSERT_GT(stats.value().peak_bytes_in_use, 0).
    for _device in 0..2 {
        let mut device = Device::new("jax");
        assert!(device.allocate(4));
        assert!(device.peak_bytes_in_use() > 0);
    }
}

#[test]
fn pjrt_c_api_gpu_test_valid_options_parsing() {
    // PjrtCApiGpuAllocatorTest.ValidOptionsParsing: every allocator option creates a client;
    // "bfc" and "cuda_async" with memory_fraction 0.5, "cuda_async" also with preallocate.
    // cuda_async is XLA's CreateCudaAsyncAllocator: a pool of total * memory_fraction bytes
    // (the release threshold), reserved up front when preallocating: the `cuda-async` policy.
    for spec in [
        "jax:allocator=default",
        "jax:allocator=platform",
        "jax:allocator=bfc,mem_fraction=0.5",
        "cuda-async:release_threshold=0.5,preallocate=true",
    ] {
        assert!(build(spec).is_ok(), "{spec}: {:?}", build(spec).err());
    }
}

#[test]
fn pjrt_c_api_gpu_test_invalid_allocator_options_parsing() {
    // PjrtCApiGpuAllocatorTest.InvalidAllocatorOptionsParsing: allocator "invalid_allocator"
    // (memory_fraction 0.5, preallocate true) fails with "Allocator invalid_allocator not
    // supported for PJRT GPU plugin. Supported allocator options are: 'default', 'platform',
    // 'bfc' and 'cuda_async'."
    let spec = "jax:allocator=invalid_allocator,mem_fraction=0.5,preallocate=true";
    match build(spec) {
        Err(Error::PolicySpec(m)) => {
            for word in ["invalid_allocator", "default", "platform", "bfc", "cuda_async"] {
                assert!(m.contains(word), "{spec}: '{m}' does not name {word}");
            }
        }
        other => panic!("{spec}: {:?}", other.map(|p| p.name())),
    }
}

/// A `jax` pool of `options`, preallocated, shows a hard cap: its one region is its limit and
/// a request of `over` bytes (more than the limit, less than the device) fails without the pool
/// growing (a `FixedMemFraction`; a `FlexMemFraction` would grow towards all device memory).
fn assert_fixed_cap(options: &str, over: u64) {
    let spec = format!("jax:{options}");
    let limit = bytes_limit(options).unwrap();
    assert!(limit < over && over < H200_TOTAL, "{spec}: {limit} {over}");
    let mut device = Device::new(&spec);
    assert!(device.allocate(4), "{spec}");
    assert_eq!(device.pool_bytes(), limit, "{spec}");
    assert!(!device.allocate(over), "{spec}: {over} bytes served above the cap of {limit}");
    assert_eq!(device.pool_bytes(), limit, "{spec}: the pool grew");
}

#[test]
fn allocator_config_test_default_has_fixed_cap() {
    // GpuAllocatorConfigTest.DefaultHasFixedCap: config.memory_fraction == 0.75 and
    // GetMemoryFraction() == FixedMemFraction{0.75}.
    let entry = registry::lookup("jax").unwrap();
    assert_eq!(entry.option("mem_fraction").unwrap().default.value(), Some("0.75"));
    assert_eq!(bytes_limit(""), bytes_limit("mem_fraction=0.75"));
    assert_fixed_cap("", 120 * GIB);
}

#[test]
fn allocator_config_test_numeric_fraction_has_fixed_cap() {
    // GpuAllocatorConfigTest.NumericFractionHasFixedCap: for 0.5, 0.9 and 1.5,
    // GetMemoryFraction() == FixedMemFraction{fraction}. (1.5: no request lies between the cap
    // and the device's memory.)
    assert_fixed_cap("mem_fraction=0.5", 80 * GIB);
    assert_fixed_cap("mem_fraction=0.9", 136 * GIB);
    assert!(build("jax:mem_fraction=1.5").is_ok());
    // MemFractionTest.NumericFractionHasFixedCap also takes 0.75 and 1.0.
    assert_fixed_cap("mem_fraction=0.75", 120 * GIB);
    assert!(build("jax:mem_fraction=1.0").is_ok());
}

#[test]
fn allocator_config_test_bare_fraction_has_fixed_cap() {
    // MemFractionTest.BareFractionHasFixedCap: ParseMemFraction("0.75") == FixedMemFraction{0.75};
    // ParseMemFraction(" 0.5 ") == FixedMemFraction{0.5}.
    assert_eq!(bytes_limit("mem_fraction= 0.5 "), bytes_limit("mem_fraction=0.5"));
    assert_fixed_cap("mem_fraction=0.75", 120 * GIB);
    assert_fixed_cap("mem_fraction= 0.5 ", 80 * GIB);
}

#[test]
fn allocator_config_test_bare_fraction_at_or_above_one_is_fixed() {
    // MemFractionTest.BareFractionAtOrAboveOneIsFixed: ParseMemFraction("1") ==
    // FixedMemFraction{1.0}; ParseMemFraction("1.5") == FixedMemFraction{1.5}.
    assert_eq!(bytes_limit("mem_fraction=1"), bytes_limit("mem_fraction=1.0"));
    assert!(bytes_limit("mem_fraction=1.5").is_some());
    for spec in ["jax:mem_fraction=1", "jax:mem_fraction=1.5"] {
        let mut device = Device::new(spec);
        assert!(device.allocate(4), "{spec}");
    }
}

#[test]
fn allocator_config_test_scientific_notation() {
    // MemFractionTest.ScientificNotation: ParseMemFraction("1e-3") == FixedMemFraction{0.001}.
    assert_eq!(bytes_limit("mem_fraction=1e-3"), bytes_limit("mem_fraction=0.001"));
    // A fixed cap of 0.001 x 150,109,880,320 bytes (about 143 MiB): 1 GiB is above it.
    assert_fixed_cap("mem_fraction=1e-3", GIB);
    assert!(bytes_limit("mem_fraction=1e-3").unwrap() < 200 * MIB);
}

#[test]
fn allocator_config_test_rejects_malformed_input() {
    // MemFractionTest.RejectsMalformedInput: each of these is InvalidArgument.
    let malformed = [
        "",
        "abc",
        "0",
        "-0.5",
        "nan",
        "inf",
        "0.5-",
        "0.5-abc",
        "0.5-0.7-0.9",
        "+",
        "0+",
        "-0.5+",
        "nan+",
        "inf+",
        "0.5++",
        "0.5+-1",
        "0.5-0.9+", // and, with their own messages:
        "0.9-0.5",
        "0.5-1.5",
    ];
    for f in malformed {
        let spec = format!("jax:mem_fraction={f}");
        assert!(matches!(build(&spec), Err(Error::PolicySpec(_))), "{spec} was accepted");
    }
}
