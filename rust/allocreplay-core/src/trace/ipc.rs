//! Reading and writing `.arrow` trace files (Arrow IPC file format).

use arrow_array::cast::AsArray;
use arrow_array::types::UInt8Type;
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::SchemaRef;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use super::schema::{core_fields, META_FORMAT_VERSION, META_FRAMES, META_METADATA};
use super::{Action, FrameTable, Trace, TraceMetadata, FORMAT_VERSION};
use crate::error::{Error, Result};

pub fn write_arrow(trace: &Trace, path: &Path) -> Result<()> {
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = FileWriter::try_new(BufWriter::new(file), &trace.schema())
        .map_err(|e| Error::format(path, format!("cannot write Arrow file: {e}")))?;
    w.write(trace.batch()).and_then(|_| w.finish()).map_err(|e| Error::format(path, format!("cannot write Arrow file: {e}")))?;
    Ok(())
}

pub fn read_arrow(path: &Path) -> Result<Trace> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let reader =
        FileReader::try_new(BufReader::new(file), None).map_err(|e| Error::format(path, format!("not a readable Arrow IPC file ({e})")))?;
    let schema = reader.schema();
    let batches: Vec<RecordBatch> =
        reader.collect::<std::result::Result<_, _>>().map_err(|e| Error::format(path, format!("corrupt Arrow record batch: {e}")))?;
    trace_from_batches(schema, batches, path)
}

/// A trace from Arrow record batches that carry the trace schema and its metadata (an `.arrow`
/// file's, or a table handed over through the Arrow C stream interface), checked as a file is;
/// `origin` names the source in errors.
pub fn trace_from_batches(schema: SchemaRef, batches: Vec<RecordBatch>, origin: &Path) -> Result<Trace> {
    let path = origin;
    let md = schema.metadata();
    let version = md.get(META_FORMAT_VERSION).ok_or_else(|| {
        Error::schema(path, "Arrow file is not an allocreplay trace (no allocreplay.format_version in its schema metadata); import the raw capture with `allocreplay import`")
    })?;
    if version.parse::<u32>().ok() != Some(FORMAT_VERSION) {
        return Err(Error::schema(
            path,
            format!("trace format version {version} is not supported by this build (which reads version {FORMAT_VERSION}); re-import the raw capture"),
        ));
    }
    for (i, want) in core_fields().iter().enumerate() {
        match schema.fields().get(i) {
            Some(f) if f.name() == want.name() && f.data_type() == want.data_type() => {}
            Some(f) => {
                return Err(Error::schema(
                    path,
                    format!("column {i} is {} of type {}, expected {} of type {}", f.name(), f.data_type(), want.name(), want.data_type()),
                ))
            }
            None => return Err(Error::schema(path, format!("missing column {}", want.name()))),
        }
    }
    let metadata: TraceMetadata = serde_json::from_str(md.get(META_METADATA).map(|s| s.as_str()).unwrap_or("null"))
        .map_err(|e| Error::schema(path, format!("bad allocreplay.metadata: {e}")))?;
    let frames: FrameTable = match md.get(META_FRAMES) {
        Some(s) => serde_json::from_str(s).map_err(|e| Error::schema(path, format!("bad allocreplay.frames: {e}")))?,
        None => FrameTable::default(),
    };
    let batch = if batches.len() == 1 {
        batches.into_iter().next().unwrap()
    } else {
        arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| Error::format(path, format!("cannot concatenate record batches: {e}")))?
    };
    // The engine reads action codes as dictionary keys: the dictionary must be ours.
    let dict = batch.column(0).as_dictionary::<UInt8Type>();
    let values = dict.values().as_string_opt::<i32>().ok_or_else(|| Error::schema(path, "action dictionary is not utf8"))?;
    let canonical = values.len() <= Action::ALL.len() && (0..values.len()).all(|i| values.value(i) == Action::ALL[i].as_str());
    if !canonical {
        return Err(Error::schema(path, "action dictionary is not in allocreplay's canonical order"));
    }
    if dict.keys().null_count() > 0 || dict.keys().values().iter().any(|&k| k as usize >= values.len()) {
        return Err(Error::schema(path, "action column has null or out-of-range values"));
    }
    // Allocation ids are dense (traces/README.md): the engine and `info` index arrays by them,
    // so a file with an id beyond the number of events is refused rather than allocated for.
    let ids = batch.column(1).as_primitive::<arrow_array::types::UInt64Type>();
    if let Some(max) = ids.iter().flatten().max() {
        if max >= batch.num_rows() as u64 {
            return Err(Error::schema(
                path,
                format!("alloc_id {max} is not dense: ids must be below the number of events ({})", batch.num_rows()),
            ));
        }
    }
    Ok(Trace::from_checked_batch(metadata, frames, batch))
}
