//! XLA HloProto with its buffer assignment, and the plan made from it.
#![no_main]
use std::path::Path;

use allocreplay_core::import::xla::parse_hlo_proto;
use allocreplay_core::offline::buffer_assignment::plan_program;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = parse_hlo_proto(Path::new("fuzz.hlo.pb"), data) {
        if p.allocations.len() + p.values.len() < 4096 {
            let _ = plan_program(&p);
        }
    }
});
