//! Policy specification strings: `NAME` or `NAME:OPTIONS`, e.g. `pytorch`,
//! `pytorch:expandable_segments:True,max_split_size_mb:128`, `bfc:allow_growth=true`.

use super::Policy;
use crate::error::{Error, Result};
use crate::trace::{DeviceInfo, TraceMetadata};

/// What a policy may use to set its defaults: the trace's metadata and the device replayed.
#[derive(Debug, Clone, Copy)]
pub struct PolicyContext<'a> {
    pub metadata: &'a TraceMetadata,
    pub device: Option<&'a DeviceInfo>,
    /// `--capacity`, already resolved to bytes.
    pub capacity: Option<u64>,
}

impl PolicyContext<'_> {
    pub fn total_memory(&self) -> Option<u64> {
        self.device.and_then(|d| d.total_memory)
    }
}

/// The policy names `build` knows, for error messages and `--help`.
pub const POLICY_NAMES: &[&str] = &["pytorch", "bfc", "tf", "jax", "cuda-async", "cuda-malloc", "managed", "ideal", "offline"];

/// Splits `NAME:OPTIONS` at the first colon.
pub fn split_spec(spec: &str) -> (&str, &str) {
    match spec.find(':') {
        Some(i) => (spec[..i].trim(), spec[i + 1..].trim()),
        None => (spec.trim(), ""),
    }
}

pub fn build(spec: &str, ctx: &PolicyContext) -> Result<Box<dyn Policy>> {
    let (name, options) = split_spec(spec);
    match name {
        "pytorch" => super::pytorch::from_spec(options, ctx),
        "cuda-async" => super::cuda_async::from_spec(options, ctx),
        "cuda-malloc" => super::cuda_malloc::from_spec(options, ctx),
        "managed" => super::managed::from_spec(options, ctx),
        "bfc" => super::bfc::from_spec(super::bfc_config::parse_bfc(options, ctx)?, ctx),
        "tf" => super::bfc::from_spec(super::bfc_config::parse_tf(options, ctx)?, ctx),
        "jax" => super::bfc::from_spec(super::bfc_config::parse_jax(options, ctx)?, ctx),
        _ => Err(Error::PolicySpec(format!("unknown policy '{name}' in '{spec}'; known policies: {}", POLICY_NAMES.join(", ")))),
    }
}
