"""The README's "Where the memory goes" examples, run as written so they stay true: every
command exits 0 and writes what it says, the `compare` table is the one printed there, and the
Python block (with its own asserts) runs."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import allocreplay
from conftest import REPO


def _section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Where the memory goes")
    end = text.index("\n## ", start + 3)
    return text[start:end]


def _blocks(kind: str) -> list[str]:
    # Fenced blocks in order, each (language, body); a fence opens and closes at a line start.
    found = re.findall(r"^```(\w*)\n(.*?)^```$", _section(), re.S | re.M)
    return [body for lang, body in found if lang == kind]


def _run(line: str, cwd) -> subprocess.CompletedProcess[str]:
    args = shlex.split(line)
    assert args[0] == "allocreplay"
    args = [str(REPO / a) if a.startswith("traces/") else a for a in args[1:]]
    return subprocess.run([sys.executable, "-m", "allocreplay", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_compare_example_prints_the_table_shown():
    sh, out = _blocks("sh")[0], _blocks("")[0]
    r = _run(sh.strip(), REPO)
    assert r.returncode == 0, r.stderr
    # The first line names the trace as given (relative in the README).
    assert r.stdout.splitlines()[1:] == out.splitlines()[1:]
    assert out.splitlines()[0].startswith("traces/two_streams__default.pickle.xz: capacity 2.50 GiB")


def test_the_report_and_export_examples_write_their_files(tmp_path):
    lines = [line for line in _blocks("sh")[1].splitlines() if line.strip()]
    assert [shlex.split(line)[1] for line in lines] == ["report", "export-snapshot", "export-perfetto"]
    for line in lines:
        r = _run(line, tmp_path)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    back = allocreplay.load(tmp_path / "sim.pickle")
    # The real run under expandable_segments:True recorded 1,827 entries (traces/README.md):
    # the same requests, and the device maps the simulated allocator made.
    assert len(back) == 1_827
    counters = {e["name"] for e in json.loads((tmp_path / "memory.json").read_text())["traceEvents"] if e["ph"] == "C"}
    assert counters == {"pytorch", "pytorch:expandable_segments:True"}


def test_the_python_example_runs(monkeypatch, capsys):
    (code,) = _blocks("python")[-1:]
    monkeypatch.chdir(REPO)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    # The synthetic trace: 3 MiB + 5 MiB live at once. PyTorch takes one 20 MiB segment
    # (kLargeBuffer, for requests under kMinLargeAlloc = 10 MiB) and splits it for both;
    # cudaMalloc rounds each to its 2 MiB granularity: 4 + 6 MiB.
    rows = [line.split() for line in out.splitlines() if "pytorch" in line or "cuda-malloc" in line]
    assert [r[1] for r in rows] == ["pytorch", "cuda-malloc"]
    assert (rows[0][3], rows[0][5]) == ("8388608", "20971520")
    assert (rows[1][3], rows[1][5]) == ("10485760", "10485760")
