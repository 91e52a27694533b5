//! Debug aid: recorded vs modelled segment addresses of a capture (relative, MiB).
use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::{build, PolicyContext};
use allocreplay_core::trace::Action;
use std::path::Path;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let t = load(Path::new(&a[1]), &ImportOptions::default()).unwrap();
    let dev: i32 = a.get(2).map_or(0, |s| s.parse().unwrap());
    let cap = t.metadata.device(dev).and_then(|d| d.memory_cap);
    let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(dev), capacity: cap };
    let mut p = build("pytorch:recorded", &ctx).unwrap();
    let r = replay_device(&t, dev, p.as_mut(), &ReplayOptions { capacity: cap, device_events: true, ..Default::default() });
    let c = t.columns();
    let rec: Vec<(Action, u64, u64)> = (0..t.num_events())
        .filter(|&i| c.device[i] == dev && !c.seed.value(i))
        .filter_map(|i| {
            let a = Action::from_code(c.action[i])?;
            matches!(a, Action::SegmentAlloc | Action::SegmentFree).then(|| (a, c.addr.value(i), c.size[i]))
        })
        .collect();
    let b0 = rec.first().map_or(0, |x| x.1) as i64;
    let b1 = r.device_events.first().map_or(0, |x| x.addr) as i64;
    let n = rec.len().max(r.device_events.len());
    for k in 0..n {
        let x = rec.get(k).map(|x| format!("{:?} {} @{}", x.0, x.2 >> 20, (x.1 as i64 - b0) >> 20)).unwrap_or_default();
        let y =
            r.device_events.get(k).map(|x| format!("{:?} {} @{}", x.action, x.size >> 20, (x.addr as i64 - b1) >> 20)).unwrap_or_default();
        println!("{k:4} {x:40} {y}");
    }
}
