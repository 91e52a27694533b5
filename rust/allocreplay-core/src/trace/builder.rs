//! Row-at-a-time construction of a trace by importers.

use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{ArrayRef, ArrowPrimitiveType, BooleanArray, DictionaryArray, PrimitiveArray, StringArray, UInt8Array};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer, NullBufferBuilder, ScalarBuffer};
use arrow_schema::Field;
use std::mem::MaybeUninit;
use std::sync::Arc;

use super::{Action, FrameTable, Trace, TraceMetadata};
use crate::error::{Error, Result};
use crate::huge_pages;

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
/// prefaulted (`crate::prefault`). The columns of a large trace are advised to be huge pages
/// (`crate::huge_pages`): on the GPU host a load of the large captures took 5-10% less time.
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
            action: huge_pages::with_capacity(n),
            alloc_id: huge_pages::with_capacity(n),
            alloc_id_nulls: NullBufferBuilder::new(n),
            size: huge_pages::with_capacity(n),
            addr: huge_pages::with_capacity(n),
            addr_nulls: NullBufferBuilder::new(n),
            stream: huge_pages::with_capacity(n),
            device: huge_pages::with_capacity(n),
            pool: huge_pages::with_capacity(n),
            time_ns: huge_pages::with_capacity(n),
            time_ns_nulls: NullBufferBuilder::new(n),
            seed: BooleanBufferBuilder::new(n),
            stack_id: huge_pages::with_capacity(n),
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

    /// Pushes `counts.iter().sum()` rows written on as many threads as `counts` has parts:
    /// `fill(k, writer)` pushes part `k`'s `counts[k]` rows in order, and the parts follow one
    /// another as if one thread had pushed them all with [`TraceBuilder::push`] (the same
    /// columns and null masks). Each part writes straight into the columns' spare capacity.
    ///
    /// Panics (before any row is added) if a part pushes more or fewer rows than its count.
    pub(crate) fn push_parallel(&mut self, counts: &[usize], fill: impl Fn(usize, &mut RowWriter<'_>) + Sync) {
        let total: usize = counts.iter().sum();
        let mut parts = RowWriter::parts(self, total, counts);
        let fill = &fill;
        std::thread::scope(|s| {
            let mut workers = Vec::with_capacity(parts.len());
            let mut own = None;
            for (k, w) in parts.iter_mut().enumerate() {
                if k == 0 {
                    own = Some(w);
                } else {
                    workers.push(s.spawn(move || fill(k, w)));
                }
            }
            if let Some(w) = own {
                fill(0, w);
            }
            workers.into_iter().for_each(crate::cores::joined);
        });
        for (k, w) in parts.iter().enumerate() {
            assert_eq!(w.at, counts[k], "push_parallel: part {k} pushed {} rows of {}", w.at, counts[k]);
        }
        let valid: Vec<[BooleanBufferBuilder; 5]> = parts.into_iter().map(|w| w.valid).collect();
        let n = self.action.len() + total;
        // SAFETY: every part wrote each of its rows' slots in every column (`RowWriter::push`
        // writes them all, and each part pushed exactly its count, checked above); the parts
        // cover the `total` slots past each column's length.
        unsafe {
            self.action.set_len(n);
            self.alloc_id.set_len(n);
            self.size.set_len(n);
            self.addr.set_len(n);
            self.stream.set_len(n);
            self.device.set_len(n);
            self.pool.set_len(n);
            self.time_ns.set_len(n);
            self.stack_id.set_len(n);
        }
        for [mut alloc_id, mut addr, mut time_ns, mut stack_id, mut seed] in valid {
            self.alloc_id_nulls.append_buffer(&NullBuffer::new(alloc_id.finish()));
            self.addr_nulls.append_buffer(&NullBuffer::new(addr.finish()));
            self.time_ns_nulls.append_buffer(&NullBuffer::new(time_ns.finish()));
            self.stack_id_nulls.append_buffer(&NullBuffer::new(stack_id.finish()));
            self.seed.append_buffer(&seed.finish());
        }
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

/// One part of [`TraceBuilder::push_parallel`]: its rows' slots in each column, and the null
/// masks of its rows (appended to the builder's once every part is done).
pub(crate) struct RowWriter<'a> {
    at: usize,
    action: &'a mut [MaybeUninit<u8>],
    alloc_id: &'a mut [MaybeUninit<u64>],
    size: &'a mut [MaybeUninit<u64>],
    addr: &'a mut [MaybeUninit<u64>],
    stream: &'a mut [MaybeUninit<i64>],
    device: &'a mut [MaybeUninit<i32>],
    pool: &'a mut [MaybeUninit<u32>],
    time_ns: &'a mut [MaybeUninit<i64>],
    stack_id: &'a mut [MaybeUninit<u32>],
    /// alloc_id, addr, time_ns, stack_id valid; seed.
    valid: [BooleanBufferBuilder; 5],
}

/// `v`'s next `total` spare slots, cut into parts of `counts`.
fn spare_parts<'a, T>(v: &'a mut Vec<T>, total: usize, counts: &[usize]) -> Vec<&'a mut [MaybeUninit<T>]> {
    v.reserve(total);
    let mut rest = &mut v.spare_capacity_mut()[..total];
    counts
        .iter()
        .map(|&c| {
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(c);
            rest = tail;
            part
        })
        .collect()
}

impl<'a> RowWriter<'a> {
    fn parts(b: &'a mut TraceBuilder, total: usize, counts: &[usize]) -> Vec<RowWriter<'a>> {
        let mut action = spare_parts(&mut b.action, total, counts).into_iter();
        let mut alloc_id = spare_parts(&mut b.alloc_id, total, counts).into_iter();
        let mut size = spare_parts(&mut b.size, total, counts).into_iter();
        let mut addr = spare_parts(&mut b.addr, total, counts).into_iter();
        let mut stream = spare_parts(&mut b.stream, total, counts).into_iter();
        let mut device = spare_parts(&mut b.device, total, counts).into_iter();
        let mut pool = spare_parts(&mut b.pool, total, counts).into_iter();
        let mut time_ns = spare_parts(&mut b.time_ns, total, counts).into_iter();
        let mut stack_id = spare_parts(&mut b.stack_id, total, counts).into_iter();
        counts
            .iter()
            .map(|&c| RowWriter {
                at: 0,
                action: action.next().expect("a part per count"),
                alloc_id: alloc_id.next().expect("a part per count"),
                size: size.next().expect("a part per count"),
                addr: addr.next().expect("a part per count"),
                stream: stream.next().expect("a part per count"),
                device: device.next().expect("a part per count"),
                pool: pool.next().expect("a part per count"),
                time_ns: time_ns.next().expect("a part per count"),
                stack_id: stack_id.next().expect("a part per count"),
                valid: std::array::from_fn(|_| BooleanBufferBuilder::new(c)),
            })
            .collect()
    }

    /// [`TraceBuilder::push`] into this part's next row (panics past the part's count).
    #[inline]
    pub(crate) fn push(&mut self, e: &EventRow) {
        let i = self.at;
        self.action[i].write(e.action as u8);
        self.alloc_id[i].write(e.alloc_id.unwrap_or_default());
        self.size[i].write(e.size);
        self.addr[i].write(e.addr.unwrap_or_default());
        self.stream[i].write(e.stream);
        self.device[i].write(e.device);
        self.pool[i].write(e.pool);
        self.time_ns[i].write(e.time_ns.unwrap_or_default());
        self.stack_id[i].write(e.stack_id.unwrap_or_default());
        let [alloc_id, addr, time_ns, stack_id, seed] = &mut self.valid;
        alloc_id.append(e.alloc_id.is_some());
        addr.append(e.addr.is_some());
        time_ns.append(e.time_ns.is_some());
        stack_id.append(e.stack_id.is_some());
        seed.append(e.seed);
        self.at = i + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<EventRow> {
        // Every optional column null somewhere and set elsewhere, across the parts' seams.
        (0..1000u64)
            .map(|i| {
                let mut r = EventRow::new(if i % 3 == 0 { Action::Alloc } else { Action::FreeCompleted }, i * 512);
                r.alloc_id = (i % 5 != 0).then_some(i);
                r.addr = (i % 7 != 0).then_some(i << 20);
                r.stream = i as i64 % 3;
                r.device = 1;
                r.pool = (i % 4) as u32;
                r.time_ns = (i % 11 != 0).then_some(i as i64 * 1000);
                r.seed = i % 13 == 0;
                r.stack_id = (i % 2 == 0).then_some(i as u32 / 2);
                r
            })
            .collect()
    }

    fn finished(b: TraceBuilder) -> arrow_array::RecordBatch {
        b.finish(TraceMetadata::new("test"), FrameTable::default()).expect("trace").batch().clone()
    }

    #[test]
    fn rows_pushed_in_parallel_parts_equal_rows_pushed_one_by_one() {
        let rows = rows();
        for (head, counts) in [(0usize, vec![1000usize]), (3, vec![100, 0, 397, 64, 436]), (17, vec![1, 1, 1, 980])] {
            let mut one = TraceBuilder::with_capacity(8);
            let mut parallel = TraceBuilder::with_capacity(8);
            // Rows already there (seeds), then the parts.
            for r in &rows[..head] {
                one.push(r);
                parallel.push(r);
            }
            for r in &rows[head..] {
                one.push(r);
            }
            let rest = &rows[head..];
            let starts: Vec<usize> = counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
            assert_eq!(counts.iter().sum::<usize>() + head, rows.len());
            parallel.push_parallel(&counts, |k, w| {
                for r in &rest[starts[k]..starts[k] + counts[k]] {
                    w.push(r);
                }
            });
            let (one, parallel) = (finished(one), finished(parallel));
            assert_eq!(one, parallel, "parts {counts:?} after {head} rows");
            // The masks alike too (a column without nulls has none).
            for (a, b) in one.columns().iter().zip(parallel.columns()) {
                assert_eq!(a.nulls(), b.nulls(), "parts {counts:?} after {head} rows");
            }
        }
    }

    #[test]
    #[should_panic(expected = "pushed 2 rows of 3")]
    fn a_part_that_pushes_too_few_rows_is_refused() {
        let mut b = TraceBuilder::with_capacity(8);
        b.push_parallel(&[2, 3], |_, w| {
            w.push(&EventRow::new(Action::Alloc, 512));
            w.push(&EventRow::new(Action::Alloc, 512));
        });
    }
}
