//! Row-at-a-time construction of a trace by importers.

use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{ArrayRef, ArrowPrimitiveType, BooleanArray, DictionaryArray, PrimitiveArray, StringArray, UInt8Array};
use arrow_buffer::{BooleanBufferBuilder, NullBufferBuilder, ScalarBuffer};
use arrow_schema::Field;
use std::sync::Arc;

use super::{Action, FrameTable, Trace, TraceMetadata};
use crate::error::{Error, Result};

/// One event, as an importer sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EventRow {
    pub action: Action,
    pub alloc_id: Option<u64>,
    pub size: u64,
    pub addr: Option<u64>,
    pub stream: i64,
    pub device: i32,
    pub pool: u32,
    pub time_ns: Option<i64>,
    pub seed: bool,
    pub stack_id: Option<u32>,
}

impl EventRow {
    pub fn new(action: Action, size: u64) -> Self {
        EventRow { action, alloc_id: None, size, addr: None, stream: 0, device: 0, pool: 0, time_ns: None, seed: false, stack_id: None }
    }
}

/// The columns as plain vectors (with the null masks of the optional ones), made Arrow arrays
/// without a copy at [`TraceBuilder::finish`]. Arrow's builders allocate 64-byte aligned
/// buffers, which a reallocation copies (the system allocator has no in-place `realloc` for
/// that alignment): an importer pushing a few rows past its estimate copied every column. A
/// vector grows in place (`mremap`), its pushes are cheaper, and its spare capacity can be
/// prefaulted (`crate::prefault`).
pub struct TraceBuilder {
    action: Vec<u8>,
    alloc_id: Vec<u64>,
    alloc_id_nulls: NullBufferBuilder,
    size: Vec<u64>,
    addr: Vec<u64>,
    addr_nulls: NullBufferBuilder,
    stream: Vec<i64>,
    device: Vec<i32>,
    pool: Vec<u32>,
    time_ns: Vec<i64>,
    time_ns_nulls: NullBufferBuilder,
    seed: BooleanBufferBuilder,
    stack_id: Vec<u32>,
    stack_id_nulls: NullBufferBuilder,
    extra: Vec<(Field, ArrayRef)>,
}

impl Default for TraceBuilder {
    fn default() -> Self {
        TraceBuilder::with_capacity(0)
    }
}

impl TraceBuilder {
    pub fn with_capacity(n: usize) -> Self {
        TraceBuilder {
            action: Vec::with_capacity(n),
            alloc_id: Vec::with_capacity(n),
            alloc_id_nulls: NullBufferBuilder::new(n),
            size: Vec::with_capacity(n),
            addr: Vec::with_capacity(n),
            addr_nulls: NullBufferBuilder::new(n),
            stream: Vec::with_capacity(n),
            device: Vec::with_capacity(n),
            pool: Vec::with_capacity(n),
            time_ns: Vec::with_capacity(n),
            time_ns_nulls: NullBufferBuilder::new(n),
            seed: BooleanBufferBuilder::new(n),
            stack_id: Vec::with_capacity(n),
            stack_id_nulls: NullBufferBuilder::new(n),
            extra: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.action.len()
    }

    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    #[inline]
    pub fn push(&mut self, e: &EventRow) {
        #[inline(always)]
        fn opt<T: Default>(values: &mut Vec<T>, nulls: &mut NullBufferBuilder, v: Option<T>) {
            nulls.append(v.is_some());
            values.push(v.unwrap_or_default());
        }
        self.action.push(e.action as u8);
        opt(&mut self.alloc_id, &mut self.alloc_id_nulls, e.alloc_id);
        self.size.push(e.size);
        opt(&mut self.addr, &mut self.addr_nulls, e.addr);
        self.stream.push(e.stream);
        self.device.push(e.device);
        self.pool.push(e.pool);
        opt(&mut self.time_ns, &mut self.time_ns_nulls, e.time_ns);
        self.seed.append(e.seed);
        opt(&mut self.stack_id, &mut self.stack_id_nulls, e.stack_id);
    }

    /// Hands the value vectors' spare capacity to `pf`'s thread to populate, in slots `first`
    /// to `first + 7` (the null masks and flags, an eighth of a byte per row, are left alone).
    pub(crate) fn prefault(&self, pf: &crate::prefault::Prefaulter, first: usize) {
        pf.ahead(first, &self.alloc_id, usize::MAX);
        pf.ahead(first + 1, &self.size, usize::MAX);
        pf.ahead(first + 2, &self.addr, usize::MAX);
        pf.ahead(first + 3, &self.stream, usize::MAX);
        pf.ahead(first + 4, &self.time_ns, usize::MAX);
        pf.ahead(first + 5, &self.device, usize::MAX);
        pf.ahead(first + 6, &self.pool, usize::MAX);
        pf.ahead(first + 7, &self.stack_id, usize::MAX);
    }

    /// Adds an optional column (see `schema::optional_field`); it must have one value per
    /// event pushed, checked at `finish`.
    pub fn add_column(&mut self, field: Field, values: ArrayRef) {
        self.extra.push((field, values));
    }

    pub fn finish(mut self, metadata: TraceMetadata, frames: FrameTable) -> Result<Trace> {
        let n = self.action.len();
        let keys = UInt8Array::from(std::mem::take(&mut self.action));
        let values = StringArray::from(Action::ALL.iter().map(|a| a.as_str()).collect::<Vec<_>>());
        let action = DictionaryArray::<UInt8Type>::try_new(keys, Arc::new(values))
            .map_err(|e| Error::Replay(format!("building action column: {e}")))?;
        fn prim<T: ArrowPrimitiveType>(values: Vec<T::Native>, mut nulls: NullBufferBuilder) -> ArrayRef {
            Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls.finish()))
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(action),
            prim::<UInt64Type>(self.alloc_id, self.alloc_id_nulls),
            prim::<UInt64Type>(self.size, NullBufferBuilder::new(0)),
            prim::<UInt64Type>(self.addr, self.addr_nulls),
            prim::<Int64Type>(self.stream, NullBufferBuilder::new(0)),
            prim::<Int32Type>(self.device, NullBufferBuilder::new(0)),
            prim::<UInt32Type>(self.pool, NullBufferBuilder::new(0)),
            prim::<Int64Type>(self.time_ns, self.time_ns_nulls),
            Arc::new(BooleanArray::new(self.seed.finish(), None)),
            prim::<UInt32Type>(self.stack_id, self.stack_id_nulls),
        ];
        let mut extra_fields = Vec::new();
        for (field, values) in self.extra {
            if values.len() != n {
                return Err(Error::Replay(format!("column {} has {} values for {} events", field.name(), values.len(), n)));
            }
            extra_fields.push(field);
            columns.push(values);
        }
        Trace::from_parts(metadata, frames, &extra_fields, columns)
    }
}
