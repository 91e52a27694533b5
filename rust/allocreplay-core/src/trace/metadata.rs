//! Trace-level metadata, stored as JSON in the Arrow schema metadata under
//! `allocreplay.metadata` (see traces/README.md for every key).

use serde::{Deserialize, Serialize};

/// Version of the `.arrow` trace format written by this build. Readers accept equal versions
/// only; a bump goes with a note in traces/README.md.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceMetadata {
    pub format_version: u32,
    /// Source framework / format: `pytorch`, `xplane`, `xla`.
    pub source: String,
    /// Framework version as recorded (e.g. `2.11.0+cu130`), when known.
    #[serde(default)]
    pub source_version: Option<String>,
    /// File the trace was imported from (as given on the command line).
    #[serde(default)]
    pub source_path: Option<String>,
    #[serde(default)]
    pub devices: Vec<DeviceInfo>,
    /// Memory pools referenced by the `pool` column, by index. Index 0 is the default pool.
    #[serde(default)]
    pub pools: Vec<PoolInfo>,
    /// Allocator settings as the source recorded them (PyTorch: the snapshot's
    /// `allocator_settings`, verbatim).
    #[serde(default)]
    pub allocator_settings: serde_json::Value,
    /// True when the history was truncated and the first events (flagged `seed`) were
    /// synthesized from the final state.
    #[serde(default)]
    pub seeded: bool,
    /// Everything else the capture recorded (e.g. the final `memory_stats()` of a PyTorch run
    /// under `recorded_stats`), kept for `validate`.
    #[serde(default)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Metadata `extra` key: what an importer could not tell about the history's releases of cached
/// segments (the PyTorch importer's `note_unsure_releases`); `TraceInfo::assumed` lists it.
pub const RELEASES_ASSUMED: &str = "releases_assumed";
/// Metadata `extra` key: the allocator settings an importer assumed where the source recorded
/// none (the PyTorch importer's `assume_allocator_settings`).
pub const SETTINGS_ASSUMED: &str = "allocator_settings_assumed";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub index: i32,
    #[serde(default)]
    pub name: Option<String>,
    /// Total device memory in bytes (`cudaMemGetInfo` total), when known.
    #[serde(default)]
    pub total_memory: Option<u64>,
    /// A memory cap set for the run (PyTorch `set_per_process_memory_fraction` × total,
    /// BFC `memory_limit`), when one was set.
    #[serde(default)]
    pub memory_cap: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolInfo {
    pub index: u32,
    /// The source's own id for the pool (PyTorch: the `(a, b)` MempoolId_t).
    pub id: Vec<i64>,
    /// `default` or `private` (CUDA-graph / user mempools).
    pub kind: String,
}

impl TraceMetadata {
    pub fn new(source: &str) -> Self {
        TraceMetadata {
            format_version: FORMAT_VERSION,
            source: source.to_string(),
            pools: vec![PoolInfo { index: 0, id: vec![0, 0], kind: "default".into() }],
            allocator_settings: serde_json::Value::Null,
            ..Default::default()
        }
    }

    pub fn device(&self, index: i32) -> Option<&DeviceInfo> {
        self.devices.iter().find(|d| d.index == index)
    }
}
