//! The xplane importer and the `bfc` policy on the real captures in ../shared/traces (ground
//! truth: shared/traces/README.md and each run's `.json`; every event of a BFC capture also
//! records the chunk and the bytes in use the real allocator had after it).

use allocreplay_core::engine::{replay_device, ReplayOptions};
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::trace::info::trace_info;
use allocreplay_core::validate::bfc::{validate_bfc, BfcValidation};
use allocreplay_core::{Action, Trace};
use std::path::PathBuf;

fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces")).join(rel);
    assert!(p.exists(), "fixture missing: {} (the shared traces must sit beside the repository)", p.display());
    p
}

fn trace(rel: &str) -> Trace {
    load(&shared(rel), &ImportOptions::default()).unwrap()
}

fn validate(t: &Trace, spec: Option<&str>) -> BfcValidation {
    let v = validate_bfc(t, t.devices()[0], spec).unwrap();
    eprintln!("{spec:?}: {}", serde_json::to_string(&v).unwrap());
    v
}

fn assert_exact(v: &BfcValidation) {
    assert_eq!((v.chunk_match, v.in_use_match), (1.0, 1.0), "{v:?}");
    assert_eq!(v.peak_in_use_recorded, Some(v.peak_in_use_replayed), "{v:?}");
    assert!(v.ok, "{v:?}");
}

#[test]
fn kerascnn_imports_every_bfc_event_of_its_three_threads() {
    let t = trace("tf/kerascnn__bfc.xplane.pb");
    let info = trace_info(&t);
    // README: 3,615 allocations and 3,478 frees through bfc_cpu_allocator_for_gpu, from an
    // empty allocator.
    assert_eq!((info.allocs, info.frees), (3615, 3478));
    assert_eq!(info.seed_allocs, 0);
    assert!(!t.metadata.seeded);
    assert_eq!(t.metadata.extra["allocator"], "bfc_cpu_allocator_for_gpu");
    assert!(t.metadata.extra["ordering"]["threads"].as_u64().unwrap() >= 2, "several threads allocate");
    // TF's CPU BFC limit (TF_CPU_BFC_MEM_LIMIT_IN_MB default: 64 GiB), as its events imply.
    assert_eq!(t.metadata.devices[0].memory_cap, Some(64 << 30));
    // Context columns: the op and the shape of what was allocated.
    let c = t.column("op").unwrap();
    assert!(c.len() == t.num_events() && arrow_array::Array::null_count(c.as_ref()) < t.num_events());
}

#[test]
fn kerascnn_replays_event_exact() {
    let t = trace("tf/kerascnn__bfc.xplane.pb");
    let v = validate(&t, None);
    assert_eq!(v.events, 3615 + 3478);
    assert_eq!(v.policy, "bfc:allow_growth=true,garbage_collection=false,memory_limit=68719476736");
    assert_eq!(v.settings_source, "recorded");
    assert_exact(&v);
}

#[test]
fn jaxlm_imports_the_device_allocator_by_default() {
    let t = trace("jax/jaxlm__default.xplane.pb.xz");
    assert_eq!(t.metadata.extra["allocator"], "GPU_0_bfc");
    let allocators = t.metadata.extra["allocators"].as_object().unwrap();
    assert!(allocators.contains_key("xla_gpu_host_bfc"));
    let info = trace_info(&t);
    // jaxlm__default.json: num_allocs 1829 (the whole run is inside the window).
    assert_eq!(info.allocs, 1829);
    let d = &t.metadata.devices[0];
    // The H200's memory (device plane) and the run's bytes_limit (.json).
    assert_eq!(d.total_memory, Some(150_109_880_320));
    assert_eq!(d.memory_cap, Some(112_583_507_968));
    assert_eq!(t.metadata.source_version.as_deref(), Some("0.11.2"));
    // The pinned-host allocator on request.
    let host = load(
        &shared("jax/jaxlm__default.xplane.pb.xz"),
        &ImportOptions { allocator: Some("xla_gpu_host_bfc".into()), ..Default::default() },
    )
    .unwrap();
    assert_eq!(host.metadata.devices[0].memory_cap, Some(64 << 30), "xla_gpu_host_bfc: kGpuHostMemoryLimitBytes");
    assert_exact(&validate(&host, None));
}

#[test]
fn jaxlm_default_preallocated_replays_event_exact() {
    let t = trace("jax/jaxlm__default.xplane.pb.xz");
    let v = validate(&t, None);
    assert_eq!(v.policy, "bfc:allow_growth=false,garbage_collection=false,memory_limit=112583507968");
    assert_exact(&v);
    // README: peak_bytes_in_use 16,726,397,696; pool_bytes 112,583,507,968.
    assert_eq!(v.peak_in_use_replayed, 16_726_397_696);
    assert_eq!((v.pool_bytes_recorded, v.pool_bytes_replayed), (Some(112_583_507_968), 112_583_507_968));
    // The `jax` preset derives the same allocator from the device's memory alone.
    assert_exact(&validate(&t, Some("jax")));
    // The wrong setting is caught: growing regions drift from the preallocated run.
    assert!(!validate(&t, Some("jax:preallocate=false")).ok);
}

#[test]
fn jaxlm_noprealloc_growing_replays_event_exact() {
    let t = trace("jax/jaxlm__noprealloc.xplane.pb.xz");
    let v = validate(&t, None);
    assert_eq!(v.policy, "bfc:allow_growth=true,garbage_collection=false,memory_limit=112583507968");
    assert_exact(&v);
    // README: peak_bytes_in_use 16,681,340,928; pool_bytes 21,476,933,632.
    assert_eq!(v.peak_in_use_replayed, 16_681_340_928);
    assert_eq!((v.pool_bytes_recorded, v.pool_bytes_replayed), (Some(21_476_933_632), 21_476_933_632));
    assert_eq!(v.peak_pool_bytes_replayed, 21_476_933_632);
    assert_exact(&validate(&t, Some("jax:preallocate=false")));
    assert_exact(&validate(&t, Some("tf:allow_growth=true,memory_limit=112583507968")));
}

fn replay(t: &Trace, spec: &str) -> allocreplay_core::engine::DeviceReplay {
    let d = t.devices()[0];
    let info = t.metadata.device(d);
    let ctx = PolicyContext { metadata: &t.metadata, device: info, capacity: None };
    let mut p = allocreplay_core::registry::build(spec, &ctx).unwrap();
    replay_device(t, d, p.as_mut(), &ReplayOptions { capacity: info.and_then(|i| i.total_memory), ..Default::default() })
}

#[test]
fn a_pytorch_trace_replays_under_bfc_tf_and_jax() {
    let t = trace("pytorch/gpt2_train__default.pickle.xz");
    let live = trace_info(&t).peak_live_requested_bytes;
    // JAX's default on the H200 (150,109,880,320 bytes): one region of 0.75 of it rounded up
    // to 2 MiB, the bytes_limit of the jax runs.
    let jax = replay(&t, "jax");
    assert_eq!(jax.stats.peak_reserved, 112_583_507_968);
    // TF's default: device memory minus 1800 MiB (compute capability 9).
    let tf = replay(&t, "tf");
    assert_eq!(tf.stats.peak_reserved, 150_109_880_320 - 1800 * (1 << 20));
    for r in [&jax, &tf, &replay(&t, "bfc"), &replay(&t, "jax:preallocate=false"), &replay(&t, "jax:allocator=platform")] {
        assert!(r.first_oom.is_none(), "{}", r.policy);
        assert!(r.stats.peak_allocated >= live && r.stats.peak_reserved >= r.stats.peak_allocated, "{}: {:?}", r.policy, r.stats);
    }
}

#[test]
fn an_xplane_trace_replays_under_pytorch() {
    let t = trace("jax/jaxlm__noprealloc.xplane.pb.xz");
    let r = replay(&t, "pytorch");
    assert!(r.first_oom.is_none());
    // Every request was served: 1829 allocations and 1794 frees.
    let c = t.columns();
    let requests = (0..t.num_events()).filter(|&i| Action::from_code(c.action[i]).is_some_and(|a| a.is_request())).count();
    assert_eq!(r.events, requests);
    assert!(r.stats.peak_allocated >= trace_info(&t).peak_live_requested_bytes);
}

#[test]
fn without_its_json_a_growing_jax_capture_is_recognised_by_replay() {
    // No .json: the environment (XLA_PYTHON_CLIENT_PREALLOCATE=false) is unknown, so both
    // settings are replayed and the growing one matches every event.
    let dir = std::env::temp_dir().join(format!("allocreplay-nojson-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("run.xplane.pb.xz");
    std::fs::copy(shared("jax/jaxlm__noprealloc.xplane.pb.xz"), &p).unwrap();
    let t = load(&p, &ImportOptions::default()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(t.metadata.extra.get("recorded_stats").is_none());
    let v = validate(&t, None);
    assert_eq!(v.settings_source, "inferred");
    assert!(v.policy.contains("allow_growth=true"), "{v:?}");
    assert_exact(&v);
}
