"""The replay front: capacity strings, the result tables, the CLI's table / JSON / -o output.
Numbers compared against are the recorded runs' own (the captures' .json) or worked out here."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pyarrow as pa
import pytest

import allocreplay
from allocreplay import errors
from conftest import TRACES, shared, sidecar

TWO = TRACES / "two_streams__default.pickle.xz"
H200 = 150_109_880_320  # two_streams__default.json device_total_bytes
SUMMARY_KEYS = [
    "policy",
    "device",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_requested_bytes",
    "num_device_alloc",
    "num_device_free",
    "num_alloc_retries",
    "num_ooms",
    "first_oom_event",
    "events",
    "replay_seconds",
]


@pytest.mark.parametrize(
    "text,value",
    [
        ("80GiB", 80 * 2**30),
        ("81920MiB", 81920 * 2**20),
        ("16GB", 16 * 10**9),
        ("16 gb", 16 * 10**9),
        ("1.5GiB", 3 * 2**29),
        ("512KiB", 512 * 1024),
        ("17179869184", 17179869184),
        ("0.5", 0.5),
        ("1.0", 1.0),
    ],
)
def test_parse_capacity(text, value):
    got = allocreplay.parse_capacity(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ["", "GiB", "0", "1.5", "-4GiB", "12XB", "abc", "99999999999999999999999"])
def test_parse_capacity_rejects(text):
    with pytest.raises(errors.InvalidArgumentError, match="capacity"):
        allocreplay.parse_capacity(text)


def test_bad_capacity_in_cli_is_one_line(run_cli):
    r = run_cli("replay", TWO, "--capacity", "12XB")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and r.err.startswith("error: capacity '12XB'"), r.err


def capacities(run_cli, cap):
    r = run_cli("replay", TWO, "--capacity", cap, "--json")
    assert r.code == 0, r.err
    return [row["capacity_bytes"] for row in json.loads(r.out)]


def test_capacity_units_and_fractions_reach_the_replay(run_cli):
    assert capacities(run_cli, "80GiB") == [85_899_345_920]
    assert capacities(run_cli, "16GB") == [16_000_000_000]
    # A fraction of the trace's device memory: the H200's total from the capture's .json.
    assert sidecar(TWO)["device_total_bytes"] == H200
    assert capacities(run_cli, "0.5") == [H200 // 2]
    assert capacities(run_cli, "1.0") == [H200]
    # No --capacity and no recorded cap: the device's memory less the CUDA context's share,
    # where filling the H200 through the caching allocator stopped (149,369,651,200 reserved
    # bytes and 13,762,560 free; tests/data/va-h200-580.159.txt, footprint).
    rows = json.loads(run_cli("replay", TWO, "--json").out)
    assert [(r["capacity_bytes"], r["capacity_source"]) for r in rows] == [(149_369_651_200 + 13_762_560, "device_total_minus_cuda_context")]
    assert json.loads(run_cli("replay", TWO, "--capacity", "80GiB", "--json").out)[0]["capacity_source"] == "--capacity"


def test_torch_oom_replays_its_recorded_retry_and_oom_with_no_flags(run_cli):
    # traces/torch_oom.arrow: a growing cache under set_per_process_memory_fraction (1 GiB) until
    # OutOfMemoryError; its recorded stats: 1 alloc retry, 1 OOM (traces/README.md).
    r = run_cli("replay", TRACES / "torch_oom.arrow", "--policy", "pytorch:recorded", "--json")
    assert r.code == 0, r.err
    (row,) = json.loads(r.out)
    assert (row["capacity_bytes"], row["capacity_source"]) == (1 << 30, "recorded_cap")
    assert (row["num_alloc_retries"], row["num_ooms"]) == (1, 1)
    out = run_cli("replay", TRACES / "torch_oom.arrow", "--policy", "pytorch:recorded").out
    assert "limit: 1,073,741,824 bytes" in out and "set_per_process_memory_fraction" in out


def test_fraction_needs_recorded_device_memory(tmp_path, run_cli):
    src = tmp_path / "nometa.pickle.xz"
    shutil.copy(TWO, src)  # no sidecar .json: total memory unknown
    r = run_cli("replay", src, "--capacity", "0.5")
    assert r.code == 2 and "fraction" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    with pytest.raises(errors.InvalidArgumentError):
        allocreplay.replay(src, "pytorch", 0.5)
    # Bytes work without it.
    assert allocreplay.replay(src, "pytorch", "4GiB").summary["capacity_bytes"].to_list() == [4 * 2**30]


def test_summary_columns_and_default_policy():
    res = allocreplay.replay(allocreplay.load(TWO))
    s = res.summary
    assert set(SUMMARY_KEYS) <= set(s.columns)
    assert s["policy"].to_list() == ["pytorch"] and s["device"].to_list() == [0]
    assert s.schema["first_oom_event"] == pl.UInt64 and s["first_oom_event"].to_list() == [None]
    ev = allocreplay.load(TWO).events
    # Every request event of the device is replayed.
    n_requests = ev.filter(pl.col("action").cast(pl.String).is_in(["alloc", "free_requested", "free_completed"])).height
    assert s["events"].to_list() == [n_requests]


def test_replays_match_the_recorded_runs_of_each_setting():
    # The same requests under the default and the expandable-segments setting against the two
    # real runs (two_streams__default.json, two_streams__expandable.json: memory_stats).
    res = allocreplay.replay(TWO, ["pytorch", "pytorch:expandable_segments:True"])
    s = res.summary
    for row, capture in zip(s.iter_rows(named=True), ["two_streams__default", "two_streams__expandable"]):
        stats = sidecar(TRACES / f"{capture}.pickle.xz")["memory_stats"]
        assert row["peak_reserved_bytes"] == stats["reserved_bytes.all.peak"], capture
        assert row["peak_allocated_bytes"] == stats["allocated_bytes.all.peak"], capture
        assert row["num_ooms"] == stats["num_ooms"] == 0


def test_timeline_segments_placements_are_consistent_with_the_summary():
    res = allocreplay.replay(TWO, ["pytorch", "pytorch:expandable_segments:True"], timeline_points=100)
    s, tl, seg, pl_ = res.summary, res.timeline, res.segments, res.placements
    assert tl.columns == ["policy", "device", "event", "time_ns", "allocated_bytes", "reserved_bytes"]
    for row in s.iter_rows(named=True):
        mine = tl.filter(pl.col("policy") == row["policy"])
        assert 0 < mine.height <= 100
        # Downsampling keeps each bucket's maximum: the peaks survive.
        assert mine["reserved_bytes"].max() == row["peak_reserved_bytes"]
        assert mine["allocated_bytes"].max() == row["peak_allocated_bytes"]
        assert mine["event"].is_sorted()
        # The segments held at the end add up to what is reserved at the end.
        assert seg.filter(pl.col("policy") == row["policy"])["size"].sum() == row["final_reserved_bytes"]
    # One placement per alloc served, per policy.
    n_allocs = allocreplay.load(TWO).events.filter(pl.col("action") == "alloc").height
    assert pl_.group_by("policy").len()["len"].to_list() == [n_allocs, n_allocs]


def test_small_capacity_ooms_no_later_than_the_live_bytes_exceed_it():
    cap = 1 << 30
    res = allocreplay.replay(TWO, "pytorch", "1GiB", placements=False)
    row = res.summary.row(0, named=True)
    assert row["num_ooms"] > 0 and row["peak_reserved_bytes"] <= cap
    # By hand: live requested bytes after each event; the allocator cannot hold them once
    # they exceed the capacity, so the first OOM is at or before that event.
    ev = allocreplay.load(TWO).events.with_row_index("i")
    sign = pl.when(pl.col("action") == "alloc").then(1).when(pl.col("action") == "free_completed").then(-1).otherwise(0)
    live = ev.with_columns((sign * pl.col("size").cast(pl.Int64)).cum_sum().alias("live"))
    first_over = live.filter(pl.col("live") > cap)["i"][0]
    assert row["first_oom_event"] <= first_over
    assert ev.row(row["first_oom_event"], named=True)["action"] == "alloc"
    assert res.placements.height == 0


def test_multi_device_trace_replays_its_device():
    res = allocreplay.replay(shared("ddp2gpu__default_rank1.pickle.xz"), "pytorch", placements=False)
    assert res.summary["device"].to_list() == [1]
    # ddp2gpu__default_rank1.json memory_stats_per_device (README): peak reserved of device 1.
    per = sidecar(shared("ddp2gpu__default_rank1.pickle.xz"))["memory_stats_per_device"]["1"]
    assert res.summary["peak_reserved_bytes"].to_list() == [per["reserved_bytes.all.peak"]]


def test_cli_table_json_and_output_file(tmp_path, run_cli):
    out = tmp_path / "result.arrow"
    r = run_cli("replay", TWO, "--policy", "pytorch", "--policy", "pytorch:expandable_segments:True", "--json", "-o", out)
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [x["policy"] for x in rows] == ["pytorch", "pytorch:expandable_segments:True"]
    for x in rows:
        assert set(SUMMARY_KEYS) <= x.keys()
    table = pa.ipc.open_file(out).read_all()
    assert table.column("peak_reserved_bytes").to_pylist() == [x["peak_reserved_bytes"] for x in rows]
    r = run_cli("replay", TWO, "-p", "pytorch", "-p", "pytorch:expandable_segments:True")
    assert r.code == 0, r.err
    # Readable table: binary units (3,011,510,272 B = 2.80 GiB; 2,604,662,784 B = 2.43 GiB).
    assert "2.80 GiB" in r.out and "2.43 GiB" in r.out and "pytorch:expandable_segments:True" in r.out


def test_replay_reads_arrow_traces(tmp_path, run_cli):
    arrow = tmp_path / "two.arrow"
    allocreplay.load(TWO).save(arrow)
    a = json.loads(run_cli("replay", arrow, "--json").out)
    b = json.loads(run_cli("replay", TWO, "--json").out)
    for x in a + b:
        x.pop("replay_seconds")
    assert a == b


def test_the_cli_says_what_to_do_when_a_policy_does_not_fit(run_cli):
    # 14 GiB: below the peak gpt2_train's default allocator needs (the real capped run reserved
    # 16,827,547,648 bytes, gpt2_train__default_capped.json); two_streams fits its device.
    gpt2 = shared("gpt2_train__default.pickle.xz")
    run = run_cli("replay", gpt2, "-p", "pytorch", "-p", "pytorch:expandable_segments:True", "--capacity", "14GiB")
    assert run.code == 0, run.err
    hint = [x for x in run.out.splitlines() if "not fit this limit" in x]
    assert len(hint) == 1 and hint[0].startswith("pytorch, pytorch:expandable_segments:True do not fit") and "allocreplay tune" in hint[0]
    fits = run_cli("replay", TRACES / "two_streams__default.pickle.xz")
    assert fits.code == 0 and "not fit" not in fits.out
