//! `.arrow` traces streamed from a memory map, record batch after record batch, for traces too
//! large to hold in memory (issue #12: 100 M events within 2 GiB): nothing is read whole, the
//! batches are zero-copy views of the mapped file, and each pass over the file releases the
//! pages of a batch from the process once it has moved on (they stay in the page cache, shared
//! by every pass and every policy replayed).
//!
//! [`MappedTrace::open`] checks the file as `read_arrow` does (the IPC bounds before anything
//! is decoded, the schema, each batch's arrays) and makes one first pass over it: the events'
//! semantics (`trace::check`, strict, with state O(live allocations)), the trace's `info`, and
//! what a replay must know before its first event (largest allocation id, timeline requests per
//! device). A replay (`replay::replay_mapped`) then streams the batches again per policy.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_buffer::Buffer;
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::{Block, MetadataVersion};
use arrow_schema::SchemaRef;
use memmap2::{Mmap, UncheckedAdvice};

use super::check::{EventChecker, SparseIds};
use super::info::{InfoBuilder, TraceInfo};
use super::ipc::{check_ipc_bounds, checked_batch, trace_header};
use super::{Action, Columns, FrameTable, TraceMetadata};
use crate::error::{Error, Result};
use crate::trace::is_timeline_request;

/// An `.arrow` trace file opened for streaming (see the module's documentation).
#[derive(Debug)]
pub struct MappedTrace {
    path: PathBuf,
    /// Kept open: every pass maps this same file, even if the path is replaced meanwhile.
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

/// The file's bytes, owned by the buffers of the batches decoded from them.
struct SharedMap(Arc<Mmap>);

impl AsRef<[u8]> for SharedMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

fn map_file(file: &File, path: &Path) -> Result<Arc<Mmap>> {
    // SAFETY: the mapping is read-only; a file truncated by another process while it is mapped
    // would fault (SIGBUS), the one risk of reading by memory map, accepted as every mmap
    // reader does (our own writers replace files by rename, never in place).
    let map = unsafe { Mmap::map(file) }.map_err(|e| Error::io(path, e))?;
    // Read front to back: ask for read-ahead (advice only; a failure changes nothing).
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Arc::new(map))
}

impl MappedTrace {
    /// Opens and checks `path` (see the module's documentation); errors name the file.
    pub fn open(path: &Path) -> Result<MappedTrace> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len == 0 {
            return Err(Error::format(path, "file is empty"));
        }
        let len = usize::try_from(len).map_err(|_| Error::format(path, "the file is larger than this machine can map"))?;
        let map = map_file(&file, path)?;
        let bytes: &[u8] = &map;
        if !bytes.starts_with(b"ARROW1") {
            return Err(Error::format(path, crate::magic::not_arrow_message(bytes)));
        }
        check_ipc_bounds(bytes).map_err(|m| Error::format(path, format!("corrupt Arrow IPC file: {m}")))?;
        // The bounds check has parsed the footer and every block's message already: neither
        // can fail here any more, but a failure still is an error, never a panic.
        let corrupt = |m: String| Error::format(path, format!("corrupt Arrow IPC file: {m}"));
        let n = bytes.len();
        let footer_len = i32::from_le_bytes(bytes[n - 10..n - 6].try_into().expect("4 bytes")) as usize;
        let footer = arrow_ipc::root_as_footer(&bytes[n - 10 - footer_len..n - 10]).map_err(|e| corrupt(e.to_string()))?;
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
        let mut rows = 0u64;
        for (k, b) in blocks.iter().enumerate() {
            rows += block_rows(bytes, b).ok_or_else(|| corrupt(format!("block {k}: not a record batch")))?;
        }
        let mut t = MappedTrace {
            path: path.to_path_buf(),
            file,
            len,
            schema,
            version: footer.version(),
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
    /// as `read_arrow` checks a trace. Every pass maps the file anew, so that passes running
    /// side by side (one per policy) release their own pages only.
    pub fn batches(&self) -> Result<Batches<'_>> {
        let map = map_file(&self.file, &self.path)?;
        if map.len() != self.len {
            return Err(Error::format(&self.path, "the file changed while it was being read"));
        }
        let buffer = Buffer::from(bytes::Bytes::from_owner(SharedMap(map.clone())));
        let mut decoder = FileDecoder::new(self.schema.clone(), self.version);
        for block in &self.dictionaries {
            let data = block_data(&buffer, block);
            guarded(&self.path, || decoder.read_dictionary(block, &data))?;
        }
        Ok(Batches { trace: self, map, buffer, decoder, next: 0, base: 0 })
    }
}

/// One pass over a [`MappedTrace`]'s batches (see [`MappedTrace::batches`]).
pub struct Batches<'t> {
    trace: &'t MappedTrace,
    map: Arc<Mmap>,
    buffer: Buffer,
    decoder: FileDecoder,
    next: usize,
    base: usize,
}

impl Iterator for Batches<'_> {
    type Item = Result<(usize, RecordBatch)>;

    fn next(&mut self) -> Option<Self::Item> {
        let t = self.trace;
        if self.next > 0 {
            // The previous batch has been replayed: its pages leave this process (they stay in
            // the page cache), so that the resident memory of a pass is one batch, not the file.
            let prev = &t.blocks[self.next - 1];
            // SAFETY: a read-only file mapping: dropped pages read back from the file if a batch
            // still held by the caller touches them again.
            let _ = unsafe { self.map.unchecked_advise_range(UncheckedAdvice::DontNeed, prev.offset() as usize, block_len(prev)) };
        }
        let block = t.blocks.get(self.next)?;
        self.next += 1;
        let data = block_data(&self.buffer, block);
        let decoded = guarded(&t.path, || self.decoder.read_record_batch(block, &data)).and_then(|b| {
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

fn block_data(buffer: &Buffer, block: &Block) -> Buffer {
    buffer.slice_with_length(block.offset() as usize, block_len(block))
}

/// Decoding the checked file still must not reach the user as a panic (as `read_arrow_bytes`).
fn guarded<T>(path: &Path, f: impl FnOnce() -> std::result::Result<T, arrow_schema::ArrowError>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::format(path, format!("corrupt Arrow record batch: {e}"))),
        Err(_) => Err(Error::format(path, "corrupt Arrow IPC file: the Arrow reader failed on it")),
    }
}

/// The rows of the record batch in `block` (whose bounds `check_ipc_bounds` has checked).
fn block_rows(bytes: &[u8], block: &Block) -> Option<u64> {
    let (off, meta) = (block.offset() as usize, block.metaDataLength() as usize);
    let mut m = &bytes[off..off + meta];
    if m[..4] == [0xff; 4] {
        m = &m[4..];
    }
    let len = i32::from_le_bytes(m[..4].try_into().ok()?) as usize;
    let msg = arrow_ipc::root_as_message(&m[4..4 + len]).ok()?;
    u64::try_from(msg.header_as_record_batch()?.length()).ok()
}
