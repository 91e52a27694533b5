"""What the commands share besides their options: loading a trace with its messages, checking
outputs before the work, formatting bytes and tables."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import IO, Any

import click

from allocreplay import _api, _output, analysis
from allocreplay._api import ReplayResult, Trace
from allocreplay.progress import Bar
from allocreplay.progress import load as _load_progress
from allocreplay.progress import replay as _replay_progress

# What each capacity_source means, in the words every command prints (analysis.limits).
CAPACITY_SOURCES = analysis.CAPACITY_SOURCES


def gib(n: int | None) -> str:
    return "-" if n is None else _api.format_bytes(int(n))


def peak_range(r: dict[str, Any]) -> str:
    """A summary row's peak reserved, with the range real runs land in where the policy's real
    peak varies from run to run (``cuda-async``: ``peak_reserved_low_bytes`` –
    ``peak_reserved_high_bytes``)."""
    peak, low, high = r["peak_reserved_bytes"], r.get("peak_reserved_low_bytes"), r.get("peak_reserved_high_bytes")
    if peak is None or low is None or high is None or low == high == peak:
        return gib(peak)
    return f"{gib(peak)} ({gib(low)} – {gib(high)})"


RANGE_NOTE = (
    "cuda-async: the real driver's peak varies from run to run; the range in brackets is where real runs "
    "land around the replay (calibrated on 17 workloads' real runs, docs/cuda-async-band.md), and 'fits' "
    "is judged at its high end"
)


def has_range(rows: Any) -> bool:
    """Whether any summary row gives a range (see :func:`peak_range`)."""
    return any(r.get("peak_reserved_low_bytes") != r.get("peak_reserved_high_bytes") for r in rows)


def smallest_limits(loaded: Sequence[Trace], capacity: str | None, policies: Sequence[tuple[str, str]]) -> str:
    """Where no policy fits: the line saying at which limit each of ``policies`` (label, spec)
    would, on every trace (analysis.smallest_fitting_capacity: a bisection to 2 MiB from the
    smallest limit in use, each candidate replayed). What `tune` and `compare` print."""
    in_use = [cap for t in loaded for _, cap, _ in analysis.limits(t, capacity).iter_rows() if cap is not None]
    above = min(in_use, default=0)
    parts = []
    for label, policy in policies:
        cap = analysis.smallest_fitting_capacity(list(loaded), policy, above=above)
        parts.append(f"{label} at {'no limit up to 1 TiB' if cap is None else f'{gib(cap)} ({cap:,} bytes)'}")
    return f"smallest limits that fit (every trace; bisection to 2 MiB, each replayed): {', '.join(parts)}"


def progress_bar(label: str, quiet: bool = False) -> Bar:
    """A progress line on stderr while Rust works with the GIL released (see
    :mod:`allocreplay.progress`): only on a terminal, not with ``quiet``, and only once the
    work has taken a second."""
    return Bar(label, enabled=False if quiet else None)


def load_trace(path: str, meta: str | None, allocator: str | None = None, quiet: bool = False, lenient: bool = False) -> Trace:
    trace = _load_progress(path, meta, allocator, quiet=quiet, lenient=lenient)
    skipped = trace.info().lenient_skipped
    if skipped:
        click.echo(f"{path}: {skipped:,} events skipped (--lenient)", err=True)
    return trace


def check_capacity(capacity: str | None) -> None:
    """Refuses a bad --capacity now, before the trace is loaded (the replay parses it again)."""
    if capacity is not None:
        _api.parse_capacity(capacity)


def replayed(trace: str, policies: tuple[str, ...], capacity: str | None, meta: str | None, quiet: bool) -> tuple[Trace, ReplayResult]:
    """TRACE loaded and replayed under ``policies`` (default pytorch), without placements."""
    specs = list(policies) or ["pytorch"]
    check_capacity(capacity)
    t = load_trace(trace, meta, None, quiet)
    return t, _replay_progress(t, specs, capacity, placements=False, quiet=quiet)


def check_output(path: str | None, *inputs: str | None) -> _output.Target | None:
    """Resolves and checks the output ``path`` now, before any work (see :mod:`allocreplay._output`):
    its folder exists, it is not a directory nor a block device, nor one of ``inputs``."""
    if path is None:
        return None
    return _output.target(path, inputs)


def output_beside(out: str, trace: str, meta: str | None) -> _output.Target:
    """:func:`check_output` of a required output of a command that reads ``trace`` (and its
    metadata, given or beside it)."""
    return _output.target(out, (trace, meta, sidecar(trace, meta)))


def sidecar(path: str, meta: str | None) -> str | None:
    """The metadata ``NAME.json`` a raw source ``NAME.pickle.xz`` is read with when no
    ``--meta`` is given (``import::sidecar_json``): an input too."""
    if meta is not None:
        return None
    name = os.path.basename(path)
    candidate = os.path.join(os.path.dirname(path), name.split(".")[0] + ".json")
    return candidate if candidate != path else None


def one_stdout(*outputs: tuple[str, str | None]) -> bool:
    """True when one of the outputs is stdout (``-``); two of them cannot both be."""
    on_stdout = [name for name, path in outputs if path == "-"]
    if len(on_stdout) > 1:
        raise click.UsageError(f"{' and '.join(on_stdout)} cannot both write to stdout")
    return bool(on_stdout)


def write_binary(out: _output.Target, writer: Callable[[IO[bytes]], object]) -> None:
    """Writes ``out`` (stdout, a device, a FIFO, or a file atomically) with ``writer``."""
    _output.write_bytes(out, writer)


def save_trace(trace: Trace, out: _output.Target) -> None:
    if out.kind == "stdout":
        write_binary(out, lambda f: f.write(trace.ipc_bytes()))
    else:
        trace.save(out.path)  # Trace.save writes through allocreplay._output too


def table(rows: list[list[str]], header: list[str], text_columns: Sequence[int] = (0,)) -> str:
    """Columns of text (the policy, an error) are aligned left, numbers right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    left = {i % len(header) for i in text_columns}

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)])


def count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"
