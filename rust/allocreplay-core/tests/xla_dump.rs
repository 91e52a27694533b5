//! XLA dumps: the planner reproduces XLA's preallocated-temp allocation and every temp value's
//! offset. Ground truth: the dump's own buffer assignment, and memory_analysis() recorded by
//! the run (shared/traces/README.md for jaxlm; tests/data/xla_heldout/memory_analysis.json,
//! captured with tests/data/xla_heldout/capture.sh on an H200 with jax 0.11.2).

use std::path::{Path, PathBuf};

use allocreplay_core::import::xla::trace::programs_trace;
use allocreplay_core::import::xla::{self, XlaProgram};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::offline::buffer_assignment::{plan_dump, plan_program, plan_temps, runtime_trace};
use allocreplay_core::Action;

fn jaxlm_dir() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/jax/jaxlm_xla_dump"));
    assert!(p.is_dir(), "fixture missing: {}", p.display());
    p
}

fn heldout_dir() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/xla_heldout"));
    assert!(p.is_dir(), "fixture missing: {}", p.display());
    p
}

/// Every temp value's planned offset and size equal the recorded ones.
fn assert_offsets_match(p: &XlaProgram) {
    let plan = plan_temps(p);
    let mut checked = 0;
    for a in p.allocations.iter().filter(|a| a.is_preallocated_temp()) {
        for &(v, off, size) in &a.assigned {
            let id = p.values[v as usize].id;
            assert_eq!(plan.offsets.get(&v), Some(&off), "{}: value {id} offset", p.program);
            assert_eq!(plan.sizes.get(&v), Some(&size), "{}: value {id} size", p.program);
            checked += 1;
        }
    }
    assert!(checked > 0, "{}: no temp values", p.program);
}

#[test]
fn jaxlm_train_step_reproduces_preallocated_temp_and_memory_analysis() {
    let plans = plan_dump(&jaxlm_dir()).unwrap();
    assert_eq!(plans.len(), 1);
    let p = &plans[0];
    assert_eq!(p.program, "module_11939.jit_train_step");
    // shared/traces/README.md: memory_analysis() of this program.
    assert_eq!(p.recorded_temp_bytes, 15_586_593_552);
    assert_eq!(p.planned_temp_bytes, 15_586_593_552);
    assert_eq!(p.argument_bytes, 533_757_952);
    assert_eq!(p.output_bytes, 533_725_460);
    assert!(p.lower_bound_bytes <= p.planned_temp_bytes && p.lower_bound_bytes > p.planned_temp_bytes / 2, "{p:?}");
    let json = serde_json::to_value(p).unwrap();
    let keys: Vec<&str> = json.as_object().unwrap().keys().map(|s| s.as_str()).collect();
    assert_eq!(keys.len(), 6);
    for k in ["program", "recorded_temp_bytes", "planned_temp_bytes", "lower_bound_bytes", "argument_bytes", "output_bytes"] {
        assert!(keys.contains(&k), "missing key {k}");
    }
}

#[test]
fn jaxlm_every_temp_offset_matches() {
    let programs = xla::load_dump(&jaxlm_dir()).unwrap();
    let p = &programs[0];
    assert_eq!(p.source, xla::AssignmentSource::Proto);
    assert_eq!(p.heap_traces.len(), 1);
    assert_eq!(p.schedule_end, Some(698));
    assert_offsets_match(p);
}

#[test]
fn heldout_programs_reproduce_memory_analysis_exactly() {
    let dir = heldout_dir();
    let ma: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("memory_analysis.json")).unwrap()).unwrap();
    assert_eq!(ma["jax"], "0.11.2");
    let ma = &ma["memory_analysis"];
    let programs = xla::load_dump(&dir).unwrap();
    assert_eq!(programs.len(), 5);
    for p in &programs {
        // The capture keyed memory_analysis by function name; jit_<name> is the module.
        let key = match p.module_name.as_str() {
            "jit__lambda" => "<lambda>",
            n => n.strip_prefix("jit_").unwrap(),
        };
        let m = &ma[key];
        let plan = plan_program(p);
        assert_eq!(plan.recorded_temp_bytes, m["temp_size_in_bytes"].as_i64().unwrap(), "{key}");
        assert_eq!(plan.planned_temp_bytes, m["temp_size_in_bytes"].as_i64().unwrap(), "{key}");
        assert_eq!(plan.argument_bytes, m["argument_size_in_bytes"].as_i64().unwrap(), "{key}");
        assert_eq!(plan.output_bytes, m["output_size_in_bytes"].as_i64().unwrap(), "{key}");
        assert!(plan.lower_bound_bytes <= plan.planned_temp_bytes, "{key}: {plan:?}");
        assert_offsets_match(p);
    }
}

/// Copies the text files of a dump (no .hlo.pb) to a temp dir.
fn text_only_copy(src: &Path, name: &str) -> PathBuf {
    let dst = std::env::temp_dir().join(format!("allocreplay-xla-text-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().into_string().unwrap();
        if n.ends_with("-buffer-assignment.txt") || n.ends_with("-live-range.txt") {
            std::fs::copy(e.path(), dst.join(&n)).unwrap();
        }
    }
    dst
}

#[test]
fn text_dump_reads_the_same_allocations_as_the_proto() {
    let proto = &xla::load_dump(&jaxlm_dir()).unwrap()[0];
    let dir = text_only_copy(&jaxlm_dir(), "jaxlm");
    let text = &xla::load_dump(&dir).unwrap()[0];
    assert_eq!(text.source, xla::AssignmentSource::Text);
    assert_eq!(text.program, proto.program);
    assert_eq!(text.allocations.len(), proto.allocations.len());
    for (a, b) in text.allocations.iter().zip(&proto.allocations) {
        assert_eq!((a.index, a.size, a.color), (b.index, b.size, b.color));
        assert_eq!(
            (a.is_entry_computation_parameter, a.parameter_number, a.maybe_live_out, a.is_thread_local, a.is_constant),
            (b.is_entry_computation_parameter, b.parameter_number, b.maybe_live_out, b.is_thread_local, b.is_constant)
        );
        let ids = |p: &XlaProgram, x: &xla::XlaAllocation| {
            let mut v: Vec<(u64, i64, i64)> = x.assigned.iter().map(|&(i, o, s)| (p.values[i as usize].id, o, s)).collect();
            v.sort();
            v
        };
        assert_eq!(ids(text, a), ids(proto, b));
    }
    // Value names join the live ranges in both cases.
    let with_range = |p: &XlaProgram| p.values.iter().filter(|v| v.live.is_some()).count();
    assert_eq!(with_range(text), with_range(proto));
    assert!(with_range(proto) > 400);
    // Without the heap trace the plan is rebuilt from live ranges: same order of magnitude,
    // not exact (XLA's aliasing is guessed).
    let plan = plan_program(text);
    assert_eq!(plan.recorded_temp_bytes, 15_586_593_552);
    let ratio = plan.planned_temp_bytes as f64 / plan.recorded_temp_bytes as f64;
    assert!((0.9..1.1).contains(&ratio), "{plan:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn load_of_a_dump_directory_gives_the_temps_as_a_trace() {
    let t = load(&jaxlm_dir(), &ImportOptions::default()).unwrap();
    assert_eq!(t.metadata.source, "xla");
    let c = t.columns();
    let n = t.num_events();
    let prog = t.column("program").expect("program column");
    let prog = prog.as_any().downcast_ref::<arrow_array::StringArray>().unwrap();
    let mut live = std::collections::HashMap::new();
    let (mut cur, mut peak) = (0i64, 0i64);
    let mut last_step = -1;
    for i in 0..n {
        assert_eq!(prog.value(i), "module_11939.jit_train_step");
        let step = c.time_ns.value(i);
        assert!((0..=698).contains(&step));
        assert!(step >= last_step, "events in schedule order");
        last_step = step;
        match Action::from_code(c.action[i]).unwrap() {
            Action::Alloc => {
                live.insert(c.alloc_id[i], c.size[i] as i64);
                cur += c.size[i] as i64;
                peak = peak.max(cur);
            }
            Action::FreeCompleted => cur -= live.remove(&c.alloc_id[i]).expect("free of a live alloc"),
            a => panic!("unexpected {a:?}"),
        }
    }
    assert!(live.is_empty(), "every temp is freed");
    // The live temps never need more than XLA's arena.
    assert!(peak <= 15_586_593_552 && peak > 10_000_000_000, "{peak}");
}

#[test]
fn runtime_trace_of_a_program() {
    let p = &xla::load_dump(&jaxlm_dir()).unwrap()[0];
    let t = runtime_trace(p, 3).unwrap();
    let c = t.columns();
    let allocs = (0..t.num_events()).filter(|&i| c.action[i] == Action::Alloc as u8).count();
    let params = p.allocations.iter().filter(|a| a.is_entry_computation_parameter).count();
    let outs = p.allocations.iter().filter(|a| a.maybe_live_out && !a.is_entry_computation_parameter).count();
    assert_eq!(allocs, params + 3 * (outs + 1));
    // The arena of each call is the preallocated-temp allocation.
    assert_eq!((0..t.num_events()).filter(|&i| c.size[i] == 15_586_593_552).count(), 6);
}

#[test]
fn errors_name_the_directory() {
    let dir = std::env::temp_dir().join(format!("allocreplay-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = load(&dir, &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no XLA dump"), "{e}");
    let bad = dir.join("module_1.f.sm_9.0a_gpu_after_optimizations.hlo.pb");
    std::fs::write(&bad, [0x1a, 0x05, 0x0a]).unwrap();
    let e = load(&dir, &ImportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("module_1.f"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = programs_trace(&[], &dir);
}
