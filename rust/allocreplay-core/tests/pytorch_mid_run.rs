//! Histories that start mid-run and call `torch.cuda.empty_cache()` (issue 29 item 2): the
//! captures in traces/truncated, recorded on an H200 (torch 2.11, driver 580.159) by
//! device scripts kept in research/truncated/. `course_*`: one process benchmarks context
//! lengths 128, 256 and 512 in turn, and for each builds the model, starts
//! `_record_memory_history`, calls `empty_cache()` (releasing what the previous length left
//! cached) and runs one forward pass or training step (`_ring*`: a ring buffer smaller than
//! that). `trunc_*`: whole runs through a ring buffer of 1,000–10,000 entries. The ground truth
//! is each recording's own segment events and addresses.

use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::trace::info::trace_info;
use allocreplay_core::validate::pytorch::{validate_pytorch, validate_pytorch_with};
use std::path::PathBuf;

fn captures() -> Vec<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/truncated"));
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fixture missing: {} ({e})", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".pickle.xz"))
        .collect();
    v.sort();
    assert!(v.len() >= 25, "traces/truncated holds {} captures, expected 25", v.len());
    v
}

#[test]
fn every_mid_run_capture_validates_with_and_without_its_addresses() {
    let mut failed = Vec::new();
    for path in captures() {
        let trace = load(&path, &ImportOptions::default()).unwrap();
        assert!(trace.metadata.seeded, "{}: a history that starts mid-run is seeded", path.display());
        let dev = trace.devices()[0];
        let exact = validate_pytorch(&trace, dev).unwrap();
        let modelled = validate_pytorch_with(&trace, dev, true).unwrap();
        if !(exact.ok && exact.address_match == 1.0 && modelled.ok) {
            failed.push(format!("{}: {exact:?} / {modelled:?}", path.display()));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The pattern that misled the importer: a run of segment frees at the start of the history
/// (the program's empty_cache()) followed at once by a segment_alloc, as a release inside a
/// failed malloc would be. A freed 20 MiB segment could have served that request, so it was the
/// program's: without its `empty_cache` event the replay kept those segments cached and made
/// none of the recorded new ones (before the fix: 11 of these 18 course captures differed).
#[test]
fn an_empty_cache_before_a_new_segment_is_the_programs_when_a_freed_segment_could_serve() {
    for path in captures().iter().filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("course_")) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let trace = load(path, &ImportOptions::default()).unwrap();
        let info = trace_info(&trace);
        // The script calls empty_cache() once per recording, right after it starts. The first
        // context length has nothing cached yet (no frees to see); a ring buffer keeps only the
        // end of the step, after it.
        let expected = usize::from(!name.contains("_ctx128") && !name.contains("_ring"));
        assert_eq!(info.empty_caches, expected, "{name}");
        // None of these releases was ambiguous: nothing is assumed beyond the seed.
        assert_eq!(info.assumed.len(), 1, "{name}: {:?}", info.assumed);
        assert!(info.assumed[0].contains("starts mid-run"), "{:?}", info.assumed);
    }
}
