"""The ``allocreplay`` command line: ``import``, ``info``, ``replay``, ``validate``, ``plan``, ``policies``, ``tune``, ``synth``, ``capture``.

Every error — a bad file, a bad option — is one line on stderr, ``error: <file>: <what is
wrong>``, and exit code 2; never a traceback. Files a command writes (``-o``, ``--plot``,
``--runtime``) are checked before the work starts and written by :mod:`allocreplay._output`:
atomically (a temporary file beside the target, renamed once complete), symlinks followed,
devices and FIFOs written through, an input never overwritten; ``-`` writes them to stdout. A
closed pipe (``allocreplay info X | head -1``) ends the command quietly with exit code 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

import click

from allocreplay import _core, _output, analysis
from allocreplay._api import Trace, _streams, validate_reports, validation_dict
from allocreplay._api import plan as _plan
from allocreplay._core import BfcValidationReport, ValidationReport
from allocreplay.errors import AllocReplayError
from allocreplay.progress import Bar
from allocreplay.progress import load as _load_progress
from allocreplay.progress import replay as _replay_progress
from allocreplay.progress import replay_file as _replay_file_progress

EXIT_ERROR = 2
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
@click.version_option(_core.__version__, prog_name="allocreplay")
def cli() -> None:
    """Replay GPU memory allocation traces under allocator policies: what would the peak
    memory be, would it run out of memory?

    TRACE arguments take an .arrow trace or a raw capture (a PyTorch memory snapshot pickle, a
    TensorFlow / JAX profiler capture .xplane.pb or its profile directory, optionally
    .gz/.xz/.zst compressed); the format is detected from the file's bytes.
    """


def _gib(n: int | None) -> str:
    return "-" if n is None else _core.format_bytes(n)


def _Progress(label: str, quiet: bool = False) -> Bar:
    """A progress line on stderr while Rust works with the GIL released (see
    :mod:`allocreplay.progress`): only on a terminal, not with ``quiet``, and only once the
    work has taken a second."""
    return Bar(label, enabled=False if quiet else None)


def _load(path: str, meta: str | None, allocator: str | None = None, quiet: bool = False, lenient: bool = False) -> Trace:
    trace = _load_progress(path, meta, allocator, quiet=quiet, lenient=lenient)
    skipped = trace.info().lenient_skipped
    if skipped:
        click.echo(f"{path}: {skipped:,} events skipped (--lenient)", err=True)
    return trace


_lenient_option = click.option(
    "--lenient",
    is_flag=True,
    help="Skip events that break the trace's semantics (double free, free of an unknown id, backwards time, undeclared device or pool) instead of refusing the trace; the count is reported.",
)


# A trace to read: a file, or a profiler's directory; missing files are the core's to report
# (with the path, as every error does).
TRACE_PATH = click.Path(dir_okay=True, path_type=str)
# A file to write; "-" is stdout.
OUT_PATH = click.Path(dir_okay=False, allow_dash=True, path_type=str)


def _check_output(path: str | None, *inputs: str | None) -> _output.Target | None:
    """Resolves and checks the output ``path`` now, before any work (see :mod:`allocreplay._output`):
    its folder exists, it is not a directory nor a block device, nor one of ``inputs``."""
    if path is None:
        return None
    return _output.target(path, inputs)


def _sidecar(path: str, meta: str | None) -> str | None:
    """The metadata ``NAME.json`` a raw source ``NAME.pickle.xz`` is read with when no
    ``--meta`` is given (``import::sidecar_json``): an input too."""
    if meta is not None:
        return None
    name = os.path.basename(path)
    candidate = os.path.join(os.path.dirname(path), name.split(".")[0] + ".json")
    return candidate if candidate != path else None


def _one_stdout(*outputs: tuple[str, str | None]) -> bool:
    """True when one of the outputs is stdout (``-``); two of them cannot both be."""
    on_stdout = [name for name, path in outputs if path == "-"]
    if len(on_stdout) > 1:
        raise click.UsageError(f"{' and '.join(on_stdout)} cannot both write to stdout")
    return bool(on_stdout)


def _write_binary(out: _output.Target, writer: Callable[[IO[bytes]], object]) -> None:
    """Writes ``out`` (stdout, a device, a FIFO, or a file atomically) with ``writer``."""
    _output.write_bytes(out, writer)


def _save_trace(trace: Trace, out: _output.Target) -> None:
    if out.kind == "stdout":
        _write_binary(out, lambda f: f.write(trace.ipc_bytes()))
    else:
        trace.save(out.path)  # Trace.save writes through allocreplay._output too


_allocator_option = click.option(
    "--allocator",
    metavar="NAME",
    help="Profiler captures (.xplane.pb): the BFC allocator whose events to import (GPU_0_bfc, xla_gpu_host_bfc...); default: the device allocator with most events.",
)


_meta_option = click.option("--meta", type=click.Path(dir_okay=False, path_type=str), metavar="JSON", help="Capture metadata for a raw source (see `import`).")


@cli.command("import")
@click.argument("src", type=TRACE_PATH)
@click.option("-o", "--output", "out", type=OUT_PATH, required=True, metavar="OUT.arrow", help="Where to write the trace (Arrow IPC; - for stdout).")
@click.option(
    "--meta",
    type=click.Path(dir_okay=False, path_type=str),
    metavar="JSON",
    help="Capture metadata (total memory, memory cap); default: NAME.json beside NAME.pickle.xz.",
)
@_allocator_option
@_lenient_option
def import_cmd(src: str, out: str, meta: str | None, allocator: str | None, lenient: bool) -> None:
    """Import a raw capture SRC into the canonical .arrow trace format."""
    target = _check_output(out, src, meta, _sidecar(src, meta))
    assert target is not None
    trace = _load(src, meta, allocator, lenient=lenient)
    _save_trace(trace, target)
    info = trace.info()
    click.echo(f"{out}: {info.events:,} events ({info.allocs:,} allocs, {info.frees:,} frees) from {src}", err=True)


def _device_line(md: dict[str, Any], index: int) -> str:
    for d in md.get("devices", []):
        if d.get("index") == index:
            parts = [p for p in (d.get("name"), d.get("total_memory") and _gib(d["total_memory"])) if p]
            if d.get("memory_cap"):
                parts.append(f"cap {_gib(d['memory_cap'])}")
            return f"{index} ({', '.join(parts)})" if parts else str(index)
    return str(index)


@cli.command("info")
@click.argument("trace", type=TRACE_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_meta_option
@_allocator_option
@_lenient_option
def info_cmd(trace: str, as_json: bool, meta: str | None, allocator: str | None, lenient: bool) -> None:
    """Counts and recorded peaks of a TRACE."""
    if not lenient and _streams(trace, []):
        # A large .arrow file: counted in one pass over its memory map, never loaded whole.
        with _Progress(f"reading {os.path.basename(trace)}", quiet=False):
            info, md = _core.info_file(trace)
    else:
        t = _load(trace, meta, allocator, lenient=lenient)
        info, md = t.info(), t.metadata
    if as_json:
        click.echo(json.dumps(info.to_dict()))
        return
    source = " ".join(p for p in (info.source, info.source_version) if p)
    rows = [
        ("trace", trace),
        ("source", f"{source} (format version {info.format_version})"),
        ("devices", "; ".join(_device_line(md, d) for d in info.devices) or "-"),
        ("events", f"{info.events:,}"),
        ("allocs / frees", f"{info.allocs:,} / {info.frees:,} (free requests {info.free_requests:,})"),
        ("segment events", f"{info.segment_events:,}"),
        ("OOMs recorded", f"{info.ooms:,}"),
        ("streams / pools", f"{info.streams} / {info.pools}"),
    ]
    bfc = md.get("allocator_settings") if md.get("source") == "xplane" else None
    if isinstance(bfc, dict):
        rows.append(
            (
                "allocator",
                f"{bfc.get('allocator_name')} (BFC, limit {_gib(bfc.get('memory_limit'))}); recorded peak in use {_gib(bfc.get('final_peak_bytes_in_use'))}",
            )
        )
    if md.get("seeded"):
        rows.append(("seeded", f"history truncated: {info.seed_allocs:,} live allocations and {info.seed_segments:,} segments from the final state"))
    rows += [
        ("peak live requested", _gib(info.peak_live_requested_bytes)),
        (
            "recorded peak reserved",
            _gib(info.recorded_peak_reserved_bytes) if info.recorded_peak_reserved_bytes is not None else "- (no segments recorded)",
        ),
        ("duration", "-" if info.duration_s is None else f"{info.duration_s:.3f} s"),
    ]
    if info.lenient_skipped is not None:
        rows.append(("skipped (--lenient)", f"{info.lenient_skipped:,} events"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")


def _table(rows: list[list[str]], header: list[str], text_columns: Sequence[int] = (0,)) -> str:
    """Columns of text (the policy, an error) are aligned left, numbers right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    left = {i % len(header) for i in text_columns}

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)])


# The one default every command replays at (analysis.limits, the core's replay::default_limit).
_CAPACITY_HELP = (
    "Device memory available: bytes, a size (80GiB, 81920MiB, 16GB) or a fraction of the trace's device memory (0.5). "
    "Default: the limit the recorded run had: its set_per_process_memory_fraction cap when it recorded one, else (PyTorch) "
    "the device's memory minus the CUDA context's share, else the device's memory; every output says which (capacity_source)."
)


@cli.command("replay")
@click.argument("trace", type=TRACE_PATH)
@click.option(
    "-p",
    "--policy",
    "policies",
    multiple=True,
    metavar="SPEC",
    help=f"Policy to replay under, NAME[:OPTIONS] (repeatable; default pytorch). Known: {', '.join(_core.POLICY_NAMES)}.",
)
@click.option(
    "-c",
    "--capacity",
    metavar="SIZE",
    help=_CAPACITY_HELP,
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy and device.")
@click.option(
    "-o",
    "--output",
    "out",
    type=OUT_PATH,
    metavar="RESULT.arrow",
    help="Also write the summary table as an Arrow IPC file (- for stdout; the table then goes to stderr).",
)
@_meta_option
@click.option(
    "--plot",
    "plot_path",
    type=OUT_PATH,
    metavar="FILE.png",
    help="Also draw the memory timeline of every policy (PNG, SVG, PDF by extension; - for PNG on stdout; needs matplotlib).",
)
@_allocator_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@_lenient_option
def replay_cmd(
    trace: str,
    policies: tuple[str, ...],
    capacity: str | None,
    as_json: bool,
    out: str | None,
    meta: str | None,
    plot_path: str | None,
    allocator: str | None,
    quiet: bool,
    lenient: bool,
) -> None:
    """Replay TRACE under allocator policies and report peak memory and OOMs. A policy that
    cannot run on the trace says why in its row's error column; the others still run."""
    specs = list(policies) or ["pytorch"]
    # Everything that can be refused is refused before the trace is loaded and replayed.
    stdout_taken = _one_stdout(("-o", out), ("--plot", plot_path), *([("--json", "-")] if as_json else []))
    out_target = _check_output(out, trace, meta, _sidecar(trace, meta))
    plot_target = _check_output(plot_path, trace, meta, _sidecar(trace, meta))
    if out_target and plot_target and out_target.kind == plot_target.kind == "file" and out_target.real == plot_target.real:
        raise click.UsageError(f"-o and --plot both write {out}")
    if capacity is not None:
        _core.parse_capacity(capacity)
    if plot_path:
        from allocreplay.plot import _pyplot

        _pyplot()  # say now, not after the replay, that matplotlib is missing
    if not lenient and _streams(trace, specs):
        # A large .arrow file: streamed from its memory map, never loaded whole (issue #12).
        result, info = _replay_file_progress(trace, specs, capacity, placements=False, quiet=quiet)
    else:
        t = _load(trace, meta, allocator, quiet, lenient)
        result = _replay_progress(t, specs, capacity, placements=False, quiet=quiet)
        info = t.info()
    summary = result.summary
    if out_target:
        _write_binary(out_target, summary.write_ipc)
    if plot_target and plot_path:
        from allocreplay.plot import plot_timeline

        fmt = "png" if plot_path == "-" else (os.path.splitext(plot_path)[1].lstrip(".").lower() or "png")
        _write_binary(plot_target, lambda f: plot_timeline(result, f, title=os.path.basename(trace), format=fmt))
        if plot_path != "-":
            click.echo(f"timeline written to {plot_path}", err=True)
    if as_json:
        click.echo(json.dumps(summary.to_dicts()))
        return
    recorded = info.recorded_peak_reserved_bytes
    report = [
        f"{trace}: {info.events:,} events on device(s) {', '.join(map(str, info.devices))}"
        + (f"; the recorded run's peak reserved: {_gib(recorded)}" if recorded is not None else "")
    ]
    limits = {(r["capacity_bytes"], r["capacity_source"]) for r in summary.iter_rows(named=True)}
    for cap, source in sorted(limits, key=lambda x: (x[0] or 0, x[1])):
        report.append(f"limit: {'none' if cap is None else f'{cap:,} bytes ({_gib(cap)})'} — {_CAPACITY_SOURCES.get(source, source)}")
    header = ["policy", "device", "peak allocated", "peak reserved", "device allocs", "retries", "OOMs", "first OOM at event", "seconds"]

    def count(n: int | None) -> str:
        return "-" if n is None else f"{n:,}"

    rows = [
        [
            r["policy"],
            str(r["device"]),
            _gib(r["peak_allocated_bytes"]),
            _gib(r["peak_reserved_bytes"]),
            count(r["num_device_alloc"]),
            count(r["num_alloc_retries"]),
            count(r["num_ooms"]),
            count(r["first_oom_event"]),
            "-" if r["replay_seconds"] is None else f"{r['replay_seconds']:.3f}",
        ]
        for r in summary.iter_rows(named=True)
    ]
    if any(r.get("pages_migrated") for r in summary.iter_rows(named=True)):
        # Unified memory (`managed`): what oversubscription would move between host and device.
        header.insert(-1, "migrated")
        for row, r in zip(rows, summary.iter_rows(named=True)):
            row.insert(-1, "-" if r["error"] else f"{r['pages_migrated']:,} pages, {_gib(r['bytes_migrated'])}")
    text_columns = [0]
    if summary["error"].null_count() < summary.height:
        # A policy that could not run on this trace: its reason, in its own row.
        header.append("error")
        text_columns.append(-1)
        for row, r in zip(rows, summary.iter_rows(named=True)):
            row.append(" ".join((r["error"] or "").split()))
    report.append(_table(rows, header, text_columns))
    click.echo("\n".join(report), err=stdout_taken)


_CAPACITY_SOURCES = analysis.CAPACITY_SOURCES


@cli.command("policies")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy with its options.")
def policies_cmd(as_json: bool) -> None:
    """The policies --policy accepts and their options: type, default, values tune searches."""
    from allocreplay._registry import policy_dict

    infos = _core.policies()
    if as_json:
        click.echo(json.dumps([policy_dict(p) for p in infos]))
        return
    for i, p in enumerate(infos):
        if i:
            click.echo("")
        click.echo(f"{p.name}: {p.summary}")
        click.echo(f"  models {p.models}")
        if not p.options:
            continue
        rows = [[o.name, o.type, ("(" + o.default + ")") if o.unset else o.default, ", ".join(o.search) or "-", o.help] for o in p.options]
        # Every column left-aligned (help text reads badly right-aligned).
        header = ["option", "type", "default", "searched", "help"]
        widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *rows]]
        lines.insert(1, "  ".join("-" * w for w in widths[:-1]) + "  ----")
        for line in lines:
            click.echo("  " + line)


class _Bar:
    """A progress bar on stderr for long sweeps, only when stderr is a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.on = sys.stderr.isatty()
        self.start = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if not self.on:
            return
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} settings, {time.monotonic() - self.start:5.1f} s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.on:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


@cli.command("tune")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option(
    "-c",
    "--capacity",
    metavar="SIZE",
    help=_CAPACITY_HELP.replace("Device memory available", "Device memory to fit in (on every trace)"),
)
@click.option(
    "--framework", type=click.Choice(["pytorch", "tf", "jax"]), help="Whose settings to search; default: the framework that recorded the first trace."
)
@click.option(
    "--objective",
    type=click.Choice(["peak_reserved", "device_calls", "retries"]),
    default="peak_reserved",
    show_default=True,
    help="What to minimise among the settings that fit.",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1, max=2**32 - 1),
    default=256,
    show_default=True,
    metavar="N",
    help="At most N settings: the whole grid if it is smaller, else a seeded sample.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random sample.")
@click.option(
    "--backend",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: all cores here; ray: a Ray cluster (pip install 'allocreplay[ray]').",
)
@click.option("--address", metavar="ADDR", help="With --backend ray: the cluster (default: a running one, else a local one).")
@click.option("--threads", type=click.IntRange(min=0, max=65536), default=0, help="Local backend: worker threads (0: one per core).")
@click.option("--top", type=click.IntRange(min=1, max=2**32 - 1), default=10, show_default=True, help="Rows of the table to print.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of every setting, best first.")
@click.option("--meta", metavar="JSON", help="Capture metadata for a raw source (see `import`).")
def tune_cmd(
    traces: tuple[str, ...],
    capacity: str | None,
    framework: str | None,
    objective: str,
    budget: int,
    seed: int,
    backend: str,
    address: str | None,
    threads: int,
    top: int,
    as_json: bool,
    meta: str | None,
) -> None:
    """Find the allocator settings that make TRACE... fit in --capacity (on every trace), with
    the least memory and fewest device calls, and print them as the text to paste
    (PYTORCH_CUDA_ALLOC_CONF=..., TF_FORCE_GPU_ALLOW_GROWTH=..., XLA_PYTHON_CLIENT_...)."""
    from allocreplay._tune import framework_of, grid_size, search_space, tune

    if capacity is not None:
        _core.parse_capacity(capacity)
    loaded = [_load(t, meta) for t in traces]
    fw = framework or framework_of(loaded[0], traces[0])
    specs = search_space(fw, budget, seed)
    bar = _Bar("tune")
    try:
        ranked = tune(loaded, capacity, objective=objective, backend=backend, address=address, threads=threads, specs=specs, progress=bar)
    finally:
        bar.close()
    if as_json:
        keys = ["policy", "env", "fits", "peak_reserved_bytes", "margin_bytes", "num_alloc_retries", "num_ooms", "device_calls", "pareto", "is_default", "rank"]
        keys.append("error")  # why a setting cannot run (null: it ran)
        click.echo(json.dumps(ranked.select(keys).to_dicts()))
        return
    grid = grid_size(fw)
    how = "the whole grid" if len(specs) >= grid else f"{len(specs)} of a grid of {grid:,} (seed {seed})"
    events = sum(len(t) for t in loaded)
    click.echo(f"{', '.join(traces)}: {events:,} events; {_tune_limits(loaded, traces, capacity)}; {fw} settings: {how}; objective {objective}")
    d = ranked.filter(ranked["is_default"])
    if len(d):
        r = d.row(0, named=True)
        if r["error"] is not None:
            click.echo(f"defaults: cannot run: {' '.join(r['error'].split())}")
        else:
            click.echo(
                f"defaults: peak reserved {_gib(r['peak_reserved_bytes'])}, margin {_margin(r['margin_bytes'])}, retries {r['num_alloc_retries']:,}, "
                f"OOMs {r['num_ooms']:,}, device calls {r['device_calls']:,}{'' if r['fits'] else ' - does NOT fit'}"
            )
    header = ["#", "env (paste this)", "fits", "peak reserved", "margin", "vs defaults", "retries", "OOMs", "device calls", "pareto"]

    def count(n: int | None) -> str:
        return "-" if n is None else f"{n:,}"

    shown = ranked.head(top)
    # A setting that cannot run (a policy's error on a trace) is ranked last, with its reason.
    failed = shown["error"].null_count() < shown.height
    if failed:
        header.append("why it cannot run")
    rows = [
        [
            str(r["rank"]),
            r["env"] or "(defaults)",
            "yes" if r["fits"] else "no",
            _gib(r["peak_reserved_bytes"]),
            _margin(r["margin_bytes"]),
            _delta(r["peak_vs_default_bytes"]),
            count(r["num_alloc_retries"]),
            count(r["num_ooms"]),
            count(r["device_calls"]),
            "*" if r["pareto"] else "",
            *([" ".join((r["error"] or "").split())] if failed else []),
        ]
        for r in shown.iter_rows(named=True)
    ]
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in (1, 9, 10) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    click.echo("\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)]))
    best = ranked.row(0, named=True)
    if best["fits"]:
        click.echo(f"best: {best['env'] or '(the defaults)'}   # replay --policy '{best['policy']}'")
    elif best["error"] is not None:
        click.echo(f"no setting can run: {' '.join(best['error'].split())}")
    else:
        click.echo("no setting fits: every one runs out of memory on at least one trace")
    failures = ranked.filter(ranked["error"].is_not_null())
    if failures.height and failures.height > (failures["rank"] <= top).sum():
        click.echo(f"{failures.height:,} settings cannot run on these traces (the last ranks; --json lists them with their reasons)")


def _tune_limits(loaded: list[Trace], names: Sequence[str], capacity: str | None) -> str:
    """The limits the sweep replays each trace at (analysis.limits: the core's rule, as every
    command), with where they come from."""
    seen: dict[tuple[int | None, str], list[str]] = {}
    for t, name in zip(loaded, names):
        for _, cap, source in analysis.limits(t, capacity).iter_rows():
            seen.setdefault((cap, source), []).append(name)
    parts = []
    for (cap, source), where in seen.items():
        text = f"capacity {'unlimited' if cap is None else _gib(cap)} — {_CAPACITY_SOURCES.get(source, source)}"
        parts.append(text if len(seen) == 1 else f"{text} ({', '.join(dict.fromkeys(where))})")
    return "; ".join(parts)


def _margin(n: int | None) -> str:
    if n is None:
        return "-"
    return _gib(n) if n >= 0 else "-" + _gib(-n)


def _delta(n: int | None) -> str:
    if n is None:
        return "-"
    if n == 0:
        return "0"
    return ("+" if n > 0 else "-") + _gib(abs(n))


@cli.command("synth")
@click.argument("trace")
@click.option(
    "--tile",
    "n",
    type=click.IntRange(min=1, max=2**32 - 1),
    required=True,
    metavar="N",
    help="Repeat the trace N times (fresh allocation ids, shifted addresses and times).",
)
@click.option("-o", "--output", "out", required=True, metavar="OUT.arrow", help="Where to write the long trace.")
@click.option("--meta", metavar="JSON", help="Capture metadata for a raw source (see `import`).")
def synth_cmd(trace: str, n: int, out: str, meta: str | None) -> None:
    """A long trace made from a real one, for benchmarks: TRACE repeated N times."""
    target = _output.target(out, (trace, meta, _sidecar(trace, meta)))
    t = _load(trace, meta)
    # Written batch by batch as it is made: a tile of any length (100 M events) in the memory of
    # one batch.
    with _output.output_path(target) as tmp:
        events = _output.interruptible(_core.tile_file, t._inner, n, tmp)
    click.echo(f"{out}: {events:,} events ({n} x {len(t):,} from {trace})", err=True)


@cli.command("validate")
@click.argument("trace", type=TRACE_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (several devices: ok, and one object per device under devices).")
@_meta_option
@_allocator_option
@_lenient_option
@click.option(
    "--no-addresses",
    is_flag=True,
    help="Place new segments in the modelled CUDA driver address space instead of at the recorded "
    "addresses, as every what-if replay does (docs/driver-address-space.md); compares peaks, "
    "retries, OOMs and segment events.",
)
def validate_cmd(trace: str, as_json: bool, meta: str | None, allocator: str | None, lenient: bool, no_addresses: bool) -> None:
    """Replay TRACE under the settings and memory cap it recorded and compare, decision by
    decision, with what the real allocator did. Exit code 1 when the replay differs."""
    reports = validate_reports(_load(trace, meta, allocator, lenient=lenient), no_addresses=no_addresses)
    ok = all(r.ok for r in reports)
    if as_json:
        click.echo(json.dumps(validation_dict(reports)))
    else:
        for r in reports:
            if len(reports) > 1:
                click.echo(f"device {r.device}:")
            _print_validation(r)
        click.echo("OK: the replay reproduces the recorded decisions" if ok else "DIFFERENT: see the rows above")
    if not ok:
        sys.exit(1)


def _pair(rec: int | None, rep: int, fmt: Callable[[int], str] = lambda x: f"{x:,}") -> str:
    if rec is None:
        return f"{fmt(rep)} (not recorded)"
    mark = "=" if rec == rep else "≠"
    return f"{fmt(rep)} {mark} recorded {fmt(rec)}"


def _print_validation(r: ValidationReport | BfcValidationReport) -> None:
    rows: list[tuple[str, str]] = []
    if isinstance(r, BfcValidationReport):
        # A BFC trace (TensorFlow / JAX profiler capture): every event's chunk and bytes in use.
        rows.append(("allocator", f"{r.allocator} replayed as {r.policy} (settings {r.settings_source})"))
        rows.append(("chunks as recorded", f"{r.chunk_match:.4%} of {r.events:,} events"))
        rows.append(("bytes in use as recorded", f"{r.in_use_match:.4%} of {r.events:,} events"))
        rows.append(("peak in use", _pair(r.peak_in_use_recorded, r.peak_in_use_replayed, _gib)))
        if r.pool_bytes_recorded is not None:
            rows.append(("pool bytes", _pair(r.pool_bytes_recorded, r.pool_bytes_replayed, _gib)))
        rows.append(("allocations at the recorded address", f"{r.address_match:.4%} of {r.allocs:,}"))
    else:
        if r.settings_assumed:
            rows.append(("allocator settings", r.settings_assumed))
        limit = r.device_limit
        rows.append(("limit", f"{'none' if limit is None else f'{limit:,} bytes'} — {_CAPACITY_SOURCES.get(r.capacity_source, r.capacity_source)}"))
        if r.no_addresses:
            rows.append(("segment addresses", "modelled driver address space (--no-addresses)"))
        else:
            rows.append(("allocations at the recorded address", f"{r.address_match:.4%} of {r.allocs:,}"))
        rows.append(
            (
                "segment events",
                ("identical" if r.segment_events_match else f"differ from #{r.first_segment_mismatch}")
                + f" ({r.segment_events_recorded:,} recorded, {r.segment_events_replayed:,} replayed)",
            )
        )
        rows.append(("peak reserved", _pair(r.peak_reserved_recorded, r.peak_reserved_replayed, _gib)))
        rows.append(("peak allocated", _pair(r.peak_allocated_recorded, r.peak_allocated_replayed, _gib)))
        rows.append(("alloc retries", _pair(r.num_alloc_retries_recorded, r.num_alloc_retries_replayed)))
        rows.append(("OOMs", _pair(r.num_ooms_recorded, r.num_ooms_replayed)))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"  {k:<{width}}  {v}")


@cli.command("plan")
@click.argument("dump_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per program.")
@click.option(
    "--runtime",
    "runtime_out",
    type=OUT_PATH,
    metavar="OUT.arrow",
    help="Also write the allocations the JAX runtime makes running a program (arguments; per call the outputs and the temp arena), to replay under jax/bfc policies.",
)
@click.option("--program", metavar="NAME", help="With --runtime: the program (a substring of its name; default the largest temp arena).")
@click.option("--calls", type=click.IntRange(min=1, max=10_000_000), default=3, show_default=True, help="With --runtime: how many calls of the program.")
def plan_cmd(dump_dir: str, as_json: bool, runtime_out: str | None, program: str | None, calls: int) -> None:
    """XLA's buffer assignment of each program in DUMP_DIR (XLA_FLAGS=--xla_dump_to=DUMP_DIR
    --xla_dump_hlo_as_proto): the recorded preallocated-temp size, ours (XLA's heap planner
    replayed from the dump), the max-live lower bound, arguments and outputs."""
    stdout_taken = _one_stdout(("--runtime", runtime_out), *([("--json", "-")] if as_json else []))
    runtime_target = _check_output(runtime_out)
    _output.check_input(dump_dir)
    plans = _output.interruptible(_plan, dump_dir)
    if runtime_target:
        from allocreplay._api import xla_runtime

        _save_trace(_output.interruptible(xla_runtime, dump_dir, program, calls), runtime_target)
        if runtime_out != "-":
            click.echo(f"runtime trace ({calls} calls) written to {runtime_out}", err=True)
    if as_json:
        click.echo(json.dumps(plans.to_dicts()))
        return
    header = ["program", "recorded temp", "planned temp", "lower bound", "arguments", "outputs"]
    rows = [
        [
            r["program"],
            _gib(r["recorded_temp_bytes"]),
            _gib(r["planned_temp_bytes"]),
            _gib(r["lower_bound_bytes"]),
            _gib(r["argument_bytes"]),
            _gib(r["output_bytes"]),
        ]
        for r in plans.iter_rows(named=True)
    ]
    click.echo(_table(rows, header), err=stdout_taken)


@cli.command("capture", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=str),
    required=True,
    metavar="OUT.arrow",
    help="The trace to write; several devices give OUT_STEM.devN.arrow, one per device.",
)
@click.option(
    "--framework",
    type=click.Choice(["auto", "pytorch", "jax", "tf"]),
    default="auto",
    show_default=True,
    help="What to record: auto records whichever framework the command uses.",
)
@click.option(
    "--max-entries",
    type=click.IntRange(min=1, max=2**63 - 1),
    default=1_000_000,
    show_default=True,
    metavar="N",
    help="PyTorch: events the allocator's history keeps (the oldest beyond N are dropped; the trace is then seeded from the final state).",
)
@click.option(
    "--stacks",
    type=click.Choice(["python", "all", "none"]),
    default="python",
    show_default=True,
    help="PyTorch: stack of each allocation: Python frames, Python and C++ (slower), or none.",
)
@click.option("--keep-raw", is_flag=True, help="Keep the raw captures (snapshot pickle, profiler directory, XLA dump, metadata .json) in OUT_STEM.raw/.")
@click.option(
    "--no-gpu",
    is_flag=True,
    help="PyTorch without a GPU: cuda tensors are fake (no memory, no compute); the trace holds the requests the GPU run would make (docs/no-gpu.md).",
)
@click.option(
    "--device-memory",
    default=None,
    metavar="SIZE|DEVICE",
    help="--no-gpu: the device torch.cuda reports: a size (80GiB) or h200, h100-80gb, a100-80gb, a100-40gb, l4, rtx4090, v100-32gb. Default: h200.",
)
@click.option(
    "--unknown-values",
    type=click.Choice(["error", "zero"]),
    default="error",
    show_default=True,
    help="--no-gpu: when the program reads a value computed on the GPU (.item(), if t.any(), a generation loop's stopping test): stop with an error naming the line, or read it as zeros (the lines are listed in the trace's metadata).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS]...")
def capture_cmd(
    out: str,
    framework: str,
    max_entries: int,
    stacks: str,
    keep_raw: bool,
    no_gpu: bool,
    device_memory: str | None,
    unknown_values: str,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (python train.py ...) unchanged with allocation recording on from its first
    allocation, and write what it recorded as an Arrow trace: PyTorch's allocator history
    (dumped at exit, also after an exception or out-of-memory error), JAX's / TensorFlow's BFC
    events through their profiler (for JAX with XLA's dumps of the compiled programs, kept in
    OUT_STEM.xla_dump/), with the device, memory cap, allocator settings and versions that the
    raw formats lack. With --no-gpu, a PyTorch script runs without a GPU (fake cuda tensors) and
    the trace holds the requests the GPU run would make. Exit code: the command's (2 when
    nothing could be captured)."""
    from allocreplay.capture import _runner

    if not no_gpu and (device_memory is not None or unknown_values != "error"):
        raise click.UsageError("--device-memory and --unknown-values go with --no-gpu")
    ng = {"device": device_memory or "h200", "unknown": unknown_values} if no_gpu else None
    result = _runner.run(list(command), out, framework=framework, max_entries=max_entries, stacks=stacks, keep_raw=keep_raw, no_gpu=ng)
    outcome = result.outcome
    for t in outcome.traces if outcome else []:
        click.echo(t.describe(), err=True)
    for note in outcome.notes if outcome else []:
        click.echo(f"note: {' '.join(note.split())}", err=True)
    for m in result.messages:
        click.echo(" ".join(m.split()), err=True)
    if result.xla_dump:
        click.echo(f"{result.xla_dump}: XLA's optimized programs, with their buffer assignments", err=True)
    if result.raw_dir:
        click.echo(f"{result.raw_dir}: the raw captures", err=True)
    if outcome and outcome.traces and not no_gpu:
        click.echo(f"check it: allocreplay validate {outcome.traces[0].path}", err=True)
    elif outcome and outcome.traces:
        click.echo(f"replay it: allocreplay replay {outcome.traces[0].path} --policy pytorch", err=True)
    if result.exit_code:
        click.echo(f"the command exited with code {result.exit_code}", err=True)
        sys.exit(result.exit_code)


# `compare`, `report`, `export-snapshot`, `export-perfetto` (issue 15: where the memory goes).

_policies_option = click.option(
    "-p",
    "--policy",
    "policies",
    multiple=True,
    metavar="SPEC",
    help=f"Policy to replay under, NAME[:OPTIONS] (repeatable; default pytorch). Known: {', '.join(_core.POLICY_NAMES)}.",
)
_capacity_option = click.option(
    "-c",
    "--capacity",
    metavar="SIZE",
    help=_CAPACITY_HELP,
)
_meta_option = click.option("--meta", metavar="JSON", help="Capture metadata for a raw source (see `import`).")
_quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress bar.")


def _replayed(trace: str, policies: tuple[str, ...], capacity: str | None, meta: str | None, quiet: bool, placements: bool = False) -> tuple[Trace, Any]:
    specs = list(policies) or ["pytorch"]
    if capacity is not None:
        _core.parse_capacity(capacity)  # reject a bad size before loading the trace
    t = _load(trace, meta, None, quiet)
    return t, _replay_progress(t, specs, capacity, placements=placements, quiet=quiet)


@cli.command("compare")
@click.argument("trace")
@_policies_option
@_capacity_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy and device, best first.")
@_meta_option
@_quiet_option
def compare_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, as_json: bool, meta: str | None, quiet: bool) -> None:
    """Rank policies on TRACE: those that fit first, then by peak reserved memory: peak
    reserved and allocated, efficiency (allocated / reserved at the peaks), device calls,
    retries, and the first OOM with the call site that made the request. A policy that
    cannot run on TRACE is ranked last, with its reason."""
    t, result = _replayed(trace, policies, capacity, meta, quiet)
    ranked = analysis.compare(t, result)
    if as_json:
        click.echo(json.dumps(ranked.to_dicts()))
        return
    header = ["rank", "policy", "device", "peak reserved", "peak allocated", "efficiency", "device calls", "retries", "verdict", "first OOM"]
    failed = ranked["error"].null_count() < ranked.height
    if failed:
        header.append("why it cannot run")
    rows = []
    for r in ranked.iter_rows(named=True):
        if r["error"] is not None:
            rows.append([str(r["rank"]), r["policy"], str(r["device"]), *["-"] * 5, "cannot run", "-", " ".join(r["error"].split())])
            continue
        oom = "-"
        if r["first_oom_event"] is not None:
            oom = f"event {r['first_oom_event']:,}: {_gib(r['first_oom_requested_bytes'])}" + (
                f" at {r['first_oom_call_site']}" if r["first_oom_call_site"] else ""
            )
        rows.append(
            [
                str(r["rank"]),
                r["policy"],
                str(r["device"]),
                _gib(r["peak_reserved_bytes"]),
                _gib(r["peak_allocated_bytes"]),
                "-" if r["efficiency"] is None else f"{r['efficiency']:.1%}",
                f"{r['device_calls']:,}",
                f"{r['num_alloc_retries']:,}",
                "OOM" if r["oom"] else "fits",
                oom,
                *([""] if failed else []),
            ]
        )
    # The limit every row ran under, and where it comes from (analysis.limits: what `replay`
    # and `report` say too).
    limits = sorted({(r["capacity_bytes"], r["capacity_source"]) for r in ranked.iter_rows(named=True)}, key=lambda x: (x[0] or 0, x[1]))
    caps = "; ".join(f"{'unlimited' if c is None else _gib(c)} — {_CAPACITY_SOURCES.get(src, src)}" for c, src in limits)
    click.echo(f"{trace}: capacity {caps}")
    # Names and the OOM's call site read better left-aligned, numbers right-aligned.
    left = {0, 1, 8, 9, 10}
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for cells in [header, ["-" * w for w in widths], *rows]:
        click.echo("  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip())


@cli.command("breakdown")
@click.argument("trace")
@_policies_option
@_capacity_option
@click.option("--at", "at", default="peak", show_default=True, metavar="WHEN", help="peak, peak_allocated, oom, end, or an event index.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy, device and category.")
@_meta_option
@_quiet_option
def breakdown_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, at: str, as_json: bool, meta: str | None, quiet: bool) -> None:
    """What the memory each policy reserves at its peak (or --at) is made of: parameters,
    buffers, gradients, optimizer state, activations and temporaries (for a capture that tags
    its storages: `capture --no-gpu`; otherwise `untagged`), and the allocator's cache and
    fragmentation (reserved bytes no live allocation holds)."""
    from allocreplay import analysis

    if capacity is not None:
        _core.parse_capacity(capacity)
    t = _load(trace, meta, None, quiet)
    frames = []
    for spec in list(policies) or ["pytorch"]:
        with _Progress(f"replaying under {spec}", quiet):
            frames.append(analysis.breakdown(t, spec, at=int(at) if at.isdigit() else at, capacity=capacity))
    if as_json:
        click.echo(json.dumps([r for f in frames for r in f.to_dicts()]))
        return
    for k, f in enumerate(frames):
        if k:
            click.echo("")
        if f.is_empty():
            click.echo(f"{trace}: {(list(policies) or ['pytorch'])[k]}: no event matches --at {at}")
            continue
        for (device,), g in f.group_by("device", maintain_order=True):
            r0 = g.row(0, named=True)
            when = "" if at.isdigit() else f" ({at})"
            click.echo(f"{trace}: {r0['policy']}, device {device}, at event {r0['event']:,}{when}: {_gib(int(g['bytes'].sum()))} reserved")
            rows = [
                [
                    r["category"],
                    _gib(r["bytes"]),
                    "-" if r["share"] is None else f"{r['share']:.1%}",
                    f"{r['allocations']:,}",
                    r["how_tagged"],
                ]
                for r in g.iter_rows(named=True)
            ]
            click.echo(_table(rows, ["category", "bytes", "share", "allocations", "how tagged"], text_columns=(0, 4)))


@cli.command("report")
@click.argument("trace")
@_policies_option
@_capacity_option
@click.option("-o", "--output", "out", required=True, metavar="REPORT.html", help="The HTML file to write (self-contained, opens offline).")
@click.option("--top", type=click.IntRange(min=1, max=2**32 - 1), default=10, show_default=True, help="Call sites shown.")
@_meta_option
@_quiet_option
def report_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, out: str, top: int, meta: str | None, quiet: bool) -> None:
    """Write one self-contained HTML report of TRACE replayed under the policies: timelines
    on one interactive chart, fragmentation over time, the segment map and the top call sites
    at the peak, the OOM point if any (needs plotly)."""
    from allocreplay.report import _plotly, write_report

    _plotly()  # say now, not after the replay, that plotly is missing
    _output.target(out, (trace, meta, _sidecar(trace, meta)))  # refused now, before the work
    t, result = _replayed(trace, policies, capacity, meta, quiet)
    with _Progress("writing the report", quiet):
        write_report(t, result, out, title=os.path.basename(trace), capacity=capacity, top=top)
    click.echo(f"report written to {out}", err=True)


@cli.command("export-snapshot")
@click.argument("trace")
@click.option("-p", "--policy", "policy", default="pytorch", show_default=True, metavar="SPEC", help="The policy whose decisions to export.")
@_capacity_option
@click.option("-o", "--output", "out", required=True, metavar="SIM.pickle", help="The PyTorch memory snapshot to write.")
@_meta_option
@_quiet_option
def export_snapshot_cmd(trace: str, policy: str, capacity: str | None, out: str, meta: str | None, quiet: bool) -> None:
    """Write what POLICY would have done on TRACE as a PyTorch memory snapshot (pickle):
    open it in pytorch.org/memory_viz or torch.cuda._memory_viz. Addresses are the simulated
    allocator's; stacks and times are the trace's."""
    from allocreplay.export import write_snapshot

    if capacity is not None:
        _core.parse_capacity(capacity)
    _output.target(out, (trace, meta, _sidecar(trace, meta)))  # refused now, before the work
    t = _load(trace, meta, None, quiet)
    with _Progress(f"replaying under {policy}", quiet):
        snap = write_snapshot(t, policy, out, capacity=capacity)
    entries = sum(len(d) for d in snap["device_traces"])
    click.echo(f"{out}: {entries:,} trace entries and {len(snap['segments']):,} segments of {policy}", err=True)


@cli.command("export-perfetto")
@click.argument("trace")
@_policies_option
@_capacity_option
@click.option("-o", "--output", "out", required=True, metavar="MEMORY.json", help="The Chrome trace-event JSON to write.")
@click.option(
    "--points",
    type=click.IntRange(min=0, max=2**32 - 1),
    default=20000,
    show_default=True,
    help="Points per policy and device (each the maximum of its events; 0: every event).",
)
@_meta_option
@_quiet_option
def export_perfetto_cmd(trace: str, policies: tuple[str, ...], capacity: str | None, out: str, points: int, meta: str | None, quiet: bool) -> None:
    """Write allocated and reserved memory over time of each policy as Chrome trace-event
    JSON counters: open in ui.perfetto.dev or chrome://tracing."""
    from allocreplay.export import write_chrome_trace

    specs = list(policies) or ["pytorch"]
    if capacity is not None:
        _core.parse_capacity(capacity)
    _output.target(out, (trace, meta, _sidecar(trace, meta)))  # refused now, before the work
    t = _load(trace, meta, None, quiet)
    result = _replay_progress(t, specs, capacity, timeline_points=points, placements=False, quiet=quiet)
    data = write_chrome_trace(result, out)
    counters = sum(1 for e in data["traceEvents"] if e["ph"] == "C")
    click.echo(f"{out}: {counters:,} counter events", err=True)
    for f in data["otherData"].get("policies_that_cannot_run", []):
        # Not dropped: in the file as an instant event with its reason, and said here.
        click.echo(f"{out}: {f['policy']} cannot run on device {f['device']} (no counters): {' '.join(f['error'].split())}", err=True)


@cli.command("devices")
@click.argument("keys", nargs=-1, metavar="[DEVICE]...")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per device.")
def devices_cmd(keys: tuple[str, ...], as_json: bool) -> None:
    """The device catalogue: each card's memory as PyTorch sees it, the share the CUDA context
    and libraries take, what is usable (where cudaMalloc starts failing), and where each number
    comes from. DEVICE: only these (h200, a100-80gb, rtx4090...)."""
    from allocreplay._catalogue import device_rows

    try:
        rows = device_rows(keys)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if as_json:
        click.echo(json.dumps(rows))
        return
    header = ["key", "name", "total", "context", "usable", "usable GiB", "cc", "SMs"]
    sizes = ("total_bytes", "context_bytes", "usable_bytes")
    table = [[r["key"], r["name"], *(f"{r[c]:,}" for c in sizes), f"{r['usable_gib']:.2f}", r["compute_capability"], str(r["sms"])] for r in rows]
    widths = [max(len(row[c]) for row in [header, *table]) for c in range(len(header))]
    right = {2, 3, 4, 5, 7}
    for row in [header, *table]:
        click.echo("  ".join(cell.rjust(w) if c in right else cell.ljust(w) for c, (cell, w) in enumerate(zip(row, widths))).rstrip())
    click.echo("")
    click.echo("Bytes. total: torch.cuda.get_device_properties(0).total_memory; usable = total - context.")
    for r in rows:
        click.echo(f"total of {r['key']}: {r['source_total']}")
    contexts: dict[str, list[str]] = {}
    for r in rows:
        contexts.setdefault(r["source_context"], []).append(r["key"])
    for text, ks in contexts.items():
        click.echo(f"context of {', '.join(ks)}: {text}")


def _register_fit() -> None:
    from allocreplay._fit._cli import fit_cmd

    cli.add_command(fit_cmd)


_register_fit()


def main() -> None:
    # SIGTERM / SIGHUP unwind like Ctrl-C: the temporary files of the outputs are removed.
    _output.install_signal_handlers()
    cli()
