"""`export-snapshot` (a PyTorch memory snapshot of the simulated allocator) and
`export-perfetto` (Chrome trace-event JSON counters)."""

from __future__ import annotations

import json
import pickle

import polars as pl
import pytest

import allocreplay
from allocreplay import export
from conftest import TRACES, run_subprocess

REQUESTS = ["alloc", "free_requested", "free_completed"]


def _requests(t: allocreplay.Trace) -> pl.DataFrame:
    e = t.events.with_columns(pl.col("action").cast(pl.String))
    return e.filter(pl.col("action").is_in(REQUESTS)).select("action", "alloc_id", "size", "stream", "time_ns", "stack_id")


def _segment_events(t: allocreplay.Trace) -> pl.DataFrame:
    e = t.events.with_columns(pl.col("action").cast(pl.String))
    return e.filter(pl.col("action").str.starts_with("segment_")).select("action", "size")


@pytest.mark.parametrize(
    ("name", "policy", "peak"),
    [
        # The real runs' reserved_bytes.all.peak (traces/README.md).
        ("two_streams__default", "pytorch", 3_011_510_272),
        ("two_streams__expandable", "pytorch:expandable_segments:True", 2_604_662_784),
    ],
)
def test_a_replay_under_the_recorded_settings_reimports_to_the_original(tmp_path, name, policy, peak):
    original = allocreplay.load(TRACES / f"{name}.pickle.xz")
    out = tmp_path / "sim.pickle"
    run = run_subprocess("export-snapshot", TRACES / f"{name}.pickle.xz", "--policy", policy, "-o", out)
    assert run.code == 0, run.err
    back = allocreplay.load(out)
    # The same requests, in the same order, with the same sizes, streams, times and stacks...
    assert _requests(back).equals(_requests(original))
    assert back.frames.equals(original.frames) and back.stacks.equals(original.stacks)
    # ...and the same device allocations (segment_alloc/free, map/unmap), in order and size.
    assert _segment_events(back).height > 0
    assert _segment_events(back).equals(_segment_events(original))
    assert allocreplay.replay(back, "pytorch:recorded").summary["peak_reserved_bytes"][0] == peak
    # The exported allocator_settings make `validate` replay it under the same policy.
    v = allocreplay.validate(back)
    assert v["ok"] and v["address_match"] == 1.0


def test_final_segments_are_covered_by_their_blocks(tmp_path):
    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    snap = export.write_snapshot(t, "pytorch", tmp_path / "s.pickle")
    with open(tmp_path / "s.pickle", "rb") as f:  # our own file: trusted
        assert pickle.load(f) == snap
    final = allocreplay.replay(t, "pytorch").summary.row(0, named=True)
    assert sum(s["total_size"] for s in snap["segments"]) == final["final_reserved_bytes"]
    for s in snap["segments"]:
        # torch.cuda._memory_viz.segsum asserts exactly this.
        assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
        assert s["allocated_size"] == sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
        assert s["active_size"] == sum(b["size"] for b in s["blocks"] if b["state"] != "inactive")
        assert all(b["state"] in ("active_allocated", "active_pending_free", "inactive") for b in s["blocks"])
    # PyTorch's allocated_bytes drops when the program frees (a pending block stays active).
    assert sum(s["allocated_size"] for s in snap["segments"]) == final["final_allocated_bytes"]
    # A segment_alloc precedes the first alloc placed in it.
    first = snap["device_traces"][0][:2]
    assert [e["action"] for e in first] == ["segment_alloc", "alloc"]
    assert first[0]["addr"] <= first[1]["addr"] < first[0]["addr"] + first[0]["size"]


def test_an_oom_is_exported_as_pytorch_records_it(tmp_path):
    # Under 2.25 GiB, expandable segments fail a request of two_streams (see test_report).
    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    snap = export.snapshot(t, "pytorch:expandable_segments:True", capacity="2.25GiB")
    ooms = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    r = allocreplay.replay(t, "pytorch:expandable_segments:True", "2.25GiB").summary.row(0, named=True)
    assert len(ooms) == r["num_ooms"] > 0
    assert ooms[0]["size"] == r["first_oom_requested_bytes"] and "device_free" in ooms[0]


def test_perfetto_counters(tmp_path):
    out = tmp_path / "memory.json"
    run = run_subprocess("export-perfetto", TRACES / "two_streams__default.pickle.xz", "-p", "pytorch", "-p", "pytorch:expandable_segments:True", "-o", out)
    assert run.code == 0, run.err
    data = json.loads(out.read_text())
    ev = data["traceEvents"]
    counters = [e for e in ev if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"pytorch", "pytorch:expandable_segments:True"}
    assert [e["args"]["name"] for e in ev if e["ph"] == "M"] == ["device 0"]
    peak = {p: max(e["args"]["reserved"] for e in counters if e["name"] == p) for p in ("pytorch", "pytorch:expandable_segments:True")}
    assert peak == {"pytorch": 3_011_510_272, "pytorch:expandable_segments:True": 2_604_662_784}
    ts = [e["ts"] for e in counters if e["name"] == "pytorch"]
    assert ts == sorted(ts) and ts[0] >= 0
    assert all(e["args"]["allocated"] <= e["args"]["reserved"] for e in counters)


def test_export_errors_are_one_line(tmp_path):
    run = run_subprocess("export-snapshot", TRACES / "two_streams__default.pickle.xz", "--policy", "ideal", "-o", tmp_path / "x.pickle")
    assert run.code == 2 and run.err.count("\n") == 1 and "offline bound" in run.err
    run = run_subprocess("export-snapshot", TRACES / "two_streams__default.pickle.xz", "-o", tmp_path / "no" / "x.pickle")
    assert run.code == 2 and run.err.count("\n") == 1 and "x.pickle" in run.err
