//! The host ranges a capture saw freed or mapped again ([`crate::trace::HostChange`]), and the
//! device memory the driver took for itself ([`crate::trace::DriverMemoryChange`]), applied to a
//! replay's modelled address space at their point of the history (issue 29 item 1).
//!
//! The hook notes each range with the number of allocations the caching allocator had made
//! (`allocation.all.allocated`): the change happened before the allocation of that index, so it
//! is applied just before the trace's alloc row of that index. The model's coordinates are
//! its own ([`AddressSpace`]), so the recorded ranges are moved by the difference between where
//! the run's first segment was and where the model puts a first segment of that size (both
//! just below, or in a hole of, the CUDA context).

use arrow_array::{Array, RecordBatch};

use crate::device::memory::{AddressChange, AddressSpace};
use crate::trace::{Action, Columns, DriverHostAlloc, DriverMemoryChange, HostChange, TraceMetadata};

const MIB: u64 = 1 << 20;
/// A change of at least this much is the local memory's growth when it is the first one
/// (docs/driver-address-space.md, "The driver's own allocations during the run": about 90 MiB
/// at the first real kernel on an H100; the next ones are 2 to 10 MiB or 64 MiB).
const LOCAL_MEMORY_GROWTH_MIN: u64 = 32 * MIB;
/// What each thread's first cuBLAS call takes (a `cudaMalloc` of its own).
const CUBLAS_HANDLE: u64 = 64 * MIB;

/// What the driver's noted memory does to the address space, as `(allocation index, change)`:
/// under lazy module loading (CUDA's default; `lazy`), the first change of at least
/// [`LOCAL_MEMORY_GROWTH_MIN`] that is not whole cuBLAS handles plus a little grows the local
/// memory (lazily loaded kernels needing more per thread: the buffer is freed and allocated
/// again, larger; eager loading sizes it when the context starts, and no run showed it grow);
/// every other one is an allocation of the driver's, split into [`CUBLAS_HANDLE`]s first and the
/// rest (a cuBLAS handle and a module's code noted together: 66 MiB). Memory given back is not
/// placed (none was seen; the model would not know which range).
fn driver_changes(noted: &[DriverMemoryChange], lazy: bool) -> Vec<(u64, AddressChange)> {
    let mut out = Vec::new();
    let mut grown = !lazy;
    for c in noted {
        let Ok(mut bytes) = u64::try_from(c.bytes) else { continue };
        if !grown && bytes >= LOCAL_MEMORY_GROWTH_MIN && bytes % CUBLAS_HANDLE >= 16 * MIB {
            grown = true;
            out.push((c.allocs, AddressChange::LocalMemoryGrows { bytes }));
            continue;
        }
        while bytes >= CUBLAS_HANDLE {
            out.push((c.allocs, AddressChange::DriverMalloc { bytes: CUBLAS_HANDLE }));
            bytes -= CUBLAS_HANDLE;
        }
        if bytes > 0 {
            out.push((c.allocs, AddressChange::DriverMalloc { bytes }));
        }
    }
    out
}

/// The address space a pinned host allocation of the driver's takes among the segments: whole 2
/// MiB pages, in 4 MiB steps above 4 MiB. Measured on an H100 (driver 580.159.04,
/// research/driver-probes/s38/): the 2 MiB mappings take 2 MiB (as 4 MiB, `emptycache_lm`'s
/// segments land elsewhere than the run's); the 8.25 MiB one that every run maps near a cuBLAS
/// handle's creation starts 4 MiB-aligned at a region hole's base and takes all of a 12 MiB
/// tail (as 10 MiB, `densenet121_train`'s segment #159 takes the 2 MiB left, where the run put it
/// elsewhere). Fitted on `densenet121_train` (the 12), checked on `emptycache_lm` and
/// `vit_b32_train`.
fn host_alloc_footprint(bytes: u64) -> u64 {
    let step = if bytes > 4 * MIB { 4 * MIB } else { 2 * MIB };
    bytes.div_ceil(step) * step
}

/// The driver's pinned host allocations as [`AddressChange::DriverMalloc`]s of their footprint
/// ([`host_alloc_footprint`]): the driver gives them addresses as it gives its `cudaMalloc`s
/// (in the newest region's hole that fits, else a new region).
fn host_allocs(noted: &[DriverHostAlloc]) -> Vec<(u64, AddressChange)> {
    noted.iter().map(|h| (h.allocs, AddressChange::DriverMalloc { bytes: host_alloc_footprint(h.bytes) })).collect()
}

/// What the capture of `device` noted that a replay on the modelled address space uses (the
/// host ranges and the driver's own memory), one sentence each, as `validate --no-addresses`
/// reports it: which notes were applied, and which were not there to apply (a snapshot not
/// recorded by `allocreplay capture`, or recorded before it noted the driver's memory: what the
/// driver took during the run is then not modelled, and can move later segments).
pub fn address_notes(metadata: &TraceMetadata, device: i32) -> Vec<String> {
    const WHY: &str = "docs/driver-address-space.md";
    let Some(capture) = metadata.capture_of(device) else {
        if let Some(other) = metadata.extra.get("capture").and_then(|c| c.get("device")).and_then(serde_json::Value::as_i64) {
            return vec![format!(
                "none for device {device}: the capture noted the host ranges and the driver's memory of device {other} only, so what the driver did on this one is not modelled ({WHY})"
            )];
        }
        return vec![format!(
            "none: the trace was not recorded by `allocreplay capture`, so the host ranges the driver places segments in and the memory it takes for itself during the run are not modelled ({WHY})"
        )];
    };
    let reported = |v: &serde_json::Value| match v.get("error").and_then(serde_json::Value::as_str) {
        Some(e) => format!("; the capture reported: {e}"),
        None => String::new(),
    };
    let unused = if metadata.seeded {
        " (not applied: the history was cut, so its allocation indices do not count from the run's start)"
    } else {
        ""
    };
    let mut out = Vec::new();
    match capture.get(crate::trace::HOST_VA).map(|v| (v, crate::trace::parse_host_va(v))) {
        None => out.push(format!("host ranges: not noted (a capture made before the note, or not by `allocreplay capture`): the host process's mappings are assumed fixed ({WHY})")),
        Some((v, Err(e))) => out.push(format!("host ranges: unreadable ({e}), not used{}", reported(v))),
        Some((v, Ok(c))) => {
            let at_driver = v.get("driver_changes").and_then(serde_json::Value::as_array).map_or(0, Vec::len);
            let of_them = if at_driver > 0 { format!(" ({at_driver} at the driver's changes)") } else { String::new() };
            out.push(format!("host ranges: {} noted{of_them}{}{unused}", counted(c.len()), reported(v)))
        }
    }
    let lazy = capture.get("env").and_then(|e| e.get("CUDA_MODULE_LOADING")).and_then(serde_json::Value::as_str) != Some("EAGER");
    match capture.get(crate::trace::DRIVER_MEMORY).map(|v| (v, crate::trace::parse_driver_memory(v))) {
        None => out.push(format!(
            "driver memory: not noted (a capture made before the note, or not by `allocreplay capture`): the memory the driver takes for itself during the run (its local memory growing, library handles, module code) is not modelled, and can move later segments ({WHY})"
        )),
        Some((v, Err(e))) => out.push(format!("driver memory: unreadable ({e}), not used{}", reported(v))),
        Some((v, Ok(c))) => {
            let changes = driver_changes(&c, lazy);
            let mut parts = Vec::new();
            for (allocs, change) in &changes {
                if let AddressChange::LocalMemoryGrows { bytes } = change {
                    parts.push(format!("the local memory grows by {} before allocation {allocs}", mib(*bytes)));
                }
            }
            let mallocs: Vec<u64> = changes.iter().filter_map(|(_, c)| if let AddressChange::DriverMalloc { bytes } = c { Some(*bytes) } else { None }).collect();
            if !mallocs.is_empty() {
                parts.push(format!("{} allocations of the driver's ({} in all) placed as cudaMallocs", mallocs.len(), mib(mallocs.iter().sum())));
            }
            if !lazy {
                parts.push("no growth under CUDA_MODULE_LOADING=EAGER".into());
            }
            match metadata.driver_host_allocs(device) {
                Some(h) if !h.is_empty() => parts.push(format!(
                    "{} pinned host allocation{} of the driver's ({} in all) placed as {} of address space",
                    h.len(),
                    if h.len() == 1 { "" } else { "s" },
                    mib(h.iter().map(|x| x.bytes).sum()),
                    mib(h.iter().map(|x| host_alloc_footprint(x.bytes)).sum())
                )),
                Some(_) => {}
                None => parts.push("its pinned host memory not noted (a capture made before the note)".into()),
            }
            let what = if parts.is_empty() { String::new() } else { format!(": {}", parts.join("; ")) };
            out.push(format!("driver memory: {} noted{what}{}{unused}", counted(c.len()), reported(v)));
        }
    }
    out
}

fn counted(n: usize) -> String {
    format!("{n} change{}", if n == 1 { "" } else { "s" })
}

fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.2} MiB", bytes as f64 / MIB as f64)
    }
}

/// Rows [`schedule`] counts at a time between noted changes.
const SKIP_CHUNK: usize = 1024;

/// What the capture noted: a host range in the run's coordinates, or the driver's change.
#[derive(Clone, Copy)]
enum Noted {
    Host(HostChange),
    Driver(AddressChange),
}

/// `(trace row, change)` in the model's coordinates, by row: the host ranges to add to
/// (`freed`) or take from the modelled address space before each row is replayed (the address
/// space uses only their part above its CUDA context: `AddressSpace::add_host_free`), and the
/// driver's own memory ([`TraceMetadata::driver_memory_changes`], as [`driver_changes`] reads
/// it). Empty when the trace has none, or when its history was cut (the alloc count of a seeded
/// trace does not start at the run's start). `batches`: the trace's record batches in order, each with its
/// first row's index (a trace held whole is one; a streamed file's are read until every change
/// has its row).
pub(crate) fn schedule<E>(
    metadata: &TraceMetadata,
    device: i32,
    batches: impl IntoIterator<Item = Result<(usize, RecordBatch), E>>,
) -> Result<Vec<(usize, AddressChange)>, E> {
    // Host ranges carry the run's addresses (moved below); the driver's changes sizes only.
    let mut changes: Vec<(u64, Noted)> = metadata.host_changes(device).into_iter().map(|f| (f.allocs, Noted::Host(f))).collect();
    let env = |key: &str| metadata.capture_of(device)?.get("env")?.get(key)?.as_str();
    let lazy = env("CUDA_MODULE_LOADING") != Some("EAGER");
    // The driver's pinned host memory before its device memory of the same index (either order
    // places the three recordings of research/driver-probes/s38/ alike).
    changes.extend(
        host_allocs(&metadata.driver_host_allocs(device).unwrap_or_default()).into_iter().map(|(allocs, c)| (allocs, Noted::Driver(c))),
    );
    changes.extend(driver_changes(&metadata.driver_memory_changes(device), lazy).into_iter().map(|(allocs, c)| (allocs, Noted::Driver(c))));
    if changes.is_empty() || metadata.seeded {
        return Ok(Vec::new());
    }
    // In the order noted (a stable sort: each list is in order of `allocs` already).
    changes.sort_by_key(|f| f.0);
    let mut out = Vec::with_capacity(changes.len());
    let mut next = changes.iter().peekable();
    // The shift from the run's addresses to the model's, once the first segment is seen.
    let mut shift: Option<i128> = None;
    let mut allocs = 0u64;
    for batch in batches {
        let (base, batch) = batch?;
        let c = Columns::of(&batch);
        let n = c.action.len();
        let (mut row, mut walk_to) = (0, 0);
        while row < n {
            // Once the shift is known, only the allocs are counted until the next noted change:
            // whole chunks with fewer allocs than that are counted in one vectorised pass
            // (`Columns::count_actions`), not row by row (a serving run's notes reach its last
            // rows: the walk cost every replay about 13 instructions a row).
            // A chunk that holds the next change's alloc is walked row by row.
            if let (Some(_), Some(&&(at, _)), true) = (shift, next.peek(), row >= walk_to) {
                let chunk = SKIP_CHUNK.min(n - row);
                let allocs_in = c.count_actions(device, Action::Alloc as u8..=Action::Alloc as u8, row..row + chunk) as u64;
                if allocs + allocs_in <= at {
                    allocs += allocs_in;
                    row += chunk;
                    continue;
                }
                walk_to = row + chunk;
            }
            let j = row;
            row += 1;
            if c.device[j] != device {
                continue;
            }
            if shift.is_none() && c.action[j] == Action::SegmentAlloc as u8 && c.addr.is_valid(j) {
                let Some(modelled) = AddressSpace::new().malloc(c.size[j]) else { return Ok(Vec::new()) };
                shift = Some(i128::from(modelled) - i128::from(c.addr.value(j)));
            }
            if c.action[j] != Action::Alloc as u8 {
                continue;
            }
            let Some(shift) = shift else { return Ok(Vec::new()) };
            let moved = |a: u64| u64::try_from(i128::from(a) + shift).ok();
            while let Some(&(_, noted)) = next.next_if(|f| f.0 <= allocs) {
                match noted {
                    Noted::Host(f) => {
                        if let (Some(start), Some(end)) = (moved(f.start), moved(f.end)) {
                            out.push((base + j, AddressChange::Host { start, end, freed: f.freed }));
                        }
                    }
                    Noted::Driver(change) => out.push((base + j, change)),
                }
            }
            if next.peek().is_none() {
                return Ok(out);
            }
            allocs += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_large_change_grows_the_local_memory_and_the_rest_are_allocations() {
        // gpt2_small_train's changes as the capture noted them on an H100 (research/driver-probes/s23/).
        let noted =
            |v: &[(u64, i64)]| v.iter().map(|&(allocs, m)| DriverMemoryChange { allocs, bytes: m * MIB as i64 }).collect::<Vec<_>>();
        let got = driver_changes(&noted(&[(77, 2), (78, 90), (88, 66), (102, 2), (267, 64), (300, -2)]), true);
        let malloc = |m: u64| AddressChange::DriverMalloc { bytes: m * MIB };
        assert_eq!(
            got,
            vec![
                (77, malloc(2)),
                (78, AddressChange::LocalMemoryGrows { bytes: 90 * MIB }),
                (88, malloc(64)),
                (88, malloc(2)),
                (102, malloc(2)),
                (267, malloc(64)),
            ]
        );
        // Only the first large one grows it.
        assert_eq!(driver_changes(&noted(&[(5, 100), (6, 100)]), true)[1..], [(6, malloc(64)), (6, malloc(36))]);
        // Under eager module loading nothing grows: vit_b32_train's +36 MiB is an allocation.
        assert_eq!(driver_changes(&noted(&[(170, 36)]), false), [(170, malloc(36))]);
        assert_eq!(driver_changes(&noted(&[(170, 36)]), true), [(170, AddressChange::LocalMemoryGrows { bytes: 36 * MIB })]);
    }

    #[test]
    fn the_drivers_pinned_host_allocations_take_whole_pages_in_4_mib_steps_above_4_mib() {
        // The sizes the H100 runs mapped (research/driver-probes/s38/): 2 MiB and 8.25 MiB.
        assert_eq!(host_alloc_footprint(2 * MIB), 2 * MIB);
        assert_eq!(host_alloc_footprint(8_654_848), 12 * MIB);
        assert_eq!(host_alloc_footprint(4096), 2 * MIB);
        assert_eq!(host_alloc_footprint(4 * MIB + 1), 8 * MIB);
        let noted = [DriverHostAlloc { allocs: 52, bytes: 2 * MIB }, DriverHostAlloc { allocs: 53, bytes: 8_654_848 }];
        assert_eq!(
            host_allocs(&noted),
            [(52, AddressChange::DriverMalloc { bytes: 2 * MIB }), (53, AddressChange::DriverMalloc { bytes: 12 * MIB })]
        );
    }

    /// `schedule`'s rows for driver changes noted at the alloc counts `at`, against the rows of
    /// device 0's allocs in `events` (each `(action, device)`, after a first segment).
    fn schedule_rows(events: &[(Action, i32)], at: &[u64]) -> (Vec<usize>, Vec<usize>) {
        use crate::trace::{EventRow, FrameTable, TraceBuilder};
        let mut b = TraceBuilder::with_capacity(events.len() + 1);
        b.push(&EventRow { addr: Some(1 << 40), ..EventRow::new(Action::SegmentAlloc, 2 * MIB) });
        let mut alloc_rows = Vec::new();
        let mut id = 0;
        for &(action, device) in events {
            if action == Action::Alloc {
                id += 1;
                if device == 0 {
                    alloc_rows.push(b.len());
                }
            }
            b.push(&EventRow { alloc_id: Some(id), device, ..EventRow::new(action, 512) });
        }
        let noted: Vec<serde_json::Value> = at.iter().enumerate().map(|(k, &a)| serde_json::json!([a, (k as u64 + 1) * 2 * MIB])).collect();
        let capture =
            serde_json::json!({"device": 0, "driver_memory": {"changes": noted, "error": null}, "env": {"CUDA_MODULE_LOADING": "EAGER"}});
        let trace = b.finish(with_capture(capture, false), FrameTable::default()).unwrap();
        let got = schedule(&trace.metadata, 0, [Ok::<_, std::convert::Infallible>((0, trace.batch().clone()))]).unwrap();
        assert!(got.iter().all(|(_, c)| matches!(c, AddressChange::DriverMalloc { .. })));
        // Notes past the last alloc have no row; the others, in order, at their alloc's row.
        let want = at.iter().filter_map(|&a| alloc_rows.get(a as usize).copied()).collect();
        (got.iter().map(|&(r, _)| r).collect(), want)
    }

    /// `schedule` counts whole chunks of rows between notes at once ([`SKIP_CHUNK`]): each noted
    /// change still goes before the row of the alloc it was noted at, on either side of a
    /// chunk's end, before the last alloc and past it, and where the devices interleave (the
    /// other device's allocs not counted).
    #[test]
    fn each_change_goes_before_the_row_of_its_alloc() {
        let c = SKIP_CHUNK as u64;
        // Allocs only: alloc k is row k + 1, and the chunks end after allocs c - 1, 2c - 1...
        let allocs = vec![(Action::Alloc, 0); 3 * SKIP_CHUNK + 10];
        for at in [vec![c - 1, c, 2 * c - 1], vec![c, 2 * c], vec![0, c - 2, c + 1, 2 * c + 1], vec![3 * c + 9, 3 * c + 10]] {
            let (got, want) = schedule_rows(&allocs, &at);
            assert_eq!(got, want, "notes at {at:?}");
        }
        // Frees between, and runs of device 1's rows.
        let mut mixed = Vec::new();
        for i in 0..12_000 {
            let device = if (i / 700) % 3 == 2 { 1 } else { 0 };
            mixed.push((Action::Alloc, device));
            if i % 2 == 0 {
                mixed.extend([(Action::FreeRequested, device), (Action::FreeCompleted, device)]);
            }
        }
        let (got, want) = schedule_rows(&mixed, &[0, 1, 2, 1364, 1365, 2729, 2730, 4095, 4096, 4097, 5000, 8399, 8400, 8405]);
        assert_eq!(got, want);
        assert_eq!(got.len(), 12, "device 0 has 8,400 allocs");
    }

    fn with_capture(capture: serde_json::Value, seeded: bool) -> TraceMetadata {
        let mut m = TraceMetadata { seeded, ..TraceMetadata::default() };
        m.extra.insert("capture".into(), capture);
        m
    }

    #[test]
    fn the_notes_applied_are_named_and_missing_ones_said() {
        let mib = MIB as i64;
        // No capture metadata at all (a snapshot dumped by hand).
        let none = address_notes(&TraceMetadata::default(), 0);
        assert_eq!(none.len(), 1);
        assert!(none[0].contains("not recorded by `allocreplay capture`"), "{none:?}");
        // A capture from before the notes: both said to be missing.
        let old = address_notes(&with_capture(serde_json::json!({"device": 0}), false), 0);
        assert!(old[0].starts_with("host ranges: not noted") && old[1].starts_with("driver memory: not noted"), "{old:?}");
        // gpt2_small_train's notes: the growth and the driver's allocations counted.
        let capture = serde_json::json!({"device": 0, "host_va": {"changes": [[1, 0, 4096, 1]], "error": null},
            "driver_memory": {"changes": [[77, 2 * mib], [78, 90 * mib], [88, 66 * mib], [102, 2 * mib], [267, 64 * mib]], "error": null}});
        let notes = address_notes(&with_capture(capture.clone(), false), 0);
        assert_eq!(notes[0], "host ranges: 1 change noted");
        // Rows noted at the driver's changes are counted with them, and said.
        let mut with_driver_rows = capture.clone();
        with_driver_rows["host_va"]["driver_changes"] = serde_json::json!([[158, 0, 4096, 0], [158, 8192, 12288, 0]]);
        assert_eq!(address_notes(&with_capture(with_driver_rows, false), 0)[0], "host ranges: 3 changes noted (2 at the driver's changes)");
        assert_eq!(
            notes[1],
            "driver memory: 5 changes noted: the local memory grows by 90 MiB before allocation 78; 5 allocations of the driver's (134 MiB in all) placed as cudaMallocs; its pinned host memory not noted (a capture made before the note)"
        );
        // A capture that noted the driver's pinned host memory (densenet121_train's 8.25 MiB).
        let mut with_host = capture.clone();
        with_host["driver_memory"]["host"] = serde_json::json!([[1363, 8654848]]);
        assert!(address_notes(&with_capture(with_host, false), 0)[1]
            .ends_with("; 1 pinned host allocation of the driver's (8.25 MiB in all) placed as 12 MiB of address space"),);
        // Another device's capture says nothing of this one; a cut history does not apply them.
        assert!(address_notes(&with_capture(capture.clone(), false), 1)[0].starts_with("none for device 1: the capture noted"));
        assert!(address_notes(&with_capture(capture, true), 0).iter().all(|n| n.contains("not applied: the history was cut")));
        // Unreadable notes are named as such.
        let bad =
            address_notes(&with_capture(serde_json::json!({"driver_memory": {"changes": [[1]]}, "host_va": {"changes": 3}}), false), 0);
        assert!(bad[0].starts_with("host ranges: unreadable") && bad[1].starts_with("driver memory: unreadable"), "{bad:?}");
    }
}
