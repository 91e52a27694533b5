//! The policy registry (`allocreplay_core::registry`) as frozen Python objects:
//! `_core.policies()` -> `PolicyInfo`s, each with its `PolicyOption`s; `_core.policy_env(spec)`
//! -> the text that sets a spec's options in the real framework.

use allocreplay_core::policy::options::{OptDefault, OptionSpec, Syntax};
use allocreplay_core::registry::{self, PolicyEntry};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{guard, BindingResult};

/// One option of a policy.
#[pyclass(frozen, get_all, module = "allocreplay._core", name = "PolicyOption")]
struct PyPolicyOption {
    name: String,
    /// bool, integer, bytes, fraction, float, choice or list.
    r#type: String,
    /// A value the option accepts, or (when `unset`) what happens when it is not given.
    default: String,
    /// True when `default` describes the behaviour without the option, not a value of it.
    unset: bool,
    help: String,
    /// The words a `choice` option accepts.
    choices: Vec<String>,
    /// The values a search (`allocreplay tune`) tries besides the default.
    search: Vec<String>,
    aliases: Vec<String>,
    /// The environment variable of its own that sets it in the real framework, if any.
    env: Option<String>,
}

#[pymethods]
impl PyPolicyOption {
    fn __repr__(&self) -> String {
        let default = if self.unset { format!("unset: {}", self.default) } else { self.default.clone() };
        format!("PolicyOption(name={:?}, type={:?}, default={:?}, search={:?})", self.name, self.r#type, default, self.search)
    }
}

/// One policy of the registry.
#[pyclass(frozen, get_all, module = "allocreplay._core", name = "PolicyInfo")]
struct PyPolicyInfo {
    name: String,
    summary: String,
    /// The upstream code it mirrors.
    models: String,
    /// `online` (an allocator) or `offline-bound` (`ideal`, `offline`).
    kind: String,
    /// `conf` (PYTORCH_CUDA_ALLOC_CONF's key:value) or `key=value`.
    syntax: String,
    /// pytorch, tf or jax: the family `tune --framework` searches.
    framework: Option<String>,
    /// The one environment variable that takes the whole options string, if any.
    env: Option<String>,
    /// Accepts `NAME:recorded`.
    recorded: bool,
    /// `PolicyOption`s, in declaration order.
    options: Py<PyTuple>,
    /// Pairs of option names a search never sets together.
    search_excludes: Vec<(String, String)>,
    /// The largest device memory (bytes) the policy models: a replay under a larger limit is a
    /// row with the reason (docs/bad-inputs.md, *Capacities per policy*).
    max_capacity: u64,
}

#[pymethods]
impl PyPolicyInfo {
    fn __repr__(&self, py: Python<'_>) -> String {
        let names: Vec<String> =
            self.options.bind(py).iter().filter_map(|o| o.getattr("name").ok().and_then(|n| n.extract::<String>().ok())).collect();
        format!("PolicyInfo(name={:?}, kind={:?}, options=[{}])", self.name, self.kind, names.join(", "))
    }
}

fn option(o: &OptionSpec) -> PyPolicyOption {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PyPolicyOption {
        name: o.name.into(),
        r#type: o.ty.name().into(),
        default: o.default.text().into(),
        unset: matches!(o.default, OptDefault::Unset(_)),
        help: o.help.into(),
        choices: strings(o.ty.choices()),
        search: strings(o.search),
        aliases: strings(o.aliases),
        env: o.env.map(Into::into),
    }
}

fn info(py: Python<'_>, e: &PolicyEntry) -> PyResult<PyPolicyInfo> {
    let options = e.options.iter().map(|o| Py::new(py, option(o))).collect::<PyResult<Vec<_>>>()?;
    Ok(PyPolicyInfo {
        name: e.name.into(),
        summary: e.summary.into(),
        models: e.models.into(),
        kind: e.kind.name().into(),
        syntax: match e.syntax {
            Syntax::Conf => "conf",
            Syntax::KeyValue => "key=value",
        }
        .into(),
        framework: e.framework.map(Into::into),
        env: e.env.map(Into::into),
        recorded: e.recorded,
        options: PyTuple::new(py, options)?.unbind(),
        search_excludes: e.search_excludes.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        max_capacity: e.max_capacity,
    })
}

/// Every policy `replay --policy` knows, in the registry's order.
#[pyfunction]
fn policies(py: Python<'_>) -> BindingResult<Vec<PyPolicyInfo>> {
    guard(|| Ok(registry::REGISTRY.iter().map(|e| info(py, e)).collect::<PyResult<_>>()?))
}

/// The text that sets a spec's options in the real framework (`PYTORCH_CUDA_ALLOC_CONF=...`,
/// `TF_FORCE_GPU_ALLOW_GROWTH=true`, ...); empty for the defaults.
#[pyfunction]
fn policy_env(spec: &str) -> BindingResult<String> {
    guard(|| Ok(registry::env_text(spec)?))
}

/// Adds the registry's classes and functions to `_core`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPolicyInfo>()?;
    m.add_class::<PyPolicyOption>()?;
    m.add_function(wrap_pyfunction!(policies, m)?)?;
    m.add_function(wrap_pyfunction!(policy_env, m)?)?;
    Ok(())
}
