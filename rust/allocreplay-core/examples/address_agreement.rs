//! A PyTorch capture replayed under its recorded settings in the modelled driver address space
//! (what `validate --no-addresses` and every what-if replay use): how many of its segments land
//! at the address the run recorded, relative to the first segment (the model's coordinates are
//! its own). With `--list`, the recorded and modelled segment events side by side.
//!
//!     cargo run --release -p allocreplay-core --example address_agreement -- TRACE [--list]

use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::trace::Action;
use arrow_array::Array;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.iter().find(|a| !a.starts_with("--")).expect("usage: address_agreement TRACE [--list]");
    let list = args.iter().any(|a| a == "--list");
    let trace = load(std::path::Path::new(path), &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let device = trace.devices()[0];
    let ctx = PolicyContext { metadata: &trace.metadata, device: trace.metadata.device(device), capacity: None };
    let mut policy = allocreplay_core::registry::build("pytorch", &ctx).unwrap_or_else(|e| panic!("{e}"));
    let r = replay_device(&trace, device, policy.as_mut(), &ReplayOptions { device_events: true, ..Default::default() });
    let c = trace.columns();
    let segment = |a: u8| a == Action::SegmentAlloc as u8 || a == Action::SegmentFree as u8;
    let recorded: Vec<(usize, u8, u64, u64)> = (0..c.action.len())
        .filter(|&j| c.device[j] == device && segment(c.action[j]) && c.addr.is_valid(j))
        .map(|j| (j, c.action[j], c.addr.value(j), c.size[j]))
        .collect();
    let modelled: Vec<_> = r.device_events.iter().filter(|e| segment(e.action as u8)).collect();
    let (Some(r0), Some(m0)) = (recorded.first(), modelled.first()) else {
        println!("{path}: no segment events");
        return;
    };
    let rel = |a: u64, base: u64| (i128::from(a) - i128::from(base)) as f64 / (1u64 << 20) as f64;
    let allocs = recorded.iter().filter(|x| x.1 == Action::SegmentAlloc as u8).count();
    let same: Vec<bool> = recorded
        .iter()
        .zip(&modelled)
        .map(|(x, y)| x.1 == Action::SegmentAlloc as u8 && y.action == Action::SegmentAlloc && rel(x.2, r0.2) == rel(y.addr, m0.addr))
        .collect();
    println!(
        "{path}: {} of {allocs} segments at the recorded relative address ({} leading)",
        same.iter().filter(|&&b| b).count(),
        same.iter().take_while(|&&b| b).count()
    );
    if list {
        for i in 0..recorded.len().max(modelled.len()) {
            let a = recorded.get(i).map_or(String::new(), |x| {
                format!(
                    "{:>9} {} {:>9.2} MiB {:>5} MiB",
                    x.0,
                    if x.1 == Action::SegmentAlloc as u8 { "alloc" } else { "free " },
                    rel(x.2, r0.2),
                    x.3 >> 20
                )
            });
            let b = modelled.get(i).map_or(String::new(), |y| {
                format!("{:>9} {:?} {:>9.2} MiB {:>5} MiB", y.event, y.action, rel(y.addr, m0.addr), y.size >> 20)
            });
            println!("{i:>5}  {a:<42} | {b}{}", if same.get(i) == Some(&true) { "" } else { "  <<<" });
        }
    }
}
