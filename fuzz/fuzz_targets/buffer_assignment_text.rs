//! XLA's -buffer-assignment.txt and -live-range.txt dumps, and the plan made from them.
#![no_main]
use std::path::Path;

use allocreplay_core::import::xla::{parse_buffer_assignment_text, parse_live_range_text};
use allocreplay_core::offline::buffer_assignment::plan_program;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse_live_range_text(Path::new("fuzz-live-range.txt"), &text);
    if let Ok(p) = parse_buffer_assignment_text(Path::new("fuzz-buffer-assignment.txt"), &text) {
        if p.allocations.len() + p.values.len() < 4096 {
            let _ = plan_program(&p);
        }
    }
});
