"""TensorFlow / JAX profiler captures end to end: import, info, replay under the BFC family,
validate against the real runs (ground truth: shared/traces/README.md and each run's .json),
and one-line errors for captures that cannot be read."""

from __future__ import annotations

import json
import lzma

import pytest

import allocreplay
from allocreplay import errors
from conftest import REPO

SHARED = REPO.parent / "shared" / "traces"


def shared(rel: str):
    p = SHARED / rel
    assert p.is_file(), f"missing fixture {p}: shared/ must sit beside the repository"
    return p


KERAS = "tf/kerascnn__bfc.xplane.pb"
JAX_DEFAULT = "jax/jaxlm__default.xplane.pb.xz"
JAX_NOPREALLOC = "jax/jaxlm__noprealloc.xplane.pb.xz"


def recorded_stats(rel: str) -> dict:
    p = shared(rel)
    return json.loads(p.with_name(p.name.split(".")[0] + ".json").read_text())["memory_stats"]


@pytest.mark.parametrize("rel", [JAX_DEFAULT, JAX_NOPREALLOC])
def test_jax_runs_validate_event_exact_with_their_recorded_stats(rel):
    stats = recorded_stats(rel)
    v = allocreplay.validate_bfc(str(shared(rel)))
    assert v["chunk_match"] == 1.0 and v["in_use_match"] == 1.0, v
    assert v["peak_in_use_replayed"] == stats["peak_bytes_in_use"]
    assert v["pool_bytes_replayed"] == stats["pool_bytes"]
    assert v["allocs"] == stats["num_allocs"]
    assert v["ok"]


def test_keras_cpu_bfc_validates_after_an_arrow_round_trip(tmp_path):
    out = tmp_path / "k.arrow"
    t = allocreplay.load(shared(KERAS))
    t.save(out)
    v = allocreplay.validate_bfc(allocreplay.load(out))
    # README: 3,615 allocations and 3,478 frees.
    assert (v["allocs"], v["frees"]) == (3615, 3478)
    assert v["ok"], v
    # The recorded peak in use is the largest peak_bytes_in_use of the events.
    assert v["peak_in_use_recorded"] == t.events["peak_in_use_bytes"].max()


def test_the_allocator_option_picks_the_host_allocator(run_cli):
    r = run_cli("info", shared(JAX_DEFAULT), "--allocator", "xla_gpu_host_bfc", "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info["source"] == "xplane" and info["allocs"] > 0
    r = run_cli("info", shared(JAX_DEFAULT), "--allocator", "GPU_7_bfc")
    assert r.code == 2
    assert r.err.count("\n") == 1 and "GPU_7_bfc" in r.err and "GPU_0_bfc" in r.err


def test_replay_a_capture_under_the_bfc_presets(run_cli):
    r = run_cli("replay", shared(JAX_NOPREALLOC), "-p", "jax", "-p", "jax:preallocate=false", "-p", "tf", "--json")
    assert r.code == 0, r.err
    rows = {row["policy"]: row for row in json.loads(r.out)}
    # Preallocated: one region of 0.75 x the H200's memory rounded up to 2 MiB (the runs'
    # bytes_limit); growing: the noprealloc run's pool_bytes.
    assert rows["jax"]["peak_reserved_bytes"] == recorded_stats(JAX_NOPREALLOC)["bytes_limit"]
    assert rows["jax:preallocate=false"]["peak_reserved_bytes"] == recorded_stats(JAX_NOPREALLOC)["pool_bytes"]
    assert rows["jax:preallocate=false"]["peak_allocated_bytes"] == recorded_stats(JAX_NOPREALLOC)["peak_bytes_in_use"]
    assert rows["tf"]["num_device_alloc"] == 1


def test_a_pytorch_trace_replays_under_bfc_and_jax():
    r = allocreplay.replay(str(REPO / "traces" / "two_streams__default.pickle.xz"), ["bfc", "jax:allocator=platform"], placements=False)
    s = {row["policy"]: row for row in r.summary.iter_rows(named=True)}
    assert s["bfc"]["num_ooms"] == 0 and s["bfc"]["peak_reserved_bytes"] >= s["bfc"]["peak_allocated_bytes"]
    # The platform allocator caches nothing: reserved is allocated.
    assert s["jax:allocator=platform"]["peak_reserved_bytes"] == s["jax:allocator=platform"]["peak_allocated_bytes"]


def test_unreadable_captures_are_one_line_errors(tmp_path, run_cli):
    raw = shared(KERAS).read_bytes()
    truncated = tmp_path / "cut.xplane.pb"
    truncated.write_bytes(raw[: len(raw) // 2])
    other = tmp_path / "profile.xplane.pb.xz"  # a pprof protobuf, not an XSpace
    other.write_bytes(lzma.compress(__import__("gzip").decompress(shared("jax/jaxlm__default.memprof.pb").read_bytes())))
    for path, words in [(truncated, "truncated"), (other, "not a profiler capture")]:
        with pytest.raises(errors.TraceFormatError, match=words):
            allocreplay.load(path)
        r = run_cli("info", path)
        assert r.code == 2 and r.err.startswith("error: ") and r.err.count("\n") == 1 and words in r.err, r.err
