"""`allocreplay fit`: the search (against thresholds known by construction), and the whole
command on a real PyTorch program captured without a GPU.

The end-to-end answer is checked against an independent path: the candidate `fit` calls the
largest that fits, and the next one, are captured again with `allocreplay capture --no-gpu` and
replayed with `allocreplay replay --capacity`, and must fit and not fit. Needs torch (CI
installs it; under CI=true these tests fail, not skip, without it) and, for the page, Chromium
(as tests/test_report.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from allocreplay._fit import substitute
from allocreplay._fit._search import Axis, Search, monotonicity_breaks, parse_vary
from allocreplay.errors import InvalidArgumentError
from conftest import real_torch

REPO = Path(__file__).resolve().parent.parent
WORKLOAD = REPO / "tests" / "data" / "fit_workload.py"


# --- the search, against thresholds known by construction ------------------------------------


def _run_search(axes, limits, jobs=1, check=False):
    """``limits``: setting -> function of the point giving whether it fits."""
    calls = []
    s = Search(axes, list(limits), jobs=jobs, check=check)

    def evaluate(batch):
        assert len(batch) <= max(1, jobs)
        calls.extend(batch)
        return [{name: f(p) for name, f in limits.items()} for p in batch]

    s.run(evaluate)
    return s, calls


@pytest.mark.parametrize("jobs", [1, 3])
@pytest.mark.parametrize("threshold", [1, 2, 7, 15, 16, 17, 100, 1023, 1024])
def test_the_search_finds_the_largest_value_below_a_threshold(threshold, jobs):
    axis = parse_vary("batch_size=1:1024")
    s, calls = _run_search([axis], {"a": lambda p: p[0] <= threshold, "b": lambda p: p[0] <= threshold // 2 + 1}, jobs)
    answers = {setting: (ok, fail) for _, setting, ok, fail in s.answers()}
    assert answers["a"][0] == threshold
    assert answers["b"][0] == threshold // 2 + 1
    assert answers["a"][1] == (None if threshold == 1024 else threshold + 1)
    # ×2 then bisection: logarithmically many candidates, shared between the settings.
    assert len(set(calls)) == len(calls)
    if jobs == 1:
        assert len(calls) <= 2 * (10 + 11)


def test_nothing_fits_and_everything_fits():
    axis = parse_vary("n=4:64")
    s, _ = _run_search([axis], {"none": lambda p: False, "all": lambda p: True})
    answers = {setting: (ok, fail) for _, setting, ok, fail in s.answers()}
    assert answers["none"] == (None, 4)
    assert answers["all"] == (64, None)


def test_step_searches_multiples():
    axis = parse_vary("seq_len=64:16384", step=64)
    s, calls = _run_search([axis], {"a": lambda p: p[0] <= 3000})
    assert {setting: ok for _, setting, ok, _ in s.answers()} == {"a": 2944}
    assert all(v % 64 == 0 for (v,) in calls)


def test_a_list_tries_every_value_and_a_grid_gives_its_frontier():
    s, calls = _run_search([Axis("b", 8, 16, 1, (8, 12, 16))], {"a": lambda p: p[0] <= 12})
    assert sorted(calls) == [(8,), (12,), (16,)]
    assert [ok for _, _, ok, _ in s.answers()] == [12]
    # seq_len x batch: batch * seq_len <= 8192.
    axes = [parse_vary("seq_len=512,1024,2048"), parse_vary("batch=1:64")]
    s, _ = _run_search(axes, {"a": lambda p: p[0] * p[1] <= 8192})
    frontier = {outer: ok for outer, _, ok, _ in s.answers()}
    assert frontier == {(512,): 16, (1024,): 8, (2048,): 4}


def test_the_answer_never_passes_a_failure_and_breaks_are_reported():
    # Does not fit at 4 alone (not monotonic): the answer stops below it, though 5..16 fit;
    # the check above the first failure finds that 5 and 6 fit.
    s, calls = _run_search([parse_vary("b=1:16")], {"a": lambda p: p[0] != 4}, check=True)
    ((_, _, ok, fail),) = s.answers()
    assert (ok, fail) == (3, 4)
    assert calls[-2:] == [(5,), (6,)]
    assert monotonicity_breaks(s.results, "a") == [((4,), (5,)), ((4,), (6,))]
    s, _ = _run_search([parse_vary("b=1:16")], {"a": lambda p: p[0] != 4})
    ((_, _, ok, fail),) = s.answers()
    assert (ok, fail) == (3, 4)
    # A larger value seen to fit above a failure is reported.
    s.record((8,), {"a": True})
    assert monotonicity_breaks(s.results, "a") == [((4,), (8,))]
    ((_, _, ok, fail),) = s.answers()
    assert (ok, fail) == (3, 4)
    results = {(1,): {"a": True}, (2,): {"a": False}, (4,): {"a": True}}
    assert monotonicity_breaks(results, "a") == [((2,), (4,))]


def test_bad_vary_and_substitution():
    for bad in ["batch_size", "batch_size=8:4", "1x=1:4", "b=a:b", "b=1,x"]:
        with pytest.raises(InvalidArgumentError):
            parse_vary(bad)
    assert substitute("--bs={batch_size} {{literal}}", {"batch_size": 8}) == "--bs=8 {literal}"
    with pytest.raises(InvalidArgumentError, match="not a varied parameter"):
        substitute("{batchsize}", {"batch_size": 8})


# --- the command, end to end ------------------------------------------------------------------


needs_torch = pytest.mark.skipif(not real_torch() and os.environ.get("CI") != "true", reason="torch is not installed here (CI installs it)")


def _ar(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    if not real_torch():
        pytest.fail("torch is not installed: CI must install it to test fit", pytrace=False)
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    return subprocess.run([sys.executable, "-m", "allocreplay", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


CAP = "96MiB"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fit")
    cache = tmp / "cache"
    run = _ar(
        "fit", "--capacity", CAP, "--vary", "batch_size=1:64", "-s", "pytorch:expandable_segments:True", "--cache-dir", str(cache),
        "-j", "2", "--json", "-o", str(tmp / "fit.html"), "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}",
        cwd=tmp,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return tmp, json.loads(run.stdout), run.stderr


@needs_torch
def test_fit_answers_and_an_independent_capture_and_replay_agree(fitted):
    tmp, result, err = fitted
    largest = result["largest"]["pytorch"]
    assert isinstance(largest, int) and 1 <= largest < 64, result["answer"]
    assert result["answer"].startswith(f"largest batch_size that fits on h200 at 96.00 MiB: {largest} with the defaults")
    assert result["capacity_bytes"] == 96 << 20
    for value, should_fit in ((largest, True), (largest + 1, False)):
        out = tmp / f"check{value}.arrow"
        cap = _ar("capture", "--no-gpu", "--unknown-values", "zero", "-o", str(out), "--", sys.executable, str(WORKLOAD), "--batch-size", str(value), cwd=tmp)
        assert cap.returncode == 0, cap.stderr[-2000:]
        rep = _ar("replay", str(out), "--capacity", CAP, "--json", cwd=tmp)
        assert rep.returncode == 0, rep.stderr
        (row,) = json.loads(rep.stdout)
        assert (row["num_ooms"] == 0) == should_fit, (value, row)
    # Every row's verdict matches its numbers, and the margin is the capacity less the peak.
    for r in result["rows"]:
        if r["peak_reserved_bytes"] is not None:
            assert r["margin_bytes"] == (96 << 20) - r["peak_reserved_bytes"]
        assert r["fits"] == (r["num_ooms"] == 0 and r["error"] is None)
    # The search: nothing reported as fitting at or above the first failure.
    for setting in ("pytorch", "pytorch:expandable_segments:True", "tuned"):
        rows = [r for r in result["rows"] if r["setting"] == setting]
        first_fail = min((r["batch_size"] for r in rows if not r["fits"]), default=None)
        if result["largest"][setting] is not None and first_fail is not None:
            assert result["largest"][setting] < first_fail
    assert "captured in" in err


@needs_torch
def test_fit_explains_the_first_failure_by_category(fitted):
    _, result, _ = fitted
    first_fail = min(r["batch_size"] for r in result["rows"] if r["setting"] == "pytorch" and not r["fits"])
    assert result["breakdown_at"] == {"batch_size": first_fail}
    cats = {b["category"]: b["bytes"] for b in result["breakdown"]}
    # Two Linear(256, 256): (256*256 + 256) * 4 bytes each, in 512-byte blocks.
    params = 2 * (((256 * 256 * 4 + 511) // 512) * 512 + 1024)
    assert cats["parameters"] == params
    assert cats["activations"] > cats["parameters"]


@needs_torch
def test_a_rerun_captures_nothing_and_gives_the_same_answer(fitted):
    tmp, result, _ = fitted
    cache = tmp / "cache"
    before = sorted(p.name for p in cache.iterdir())
    run = _ar("fit", "--capacity", CAP, "--vary", "batch_size=1:64", "-s", "pytorch:expandable_segments:True", "--cache-dir", str(cache), "--json",
              "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}", cwd=tmp)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    again = json.loads(run.stdout)
    assert again["largest"] == result["largest"]
    assert all(r["cached"] for r in again["rows"])
    assert sorted(p.name for p in cache.iterdir()) == before
    # The text answer comes first and plain.
    text = _ar("fit", "--capacity", CAP, "--vary", "batch_size=1:64", "--no-tune", "--cache-dir", str(cache), "-q",
               "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}", cwd=tmp)  # fmt: skip
    assert text.returncode == 0, text.stderr[-2000:]
    assert text.stdout.splitlines()[0] == f"largest batch_size that fits on h200 at 96.00 MiB: {result['largest']['pytorch']} with the defaults"


@needs_torch
def test_fit_errors_are_one_line(tmp_path):
    run = _ar("fit", "--vary", "batch_size=1:8", "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch}", cwd=tmp_path)
    assert run.returncode == 2 and "not a varied parameter" in run.stderr and "Traceback" not in run.stderr
    run = _ar("fit", "--vary", "batch_size=1:8", "--", sys.executable, str(WORKLOAD), "--batch-size", "8", cwd=tmp_path)
    assert run.returncode == 2 and "appears nowhere in the command" in run.stderr
    run = _ar("fit", "--device", "a200", "--vary", "batch_size=1:8", "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}", cwd=tmp_path)
    assert run.returncode == 2 and "a200" in run.stderr and "Traceback" not in run.stderr
    # A command that fails is reported with its output's tail, not as "does not fit".
    run = _ar("fit", "--capacity", "1GiB", "--vary", "batch_size=1:8", "--cache-dir", str(tmp_path / "c"),
              "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}", "--width", "oops", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 2 and "the command failed at batch_size=1" in run.stderr and "invalid int value" in run.stderr


@needs_torch
def test_the_fit_page_renders_in_chromium(fitted):
    from test_report import PROBE, _browser

    tmp, _, _ = fitted
    page = tmp / "fit.html"
    text = page.read_text()
    assert len(re.findall(r"<script[^>]*\bsrc=", text)) == 0 and text.count("plotly.js v") >= 1
    probed = tmp / "probed.html"
    probed.write_text(text.replace("<head>", "<head>\n" + PROBE, 1))
    dom = _browser("--dump-dom", probed.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'<pre id="__probe">(.*?)</pre>', dom.stdout, re.S)
    assert m, dom.stdout[-500:]
    probe = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert probe["errors"] == [] and probe["external"] == []
    (plot,) = probe["plots"]
    # One curve per setting: defaults, expandable segments, tune's best.
    assert plot["traces"] == 3 and plot["svgs"] >= 1 and plot["points"] >= 3


@needs_torch
def test_fit_on_a_real_local_ray_cluster(fitted, tmp_path):
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("ray is not installed: CI must install it", pytrace=False)
        pytest.skip("ray is not installed here (CI installs it)")
    _, result, _ = fitted
    run = _ar("fit", "--capacity", CAP, "--vary", "batch_size=1:64", "--no-tune", "--backend", "ray", "-j", "2", "--cache-dir", str(tmp_path / "cache"),
              "--json", "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert got["largest"]["pytorch"] == result["largest"]["pytorch"]
    assert not any(r["cached"] for r in got["rows"])
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == len({r["batch_size"] for r in got["rows"]})


GENERATE = REPO / "tests" / "data" / "fit_generate.py"


@needs_torch
def test_a_generate_loop_runs_unattended_and_its_guesses_are_reported(tmp_path):
    # The stopping test reads a value computed on the GPU: under fit it is read as zero (the
    # loop runs its 16 steps, as on a random model whose stopping token never comes), counted
    # once per step, and the line is named.
    run = _ar("fit", "--capacity", "1GiB", "--vary", "batch_size=1,64", "--no-tune", "--cache-dir", str(tmp_path / "c"), "--json",
              "--", sys.executable, str(GENERATE), "--batch-size", "{batch_size}", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert got["values_guessed"] == 16
    assert len(got["guessed_where"]) == 1 and "fit_generate.py:24 (if (nxt == 7).all().item():" in got["guessed_where"][0]
    assert [r["values_guessed"] for r in got["rows"]] == [16, 16]
    # The KV cache grows with the batch: batch 64 needs more than batch 1.
    peaks = {r["batch_size"]: r["peak_allocated_bytes"] for r in got["rows"]}
    assert peaks[64] > peaks[1]
    text = _ar("fit", "--capacity", "1GiB", "--vary", "batch_size=1,64", "--no-tune", "--cache-dir", str(tmp_path / "c"), "-q",
               "--", sys.executable, str(GENERATE), "--batch-size", "{batch_size}", cwd=tmp_path)  # fmt: skip
    assert text.returncode == 0 and "read up to 16 value(s) computed on the GPU as zeros" in text.stderr and "fit_generate.py:24" in text.stderr


@needs_torch
def test_ctrl_c_keeps_the_captures_that_finished(tmp_path):
    import signal
    import time

    if not real_torch():
        pytest.fail("torch is not installed: CI must install it to test fit", pytrace=False)
    cache = tmp_path / "cache"
    env = {**os.environ, "FIT_WORKLOAD_SLEEP": "120"}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    cmd = [sys.executable, "-m", "allocreplay", "fit", "--capacity", "1GiB", "--vary", "batch_size=1:8", "--no-tune", "--cache-dir", str(cache),
           "--", sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}"]  # fmt: skip
    # A terminal's Ctrl-C signals the whole foreground process group: fit and its captures.
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not list(cache.glob("*.arrow")) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
        assert list(cache.glob("*.arrow")), "the first capture never finished"
        time.sleep(3)  # batch_size=2 is being captured (sleeping)
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err[-2000:]
    assert "interrupted; the captures that finished are kept in" in err and "Traceback" not in err
    assert len(list(cache.glob("*.arrow"))) == 1
    assert not [q for q in cache.iterdir() if q.name.startswith(".fit-")]
    # Run again: the finished capture is reused.
    env["FIT_WORKLOAD_SLEEP"] = "0"
    again = subprocess.run([*cmd[:3], *cmd[3:9], "--json", *cmd[9:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = json.loads(again.stdout)["rows"]
    assert [r["cached"] for r in rows if r["batch_size"] == 1] == [True]


@needs_torch
def test_the_python_api_returns_a_polars_table_and_the_answer(fitted):
    import polars as pl

    import allocreplay

    tmp, result, _ = fitted
    if not real_torch():
        pytest.fail("torch is not installed: CI must install it to test fit", pytrace=False)
    # The same candidates as the CLI run, from its cache: nothing is captured again.
    got = allocreplay.fit(
        [sys.executable, str(WORKLOAD), "--batch-size", "{batch_size}"],
        {"batch_size": (1, 64)},
        capacity=CAP,
        settings=["pytorch:expandable_segments:True"],
        cache_dir=str(tmp / "cache"),
        cwd=str(tmp),
    )
    assert isinstance(got, allocreplay.FitResult) and isinstance(got.table, pl.DataFrame)
    assert got.largest == result["largest"]
    assert got.answer == result["answer"]
    assert got.table["cached"].all()
    assert set(got.table.columns) >= {"batch_size", "setting", "fits", "peak_reserved_bytes", "margin_bytes", "num_alloc_retries", "capture_seconds"}


@needs_torch
def test_two_varied_parameters_give_a_frontier(tmp_path):
    # Half the width, twice the rows: at 96 MiB batch 12 fits at width 32768 but not at 65536
    # (fit_workload: batch * width floats flow through two layers).
    run = _ar("fit", "--capacity", CAP, "--vary", "width=32768,65536", "--vary", "batch_size=8,12", "--no-tune", "--cache-dir", str(tmp_path / "c"),
              "-j", "2", "--json", "--", sys.executable, str(WORKLOAD), "--width", "{width}", "--batch-size", "{batch_size}", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    frontier = {r["width"]: r["largest"] for r in got["frontier"] if r["setting"] == "pytorch"}
    assert frontier == {32768: 12, 65536: 8}
    lines = got["answer"].splitlines()
    assert len(lines) == 2 and lines[0].startswith("largest batch_size at width=32768 that fits") and lines[1].endswith(": 8 with the defaults")
    assert sorted((r["width"], r["batch_size"]) for r in got["rows"]) == [(32768, 8), (32768, 12), (65536, 8), (65536, 12)]
