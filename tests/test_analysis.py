"""`allocreplay.analysis`: the state at the peak, call sites, fragmentation, OOMs, diffs, compare.

Truth: ../shared/traces/README.md (the real runs' `reserved_bytes.all.peak`): gpt2_train
default 22,733,127,680 with 0 OOMs, expandable_segments 16,483,614,720. two_streams: default 3,011,510,272, expandable 2,604,662,784.
"""

from __future__ import annotations

import polars as pl
import pytest

import allocreplay
from allocreplay import analysis
from conftest import TRACES, run_subprocess, shared

GPT2_DEFAULT_PEAK = 22_733_127_680
GPT2_EXPANDABLE_PEAK = 16_483_614_720
EXPANDABLE = "pytorch:expandable_segments:True"


@pytest.fixture(scope="module")
def gpt2() -> allocreplay.Trace:
    return allocreplay.load(shared("gpt2_train__default.pickle.xz"))


@pytest.fixture(scope="module")
def two() -> allocreplay.Trace:
    return allocreplay.load(TRACES / "two_streams__default.pickle.xz")


def test_state_at_the_peak_holds_the_recorded_peak_and_adds_up(gpt2):
    st = analysis.state(gpt2, "pytorch")
    s = st.summary.row(0, named=True)
    # The segments held at the peak are the real run's peak reserved.
    assert s["reserved_bytes"] == GPT2_DEFAULT_PEAK
    assert st.segments["size"].sum() == GPT2_DEFAULT_PEAK
    # Every segment is exactly covered by its blocks; allocated blocks are the live allocations.
    per_seg = st.blocks.group_by("segment").agg(pl.col("size").sum().alias("covered"))
    j = st.segments.join(per_seg, left_on="addr", right_on="segment")
    assert j.height == st.segments.height and (j["covered"] == j["size"]).all()
    assert st.blocks.filter(pl.col("allocated"))["size"].sum() == st.live["size"].sum() == s["allocated_bytes"]
    assert s["free_cached_bytes"] == s["reserved_bytes"] - s["allocated_bytes"]
    assert s["largest_free_block_bytes"] == st.segments["largest_hole_bytes"].max()
    assert s["live_allocations"] == st.live.height
    # Live means allocated at or before the event and not taken back by then.
    ev = gpt2.events.with_row_index("i")
    freed = set(ev.filter((pl.col("action") == "free_completed") & (pl.col("i") <= s["event"]))["alloc_id"].to_list())
    assert not freed & set(st.live["alloc_id"].to_list())
    assert (st.live["alloc_event"] <= s["event"]).all()


def test_peak_allocated_state_is_the_replay_peak(gpt2):
    r = allocreplay.replay(gpt2, "pytorch").summary.row(0, named=True)
    s = analysis.state(gpt2, "pytorch", at="peak_allocated").summary.row(0, named=True)
    assert s["allocated_bytes"] == r["peak_allocated_bytes"]


def _expected_call_site(frames: dict, stack: list[int]) -> str | None:
    # Independent of analysis.call_sites: the innermost frame outside installed packages.
    for f in stack:
        name = frames["filename"][f]
        if "site-packages" not in name and "dist-packages" not in name and "/lib/python3" not in name:
            return f"{frames['name'][f]} ({name}:{frames['line'][f]})"
    return None


def test_call_sites_are_the_users_innermost_frames(gpt2):
    # gpt2_train__default was captured with stacks="python".
    from allocreplay._api._build import frame_table_dict

    frames = frame_table_dict(gpt2.frames, gpt2.stacks)
    sites = analysis.call_sites(gpt2)
    assert sites.height == len(frames["stacks"]) > 0
    for row in sites.iter_rows(named=True):
        stack = frames["stacks"][row["stack_id"]]
        want = _expected_call_site(frames, stack)
        f0 = stack[0]
        innermost = f"{frames['name'][f0]} ({frames['filename'][f0]}:{frames['line'][f0]})"
        assert row["innermost_frame"] == innermost
        assert row["call_site"] == (want or innermost)
    f, s = analysis.frame_tables(gpt2)
    assert f.columns == ["frame_id", "filename", "line", "name"] and s.columns == ["stack_id", "depth", "frame_id"]
    assert s.height == sum(len(x) for x in frames["stacks"])


def test_top_call_sites_add_up_to_the_live_bytes(gpt2):
    top = analysis.top_call_sites(gpt2, "pytorch", n=None)
    live = analysis.live_allocations(gpt2, "pytorch")
    assert top["bytes"].sum() == live["size"].sum()
    assert top["allocations"].sum() == live.height
    assert top["bytes"].to_list() == sorted(top["bytes"].to_list(), reverse=True)
    assert abs(top["share"].sum() - 1.0) < 1e-9
    # The largest holder is a line of the training script, not a library frame.
    assert "torch_run.py" in top["call_site"][0]
    assert analysis.top_call_sites(gpt2, "pytorch", n=3).height == 3
    assert (live["age_events"] == live["event"] - live["alloc_event"]).all()
    assert (live["age_ns"] >= 0).all()


def test_fragmentation_over_time_is_reserved_minus_allocated(two):
    r = allocreplay.replay(two, ["pytorch", EXPANDABLE])
    f = analysis.fragmentation(r)
    assert (f["unused_bytes"] == f["reserved_bytes"].cast(pl.Int64) - f["allocated_bytes"].cast(pl.Int64)).all()
    assert (f["unused_bytes"] >= 0).all()
    assert f.filter(pl.col("reserved_bytes") > 0)["fragmentation"].is_between(0, 1).all()


def test_oom_has_a_hole_too_small_for_the_request(gpt2):
    out = analysis.oom(gpt2, "pytorch", capacity="15GiB")
    assert out.height == 1
    o = out.row(0, named=True)
    assert o["reserved_bytes"] <= 15 * 2**30 == o["capacity_bytes"]
    # It failed: neither a cached hole nor the headroom could hold what it had to obtain.
    assert o["largest_free_block_bytes"] < o["alloc_bytes"]
    assert o["headroom_bytes"] < o["alloc_bytes"]
    assert o["call_site"] is not None and "torch_run.py" in o["call_site"]


def test_no_oom_rows_where_the_real_run_had_none(gpt2):
    # On the whole H200 (the trace's total memory) the real run had 0 OOMs; so has the replay.
    assert analysis.oom(gpt2, "pytorch").is_empty()
    assert analysis.state(gpt2, "pytorch", at="oom").summary.is_empty()


def test_diff_per_call_site_and_over_time(gpt2):
    d = analysis.diff(gpt2, "pytorch", EXPANDABLE)
    a = analysis.live_allocations(gpt2, "pytorch")["size"].sum()
    b = analysis.live_allocations(gpt2, EXPANDABLE)["size"].sum()
    assert d["bytes_a"].sum() == a and d["bytes_b"].sum() == b
    assert (d["delta_bytes"] == d["bytes_b"].cast(pl.Int64) - d["bytes_a"].cast(pl.Int64)).all()
    r = allocreplay.replay(gpt2, ["pytorch", EXPANDABLE])
    t = analysis.diff_timeline(r, "pytorch", EXPANDABLE)
    # Buckets keep maxima: each side's highest point is its peak — the real runs' peaks.
    assert t["reserved_bytes_a"].max() == GPT2_DEFAULT_PEAK
    assert t["reserved_bytes_b"].max() == GPT2_EXPANDABLE_PEAK
    assert t["reserved_delta_bytes"].min() < 0
    with pytest.raises(allocreplay.InvalidArgumentError, match="not in this replay"):
        analysis.diff_timeline(r, "pytorch", "bfc")


def test_state_errors_are_typed(two):
    with pytest.raises(allocreplay.InvalidArgumentError, match="offline bound"):
        analysis.state(two, "ideal")
    with pytest.raises(allocreplay.InvalidArgumentError, match="at='nope'"):
        analysis.state(two, "pytorch", at="nope")
    with pytest.raises(allocreplay.PolicySpecError):
        analysis.state(two, "nope")
    # An event index: the state right after it.
    s = analysis.state(two, "pytorch", at=10).summary.row(0, named=True)
    assert s["event"] == 10


def test_compare_ranks_like_the_real_runs(two):
    r = allocreplay.replay(two, ["pytorch", EXPANDABLE])
    c = analysis.compare(two, r)
    # Real runs: expandable 2,604,662,784 < default 3,011,510,272 peak reserved.
    assert c["policy"].to_list() == [EXPANDABLE, "pytorch"]
    assert c["rank"].to_list() == [1, 2]
    assert c["peak_reserved_bytes"].to_list() == [2_604_662_784, 3_011_510_272]
    assert (c["efficiency"] == c["peak_allocated_bytes"] / c["peak_reserved_bytes"]).all()


def test_compare_cli_puts_a_policy_that_fits_first_and_names_the_oom_call_site(run_cli):
    import json

    run = run_cli("compare", shared("gpt2_train__default.pickle.xz"), "-p", "pytorch", "-p", EXPANDABLE, "--capacity", "15GiB", "--json")
    assert run.code == 0, run.err
    rows = json.loads(run.out)
    assert [r["policy"] for r in rows] == [EXPANDABLE, "pytorch"]
    assert rows[0]["oom"] is False and rows[1]["oom"] is True
    assert "torch_run.py" in rows[1]["first_oom_call_site"]
    text = run_cli("compare", TRACES / "two_streams__default.pickle.xz", "-p", "pytorch", "-p", EXPANDABLE)
    assert text.code == 0, text.err
    lines = text.out.splitlines()
    assert lines[1].split()[:7] == ["rank", "policy", "device", "peak", "reserved", "peak", "allocated"]
    assert lines[3].split()[:2] == ["1", EXPANDABLE] and "fits" in lines[3]


def test_compare_cli_says_which_limit_would_fit_where_none_does(run_cli):
    gpt2 = shared("gpt2_train__default.pickle.xz")
    run = run_cli("compare", gpt2, "-p", "pytorch", "-p", EXPANDABLE, "--capacity", "14GiB")
    assert run.code == 0, run.err
    line = next(x for x in run.out.splitlines() if x.startswith("smallest limits that fit"))
    for policy in (EXPANDABLE, "pytorch"):
        cap = allocreplay.analysis.smallest_fitting_capacity(gpt2, policy, above=14 << 30)
        assert cap is not None
        assert f"{policy} at " in line and line.split(f"{policy} at ")[1].split(")")[0].endswith(f"({cap:,} bytes")
    # Where one fits (expandable segments at 15 GiB, above), nothing more is said.
    fits = run_cli("compare", gpt2, "-p", "pytorch", "-p", EXPANDABLE, "--capacity", "15GiB")
    assert fits.code == 0 and "smallest limits" not in fits.out


def test_compare_cli_errors_are_one_line():
    run = run_subprocess("compare", TRACES / "two_streams__default.pickle.xz", "-p", "nope")
    assert run.code == 2 and run.err.count("\n") == 1 and run.err.startswith("error:")
