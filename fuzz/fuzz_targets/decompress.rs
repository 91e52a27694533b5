//! gzip / xz / zstd decoding under a small output bound.
#![no_main]
use std::path::Path;

use allocreplay_core::import::compression::decompress_limited;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(out) = decompress_limited(Path::new("fuzz.gz"), data.to_vec(), 1 << 20, None) {
        assert!(out.len() <= 1 << 20 || out == data);
    }
});
