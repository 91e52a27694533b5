//! `cargo run --release --example no_addresses_table -- TRACE...`: each PyTorch capture replayed
//! under its recorded settings and cap, with and without its recorded segment addresses
//! (`validate` / `validate --no-addresses`): peak reserved, retries, OOMs against the run.

use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::validate::pytorch::validate_pytorch_with;
use std::path::Path;

fn main() {
    for arg in std::env::args().skip(1) {
        let t = match load(Path::new(&arg), &ImportOptions::default()) {
            Ok(t) => t,
            Err(e) => {
                println!("{arg}: {e}");
                continue;
            }
        };
        for d in t.devices() {
            let v = validate_pytorch_with(&t, d, std::env::var_os("WITH_ADDRESSES").is_none()).unwrap();
            println!(
                "{:50} dev{} ok={} peak rec {:?} rep {} ({:+.4}%) retries {:?}/{} ooms {:?}/{} segs {}/{} addr {:.4}",
                Path::new(&arg).file_name().unwrap().to_string_lossy(),
                d,
                v.ok,
                v.peak_reserved_recorded,
                v.peak_reserved_replayed,
                v.peak_reserved_recorded.map_or(0.0, |p| (v.peak_reserved_replayed as f64 - p as f64) / p as f64 * 100.0),
                v.num_alloc_retries_recorded,
                v.num_alloc_retries_replayed,
                v.num_ooms_recorded,
                v.num_ooms_replayed,
                v.segment_events_match,
                v.segment_events_recorded,
                v.address_match,
            );
            if !v.ok {
                println!(
                    "    peak allocated rec {:?} rep {}, first segment mismatch {:?}",
                    v.peak_allocated_recorded, v.peak_allocated_replayed, v.first_segment_mismatch
                );
            }
        }
    }
}
