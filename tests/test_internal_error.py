"""A panic of the Rust core (a bug) reaches the user as ``allocreplay.errors.InternalError``,
whose message asks for an issue report — never as pyo3's ``PanicException`` (a
``BaseException``), and never as a traceback from the CLI: one line on stderr, exit code 2.

``_core._debug_panic`` is the bindings' test-only entry point that panics (with the GIL
released, where the core's work runs)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import allocreplay
from allocreplay import _core, errors
from conftest import TRACES, run_clirunner

GOOD = TRACES / "two_streams__default.pickle.xz"
PREFIX = "internal error in allocreplay (please report it on the project's issue tracker, with the command and the trace): "


def test_a_panic_is_an_internal_error_with_the_report_request_and_the_panic_message():
    with pytest.raises(errors.InternalError) as info:
        _core._debug_panic("the test's panic message")
    e = info.value
    message = str(e)
    assert message.startswith(PREFIX), message
    # The panic's own message, then where it happened.
    assert re.fullmatch(re.escape(PREFIX) + r"the test's panic message \(at \S+errors\.rs:\d+:\d+\)", message), message
    assert e.path is None
    # Typed like the others: an AllocReplayError, and a RuntimeError (not a bad input).
    assert isinstance(e, allocreplay.AllocReplayError)
    assert isinstance(e, RuntimeError)
    assert not isinstance(e, ValueError)
    assert allocreplay.InternalError is errors.InternalError


def test_the_process_goes_on_after_a_panic():
    for i in range(3):
        with pytest.raises(errors.InternalError, match=f"panic number {i}"):
            _core._debug_panic(f"panic number {i}")
    # Nothing is left behind: the next calls work, and the next panic reports its own message
    # and location only.
    trace = allocreplay.load(GOOD)
    assert len(trace) > 0
    with pytest.raises(errors.InternalError) as info:
        _core._debug_panic("the last one")
    assert str(info.value).count("(at ") == 1
    assert "panic number" not in str(info.value)


def test_a_multiline_panic_message_is_kept_whole():
    with pytest.raises(errors.InternalError) as info:
        _core._debug_panic("assertion `left == right` failed\n  left: 1\n right: 2")
    assert "left: 1\n right: 2" in str(info.value)


# The CLI: the core's load made to panic, as a real process (the panic hook must not print
# Rust's own "thread panicked at" lines to the real stderr) and through click's CliRunner.
_PANICKING_CLI = """
import sys
from allocreplay import _core, cli

def load_progress(*args, **kwargs):
    _core._debug_panic("a panic while loading")

_core.load_progress = load_progress
sys.argv = ["allocreplay", "info", sys.argv[1]]
cli.main()
"""


def test_the_cli_reports_a_panic_in_one_line_with_exit_code_2():
    p = subprocess.run([sys.executable, "-c", _PANICKING_CLI, str(GOOD)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: " + PREFIX + "a panic while loading (at "), lines[0]
    assert "Traceback" not in p.stderr and "panicked at" not in p.stderr
    assert p.stdout == ""


def test_the_cli_reports_a_panic_through_clirunner(monkeypatch):
    def load_progress(*args, **kwargs):
        _core._debug_panic("a panic while loading")

    monkeypatch.setattr(_core, "load_progress", load_progress)
    run = run_clirunner("info", GOOD)
    assert run.code == 2
    assert run.err.startswith("error: " + PREFIX + "a panic while loading"), run.err
    assert len(run.err.splitlines()) == 1
