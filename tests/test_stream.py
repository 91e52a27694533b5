"""Issue #12: large .arrow traces are streamed batch by batch (``_core.replay_file``) by ``allocreplay replay`` and ``allocreplay.replay(path)``; ``synth --tile``
writes its tile batch by batch. Streamed or loaded, a replay gives the same tables."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest

import allocreplay
from allocreplay import _api, _core, errors
from conftest import TRACES, run_clirunner

TWO = TRACES / "two_streams__default.pickle.xz"
POLICIES = ["pytorch", "pytorch:expandable_segments:True", "bfc", "cuda-async", "cuda-malloc", "managed"]


@pytest.fixture(scope="module")
def tiled(tmp_path_factory: pytest.TempPathFactory):
    """two_streams tiled 3 times, in record batches of 1,000 rows (batches cut through the
    repetitions)."""
    path = tmp_path_factory.mktemp("stream") / "two_x3.arrow"
    t = allocreplay.load(TWO)
    assert _core.tile_file(t._inner, 3, str(path), 1000) == 3 * len(t)
    return path


def tables(r: allocreplay.ReplayResult) -> list[pl.DataFrame]:
    return [r.summary.drop("replay_seconds"), r.timeline, r.segments, r.placements]


@pytest.mark.parametrize("capacity", [None, "1GiB"])
def test_a_streamed_replay_equals_the_loaded_one(tiled, monkeypatch, capacity):
    loaded = allocreplay.replay(allocreplay.load(tiled), POLICIES, capacity, timeline_points=50)
    streamed, info = _core.replay_file(str(tiled), POLICIES, capacity, 50, True)
    for a, b in zip(tables(loaded), tables(allocreplay.ReplayResult(streamed))):
        assert a.equals(b)
    assert info.to_dict() == allocreplay.load(tiled).info().to_dict()
    if capacity:
        assert loaded.summary["num_ooms"].sum() > 0
    # allocreplay.replay(path) streams files from STREAM_MIN_BYTES on.
    monkeypatch.setattr(_api, "STREAM_MIN_BYTES", 0)
    assert _api._streams(tiled, POLICIES) and not _api._streams(tiled, ["pytorch", "offline"]) and not _api._streams(TWO, POLICIES)
    for a, b in zip(tables(loaded), tables(allocreplay.replay(tiled, POLICIES, capacity, timeline_points=50))):
        assert a.equals(b)


def test_the_cli_streams_large_files_with_the_same_output(tiled, monkeypatch):
    args = ["replay", str(tiled), "-p", "pytorch", "-p", "bfc", "-q"]
    loaded = run_clirunner(*args)
    loaded_json = run_clirunner(*args, "--json")
    monkeypatch.setattr(_api, "STREAM_MIN_BYTES", 0)
    streamed = run_clirunner(*args)
    streamed_json = run_clirunner(*args, "--json")
    assert loaded.code == streamed.code == 0, streamed.err

    def drop_seconds(text: str) -> list[str]:
        return [line.rsplit(None, 1)[0] if line[:7] in ("pytorch", "bfc    ") else line for line in text.splitlines()]

    assert drop_seconds(streamed.out) == drop_seconds(loaded.out)
    assert "5,496 events on device(s) 0" in streamed.out
    rows = [json.loads(r.out) for r in (loaded_json, streamed_json)]
    for r in rows:
        for row in r:
            row.pop("replay_seconds")
    assert rows[0] == rows[1]
    # An offline bound among the policies: the file is loaded, and the bound is reported.
    r = run_clirunner("replay", str(tiled), "-p", "pytorch", "-p", "ideal", "--json")
    assert r.code == 0 and len(json.loads(r.out)) == 2


def test_a_bad_streamed_file_is_an_error_naming_it(tmp_path, monkeypatch):
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(b"ARROW1\0\0" + b"\1" * 100)
    with pytest.raises(errors.TraceFormatError, match=r"bad\.arrow"):
        _core.replay_file(str(bad), ["pytorch"])
    monkeypatch.setattr(_api, "STREAM_MIN_BYTES", 0)
    r = run_clirunner("replay", str(bad))
    assert r.code == 2 and "bad.arrow" in r.err


def test_placements_are_built_when_first_read_from_the_file_as_it_is_then(tiled, tmp_path, monkeypatch):
    # Issue 30: the placements table is built on first read, by replaying the request again
    # (a third of a replay's time went into it, and most callers never read it). Read at once,
    # it is the loaded trace's; read after the file changed, it is an error naming the file,
    # never the placements of another trace.
    monkeypatch.setattr(_api, "STREAM_MIN_BYTES", 0)
    copy = tmp_path / "copy.arrow"
    shutil.copyfile(tiled, copy)
    loaded = allocreplay.replay(allocreplay.load(tiled), ["pytorch", "bfc"])
    first, second = (allocreplay.replay(copy, ["pytorch", "bfc"]) for _ in range(2))
    assert first.placements.equals(loaded.placements)
    # Each policy placed each alloc once, inside a segment's range.
    n_allocs = allocreplay.load(tiled).events.filter(pl.col("action") == "alloc").height
    assert sorted(first.placements.group_by("policy").len()["len"].to_list()) == [n_allocs, n_allocs]
    assert (first.placements["addr"] >= first.placements["segment"]).all()
    with open(copy, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(errors.AllocReplayError, match=r"copy\.arrow"):
        _ = second.placements
    # The tables built with the summary do not depend on the file any more.
    assert second.summary.drop("replay_seconds").equals(loaded.summary.drop("replay_seconds"))


def test_synth_writes_the_tile_batch_by_batch(tmp_path):
    out = tmp_path / "long.arrow"
    r = run_clirunner("synth", str(TWO), "--tile", "3", "-o", str(out))
    assert r.code == 0, r.err
    assert allocreplay.load(out).events.equals(allocreplay.Trace(_core.tile(allocreplay.load(TWO)._inner, 3)).events)


def test_info_streams_large_files_with_the_same_output(tiled, monkeypatch):
    loaded = [run_clirunner("info", str(tiled), *extra).out for extra in ([], ["--json"])]
    monkeypatch.setattr(_api, "STREAM_MIN_BYTES", 0)
    streamed = [run_clirunner("info", str(tiled), *extra).out for extra in ([], ["--json"])]
    assert streamed == loaded and "5,496" in streamed[0]
    info, metadata = _core.info_file(str(tiled))
    assert metadata == allocreplay.load(tiled).metadata and info.events == 5496


def test_a_streamed_replay_applies_the_host_ranges_the_capture_noted(tmp_path, monkeypatch):
    # traces/large/phi_sample_hv__default carries `host_va` (issue 29 item 1): a streamed replay
    # of its .arrow, in batches of 100,000 rows, places segments as the loaded one does.
    t = allocreplay.load(TRACES / "large" / "phi_sample_hv__default.pickle.xz")
    path = tmp_path / "phi.arrow"
    assert _core.tile_file(t._inner, 1, str(path), 100_000) == len(t)
    specs = ["pytorch", "cuda-malloc"]
    loaded = allocreplay.replay(allocreplay.load(path), specs, timeline_points=50)
    streamed, _ = _core.replay_file(str(path), specs, None, 50, True)
    for a, b in zip(tables(loaded), tables(allocreplay.ReplayResult(streamed))):
        assert a.equals(b)
