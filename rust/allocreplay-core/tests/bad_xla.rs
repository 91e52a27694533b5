//! docs/bad-inputs.md, XLA dumps: truncated or missing text dumps are errors, not 0-byte plans
//! or programs dropped from the output; runtime traces are bounded.

mod common;
use common::Scratch;
use std::path::{Path, PathBuf};

use allocreplay_core::import::xla::{list_programs, load_dump, load_program};
use allocreplay_core::offline::buffer_assignment::{runtime_trace, MAX_RUNTIME_EVENTS};
use allocreplay_core::Error;

fn dump() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/jax_train.xla_dump"));
    assert!(p.is_dir(), "missing fixture {}", p.display());
    p
}

/// A copy of the dump's text files (no .hlo.pb, so the text is what is read), with `edit`
/// applied to the named file's text (None: the file is left out).
fn text_copy(name: &str, suffix: &str, edit: impl Fn(&str) -> Option<String>) -> Scratch {
    let d = Scratch::dir("bad-xla", name);
    for e in std::fs::read_dir(dump()).unwrap() {
        let p = e.unwrap().path();
        let f = p.file_name().unwrap().to_string_lossy().into_owned();
        if !f.ends_with(".txt") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let out = if f.starts_with("module_9947") && f.ends_with(suffix) { edit(&text) } else { Some(text) };
        if let Some(out) = out {
            std::fs::write(d.join(&f), out).unwrap();
        }
    }
    d
}

fn format_error(r: Result<impl std::fmt::Debug, Error>) -> String {
    match r {
        Err(e @ Error::Format { .. }) => e.to_string(),
        other => panic!("expected a format error: {other:?}"),
    }
}

#[test]
fn the_text_copy_itself_loads() {
    assert_eq!(load_dump(&text_copy("whole", "", |t| Some(t.to_string()))).unwrap().len(), 2);
}

#[test]
fn a_buffer_assignment_cut_mid_line_is_an_error() {
    let d = text_copy("midline", "-buffer-assignment.txt", |t| Some(t[..t.len() - 20].to_string()));
    let m = format_error(load_dump(&d));
    assert!(m.ends_with("-buffer-assignment.txt: the file ends in the middle of a line: truncated dump"), "{m}");
}

#[test]
fn a_buffer_assignment_cut_after_an_allocation_line_is_an_error() {
    // Keep the lines up to and including the last "allocation N:" header.
    let d = text_copy("after_header", "-buffer-assignment.txt", |t| {
        let cut = t.rfind("\nallocation ").unwrap();
        let end = t[cut + 1..].find('\n').unwrap() + cut + 2;
        Some(t[..end].to_string())
    });
    let m = format_error(load_dump(&d));
    assert!(m.contains("-buffer-assignment.txt: allocation 52 holds no value: truncated dump"), "{m}");
}

#[test]
fn a_missing_allocation_is_an_error() {
    let d = text_copy("gap", "-buffer-assignment.txt", |t| Some(t.replacen("allocation 3:", "allocation 4:", 1)));
    let m = format_error(load_dump(&d));
    assert!(m.contains("allocation 4 follows allocation 2 (a part of the dump is missing)"), "{m}");
}

#[test]
fn a_live_range_cut_mid_line_is_an_error() {
    let d = text_copy("lr", "-live-range.txt", |t| Some(t[..t.len() / 2].trim_end_matches('\n').to_string()));
    let m = format_error(load_dump(&d));
    assert!(m.ends_with("-live-range.txt: the file ends in the middle of a line: truncated dump"), "{m}");
}

#[test]
fn a_program_without_its_buffer_assignment_is_an_error_not_dropped() {
    let d = text_copy("missing", "-buffer-assignment.txt", |_| None);
    assert_eq!(list_programs(&d).unwrap().len(), 2);
    let m = format_error(load_dump(&d));
    assert!(m.contains("module_9947"), "{m}");
    assert!(
        m.ends_with("neither .hlo.pb nor -buffer-assignment.txt exists for this program (its other dump files do): incomplete dump"),
        "{m}"
    );
}

#[test]
fn runtime_calls_beyond_the_event_cap_are_refused() {
    let prefix = list_programs(&dump()).unwrap().remove(0);
    let p = load_program(Path::new(&prefix)).unwrap();
    let t = runtime_trace(&p, 3).unwrap();
    assert!(t.num_events() > 0);
    match runtime_trace(&p, 10_000_000) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.starts_with("10000000 calls of "), "{m}");
            assert!(m.contains(&format!("more than the limit of {MAX_RUNTIME_EVENTS}; ask for at most ")), "{m}");
        }
        other => panic!("{:?}", other.map(|t| t.num_events())),
    }
    // usize::MAX calls: refused without overflowing.
    assert!(matches!(runtime_trace(&p, usize::MAX), Err(Error::InvalidArgument(_))));
}
