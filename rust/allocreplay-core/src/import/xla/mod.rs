//! XLA dump directories (`XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_proto
//! [--xla_dump_hlo_as_text]`): one program per `module_<id>.<name>.<platform>_after_optimizations`
//! prefix. From `<prefix>.hlo.pb` (an `HloProto`) we read the buffer assignment (logical
//! buffers, allocations with every value's offset, the heap-simulator traces) and the module's
//! computations (for the order `BufferAssigner` sorts buffers in); where there is no proto, from
//! `<prefix>-buffer-assignment.txt`. `<prefix>-live-range.txt` gives each value's live range in
//! schedule steps. See docs/xla-import.md.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use prost::Message;

use crate::error::{Error, Result};

pub mod proto;
pub mod trace;

const AFTER_OPT: &str = "_after_optimizations";

/// `(logical buffer id, offset, size)` of an allocation's assigned values, before ids are
/// resolved.
/// Live ranges in schedule steps by `instr{index}` name.
pub type LiveRanges = HashMap<String, (i64, i64)>;

/// Where a program's buffer assignment was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentSource {
    /// `.hlo.pb`: exact, with the heap-simulator trace.
    Proto,
    /// `-buffer-assignment.txt` (+ `-live-range.txt`): the heap trace is rebuilt from live
    /// ranges, in-place sharing guessed from offsets.
    Text,
}

/// One `HloValue` (a logical buffer).
#[derive(Debug, Clone, PartialEq)]
pub struct XlaValue {
    pub id: u64,
    /// `instruction{shape index}`, as `-live-range.txt` names it.
    pub name: String,
    pub size: i64,
    pub color: i64,
    /// Position of the defining instruction in the order `BufferAssigner` sorts buffers by
    /// (`ComparePosition`: computations callers-first, instructions in post order); the
    /// value id where the module is unknown.
    pub position: i64,
    /// Live range in schedule steps (inclusive), from `-live-range.txt`.
    pub live: Option<(i64, i64)>,
    /// Tuple-shaped (its own allocation, never heap-planned).
    pub is_tuple_shape: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct XlaAllocation {
    pub index: i64,
    pub size: i64,
    pub color: i64,
    pub is_thread_local: bool,
    pub is_entry_computation_parameter: bool,
    pub parameter_number: i64,
    pub maybe_live_out: bool,
    pub is_constant: bool,
    pub is_tuple: bool,
    /// (index into `values`, offset, size).
    pub assigned: Vec<(u32, i64, i64)>,
}

impl XlaAllocation {
    /// `BufferAllocation::IsPreallocatedTempBuffer`.
    pub fn is_preallocated_temp(&self) -> bool {
        !self.is_entry_computation_parameter && !self.maybe_live_out && !self.is_thread_local && !self.is_constant
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapEventKind {
    Alloc,
    Free,
    ShareWith,
}

/// One `HeapSimulatorTrace::Event`; ids are indices into `values`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapEvent {
    pub kind: HeapEventKind,
    pub value: u32,
    pub share_with: u32,
}

#[derive(Debug, Clone)]
pub struct XlaProgram {
    /// `module_<id>.<name>`, unique in a dump.
    pub program: String,
    pub module_name: String,
    /// `sm_9.0a_gpu`, `cpu`, ...
    pub platform: String,
    pub prefix: PathBuf,
    pub source: AssignmentSource,
    pub values: Vec<XlaValue>,
    pub allocations: Vec<XlaAllocation>,
    /// One trace per heap simulation (per color for whole-module simulation).
    pub heap_traces: Vec<Vec<HeapEvent>>,
    /// Last schedule step (`HloLiveRange (max T)`), when known.
    pub schedule_end: Option<i64>,
}

impl XlaProgram {
    /// The buffer alignment of the platform's buffer assigner (`color_alignment`): 256 bytes on
    /// GPU (xla/service/gpu: `kXlaAllocatedBufferAlignBytes`), 64 on CPU
    /// (`cpu_function_runtime::MinAlign`).
    pub fn alignment(&self) -> i64 {
        if self.platform.contains("cpu") {
            64
        } else {
            256
        }
    }

    pub fn value_index(&self) -> HashMap<u64, u32> {
        self.values.iter().enumerate().map(|(i, v)| (v.id, i as u32)).collect()
    }
}

/// The program prefixes of a dump directory, sorted by module id.
/// The files XLA dumps for an optimized program, after its prefix.
const PROGRAM_FILES: &[&str] = &[
    ".hlo.pb",
    "-buffer-assignment.txt",
    "-buffer-assignment-values.txt",
    "-live-range.txt",
    "-memory-usage-report.txt",
    "-memory-usage-report.pb",
    ".txt",
];

/// A text dump cut short (its last line has no newline; XLA ends every line).
fn check_complete(path: &Path, text: &str) -> Result<()> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(Error::format(path, "the file ends in the middle of a line: truncated dump"));
    }
    Ok(())
}

pub fn list_programs(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut prefixes: Vec<(u64, String)> = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("module_") {
            continue;
        }
        let Some(end) = name.find(AFTER_OPT) else { continue };
        let prefix = &name[..end + AFTER_OPT.len()];
        let rest = &name[end + AFTER_OPT.len()..];
        // Any of a program's dump files names it: a program whose buffer assignment is
        // missing is an error in `load_program`, not silently left out of the plan.
        if !PROGRAM_FILES.contains(&rest) {
            continue;
        }
        let id = prefix["module_".len()..].split('.').next().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
        if !prefixes.iter().any(|(_, p)| p == prefix) {
            prefixes.push((id, prefix.to_string()));
        }
    }
    prefixes.sort();
    if prefixes.is_empty() {
        return Err(Error::UnknownFormat {
            path: dir.to_path_buf(),
            message: "directory holds no XLA dump of an optimized program (module_*_after_optimizations.hlo.pb or -buffer-assignment.txt); dump with XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_proto".into(),
        });
    }
    Ok(prefixes.into_iter().map(|(_, p)| dir.join(p)).collect())
}

/// Loads every program of a dump directory.
pub fn load_dump(dir: &Path) -> Result<Vec<XlaProgram>> {
    list_programs(dir)?.iter().map(|p| load_program(p)).collect()
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Loads one program from its prefix (`DIR/module_<id>.<name>.<platform>_after_optimizations`).
pub fn load_program(prefix: &Path) -> Result<XlaProgram> {
    let base = prefix.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let stem = base.strip_suffix(AFTER_OPT).unwrap_or(&base);
    // module_<id>.<name>.<platform>: the platform is the last dot-separated part (names may
    // hold dots).
    let mut parts: Vec<&str> = stem.splitn(2, '.').collect();
    let module_part = parts.remove(0).to_string();
    let rest = parts.pop().unwrap_or_default();
    // The platform part may hold dots itself (`sm_9.0a_gpu`).
    let split = rest.find(".sm_").or_else(|| rest.rfind('.').filter(|&i| rest[i + 1..].contains("pu")));
    let (module_name, platform) = match split {
        Some(i) => (rest[..i].to_string(), rest[i + 1..].to_string()),
        None => (rest.to_string(), String::new()),
    };
    let pb = with_suffix(prefix, ".hlo.pb");
    let txt = with_suffix(prefix, "-buffer-assignment.txt");
    let mut program = if pb.is_file() {
        let raw = std::fs::read(&pb).map_err(|e| Error::io(&pb, e))?;
        parse_hlo_proto(&pb, &raw)?
    } else if txt.is_file() {
        let text = crate::import::read_text(&txt)?;
        parse_buffer_assignment_text(&txt, &text)?
    } else {
        return Err(Error::format(
            prefix,
            "neither .hlo.pb nor -buffer-assignment.txt exists for this program (its other dump files do): incomplete dump",
        ));
    };
    program.program = format!("{module_part}.{module_name}");
    program.module_name = module_name;
    program.platform = platform;
    program.prefix = prefix.to_path_buf();
    let lr = with_suffix(prefix, "-live-range.txt");
    if lr.is_file() {
        let text = crate::import::read_text(&lr)?;
        let (end, ranges) = parse_live_range_text(&lr, &text)?;
        program.schedule_end = Some(end);
        for v in &mut program.values {
            v.live = ranges.get(v.name.as_str()).copied();
        }
    }
    if program.source == AssignmentSource::Text {
        program.heap_traces = synthesize_heap_traces(&program);
    }
    Ok(program)
}

/// Parses an `HloProto` {hlo_module = 1, buffer_assignment = 3} (messages in [`proto`]).
pub fn parse_hlo_proto(path: &Path, data: &[u8]) -> Result<XlaProgram> {
    let hlo = proto::HloProto::decode(data).map_err(|e| Error::format(path, format!("not a valid HloProto: {e}")))?;
    let Some(ba) = hlo.buffer_assignment else {
        return Err(Error::format(
            path,
            "HloProto has no buffer_assignment (field 3): dump the optimized module (…_after_optimizations.hlo.pb)",
        ));
    };
    let (positions, names) = match &hlo.hlo_module {
        Some(m) => instruction_positions(m),
        None => (HashMap::new(), HashMap::new()),
    };
    let values: Vec<XlaValue> = ba.logical_buffers.iter().map(|b| logical_buffer(b, &positions, &names)).collect();
    let index: HashMap<u64, u32> = values.iter().enumerate().map(|(i, v)| (v.id, i as u32)).collect();
    let lookup = |id: i64, what: &str| -> Result<u32> {
        index
            .get(&(id as u64))
            .copied()
            .ok_or_else(|| Error::format(path, format!("{what} names logical buffer {id}, which the buffer assignment does not list")))
    };
    let mut allocations = Vec::with_capacity(ba.buffer_allocations.len());
    for a in &ba.buffer_allocations {
        let mut x = XlaAllocation {
            index: a.index,
            size: a.size,
            is_thread_local: a.is_thread_local,
            is_entry_computation_parameter: a.is_entry_computation_parameter,
            parameter_number: a.parameter_number,
            maybe_live_out: a.maybe_live_out,
            color: a.color,
            is_tuple: a.is_tuple,
            is_constant: a.is_constant,
            ..Default::default()
        };
        for s in &a.assigned {
            x.assigned.push((lookup(s.logical_buffer_id, "an allocation")?, s.offset, s.size));
        }
        allocations.push(x);
    }
    let mut heap_traces = Vec::with_capacity(ba.heap_simulator_traces.len());
    for t in &ba.heap_simulator_traces {
        let mut events = Vec::with_capacity(t.events.len());
        for e in &t.events {
            // HeapSimulatorTrace::Event::Kind.
            let kind = match e.kind {
                0 => HeapEventKind::Alloc,
                1 => HeapEventKind::Free,
                2 => HeapEventKind::ShareWith,
                k => return Err(Error::format(path, format!("heap-simulator event of unknown kind {k}"))),
            };
            let value = lookup(e.buffer_id, "a heap-simulator event")?;
            let share_with =
                if kind == HeapEventKind::ShareWith { lookup(e.share_with_canonical_id, "a SHARE_WITH event")? } else { u32::MAX };
            events.push(HeapEvent { kind, value, share_with });
        }
        heap_traces.push(events);
    }
    Ok(XlaProgram {
        program: String::new(),
        module_name: String::new(),
        platform: String::new(),
        prefix: PathBuf::new(),
        source: AssignmentSource::Proto,
        values,
        allocations,
        heap_traces,
        schedule_end: None,
    })
}

fn logical_buffer(b: &proto::LogicalBufferProto, positions: &HashMap<i64, i64>, names: &HashMap<i64, String>) -> XlaValue {
    let id = b.id as u64;
    let loc = b.defined_at.clone().unwrap_or_default();
    let mut instr_name = loc.instruction_name;
    if instr_name.is_empty() {
        // The deprecated instruction_name is no longer written: take it from the module.
        if let Some(n) = loc.instruction_id.and_then(|i| names.get(&i)) {
            instr_name = n.clone();
        }
    }
    let idx: Vec<String> = loc.shape_index.iter().map(|i| i.to_string()).collect();
    let position = loc.instruction_id.and_then(|i| positions.get(&i).copied()).unwrap_or(i64::MAX / 2 + id as i64);
    XlaValue {
        id,
        name: format!("{instr_name}{{{}}}", idx.join(",")),
        size: b.size,
        color: b.color,
        position,
        live: None,
        is_tuple_shape: false,
    }
}

/// Positions of instructions (by unique id) in the order of
/// `BufferAssigner::AssignBuffersForComputations`' `post_order_position`: the global
/// computations (entry and those reached through call / while / conditional / async ops) in
/// reverse of `CallGraph::VisitNodes`' post order, each one's instructions in post order
/// (`HloComputation::ToProto` writes them in `MakeInstructionPostOrder`).
/// Also returns each instruction's name.
fn instruction_positions(module: &proto::HloModuleProto) -> (HashMap<i64, i64>, HashMap<i64, String>) {
    struct Comp<'a> {
        id: i64,
        name: &'a str,
        instrs: Vec<(i64, &'a str, &'a [i64])>,
    }
    let mut names: HashMap<i64, String> = HashMap::new();
    let comps: Vec<Comp> = module
        .computations
        .iter()
        .map(|c| Comp {
            id: c.id.unwrap_or(-1),
            name: &c.name,
            instrs: c
                .instructions
                .iter()
                .map(|i| {
                    let id = i.id.unwrap_or(-1);
                    names.insert(id, i.name.clone());
                    (id, i.opcode.as_str(), i.called_computation_ids.as_slice())
                })
                .collect(),
        })
        .collect();
    let (entry_name, entry_id) = (module.entry_computation_name.as_str(), module.entry_computation_id);
    let by_id: HashMap<i64, usize> = comps.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
    let entry = entry_id
        .and_then(|id| by_id.get(&id).copied())
        .or_else(|| comps.iter().position(|c| c.name == entry_name))
        .or(comps.len().checked_sub(1));
    let Some(entry) = entry else { return (HashMap::new(), names) };
    // GatherComputationsByAllocationType: global computations.
    const GLOBAL_CALLERS: [&str; 6] = ["call", "while", "conditional", "async-start", "async-update", "async-done"];
    let mut global = vec![false; comps.len()];
    global[entry] = true;
    let mut work = vec![entry];
    while let Some(c) = work.pop() {
        for (_, op, called) in &comps[c].instrs {
            if GLOBAL_CALLERS.contains(op) {
                for cc in called.iter() {
                    if let Some(&k) = by_id.get(cc) {
                        if !global[k] {
                            global[k] = true;
                            work.push(k);
                        }
                    }
                }
            }
        }
    }
    // CallGraph::VisitNodes: DFS post order from every node without callers.
    let mut has_caller = vec![false; comps.len()];
    for c in &comps {
        for (_, _, called) in &c.instrs {
            for cc in called.iter() {
                if let Some(&k) = by_id.get(cc) {
                    has_caller[k] = true;
                }
            }
        }
    }
    let mut visited = vec![false; comps.len()];
    let mut post = Vec::with_capacity(comps.len());
    for root in 0..comps.len() {
        if has_caller[root] || visited[root] {
            continue;
        }
        // Iterative DFS: (computation, next callee cursor).
        let mut stack: Vec<(usize, usize, usize)> = vec![(root, 0, 0)];
        visited[root] = true;
        while let Some(&mut (c, ref mut ii, ref mut ci)) = stack.last_mut() {
            let mut next = None;
            while *ii < comps[c].instrs.len() {
                let called = &comps[c].instrs[*ii].2;
                if *ci < called.len() {
                    let cc = called[*ci];
                    *ci += 1;
                    if let Some(&k) = by_id.get(&cc) {
                        if !visited[k] {
                            visited[k] = true;
                            next = Some(k);
                            break;
                        }
                    }
                } else {
                    *ii += 1;
                    *ci = 0;
                }
            }
            match next {
                Some(k) => stack.push((k, 0, 0)),
                None => {
                    post.push(c);
                    stack.pop();
                }
            }
        }
    }
    let mut positions = HashMap::new();
    let mut p = 0i64;
    for &c in post.iter().rev() {
        if !global[c] {
            continue;
        }
        for (id, _, _) in &comps[c].instrs {
            positions.insert(*id, p);
            p += 1;
        }
    }
    (positions, names)
}

/// Parses `-buffer-assignment.txt` (`BufferAssignment::ToString`). Tolerates `, page N`,
/// `, color N` and the layouts of older versions (no page, no color).
pub fn parse_buffer_assignment_text(path: &Path, text: &str) -> Result<XlaProgram> {
    check_complete(path, text)?;
    let mut values: Vec<XlaValue> = Vec::new();
    let mut index: HashMap<u64, u32> = HashMap::new();
    let mut allocations: Vec<XlaAllocation> = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        let bad = |m: &str| Error::format(path, format!("line {}: {m}: {}", lineno + 1, line.chars().take(120).collect::<String>()));
        if let Some(rest) = line.strip_prefix("allocation ") {
            let (num, rest) = rest.split_once(':').ok_or_else(|| bad("expected 'allocation N: size S'"))?;
            let index = num.trim().parse::<i64>().map_err(|_| bad("bad allocation index"))?;
            let rest = rest.trim_start();
            let rest = rest.strip_prefix("size ").ok_or_else(|| bad("expected 'size S'"))?;
            let size_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let size = rest[..size_end].parse::<i64>().map_err(|_| bad("bad allocation size"))?;
            let attrs = &rest[size_end..];
            // Shapes (`|...|`) may hold commas and keywords: drop them before looking for flags.
            let mut flags = String::new();
            let mut in_shape = false;
            for ch in attrs.chars() {
                if ch == '|' {
                    in_shape = !in_shape;
                } else if !in_shape {
                    flags.push(ch);
                }
            }
            let flags = flags.trim_end().trim_end_matches(':');
            if index != allocations.len() as i64 {
                return Err(bad(&format!(
                    "allocation {index} follows allocation {} (a part of the dump is missing)",
                    allocations.len() as i64 - 1
                )));
            }
            if let Some(prev) = allocations.last() {
                if prev.assigned.is_empty() {
                    return Err(bad(&format!("allocation {} holds no value (a part of the dump is missing)", prev.index)));
                }
            }
            if size < 0 {
                return Err(bad("negative allocation size"));
            }
            let mut a = XlaAllocation { index, size, ..Default::default() };
            for item in flags.split(',').map(str::trim) {
                if let Some(c) = item.strip_prefix("color ") {
                    a.color = c.trim().parse().map_err(|_| bad("bad color"))?;
                } else if let Some(p) = item.strip_prefix("parameter ") {
                    a.is_entry_computation_parameter = true;
                    a.parameter_number = p.trim().parse().map_err(|_| bad("bad parameter number"))?;
                } else {
                    match item {
                        "constant" => a.is_constant = true,
                        "thread-local" => a.is_thread_local = true,
                        "maybe-live-out" => a.maybe_live_out = true,
                        _ => {} // page N, shape ..., output shape is, preallocated-temp, unknown
                    }
                }
            }
            allocations.push(a);
        } else if let Some(rest) = line.trim_start().strip_prefix("value: <") {
            let a = allocations.last_mut().ok_or_else(|| bad("value before any allocation"))?;
            let (head, tail) = rest.split_once('>').ok_or_else(|| bad("expected '<id name @color>'"))?;
            let mut it = head.split_whitespace();
            let id: u64 = it.next().and_then(|s| s.parse().ok()).ok_or_else(|| bad("bad value id"))?;
            let short = it.next().ok_or_else(|| bad("value without a name"))?;
            let color = head.rsplit_once('@').and_then(|(_, c)| c.trim().parse().ok()).unwrap_or(0);
            let (sz, off) = {
                let t = tail.trim_start();
                let inner =
                    t.strip_prefix("(").and_then(|t| t.split_once(')')).map(|(i, _)| i).ok_or_else(|| bad("expected (size=S,offset=O)"))?;
                let mut sz = None;
                let mut off = None;
                for kv in inner.split(',') {
                    match kv.split_once('=') {
                        Some(("size", v)) => sz = v.trim().parse::<i64>().ok(),
                        Some(("offset", v)) => off = v.trim().parse::<i64>().ok(),
                        _ => {}
                    }
                }
                (sz.ok_or_else(|| bad("bad size"))?, off.ok_or_else(|| bad("bad offset"))?)
            };
            let shape = tail.split_once("):").map(|(_, s)| s.trim()).unwrap_or("");
            // HloValue::ToShortString prints the shape index only for tuple-shaped
            // instructions; -live-range.txt always prints it (`{}` at the top level).
            let name = if short.ends_with('}') { short.to_string() } else { format!("{short}{{}}") };
            let vi = *index.entry(id).or_insert_with(|| {
                values.push(XlaValue {
                    id,
                    name,
                    size: sz,
                    color,
                    position: id as i64,
                    live: None,
                    is_tuple_shape: shape.starts_with('('),
                });
                (values.len() - 1) as u32
            });
            a.assigned.push((vi, off, sz));
        }
    }
    if allocations.is_empty() {
        return Err(Error::format(path, "no 'allocation N: size S' line: not an XLA buffer-assignment dump"));
    }
    if let Some(last) = allocations.last().filter(|a| a.assigned.is_empty()) {
        return Err(Error::format(path, format!("allocation {} holds no value: truncated dump", last.index)));
    }
    // Logical buffer sizes: the assigned size of a value is its group's chunk; the smallest
    // assigned size we saw is the best guess for the value itself.
    Ok(XlaProgram {
        program: String::new(),
        module_name: String::new(),
        platform: String::new(),
        prefix: PathBuf::new(),
        source: AssignmentSource::Text,
        values,
        allocations,
        heap_traces: Vec::new(),
        schedule_end: None,
    })
}

/// Parses `-live-range.txt` (`HloLiveRange::ToString`): the last schedule step and each
/// value's `[start, end]` (inclusive).
pub fn parse_live_range_text(path: &Path, text: &str) -> Result<(i64, LiveRanges)> {
    check_complete(path, text)?;
    let mut end = None;
    let mut ranges = HashMap::new();
    let mut in_ranges = false;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("HloLiveRange (max ") {
            end = rest.trim_end_matches("):").trim_end_matches(')').parse::<i64>().ok();
            continue;
        }
        if t == "BufferLiveRange:" {
            in_ranges = true;
            continue;
        }
        if t.starts_with("Live ranges at") || t == "InstructionSequence:" {
            in_ranges = false;
            continue;
        }
        if in_ranges {
            // name{idx}:start-end; names never hold ':' but the index may be `{}`.
            let Some((name, span)) = t.rsplit_once(':') else { continue };
            let Some((s, e)) = span.split_once('-') else { continue };
            if let (Ok(s), Ok(e)) = (s.parse::<i64>(), e.parse::<i64>()) {
                ranges.entry(name.to_string()).or_insert((s, e));
            }
        }
    }
    let end = end.ok_or_else(|| Error::format(path, "no 'HloLiveRange (max T):' header: not an XLA live-range dump"))?;
    Ok((end, ranges))
}

/// Text dumps have no heap-simulator trace: rebuild one per color from the live ranges of
/// the temp values that are not tuple-shaped, replaying `HeapSimulator::RunComputation`'s
/// order (values defined at each step sorted by (start, end, id), then the frees). Values at
/// the same offset whose live ranges touch or overlap are taken to share a buffer
/// (SHARE_WITH): an approximation of XLA's alias analysis.
fn synthesize_heap_traces(p: &XlaProgram) -> Vec<Vec<HeapEvent>> {
    let mut by_color: std::collections::BTreeMap<i64, Vec<(u32, i64)>> = Default::default();
    for a in p.allocations.iter().filter(|a| a.is_preallocated_temp()) {
        for &(vi, off, _) in &a.assigned {
            let v = &p.values[vi as usize];
            if v.is_tuple_shape || v.live.is_none() {
                continue;
            }
            by_color.entry(a.color).or_default().push((vi, off));
        }
    }
    let mut traces = Vec::new();
    for (_, mut vals) in by_color {
        let live = |vi: u32| p.values[vi as usize].live.expect("filtered");
        // Sharing: group by offset, chain values whose ranges touch.
        vals.sort_by_key(|&(vi, off)| (off, live(vi).0, p.values[vi as usize].id));
        let mut canonical: HashMap<u32, u32> = HashMap::new();
        let mut i = 0;
        while i < vals.len() {
            let mut j = i + 1;
            let (first, off) = vals[i];
            let mut group_end = live(first).1;
            while j < vals.len() && vals[j].1 == off && live(vals[j].0).0 <= group_end {
                canonical.insert(vals[j].0, first);
                group_end = group_end.max(live(vals[j].0).1);
                j += 1;
            }
            i = j;
        }
        let mut order: Vec<u32> = vals.iter().map(|&(vi, _)| vi).collect();
        order.sort_by_key(|&vi| (live(vi).0, live(vi).1, p.values[vi as usize].id));
        let mut frees: Vec<u32> = order.clone();
        frees.sort_by_key(|&vi| (live(vi).1, live(vi).0, p.values[vi as usize].id));
        let mut events = Vec::with_capacity(2 * order.len());
        let (mut a, mut f) = (0, 0);
        let max_t = order.iter().map(|&vi| live(vi).1).max().unwrap_or(0);
        for t in 0..=max_t {
            while a < order.len() && live(order[a]).0 == t {
                let vi = order[a];
                match canonical.get(&vi) {
                    Some(&c) => events.push(HeapEvent { kind: HeapEventKind::ShareWith, value: vi, share_with: c }),
                    None => events.push(HeapEvent { kind: HeapEventKind::Alloc, value: vi, share_with: u32::MAX }),
                }
                a += 1;
            }
            while f < frees.len() && live(frees[f]).1 == t {
                events.push(HeapEvent { kind: HeapEventKind::Free, value: frees[f], share_with: u32::MAX });
                f += 1;
            }
        }
        traces.push(events);
    }
    traces
}

#[cfg(test)]
mod tests {
    use super::*;

    const BA: &str = "BufferAssignment:
allocation 0: size 1024, page 0, parameter 0, shape |f32[256]| at ShapeIndex {}:
 value: <0 p0 @0> (size=1024,offset=0): f32[256]{0}
allocation 1: size 16, color 1, output shape is |(f32[], f32[])|, maybe-live-out:
 value: <1 tuple.1{} @1> (size=16,offset=0): (f32[], f32[])
allocation 2: size 4, thread-local:
 value: <2 add.0 @0> (size=4,offset=0): f32[]
allocation 3: size 4, constant:
 value: <3 c @0> (size=4,offset=0): f32[]
allocation 4: size 2304, preallocated-temp:
 value: <4 fusion @0> (size=2048,offset=256): f32[512]{0}
 value: <5 custom-call{} @0> (size=16,offset=0): (f32[4], s8[0])
";

    #[test]
    fn parses_buffer_assignment_text_with_and_without_page_and_color() {
        let p = parse_buffer_assignment_text(Path::new("x"), BA).unwrap();
        assert_eq!(p.allocations.len(), 5);
        let a = &p.allocations;
        assert!(a[0].is_entry_computation_parameter && a[0].parameter_number == 0);
        assert!(a[1].maybe_live_out && a[1].color == 1 && !a[1].is_preallocated_temp());
        assert!(a[2].is_thread_local && a[3].is_constant);
        assert!(a[4].is_preallocated_temp());
        assert_eq!(a[4].size, 2304);
        assert_eq!(a[4].assigned, vec![(4, 256, 2048), (5, 0, 16)]);
        assert_eq!(p.values[4].name, "fusion{}");
        assert_eq!(p.values[5].name, "custom-call{}");
        assert!(p.values[5].is_tuple_shape && !p.values[4].is_tuple_shape);
        assert_eq!(p.values[1].color, 1);
    }

    #[test]
    fn text_errors_name_the_line() {
        let e = parse_buffer_assignment_text(Path::new("f.txt"), "allocation x: size 1:\n").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let e = parse_buffer_assignment_text(Path::new("f.txt"), "hello\n").unwrap_err();
        assert!(e.to_string().contains("not an XLA buffer-assignment dump"));
    }

    #[test]
    fn parses_live_ranges() {
        let t = "HloLiveRange (max 9):\n  InstructionSequence:\n    0:p0\n  BufferLiveRange:\n    p0{}:0-9\n    custom-call{0}:2-3\n  Live ranges at 3 (peak):\n    p0{}: 4 bytes\n";
        let (end, r) = parse_live_range_text(Path::new("x"), t).unwrap();
        assert_eq!(end, 9);
        assert_eq!(r["p0{}"], (0, 9));
        assert_eq!(r["custom-call{0}"], (2, 3));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn corrupt_proto_is_a_format_error() {
        let e = parse_hlo_proto(Path::new("m.hlo.pb"), &[0x1a, 0x09, 0x0a]).unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "{e}");
        let e = parse_hlo_proto(Path::new("m.hlo.pb"), &[0x0a, 0x00]).unwrap_err();
        assert!(e.to_string().contains("no buffer_assignment"), "{e}");
    }
}
