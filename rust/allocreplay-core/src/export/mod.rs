//! The simulated allocator's history as PyTorch records it (`device_traces` of
//! `torch.cuda.memory._snapshot()`): the requests with the addresses the policy chose, and the
//! device allocations it made, in order. `allocreplay export-snapshot` pickles this table with
//! the final segments ([`crate::analysis::blocks_batch`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use crate::analysis::State;
use crate::trace::{Action, Trace};

/// One row per history entry of every state (each replayed to the end with `history`):
/// `device`, `action` (PyTorch's trace-entry action names), `addr`, `size`, `stream`,
/// `time_ns`, `stack_id`, `alloc_id`. As `DeviceCachingAllocator::malloc` records them, the
/// `segment_alloc` / `segment_map` a request caused precede its `alloc`; a request the policy
/// failed is an `oom` entry (with `addr` 0: no free-memory figure is simulated).
pub fn history_batch(trace: &Trace, states: &[State]) -> RecordBatch {
    let c = trace.columns();
    let stack = trace.column("stack_id").and_then(|s| s.as_any().downcast_ref::<arrow_array::UInt32Array>());
    let mut device = Int32Builder::new();
    let mut action = StringBuilder::new();
    let (mut addr, mut size, mut id) = (UInt64Builder::new(), UInt64Builder::new(), UInt64Builder::new());
    let (mut stream, mut time) = (Int64Builder::new(), Int64Builder::new());
    let mut stack_id = UInt32Builder::new();
    for s in states {
        let placed: HashMap<u64, u64> = s.placements.iter().map(|p| (p.id, p.placement.addr)).collect();
        // Device events in the order made, each stamped with the trace event that caused it.
        let mut dev_events = s.device_events.iter().peekable();
        for i in 0..=s.event.min(trace.num_events().saturating_sub(1)) {
            if c.device[i] != s.device {
                continue;
            }
            let t = c.time_ns.is_valid(i).then(|| c.time_ns.value(i));
            let st = stack.filter(|a| a.is_valid(i)).map(|a| a.value(i));
            while let Some(e) = dev_events.next_if(|e| e.event <= i) {
                device.append_value(s.device);
                action.append_value(e.action.as_str());
                addr.append_value(e.addr);
                size.append_value(e.size);
                stream.append_value(c.stream[i]);
                time.append_option(t);
                stack_id.append_option(st);
                id.append_null();
            }
            let Some(a) = Action::from_code(c.action[i]) else { continue };
            let key = c.alloc_id[i];
            let (name, at) = match a {
                Action::Alloc => match placed.get(&key) {
                    Some(&p) => ("alloc", p),
                    None => ("oom", 0),
                },
                Action::FreeRequested | Action::FreeCompleted if c.alloc_id_valid(i) => match placed.get(&key) {
                    Some(&p) => (a.as_str(), p),
                    None => continue,
                },
                // A recorded OOM the policy failed too (one it served was handed straight back).
                Action::Oom if s.first_oom.as_ref().is_some_and(|o| o.event == i) => ("oom", 0),
                _ => continue,
            };
            device.append_value(s.device);
            action.append_value(name);
            addr.append_value(at);
            size.append_value(c.size[i]);
            stream.append_value(c.stream[i]);
            time.append_option(t);
            stack_id.append_option(st);
            id.append_option((name != "oom" && c.alloc_id_valid(i)).then_some(key));
        }
    }
    let fields = vec![
        Field::new("device", DataType::Int32, false),
        Field::new("action", DataType::Utf8, false),
        Field::new("addr", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("stream", DataType::Int64, false),
        Field::new("time_ns", DataType::Int64, true),
        Field::new("stack_id", DataType::UInt32, true),
        Field::new("alloc_id", DataType::UInt64, true),
    ];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(device.finish()),
        Arc::new(action.finish()),
        Arc::new(addr.finish()),
        Arc::new(size.finish()),
        Arc::new(stream.finish()),
        Arc::new(time.finish()),
        Arc::new(stack_id.finish()),
        Arc::new(id.finish()),
    ];
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("columns match their fields")
}
