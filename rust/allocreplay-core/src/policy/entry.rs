//! What the registry knows of a policy ([`PolicyEntry`]): its name, the upstream it models, its
//! options and what replaying it means. Each policy module declares its own `ENTRY`;
//! `crate::registry` lists them with their constructors (the entries never import the list).

use super::options::{split_top_level, OptionSpec, Syntax};
use crate::error::{Error, Result};

/// What replaying an entry means.
#[derive(Clone, Copy)]
pub enum PolicyKind {
    /// An allocator that sees requests in order (a `Policy`, built by `crate::registry`).
    Online,
    /// A bound computed knowing every lifetime first (`ideal`, `offline`): replayed by
    /// `offline::plan_trace`, not a `Policy`.
    OfflineBound,
}

impl std::fmt::Debug for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PolicyKind {
    pub fn name(&self) -> &'static str {
        match self {
            PolicyKind::Online => "online",
            PolicyKind::OfflineBound => "offline-bound",
        }
    }
}

/// One policy of the registry.
#[derive(Debug)]
pub struct PolicyEntry {
    pub name: &'static str,
    /// One line.
    pub summary: &'static str,
    /// The upstream code it mirrors.
    pub models: &'static str,
    pub syntax: Syntax,
    pub options: &'static [OptionSpec],
    pub kind: PolicyKind,
    /// The framework whose settings it models, for `tune --framework` (`pytorch`, `tf`, `jax`).
    pub framework: Option<&'static str>,
    /// One environment variable that takes the whole options string
    /// (`PYTORCH_CUDA_ALLOC_CONF`); otherwise options name their own ([`OptionSpec::env`]).
    pub env: Option<&'static str>,
    /// How the framework writes booleans (`True`/`False` for PyTorch, `true`/`false` else).
    pub bool_words: (&'static str, &'static str),
    /// Accepts `NAME:recorded` (the settings the trace recorded).
    pub recorded: bool,
    /// Pairs of options a search never sets together.
    pub search_excludes: &'static [(&'static str, &'static str)],
    /// The largest device memory (the limit a replay runs under: `--capacity`, a recorded cap,
    /// the device's memory) the policy models; a replay under a larger limit is refused with
    /// the reason, never silently clamped (issue 28, class 2; docs/bad-inputs.md). The
    /// allocators that place memory in the modelled CUDA address space stop at what it holds
    /// ([`crate::device::memory::MAX_DEVICE_MEMORY`]), `cuda-async` at its pool's reserved
    /// range, the offline bounds at [`crate::units::MAX_CAPACITY`].
    pub max_capacity: u64,
    /// What bounds [`Self::max_capacity`], for the message of [`Self::check_capacity`].
    pub max_capacity_why: &'static str,
    /// Where the real allocator's peak reserved lands around the replay's when it varies from
    /// run to run for the same program (`cuda-async`: the driver's pool); `None` for the
    /// deterministic allocators, whose replay is the real peak.
    pub peak_band: Option<PeakBand>,
}

/// A range of real peaks around a replay's (issue 29, item 3): `low = expected x low`,
/// `high = expected x high`, calibrated on real runs (`scripts/cuda_async_band.py`). A verdict
/// that the workload fits is based on `high`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeakBand {
    pub low: f64,
    pub high: f64,
    /// Where the factors come from, for the docs and `policies`.
    pub why: &'static str,
}

impl PeakBand {
    /// `(low, high)` bytes around `expected`: low rounded down, high up.
    pub fn around(&self, expected: u64) -> (u64, u64) {
        let e = expected as f64;
        ((e * self.low).floor() as u64, ((e * self.high).ceil() as u64).max(expected))
    }
}

impl PolicyEntry {
    /// The option named `key` (or one of its aliases).
    pub fn option(&self, key: &str) -> Option<&'static OptionSpec> {
        self.options.iter().find(|o| o.name == key || o.aliases.contains(&key))
    }

    pub fn option_names(&self) -> Vec<&'static str> {
        self.options.iter().map(|o| o.name).collect()
    }

    pub fn unknown_option(&self, key: &str) -> Error {
        if self.options.is_empty() {
            Error::PolicySpec(format!("unknown option '{key}' for {}; it takes no options", self.name))
        } else {
            Error::PolicySpec(format!("unknown option '{key}' for {}; options: {}", self.name, self.option_names().join(", ")))
        }
    }

    /// `Ok` when the policy models a device of `limit` bytes (`None`: no limit); else why not,
    /// naming the policy, the largest device memory it models and `limit`'s `source` (a
    /// `replay::CapacitySource` name): a replay under a limit beyond [`Self::max_capacity`] is
    /// refused, never clamped.
    pub fn check_capacity(&self, limit: Option<u64>, source: &str) -> Result<()> {
        let Some(limit) = limit.filter(|&l| l > self.max_capacity) else { return Ok(()) };
        Err(Error::InvalidArgument(format!(
            "{} models device memories up to {} bytes ({}, {}); the limit of this replay is {limit} bytes ({source}): give a --capacity of at most that",
            self.name,
            self.max_capacity,
            crate::units::format_bytes(self.max_capacity),
            self.max_capacity_why,
        )))
    }

    /// The `name:options` spec of some option values (in the policy's syntax).
    pub fn spec(&self, values: &[(&str, &str)]) -> String {
        if values.is_empty() {
            return self.name.to_string();
        }
        let sep = if self.syntax == Syntax::Conf { ":" } else { "=" };
        let opts: Vec<String> = values.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
        format!("{}:{}", self.name, opts.join(","))
    }
}

/// The options of a spec as `(option name, value)` items, in order, keys checked against the
/// policy's declared options (aliases mapped to the option's name) and given at most once.
pub fn items<'a>(entry: &PolicyEntry, options: &'a str) -> Result<Vec<(&'static str, &'a str)>> {
    let policy = entry.name;
    let mut out: Vec<(&'static str, &'a str)> = Vec::new();
    for item in split_top_level(options) {
        let split = match entry.syntax {
            Syntax::Conf => item.find(':'),
            Syntax::KeyValue => item.find(['=', ':']),
        };
        let (key, value) = match split {
            Some(i) => (item[..i].trim(), item[i + 1..].trim()),
            None if entry.options.is_empty() => {
                return Err(Error::PolicySpec(format!("{policy}: takes no options, got '{item}'")));
            }
            None => {
                let example = entry.options[0];
                let sep = if entry.syntax == Syntax::Conf { ":" } else { "=" };
                return Err(Error::PolicySpec(format!(
                    "{policy}: option '{item}' has no value (expected KEY{sep}VALUE, e.g. {}{sep}{}); options: {}",
                    example.name,
                    example.default.value().or(example.search.first().copied()).unwrap_or("..."),
                    entry.option_names().join(", ")
                )));
            }
        };
        let Some(opt) = entry.option(key) else {
            return Err(entry.unknown_option(key));
        };
        if out.iter().any(|(seen, _)| *seen == opt.name) {
            return Err(Error::PolicySpec(format!("{policy}: option '{}' given twice", opt.name)));
        }
        out.push((opt.name, value));
    }
    Ok(out)
}
