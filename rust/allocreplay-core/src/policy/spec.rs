//! Policy specification strings: `NAME` or `NAME:OPTIONS`, e.g. `pytorch`,
//! `pytorch:expandable_segments:True,max_split_size_mb:128`, `bfc:allow_growth=true`.

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

/// Splits `NAME:OPTIONS` at the first colon.
pub fn split_spec(spec: &str) -> (&str, &str) {
    match spec.find(':') {
        Some(i) => (spec[..i].trim(), spec[i + 1..].trim()),
        None => (spec.trim(), ""),
    }
}
