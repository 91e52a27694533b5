//! `tile`: a long trace made of a real one repeated, for benchmarks (`allocreplay synth --tile`).

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::Array;

use std::path::Path;

use super::{Action, Columns, EventRow, Trace, TraceBuilder, TraceFileWriter};
use crate::error::{Error, Result};

/// `trace` repeated `n` times: repetition `k` has allocation ids shifted by `k` x (the largest
/// id + 1), so they stay dense and never pair with another repetition's frees; addresses
/// shifted by `k` x the span of the trace's addresses (rounded up to 1 GiB), so repetitions
/// never overlap; times shifted past the previous repetition's last event. Seeds of a truncated
/// history stay seeds only in the first repetition. Optional columns are dropped.
pub fn tile(trace: &Trace, n: usize) -> Result<Trace> {
    let t = Tiler::new(trace, n)?;
    let mut b = TraceBuilder::with_capacity(t.total);
    for k in 0..n as u64 {
        for i in 0..t.events {
            b.push(&t.row(k, i)?);
        }
    }
    b.finish(trace.metadata.clone(), trace.frames.clone())
}

/// [`tile`] written to `path` as it is made, `batch_rows` events a record batch, so that a
/// tile of any length takes the memory of one batch (a 100 M-event benchmark trace: issue
/// #12). The number of events written.
pub fn tile_to_file(trace: &Trace, n: usize, path: &Path, batch_rows: usize) -> Result<u64> {
    let t = Tiler::new(trace, n)?;
    let batch_rows = batch_rows.max(1);
    let mut writer: Option<TraceFileWriter> = None;
    let mut b = TraceBuilder::with_capacity(batch_rows.min(t.total));
    let flush = |b: TraceBuilder, writer: &mut Option<TraceFileWriter>| -> Result<()> {
        let part = b.finish(trace.metadata.clone(), trace.frames.clone())?;
        if writer.is_none() {
            *writer = Some(TraceFileWriter::create(path, &part.schema())?);
        }
        writer.as_mut().expect("created above").write(part.batch())
    };
    for k in 0..n as u64 {
        for i in 0..t.events {
            b.push(&t.row(k, i)?);
            if b.len() == batch_rows {
                flush(std::mem::replace(&mut b, TraceBuilder::with_capacity(batch_rows)), &mut writer)?;
            }
        }
    }
    // The rest; an empty trace still gets its one (empty) batch, as `write_arrow` writes it.
    if !b.is_empty() || writer.is_none() {
        flush(b, &mut writer)?;
    }
    writer.expect("written above").finish()
}

/// What [`tile`] adds to repetition `k`'s ids, addresses and times.
struct Tiler<'a> {
    c: Columns<'a>,
    stack: Option<&'a arrow_array::PrimitiveArray<UInt32Type>>,
    events: usize,
    total: usize,
    id_step: u64,
    addr_step: u64,
    time_step: i64,
}

impl<'a> Tiler<'a> {
    fn new(trace: &'a Trace, n: usize) -> Result<Self> {
        if n == 0 {
            return Err(Error::InvalidArgument("tile: the number of repetitions must be at least 1".into()));
        }
        let c = trace.columns();
        let events = trace.num_events();
        let id_step = c.alloc_id.iter().copied().max().map_or(1, |m| m + 1);
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for i in 0..events {
            if c.addr.is_valid(i) {
                let a = c.addr.value(i);
                lo = lo.min(a);
                hi = hi.max(a.saturating_add(c.size[i]));
            }
        }
        let addr_step = if lo > hi { 0 } else { (hi - lo).div_ceil(1 << 30).max(1) << 30 };
        let times: Vec<i64> = c.time_ns.iter().flatten().collect();
        let time_step = match (times.iter().min(), times.iter().max()) {
            (Some(a), Some(b)) => b - a + 1,
            _ => 0,
        };
        let total = events
            .checked_mul(n)
            .filter(|t| (*t as u64) < u64::MAX / 2)
            .ok_or_else(|| Error::InvalidArgument(format!("tile: {n} x {events} events is too many")))?;
        let stack = trace.column("stack_id").and_then(|s| s.as_primitive_opt::<UInt32Type>());
        Ok(Tiler { c, stack, events, total, id_step, addr_step, time_step })
    }

    /// Event `i` of repetition `k`.
    #[inline]
    fn row(&self, k: u64, i: usize) -> Result<EventRow> {
        let (c, stack) = (&self.c, self.stack);
        let action =
            Action::from_code(c.action[i]).ok_or_else(|| Error::Replay(format!("event {i}: unknown action code {}", c.action[i])))?;
        Ok(EventRow {
            action,
            alloc_id: c.alloc_id_valid(i).then(|| c.alloc_id[i] + k * self.id_step),
            size: c.size[i],
            addr: c.addr.is_valid(i).then(|| c.addr.value(i) + k * self.addr_step),
            stream: c.stream[i],
            device: c.device[i],
            pool: c.pool[i],
            time_ns: c.time_ns.is_valid(i).then(|| c.time_ns.value(i) + k as i64 * self.time_step),
            seed: k == 0 && c.seed.value(i),
            stack_id: stack.and_then(|s| s.is_valid(i).then(|| s.value(i))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{replay, ReplayRequest};
    use crate::trace::{FrameTable, TraceMetadata};

    fn small() -> Trace {
        // alloc 0 (1 MiB at 0x1000_0000), alloc 1, free 0, (alloc 1 stays live).
        let mut b = TraceBuilder::default();
        let ev =
            |action, id, size, addr, t| EventRow { alloc_id: Some(id), addr: Some(addr), time_ns: Some(t), ..EventRow::new(action, size) };
        b.push(&ev(Action::Alloc, 0, 1 << 20, 0x1000_0000, 10));
        b.push(&ev(Action::Alloc, 1, 3 << 20, 0x1010_0000, 20));
        b.push(&ev(Action::FreeCompleted, 0, 1 << 20, 0x1000_0000, 30));
        b.finish(TraceMetadata::new("pytorch"), FrameTable::default()).unwrap()
    }

    #[test]
    fn repetitions_get_fresh_ids_addresses_and_times() {
        let t = tile(&small(), 3).unwrap();
        assert_eq!(t.num_events(), 9);
        let c = t.columns();
        assert_eq!(c.alloc_id, &[0, 1, 0, 2, 3, 2, 4, 5, 4]);
        assert_eq!(c.addr.value(3), 0x1000_0000 + (1 << 30));
        assert_eq!(c.addr.value(7), 0x1010_0000 + (2 << 30));
        assert_eq!(c.time_ns.value(3), 10 + 21);
        // Each repetition leaves its 3 MiB allocation live: the live peak grows by 3 MiB each time.
        let runs = replay(&t, &ReplayRequest { policies: vec!["ideal".into()], ..Default::default() }).unwrap();
        assert_eq!(runs[0].replay.stats.peak_allocated, (1 << 20) + 3 * (3 << 20));
        assert!(tile(&small(), 0).is_err());
    }
}
