//! `ideal` and `offline`: registry entries for the offline bounds of
//! [`crate::offline::plan_trace`], which see every lifetime before placing anything and so are
//! not online [`super::Policy`]s; `replay` computes them apart (`replay::offline_run`).

use super::entry::items;
use super::entry::{PolicyEntry, PolicyKind};
use super::options::{parse_u64, OptDefault, OptionSpec, OptionType, Syntax};
use crate::error::Result;

const OPTIONS: &[OptionSpec] = &[OptionSpec::new(
    "alignment",
    OptionType::Integer,
    OptDefault::Value("0"),
    "bytes each size is rounded up to (a power of two); 0: the source's default (512 for PyTorch, 256 else)",
)];

pub static IDEAL: PolicyEntry = PolicyEntry {
    name: "ideal",
    summary: "lower bound: the peak of live requested bytes (no allocator can do better)",
    models: "no allocator: max over time of the bytes live (`offline::plan_trace`)",
    syntax: Syntax::KeyValue,
    options: OPTIONS,
    kind: PolicyKind::OfflineBound,
    framework: None,
    env: None,
    bool_words: ("true", "false"),
    recorded: false,
    search_excludes: &[],
    max_capacity: crate::units::MAX_CAPACITY,
    max_capacity_why: "the largest device memory it models",
    peak_band: None,
};

pub static OFFLINE: PolicyEntry = PolicyEntry {
    name: "offline",
    summary: "XLA's best-fit heap plan knowing every lifetime in advance",
    models: "XLA's heap simulator (`GlobalDecreasingSizeBestFitHeap`, xla/service/heap_simulator)",
    syntax: Syntax::KeyValue,
    options: OPTIONS,
    kind: PolicyKind::OfflineBound,
    framework: None,
    env: None,
    bool_words: ("true", "false"),
    recorded: false,
    search_excludes: &[],
    max_capacity: crate::units::MAX_CAPACITY,
    max_capacity_why: "the largest device memory it models",
    peak_band: None,
};

/// The alignment of an offline bound's spec options (0: the source's default).
pub fn alignment(entry: &PolicyEntry, options: &str) -> Result<u64> {
    let mut alignment = 0;
    for (k, v) in items(entry, options)? {
        if k == "alignment" {
            alignment = parse_u64(entry.name, k, v)?;
            if alignment != 0 && (!alignment.is_power_of_two() || alignment > crate::offline::MAX_ALIGNMENT) {
                return Err(crate::error::Error::PolicySpec(format!(
                    "{}: alignment must be 0 (the trace's default) or a power of two from 1 to 2^30 (1 GiB), got {v}",
                    entry.name
                )));
            }
        }
    }
    Ok(alignment)
}
