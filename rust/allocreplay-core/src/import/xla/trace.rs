//! An XLA dump as a trace: the temps of every compiled program (what `allocreplay load` /
//! `replay` read from an `--xla_dump_to` directory).

use std::collections::HashMap;

use super::{HeapEventKind, XlaProgram};
use crate::error::Result;
use crate::trace::{Action, EventRow, FrameTable, Trace, TraceBuilder, TraceMetadata};

pub(crate) fn metadata(programs: &[XlaProgram], dir: &std::path::Path) -> TraceMetadata {
    let mut m = TraceMetadata::new("xla");
    m.source_path = Some(dir.display().to_string());
    m.devices = vec![crate::trace::DeviceInfo { index: 0, ..Default::default() }];
    m.extra.insert("programs".into(), programs.iter().map(|p| serde_json::Value::from(p.program.clone())).collect());
    m
}

/// The temps of each program as a trace: each heap-planned value becomes an `alloc` when the
/// heap trace allocates it and a `free_completed` when its buffer is released (a value that
/// shares its operand's buffer, SHARE_WITH, adds no allocation: the buffer is freed once its
/// last sharer is), in schedule order; a temp with an allocation of its own (tuple tables)
/// lives for the whole program. `size` is the value's chunk size, `addr` its recorded offset
/// in the preallocated-temp allocation, `time_ns` the schedule step (from -live-range.txt;
/// null when the dump has none), `program` the program's name. Programs follow one another.
pub fn programs_trace(programs: &[XlaProgram], dir: &std::path::Path) -> Result<Trace> {
    let mut b = TraceBuilder::with_capacity(1024);
    let mut names: Vec<Option<String>> = Vec::new();
    let mut next_id = 0u64;
    let push = |b: &mut TraceBuilder, names: &mut Vec<Option<String>>, r: EventRow, prog: &str| {
        b.push(&r);
        names.push(Some(prog.to_string()));
    };
    for p in programs {
        let recorded: HashMap<u32, (i64, i64)> = p
            .allocations
            .iter()
            .filter(|a| a.is_preallocated_temp())
            .flat_map(|a| a.assigned.iter().map(|&(v, o, s)| (v, (o, s))))
            .collect();
        let step = |v: u32, start: bool| -> Option<i64> { p.values[v as usize].live.map(|(s, e)| if start { s } else { e }) };
        let mut heap_values = vec![false; p.values.len()];
        for events in &p.heap_traces {
            for e in events {
                heap_values[e.value as usize] = true;
            }
        }
        // Temps with allocations of their own: live for the whole program.
        let own: Vec<u32> = recorded.keys().copied().filter(|&v| !heap_values[v as usize]).collect();
        let mut own = own;
        own.sort_unstable();
        let mut own_ids = Vec::new();
        for &v in &own {
            let (off, size) = recorded[&v];
            let mut r = EventRow::new(Action::Alloc, size.max(0) as u64);
            r.alloc_id = Some(next_id);
            r.addr = Some(off.max(0) as u64);
            r.time_ns = p.schedule_end.map(|_| 0);
            own_ids.push((next_id, size, off));
            next_id += 1;
            push(&mut b, &mut names, r, &p.program);
        }
        for events in &p.heap_traces {
            // Canonical buffer of each value, live sharers per canonical, alloc id.
            let mut canonical: HashMap<u32, u32> = HashMap::new();
            let mut refs: HashMap<u32, u32> = HashMap::new();
            let mut id_of: HashMap<u32, u64> = HashMap::new();
            for e in events {
                match e.kind {
                    HeapEventKind::Alloc => {
                        canonical.insert(e.value, e.value);
                        refs.insert(e.value, 1);
                        let (off, size) = recorded.get(&e.value).copied().unwrap_or((0, p.values[e.value as usize].size));
                        let mut r = EventRow::new(Action::Alloc, size.max(0) as u64);
                        r.alloc_id = Some(next_id);
                        r.addr = Some(off.max(0) as u64);
                        r.time_ns = step(e.value, true);
                        id_of.insert(e.value, next_id);
                        next_id += 1;
                        push(&mut b, &mut names, r, &p.program);
                    }
                    HeapEventKind::ShareWith => {
                        let c = canonical.get(&e.share_with).copied().unwrap_or(e.share_with);
                        canonical.insert(e.value, c);
                        *refs.entry(c).or_insert(0) += 1;
                    }
                    HeapEventKind::Free => {
                        let c = canonical.get(&e.value).copied().unwrap_or(e.value);
                        let left = refs.entry(c).or_insert(1);
                        *left = left.saturating_sub(1);
                        if *left == 0 {
                            if let Some(id) = id_of.remove(&c) {
                                let size = recorded.get(&c).map(|x| x.1).unwrap_or(p.values[c as usize].size);
                                let mut r = EventRow::new(Action::FreeCompleted, size.max(0) as u64);
                                r.alloc_id = Some(id);
                                r.addr = recorded.get(&c).map(|x| x.0.max(0) as u64);
                                r.time_ns = step(e.value, false);
                                push(&mut b, &mut names, r, &p.program);
                            }
                        }
                    }
                }
            }
        }
        for (id, size, off) in own_ids {
            let mut r = EventRow::new(Action::FreeCompleted, size.max(0) as u64);
            r.alloc_id = Some(id);
            r.addr = Some(off.max(0) as u64);
            r.time_ns = p.schedule_end;
            push(&mut b, &mut names, r, &p.program);
        }
    }
    add_program_column(&mut b, names);
    b.finish(metadata(programs, dir), FrameTable::default())
}

pub(crate) fn add_program_column(b: &mut TraceBuilder, names: Vec<Option<String>>) {
    let field = crate::trace::schema::optional_field("program").expect("program is an optional column");
    b.add_column(field, std::sync::Arc::new(arrow_array::StringArray::from(names)));
}
