"""Progress: the replay counts the rows it walked in Rust; the bar draws done / total."""

from __future__ import annotations

import io

import pytest

import allocreplay
from allocreplay import _core, progress
from conftest import TRACES, run_subprocess, shared


def test_the_counter_reaches_every_row_of_every_replay():
    t = allocreplay.load(shared("gpt2_train__default.pickle.xz"))
    counter = _core.Progress()
    assert (counter.done, counter.total) == (0, 0)
    r = _core.replay(t._inner, ["pytorch", "bfc"], progress=counter)
    # Each (policy, device) replay walks the whole trace once: 2 x 52,626 rows.
    assert counter.total == 2 * len(t) == 2 * 52_626
    assert counter.done == counter.total
    assert len(allocreplay.ReplayResult(r).summary) == 2


def test_the_replay_with_a_bar_gives_the_plain_replays_result():
    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    a = progress.replay(t, ["pytorch", "cuda-malloc"], "2GiB", quiet=True).summary.drop("replay_seconds")
    b = allocreplay.replay(t, ["pytorch", "cuda-malloc"], "2GiB").summary.drop("replay_seconds")
    assert a.equals(b)


def test_the_bar_line():
    line = progress._format_bar("replaying", 1_250, 5_000, 100)
    assert line.startswith("replaying [") and "25% 1,250/5,000 events" in line
    assert line.count("#") == round(0.25 * (line.index("]") - line.index("[") - 1))
    assert "100%" in progress._format_bar("x", 7, 7, 100)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_drawn_on_a_terminal_and_erased_and_silent_otherwise():
    counter = _core.Progress()
    tty = _Tty()
    t = allocreplay.load(shared("gpt2_train__default.pickle.xz"))
    _core.replay(t._inner, ["pytorch"], progress=counter)  # sets the total: the first draw shows the bar
    with progress.Bar("replaying", counter, stream=tty, delay_s=0.0):
        _core.replay(t._inner, ["pytorch"], progress=counter)
    out = tty.getvalue()
    assert out.startswith("\rreplaying [") and "/52,626 events" in out
    assert out.endswith("\r\x1b[K")
    quiet = _Tty()
    with progress.Bar("replaying", counter, stream=quiet, enabled=False, delay_s=0.0):
        pass
    assert quiet.getvalue() == ""
    pipe = io.StringIO()
    with progress.Bar("replaying", counter, stream=pipe, delay_s=0.0):
        pass
    assert pipe.getvalue() == ""


def test_cli_output_has_no_progress_when_not_a_terminal():
    run = run_subprocess("replay", TRACES / "two_streams__default.pickle.xz", "--quiet")
    assert run.code == 0 and run.err == "" and "\r" not in run.out


@pytest.mark.parametrize("command", [["validate"], ["info"], ["import", "-o", "{tmp}/t.arrow"]])
def test_every_command_that_loads_a_trace_takes_quiet(command, tmp_path):
    # As `replay --quiet`: scripts pass -q to every command that loads a trace.
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    run = run_subprocess(args[0], TRACES / "two_streams__default.pickle.xz", *args[1:], "-q")
    assert run.code == 0, run.err
    assert "\r" not in run.err and "\r" not in run.out


def test_a_load_counts_the_bytes_of_its_file():
    path = shared("gpt2_train__default.pickle.xz")
    counter = _core.Progress()
    t = allocreplay.Trace(_core.load_progress(str(path), counter))
    # Every compressed byte was fed to the decompressor.
    assert counter.total == counter.done == path.stat().st_size
    assert len(t) == 52_626
    assert "25% 5.00 MiB/20.00 MiB" in progress._format_bar("loading", 5 << 20, 20 << 20, 100, "bytes")
