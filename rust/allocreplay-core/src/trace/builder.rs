//! Row-at-a-time construction of a trace by importers.

use arrow_array::builder::{BooleanBuilder, Int32Builder, Int64Builder, UInt32Builder, UInt64Builder};
use arrow_array::types::UInt8Type;
use arrow_array::{ArrayRef, DictionaryArray, StringArray, UInt8Array};
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

#[derive(Default)]
pub struct TraceBuilder {
    action: Vec<u8>,
    alloc_id: UInt64Builder,
    size: UInt64Builder,
    addr: UInt64Builder,
    stream: Int64Builder,
    device: Int32Builder,
    pool: UInt32Builder,
    time_ns: Int64Builder,
    seed: BooleanBuilder,
    stack_id: UInt32Builder,
    extra: Vec<(Field, ArrayRef)>,
}

impl TraceBuilder {
    pub fn with_capacity(n: usize) -> Self {
        TraceBuilder {
            action: Vec::with_capacity(n),
            alloc_id: UInt64Builder::with_capacity(n),
            size: UInt64Builder::with_capacity(n),
            addr: UInt64Builder::with_capacity(n),
            stream: Int64Builder::with_capacity(n),
            device: Int32Builder::with_capacity(n),
            pool: UInt32Builder::with_capacity(n),
            time_ns: Int64Builder::with_capacity(n),
            seed: BooleanBuilder::with_capacity(n),
            stack_id: UInt32Builder::with_capacity(n),
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
        self.action.push(e.action as u8);
        self.alloc_id.append_option(e.alloc_id);
        self.size.append_value(e.size);
        self.addr.append_option(e.addr);
        self.stream.append_value(e.stream);
        self.device.append_value(e.device);
        self.pool.append_value(e.pool);
        self.time_ns.append_option(e.time_ns);
        self.seed.append_value(e.seed);
        self.stack_id.append_option(e.stack_id);
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
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(action),
            Arc::new(self.alloc_id.finish()),
            Arc::new(self.size.finish()),
            Arc::new(self.addr.finish()),
            Arc::new(self.stream.finish()),
            Arc::new(self.device.finish()),
            Arc::new(self.pool.finish()),
            Arc::new(self.time_ns.finish()),
            Arc::new(self.seed.finish()),
            Arc::new(self.stack_id.finish()),
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
