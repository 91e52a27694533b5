"""Progress bars on stderr for work Rust does with the GIL released.

A replay counts the trace rows it has walked into an atomic counter (``_api.Progress``; the
engine's hot loop bumps it every 16,384 rows: ``engine::PROGRESS_EVERY``); a thread here polls
it five times a second and draws ``label [#####.....] 52% 1,234,567/2,345,678 events``. Only when
stderr is a terminal, not with ``quiet``, and only once the work has taken a second (small
traces show nothing); the line is erased when the work ends. A load counts the bytes of its
file read (decompressed) so far, then shows the elapsed time while the content is parsed.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from allocreplay import _api, _output

if TYPE_CHECKING:
    from allocreplay._api import ReplayResult, Trace, TraceInfo

__all__ = ["Bar", "replay", "replay_file"]

DELAY_S = 1.0


def _format_bar(label: str, done: int, total: int, width: int, unit: str = "events") -> str:
    if total <= 0:
        return label
    frac = min(max(done / total, 0.0), 1.0)
    counts = f"{_api.format_bytes(done)}/{_api.format_bytes(total)}" if unit == "bytes" else f"{done:,}/{total:,} {unit}"
    tail = f" {frac:4.0%} {counts}"
    room = max(10, min(40, width - len(label) - len(tail) - 4))
    filled = round(frac * room)
    return f"{label} [{'#' * filled}{'.' * (room - filled)}]{tail}"


class Bar:
    """A progress line on ``stream`` (default stderr) while a block runs.

    ``counter``: an ``_api.Progress`` the work fills (``done`` / ``total``); without one the line
    shows the elapsed seconds. ``enabled=None``: only when the stream is a terminal."""

    def __init__(
        self,
        label: str,
        counter: _api.Progress | None = None,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        delay_s: float = DELAY_S,
        unit: str = "events",
    ) -> None:
        self.label = label
        self.unit = unit
        self.counter = counter
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.delay_s = delay_s
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.shown = 0

    def line(self, elapsed: float) -> str:
        width = shutil.get_terminal_size((100, 24)).columns
        if self.counter is not None and self.counter.total:
            done, total = self.counter.done, self.counter.total
            if done >= total and self.unit == "bytes":
                return f"{self.label}: parsing ... {elapsed:5.1f} s"
            return _format_bar(self.label, done, total, width, self.unit)
        return f"{self.label} ... {elapsed:5.1f} s"

    def _run(self) -> None:
        start = time.monotonic()
        if self.stop.wait(self.delay_s):
            return
        while not self.stop.is_set():
            self.stream.write("\r" + self.line(time.monotonic() - start) + "\033[K")
            self.stream.flush()
            self.shown += 1
            self.stop.wait(0.2)
        self.stream.write("\r\033[K")
        self.stream.flush()

    def __enter__(self) -> Bar:
        if self.enabled:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


def replay(
    trace: Trace,
    policies: Sequence[str],
    capacity: str | float | None = None,
    *,
    timeline_points: int = 2000,
    placements: bool = True,
    quiet: bool = False,
    label: str | None = None,
) -> ReplayResult:
    """``allocreplay.replay`` with a progress bar (see the module's docstring)."""
    counter = _api.Progress()
    specs = list(policies)
    label = label or f"replaying under {len(specs)} polic{'y' if len(specs) == 1 else 'ies'}"
    with Bar(label, counter, enabled=False if quiet else None):
        # In a worker thread under the CLI, so that Ctrl-C stops it at once (_output.interruptible).
        return _output.interruptible(_api.replay_counted, trace, specs, counter, capacity, timeline_points, placements)


def replay_file(
    path: str,
    policies: Sequence[str],
    capacity: str | float | None = None,
    *,
    timeline_points: int = 2000,
    placements: bool = True,
    quiet: bool = False,
) -> tuple[ReplayResult, TraceInfo]:
    """``replay`` of an ``.arrow`` file streamed batch by batch (``_api.replay_file_counted``),
    with a progress bar (the elapsed time while the file is checked, then the rows replayed);
    also the trace's info."""
    counter = _api.Progress()
    specs = list(policies)
    label = f"replaying {os.path.basename(path)} under {len(specs)} polic{'y' if len(specs) == 1 else 'ies'}"
    with Bar(label, counter, enabled=False if quiet else None):
        return _output.interruptible(_api.replay_file_counted, path, specs, counter, capacity, timeline_points, placements)


def load(path: str, meta: str | None = None, allocator: str | None = None, *, quiet: bool = False, lenient: bool = False) -> Trace:
    """``allocreplay.load`` with a progress bar: the bytes of the file read (decompressed) so
    far, then the elapsed time while the content is parsed."""
    # A FIFO, a device, a socket: refused before the core opens it (a read that may never end).
    _output.check_input(path)
    _output.check_input(meta)
    counter = _api.Progress()
    with Bar(f"loading {os.path.basename(path)}", counter, enabled=False if quiet else None, unit="bytes"):
        return _output.interruptible(_api.load_counted, path, counter, meta, allocator, lenient)
