//! The policy registry: every policy `replay --policy` knows, as one static list. Each policy
//! declares its entry in its own module (name, summary, the upstream it models, its options and
//! its constructor); [`REGISTRY`] lists them. Spec parsing ([`build`]), [`POLICY_NAMES`], the
//! command line's help, `allocreplay policies`, docs/policies.md and the error messages all come
//! from here. Adding a policy = one module with its `ENTRY` + one line in [`REGISTRY`].

use std::sync::LazyLock;

use super::options::{items, OptionSpec, OptionType, Syntax};
use super::spec::{split_spec, PolicyContext};
use super::Policy;
use crate::error::{Error, Result};

/// Builds an online policy from the options part of its spec (after `NAME:`).
pub type Ctor = fn(&str, &PolicyContext) -> Result<Box<dyn Policy>>;

/// What replaying an entry means.
#[derive(Clone, Copy)]
pub enum PolicyKind {
    /// An allocator that sees requests in order (`Policy`).
    Online(Ctor),
    /// A bound computed knowing every lifetime first (`ideal`, `offline`): replayed by
    /// [`crate::offline::plan_trace`], not a `Policy`.
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
            PolicyKind::Online(_) => "online",
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
    /// ([`crate::engine::device::MAX_DEVICE_MEMORY`]), `cuda-async` at its pool's reserved
    /// range, the offline bounds at [`crate::units::MAX_CAPACITY`].
    pub max_capacity: u64,
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
        let what = if self.max_capacity == crate::engine::device::MAX_DEVICE_MEMORY {
            "what its modelled CUDA address space holds"
        } else if self.max_capacity == super::cuda_async::POOL_VA {
            "what its memory pool's reserved address range holds"
        } else {
            "the largest device memory it models"
        };
        Err(Error::InvalidArgument(format!(
            "{} models device memories up to {} bytes ({}, {what}); the limit of this replay is {limit} bytes ({source}): give a --capacity of at most that",
            self.name,
            self.max_capacity,
            crate::units::format_bytes(self.max_capacity),
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

/// Every policy, in the order `--help` and the docs list them.
pub static REGISTRY: &[&PolicyEntry] = &[
    &super::pytorch::ENTRY,
    &super::bfc_config::BFC,
    &super::bfc_config::TF,
    &super::bfc_config::JAX,
    &super::cuda_async::ENTRY,
    &super::cuda_malloc::ENTRY,
    &super::managed::ENTRY,
    &super::bounds::IDEAL,
    &super::bounds::OFFLINE,
];

/// The names of [`REGISTRY`], for error messages and `--help`.
pub static POLICY_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| REGISTRY.iter().map(|e| e.name).collect());

/// The entry of a policy name.
pub fn lookup(name: &str) -> Result<&'static PolicyEntry> {
    REGISTRY
        .iter()
        .copied()
        .find(|e| e.name == name)
        .ok_or_else(|| Error::PolicySpec(format!("unknown policy '{name}'; known policies: {}", POLICY_NAMES.join(", "))))
}

/// The entry of a spec and its options string.
pub fn parse(spec: &str) -> Result<(&'static PolicyEntry, &str)> {
    let (name, options) = split_spec(spec);
    Ok((lookup(name)?, options))
}

/// Builds the online policy of a spec for one device.
pub fn build(spec: &str, ctx: &PolicyContext) -> Result<Box<dyn Policy>> {
    let (entry, options) = parse(spec)?;
    match entry.kind {
        PolicyKind::Online(ctor) => ctor(options, ctx),
        PolicyKind::OfflineBound => Err(Error::PolicySpec(format!(
            "'{}' is an offline bound ({}), not an allocator: `replay` reports it, but it makes no decisions to build or validate",
            entry.name, entry.summary
        ))),
    }
}

/// The text to paste so that the real framework runs with a spec's settings
/// (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, `XLA_PYTHON_CLIENT_PREALLOCATE=false
/// XLA_PYTHON_CLIENT_MEM_FRACTION=0.9`, ...). Empty for a spec of the defaults. Options with
/// no environment variable are named after a `;` (e.g. TensorFlow's memory_limit, a
/// `tf.config` setting).
pub fn env_text(spec: &str) -> Result<String> {
    let (entry, options) = parse(spec)?;
    if options == "recorded" && entry.recorded {
        return Err(Error::PolicySpec(format!("{spec}: the trace's recorded settings have no text of their own; name the options")));
    }
    let kv = items(entry, options)?;
    let norm = |k: &str, v: &str| -> Result<String> {
        let opt = entry.option(k).expect("items() checked the keys");
        Ok(if opt.ty == OptionType::Bool {
            let b = super::options::parse_bool(entry.name, k, v)?;
            (if b { entry.bool_words.0 } else { entry.bool_words.1 }).to_string()
        } else {
            v.to_string()
        })
    };
    if let Some(var) = entry.env {
        if kv.is_empty() {
            return Ok(String::new());
        }
        let parts = kv.iter().map(|(k, v)| Ok(format!("{k}:{}", norm(k, v)?))).collect::<Result<Vec<_>>>()?;
        return Ok(format!("{var}={}", parts.join(",")));
    }
    let (mut vars, mut other) = (Vec::new(), Vec::new());
    for (k, v) in &kv {
        match entry.option(k).and_then(|o| o.env) {
            Some(var) => vars.push(format!("{var}={}", norm(k, v)?)),
            None => other.push(format!("{k}={}", norm(k, v)?)),
        }
    }
    let mut text = vars.join(" ");
    if !other.is_empty() {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str(&format!(
            "{} setting{} with no environment variable: {}",
            entry.name,
            if other.len() > 1 { "s" } else { "" },
            other.join(", ")
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::super::options::{OptDefault, FALSE_WORDS, TRUE_WORDS};
    use super::*;
    use crate::trace::{DeviceInfo, TraceMetadata};

    fn metadata(source: &str) -> TraceMetadata {
        let mut md = TraceMetadata::new(source);
        md.devices.push(DeviceInfo { index: 0, total_memory: Some(80 << 30), ..Default::default() });
        md
    }

    /// Builds `spec` the way `replay` does: an online policy, or an offline bound's options.
    fn check(spec: &str, md: &TraceMetadata) -> Result<()> {
        let ctx = PolicyContext { metadata: md, device: md.device(0), capacity: Some(64 << 30) };
        let (entry, options) = parse(spec)?;
        match entry.kind {
            PolicyKind::Online(_) => build(spec, &ctx).map(|_| ()),
            PolicyKind::OfflineBound => super::super::bounds::alignment(entry, options).map(|_| ()),
        }
    }

    #[test]
    fn every_option_parses_its_default_and_its_search_values() {
        let md = metadata("pytorch");
        let mut searched = 0;
        for e in REGISTRY {
            assert!(!e.summary.is_empty() && !e.models.is_empty(), "{}", e.name);
            check(e.name, &md).unwrap_or_else(|err| panic!("{}: {err}", e.name));
            for o in e.options {
                assert!(!o.help.is_empty(), "{}.{}", e.name, o.name);
                let values = o.default.value().into_iter().chain(o.search.iter().copied());
                for v in values {
                    let spec = e.spec(&[(o.name, v)]);
                    check(&spec, &md).unwrap_or_else(|err| panic!("{spec}: {err}"));
                    searched += 1;
                }
                for &c in o.ty.choices() {
                    let spec = e.spec(&[(o.name, c)]);
                    // A choice may be declared only to say which policy replaces it.
                    if let Err(err) = check(&spec, &md) {
                        assert!(err.to_string().contains("use"), "{spec}: {err}");
                    }
                }
            }
        }
        assert!(searched > 30, "{searched}");
    }

    #[test]
    fn an_option_at_its_default_value_changes_nothing() {
        // The spec with the default written out parses to the same settings as the bare name.
        use super::super::bfc_config::{parse_bfc, parse_jax, parse_tf};
        use super::super::pytorch_config::PytorchConfig;
        let md = metadata("xplane");
        let ctx = PolicyContext { metadata: &md, device: md.device(0), capacity: Some(64 << 30) };
        for e in REGISTRY {
            for o in e.options {
                let Some(v) = o.default.value() else { continue };
                let opts = e.spec(&[(o.name, v)]);
                let opts = opts.split_once(':').unwrap().1;
                match e.name {
                    "pytorch" => assert_eq!(PytorchConfig::parse(opts).unwrap(), PytorchConfig::default(), "{opts}"),
                    "bfc" => assert_eq!(parse_bfc(opts, &ctx).unwrap().renamed(""), parse_bfc("", &ctx).unwrap().renamed(""), "{opts}"),
                    "tf" => assert_eq!(parse_tf(opts, &ctx).unwrap().renamed(""), parse_tf("", &ctx).unwrap().renamed(""), "{opts}"),
                    "jax" => assert_eq!(parse_jax(opts, &ctx).unwrap().renamed(""), parse_jax("", &ctx).unwrap().renamed(""), "{opts}"),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn unknown_options_and_policies_are_named_with_the_known_ones() {
        let md = metadata("pytorch");
        let e = check("bfc:foo=1", &md).unwrap_err().to_string();
        assert!(e.starts_with("unknown option 'foo' for bfc; options: allow_growth, garbage_collection"), "{e}");
        let e = check("pytorch:max_split_mb:128", &md).unwrap_err().to_string();
        assert!(e.contains("unknown option 'max_split_mb' for pytorch; options: ") && e.contains("max_split_size_mb"), "{e}");
        let e = check("cuda-malloc:x=1", &md).unwrap_err().to_string();
        assert!(e.contains("takes no options"), "{e}");
        let e = check("nosuch:opt", &md).unwrap_err().to_string();
        assert_eq!(e, format!("unknown policy 'nosuch'; known policies: {}", POLICY_NAMES.join(", ")));
        assert!(matches!(check("jax:preallocate=false,preallocate=true", &md), Err(Error::PolicySpec(m)) if m.contains("twice")));
    }

    #[test]
    fn offline_bounds_are_entries_but_not_allocators() {
        // Before the registry, POLICY_NAMES listed `ideal` but `build` said "unknown policy 'ideal'".
        let md = metadata("pytorch");
        let ctx = PolicyContext { metadata: &md, device: md.device(0), capacity: None };
        for name in ["ideal", "offline"] {
            assert!(POLICY_NAMES.contains(&name));
            let e = build(name, &ctx).err().unwrap().to_string();
            assert!(e.contains("offline bound") && !e.contains("unknown policy"), "{e}");
        }
        assert!(check("offline:alignment=256", &md).is_ok());
        assert!(check("offline:align=3", &md).unwrap_err().to_string().contains("unknown option 'align' for offline"));
    }

    #[test]
    fn boolean_words_are_the_same_for_every_policy() {
        let md = metadata("pytorch");
        let mut bools = 0;
        for e in REGISTRY {
            for o in e.options.iter().filter(|o| o.ty == OptionType::Bool) {
                // jax:preallocate=true with mem_fraction > 1 etc. are all valid; `tf`/`jax` need
                // device memory, which the metadata gives.
                for w in TRUE_WORDS.iter().chain(FALSE_WORDS).flat_map(|w| [w.to_string(), w.to_uppercase()]) {
                    let spec = e.spec(&[(o.name, &w)]);
                    check(&spec, &md).unwrap_or_else(|err| panic!("{spec}: {err}"));
                }
                let spec = e.spec(&[(o.name, "maybe")]);
                assert!(check(&spec, &md).unwrap_err().to_string().contains("must be true or false"), "{spec}");
                bools += 1;
            }
        }
        assert!(bools >= 8, "{bools}");
    }

    #[test]
    fn search_excludes_name_searched_options() {
        for e in REGISTRY {
            for (a, b) in e.search_excludes {
                for name in [a, b] {
                    assert!(e.option(name).is_some_and(|o| !o.search.is_empty()), "{}: {name}", e.name);
                }
            }
        }
    }

    #[test]
    fn defaults_that_are_unset_say_what_happens() {
        for e in REGISTRY {
            for o in e.options {
                if let OptDefault::Unset(text) = o.default {
                    assert!(!text.is_empty(), "{}.{}", e.name, o.name);
                }
            }
        }
    }

    #[test]
    fn env_text_is_what_the_frameworks_read() {
        assert_eq!(env_text("pytorch").unwrap(), "");
        assert_eq!(
            env_text("pytorch:expandable_segments:true,roundup_power2_divisions:[256:1,>:8]").unwrap(),
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,roundup_power2_divisions:[256:1,>:8]"
        );
        assert_eq!(env_text("tf:allow_growth=True").unwrap(), "TF_FORCE_GPU_ALLOW_GROWTH=true");
        assert_eq!(
            env_text("jax:preallocate=0,mem_fraction=0.9,allocator=platform").unwrap(),
            "XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 XLA_PYTHON_CLIENT_ALLOCATOR=platform"
        );
        assert_eq!(
            env_text("tf:allow_growth=true,memory_limit=10GiB").unwrap(),
            "TF_FORCE_GPU_ALLOW_GROWTH=true; tf setting with no environment variable: memory_limit=10GiB"
        );
        assert!(env_text("pytorch:recorded").is_err());
    }
}
