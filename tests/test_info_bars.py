"""`allocreplay info --json` against counts worked out independently from every real PyTorch
capture in ../shared/traces/pytorch."""

from __future__ import annotations

import json

import pytest

from conftest import TRACES, load_snapshot, run_clirunner, shared, shared_pytorch_pickles, sidecar

SEGMENT_DELTA = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
INFO_KEYS = {
    "format_version",
    "source",
    "devices",
    "events",
    "allocs",
    "frees",
    "streams",
    "pools",
    "peak_live_requested_bytes",
    "recorded_peak_reserved_bytes",
    "duration_s",
    "seed_allocs",
    "seed_segments",
}


def expected_from_snapshot(snap: dict) -> dict:
    """Counts and the recorded peak reserved, computed from the snapshot dict by hand."""
    entries = [e for dev in snap["device_traces"] for e in dev]
    allocs = sum(e["action"] == "alloc" for e in entries)
    frees = sum(e["action"] == "free_completed" for e in entries)
    # Bytes reserved before the first recorded entry: what the final segments hold minus what
    # the history added (0 unless the ring buffer dropped the start).
    final_total = sum(s["total_size"] for s in snap["segments"])
    net = sum(SEGMENT_DELTA.get(e["action"], 0) * e["size"] for e in entries)
    reserved = final_total - net
    assert reserved >= 0
    peak = reserved
    # Devices are imported one after another; the total over devices is summed in that order.
    for dev in snap["device_traces"]:
        for e in dev:
            reserved += SEGMENT_DELTA.get(e["action"], 0) * e["size"]
            peak = max(peak, reserved)
    has_segments = bool(snap["segments"]) or any(e["action"] in SEGMENT_DELTA for e in entries)
    return {
        "entries": len(entries),
        "allocs": allocs,
        "frees": frees,
        "recorded_peak_reserved_bytes": peak if has_segments else None,
        "truncated": final_total != net,
    }


@pytest.mark.parametrize("path", shared_pytorch_pickles(), ids=lambda p: p.name.split(".")[0])
def test_info_counts_and_recorded_peak_match_the_pickle(path):
    r = run_clirunner("info", path, "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info.keys() >= INFO_KEYS
    want = expected_from_snapshot(load_snapshot(path))
    assert info["allocs"] == want["allocs"]
    assert info["frees"] == want["frees"]
    assert info["recorded_peak_reserved_bytes"] == want["recorded_peak_reserved_bytes"]
    assert info["format_version"] == 1 and info["source"] == "pytorch"
    # Seeds only where the history was truncated, and counted apart from allocs.
    assert (info["seed_segments"] > 0) == want["truncated"]
    if want["truncated"]:
        assert info["events"] > want["entries"]
    else:
        assert info["events"] == want["entries"]
    # The run's own record of its history length, where the capture's .json has it.
    if "trace_entries" in sidecar(path):
        assert want["entries"] == sidecar(path)["trace_entries"]


def test_ring20k_peak_reserved_is_the_full_runs():
    path = shared("gpt2_train__default_ring20k.pickle.xz")
    info = json.loads(run_clirunner("info", path, "--json").out)
    # gpt2_train__default_ring20k.json: memory_stats["reserved_bytes.all.peak"] of the full run.
    assert sidecar(path)["memory_stats"]["reserved_bytes.all.peak"] == 22_733_127_680
    assert info["recorded_peak_reserved_bytes"] == 22_733_127_680
    assert info["seed_allocs"] > 0 and info["seed_segments"] > 0
    # The ring buffer kept 20,000 entries: the allocs/frees counted are only those.
    assert info["allocs"] + info["frees"] < 20_000


def test_full_runs_recorded_peak_equals_memory_stats():
    # Complete histories: the running sum of segment sizes peaks where PyTorch's own
    # reserved_bytes.all.peak did.
    for name in ["gpt2_train__default", "gpt2_train__expandable", "two_streams__default", "compiled_mlp__default"]:
        path = shared(f"{name}.pickle.xz")
        info = json.loads(run_clirunner("info", path, "--json").out)
        assert info["recorded_peak_reserved_bytes"] == sidecar(path)["memory_stats"]["reserved_bytes.all.peak"], name


def test_multi_device_capture_reports_its_device():
    # ddp rank 1: the history sits at device index 1 (index 0 is empty).
    info = json.loads(run_clirunner("info", shared("ddp2gpu__default_rank1.pickle.xz"), "--json").out)
    assert info["devices"] == [1]
    assert info["recorded_peak_reserved_bytes_per_device"] == {"1": 13_895_729_152}


def test_human_summary_uses_binary_units():
    r = run_clirunner("info", TRACES / "two_streams__default.pickle.xz")
    assert r.code == 0, r.err
    # 3,011,510,272 B = 2.80 GiB (two_streams__default.json reserved_bytes.all.peak)
    assert "2.80 GiB" in r.out
    assert "events" in r.out and "1,832" in r.out


def test_hand_made_snapshot_without_segments(tmp_path):
    # A snapshot as torch.cuda.memory._snapshot() shapes it, with allocations only: no segment
    # was recorded, so the recorded peak reserved is null, not 0.
    import pickle

    def entry(action, addr, size, t):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": []}

    snap = {
        "segments": [],
        "device_traces": [
            [
                entry("alloc", 0x1000, 100, 1_000),
                entry("alloc", 0x2000, 300, 2_000),
                entry("free_requested", 0x1000, 100, 3_000),
                entry("free_completed", 0x1000, 100, 3_000),
                entry("alloc", 0x3000, 50, 4_000),
                entry("free_requested", 0x2000, 300, 5_000),
                entry("free_completed", 0x2000, 300, 5_500),
            ]
        ],
        "allocator_settings": {},
    }
    path = tmp_path / "hand.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    info = json.loads(run_clirunner("info", path, "--json").out)
    assert info["recorded_peak_reserved_bytes"] is None
    assert (info["allocs"], info["frees"], info["free_requests"]) == (3, 2, 2)
    # Live requested bytes: 100, 400, 300, 350, 50 -> peak 400.
    assert info["peak_live_requested_bytes"] == 400
    assert info["seed_allocs"] == 0 and info["seed_segments"] == 0
    # First to last event: 1,000 us to 5,500 us.
    assert info["duration_s"] == pytest.approx(0.0045)
    assert info["devices"] == [0] and info["streams"] == 1
