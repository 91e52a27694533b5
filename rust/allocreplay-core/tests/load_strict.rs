//! Every real capture (shared/traces) and every trace shipped in traces/ passes the semantic
//! check of `trace::check` strictly: a check that a real run trips is wrong (docs/bad-inputs.md).
//! A missing fixture fails the test.

use std::path::{Path, PathBuf};

use allocreplay_core::import::{load, ImportOptions};

fn files(dir: &Path, suffixes: &[&str]) -> Vec<PathBuf> {
    assert!(dir.is_dir(), "missing fixture folder {} (shared/ must sit beside the repository)", dir.display());
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| suffixes.iter().any(|s| p.to_string_lossy().ends_with(s)))
        .collect();
    out.sort();
    out
}

fn check_all(paths: Vec<PathBuf>, at_least: usize) {
    assert!(paths.len() >= at_least, "{} files, expected at least {at_least}: {paths:?}", paths.len());
    let failures: Vec<String> = paths.iter().filter_map(|p| load(p, &ImportOptions::default()).err().map(|e| e.to_string())).collect();
    assert!(failures.is_empty(), "{} of {} fail the strict check:\n{}", failures.len(), paths.len(), failures.join("\n"));
}

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn shared_pytorch_captures_load_strictly() {
    check_all(files(&Path::new(ROOT).join("../shared/traces/pytorch"), &[".pickle.xz"]), 13);
}

#[test]
fn shared_xplane_captures_load_strictly() {
    let mut p = files(&Path::new(ROOT).join("../shared/traces/jax"), &[".xplane.pb.xz"]);
    p.extend(files(&Path::new(ROOT).join("../shared/traces/tf"), &[".xplane.pb"]));
    p.push(Path::new(ROOT).join("../shared/traces/jax/jaxlm_xla_dump"));
    check_all(p, 5);
}

#[test]
fn shipped_traces_load_strictly() {
    let mut p = files(&Path::new(ROOT).join("traces"), &[".arrow", ".pickle.xz"]);
    p.extend(files(&Path::new(ROOT).join("traces/cuda"), &[".pickle.xz"]));
    p.push(Path::new(ROOT).join("traces/jax_train.xla_dump"));
    check_all(p, 18);
}
