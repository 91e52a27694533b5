"""`Trace.from_events` / `Trace.from_arrow`: traces built from tables."""

from __future__ import annotations

import polars as pl
import pytest

import allocreplay
from conftest import TRACES

MIB = 2**20


def test_round_trip_of_a_real_trace_replays_the_same(tmp_path):
    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    t2 = allocreplay.Trace.from_events(t.events, metadata=t.metadata, frames=t.frames, stacks=t.stacks)
    assert t2.events.equals(t.events)
    assert t2.metadata == t.metadata
    a = allocreplay.replay(t, ["pytorch", "pytorch:expandable_segments:True"]).summary.drop("replay_seconds")
    b = allocreplay.replay(t2, ["pytorch", "pytorch:expandable_segments:True"]).summary.drop("replay_seconds")
    assert a.equals(b)
    # The real run's peak reserved (traces/README.md).
    assert a["peak_reserved_bytes"][0] == 3_011_510_272
    # And through Arrow, with the schema metadata: taken as it is.
    t3 = allocreplay.Trace.from_arrow(t.to_arrow())
    assert t3.events.equals(t.events) and t3.frames.equals(t.frames) and t3.stacks.equals(t.stacks)
    t3.save(tmp_path / "t3.arrow")
    assert allocreplay.load(tmp_path / "t3.arrow").events.equals(t.events)


def test_round_trip_keeps_the_stacks():
    # torch_train.arrow was captured with Python stacks (allocreplay capture --stacks python).
    t = allocreplay.load(TRACES / "torch_train.arrow")
    assert t.stacks.height > 0
    t2 = allocreplay.Trace.from_events(t.events, metadata=t.metadata, frames=t.frames, stacks=t.stacks)
    assert t2.frames.equals(t.frames) and t2.stacks.equals(t.stacks) and t2.events.equals(t.events)
    from allocreplay import analysis

    assert analysis.top_call_sites(t2, "pytorch").equals(analysis.top_call_sites(t, "pytorch"))


def test_a_synthetic_trace_paired_by_address():
    # Three 1000-byte requests, the first freed: PyTorch rounds each to 1024 B (kMinBlockSize
    # 512 multiples) in one 2 MiB small segment (kSmallBuffer).
    df = pl.DataFrame(
        {
            "action": ["alloc", "alloc", "alloc", "free_requested", "free_completed"],
            "size": [1000, 1000, 1000, 1000, 1000],
            "addr": [0x1000, 0x2000, 0x3000, 0x1000, 0x1000],
        }
    )
    t = allocreplay.Trace.from_events(df, metadata={"devices": [{"index": 0, "total_memory": 80 * 2**30}]})
    assert t.events["alloc_id"].to_list() == [0, 1, 2, 0, 0]
    assert t.metadata["devices"][0]["total_memory"] == 80 * 2**30
    assert t.metadata["source"] == "python"
    s = allocreplay.replay(t, "pytorch").summary.row(0, named=True)
    assert (s["peak_allocated_bytes"], s["peak_reserved_bytes"], s["final_allocated_bytes"]) == (3072, 2 * MIB, 2048)
    assert s["capacity_bytes"] == 80 * 2**30


def test_action_codes_and_explicit_ids():
    df = pl.DataFrame({"action": [0, 0, 2, 2], "alloc_id": [0, 1, 1, 0], "size": [3 * MIB, 5 * MIB, 5 * MIB, 3 * MIB], "device": [1, 1, 1, 1]})
    t = allocreplay.Trace.from_events(df)
    assert t.events["action"].cast(pl.String).to_list() == ["alloc", "alloc", "free_completed", "free_completed"]
    assert [d["index"] for d in t.metadata["devices"]] == [1]
    s = allocreplay.replay(t, "cuda-malloc").summary.row(0, named=True)
    assert s["peak_allocated_bytes"] >= 8 * MIB and s["device"] == 1


@pytest.mark.parametrize(
    ("df", "error", "match"),
    [
        (pl.DataFrame({"action": ["alloc", "malloc"], "size": [1, 2], "alloc_id": [0, 1]}), allocreplay.InvalidArgumentError, "unknown action 'malloc'"),
        (pl.DataFrame({"action": ["alloc"], "alloc_id": [0]}), allocreplay.InvalidArgumentError, "missing column 'size'"),
        (
            pl.DataFrame({"action": ["alloc"], "size": [1], "alloc_id": [0], "color": ["red"]}),
            allocreplay.InvalidArgumentError,
            "'color' is not a trace column",
        ),
        (pl.DataFrame({"action": ["alloc"], "size": [-1], "alloc_id": [0]}), allocreplay.InvalidArgumentError, "cannot be converted"),
        (pl.DataFrame({"action": ["alloc"], "size": [1]}), allocreplay.InvalidArgumentError, "needs an addr"),
        # Ids must be dense, as in an .arrow file (checked in Rust).
        (pl.DataFrame({"action": ["alloc"], "size": [1], "alloc_id": [7]}), allocreplay.SchemaError, "not dense"),
    ],
)
def test_bad_tables_are_one_line_errors_naming_the_source(df, error, match):
    with pytest.raises(error, match=match) as e:
        allocreplay.Trace.from_events(df)
    assert "<Trace.from_events>" in str(e.value) and "\n" not in str(e.value)
