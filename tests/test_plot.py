"""`replay --plot`: a timeline picture, or — without matplotlib — one line saying how to get it."""

from __future__ import annotations

import importlib.util

from conftest import TRACES, run_subprocess


def test_replay_plot(tmp_path):
    out = tmp_path / "timeline.png"
    run = run_subprocess("replay", TRACES / "two_streams__default.pickle.xz", "-p", "pytorch", "-p", "pytorch:expandable_segments:True", "--plot", out)
    if importlib.util.find_spec("matplotlib") is None:
        assert run.code == 2
        assert run.err.count("\n") == 1 and "matplotlib" in run.err
        assert not out.exists()
    else:
        assert run.code == 0, run.err
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
