"""The CUDA-level policies through the CLI and the Python API (docs/cuda-policies.md).

Truth: the GPU replays of the same requests through cudaMalloc/cudaFree
(tests/data/replays-h200-580.159.txt: two_streams peak used 2,342,518,784 bytes) and
traces/cuda/two_streams__async.json (the real run under backend:cudaMallocAsync).
"""

from __future__ import annotations

import json

import allocreplay
from conftest import TRACES

TWO = TRACES / "two_streams__default.pickle.xz"


def test_side_by_side_table(run_cli):
    r = run_cli("replay", TWO, "--policy", "pytorch", "--policy", "cuda-async", "--policy", "cuda-malloc", "--json")
    assert r.code == 0, r.err
    rows = {x["policy"]: x for x in json.loads(r.out)}
    assert list(rows) == ["pytorch", "cuda-async", "cuda-malloc"]
    assert rows["cuda-malloc"]["peak_reserved_bytes"] == 2_342_518_784
    # 596 requests: one cudaMalloc each (none of two_streams' requests is empty).
    assert rows["cuda-malloc"]["num_device_alloc"] == 596
    real = json.loads((TRACES / "cuda" / "two_streams__async.json").read_text())["memory_stats"]
    assert rows["cuda-async"]["peak_allocated_bytes"] == real["allocated_bytes.all.peak"]
    assert rows["cuda-async"]["peak_reserved_bytes"] % (32 << 20) == 0
    r = run_cli("replay", TWO, "-p", "pytorch", "-p", "cuda-async", "-p", "cuda-malloc")
    assert r.code == 0, r.err
    assert "cuda-async" in r.out and "cuda-malloc" in r.out and "migrated" not in r.out


def test_managed_reports_migrations(run_cli):
    r = run_cli("replay", TWO, "--policy", "managed", "--capacity", "1GiB")
    assert r.code == 0, r.err
    assert "migrated" in r.out and "pages" in r.out
    res = allocreplay.replay(allocreplay.load(TWO), ["managed"], capacity="1GiB")
    row = res.summary.row(0, named=True)
    assert row["num_ooms"] == 0 and row["peak_reserved_bytes"] <= 1 << 30
    assert row["pages_migrated"] > 0 and row["bytes_migrated"] == row["pages_migrated"] * (2 << 20)


def test_bad_options_are_one_line_errors(run_cli):
    r = run_cli("replay", TWO, "--policy", "cuda-async:release=1")
    assert r.code == 2
    assert "unknown option 'release' for cuda-async; options: release_threshold" in r.err
