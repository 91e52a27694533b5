//! Reading and writing `.arrow` trace files (Arrow IPC file format).

use arrow_array::cast::AsArray;
use arrow_array::types::UInt8Type;
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::schema::{core_fields, META_FORMAT_VERSION, META_FRAMES, META_METADATA};
use super::{Action, FrameTable, Trace, TraceMetadata, FORMAT_VERSION};
use crate::error::{Error, Result};

/// Writes `trace` to `path` atomically: into a temporary file beside it, renamed over `path`
/// once complete, so a failed write never leaves a partial trace (nor destroys an old one).
pub fn write_arrow(trace: &Trace, path: &Path) -> Result<()> {
    let tmp = tmp_beside(path)?;
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

/// The temporary file a write of `path` goes to before it is renamed over `path`.
fn tmp_beside(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| Error::io(path, std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name")))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

/// An `.arrow` trace written record batch by record batch, for a trace too large to hold
/// whole (`tile_to_file`): atomic as [`write_arrow`] (a temporary file beside `path`, renamed
/// over it by [`TraceFileWriter::finish`]; one dropped unfinished is removed).
pub struct TraceFileWriter {
    path: PathBuf,
    tmp: PathBuf,
    writer: Option<FileWriter<BufWriter<File>>>,
    rows: u64,
}

impl TraceFileWriter {
    /// Starts `path`, whose batches will all have `schema` (a trace's, with its metadata).
    pub fn create(path: &Path, schema: &arrow_schema::Schema) -> Result<Self> {
        let tmp = tmp_beside(path)?;
        let file = File::create(&tmp).map_err(|e| Error::io(path, e))?;
        let mut w = TraceFileWriter { path: path.to_path_buf(), tmp, writer: None, rows: 0 };
        w.writer = Some(FileWriter::try_new(BufWriter::new(file), schema).map_err(|e| w.error(e))?);
        Ok(w)
    }

    fn error(&self, e: arrow_schema::ArrowError) -> Error {
        match e {
            arrow_schema::ArrowError::IoError(_, e) => Error::io(&self.path, e),
            e => Error::format(&self.path, format!("cannot write Arrow file: {e}")),
        }
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let w = self.writer.as_mut().expect("written before finish");
        let r = w.write(batch);
        r.map_err(|e| self.error(e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Writes the footer and renames the file into place; the number of rows written.
    pub fn finish(mut self) -> Result<u64> {
        let mut w = self.writer.take().expect("finished once");
        let done = w.finish().and_then(|()| w.into_inner()).map_err(|e| self.error(e));
        let done = done.and_then(|mut out| out.flush().map_err(|e| Error::io(&self.path, e)));
        if let Err(e) = done.and_then(|()| std::fs::rename(&self.tmp, &self.path).map_err(|e| Error::io(&self.path, e))) {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e);
        }
        Ok(self.rows)
    }
}

impl Drop for TraceFileWriter {
    fn drop(&mut self) {
        if self.writer.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Checks what arrow-ipc trusts before it slices buffers (a block or buffer beyond the file
/// panics inside arrow-buffer; a huge body length allocates it): every footer block lies in
/// the file, every buffer in its message's body, and the batches hold no more rows than the
/// file could (at least [`MIN_ROW_BYTES`] bytes a row: blocks pointing at one body many times).
pub(crate) fn check_ipc_bounds(bytes: &[u8]) -> std::result::Result<(), String> {
    let read = |off: usize, len: usize| Ok::<_, std::convert::Infallible>(std::borrow::Cow::Borrowed(&bytes[off..off + len]));
    check_ipc_bounds_with(bytes.len(), read).map_err(|e| match e {
        BoundsError::Corrupt(m) => m,
        BoundsError::Read(never) => match never {},
    })
}

/// Why [`check_ipc_bounds_with`] refused a file: what it found, or the error of a read.
pub(crate) enum BoundsError<E> {
    Corrupt(String),
    Read(E),
}

impl<E> From<String> for BoundsError<E> {
    fn from(m: String) -> Self {
        BoundsError::Corrupt(m)
    }
}

impl<E> From<&str> for BoundsError<E> {
    fn from(m: &str) -> Self {
        BoundsError::Corrupt(m.to_string())
    }
}

/// [`check_ipc_bounds`] of a file of `n` bytes read piece by piece: `read(offset, len)` gives
/// `len` bytes from `offset` (both within `n`) — the trailer, the footer and each block's
/// message, never a body — so that a streamed file (`trace::MappedTrace`) is checked without
/// reading it whole.
pub(crate) fn check_ipc_bounds_with<'b, E>(
    n: usize,
    mut read: impl FnMut(usize, usize) -> std::result::Result<std::borrow::Cow<'b, [u8]>, E>,
) -> std::result::Result<(), BoundsError<E>> {
    if n < 18 {
        return Err("the file is truncated (no ARROW1 trailer)".into());
    }
    let trailer = read(n - 10, 10).map_err(BoundsError::Read)?;
    if !trailer.ends_with(b"ARROW1") {
        return Err("the file is truncated (no ARROW1 trailer)".into());
    }
    let footer_len = i32::from_le_bytes(trailer[..4].try_into().unwrap());
    let footer_len = usize::try_from(footer_len).ok().filter(|&l| l <= n - 18).ok_or("the footer length is out of the file")?;
    let footer_bytes = read(n - 10 - footer_len, footer_len).map_err(BoundsError::Read)?;
    let footer = arrow_ipc::root_as_footer(&footer_bytes).map_err(|e| format!("corrupt footer: {e}"))?;
    // The schema the reader will use; when it does not convert, the reader refuses the file.
    let schema = footer.schema().and_then(|s| arrow_ipc::convert::try_fb_to_schema(s).ok());
    let mut rows: u64 = 0;
    let blocks = footer.recordBatches().into_iter().flatten().chain(footer.dictionaries().into_iter().flatten());
    for (k, block) in blocks.enumerate() {
        let (off, meta, body) = (block.offset(), block.metaDataLength(), block.bodyLength());
        let (Ok(off), Ok(meta), Ok(body)) = (usize::try_from(off), usize::try_from(meta), usize::try_from(body)) else {
            return Err(format!("block {k} has a negative offset or length").into());
        };
        let end = off.checked_add(meta).and_then(|x| x.checked_add(body));
        if end.is_none_or(|e| e > n) || meta < 8 {
            return Err(format!("block {k} lies beyond the end of the file").into());
        }
        let block_meta = read(off, meta).map_err(BoundsError::Read)?;
        let mut m: &[u8] = &block_meta;
        if m[..4] == [0xff; 4] {
            m = &m[4..];
        }
        let len = i32::from_le_bytes(m[..4].try_into().unwrap());
        let len =
            usize::try_from(len).ok().filter(|&l| l <= m.len() - 4).ok_or_else(|| format!("block {k}: message length out of its block"))?;
        let msg = arrow_ipc::root_as_message(&m[4..4 + len]).map_err(|e| format!("block {k}: corrupt message: {e}"))?;
        let body_len = u64::try_from(msg.bodyLength())
            .ok()
            .filter(|&b| b <= body as u64)
            .ok_or_else(|| format!("block {k}: body longer than its block"))?;
        let batch = msg.header_as_record_batch().or_else(|| msg.header_as_dictionary_batch().and_then(|d| d.data()));
        if let Some(b) = batch {
            if msg.header_as_record_batch().is_some() {
                rows = rows.saturating_add(u64::try_from(b.length()).map_err(|_| format!("block {k}: negative row count"))?);
            }
            for (j, buf) in b.buffers().into_iter().flatten().enumerate() {
                let fits = u64::try_from(buf.offset())
                    .ok()
                    .zip(u64::try_from(buf.length()).ok())
                    .and_then(|(o, l)| o.checked_add(l))
                    .is_some_and(|e| e <= body_len);
                if !fits {
                    return Err(format!("block {k}: buffer {j} lies beyond its message body").into());
                }
                // The IPC format pads buffers to 8 bytes; arrow's validation panics on an
                // unaligned offsets buffer in a dictionary batch (found by the arrow fuzz target).
                if buf.offset() % 8 != 0 || (off + meta) % 8 != 0 {
                    return Err(format!("block {k}: buffer {j} is not 8-byte aligned, as the IPC format requires").into());
                }
            }
            for node in b.nodes().into_iter().flatten() {
                if node.length() < 0 || node.null_count() < 0 || node.null_count() > node.length() {
                    return Err(format!("block {k}: a column has a negative length or more nulls than values").into());
                }
            }
            if let Some(schema) = &schema {
                check_buffer_widths(&msg, &b, schema).map_err(|m| format!("block {k}: {m}"))?;
            }
        }
    }
    if rows > n as u64 / MIN_ROW_BYTES {
        return Err(format!("the batches claim {rows} rows, more than a file of {n} bytes holds").into());
    }
    Ok(())
}

/// What arrow-ipc's reader asks of one buffer beyond lying in its body.
#[derive(Clone, Copy)]
struct BufferNeed {
    /// Bytes per value: arrow's validation views the whole buffer as values of this width and
    /// asserts (panics) when its length is not a multiple of it (`Buffer::typed_data`). 0: any.
    width: usize,
    /// Union type ids and offsets: the reader slices `rows × width` bytes, which panics past
    /// the buffer's end (`Buffer::slice_with_length`).
    whole_rows: bool,
    /// The field node the buffer belongs to.
    node: usize,
}

/// The buffers (in message order) the reader takes for a column of type `dt`, walking the
/// type as `RecordBatchDecoder::create_array` does (one field node per array, buffers in
/// pre-order). `None` when the message cannot hold it (too few variadic counts): the reader
/// refuses that with an error, not a panic.
fn buffer_needs(
    dt: &arrow_schema::DataType,
    v5: bool,
    variadic: &mut std::collections::VecDeque<i64>,
    nodes: &mut usize,
    out: &mut Vec<BufferNeed>,
) -> Option<()> {
    use arrow_schema::{DataType::*, UnionMode};
    let node = *nodes;
    *nodes += 1;
    let mut push = |width: usize, whole_rows: bool| out.push(BufferNeed { width, whole_rows, node });
    match dt {
        Utf8 | Binary => [0, 4, 0].into_iter().for_each(|w| push(w, false)),
        LargeUtf8 | LargeBinary => [0, 8, 0].into_iter().for_each(|w| push(w, false)),
        Utf8View | BinaryView => {
            let count = usize::try_from(variadic.pop_front()?).ok()?;
            push(0, false);
            push(16, false);
            (0..count.min(1 << 20)).for_each(|_| push(0, false));
        }
        List(f) | Map(f, _) => {
            [0, 4].into_iter().for_each(|w| push(w, false));
            buffer_needs(f.data_type(), v5, variadic, nodes, out)?;
        }
        LargeList(f) => {
            [0, 8].into_iter().for_each(|w| push(w, false));
            buffer_needs(f.data_type(), v5, variadic, nodes, out)?;
        }
        ListView(f) => {
            [0, 4, 4].into_iter().for_each(|w| push(w, false));
            buffer_needs(f.data_type(), v5, variadic, nodes, out)?;
        }
        LargeListView(f) => {
            [0, 8, 8].into_iter().for_each(|w| push(w, false));
            buffer_needs(f.data_type(), v5, variadic, nodes, out)?;
        }
        FixedSizeList(f, _) => {
            push(0, false);
            buffer_needs(f.data_type(), v5, variadic, nodes, out)?;
        }
        Struct(fields) => {
            push(0, false);
            for f in fields {
                buffer_needs(f.data_type(), v5, variadic, nodes, out)?;
            }
        }
        RunEndEncoded(run_ends, values) => {
            buffer_needs(run_ends.data_type(), v5, variadic, nodes, out)?;
            buffer_needs(values.data_type(), v5, variadic, nodes, out)?;
        }
        Dictionary(key, _) => {
            push(0, false);
            push(key.primitive_width().unwrap_or(0), false);
        }
        Union(fields, mode) => {
            if !v5 {
                push(0, false);
            }
            push(1, true);
            if *mode == UnionMode::Dense {
                push(4, true);
            }
            for (_, f) in fields.iter() {
                buffer_needs(f.data_type(), v5, variadic, nodes, out)?;
            }
        }
        Null => {}
        FixedSizeBinary(_) => [0, 0].into_iter().for_each(|w| push(w, false)),
        other => {
            push(0, false);
            push(other.primitive_width().unwrap_or(0), false);
        }
    }
    Some(())
}

/// Every buffer of a record batch (or of a dictionary batch's values) long enough, and a
/// multiple of its values' width, for what the reader does with it: arrow-rs panics instead of
/// failing on such a buffer (found by the `arrow` fuzz target: a dictionary's offsets buffer
/// whose length was not a multiple of 4). Checked here so that no panic happens at all, also
/// under libFuzzer, whose panic hook aborts before `read_arrow_bytes`'s `catch_unwind`.
fn check_buffer_widths(
    msg: &arrow_ipc::Message,
    b: &arrow_ipc::RecordBatch,
    schema: &arrow_schema::Schema,
) -> std::result::Result<(), String> {
    if b.compression().is_some() {
        return Ok(()); // Lengths are compressed sizes; this build reads no compressed files.
    }
    let types: Vec<arrow_schema::DataType> = match msg.header_as_dictionary_batch() {
        Some(d) => {
            #[allow(deprecated)] // the reader finds a dictionary's field the same way
            let fields = schema.fields_with_dict_id(d.id());
            match fields.first().map(|f| f.data_type()) {
                Some(arrow_schema::DataType::Dictionary(_, values)) => vec![values.as_ref().clone()],
                _ => return Ok(()), // the reader refuses a dictionary no field uses
            }
        }
        None => schema.fields().iter().map(|f| f.data_type().clone()).collect(),
    };
    let v5 = msg.version() >= arrow_ipc::MetadataVersion::V5;
    let mut variadic: std::collections::VecDeque<i64> = b.variadicBufferCounts().into_iter().flatten().collect();
    let (mut nodes, mut needs) = (0, Vec::new());
    for dt in &types {
        if buffer_needs(dt, v5, &mut variadic, &mut nodes, &mut needs).is_none() {
            return Ok(()); // the reader refuses a message without the variadic counts it needs
        }
    }
    let field_nodes: Vec<_> = b.nodes().into_iter().flatten().collect();
    for (j, (need, buf)) in needs.iter().zip(b.buffers().into_iter().flatten()).enumerate() {
        let len = u64::try_from(buf.length()).unwrap_or(0);
        let width = need.width as u64;
        if width > 1 && len % width != 0 {
            return Err(format!("buffer {j} holds {len} bytes, not a whole number of {width}-byte values"));
        }
        if need.whole_rows {
            let rows = field_nodes.get(need.node).map_or(0, |n| u64::try_from(n.length()).unwrap_or(0));
            if len < rows.saturating_mul(width) {
                return Err(format!("buffer {j} holds {len} bytes, less than its {rows} values need"));
            }
        }
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

/// The least bytes a row of a trace takes in the file: its non-null core columns (action 1,
/// size 8, stream 8, device 4, pool 4, seed 1 bit).
const MIN_ROW_BYTES: u64 = 25;

/// Reads an `.arrow` trace. Everything the file says is checked before it is used: the IPC
/// structure (`check_ipc_bounds`), every array (arrow's full validation), the schema, the
/// action dictionary, and the alloc ids; the events' semantics are checked by `import::load`
/// (`trace::check`).
pub fn read_arrow(path: &Path) -> Result<Trace> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    read_arrow_bytes(path, bytes)
}

/// `read_arrow` of a file's bytes (`path` names it in errors).
pub fn read_arrow_bytes(path: &Path, bytes: Vec<u8>) -> Result<Trace> {
    if !bytes.starts_with(b"ARROW1") {
        return Err(Error::format(path, crate::magic::not_arrow_message(&bytes)));
    }
    check_ipc_bounds(&bytes).map_err(|m| Error::format(path, format!("corrupt Arrow IPC file: {m}")))?;
    // What the bounds check cannot foresee still must not reach the user as a panic.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_checked(path, bytes))) {
        Ok(r) => r,
        Err(_) => Err(Error::format(path, "corrupt Arrow IPC file: the Arrow reader failed on it")),
    }
}

fn read_checked(path: &Path, bytes: Vec<u8>) -> Result<Trace> {
    let reader = FileReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| Error::format(path, format!("not a readable Arrow IPC file ({e})")))?;
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
    let (metadata, frames) = trace_header(&schema, path)?;
    let batch = if batches.len() == 1 {
        batches.into_iter().next().unwrap()
    } else {
        arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| Error::format(path, format!("cannot concatenate record batches: {e}")))?
    };
    let rows = batch.num_rows() as u64;
    let batch = checked_batch(batch, &schema, rows, path)?;
    Ok(Trace::from_checked_batch(metadata, frames, batch))
}

/// The metadata and frame table of a trace's schema, once its format version and core columns
/// are checked.
pub(crate) fn trace_header(schema: &arrow_schema::SchemaRef, path: &Path) -> Result<(TraceMetadata, FrameTable)> {
    let md = schema.metadata();
    let version = md.get(META_FORMAT_VERSION).ok_or_else(|| {
        Error::schema(path, "Arrow file is not an allocreplay trace (no allocreplay.format_version in its schema metadata); import the raw capture with `allocreplay import`")
    })?;
    if version.parse::<u32>().is_err() {
        return Err(Error::schema(
            path,
            format!(
                "allocreplay.format_version in its schema metadata is {version:?}, not a version number (digits only; this build reads version {FORMAT_VERSION}): the file was edited or not written by allocreplay; re-import the raw capture"
            ),
        ));
    }
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
    Ok((metadata, frames))
}

/// One record batch of a trace (the whole trace, or one batch of a streamed file), checked as
/// the engine needs it: the schema's, a canonical action dictionary, every array valid, and
/// allocation ids below `total_rows` (the trace's events: ids are dense), with the values under
/// alloc_id's nulls zeroed.
pub(crate) fn checked_batch(batch: RecordBatch, schema: &arrow_schema::SchemaRef, total_rows: u64, path: &Path) -> Result<RecordBatch> {
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
    for (i, d) in batch.columns().iter().enumerate() {
        d.to_data().validate_full().map_err(|e| Error::format(path, format!("column {i} is corrupt: {e}")))?;
    }
    // Required columns hold no nulls (traces/README.md): the engine reads their values
    // directly, and Arrow leaves the values under nulls undefined.
    for (i, name) in [(2, "size"), (4, "stream"), (5, "device"), (6, "pool"), (8, "seed")] {
        if let Some(nulls) = batch.column(i).nulls().filter(|n| n.null_count() > 0) {
            let row = nulls.iter().position(|valid| !valid).unwrap_or(0);
            return Err(Error::format(
                path,
                format!("column {name} is null at row {row} ({} nulls): a required column may hold no nulls", nulls.null_count()),
            ));
        }
    }
    let ids = batch.column(1).as_primitive::<arrow_array::types::UInt64Type>();
    if let Some(max) = ids.iter().flatten().max() {
        if max >= total_rows {
            return Err(Error::schema(path, format!("alloc_id {max} is not dense: ids must be below the number of events ({total_rows})")));
        }
    }
    // Values under nulls are undefined in Arrow (any writer may leave garbage there); the engine
    // reads alloc_id's values directly, so they are zeroed.
    let batch = match ids.nulls() {
        Some(nulls) if ids.values().iter().enumerate().any(|(i, &v)| v != 0 && nulls.is_null(i)) => {
            let clean: arrow_array::UInt64Array = ids.iter().map(|v| Some(v.unwrap_or(0))).collect();
            let clean = arrow_array::UInt64Array::new(clean.values().clone(), Some(nulls.clone()));
            let mut cols = batch.columns().to_vec();
            cols[1] = std::sync::Arc::new(clean);
            RecordBatch::try_new(batch.schema(), cols).map_err(|e| Error::format(path, format!("corrupt Arrow record batch: {e}")))?
        }
        _ => batch,
    };
    Ok(batch)
}
