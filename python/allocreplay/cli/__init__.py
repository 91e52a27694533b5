"""The ``allocreplay`` command line: the group and its commands, one module each (``replay``,
``compare``, ``tune``...); the options they share are in :mod:`allocreplay.cli._options`, the
helpers in :mod:`allocreplay.cli._common`.

Every error — a bad file, a bad option — is one line on stderr, ``error: <file>: <what is
wrong>``, and exit code 2; never a traceback. Files a command writes (``-o``, ``--plot``,
``--runtime``) are checked before the work starts and written by :mod:`allocreplay._output`:
atomically (a temporary file beside the target, renamed once complete), symlinks followed,
devices and FIFOs written through, an input never overwritten; ``-`` writes them to stdout. A
closed pipe (``allocreplay info X | head -1``) ends the command quietly with exit code 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from allocreplay import _api, _output
from allocreplay.cli._common import progress_bar
from allocreplay.cli._options import CAPACITY_HELP
from allocreplay.cli._options import OUT_PATH as OUT_PATH
from allocreplay.cli._options import TRACE_PATH as TRACE_PATH
from allocreplay.cli.breakdown import breakdown_cmd
from allocreplay.cli.capture import capture_cmd
from allocreplay.cli.compare import compare_cmd
from allocreplay.cli.devices import devices_cmd
from allocreplay.cli.export import export_perfetto_cmd, export_snapshot_cmd
from allocreplay.cli.fit import fit_cmd
from allocreplay.cli.import_ import import_cmd
from allocreplay.cli.info import info_cmd
from allocreplay.cli.plan import plan_cmd
from allocreplay.cli.policies import policies_cmd
from allocreplay.cli.replay import replay_cmd
from allocreplay.cli.report import report_cmd
from allocreplay.cli.synth import synth_cmd
from allocreplay.cli.tune import tune_cmd
from allocreplay.cli.validate import validate_cmd
from allocreplay.errors import AllocReplayError

__all__ = [
    "EXIT_ERROR",
    "OUT_PATH",
    "TRACE_PATH",
    "breakdown_cmd",
    "capture_cmd",
    "cli",
    "compare_cmd",
    "devices_cmd",
    "export_perfetto_cmd",
    "export_snapshot_cmd",
    "fit_cmd",
    "import_cmd",
    "info_cmd",
    "main",
    "plan_cmd",
    "policies_cmd",
    "replay_cmd",
    "report_cmd",
    "synth_cmd",
    "tune_cmd",
    "validate_cmd",
]

EXIT_ERROR = 2
# The names these had when the command line was one module (cli.py).
_Progress = progress_bar
_CAPACITY_HELP = CAPACITY_HELP
# click >= 8.2 raises this for a bare `allocreplay`; it only shows the help.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _fail(message: str) -> None:
    # One line, whatever the message holds.
    click.echo("error: " + " ".join(str(message).split()), err=True)


class _Cli(click.Group):
    """A group whose errors are single lines with exit code 2."""

    def main(
        self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None, standalone_mode: bool = True, **extra: Any
    ) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as e:
            click.echo(e.ctx.get_help() if e.ctx else str(e))
            rv = 0
        except click.ClickException as e:
            _fail(e.format_message())
            rv = EXIT_ERROR
        except click.exceptions.Abort:
            _fail("aborted")
            rv = EXIT_ERROR
        except AllocReplayError as e:
            _fail(str(e))
            rv = EXIT_ERROR
        except _output.Terminated as e:  # SIGTERM / SIGHUP: temporary files are gone already
            _fail(f"terminated by signal {e.signum}")
            rv = 128 + e.signum
        except BrokenPipeError:  # outside a command (see invoke)
            _silence_stdout()
            rv = 0
        except OSError as e:
            # Writing an output failed (disk full, permissions...): the file and the reason.
            _fail(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
            rv = EXIT_ERROR
        if _output.work_still_running():
            # Interrupted while the core still works in an abandoned thread: exit now, without
            # the interpreter's shutdown (which would wait for it, or race it).
            _output.remove_pending()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(rv if isinstance(rv, int) else EXIT_ERROR)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        # Caught here, before click's own handler turns a closed pipe into exit code 1 (which
        # `validate` uses for "the replay differs").
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(0)


def _silence_stdout() -> None:
    """After the reader of stdout went away: point stdout at /dev/null, so that the flush at
    exit does not fail again (and print "Exception ignored ...")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (click's CliRunner)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_api.__version__, prog_name="allocreplay")
def cli() -> None:
    """Replay GPU memory allocation traces under allocator policies: what would the peak
    memory be, would it run out of memory?

    TRACE arguments take an .arrow trace or a raw capture (a PyTorch memory snapshot pickle, a
    TensorFlow / JAX profiler capture .xplane.pb or its profile directory, optionally
    .gz/.xz/.zst compressed); the format is detected from the file's bytes.
    """


for _command in (
    import_cmd,
    info_cmd,
    replay_cmd,
    policies_cmd,
    tune_cmd,
    synth_cmd,
    validate_cmd,
    plan_cmd,
    capture_cmd,
    compare_cmd,
    breakdown_cmd,
    report_cmd,
    export_snapshot_cmd,
    export_perfetto_cmd,
    devices_cmd,
    fit_cmd,
):
    cli.add_command(_command)


def main() -> None:
    # SIGTERM / SIGHUP unwind like Ctrl-C: the temporary files of the outputs are removed.
    _output.install_signal_handlers()
    cli()
