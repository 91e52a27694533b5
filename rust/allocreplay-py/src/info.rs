//! `allocreplay info`'s numbers (`allocreplay_core::trace::info::trace_info`) as a typed object.

use std::collections::BTreeMap;

use allocreplay_core::trace::info::TraceInfo as CoreTraceInfo;
use pyo3::prelude::*;

use crate::typed::typed_result;

typed_result!(
    /// Counts and recorded peaks of a trace (`Trace.info()`); `to_dict()` is `info --json`.
    TraceInfo wraps CoreTraceInfo {
        format_version: u32,
        source: String,
        source_version: Option<String>,
        devices: Vec<i32>,
        events: usize,
        allocs: usize,
        frees: usize,
        free_requests: usize,
        segment_events: usize,
        ooms: usize,
        empty_caches: usize,
        streams: usize,
        pools: usize,
        seed_allocs: usize,
        seed_segments: usize,
        peak_live_requested_bytes: u64,
        recorded_peak_reserved_bytes: Option<u64>,
        recorded_peak_reserved_bytes_per_device: BTreeMap<i32, u64>,
        duration_s: Option<f64>,
        lenient_skipped: Option<u64>,
        assumed: Vec<String>,
    }
);
