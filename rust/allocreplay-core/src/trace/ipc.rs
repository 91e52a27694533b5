//! Reading and writing `.arrow` trace files (Arrow IPC file format).

use arrow_array::cast::AsArray;
use arrow_array::types::UInt8Type;
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use super::schema::{core_fields, META_FORMAT_VERSION, META_FRAMES, META_METADATA};
use super::{Action, FrameTable, Trace, TraceMetadata, FORMAT_VERSION};
use crate::error::{Error, Result};

/// Writes `trace` to `path` atomically: into a temporary file beside it, renamed over `path`
/// once complete, so a failed write never leaves a partial trace (nor destroys an old one).
pub fn write_arrow(trace: &Trace, path: &Path) -> Result<()> {
    let name = path.file_name().ok_or_else(|| Error::io(path, std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name")))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let file = File::create(&tmp).map_err(|e| Error::io(path, e))?;
    let written = write_arrow_to(trace, BufWriter::new(file)).map_err(|e| match e {
        WriteError::Io(e) => Error::io(path, e),
        WriteError::Arrow(m) => Error::format(path, format!("cannot write Arrow file: {m}")),
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// Why [`write_arrow_to`] failed.
#[derive(Debug)]
pub enum WriteError {
    Io(std::io::Error),
    Arrow(String),
}

/// Writes `trace` in the Arrow IPC file format to any writer (a file, stdout, a buffer).
pub fn write_arrow_to<W: Write>(trace: &Trace, out: W) -> std::result::Result<(), WriteError> {
    let to_err = |e: arrow_schema::ArrowError| match e {
        arrow_schema::ArrowError::IoError(_, e) => WriteError::Io(e),
        e => WriteError::Arrow(e.to_string()),
    };
    let mut w = FileWriter::try_new(out, &trace.schema()).map_err(to_err)?;
    w.write(trace.batch()).map_err(to_err)?;
    w.finish().map_err(to_err)?;
    w.into_inner().map_err(to_err)?.flush().map_err(WriteError::Io)
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

/// A trace from Arrow record batches with a trace's schema and schema metadata (an `.arrow`
/// file's, or a table built in Python by `allocreplay.Trace.from_events`), checked as
/// `read_arrow` checks a file; `origin` names the source in errors.
pub fn trace_from_batches(schema: arrow_schema::SchemaRef, batches: Vec<RecordBatch>, origin: &Path) -> Result<Trace> {
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
    // The schema metadata travels with the trace (save, to_arrow): keep the given schema's.
    let batch =
        batch.with_schema(schema.clone()).map_err(|e| Error::schema(path, format!("record batch does not match its schema: {e}")))?;
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
