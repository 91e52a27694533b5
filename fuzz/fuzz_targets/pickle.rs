//! PyTorch snapshot pickles: the parser, the importer and the semantic check.
#![no_main]
use std::path::Path;

use allocreplay_core::import::{pytorch::import_snapshot, ImportOptions};
use allocreplay_core::trace::check::check_trace;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.pickle");
    if let Ok(t) = import_snapshot(path, data, &ImportOptions::default()) {
        let _ = check_trace(t.clone(), path, false);
        let _ = check_trace(t, path, true);
    }
});
