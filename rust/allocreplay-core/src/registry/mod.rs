//! The policy registry: every policy `replay --policy` knows, as one static list. Each policy
//! declares its entry in its own module (name, summary, the upstream it models, its options:
//! [`PolicyEntry`]) and a constructor generic in what it boxes the policy into; [`REGISTRY`]
//! pairs each entry with its constructor, boxed for the engine ([`BoxedPolicy`]). Spec parsing
//! ([`build`]), [`POLICY_NAMES`], the command line's help, `allocreplay policies`,
//! docs/policies.md and the error messages all come from here. Adding a policy = one module
//! with its `ENTRY` and constructor + one line in [`REGISTRY`].
//!
//! Above the policies (which never import it back) and the engine (whose row loop each
//! constructor instantiates for its policy type).

pub mod invariants;

use std::ops::Deref;
use std::sync::LazyLock;

use crate::engine::BoxedPolicy;
use crate::error::{Error, Result};
use crate::policy::entry::items;
use crate::policy::options::OptionType;
use crate::policy::spec::split_spec;
use crate::policy::{bfc, bfc_config, bounds, cuda_async, cuda_malloc, managed, pytorch, pytorch_config};
pub use crate::policy::{PolicyContext, PolicyEntry, PolicyKind};

/// Builds an online policy from the options part of its spec (after `NAME:`), boxed for the
/// engine.
pub type Ctor = fn(&str, &PolicyContext) -> Result<BoxedPolicy>;

/// One policy of the registry: its entry (dereferences to it) and, for an online policy, its
/// constructor.
#[derive(Debug)]
pub struct Registered {
    pub entry: &'static PolicyEntry,
    ctor: Option<Ctor>,
}

impl Deref for Registered {
    type Target = PolicyEntry;
    fn deref(&self) -> &PolicyEntry {
        self.entry
    }
}

const fn online(entry: &'static PolicyEntry, ctor: Ctor) -> Registered {
    Registered { entry, ctor: Some(ctor) }
}

const fn bound(entry: &'static PolicyEntry) -> Registered {
    Registered { entry, ctor: None }
}

/// Every policy, in the order `--help` and the docs list them.
pub static REGISTRY: &[Registered] = &[
    online(&pytorch_config::ENTRY, pytorch::from_spec),
    online(&bfc_config::BFC, bfc::build_bfc),
    online(&bfc_config::TF, bfc::build_tf),
    online(&bfc_config::JAX, bfc::build_jax),
    online(&cuda_async::ENTRY, cuda_async::from_spec),
    online(&cuda_malloc::ENTRY, cuda_malloc::from_spec),
    online(&managed::ENTRY, managed::from_spec),
    bound(&bounds::IDEAL),
    bound(&bounds::OFFLINE),
];

/// A `--policy` spec parsed once, where a replay starts: an online allocator (built per device
/// from its text, by the registry or a test's factory), or one of the offline bounds, which
/// `replay` plans with their own runner instead of building a policy.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicySpec {
    Online { text: String },
    Bound { text: String, bound: Bound, alignment: u64 },
}

/// The offline bounds (`policy::bounds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The peak of live requested bytes (`offline::ideal_peak`).
    Ideal,
    /// XLA's best-fit heap plan (`offline::plan_trace`).
    Offline,
}

impl PolicySpec {
    /// A bound's options are checked here (its alignment); an online spec's when it is built.
    /// A name the registry does not know is online: the factory builds or rejects it.
    pub fn parse(text: &str) -> Result<PolicySpec> {
        let (name, options) = split_spec(text);
        let bound = REGISTRY.iter().find(|r| r.name == name && matches!(r.kind, PolicyKind::OfflineBound)).map(|r| {
            let bound = if std::ptr::eq(r.entry, &bounds::IDEAL) { Bound::Ideal } else { Bound::Offline };
            (bound, r.entry)
        });
        Ok(match bound {
            Some((bound, entry)) => PolicySpec::Bound { text: text.to_string(), bound, alignment: bounds::alignment(entry, options)? },
            None => PolicySpec::Online { text: text.to_string() },
        })
    }

    /// The spec as the user wrote it (the `policy` column of every result).
    pub fn text(&self) -> &str {
        match self {
            PolicySpec::Online { text } | PolicySpec::Bound { text, .. } => text,
        }
    }
}

/// The names of [`REGISTRY`], for error messages and `--help`.
pub static POLICY_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| REGISTRY.iter().map(|e| e.name).collect());

/// The entry of a policy name.
pub fn lookup(name: &str) -> Result<&'static PolicyEntry> {
    registered(name).map(|r| r.entry)
}

fn registered(name: &str) -> Result<&'static Registered> {
    REGISTRY
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| Error::PolicySpec(format!("unknown policy '{name}'; known policies: {}", POLICY_NAMES.join(", "))))
}

/// The entry of a spec and its options string.
pub fn parse(spec: &str) -> Result<(&'static PolicyEntry, &str)> {
    let (name, options) = split_spec(spec);
    Ok((lookup(name)?, options))
}

/// Builds the online policy of a spec for one device.
pub fn build(spec: &str, ctx: &PolicyContext) -> Result<BoxedPolicy> {
    let (name, options) = split_spec(spec);
    let entry = registered(name)?;
    match entry.ctor {
        Some(ctor) => ctor(options, ctx),
        None => Err(Error::PolicySpec(format!(
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
            let b = crate::policy::options::parse_bool(entry.name, k, v)?;
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
    use super::*;
    use crate::policy::options::{OptDefault, FALSE_WORDS, TRUE_WORDS};
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
            PolicyKind::Online => build(spec, &ctx).map(|_| ()),
            PolicyKind::OfflineBound => bounds::alignment(entry, options).map(|_| ()),
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
        use crate::policy::bfc_config::{parse_bfc, parse_jax, parse_tf};
        use crate::policy::pytorch_config::PytorchConfig;
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
