//! TensorFlow / JAX profiler captures (xplane.pb).
#![no_main]
use std::path::Path;

use allocreplay_core::import::{xplane::import_xplane, ImportOptions};
use allocreplay_core::trace::check::check_trace;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.xplane.pb");
    if let Ok(t) = import_xplane(path, data.to_vec(), &ImportOptions::default()) {
        let _ = check_trace(t, path, true);
    }
});
