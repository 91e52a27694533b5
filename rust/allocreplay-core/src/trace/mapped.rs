//! `.arrow` traces streamed from their file, record batch after record batch, for traces too
//! large to hold in memory (issue #12: 100 M events within 2 GiB): nothing is read whole; each
//! pass over the file reads one record batch at a time into a buffer of its own, reused for
//! the next batch once the caller has dropped the previous one, so a pass holds one batch.
//!
//! The file is read (`pread`, [`std::os::unix::fs::FileExt::read_exact_at`]), not memory-mapped
//! (as it was until issue 28): a mapped file that another process truncates kills the reader
//! with SIGBUS when it touches a page beyond the new end. A read past the new end is instead
//! a short read, reported as `F: the file changed (shrank) while it was read ...`
//! (`Error::Format`), and a batch already read stays valid, being a copy. (The type keeps its
//! name from its mapped days.)
//!
//! [`MappedTrace::open`] checks the file as `read_arrow` does (the IPC bounds before anything
//! is decoded, the schema, each batch's arrays) and makes one first pass over it: the events'
//! semantics (`trace::check`, strict, with state O(live allocations)), the trace's `info`, and
//! what a replay must know before its first event (largest allocation id, timeline requests per
//! device). A replay (`replay::replay`) then streams the batches again per policy.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_buffer::{Buffer, MutableBuffer};
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::{Block, MetadataVersion};
use arrow_schema::SchemaRef;

use super::check::{EventChecker, SparseIds};
use super::info::{InfoBuilder, TraceInfo};
use super::ipc::{check_ipc_bounds_with, checked_batch, trace_header, BoundsError};
use super::{Action, Columns, FrameTable, TraceMetadata};
use crate::cancel::PROGRESS_EVERY;
use crate::error::{Error, Result};
use crate::trace::is_timeline_request;

/// An `.arrow` trace file opened for streaming (see the module's documentation).
#[derive(Debug)]
pub struct MappedTrace {
    path: PathBuf,
    /// Kept open: every pass reads this same file, even if the path is replaced meanwhile.
    file: File,
    len: usize,
    schema: SchemaRef,
    version: MetadataVersion,
    blocks: Vec<Block>,
    dictionaries: Vec<Block>,
    rows: u64,
    pub metadata: TraceMetadata,
    pub frames: FrameTable,
    info: TraceInfo,
    max_alloc_id: u64,
    /// Per device: the events that add a timeline point (`trace::is_timeline_request`).
    timeline_requests: BTreeMap<i32, usize>,
}

/// `buf.len()` bytes of `file` from `offset`. A file that ends before them (another process
/// truncated it since it was opened at `opened_len` bytes) is a format error saying so, not
/// a short or garbled read.
fn read_exact_at(file: &File, path: &Path, opened_len: usize, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => shrank(file, path, opened_len),
        _ => Error::io(path, e),
    })
}

/// The error of a file found shorter than when it was opened.
fn shrank(file: &File, path: &Path, opened_len: usize) -> Error {
    let now = file.metadata().map_or_else(|_| "fewer".to_string(), |m| m.len().to_string());
    Error::format(
        path,
        format!(
            "the file changed (shrank) while it was read: it had {opened_len} bytes when opened and has {now} now (another process truncated or rewrote it); read it again once it is complete"
        ),
    )
}

impl MappedTrace {
    /// Opens and checks `path` (see the module's documentation); errors name the file.
    pub fn open(path: &Path) -> Result<MappedTrace> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len == 0 {
            return Err(Error::format(path, "file is empty"));
        }
        let len = usize::try_from(len).map_err(|_| Error::format(path, "the file is larger than this machine can address"))?;
        let read = |offset: usize, n: usize| -> Result<Cow<'static, [u8]>> {
            let mut buf = vec![0u8; n];
            read_exact_at(&file, path, len, &mut buf, offset as u64)?;
            Ok(Cow::Owned(buf))
        };
        let head = read(0, len.min(16))?;
        if !head.starts_with(b"ARROW1") {
            return Err(Error::format(path, crate::magic::not_arrow_message(&head)));
        }
        check_ipc_bounds_with(len, read).map_err(|e| match e {
            BoundsError::Corrupt(m) => Error::format(path, format!("corrupt Arrow IPC file: {m}")),
            BoundsError::Read(e) => e,
        })?;
        // The bounds check has parsed the footer and every block's message already: neither
        // can fail here any more, but a failure still is an error, never a panic.
        let corrupt = |m: String| Error::format(path, format!("corrupt Arrow IPC file: {m}"));
        let trailer = read(len - 10, 10)?;
        let footer_len = i32::from_le_bytes(trailer[..4].try_into().expect("4 bytes")) as usize;
        let footer_bytes = read(len - 10 - footer_len, footer_len)?;
        let footer = arrow_ipc::root_as_footer(&footer_bytes).map_err(|e| corrupt(e.to_string()))?;
        let fb_schema = footer.schema().ok_or_else(|| corrupt("the footer has no schema".into()))?;
        if !fb_schema.endianness().equals_to_target_endianness() {
            return Err(Error::format(path, "not a readable Arrow IPC file (its endianness is not this machine's)"));
        }
        let schema = Arc::new(
            arrow_ipc::convert::try_fb_to_schema(fb_schema)
                .map_err(|e| Error::format(path, format!("not a readable Arrow IPC file ({e})")))?,
        );
        let (metadata, frames) = trace_header(&schema, path)?;
        super::check::check_metadata(&metadata, path)?;
        let blocks: Vec<Block> = footer.recordBatches().into_iter().flatten().copied().collect();
        let dictionaries: Vec<Block> = footer.dictionaries().into_iter().flatten().copied().collect();
        let version = footer.version();
        let mut rows = 0u64;
        for (k, b) in blocks.iter().enumerate() {
            let meta = read(b.offset() as usize, b.metaDataLength() as usize)?;
            rows += block_rows(&meta).ok_or_else(|| corrupt(format!("block {k}: not a record batch")))?;
        }
        let mut t = MappedTrace {
            path: path.to_path_buf(),
            file,
            len,
            schema,
            version,
            blocks,
            dictionaries,
            rows,
            metadata,
            frames,
            info: InfoBuilder::default().finish(&TraceMetadata::new("")),
            max_alloc_id: 0,
            timeline_requests: BTreeMap::new(),
        };
        t.first_pass()?;
        Ok(t)
    }

    /// The check, the info and the replay's totals, in one pass.
    fn first_pass(&mut self) -> Result<()> {
        let mut checker = EventChecker::new(&self.metadata, self.rows, SparseIds::new(self.rows));
        let mut info = InfoBuilder::default();
        let mut max_id: Option<u64> = None;
        // Devices are few: a short list, with the last one found cached.
        let mut requests: Vec<(i32, usize)> = Vec::new();
        for b in self.batches()? {
            let (base, batch) = b?;
            let c = Columns::of(&batch);
            let n = batch.num_rows();
            for j in 0..n {
                if j % PROGRESS_EVERY == 0 {
                    crate::cancel::check()?;
                }
                if let Err(v) = checker.check(&c, j, base + j, &self.path)? {
                    let at = match (v.at, v.id) {
                        (Some(at), _) => at,
                        (None, Some(id)) => self.last_change(id, v.event)?,
                        (None, None) => 0,
                    };
                    return Err(v.error(&self.path, at));
                }
                if c.alloc_id_valid(j) {
                    max_id = Some(max_id.map_or(c.alloc_id[j], |m| m.max(c.alloc_id[j])));
                }
                if is_timeline_request(c.action[j], c.seed.value(j)) {
                    let d = c.device[j];
                    match requests.iter_mut().find(|r| r.0 == d) {
                        Some(r) => r.1 += 1,
                        None => requests.push((d, 1)),
                    }
                }
            }
            info.add(&c, n);
        }
        // As `engine::replay_device_hooked` takes it: the largest value of the column (0 where
        // null), so the largest valid id, or 0.
        self.max_alloc_id = max_id.unwrap_or(0);
        self.timeline_requests = requests.into_iter().collect();
        self.info = info.finish(&self.metadata);
        Ok(())
    }

    /// The event before `before` that last changed allocation `id` (its alloc or a free): what
    /// a violation names, found again since the first pass keeps one bit per freed id.
    fn last_change(&self, id: u64, before: usize) -> Result<u32> {
        let mut at = 0u32;
        for b in self.batches()? {
            let (base, batch) = b?;
            if base >= before {
                break;
            }
            let c = Columns::of(&batch);
            for j in 0..batch.num_rows().min(before - base) {
                let changes = matches!(Action::from_code(c.action[j]), Some(Action::Alloc | Action::FreeRequested | Action::FreeCompleted));
                if changes && c.alloc_id_valid(j) && c.alloc_id[j] == id {
                    at = (base + j) as u32;
                }
            }
        }
        Ok(at)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn num_events(&self) -> usize {
        self.rows as usize
    }

    pub fn num_batches(&self) -> usize {
        self.blocks.len()
    }

    /// What `allocreplay info` says of the trace (`trace::info::trace_info`'s numbers).
    pub fn info(&self) -> &TraceInfo {
        &self.info
    }

    /// Distinct device indices, ascending.
    pub fn devices(&self) -> Vec<i32> {
        self.info.devices.clone()
    }

    /// The largest allocation id (0 if none).
    pub fn max_alloc_id(&self) -> u64 {
        self.max_alloc_id
    }

    /// The events of `device` that add a timeline point.
    pub fn timeline_requests(&self, device: i32) -> usize {
        self.timeline_requests.get(&device).copied().unwrap_or(0)
    }

    /// A pass over the record batches, in order: `(first event's index, batch)`, each checked
    /// as `read_arrow` checks a trace. Each pass reads the file anew into buffers of its own,
    /// so that passes run side by side (one per policy).
    pub fn batches(&self) -> Result<Batches<'_>> {
        let now = self.file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
        if now < self.len as u64 {
            return Err(shrank(&self.file, &self.path, self.len));
        }
        if now != self.len as u64 {
            return Err(Error::format(
                &self.path,
                format!("the file changed while it was read: it had {} bytes when opened and has {now} now", self.len),
            ));
        }
        let mut decoder = FileDecoder::new(self.schema.clone(), self.version);
        for block in &self.dictionaries {
            let (whole, pad) = self.read_block(block, None)?;
            let data = whole.slice(pad);
            guarded(&self.path, || decoder.read_dictionary(block, &data))?;
        }
        Ok(Batches { trace: self, decoder, next: 0, base: 0, last: None })
    }

    /// The bytes of `block` (its message and body), read into `spare` when it is large enough
    /// (a buffer of the previous batch, which nothing holds any more), else into a new buffer.
    /// Returns the buffer and where the block starts in it: the buffer starts `pad` bytes
    /// before the block, so that the block's offset modulo 64 is the file's (the body's
    /// buffers are as aligned in memory as in the file, and the decoder copies none of them).
    fn read_block(&self, block: &Block, spare: Option<MutableBuffer>) -> Result<(Buffer, usize)> {
        let offset = block.offset() as u64;
        let pad = (offset % 64) as usize;
        let len = pad + block_len(block);
        let mut buf = match spare {
            // Its bytes are all initialized: truncating or growing (zero-filled) keeps them so.
            Some(mut b) if b.capacity() >= len => {
                if b.len() >= len {
                    b.truncate(len);
                } else {
                    b.resize(len, 0);
                }
                b
            }
            // Zeroed by the allocator: fresh pages, not written twice.
            _ => MutableBuffer::from_len_zeroed(len),
        };
        read_exact_at(&self.file, &self.path, self.len, buf.as_slice_mut(), offset - pad as u64)?;
        Ok((buf.into(), pad))
    }
}

/// One pass over a [`MappedTrace`]'s batches (see [`MappedTrace::batches`]).
pub struct Batches<'t> {
    trace: &'t MappedTrace,
    decoder: FileDecoder,
    next: usize,
    base: usize,
    /// The buffer the previous batch was read into, for the next one once the caller has
    /// dropped that batch.
    last: Option<Buffer>,
}

impl Iterator for Batches<'_> {
    type Item = Result<(usize, RecordBatch)>;

    fn next(&mut self) -> Option<Self::Item> {
        let t = self.trace;
        let block = t.blocks.get(self.next)?;
        self.next += 1;
        // The previous batch's buffer, when the caller no longer holds that batch: a pass then
        // holds one batch's bytes, and reads into pages it has already faulted in.
        let spare = self.last.take().and_then(|b| b.into_mutable().ok());
        let decoded = t.read_block(block, spare).and_then(|(whole, pad)| {
            let data = whole.slice(pad);
            self.last = Some(whole);
            let b = guarded(&t.path, || self.decoder.read_record_batch(block, &data))?;
            let batch = b.ok_or_else(|| Error::format(&t.path, "corrupt Arrow record batch: an empty message"))?;
            checked_batch(batch, &t.schema, t.rows, &t.path)
        });
        let base = self.base;
        Some(decoded.map(|batch| {
            self.base += batch.num_rows();
            (base, batch)
        }))
    }
}

use arrow_array::RecordBatch;

fn block_len(block: &Block) -> usize {
    block.metaDataLength() as usize + block.bodyLength() as usize
}

/// Decoding the checked file still must not reach the user as a panic (as `read_arrow_bytes`).
fn guarded<T>(path: &Path, f: impl FnOnce() -> std::result::Result<T, arrow_schema::ArrowError>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::format(path, format!("corrupt Arrow record batch: {e}"))),
        Err(_) => Err(Error::format(path, "corrupt Arrow IPC file: the Arrow reader failed on it")),
    }
}

/// The rows of the record batch whose block's message is `meta` (the first
/// `metaDataLength` bytes of the block, whose bounds `check_ipc_bounds_with` has checked).
fn block_rows(meta: &[u8]) -> Option<u64> {
    let mut m = meta;
    if m[..4] == [0xff; 4] {
        m = &m[4..];
    }
    let len = i32::from_le_bytes(m[..4].try_into().ok()?) as usize;
    let msg = arrow_ipc::root_as_message(m.get(4..4 + len)?).ok()?;
    u64::try_from(msg.header_as_record_batch()?.length()).ok()
}
