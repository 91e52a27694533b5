//! The canonical trace: an Arrow record batch, one row per event, plus metadata and the frame
//! table. `.arrow` files (Arrow IPC) hold exactly this; see traces/README.md.

mod action;
mod builder;
pub mod check;
mod edit;
mod frames;
mod host_va;
pub mod info;
mod ipc;
mod mapped;
mod metadata;
pub mod schema;
mod tile;

pub use action::{is_timeline_request, Action};
pub use builder::{EventRow, TraceBuilder};
pub use frames::{FrameInterner, FrameTable};
pub use host_va::{
    parse_driver_host, parse_driver_memory, parse_host_va, DriverHostAlloc, DriverMemoryChange, HostChange, DRIVER_MEMORY, HOST_VA,
};
pub use ipc::{read_arrow, read_arrow_bytes, trace_from_batches, write_arrow, write_arrow_to, TraceFileWriter, WriteError};
pub use mapped::{Batches, MappedTrace};
pub use metadata::{DeviceInfo, PoolInfo, TraceMetadata, FORMAT_VERSION, RELEASES_ASSUMED, SETTINGS_ASSUMED};
pub use tile::{tile, tile_to_file};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{Array, ArrayRef, BooleanArray, PrimitiveArray, RecordBatch};
use arrow_schema::{Field, SchemaRef};

use std::sync::OnceLock;

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct Trace {
    pub metadata: TraceMetadata,
    pub frames: FrameTable,
    batch: RecordBatch,
    /// What every replay asks of the (immutable) events, found once.
    derived: Derived,
}

/// [`Trace::devices`] and [`Trace::timeline_requests`], each computed on first use.
#[derive(Debug, Clone, Default)]
struct Derived {
    devices: OnceLock<Vec<i32>>,
    /// Per device (in `devices` order): its timeline requests.
    timeline_requests: OnceLock<Vec<usize>>,
}

/// How many of the rows in `rows` add a timeline point on `device` ([`is_timeline_request`]).
pub fn count_timeline_requests(c: &Columns<'_>, device: i32, rows: std::ops::Range<usize>) -> usize {
    let (last_request, oom) = (Action::FreeCompleted as u8, Action::Oom as u8);
    debug_assert!(Action::Alloc as u8 == 0 && Action::FreeRequested as u8 == 1);
    // Allocs and frees (codes 0-2) in one vectorised pass. Recorded OOMs, rare, are found by
    // memchr and counted with their device and seed bit only when there are any.
    let mut requests = c.count_actions(device, 0..=last_request, rows.clone());
    if c.action[rows.clone()].contains(&oom) {
        requests += rows.filter(|&i| c.action[i] == oom && c.device[i] == device && !c.seed.value(i)).count();
    }
    requests
}

/// Typed views of the core columns, for the replay engine's hot loop.
pub struct Columns<'a> {
    /// `Action` codes (the dictionary keys of `action`).
    pub action: &'a [u8],
    /// Values of `alloc_id` (0 where null: only read for request events).
    pub alloc_id: &'a [u64],
    pub size: &'a [u64],
    pub addr: &'a PrimitiveArray<UInt64Type>,
    pub stream: &'a [i64],
    pub device: &'a [i32],
    pub pool: &'a [u32],
    pub time_ns: &'a PrimitiveArray<Int64Type>,
    pub seed: &'a BooleanArray,
    alloc_id_nulls: Option<&'a arrow_buffer::NullBuffer>,
}

impl<'a> Columns<'a> {
    /// Views of a trace batch's core columns: a whole trace's, or one record batch of a file
    /// streamed by [`MappedTrace`].
    pub fn of(b: &'a RecordBatch) -> Columns<'a> {
        // Types are guaranteed by construction (builder) or by `read_arrow`'s schema check.
        let action = b.column(0).as_dictionary::<UInt8Type>().keys().values();
        Columns {
            action,
            alloc_id: b.column(1).as_primitive::<UInt64Type>().values(),
            size: b.column(2).as_primitive::<UInt64Type>().values(),
            addr: b.column(3).as_primitive::<UInt64Type>(),
            stream: b.column(4).as_primitive::<Int64Type>().values(),
            device: b.column(5).as_primitive::<Int32Type>().values(),
            pool: b.column(6).as_primitive::<UInt32Type>().values(),
            time_ns: b.column(7).as_primitive::<Int64Type>(),
            seed: b.column(8).as_boolean(),
            alloc_id_nulls: b.column(1).nulls(),
        }
    }

    #[inline]
    pub fn alloc_id_valid(&self, i: usize) -> bool {
        self.alloc_id_nulls.is_none_or(|n| n.is_valid(i))
    }

    /// Every row in `rows` has an `alloc_id` (a count over the validity bits, 64 rows a word).
    pub fn alloc_ids_valid(&self, rows: std::ops::Range<usize>) -> bool {
        self.alloc_id_nulls.is_none_or(|n| n.inner().slice(rows.start, rows.len()).count_set_bits() == rows.len())
    }

    /// Rows of `rows` on `device` whose action code is in `codes` (e.g. `0..=2`: the requests).
    ///
    /// One branch-free pass over zipped slices (no bound to check per row), summed in `u32`
    /// per chunk of 64 K rows, so that it vectorises: a row-by-row `filter(..).count()` with
    /// `&&` did not (3–6 instructions a row; every replay counts its events this way).
    pub fn count_actions(&self, device: i32, codes: std::ops::RangeInclusive<u8>, rows: std::ops::Range<usize>) -> usize {
        const CHUNK: usize = 1 << 16;
        let (lo, hi) = (*codes.start(), *codes.end());
        let (devices, actions) = (&self.device[rows.clone()], &self.action[rows]);
        devices
            .chunks(CHUNK)
            .zip(actions.chunks(CHUNK))
            .map(|(d, a)| d.iter().zip(a).map(|(&d, &a)| u32::from((d == device) & (a >= lo) & (a <= hi))).sum::<u32>() as usize)
            .sum()
    }
}

impl Trace {
    pub(crate) fn from_parts(metadata: TraceMetadata, frames: FrameTable, extra_fields: &[Field], columns: Vec<ArrayRef>) -> Result<Trace> {
        let metadata_json = serde_json::to_string(&metadata).expect("metadata serializes");
        let frames_json = if frames.is_empty() { None } else { Some(serde_json::to_string(&frames).expect("frames serialize")) };
        let schema = schema::schema_with(extra_fields, metadata_json, frames_json);
        let batch = RecordBatch::try_new(schema, columns).map_err(|e| Error::Replay(format!("building trace: {e}")))?;
        Ok(Trace { metadata, frames, batch, derived: Derived::default() })
    }

    /// Wraps a batch already checked by `ipc::read_arrow`.
    pub(crate) fn from_checked_batch(metadata: TraceMetadata, frames: FrameTable, batch: RecordBatch) -> Trace {
        Trace { metadata, frames, batch, derived: Derived::default() }
    }

    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    pub fn schema(&self) -> SchemaRef {
        self.batch.schema()
    }

    pub fn num_events(&self) -> usize {
        self.batch.num_rows()
    }

    pub fn column(&self, name: &str) -> Option<&ArrayRef> {
        self.batch.column_by_name(name)
    }

    pub fn columns(&self) -> Columns<'_> {
        Columns::of(&self.batch)
    }

    /// Distinct device indices, ascending.
    pub fn devices(&self) -> Vec<i32> {
        self.device_list().to_vec()
    }

    fn device_list(&self) -> &[i32] {
        self.derived.devices.get_or_init(|| self.find_devices())
    }

    /// The events of `device` that add a timeline point (`count_timeline_requests` over the
    /// whole trace), counted at the first call for every device.
    pub fn timeline_requests(&self, device: i32) -> usize {
        let counts = self.derived.timeline_requests.get_or_init(|| {
            let c = self.columns();
            self.device_list().iter().map(|&d| count_timeline_requests(&c, d, 0..self.num_events())).collect()
        });
        self.device_list().iter().position(|&d| d == device).map_or(0, |i| counts[i])
    }

    fn find_devices(&self) -> Vec<i32> {
        // Every replay asks: no copy and sort of the whole column. Most traces have one device
        // (a compare over the column, vectorised); else devices are few and come in long runs:
        // the distinct values are collected as the runs change.
        let col = self.columns().device;
        let Some(&first) = col.first() else { return Vec::new() };
        if col.chunks(4096).all(|ch| ch.iter().fold(true, |all, &x| all & (x == first))) {
            return vec![first];
        }
        let mut d: Vec<i32> = Vec::new();
        let mut last = None;
        for &x in col {
            if last != Some(x) {
                if !d.contains(&x) {
                    d.push(x);
                }
                last = Some(x);
            }
        }
        d.sort_unstable();
        d
    }

    /// The value of an optional u64 column at `i`, if the column exists and is not null there.
    pub fn optional_u64(&self, name: &str) -> Option<&PrimitiveArray<UInt64Type>> {
        self.column(name).and_then(|c| c.as_primitive_opt::<UInt64Type>())
    }

    /// True if the two traces hold the same events, metadata and frames.
    pub fn same_as(&self, other: &Trace) -> bool {
        self.metadata == other.metadata
            && self.frames == other.frames
            && self.batch.num_columns() == other.batch.num_columns()
            && self.batch.columns().iter().zip(other.batch.columns()).all(|(a, b)| a.to_data() == b.to_data())
            && self.batch.schema().fields() == other.batch.schema().fields()
    }

    #[allow(dead_code)]
    pub(crate) fn null_count(&self, name: &str) -> usize {
        self.column(name).map(|c| c.null_count()).unwrap_or(0)
    }
}
