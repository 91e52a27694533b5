"""Issue 29 item 3: cuda-async's peak is a range, calibrated on real runs, and "fits" is judged at
its high end.

Truth: the real ``backend:cudaMallocAsync`` runs of ``tests/data/realruns-h200-580.159.txt`` (NVIDIA
H200, driver 580.159.04, torch 2.11.0+cu130), each workload replayed from its native capture
(``traces/cuda``, ``../shared/traces/pytorch``)."""

from __future__ import annotations

import importlib.util
import json

import polars as pl
import pytest

import allocreplay
from conftest import REPO, TRACES, run_clirunner, shared


def band_script():
    spec = importlib.util.spec_from_file_location("cuda_async_band", REPO / "scripts" / "cuda_async_band.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def calibration():
    b = band_script()
    rows = b.calibration()
    assert len(rows) == 17, [w for w, _, _ in rows]
    return b, rows


def test_every_calibration_run_is_inside_its_replays_range_and_the_range_is_no_wider_than_they_need(calibration):
    b, rows = calibration
    low, high = b.factors(rows)
    for w, _, peaks in rows:
        s = allocreplay.replay(b.capture_of(w), ["cuda-async"], placements=False).summary.row(0, named=True)
        assert s["peak_reserved_low_bytes"] <= s["peak_reserved_bytes"] <= s["peak_reserved_high_bytes"]
        for p in peaks:
            assert s["peak_reserved_low_bytes"] <= p <= s["peak_reserved_high_bytes"], (w, p, s)
        # The factors in the core (policy/cuda_async.rs PEAK_BAND) are the data's own extremes.
        assert s["peak_reserved_low_bytes"] / s["peak_reserved_bytes"] == pytest.approx(low, abs=1e-4), w
        assert s["peak_reserved_high_bytes"] / s["peak_reserved_bytes"] == pytest.approx(high, abs=1e-4), w


def test_a_deterministic_policy_has_no_range():
    s = allocreplay.replay(TRACES / "two_streams__default.pickle.xz", ["pytorch", "bfc", "cuda-malloc"], placements=False).summary
    assert (s["peak_reserved_low_bytes"] == s["peak_reserved_bytes"]).all()
    assert (s["peak_reserved_high_bytes"] == s["peak_reserved_bytes"]).all()
    assert s["fits"].all()


def test_fits_is_judged_at_the_high_end_in_replay_compare_and_tune(tmp_path):
    trace = shared("gpt2_train__default.pickle.xz")
    row = allocreplay.replay(trace, ["cuda-async"], placements=False).summary.row(0, named=True)
    # A cap between the replay's peak and the range's high end: the replay itself does not run
    # out of memory, but a real run may, so it does not fit.
    cap = (row["peak_reserved_bytes"] + row["peak_reserved_high_bytes"]) // 2
    s = allocreplay.replay(trace, ["cuda-async", "pytorch"], cap, placements=False).summary
    a = s.filter(pl.col("policy") == "cuda-async").row(0, named=True)
    assert a["num_ooms"] == 0 and a["fits"] is False
    assert a["peak_reserved_high_bytes"] > cap >= a["peak_reserved_bytes"]
    r = run_clirunner("compare", str(trace), "-p", "cuda-async", "--capacity", str(cap), "--json")
    assert r.code == 0, r.err
    ranked = json.loads(r.out)
    assert ranked[0]["fits"] is False and ranked[0]["oom"] is False
    text = run_clirunner("compare", str(trace), "-p", "cuda-async", "--capacity", str(cap))
    assert "may OOM" in text.out and "high end" in text.out
    text = run_clirunner("replay", str(trace), "-p", "cuda-async", "-q")
    assert "–" in text.err + text.out and "high end" in text.err + text.out
    # Well above the high end it fits.
    roomy = allocreplay.replay(trace, ["cuda-async"], 2 * row["peak_reserved_high_bytes"], placements=False).summary
    assert roomy["fits"].all()


def test_the_real_runs_of_held_out_workloads_fall_inside_the_band():
    # Issue 29's bar: at least 9 of 10 workloads not calibrated on (3 real runs each, declared
    # before any ran: tests/data/heldout-async-h200-580.159.txt) inside the predicted range.
    b = band_script()
    rows = b.calibration(b.HELDOUT)
    assert len(rows) == 11 and all(len(peaks) == 3 for _, _, peaks in rows)
    inside = 0
    for w, _, peaks in rows:
        s = allocreplay.replay(b.capture_of(w), ["cuda-async"], placements=False).summary.row(0, named=True)
        inside += all(s["peak_reserved_low_bytes"] <= p <= s["peak_reserved_high_bytes"] for p in peaks)
    assert inside >= 0.9 * len(rows), f"{inside} of {len(rows)}"
