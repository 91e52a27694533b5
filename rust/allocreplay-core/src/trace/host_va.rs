//! What a capture saw of the host process's address space (issue 29 item 1): the ranges the
//! process freed, or mapped again, while a model moved to the GPU (`.cuda()`, `.to()`). The CUDA
//! driver puts new segments in the host's free ranges (docs/driver-address-space.md, "The host
//! process's memory"). `allocreplay capture`'s hook (`capture/_hostva.py`) writes them into the
//! capture's JSON under [`HOST_VA`]; the PyTorch importer keeps that JSON in the metadata
//! (`extra.capture`), checked on import.

use super::TraceMetadata;

/// Key of the capture JSON (and of the metadata's `extra.capture`): `{"context_top",
/// "mmap_base", "changes": [[allocations made, start, end, 1 freed / 0 taken], ...], "error"}`.
pub const HOST_VA: &str = "host_va";

/// A host range `[start, end)` found free (`freed`) or mapped again once `allocs` allocations
/// had been made (the caching allocator's `allocation.all.allocated` when the hook looked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostChange {
    pub allocs: u64,
    pub start: u64,
    pub end: u64,
    pub freed: bool,
}

/// The changes of a capture JSON's [`HOST_VA`] object, or what is wrong with it: those noted
/// while modules moved (`changes`), then those noted at the changes of the driver's own memory
/// (`driver_changes`, captures since session 36; absent before), each list in the order noted.
/// Both have the same rows, `[allocations made, start, end, 1 freed / 0 taken]` against the
/// hook's last look of either kind; a replay applies them together, by allocation index
/// (`engine::host_ranges::schedule`): at the driver's changes the host maps libraries (cuDNN's,
/// 34 MiB, into a gap freed during the model's move: `vit_b32_train`, research/driver-probes/s38/).
pub fn parse_host_va(v: &serde_json::Value) -> Result<Vec<HostChange>, String> {
    let Some(changes) = v.get("changes") else { return Err("has no 'changes' list".into()) };
    let mut out = host_rows(changes, "changes")?;
    if let Some(driver) = v.get("driver_changes") {
        out.extend(host_rows(driver, "driver_changes")?);
    }
    Ok(out)
}

/// A JSON row of non-negative integers (`None` when it is not one).
fn u64_row(c: &serde_json::Value) -> Option<Vec<u64>> {
    c.as_array().and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
}

/// One list of [`HOST_VA`] rows, named `key` in errors.
fn host_rows(rows: &serde_json::Value, key: &str) -> Result<Vec<HostChange>, String> {
    let Some(rows) = rows.as_array() else { return Err(format!("'{key}' is not a list")) };
    let mut out = Vec::with_capacity(rows.len());
    for (i, c) in rows.iter().enumerate() {
        match u64_row(c).as_deref() {
            Some(&[allocs, start, end, kind]) if start < end && kind <= 1 => out.push(HostChange { allocs, start, end, freed: kind == 1 }),
            _ => return Err(format!("'{key}'[{i}] is not [allocations, start, end, 1 or 0] with start < end (non-negative integers)")),
        }
    }
    Ok(out)
}

/// Key of the capture JSON (and of the metadata's `extra.capture`): `{"device", "changes":
/// [[index of the allocation it came before, bytes], ...], "host": [[index, bytes], ...],
/// "error"}`, the device memory the driver
/// took for itself between allocations of the caching allocator (negative: gave back), noted by
/// `capture/_driver_memory.py` (docs/driver-address-space.md, "The driver's own allocations
/// during the run"); `host` (captures since session 38; absent before) lists the pinned host
/// memory the driver mapped for itself into the same address space ([`DriverHostAlloc`]).
pub const DRIVER_MEMORY: &str = "driver_memory";

/// The driver mapped `bytes` of pinned host memory for itself (a `/dev/zero (deleted)` mapping
/// at a 2 MiB boundary: the driver's own placement, in the unified address space the segments
/// share) before the allocation of index `allocs` (docs/driver-address-space.md, "The driver's
/// pinned host memory").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverHostAlloc {
    pub allocs: u64,
    pub bytes: u64,
}

/// The driver took `bytes` of device memory for itself (negative: gave them back) before the
/// allocation of index `allocs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverMemoryChange {
    pub allocs: u64,
    pub bytes: i64,
}

/// The changes of a capture JSON's [`DRIVER_MEMORY`] object in the order noted, or what is wrong
/// with it.
pub fn parse_driver_memory(v: &serde_json::Value) -> Result<Vec<DriverMemoryChange>, String> {
    let Some(changes) = v.get("changes").and_then(serde_json::Value::as_array) else { return Err("has no 'changes' list".into()) };
    let mut out = Vec::with_capacity(changes.len());
    for (i, c) in changes.iter().enumerate() {
        match c.as_array().map(Vec::as_slice) {
            Some([a, b]) if a.as_u64().is_some() && b.as_i64().is_some() => {
                out.push(DriverMemoryChange { allocs: a.as_u64().unwrap_or_default(), bytes: b.as_i64().unwrap_or_default() })
            }
            _ => return Err(format!("'changes'[{i}] is not [allocation index, bytes] (a non-negative integer and an integer)")),
        }
    }
    if out.windows(2).any(|w| w[1].allocs < w[0].allocs) {
        return Err("'changes' are not in the order of their allocation index".into());
    }
    parse_driver_host(v)?;
    Ok(out)
}

/// The pinned host allocations of a capture JSON's [`DRIVER_MEMORY`] object (its `host` list; none
/// when a capture made before the note has no such key), or what is wrong with them.
pub fn parse_driver_host(v: &serde_json::Value) -> Result<Vec<DriverHostAlloc>, String> {
    let Some(host) = v.get("host") else { return Ok(Vec::new()) };
    let Some(host) = host.as_array() else { return Err("'host' is not a list".into()) };
    let mut out = Vec::with_capacity(host.len());
    for (i, c) in host.iter().enumerate() {
        match u64_row(c).as_deref() {
            Some(&[allocs, bytes]) if bytes > 0 => out.push(DriverHostAlloc { allocs, bytes }),
            _ => return Err(format!("'host'[{i}] is not [allocation index, bytes] (non-negative integers, bytes > 0)")),
        }
    }
    if out.windows(2).any(|w| w[1].allocs < w[0].allocs) {
        return Err("'host' is not in the order of its allocation index".into());
    }
    Ok(out)
}

impl TraceMetadata {
    /// The device memory the driver took for itself while the capture of `device` ran
    /// ([`DRIVER_MEMORY`]), in the order noted; none when the capture noted none (or recorded
    /// another device).
    pub fn driver_memory_changes(&self, device: i32) -> Vec<DriverMemoryChange> {
        self.capture_of(device).and_then(|c| c.get(DRIVER_MEMORY)).and_then(|v| parse_driver_memory(v).ok()).unwrap_or_default()
    }

    /// The pinned host memory the driver mapped for itself while the capture of `device` ran
    /// ([`DRIVER_MEMORY`]'s `host`), in the order noted; `None` when the capture did not note it
    /// (made before session 38, or not by `allocreplay capture`).
    pub fn driver_host_allocs(&self, device: i32) -> Option<Vec<DriverHostAlloc>> {
        let v = self.capture_of(device)?.get(DRIVER_MEMORY)?;
        v.get("host")?;
        parse_driver_host(v).ok()
    }

    /// The host ranges the capture of `device` saw change ([`HOST_VA`]), in the order noted;
    /// none when the capture recorded none (or recorded another device).
    pub fn host_changes(&self, device: i32) -> Vec<HostChange> {
        self.capture_of(device).and_then(|c| c.get(HOST_VA)).and_then(|v| parse_host_va(v).ok()).unwrap_or_default()
    }

    /// The capture's metadata (`extra.capture`, the capture `.json`) when it recorded `device`
    /// (or does not say which device it recorded).
    pub fn capture_of(&self, device: i32) -> Option<&serde_json::Value> {
        let capture = self.extra.get("capture")?;
        let other = capture.get("device").and_then(serde_json::Value::as_i64).is_some_and(|d| d != i64::from(device));
        (!other).then_some(capture)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_are_read_and_bad_ones_named() {
        let v = json!({"context_top": 1, "changes": [[0, 100, 200, 1], [5, 150, 160, 0]]});
        assert_eq!(
            parse_host_va(&v).unwrap(),
            vec![HostChange { allocs: 0, start: 100, end: 200, freed: true }, HostChange { allocs: 5, start: 150, end: 160, freed: false }]
        );
        assert!(parse_host_va(&json!({"changes": [[0, 200, 100, 1]]})).unwrap_err().contains("'changes'[0]"));
        assert!(parse_host_va(&json!({"changes": [[0, 100, 200, 2]]})).is_err());
        assert!(parse_host_va(&json!({"changes": [[0, -1, 100, 1]]})).is_err());
        assert!(parse_host_va(&json!({"changes": [[0, 1, 100]]})).is_err());
        assert!(parse_host_va(&json!({"changes": 3})).unwrap_err().contains("not a list"));
        assert!(parse_host_va(&json!({})).is_err());
        // The rows noted at the driver's changes come after the module notes' (a replay sorts
        // them by allocation index); bad ones are named by their list.
        let v = json!({"changes": [[0, 100, 200, 1]], "driver_changes": [[158, 372, 406, 0]]});
        assert_eq!(parse_host_va(&v).unwrap()[1], HostChange { allocs: 158, start: 372, end: 406, freed: false });
        assert!(parse_host_va(&json!({"changes": [], "driver_changes": [[1, 2]]})).unwrap_err().contains("'driver_changes'[0]"));
        assert!(parse_host_va(&json!({"changes": [], "driver_changes": {}})).unwrap_err().contains("'driver_changes' is not a list"));
    }

    #[test]
    fn driver_memory_changes_are_read_in_order_and_bad_ones_named() {
        let v = json!({"device": 0, "changes": [[78, 94371840], [88, 69206016], [90, -2097152]], "error": null});
        assert_eq!(
            parse_driver_memory(&v).unwrap(),
            vec![
                DriverMemoryChange { allocs: 78, bytes: 90 << 20 },
                DriverMemoryChange { allocs: 88, bytes: 66 << 20 },
                DriverMemoryChange { allocs: 90, bytes: -(2 << 20) }
            ]
        );
        assert!(parse_driver_memory(&json!({"changes": [[1, 2, 3]]})).unwrap_err().contains("'changes'[0]"));
        assert!(parse_driver_memory(&json!({"changes": [[-1, 2]]})).unwrap_err().contains("'changes'[0]"));
        assert!(parse_driver_memory(&json!({"changes": [[5, 2], [4, 2]]})).unwrap_err().contains("order"));
        assert!(parse_driver_memory(&json!({})).unwrap_err().contains("'changes'"));
    }

    #[test]
    fn the_drivers_pinned_host_allocations_are_read_in_order_and_bad_ones_named() {
        // densenet121_train's note (research/driver-probes/s38/): 8.25 MiB before allocation 1,363.
        let v = json!({"changes": [[1363, 67108864]], "host": [[728, 2097152], [1363, 8654848]]});
        assert_eq!(
            parse_driver_host(&v).unwrap(),
            vec![DriverHostAlloc { allocs: 728, bytes: 2 << 20 }, DriverHostAlloc { allocs: 1363, bytes: 8654848 }]
        );
        // A capture made before the note has none, and is not wrong.
        assert_eq!(parse_driver_host(&json!({"changes": []})).unwrap(), vec![]);
        // Bad lists are refused by `parse_driver_memory` too (the importer's check).
        for (bad, says) in [
            (json!({"changes": [], "host": 3}), "not a list"),
            (json!({"changes": [], "host": [[1]]}), "'host'[0]"),
            (json!({"changes": [], "host": [[1, 0]]}), "'host'[0]"),
            (json!({"changes": [], "host": [[5, 2], [4, 2]]}), "order"),
        ] {
            assert!(parse_driver_host(&bad).unwrap_err().contains(says), "{bad}");
            assert!(parse_driver_memory(&bad).unwrap_err().contains(says), "{bad}");
        }
    }

    #[test]
    fn only_the_captured_device_has_them() {
        let mut m = TraceMetadata::new("pytorch");
        m.extra.insert("capture".into(), json!({"device": 1, HOST_VA: {"changes": [[0, 100, 200, 1]]}}));
        assert_eq!(m.host_changes(1).len(), 1);
        assert!(m.host_changes(0).is_empty());
    }
}
