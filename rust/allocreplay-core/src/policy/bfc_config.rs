//! Specs of the BFC family: `bfc[:OPTIONS]`, and the presets users name by what they run,
//! `tf[:OPTIONS]` (TensorFlow's GPU allocator) and `jax[:OPTIONS]` (JAX / XLA's GPU client).
//! Options are `key=value` (or `key:value`) separated by commas.
//!
//! - `bfc`: `tsl::BFCAllocator::Options` defaults (xla/tsl/framework/bfc_allocator.h):
//!   allow_growth=true, garbage_collection=false, fragmentation_fraction=0. memory_limit:
//!   the option, else `--capacity`, else the limit the trace recorded (BFC captures record
//!   it), else the device's total memory, else unlimited.
//! - `tf`: `GPUBFCAllocator` as TensorFlow builds it (tensorflow/core/common_runtime/gpu/
//!   gpu_device.cc `SingleVirtualDeviceMemoryLimit`, gpu_bfc_allocator.cc): preallocated
//!   (allow_growth=false unless TF_FORCE_GPU_ALLOW_GROWTH / `allow_growth=true`), garbage
//!   collection on (TF_ENABLE_GPU_GARBAGE_COLLECTION defaults to true), memory_limit = device
//!   memory minus `MinSystemMemory` (225 MiB under 2 GiB; else 500 MiB for compute capability
//!   <= 6, 1050 MiB for 7, 1536 MiB for 8, 1800 MiB from 9), or
//!   `per_process_gpu_memory_fraction` x device memory.
//! - `jax`: `xla::CreateBFCAllocator` (xla/pjrt/gpu/gpu_helpers.cc) with JAX's defaults
//!   (XLA_PYTHON_CLIENT_PREALLOCATE=true, XLA_PYTHON_CLIENT_MEM_FRACTION=0.75): one region of
//!   mem_fraction x device memory, no garbage collection; `preallocate=false` grows from 2 MiB
//!   up to that limit; `allocator=platform` (XLA_PYTHON_CLIENT_ALLOCATOR=platform) is no BFC
//!   at all but a cudaMalloc / cudaFree per buffer.

use super::entry::{PolicyEntry, PolicyKind};
use super::options::{self, OptDefault, OptionSpec, OptionType, Syntax};
use super::spec::PolicyContext;
use crate::error::{Error, Result};

pub const MIB: u64 = 1 << 20;

/// What a BFC allocator is built with (`BFCAllocator::BFCAllocator(sub_allocator,
/// total_memory, name, opts)`).
#[derive(Debug, Clone, PartialEq)]
pub struct BfcSettings {
    pub allow_growth: bool,
    pub garbage_collection: bool,
    /// `Options::fragmentation_fraction` (TF's `internal_fragmentation_fraction`); 0 = the
    /// 128 MiB default.
    pub fragmentation_fraction: f64,
    /// `total_memory` of the constructor (memory_limit_); `None` = unlimited.
    pub memory_limit: Option<u64>,
}

impl Default for BfcSettings {
    fn default() -> Self {
        BfcSettings { allow_growth: true, garbage_collection: false, fragmentation_fraction: 0.0, memory_limit: None }
    }
}

/// A parsed spec of the family.
#[derive(Debug, Clone, PartialEq)]
pub enum BfcSpec {
    Bfc {
        name: String,
        settings: BfcSettings,
    },
    /// `jax:allocator=platform`: no caching.
    Platform {
        name: String,
    },
}

fn spec_err(msg: String) -> Error {
    Error::PolicySpec(msg)
}

/// The device memory the presets take fractions of: `--capacity`, else the trace's total.
fn device_memory(ctx: &PolicyContext) -> Option<u64> {
    ctx.capacity.or_else(|| ctx.total_memory())
}

/// `limit`, the BFC pool's memory limit, when the modelled address space holds it (the pool
/// is preallocated, or grows to it, by `cudaMalloc`s); else a spec error naming it.
fn modelled_limit(spec: &str, limit: Option<u64>) -> Result<Option<u64>> {
    let max = crate::device::memory::MAX_DEVICE_MEMORY;
    match limit {
        Some(l) if l > max => Err(spec_err(format!(
            "{spec}: the pool's memory limit is {l} bytes, more than {max} bytes ({}), what the modelled CUDA address space holds",
            crate::units::format_bytes(max)
        ))),
        l => Ok(l),
    }
}

fn memory_limit_option(policy: &str, v: &str, ctx: &PolicyContext) -> Result<u64> {
    match options::parse_size(policy, "memory_limit", v, device_memory(ctx))? {
        0 => Err(spec_err(format!("{policy}: memory_limit must be positive, got '{v}'"))),
        b => Ok(b),
    }
}

/// The largest fraction of device memory `tf` and `jax` take as their limit: above 1 both
/// oversubscribe with unified memory, as upstream allows.
const MAX_UNIFIED_FRACTION: f64 = 64.0;

/// TensorFlow's `MinSystemMemory(available_memory, cc_major)` (gpu_device.cc, release build).
pub fn tf_min_system_memory(available: u64, cc_major: i64) -> u64 {
    if available < (1 << 31) {
        225 * MIB
    } else if cc_major <= 6 {
        500 * MIB
    } else if cc_major <= 7 {
        1050 * MIB
    } else if cc_major <= 8 {
        1536 * MIB
    } else {
        1800 * MIB
    }
}

/// The compute capability major the trace recorded (xplane device planes), if any.
fn cc_major(ctx: &PolicyContext) -> Option<i64> {
    let cc = ctx.metadata.allocator_settings.get("compute_capability")?.as_str()?;
    cc.split('.').next()?.parse().ok()
}

/// JAX's BFC limit: `total_memory * memory_fraction` (size_t of a double), rounded up to the
/// 2 MiB granularity the recorded `bytes_limit` shows (jax 0.11.2 on an H200:
/// 0.75 x 150,109,880,320 = 112,582,410,240 -> bytes_limit 112,583,507,968 = 107,368 MiB).
pub fn jax_memory_limit(device_memory: u64, fraction: f64) -> u64 {
    let raw = (device_memory as f64 * fraction) as u64;
    raw.div_ceil(2 * MIB).saturating_mul(2 * MIB)
}

const ALLOW_GROWTH_HELP: &str = "grow the pool region by region instead of reserving memory_limit up front";
const GC_HELP: &str = "on an allocation failure, free every free region and retry";
const FRAGMENTATION: OptionSpec = OptionSpec::new(
    "fragmentation_fraction",
    OptionType::Fraction,
    OptDefault::Unset("none: split when 128 MiB or more would be wasted"),
    "split a chunk when more than this fraction of it would be wasted",
)
.aliases(&["internal_fragmentation_fraction"]);
const MEMORY_LIMIT_SEARCH: &[&str] = &["0.8", "0.9", "0.95"];

const BFC_OPTIONS: &[OptionSpec] = &[
    OptionSpec::new("allow_growth", OptionType::Bool, OptDefault::Value("true"), ALLOW_GROWTH_HELP).search(&["false"]),
    OptionSpec::new("garbage_collection", OptionType::Bool, OptDefault::Value("false"), GC_HELP).search(&["true"]),
    FRAGMENTATION,
    OptionSpec::new(
        "memory_limit",
        OptionType::Bytes,
        OptDefault::Unset("--capacity, else the recorded limit, else the device's memory"),
        "the allocator's limit: bytes, a size (80GiB) or a fraction of device memory (0.9)",
    )
    .search(MEMORY_LIMIT_SEARCH),
];
const TF_OPTIONS: &[OptionSpec] = &[
    OptionSpec::new("allow_growth", OptionType::Bool, OptDefault::Value("false"), ALLOW_GROWTH_HELP)
        .search(&["true"])
        .env("TF_FORCE_GPU_ALLOW_GROWTH"),
    OptionSpec::new("garbage_collection", OptionType::Bool, OptDefault::Value("true"), GC_HELP)
        .search(&["false"])
        .env("TF_ENABLE_GPU_GARBAGE_COLLECTION"),
    FRAGMENTATION,
    OptionSpec::new(
        "per_process_gpu_memory_fraction",
        OptionType::Fraction,
        OptDefault::Unset("device memory minus MinSystemMemory"),
        "the limit as a fraction of device memory (GPUOptions.per_process_gpu_memory_fraction; above 1: unified memory, compute capability 6+)",
    ),
    OptionSpec::new(
        "memory_limit",
        OptionType::Bytes,
        OptDefault::Unset("device memory minus MinSystemMemory (225 MiB to 1800 MiB)"),
        "the limit (tf.config.LogicalDeviceConfiguration(memory_limit)): bytes, a size or a fraction of device memory",
    )
    .search(MEMORY_LIMIT_SEARCH),
];
const JAX_OPTIONS: &[OptionSpec] = &[
    OptionSpec::new("preallocate", OptionType::Bool, OptDefault::Value("true"), "reserve mem_fraction of device memory at start-up")
        .search(&["false"])
        .env("XLA_PYTHON_CLIENT_PREALLOCATE"),
    OptionSpec::new(
        "mem_fraction",
        OptionType::Fraction,
        OptDefault::Value("0.75"),
        "the BFC limit as a fraction of device memory (above 1: unified memory)",
    )
    .search(&["0.5", "0.9", "0.95"])
    .env("XLA_PYTHON_CLIENT_MEM_FRACTION"),
    OptionSpec::new(
        "allocator",
        OptionType::Choice(&["default", "bfc", "platform", "cuda_async"]),
        OptDefault::Value("default"),
        "default/bfc: the BFC allocator; platform: a cudaMalloc / cudaFree per buffer; cuda_async: use the policy cuda-async",
    )
    .search(&["platform"])
    .env("XLA_PYTHON_CLIENT_ALLOCATOR"),
    OptionSpec::new(
        "memory_limit",
        OptionType::Bytes,
        OptDefault::Unset("mem_fraction x device memory"),
        "the BFC limit in bytes (replaces mem_fraction)",
    ),
];

/// `bfc[:OPTIONS]`, `bfc:recorded`.
pub static BFC: PolicyEntry = PolicyEntry {
    name: "bfc",
    summary: "the BFC allocator with tsl::BFCAllocator::Options' defaults; bfc:recorded = a BFC capture's own settings",
    models: "`tsl::BFCAllocator`, xla/tsl/framework/bfc_allocator.cc",
    syntax: Syntax::KeyValue,
    options: BFC_OPTIONS,
    kind: PolicyKind::Online,
    framework: None,
    env: None,
    bool_words: ("true", "false"),
    recorded: true,
    search_excludes: &[],
    max_capacity: crate::device::memory::MAX_DEVICE_MEMORY,
    max_capacity_why: "what its modelled CUDA address space holds",
    peak_band: None,
};

/// `tf[:OPTIONS]`.
pub static TF: PolicyEntry = PolicyEntry {
    name: "tf",
    summary: "TensorFlow's GPU allocator: BFC preallocating device memory minus a reserve, garbage collection on",
    models: "`GPUBFCAllocator` as tensorflow/core/common_runtime/gpu/gpu_device.cc builds it",
    syntax: Syntax::KeyValue,
    options: TF_OPTIONS,
    kind: PolicyKind::Online,
    framework: Some("tf"),
    env: None,
    bool_words: ("true", "false"),
    recorded: false,
    search_excludes: &[],
    max_capacity: crate::device::memory::MAX_DEVICE_MEMORY,
    max_capacity_why: "what its modelled CUDA address space holds",
    peak_band: None,
};

/// `jax[:OPTIONS]`.
pub static JAX: PolicyEntry = PolicyEntry {
    name: "jax",
    summary: "JAX / XLA's GPU client: BFC preallocating 75% of device memory, or the platform allocator",
    models: "`xla::CreateBFCAllocator`, xla/pjrt/gpu/gpu_helpers.cc, with JAX's XLA_PYTHON_CLIENT_* defaults",
    syntax: Syntax::KeyValue,
    options: JAX_OPTIONS,
    kind: PolicyKind::Online,
    framework: Some("jax"),
    env: None,
    bool_words: ("true", "false"),
    recorded: false,
    search_excludes: &[],
    max_capacity: crate::device::memory::MAX_DEVICE_MEMORY,
    max_capacity_why: "what its modelled CUDA address space holds",
    peak_band: None,
};

/// `bfc[:OPTIONS]`.
pub fn parse_bfc(options: &str, ctx: &PolicyContext) -> Result<BfcSpec> {
    let spec = if options.is_empty() { "bfc".to_string() } else { format!("bfc:{options}") };
    if options == "recorded" {
        let s = recorded_settings(ctx)?;
        return Ok(BfcSpec::Bfc { name: "bfc:recorded".into(), settings: s.settings });
    }
    let mut s = BfcSettings::default();
    let mut limit = None;
    for (k, v) in super::entry::items(&BFC, options)? {
        match k {
            "allow_growth" => s.allow_growth = options::parse_bool(&spec, k, v)?,
            "garbage_collection" => s.garbage_collection = options::parse_bool(&spec, k, v)?,
            "fragmentation_fraction" => s.fragmentation_fraction = options::parse_fraction(&spec, k, v, 1.0)?,
            "memory_limit" => limit = Some(memory_limit_option(&spec, v, ctx)?),
            _ => unreachable!("options::items checked the keys"),
        }
    }
    s.memory_limit = limit.or(ctx.capacity).or_else(|| ctx.device.and_then(|d| d.memory_cap)).or_else(|| ctx.total_memory());
    if !s.allow_growth && s.memory_limit.is_none() {
        return Err(spec_err(format!(
            "{spec}: allow_growth=false preallocates memory_limit bytes, and no limit is known; give memory_limit= or --capacity"
        )));
    }
    s.memory_limit = modelled_limit(&spec, s.memory_limit)?;
    Ok(BfcSpec::Bfc { name: spec, settings: s })
}

/// `tf[:OPTIONS]`.
pub fn parse_tf(options: &str, ctx: &PolicyContext) -> Result<BfcSpec> {
    let spec = if options.is_empty() { "tf".to_string() } else { format!("tf:{options}") };
    let mut s = BfcSettings { allow_growth: false, garbage_collection: true, ..Default::default() };
    let (mut limit, mut fraction) = (None, None);
    for (k, v) in super::entry::items(&TF, options)? {
        match k {
            "allow_growth" => s.allow_growth = options::parse_bool(&spec, k, v)?,
            "garbage_collection" => s.garbage_collection = options::parse_bool(&spec, k, v)?,
            "fragmentation_fraction" => s.fragmentation_fraction = options::parse_fraction(&spec, k, v, 1.0)?,
            // Above 1, TensorFlow allocates unified memory (gpu_process_state.cc), on Pascal
            // (compute capability 6) and later only (gpu_device.cc: "Unified memory on GPUs
            // with compute capability lower than 6.0 (pre-Pascal class GPUs) does not support
            // oversubscription").
            "per_process_gpu_memory_fraction" => {
                let f = options::parse_fraction(&spec, k, v, MAX_UNIFIED_FRACTION)?;
                if f > 1.0 && cc_major(ctx).is_some_and(|cc| cc < 6) {
                    return Err(spec_err(format!(
                        "{spec}: a per_process_gpu_memory_fraction above 1 needs unified memory's oversubscription, which GPUs of compute capability below 6.0 lack"
                    )));
                }
                fraction = Some(f);
            }
            "memory_limit" => limit = Some(memory_limit_option(&spec, v, ctx)?),
            _ => unreachable!("options::items checked the keys"),
        }
    }
    if limit.is_some() && fraction.is_some() {
        // BaseGPUDeviceFactory::CreateDevices (gpu_device.cc) refuses the two together.
        return Err(spec_err(format!(
            "{spec}: it's invalid to set per_process_gpu_memory_fraction when virtual devices (memory_limit) are set, as TensorFlow says; give one"
        )));
    }
    s.memory_limit = Some(match limit {
        Some(l) => l,
        None => {
            let d = device_memory(ctx).ok_or_else(|| {
                spec_err(format!("{spec}: TensorFlow's limit is device memory minus a reserve, and the trace does not record the device's memory; pass --capacity or memory_limit="))
            })?;
            match fraction {
                // `total_memory * per_process_gpu_memory_fraction` (int64 of a double).
                Some(f) => (d as f64 * f) as u64,
                // The reserve is taken only where the memory exceeds it (gpu_device.cc:
                // `if (min_system_memory < allocated_memory) allocated_memory -= ...`).
                None => {
                    let reserve = tf_min_system_memory(d, cc_major(ctx).unwrap_or(9));
                    if reserve < d {
                        d - reserve
                    } else {
                        d
                    }
                }
            }
        }
    });
    s.memory_limit = modelled_limit(&spec, s.memory_limit)?;
    Ok(BfcSpec::Bfc { name: spec, settings: s })
}

/// `jax[:OPTIONS]`.
pub fn parse_jax(options: &str, ctx: &PolicyContext) -> Result<BfcSpec> {
    let spec = if options.is_empty() { "jax".to_string() } else { format!("jax:{options}") };
    let (mut preallocate, mut fraction, mut limit, mut platform) = (true, 0.75, None, false);
    for (k, v) in super::entry::items(&JAX, options)? {
        match k {
            "preallocate" => preallocate = options::parse_bool(&spec, k, v)?,
            // Fractions above 1 oversubscribe with unified memory; allowed as upstream does.
            "mem_fraction" => fraction = options::parse_fraction(&spec, k, v, MAX_UNIFIED_FRACTION)?,
            "memory_limit" => limit = Some(memory_limit_option(&spec, v, ctx)?),
            "allocator" => match v {
                "default" | "bfc" => platform = false,
                "platform" => platform = true,
                "cuda_async" => {
                    return Err(spec_err(format!(
                        "{spec}: allocator=cuda_async is CUDA's stream-ordered allocator, not BFC; use its own policy, cuda-async"
                    )))
                }
                // The allocators XLA's GPU plugin supports (`Supported allocator options are:
                // 'default', 'platform', 'bfc' and 'cuda_async'`, pjrt_c_api_gpu_internal.cc),
                // and where the last one is.
                _ => {
                    return Err(spec_err(format!(
                        "{spec}: allocator must be default, bfc or platform (cuda_async: the cuda-async policy), got '{v}'"
                    )))
                }
            },
            _ => unreachable!("options::items checked the keys"),
        }
    }
    if platform {
        return Ok(BfcSpec::Platform { name: spec });
    }
    let limit = match limit {
        Some(l) => l,
        None => {
            let d = device_memory(ctx).ok_or_else(|| {
                spec_err(format!("{spec}: JAX's limit is mem_fraction x device memory, and the trace does not record the device's memory; pass --capacity or memory_limit="))
            })?;
            jax_memory_limit(d, fraction)
        }
    };
    let limit = modelled_limit(&spec, Some(limit))?.unwrap_or(limit);
    Ok(BfcSpec::Bfc {
        name: spec,
        settings: BfcSettings {
            allow_growth: !preallocate,
            garbage_collection: false,
            fragmentation_fraction: 0.0,
            memory_limit: Some(limit),
        },
    })
}

/// The settings of the run that recorded a BFC trace, and how sure we are of each.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedSettings {
    pub settings: BfcSettings,
    /// False when neither the allocator's kind nor the capture's environment says whether it
    /// grew or was preallocated (a TF GPU capture without TF_FORCE_GPU_ALLOW_GROWTH in its
    /// metadata: a session config may have set it); `settings.allow_growth` is then TF's
    /// default (false) and `validate` tries both.
    pub allow_growth_known: bool,
    pub framework: Option<&'static str>,
}

fn env_of<'a>(ctx: &'a PolicyContext, key: &str) -> Option<&'a str> {
    ctx.metadata.allocator_settings.get("env")?.get(key)?.as_str()
}

/// What a BFC trace recorded about its allocator: the name (`GPU_0_bfc`, `xla_gpu_host_bfc`,
/// `bfc_cpu_allocator_for_gpu`), the limit its events imply (or the `.json`'s bytes_limit),
/// the capture's environment, and the framework.
pub fn recorded_settings(ctx: &PolicyContext) -> Result<RecordedSettings> {
    let md = ctx.metadata;
    let settings = &md.allocator_settings;
    let Some(name) = settings.get("allocator_name").and_then(|v| v.as_str()) else {
        return Err(spec_err(format!(
            "bfc:recorded: the trace records no BFC allocator (source '{}'); name the settings, e.g. bfc:allow_growth=true,memory_limit=80GiB",
            md.source
        )));
    };
    let framework = match settings.get("framework").and_then(|v| v.as_str()) {
        Some("jax") => Some("jax"),
        Some("tf") => Some("tf"),
        _ if name.starts_with("xla_") => Some("jax"),
        _ => None,
    };
    let lower = name.to_ascii_lowercase();
    let host = lower.contains("host") || lower.contains("cpu");
    let (allow_growth, known, gc) = if host {
        // gpu_host_bfc / xla_gpu_host_bfc / bfc_cpu_allocator_for_gpu: allow_growth = true.
        (true, true, false)
    } else {
        match framework {
            Some("jax") => {
                // JAX preallocates unless XLA_PYTHON_CLIENT_PREALLOCATE says otherwise; known
                // only when the capture's environment was recorded (its `.json`).
                let env_known = settings.get("env").is_some_and(|e| e.is_object());
                let prealloc = env_of(ctx, "XLA_PYTHON_CLIENT_PREALLOCATE").map(|v| !matches!(v, "false" | "False" | "0")).unwrap_or(true);
                (!prealloc, env_known, false)
            }
            _ => {
                // GPUBFCAllocator::GetGarbageCollectionValue: off only for exactly "false".
                let gc = env_of(ctx, "TF_ENABLE_GPU_GARBAGE_COLLECTION") != Some("false");
                // GPUBFCAllocator::GetAllowGrowthValue: exactly "true" or "false" decides; any
                // other value is ignored (logged), and the session config's allow_growth, which
                // the capture does not record, stands.
                match env_of(ctx, "TF_FORCE_GPU_ALLOW_GROWTH") {
                    Some("true") => (true, true, gc),
                    Some("false") => (false, true, gc),
                    _ => (false, false, gc),
                }
            }
        }
    };
    let memory_limit = ctx.device.and_then(|d| d.memory_cap).or_else(|| settings.get("memory_limit").and_then(|v| v.as_u64()));
    Ok(RecordedSettings {
        settings: BfcSettings { allow_growth, garbage_collection: gc, fragmentation_fraction: 0.0, memory_limit },
        allow_growth_known: known,
        framework,
    })
}

impl BfcSpec {
    /// The same settings under another name.
    pub fn renamed(self, to: &str) -> Self {
        match self {
            BfcSpec::Bfc { settings, .. } => BfcSpec::Bfc { name: to.into(), settings },
            BfcSpec::Platform { .. } => BfcSpec::Platform { name: to.into() },
        }
    }
}

/// The explicit `bfc:` spec of some settings (so a replay can be repeated by name).
pub fn spec_of(s: &BfcSettings) -> String {
    let mut out = format!("bfc:allow_growth={},garbage_collection={}", s.allow_growth, s.garbage_collection);
    if let Some(l) = s.memory_limit {
        out.push_str(&format!(",memory_limit={l}"));
    }
    if s.fragmentation_fraction > 0.0 {
        out.push_str(&format!(",fragmentation_fraction={}", s.fragmentation_fraction));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{DeviceInfo, TraceMetadata};

    fn ctx_with<'a>(md: &'a TraceMetadata, dev: &'a DeviceInfo, capacity: Option<u64>) -> PolicyContext<'a> {
        PolicyContext { metadata: md, device: Some(dev), capacity }
    }

    #[test]
    fn tf_limit_is_device_memory_minus_the_compute_capability_reserve() {
        // gpu_device.cc MinSystemMemory: >= 2 GiB and cc 9 -> 1800 MiB; cc 8 -> 1536 MiB.
        let mut md = TraceMetadata::new("test");
        let dev = DeviceInfo { index: 0, total_memory: Some(80 << 30), ..Default::default() };
        md.allocator_settings = serde_json::json!({"compute_capability": "8.0"});
        let BfcSpec::Bfc { settings, .. } = parse_tf("", &ctx_with(&md, &dev, None)).unwrap() else { panic!() };
        assert_eq!(settings.memory_limit, Some((80 << 30) - 1536 * MIB));
        assert!(!settings.allow_growth && settings.garbage_collection);
        md.allocator_settings = serde_json::json!({"compute_capability": "9.0"});
        let BfcSpec::Bfc { settings, .. } = parse_tf("allow_growth=true", &ctx_with(&md, &dev, None)).unwrap() else { panic!() };
        assert_eq!(settings.memory_limit, Some((80 << 30) - 1800 * MIB));
        assert!(settings.allow_growth);
        // Under 2 GiB: 225 MiB whatever the capability.
        assert_eq!(tf_min_system_memory(1 << 30, 9), 225 * MIB);
        // Memory at or below the reserve is all given to the allocator (gpu_device.cc).
        let BfcSpec::Bfc { settings, .. } = parse_tf("", &ctx_with(&md, &dev, Some(200 * MIB))).unwrap() else { panic!() };
        assert_eq!(settings.memory_limit, Some(200 * MIB));
        // A fraction and virtual devices together: refused, as CreateDevices refuses them.
        assert!(
            matches!(parse_tf("per_process_gpu_memory_fraction=0.5,memory_limit=10GiB", &ctx_with(&md, &dev, None)), Err(Error::PolicySpec(m)) if m.contains("invalid"))
        );
        // per_process_gpu_memory_fraction: int64(total * fraction).
        let BfcSpec::Bfc { settings, .. } = parse_tf("per_process_gpu_memory_fraction=0.5", &ctx_with(&md, &dev, None)).unwrap() else {
            panic!()
        };
        assert_eq!(settings.memory_limit, Some(40 << 30));
        // --capacity replaces the device's memory.
        let BfcSpec::Bfc { settings, .. } = parse_tf("", &ctx_with(&md, &dev, Some(16 << 30))).unwrap() else { panic!() };
        assert_eq!(settings.memory_limit, Some((16 << 30) - 1800 * MIB));
        // An explicit memory_limit wins.
        let BfcSpec::Bfc { settings, .. } = parse_tf("memory_limit=10GiB", &ctx_with(&md, &dev, Some(16 << 30))).unwrap() else { panic!() };
        assert_eq!(settings.memory_limit, Some(10 << 30));
    }

    #[test]
    fn recorded_tf_environment_is_read_as_gpu_bfc_allocator_reads_it() {
        // GPUBFCAllocator::GetAllowGrowthValue: TF_FORCE_GPU_ALLOW_GROWTH decides only when it
        // is exactly "true" or "false" ("True", "1", anything else: ignored, the session's
        // allow_growth stands, which a capture does not record). GetGarbageCollectionValue:
        // TF_ENABLE_GPU_GARBAGE_COLLECTION turns it off only when exactly "false".
        let dev = DeviceInfo { index: 0, total_memory: Some(80 << 30), ..Default::default() };
        let recorded = |env: serde_json::Value| {
            let mut md = TraceMetadata::new("test");
            md.allocator_settings = serde_json::json!({"allocator_name": "GPU_0_bfc", "framework": "tf", "env": env});
            let r = recorded_settings(&ctx_with(&md, &dev, None)).unwrap();
            (r.settings.allow_growth, r.allow_growth_known, r.settings.garbage_collection)
        };
        let growth = |v: &str| recorded(serde_json::json!({ "TF_FORCE_GPU_ALLOW_GROWTH": v }));
        assert_eq!(growth("true"), (true, true, true));
        assert_eq!(growth("false"), (false, true, true));
        for ignored in ["True", "1", "unparseable", " true"] {
            assert_eq!(growth(ignored), (false, false, true), "{ignored:?}");
        }
        assert_eq!(recorded(serde_json::json!({})), (false, false, true));
        let gc = |v: &str| recorded(serde_json::json!({ "TF_ENABLE_GPU_GARBAGE_COLLECTION": v })).2;
        assert!(!gc("false"));
        assert!(gc("true") && gc("False") && gc(" false") && gc("0"));
    }

    #[test]
    fn recorded_jax_environment_is_read_as_jaxlib_reads_it() {
        // jaxlib's generate_pjrt_gpu_plugin_options: XLA_PYTHON_CLIENT_PREALLOCATE turns
        // preallocation off only for exactly "false", "False" or "0".
        let dev = DeviceInfo { index: 0, total_memory: Some(80 << 30), ..Default::default() };
        let growth = |v: &str| {
            let mut md = TraceMetadata::new("test");
            md.allocator_settings =
                serde_json::json!({"allocator_name": "GPU_0_bfc", "framework": "jax", "env": {"XLA_PYTHON_CLIENT_PREALLOCATE": v}});
            recorded_settings(&ctx_with(&md, &dev, None)).unwrap().settings.allow_growth
        };
        assert!(growth("false") && growth("False") && growth("0"));
        assert!(!growth("true") && !growth("no") && !growth(" false") && !growth("FALSE"));
    }

    #[test]
    fn tf_fraction_above_one_is_unified_memory_from_pascal_on() {
        // GPUDeviceTest.UnifiedMemoryAllocation: fraction 1.2 -> memory_limit =
        // int64(total * 1.2); gpu_device.cc refuses it below compute capability 6.
        let mut md = TraceMetadata::new("test");
        let dev = DeviceInfo { index: 0, total_memory: Some(80 << 30), ..Default::default() };
        md.allocator_settings = serde_json::json!({"compute_capability": "9.0"});
        let BfcSpec::Bfc { settings, .. } = parse_tf("per_process_gpu_memory_fraction=1.2", &ctx_with(&md, &dev, None)).unwrap() else {
            panic!()
        };
        assert_eq!(settings.memory_limit, Some(((80u64 << 30) as f64 * 1.2) as u64));
        md.allocator_settings = serde_json::json!({"compute_capability": "5.2"});
        assert!(
            matches!(parse_tf("per_process_gpu_memory_fraction=1.2", &ctx_with(&md, &dev, None)), Err(Error::PolicySpec(m)) if m.contains("6.0"))
        );
        assert!(parse_tf("per_process_gpu_memory_fraction=0.9", &ctx_with(&md, &dev, None)).is_ok());
    }

    #[test]
    fn jax_limit_is_the_fraction_rounded_up_to_2_mib() {
        // The recorded H200 run: total 150,109,880,320 -> bytes_limit 112,583,507,968
        // (jaxlm__default.json), i.e. 0.75 x total = 112,582,410,240 rounded up to 2 MiB.
        assert_eq!(jax_memory_limit(150_109_880_320, 0.75), 112_583_507_968);
        let md = TraceMetadata::new("test");
        let dev = DeviceInfo { index: 0, total_memory: Some(64 << 30), ..Default::default() };
        let BfcSpec::Bfc { settings, .. } = parse_jax("", &ctx_with(&md, &dev, None)).unwrap() else { panic!() };
        assert_eq!(
            settings,
            BfcSettings { allow_growth: false, garbage_collection: false, fragmentation_fraction: 0.0, memory_limit: Some(48 << 30) }
        );
        let BfcSpec::Bfc { settings, .. } = parse_jax("preallocate=false,mem_fraction=0.5", &ctx_with(&md, &dev, None)).unwrap() else {
            panic!()
        };
        assert!(settings.allow_growth);
        assert_eq!(settings.memory_limit, Some(32 << 30));
        assert!(matches!(parse_jax("allocator=platform", &ctx_with(&md, &dev, None)).unwrap(), BfcSpec::Platform { .. }));
    }

    #[test]
    fn bad_options_name_the_valid_ones() {
        let md = TraceMetadata::new("test");
        let dev = DeviceInfo::default();
        let ctx = ctx_with(&md, &dev, None);
        match parse_bfc("alow_growth=true", &ctx) {
            Err(Error::PolicySpec(m)) => assert!(m.contains("alow_growth") && m.contains("allow_growth"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_bfc("allow_growth=maybe", &ctx), Err(Error::PolicySpec(_))));
        assert!(matches!(parse_bfc("allow_growth", &ctx), Err(Error::PolicySpec(_))));
        // tf/jax need device memory when no limit is given.
        assert!(matches!(parse_tf("", &ctx), Err(Error::PolicySpec(m)) if m.contains("--capacity")));
        assert!(matches!(parse_jax("", &ctx), Err(Error::PolicySpec(m)) if m.contains("--capacity")));
        // bfc without any limit grows without bound; preallocating needs a limit.
        let BfcSpec::Bfc { settings, .. } = parse_bfc("garbage_collection=true", &ctx).unwrap() else { panic!() };
        assert_eq!(settings.memory_limit, None);
        assert!(settings.allow_growth && settings.garbage_collection);
        assert!(matches!(parse_bfc("allow_growth=false", &ctx), Err(Error::PolicySpec(m)) if m.contains("memory_limit")));
        // `:` works like `=`.
        let BfcSpec::Bfc { settings, .. } = parse_bfc("allow_growth:false,memory_limit:1GiB", &ctx).unwrap() else { panic!() };
        assert_eq!((settings.allow_growth, settings.memory_limit), (false, Some(1 << 30)));
    }
}
