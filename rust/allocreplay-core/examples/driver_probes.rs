//! The driver address-space model (`device::memory::AddressSpace`) against the real driver's
//! placements in `tests/data/va-h200-580.159.txt` (every `raw__*` sequence of `cudaMalloc` /
//! `cudaFree` made in a fresh process on the H200): how many allocations land at the recorded
//! address relative to the sequence's first one.
//!
//!     cargo run --release -p allocreplay-core --example driver_probes [-- LOG [--list]]
//!
//! LOG: another probe log of the same form (`### raw__NAME` sections); `--list`: each
//! allocation's relative address, the driver's and the model's.

use std::collections::HashMap;

use allocreplay_core::device::memory::AddressSpace;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = args.iter().any(|a| a == "--list");
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/va-h200-580.159.txt").to_string();
    let path = args.iter().find(|a| !a.starts_with("--")).cloned().unwrap_or(default);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (mut total, mut same) = (0, 0);
    for section in text.split("### ").skip(1) {
        let name = section.lines().next().unwrap_or_default();
        if !name.starts_with("raw__") {
            continue;
        }
        let mut va = AddressSpace::new();
        let (mut ids, mut first) = (HashMap::new(), None);
        let (mut n, mut good) = (0, 0);
        for line in section.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                // "a ID SIZE ADDRESS ...": an allocation ("OOM" for one the driver refused).
                ["a", id, size, addr, ..] => {
                    let (Ok(size), Ok(real)) = (size.parse::<u64>(), addr.parse::<i128>()) else { continue };
                    let Some(model) = va.malloc(size) else { continue };
                    ids.insert(id.to_string(), model);
                    let (r0, m0) = *first.get_or_insert((real, i128::from(model)));
                    n += 1;
                    good += usize::from(real - r0 == i128::from(model) - m0);
                    if list {
                        let mib = |x: i128| x as f64 / f64::from(1u32 << 20);
                        let (r, m) = (mib(real - r0), mib(i128::from(model) - m0));
                        println!(
                            "  a {id:>4} {:>8.0} MiB  driver {r:>10.0}  model {m:>10.0}{}",
                            size as f64 / f64::from(1u32 << 20),
                            if r == m { "" } else { "  <<<" }
                        );
                    }
                }
                ["f", id, ..] => {
                    if let Some(a) = ids.remove(*id) {
                        if list {
                            println!("  f {id:>4}");
                        }
                        va.free(a);
                    }
                }
                _ => {}
            }
        }
        total += n;
        same += good;
        println!("{name:<50} {good:>5} / {n:<5}");
    }
    println!("all sequences: {same} / {total} at the driver's relative address");
}
