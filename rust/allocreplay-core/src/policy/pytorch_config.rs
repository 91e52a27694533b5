//! `PYTORCH_CUDA_ALLOC_CONF` for the caching allocator: parsing mirrors
//! `c10/core/AllocatorConfig.cpp` / `c10/cuda/CUDAAllocatorConfig.cpp`
//! (`parseArgs`, `parseMaxSplitSize`, `parseRoundUpPower2Divisions`, ...).

use super::entry::{PolicyEntry, PolicyKind};
use super::options::{self, OptDefault, OptionSpec, OptionType, Syntax};
use crate::error::{Error, Result};

/// The registry's entry: `pytorch[:PYTORCH_CUDA_ALLOC_CONF]`, `pytorch:recorded`.
pub static ENTRY: PolicyEntry = PolicyEntry {
    name: "pytorch",
    summary: "PyTorch's CUDA caching allocator under any PYTORCH_CUDA_ALLOC_CONF; pytorch:recorded = the trace's own settings",
    models: "`DeviceCachingAllocator`, c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.11)",
    syntax: Syntax::Conf,
    options: OPTIONS,
    kind: PolicyKind::Online,
    framework: Some("pytorch"),
    env: Some("PYTORCH_CUDA_ALLOC_CONF"),
    bool_words: ("True", "False"),
    recorded: true,
    search_excludes: &[],
    max_capacity: crate::device::memory::MAX_DEVICE_MEMORY,
    max_capacity_why: "what its modelled CUDA address space holds",
    peak_band: None,
};

pub const MB: u64 = 1024 * 1024;
/// `kLargeBuffer`: "large" allocations may be packed in 20 MiB blocks.
pub const K_LARGE_BUFFER: u64 = 20 * MB;
/// `kRoundUpPowerOfTwoIntervals`: one division setting per power of two from 1 MiB up.
pub const ROUNDUP_INTERVALS: usize = 16;

#[derive(Debug, Clone, PartialEq)]
pub struct PytorchConfig {
    /// `max_split_size_mb` in bytes; `u64::MAX` = unlimited (the default).
    pub max_split_size: u64,
    /// `max_non_split_rounding_mb` in bytes (default kLargeBuffer).
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions`, per interval [2^(20+i), 2^(21+i)).
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `garbage_collection_threshold` (0 = off).
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    /// Large-pool segment / expandable page size (kLargeBuffer unless `large_segment_size_mb`).
    pub large_segment_size: u64,
    /// `per_process_memory_fraction` (1.0 = no cap): `DeviceCachingAllocator`'s constructor
    /// calls `setMemoryFraction` with it, as `torch.cuda.set_per_process_memory_fraction` does.
    pub per_process_memory_fraction: f64,
}

impl Default for PytorchConfig {
    fn default() -> Self {
        PytorchConfig {
            max_split_size: u64::MAX,
            max_non_split_rounding: K_LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            large_segment_size: K_LARGE_BUFFER,
            per_process_memory_fraction: 1.0,
        }
    }
}

/// `PYTORCH_CUDA_ALLOC_CONF`'s options (CUDAAllocatorConfig.cpp / AllocatorConfig.cpp
/// `parseArgs`), with the values `allocreplay tune` searches.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::new(
        "expandable_segments",
        OptionType::Bool,
        OptDefault::Value("False"),
        "grow one mapped range per stream instead of cudaMalloc'ing segments",
    )
    .search(&["True"]),
    OptionSpec::new(
        "max_split_size_mb",
        OptionType::Integer,
        OptDefault::Unset("unlimited"),
        "blocks above this size (MiB, >= 20) are never split",
    )
    .search(&["64", "128", "256", "512", "1024"]),
    OptionSpec::new(
        "roundup_power2_divisions",
        OptionType::List,
        OptDefault::Unset("no rounding"),
        "round requests up to 1/N steps of their power-of-two interval; N, or [MiB:N,...,>:N] per interval",
    )
    .search(&["2", "4", "8", "16", "[256:1,512:2,1024:4,>:8]", "[64:8,256:4,>:1]"]),
    OptionSpec::new(
        "garbage_collection_threshold",
        OptionType::Fraction,
        OptDefault::Unset("off"),
        "under a memory cap, free cached blocks once reserved memory passes this fraction of it",
    )
    .search(&["0.6", "0.8"]),
    OptionSpec::new(
        "max_non_split_rounding_mb",
        OptionType::Integer,
        OptDefault::Unset("kLargeBuffer, 20 MiB"),
        "an oversize cached block serves a request up to this many MiB smaller (>= 20)",
    )
    .search(&["64", "256"]),
    OptionSpec::new(
        "large_segment_size_mb",
        OptionType::Integer,
        OptDefault::Value("20"),
        "size of large-pool segments and expandable pages (MiB, > 10)",
    ),
    OptionSpec::new("release_lock_on_cudamalloc", OptionType::Bool, OptDefault::Value("False"), "accepted; no effect on device memory"),
    OptionSpec::new("pinned_use_cuda_host_register", OptionType::Bool, OptDefault::Value("False"), "accepted; host memory only"),
    OptionSpec::new("pinned_num_register_threads", OptionType::Integer, OptDefault::Value("1"), "accepted; host memory only"),
    OptionSpec::new("pinned_use_background_threads", OptionType::Bool, OptDefault::Value("False"), "accepted; host memory only"),
    OptionSpec::new("graph_capture_record_stream_reuse", OptionType::Bool, OptDefault::Value("False"), "accepted; no effect on the replay"),
    OptionSpec::new("pinned_reserve_segment_size_mb", OptionType::Integer, OptDefault::Unset("none"), "accepted (> 0); host memory only"),
    OptionSpec::new(
        "release_lock_on_hipmalloc",
        OptionType::Bool,
        OptDefault::Value("False"),
        "accepted (ROCm spelling); no effect on device memory",
    ),
    OptionSpec::new(
        "pinned_use_hip_host_register",
        OptionType::Bool,
        OptDefault::Value("False"),
        "accepted (ROCm spelling); host memory only",
    ),
    OptionSpec::new(
        "per_process_memory_fraction",
        OptionType::Fraction,
        OptDefault::Value("1.0"),
        "cap the device at this fraction of its memory, as torch.cuda.set_per_process_memory_fraction",
    ),
    OptionSpec::new(
        "backend",
        OptionType::Choice(&["native", "cudaMallocAsync"]),
        OptDefault::Value("native"),
        "native: this caching allocator; cudaMallocAsync is the policy cuda-async",
    ),
];

/// `CUDAAllocatorConfig::pinned_max_register_threads()`.
pub const PINNED_MAX_REGISTER_THREADS: u64 = 128;

fn spec_err(msg: String) -> Error {
    Error::PolicySpec(msg)
}

const P: &str = "pytorch";

fn parse_u64(key: &str, v: &str) -> Result<u64> {
    options::parse_u64(P, key, v)
}

impl PytorchConfig {
    /// Parses `PYTORCH_CUDA_ALLOC_CONF` syntax (`key:value,...`). Unknown keys are an error
    /// listing the valid ones.
    pub fn parse(conf: &str) -> Result<Self> {
        let mut c = PytorchConfig::default();
        for (key, value) in super::entry::items(&ENTRY, conf)? {
            match key {
                // AcceleratorAllocatorConfig::parseMaxSplitSize (c10/core/AllocatorConfig.cpp,
                // which CUDAAllocatorConfig defers to since torch 2.9): at least kLargeBuffer /
                // MB (CUDAAllocatorConfig's own check, before, refused 20 itself).
                "max_split_size_mb" => {
                    let mb = parse_u64(key, value)?;
                    if mb < K_LARGE_BUFFER / MB {
                        return Err(spec_err(format!("max_split_size_mb too small ({mb}), must be >= {}", K_LARGE_BUFFER / MB)));
                    }
                    c.max_split_size = mb.min(u64::MAX / MB) * MB;
                }
                // AcceleratorAllocatorConfig::parseMaxNonSplitRoundingSize: the same bound.
                "max_non_split_rounding_mb" => {
                    let mb = parse_u64(key, value)?;
                    if mb < K_LARGE_BUFFER / MB {
                        return Err(spec_err(format!("max_non_split_rounding_mb too small ({mb}), must be >= {}", K_LARGE_BUFFER / MB)));
                    }
                    // Clamped as upstream clamps it (found by tests/test_hypothesis_inputs.py:
                    // 2^63 MiB overflowed).
                    c.max_non_split_rounding = mb.min(u64::MAX / MB) * MB;
                }
                "large_segment_size_mb" => {
                    let mb = parse_u64(key, value)?;
                    if mb <= 10 {
                        return Err(spec_err(format!("large_segment_size_mb must be > 10, got {mb}")));
                    }
                    // No segment from 2^55 bytes can be served (`policy::MAX_REQUEST`); 2^63 MiB
                    // overflowed (found by tests/test_hypothesis_inputs.py).
                    let max = super::MAX_REQUEST / MB - 1;
                    if mb > max {
                        return Err(spec_err(format!("large_segment_size_mb must be at most {max}, got {mb}")));
                    }
                    c.large_segment_size = mb * MB;
                }
                "garbage_collection_threshold" => {
                    let t = options::parse_f64(P, key, value)?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(spec_err(format!("garbage_collection_threshold must be in (0.0, 1.0), got {value}")));
                    }
                    c.garbage_collection_threshold = t;
                }
                "expandable_segments" => c.expandable_segments = options::parse_bool(P, key, value)?,
                "roundup_power2_divisions" => c.roundup_power2_divisions = parse_divisions(value)?,
                "backend" => match value {
                    "native" => {}
                    "cudaMallocAsync" => {
                        return Err(spec_err(
                            "backend:cudaMallocAsync replaces the caching allocator: use the policy `cuda-async` instead".into(),
                        ))
                    }
                    _ => return Err(spec_err(format!("backend must be native or cudaMallocAsync, got '{value}'"))),
                },
                // CUDAAllocatorConfig::parsePerProcessMemoryFraction: in [0.0, 1.0].
                "per_process_memory_fraction" => {
                    let f: f64 =
                        value.parse().map_err(|_| spec_err(format!("per_process_memory_fraction expects a number, got '{value}'")))?;
                    if !(0.0..=1.0).contains(&f) {
                        return Err(spec_err(format!("per_process_memory_fraction is invalid, set it in [0.0, 1.0]; got {value}")));
                    }
                    c.per_process_memory_fraction = f;
                }
                // Host-side options (pinned memory, locking, graph capture): no effect on device
                // memory decisions, validated as upstream does.
                "release_lock_on_cudamalloc"
                | "release_lock_on_hipmalloc"
                | "pinned_use_cuda_host_register"
                | "pinned_use_hip_host_register"
                | "pinned_use_background_threads"
                | "graph_capture_record_stream_reuse" => {
                    options::parse_bool(P, key, value)?;
                }
                // CUDAAllocatorConfig::parsePinnedNumRegisterThreads: a power of 2, at most
                // pinned_max_register_threads().
                "pinned_num_register_threads" => {
                    let n = parse_u64(key, value)?;
                    if !n.is_power_of_two() {
                        return Err(spec_err(format!("Number of register threads has to be power of 2, got {n}")));
                    }
                    if n > PINNED_MAX_REGISTER_THREADS {
                        return Err(spec_err(format!(
                            "Number of register threads should be less than or equal to {PINNED_MAX_REGISTER_THREADS}, got {n}"
                        )));
                    }
                }
                // CUDAAllocatorConfig::parsePinnedReserveSegmentSize: > 0.
                "pinned_reserve_segment_size_mb" => {
                    if parse_u64(key, value)? == 0 {
                        return Err(spec_err("Pinned reserve segment size has to be greater than 0".into()));
                    }
                }
                _ => unreachable!("options::items checked the keys"),
            }
        }
        Ok(c)
    }

    /// The settings a snapshot recorded (`allocator_settings`): the parsed fields, not the
    /// string, so defaults changed by `_set_allocator_settings` are honoured too.
    pub fn from_recorded(settings: &serde_json::Value) -> Result<Self> {
        let mut c = PytorchConfig::default();
        let Some(obj) = settings.as_object() else {
            return Err(spec_err("pytorch:recorded: the trace recorded no allocator_settings (not a PyTorch snapshot?)".into()));
        };
        // An older snapshot layout: the importer assumed the defaults plus the capture's
        // PYTORCH_CUDA_ALLOC_CONF (import::pytorch::assume_allocator_settings).
        if obj.len() == 1 {
            if let Some(conf) = obj.get("PYTORCH_CUDA_ALLOC_CONF").and_then(|v| v.as_str()) {
                return PytorchConfig::parse(conf);
            }
        }
        if let Some(m) = obj.get("max_split_size").and_then(|v| v.as_i64()) {
            if m > 0 {
                c.max_split_size = m as u64;
            }
        }
        if let Some(m) = obj.get("max_non_split_rounding_size").and_then(|v| v.as_i64()) {
            if m > 0 {
                c.max_non_split_rounding = m as u64;
            }
        }
        if let Some(t) = obj.get("garbage_collection_threshold").and_then(|v| v.as_f64()) {
            c.garbage_collection_threshold = t;
        }
        if let Some(e) = obj.get("expandable_segments").and_then(|v| v.as_bool()) {
            c.expandable_segments = e;
        }
        if let Some(f) = obj.get("per_process_memory_fraction").and_then(|v| v.as_f64()) {
            c.per_process_memory_fraction = f;
        }
        if let Some(d) = obj.get("roundup_power2_divisions").and_then(|v| v.as_object()) {
            // Keyed by the interval's lower bound in MiB: "1", "2", ..., "32768".
            for (k, v) in d {
                if let (Ok(mb), Some(div)) = (k.parse::<u64>(), v.as_u64()) {
                    if mb.is_power_of_two() {
                        let i = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                        c.roundup_power2_divisions[i] = div;
                    }
                }
            }
        }
        Ok(c)
    }

    /// `CUDAAllocatorConfig::roundup_power2_divisions(size)`.
    #[inline]
    pub fn divisions_for(&self, size: u64) -> u64 {
        let log_size = 63 - size.leading_zeros() as usize;
        let interval_start = 20; // log2(1 MiB)
        let index = log_size.saturating_sub(interval_start).min(ROUNDUP_INTERVALS - 1);
        self.roundup_power2_divisions[index]
    }
}

/// `AcceleratorAllocatorConfig::parseRoundUpPower2Divisions`: either one power of two for
/// every interval, or `[256:1,512:2,>:8]` — keys are interval lower bounds in MiB (powers of
/// two), values powers of two or 0 (no rounding there), `>` sets every interval above the last
/// one named; the first entry also covers the intervals below it.
fn parse_divisions(v: &str) -> Result<[u64; ROUNDUP_INTERVALS]> {
    let mut d = [0u64; ROUNDUP_INTERVALS];
    let v = v.trim();
    let check_pow2 = |x: u64, what: &str| -> Result<()> {
        if x.is_power_of_two() {
            Ok(())
        } else {
            Err(spec_err(format!("roundup_power2_divisions: {what} must be a power of 2, got {x}")))
        }
    };
    if let Some(inner) = v.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(|| spec_err(format!("roundup_power2_divisions: missing ']' in '{v}'")))?;
        let mut last_index: Option<usize> = None;
        for item in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, val) =
                item.split_once(':').ok_or_else(|| spec_err(format!("roundup_power2_divisions: expected size:divisions, got '{item}'")))?;
            let val = parse_u64("roundup_power2_divisions", val)?;
            // "the divisions has to be power of 2 or 0 to disable roundup" (a list entry only;
            // the single value must be a power of 2).
            if val != 0 {
                check_pow2(val, "divisions")?;
            }
            if k.trim() == ">" {
                let from = last_index.map_or(0, |i| i + 1);
                for x in d.iter_mut().skip(from) {
                    *x = val;
                }
            } else {
                let mb = parse_u64("roundup_power2_divisions", k)?;
                check_pow2(mb, "interval")?;
                let index = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                if last_index.is_none() {
                    for x in d.iter_mut().take(index) {
                        *x = val;
                    }
                }
                d[index] = val;
                last_index = Some(index);
            }
        }
    } else {
        let val = parse_u64("roundup_power2_divisions", v)?;
        check_pow2(val, "divisions")?;
        d = [val; ROUNDUP_INTERVALS];
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's c10/test/core/AllocatorConfig_test.cpp (`AllocatorConfigTest.
    /// allocator_config_test`), its expected values; the `UNKNOWN_OPTION` keys it also passes are
    /// skipped by the device-generic parser but refused by CUDA's (`CUDAAllocatorConfig::
    /// parseArgs`: "Unrecognized key"), which is the one this policy models.
    #[test]
    fn upstream_allocator_config_test() {
        let c = PytorchConfig::parse(
            "max_split_size_mb:40,max_non_split_rounding_mb:30,garbage_collection_threshold:0.5,\
             roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],expandable_segments:True,pinned_use_background_threads:True",
        )
        .unwrap();
        assert_eq!(c.max_split_size, 40 * MB);
        assert_eq!(c.max_non_split_rounding, 30 * MB);
        assert_eq!(c.garbage_collection_threshold, 0.5);
        let d = |c: &PytorchConfig, mb: u64| c.divisions_for(mb * MB);
        let sizes = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192];
        assert_eq!(sizes.map(|mb| d(&c, mb)), [8, 8, 2, 4, 2, 4, 1, 1, 1]);
        assert!(c.expandable_segments);
        assert!(PytorchConfig::parse("UNKNOWN_OPTION:42").is_err());

        let c = PytorchConfig::parse("max_split_size_mb:20,max_non_split_rounding_mb:40,garbage_collection_threshold:0.8").unwrap();
        assert_eq!((c.max_split_size, c.max_non_split_rounding, c.garbage_collection_threshold), (20 * MB, 40 * MB, 0.8));

        // The knob array syntax: an interval named by none of the entries keeps 0.
        let c = PytorchConfig::parse("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]").unwrap();
        assert_eq!([64, 128, 256, 512, 1024, 2048, 4096].map(|mb| d(&c, mb)), [8, 8, 16, 1, 0, 8, 2]);

        // The single value, for backward compatibility.
        let c = PytorchConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!([64, 256, 2048].map(|mb| d(&c, mb)), [4, 4, 4]);

        // A trailing comma is accepted.
        assert!(!PytorchConfig::parse("expandable_segments:False,").unwrap().expandable_segments);
        assert!(PytorchConfig::parse("pinned_use_background_threads:False").is_ok());
    }

    #[test]
    fn parses_the_common_settings() {
        let c = PytorchConfig::parse("expandable_segments:True,max_split_size_mb:128").unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size, 128 * MB);
        let c = PytorchConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.roundup_power2_divisions, [4; 16]);
        let c = PytorchConfig::parse("garbage_collection_threshold:0.6").unwrap();
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(PytorchConfig::parse("").unwrap(), PytorchConfig::default());
    }

    #[test]
    fn every_option_of_torch_2_11_is_accepted_and_host_options_are_validated_as_upstream() {
        let all = "max_split_size_mb:128,max_non_split_rounding_mb:64,roundup_power2_divisions:4,garbage_collection_threshold:0.5,\
                   expandable_segments:False,large_segment_size_mb:32,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,\
                   pinned_num_register_threads:8,pinned_use_background_threads:True,pinned_reserve_segment_size_mb:16,\
                   graph_capture_record_stream_reuse:True,per_process_memory_fraction:0.5,backend:native";
        let c = PytorchConfig::parse(all).unwrap();
        assert_eq!(c.per_process_memory_fraction, 0.5);
        // Every option listed as valid parses.
        for key in OPTIONS.iter().map(|o| o.name) {
            assert!(all.contains(key) || key.contains("hip"), "{key} missing from the test");
        }
        // pinned_num_register_threads: a power of 2, at most 128.
        for bad in ["0", "3", "256"] {
            assert!(PytorchConfig::parse(&format!("pinned_num_register_threads:{bad}")).is_err(), "{bad}");
        }
        assert!(PytorchConfig::parse("pinned_num_register_threads:128").is_ok());
        assert!(PytorchConfig::parse("pinned_reserve_segment_size_mb:0").is_err());
        assert!(PytorchConfig::parse("per_process_memory_fraction:1.5").is_err());
        assert!(PytorchConfig::parse("per_process_memory_fraction:0.0").is_ok());
        assert!(PytorchConfig::parse("pinned_use_background_threads:maybe").is_err());
    }

    #[test]
    fn bracket_divisions_follow_parse_round_up_power2_divisions() {
        let c = PytorchConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]").unwrap();
        // 256 MiB is interval 8, 512 MiB interval 9; the first entry also covers 0..8.
        assert_eq!(&c.roundup_power2_divisions[..8], &[1; 8]);
        assert_eq!(c.roundup_power2_divisions[8], 1);
        assert_eq!(c.roundup_power2_divisions[9], 2);
        assert_eq!(&c.roundup_power2_divisions[10..], &[8; 6]);
        assert_eq!(c.divisions_for(600 * MB), 2);
        assert_eq!(c.divisions_for(100), 1);
    }

    #[test]
    fn errors_name_the_problem_and_list_valid_options() {
        let e = PytorchConfig::parse("max_split_mb:128").unwrap_err().to_string();
        assert!(e.contains("unknown") && e.contains("max_split_size_mb"), "{e}");
        assert!(PytorchConfig::parse("max_split_size_mb:10").is_err());
        // c10/core/AllocatorConfig.cpp (torch >= 2.9): `val_env >= min_allowed_split_size_mb`
        // (20); the list's divisions may be 0, the single value may not.
        assert!(PytorchConfig::parse("max_split_size_mb:19").is_err());
        assert_eq!(PytorchConfig::parse("max_split_size_mb:20").unwrap().max_split_size, 20 * MB);
        assert!(PytorchConfig::parse("max_non_split_rounding_mb:19").is_err());
        assert!(PytorchConfig::parse("max_non_split_rounding_mb:20").is_ok());
        let c = PytorchConfig::parse("roundup_power2_divisions:[64:0,>:4]").unwrap();
        assert_eq!((c.divisions_for(MB), c.divisions_for(64 * MB), c.divisions_for(128 * MB)), (0, 0, 4));
        assert!(PytorchConfig::parse("roundup_power2_divisions:0").is_err());
        assert!(PytorchConfig::parse("roundup_power2_divisions:[64:3]").is_err());
        assert!(PytorchConfig::parse("expandable_segments:maybe").is_err());
        assert!(PytorchConfig::parse("roundup_power2_divisions:3").is_err());
        assert!(PytorchConfig::parse("backend:cudaMallocAsync").unwrap_err().to_string().contains("cuda-async"));
    }

    #[test]
    fn recorded_settings_of_a_real_snapshot() {
        // allocator_settings of ../shared/traces/pytorch/gpt2_train__pow2div4 (torch 2.11).
        let s = serde_json::json!({"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:4", "max_split_size": -1,
            "garbage_collection_threshold": 0.0, "expandable_segments": false,
            "roundup_power2_divisions": {"1": 4, "2": 4, "4": 4, "8": 4, "16": 4, "32": 4, "64": 4, "128": 4, "256": 4,
            "512": 4, "1024": 4, "2048": 4, "4096": 4, "8192": 4, "16384": 4, "32768": 4}});
        let c = PytorchConfig::from_recorded(&s).unwrap();
        assert_eq!(c, PytorchConfig::parse("roundup_power2_divisions:4").unwrap());
    }
}
