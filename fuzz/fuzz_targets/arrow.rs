//! `.arrow` traces: the IPC reader, the value checks and a replay of what loads.
#![no_main]
use std::path::Path;

use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry::build;
use allocreplay_core::trace::check::check_trace;
use allocreplay_core::trace::read_arrow_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.arrow");
    let Ok(t) = read_arrow_bytes(path, data.to_vec()) else { return };
    let Ok(t) = check_trace(t, path, true) else { return };
    if t.num_events() > 100_000 {
        return;
    }
    for device in t.devices() {
        let ctx = PolicyContext { metadata: &t.metadata, device: t.metadata.device(device), capacity: Some(1 << 34) };
        let mut p = build("pytorch", &ctx).unwrap();
        let _ = allocreplay_core::engine::replay_device(&t, device, p.as_mut(), &Default::default());
    }
});
