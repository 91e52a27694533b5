//! Cross-config predictions: one run's requests replayed under another configuration must
//! predict the peak reserved that a real run under that configuration recorded (its `.json`,
//! `memory_stats()["reserved_bytes.all.peak"]`; table in ../shared/traces/README.md).

use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry::build;
use std::path::PathBuf;

fn shared(name: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/pytorch")).join(name);
    assert!(p.exists(), "fixture missing: {}", p.display());
    p
}

fn recorded_peak_reserved(run: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(shared(&format!("{run}.json"))).unwrap()).unwrap();
    v["memory_stats"]["reserved_bytes.all.peak"].as_u64().unwrap()
}

fn predict(source: &str, spec: &str) -> u64 {
    let t = load(&shared(&format!("{source}.pickle.xz")), &ImportOptions::default()).unwrap();
    let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(0), capacity: None };
    let mut p = build(spec, &ctx).unwrap();
    replay_device(&t, 0, p.as_mut(), &ReplayOptions::default()).stats.peak_reserved
}

fn check(source: &str, spec: &str, run: &str, tolerance: f64) {
    let predicted = predict(source, spec);
    let real = recorded_peak_reserved(run);
    let err = (predicted as f64 - real as f64).abs() / real as f64;
    eprintln!("{source} under {spec}: predicted {predicted}, real {run} {real}, error {:.4}%", err * 100.0);
    assert!(err <= tolerance, "{source} under {spec}: predicted {predicted} vs real {real} ({:.3}%)", err * 100.0);
}

#[test]
fn gpt2_default_requests_predict_the_other_configs_within_2_percent() {
    // gpt2_train's runs free a few tensors in a different order from index 850 on
    // (findings.md), so these are close, not exact.
    check("gpt2_train__default", "pytorch:expandable_segments:True", "gpt2_train__expandable", 0.02);
    check("gpt2_train__default", "pytorch:max_split_size_mb:128", "gpt2_train__split128", 0.02);
    check("gpt2_train__default", "pytorch:roundup_power2_divisions:4", "gpt2_train__pow2div4", 0.02);
}

#[test]
fn two_streams_requests_predict_expandable_exactly() {
    // Identical request streams across configs: the prediction must be exact.
    check("two_streams__default", "pytorch:expandable_segments:True", "two_streams__expandable", 0.0);
    check("two_streams__expandable", "pytorch", "two_streams__default", 0.0);
}

#[test]
fn same_config_without_recorded_addresses_stays_close() {
    check("gpt2_train__default", "pytorch", "gpt2_train__default", 0.005);
}

/// traces/large/opt350_serve_h__{default,pow2div4} (H200, 2026-12-03, issue 29 item 1): the
/// 350 M-parameter fp16 serving workload, 40 generate calls of batch 1-32 and prompts 16-600,
/// recorded once under the defaults and once under roundup_power2_divisions:4 (each `.json`:
/// the run's memory_stats()). The default run's requests replayed under the other setting, in
/// the modelled address space, must give that run's peaks to the byte.
#[test]
fn a_serving_run_predicts_its_power2_rounding_run_exactly() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/large"));
    let stats = |run: &str| -> serde_json::Value {
        let p = dir.join(format!("{run}.json"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture missing: {} ({e})", p.display()));
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["memory_stats"].clone()
    };
    let t = load(&dir.join("opt350_serve_h__default.pickle.xz"), &ImportOptions::default()).unwrap();
    let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(0), capacity: None };
    let mut p = build("pytorch:roundup_power2_divisions:4", &ctx).unwrap();
    let s = replay_device(&t, 0, p.as_mut(), &ReplayOptions::default()).stats;
    let real = stats("opt350_serve_h__pow2div4");
    assert_eq!(Some(s.peak_reserved), real["reserved_bytes.all.peak"].as_u64());
    assert_eq!(Some(s.peak_allocated), real["allocated_bytes.all.peak"].as_u64());
    // Not a trivial prediction: the setting changes the peak by 9% on this workload.
    assert_ne!(Some(s.peak_reserved), stats("opt350_serve_h__default")["reserved_bytes.all.peak"].as_u64());
}
