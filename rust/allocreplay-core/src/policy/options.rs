//! Policy options: how each policy declares them ([`OptionSpec`]) and the one set of value
//! parsers every policy uses, so that `true`, a size or a fraction mean the same thing in every
//! spec. Splitting a spec's options into `(key, value)` items also happens here, with the
//! registry's error messages ("unknown option 'foo' for bfc; options: ...").

use super::spec::PolicyContext;
use crate::error::{Error, Result};
use crate::units::{parse_capacity, Capacity};

/// What kind of value an option takes (shown in `--help`, `allocreplay policies` and the docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionType {
    Bool,
    Integer,
    /// Bytes, a size with a unit (`80GiB`) or a fraction of the device's memory (`0.5`).
    Bytes,
    /// A number in (0, 1] (or the bound the policy states).
    Fraction,
    Float,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// A number, or PyTorch's bracket list (`[256:1,512:2,>:8]`).
    List,
}

impl OptionType {
    pub fn name(self) -> &'static str {
        match self {
            OptionType::Bool => "bool",
            OptionType::Integer => "integer",
            OptionType::Bytes => "bytes",
            OptionType::Fraction => "fraction",
            OptionType::Float => "float",
            OptionType::Choice(_) => "choice",
            OptionType::List => "list",
        }
    }

    pub fn choices(self) -> &'static [&'static str] {
        match self {
            OptionType::Choice(c) => c,
            _ => &[],
        }
    }
}

/// An option's default: a value the option accepts, or a description of what happens when the
/// option is not given (no value of the option means "unset", e.g. PyTorch's unlimited
/// `max_split_size_mb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptDefault {
    Value(&'static str),
    Unset(&'static str),
}

impl OptDefault {
    /// The text shown for it.
    pub fn text(self) -> &'static str {
        match self {
            OptDefault::Value(v) | OptDefault::Unset(v) => v,
        }
    }

    pub fn value(self) -> Option<&'static str> {
        match self {
            OptDefault::Value(v) => Some(v),
            OptDefault::Unset(_) => None,
        }
    }
}

/// One option of a policy.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    pub name: &'static str,
    pub ty: OptionType,
    pub default: OptDefault,
    /// One line.
    pub help: &'static str,
    /// Values a search (`allocreplay tune`) tries besides the default; empty: not searched.
    pub search: &'static [&'static str],
    /// Other names accepted for it (upstream's spelling).
    pub aliases: &'static [&'static str],
    /// The environment variable that sets it in the real framework, when there is one of its
    /// own (PyTorch's options all go into the policy's `env`, PYTORCH_CUDA_ALLOC_CONF).
    pub env: Option<&'static str>,
}

impl OptionSpec {
    /// An option with no search values, aliases or environment variable.
    pub const fn new(name: &'static str, ty: OptionType, default: OptDefault, help: &'static str) -> Self {
        OptionSpec { name, ty, default, help, search: &[], aliases: &[], env: None }
    }

    pub const fn search(mut self, values: &'static [&'static str]) -> Self {
        self.search = values;
        self
    }

    pub const fn aliases(mut self, names: &'static [&'static str]) -> Self {
        self.aliases = names;
        self
    }

    pub const fn env(mut self, var: &'static str) -> Self {
        self.env = Some(var);
        self
    }
}

/// How a policy's options are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// `PYTORCH_CUDA_ALLOC_CONF`: `key:value` separated by commas, values may be bracket lists
    /// (`roundup_power2_divisions:[256:1,>:8]`).
    Conf,
    /// `key=value` or `key:value`, separated by commas.
    KeyValue,
}

/// The words every boolean option accepts (any letter case).
pub const TRUE_WORDS: &[&str] = &["true", "1", "yes", "on"];
pub const FALSE_WORDS: &[&str] = &["false", "0", "no", "off"];

fn err(policy: &str, key: &str, msg: String) -> Error {
    Error::PolicySpec(format!("{policy}: {key} {msg}"))
}

/// The one boolean parser: `true`/`1`/`yes`/`on`, `false`/`0`/`no`/`off`, any letter case.
pub fn parse_bool(policy: &str, key: &str, value: &str) -> Result<bool> {
    let v = value.trim().to_ascii_lowercase();
    if TRUE_WORDS.contains(&v.as_str()) {
        Ok(true)
    } else if FALSE_WORDS.contains(&v.as_str()) {
        Ok(false)
    } else {
        Err(err(policy, key, format!("must be true or false ({} / {}), got '{value}'", TRUE_WORDS.join("|"), FALSE_WORDS.join("|"))))
    }
}

/// A non-negative integer.
pub fn parse_u64(policy: &str, key: &str, value: &str) -> Result<u64> {
    value.trim().parse::<u64>().map_err(|_| err(policy, key, format!("expects a non-negative integer, got '{value}'")))
}

/// A finite number.
pub fn parse_f64(policy: &str, key: &str, value: &str) -> Result<f64> {
    match value.trim().parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        _ => Err(err(policy, key, format!("expects a number, got '{value}'"))),
    }
}

/// A number in (0, max].
pub fn parse_fraction(policy: &str, key: &str, value: &str, max: f64) -> Result<f64> {
    let f = parse_f64(policy, key, value)?;
    if !(f > 0.0 && f <= max) {
        return Err(err(policy, key, format!("must be in (0, {max}], got {value}")));
    }
    Ok(f)
}

/// A size: `0`, bytes, a size with a unit (`units::parse_capacity`), or a fraction of
/// `device_memory` (`0.5`); `None` device memory makes a fraction an error naming the fix.
pub fn parse_size(policy: &str, key: &str, value: &str, device_memory: Option<u64>) -> Result<u64> {
    if value.trim() == "0" {
        return Ok(0);
    }
    match parse_capacity(value).map_err(|e| err(policy, key, format!("{e}")))? {
        Capacity::Bytes(b) => Ok(b),
        Capacity::Fraction(f) => device_memory.map(|d| (d as f64 * f) as u64).ok_or_else(|| {
            err(
                policy,
                key,
                format!("={value} is a fraction of device memory, which the trace does not record; give bytes (e.g. 80GiB) or --capacity"),
            )
        }),
    }
}

/// A size whose fractions are of the replayed device's total memory (`Capacity::resolve`).
pub fn parse_device_size(policy: &str, key: &str, value: &str, ctx: &PolicyContext) -> Result<u64> {
    if value.trim() == "0" {
        return Ok(0);
    }
    let cap = parse_capacity(value).map_err(|e| err(policy, key, format!("{e}")))?;
    match cap {
        Capacity::Bytes(b) => Ok(b),
        Capacity::Fraction(_) => {
            cap.resolve(ctx.device.map(|d| d.index), ctx.device.and_then(|d| d.total_memory)).map_err(|e| err(policy, key, format!("{e}")))
        }
    }
}

/// Splits `a:1,b:[x:1,y:2],c:True` at top-level commas (outside brackets).
pub fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, ch) in s.char_indices() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|t| !t.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_bool_words_in_any_case() {
        for w in ["true", "True", "TRUE", "1", "yes", "On"] {
            assert!(parse_bool("p", "k", w).unwrap(), "{w}");
        }
        for w in ["false", "False", "0", "no", "OFF"] {
            assert!(!parse_bool("p", "k", w).unwrap(), "{w}");
        }
        let e = parse_bool("bfc", "allow_growth", "maybe").unwrap_err().to_string();
        assert!(e.contains("bfc: allow_growth") && e.contains("'maybe'"), "{e}");
    }

    #[test]
    fn sizes_fractions_and_numbers() {
        assert_eq!(parse_size("p", "k", "0", None).unwrap(), 0);
        assert_eq!(parse_size("p", "k", "2GiB", None).unwrap(), 2 << 30);
        assert_eq!(parse_size("p", "k", "0.5", Some(8 << 30)).unwrap(), 4 << 30);
        assert!(parse_size("p", "k", "0.5", None).unwrap_err().to_string().contains("--capacity"));
        assert!(parse_size("p", "k", "lots", None).is_err());
        assert_eq!(parse_fraction("p", "k", "0.25", 1.0).unwrap(), 0.25);
        assert!(parse_fraction("p", "k", "0", 1.0).is_err());
        assert!(parse_fraction("p", "k", "1.5", 1.0).is_err());
        assert!(parse_f64("p", "k", "nan").is_err());
        assert!(parse_u64("p", "k", "-1").is_err());
    }

    #[test]
    fn top_level_split_keeps_bracket_lists() {
        assert_eq!(split_top_level("a:1, b:[x:1,y:2] ,c:True,"), vec!["a:1", "b:[x:1,y:2]", "c:True"]);
        assert!(split_top_level("").is_empty());
    }
}
