//! `ideal` and `offline` bounds on every real PyTorch capture: ideal <= offline <= the
//! recorded peak reserved (the capture's final memory_stats, shared/traces/README.md table),
//! and offline within 5% of ideal.

use std::path::PathBuf;

use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::offline::{ideal_peak, plan_trace};

fn traces_dir() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/pytorch"));
    assert!(p.is_dir(), "fixture missing: {}", p.display());
    p
}

#[test]
fn ideal_le_offline_le_recorded_reserved_on_every_pytorch_trace() {
    let dir = traces_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pickle.xz"))
        .collect();
    names.sort();
    assert!(names.len() >= 13, "expected the 13 captures with a history, found {names:?}");
    for name in names {
        let path = dir.join(&name);
        let stem = name.trim_end_matches(".pickle.xz");
        let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{stem}.json"))).unwrap()).unwrap();
        let t = load(&path, &ImportOptions::default()).unwrap();
        let mut planned = 0;
        for dev in t.devices() {
            let stats = match meta.get("memory_stats_per_device") {
                Some(per) => &per[dev.to_string()],
                None => &meta["memory_stats"],
            };
            let Some(reserved) = stats["reserved_bytes.all.peak"].as_u64() else { continue };
            let r = plan_trace(&t, dev, 0).unwrap();
            if r.buffers == 0 {
                continue;
            }
            planned += 1;
            println!(
                "{stem} dev {dev}: buffers {} ideal {} offline {} (+{:.3}%) recorded reserved {} [{}] {:.3}s",
                r.buffers,
                r.ideal_peak_bytes,
                r.offline_peak_bytes,
                100.0 * (r.offline_peak_bytes as f64 / r.ideal_peak_bytes as f64 - 1.0),
                reserved,
                r.strategy,
                r.plan_seconds
            );
            assert_eq!(r.alignment, 512);
            // The one-pass `ideal` of `replay --policy ideal` is the planner's live-bytes peak.
            assert_eq!(ideal_peak(&t, dev, 0, None).unwrap().peak_bytes, r.ideal_peak_bytes, "{stem} dev {dev}");
            assert!(r.ideal_peak_bytes <= r.offline_peak_bytes, "{stem}: {r:?}");
            assert!(r.offline_peak_bytes <= reserved, "{stem}: offline {} > recorded reserved {reserved}", r.offline_peak_bytes);
            assert!(
                r.offline_peak_bytes as f64 <= 1.05 * r.ideal_peak_bytes as f64,
                "{stem}: offline {} more than 5% above ideal {}",
                r.offline_peak_bytes,
                r.ideal_peak_bytes
            );
        }
        assert!(planned > 0, "{stem}: no device planned");
    }
}
