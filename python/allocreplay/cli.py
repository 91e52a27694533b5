"""The ``allocreplay`` command line: ``import``, ``info``, ``replay``, ``validate``, ``plan``, ``policies``, ``tune``, ``synth``, ``capture``.

Every error — a bad file, a bad option — is one line on stderr, ``error: <file>: <what is
wrong>``, and exit code 2; never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import click

from allocreplay import _core
from allocreplay._api import Trace, load
from allocreplay._api import plan as _plan
from allocreplay._api import replay as _replay
from allocreplay._api import validate as _validate
from allocreplay.errors import AllocReplayError

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
    ) -> Any:  # type: ignore[override]
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as e:  # type: ignore[misc]
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
        except BrokenPipeError:
            rv = 0
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


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


class _Progress:
    """An elapsed-time indicator on stderr while Rust works with the GIL released; only when
    stderr is a terminal, and only once the work has taken a second (small traces show
    nothing). The line is erased when the work ends."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        start = time.monotonic()
        if self.stop.wait(1.0):
            return
        shown = False
        while not self.stop.is_set():
            sys.stderr.write(f"\r{self.label} ... {time.monotonic() - start:5.1f} s")
            sys.stderr.flush()
            shown = True
            self.stop.wait(0.2)
        if shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty():
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


def _load(path: str, meta: str | None, allocator: str | None = None) -> Trace:
    with _Progress(f"loading {os.path.basename(path)}"):
        return load(path, meta=meta, allocator=allocator)


_allocator_option = click.option(
    "--allocator",
    metavar="NAME",
    help="Profiler captures (.xplane.pb): the BFC allocator whose events to import (GPU_0_bfc, xla_gpu_host_bfc...); default: the device allocator with most events.",
)


@cli.command("import")
@click.argument("src")
@click.option("-o", "--output", "out", required=True, metavar="OUT.arrow", help="Where to write the trace (Arrow IPC).")
@click.option("--meta", metavar="JSON", help="Capture metadata (total memory, memory cap); default: NAME.json beside NAME.pickle.xz.")
@_allocator_option
def import_cmd(src: str, out: str, meta: str | None, allocator: str | None) -> None:
    """Import a raw capture SRC into the canonical .arrow trace format."""
    trace = _load(src, meta, allocator)
    trace.save(out)
    info = trace.info()
    click.echo(f"{out}: {info['events']:,} events ({info['allocs']:,} allocs, {info['frees']:,} frees) from {src}", err=True)


def _device_line(md: dict[str, Any], index: int) -> str:
    for d in md.get("devices", []):
        if d.get("index") == index:
            parts = [p for p in (d.get("name"), d.get("total_memory") and _gib(d["total_memory"])) if p]
            if d.get("memory_cap"):
                parts.append(f"cap {_gib(d['memory_cap'])}")
            return f"{index} ({', '.join(parts)})" if parts else str(index)
    return str(index)


@cli.command("info")
@click.argument("trace")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--meta", metavar="JSON", help="Capture metadata for a raw source (see `import`).")
@_allocator_option
def info_cmd(trace: str, as_json: bool, meta: str | None, allocator: str | None) -> None:
    """Counts and recorded peaks of a TRACE."""
    t = _load(trace, meta, allocator)
    info = t.info()
    if as_json:
        click.echo(json.dumps(info))
        return
    md = t.metadata
    source = " ".join(p for p in (info["source"], info.get("source_version")) if p)
    rows = [
        ("trace", trace),
        ("source", f"{source} (format version {info['format_version']})"),
        ("devices", "; ".join(_device_line(md, d) for d in info["devices"]) or "-"),
        ("events", f"{info['events']:,}"),
        ("allocs / frees", f"{info['allocs']:,} / {info['frees']:,} (free requests {info['free_requests']:,})"),
        ("segment events", f"{info['segment_events']:,}"),
        ("OOMs recorded", f"{info['ooms']:,}"),
        ("streams / pools", f"{info['streams']} / {info['pools']}"),
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
        rows.append(("seeded", f"history truncated: {info['seed_allocs']:,} live allocations and {info['seed_segments']:,} segments from the final state"))
    rows += [
        ("peak live requested", _gib(info["peak_live_requested_bytes"])),
        (
            "recorded peak reserved",
            _gib(info["recorded_peak_reserved_bytes"]) if info["recorded_peak_reserved_bytes"] is not None else "- (no segments recorded)",
        ),
        ("duration", "-" if info["duration_s"] is None else f"{info['duration_s']:.3f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)])


@cli.command("replay")
@click.argument("trace")
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
    help="Device memory available: bytes, a size (80GiB, 81920MiB, 16GB) or a fraction of the trace's device memory (0.5). Default: the recorded device's total memory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per policy and device.")
@click.option("-o", "--output", "out", metavar="RESULT.arrow", help="Also write the summary table as an Arrow IPC file.")
@click.option("--meta", metavar="JSON", help="Capture metadata for a raw source (see `import`).")
@click.option("--plot", "plot_path", metavar="FILE.png", help="Also draw the memory timeline of every policy (needs matplotlib).")
@_allocator_option
def replay_cmd(
    trace: str, policies: tuple[str, ...], capacity: str | None, as_json: bool, out: str | None, meta: str | None, plot_path: str | None, allocator: str | None
) -> None:
    """Replay TRACE under allocator policies and report peak memory and OOMs."""
    specs = list(policies) or ["pytorch"]
    if capacity is not None:
        _core.parse_capacity(capacity)  # reject a bad size before loading the trace
    if plot_path:
        from allocreplay.plot import _pyplot

        _pyplot()  # say now, not after the replay, that matplotlib is missing
    t = _load(trace, meta, allocator)
    with _Progress(f"replaying under {len(specs)} polic{'y' if len(specs) == 1 else 'ies'}"):
        result = _replay(t, specs, capacity, placements=False)
    summary = result.summary
    if out:
        summary.write_ipc(out)
    if plot_path:
        from allocreplay.plot import plot_timeline

        plot_timeline(result, plot_path, title=os.path.basename(trace))
        click.echo(f"timeline written to {plot_path}", err=True)
    if as_json:
        click.echo(json.dumps(summary.to_dicts()))
        return
    info = t.info()
    recorded = info["recorded_peak_reserved_bytes"]
    click.echo(
        f"{trace}: {info['events']:,} events on device(s) {', '.join(map(str, info['devices']))}"
        + (f"; the recorded run's peak reserved: {_gib(recorded)}" if recorded is not None else "")
    )
    header = ["policy", "device", "peak allocated", "peak reserved", "device allocs", "retries", "OOMs", "first OOM at event", "seconds"]
    rows = [
        [
            r["policy"],
            str(r["device"]),
            _gib(r["peak_allocated_bytes"]),
            _gib(r["peak_reserved_bytes"]),
            f"{r['num_device_alloc']:,}",
            f"{r['num_alloc_retries']:,}",
            f"{r['num_ooms']:,}",
            "-" if r["first_oom_event"] is None else f"{r['first_oom_event']:,}",
            f"{r['replay_seconds']:.3f}",
        ]
        for r in summary.iter_rows(named=True)
    ]
    if any(r.get("pages_migrated") for r in summary.iter_rows(named=True)):
        # Unified memory (`managed`): what oversubscription would move between host and device.
        header.insert(-1, "migrated")
        for row, r in zip(rows, summary.iter_rows(named=True)):
            row.insert(-1, f"{r['pages_migrated']:,} pages, {_gib(r['bytes_migrated'])}")
    click.echo(_table(rows, header))


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
    help="Device memory to fit in: bytes, a size (16GiB) or a fraction of the trace's device memory. Default: the recorded device's total memory.",
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
    type=click.IntRange(min=1),
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
@click.option("--threads", type=click.IntRange(min=0), default=0, help="Local backend: worker threads (0: one per core).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Rows of the table to print.")
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
        click.echo(json.dumps(ranked.select(keys).to_dicts()))
        return
    grid = grid_size(fw)
    how = "the whole grid" if len(specs) >= grid else f"{len(specs)} of a grid of {grid:,} (seed {seed})"
    events = sum(len(t) for t in loaded)
    cap = f"capacity {_gib(_cap_bytes(loaded[0], capacity))}" if _cap_bytes(loaded[0], capacity) else "no capacity"
    click.echo(f"{', '.join(traces)}: {events:,} events; {cap}; {fw} settings: {how}; objective {objective}")
    d = ranked.filter(ranked["is_default"])
    if len(d):
        r = d.row(0, named=True)
        click.echo(
            f"defaults: peak reserved {_gib(r['peak_reserved_bytes'])}, margin {_margin(r['margin_bytes'])}, retries {r['num_alloc_retries']:,}, "
            f"OOMs {r['num_ooms']:,}, device calls {r['device_calls']:,}{'' if r['fits'] else ' - does NOT fit'}"
        )
    header = ["#", "env (paste this)", "fits", "peak reserved", "margin", "vs defaults", "retries", "OOMs", "device calls", "pareto"]
    rows = [
        [
            str(r["rank"]),
            r["env"] or "(defaults)",
            "yes" if r["fits"] else "no",
            _gib(r["peak_reserved_bytes"]),
            _margin(r["margin_bytes"]),
            _delta(r["peak_vs_default_bytes"]),
            f"{r['num_alloc_retries']:,}",
            f"{r['num_ooms']:,}",
            f"{r['device_calls']:,}",
            "*" if r["pareto"] else "",
        ]
        for r in ranked.head(top).iter_rows(named=True)
    ]
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i in (1, 9) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()  # noqa: E731
    click.echo("\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows)]))
    best = ranked.row(0, named=True)
    if best["fits"]:
        click.echo(f"best: {best['env'] or '(the defaults)'}   # replay --policy '{best['policy']}'")
    else:
        click.echo("no setting fits: every one runs out of memory on at least one trace")


def _cap_bytes(trace: Trace, capacity: str | None) -> int | None:
    devices = trace.metadata.get("devices") or [{}]
    total = devices[0].get("total_memory")
    if capacity is None:
        return int(total) if total else None
    c = _core.parse_capacity(capacity)
    if isinstance(c, float):
        return int(total * c) if total else None
    return c


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
    "--tile", "n", type=click.IntRange(min=1), required=True, metavar="N", help="Repeat the trace N times (fresh allocation ids, shifted addresses and times)."
)
@click.option("-o", "--output", "out", required=True, metavar="OUT.arrow", help="Where to write the long trace.")
@click.option("--meta", metavar="JSON", help="Capture metadata for a raw source (see `import`).")
def synth_cmd(trace: str, n: int, out: str, meta: str | None) -> None:
    """A long trace made from a real one, for benchmarks: TRACE repeated N times."""
    t = _load(trace, meta)
    tiled = Trace(_core.tile(t._inner, n))
    tiled.save(out)
    click.echo(f"{out}: {len(tiled):,} events ({n} x {len(t):,} from {trace})", err=True)


@cli.command("validate")
@click.argument("trace")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--meta", metavar="JSON", help="Capture metadata for a raw source (see `import`).")
def validate_cmd(trace: str, as_json: bool, meta: str | None) -> None:
    """Replay TRACE under the settings and memory cap it recorded and compare, decision by
    decision, with what the real allocator did. Exit code 1 when the replay differs."""
    report = _validate(_load(trace, meta))
    if as_json:
        click.echo(json.dumps(report))
    else:
        for r in report.get("devices", [report]):
            if r.get("device") is not None and len(report.get("devices", [])) > 1:
                click.echo(f"device {r['device']}:")
            _print_validation(r)
        click.echo("OK: the replay reproduces the recorded decisions" if report["ok"] else "DIFFERENT: see the rows above")
    if not report["ok"]:
        sys.exit(1)


def _print_validation(r: dict[str, Any]) -> None:
    def pair(rec: Any, rep: Any, fmt=lambda x: f"{x:,}") -> str:
        if rec is None:
            return f"{fmt(rep)} (not recorded)"
        mark = "=" if rec == rep else "≠"
        return f"{fmt(rep)} {mark} recorded {fmt(rec)}"

    rows = []
    if "chunk_match" in r:
        # A BFC trace (TensorFlow / JAX profiler capture): every event's chunk and bytes in use.
        rows.append(("allocator", f"{r.get('allocator')} replayed as {r.get('policy')} (settings {r.get('settings_source')})"))
        rows.append(("chunks as recorded", f"{r['chunk_match']:.4%} of {r.get('events', 0):,} events"))
        rows.append(("bytes in use as recorded", f"{r['in_use_match']:.4%} of {r.get('events', 0):,} events"))
        if "peak_in_use_replayed" in r:
            rows.append(("peak in use", pair(r.get("peak_in_use_recorded"), r["peak_in_use_replayed"], _gib)))
        if r.get("pool_bytes_recorded") is not None:
            rows.append(("pool bytes", pair(r.get("pool_bytes_recorded"), r["pool_bytes_replayed"], _gib)))
    if "address_match" in r:
        rows.append(("allocations at the recorded address", f"{r['address_match']:.4%} of {r.get('allocs', 0):,}"))
    if "segment_events_match" in r:
        rows.append(
            (
                "segment events",
                ("identical" if r["segment_events_match"] else f"differ from #{r.get('first_segment_mismatch')}")
                + f" ({r.get('segment_events_recorded', 0):,} recorded, {r.get('segment_events_replayed', 0):,} replayed)",
            )
        )
    if "peak_reserved_replayed" in r:
        rows.append(("peak reserved", pair(r.get("peak_reserved_recorded"), r["peak_reserved_replayed"], _gib)))
    if "peak_allocated_replayed" in r:
        rows.append(("peak allocated", pair(r.get("peak_allocated_recorded"), r["peak_allocated_replayed"], _gib)))
    if "num_alloc_retries_replayed" in r:
        rows.append(("alloc retries", pair(r.get("num_alloc_retries_recorded"), r["num_alloc_retries_replayed"])))
    if "num_ooms_replayed" in r:
        rows.append(("OOMs", pair(r.get("num_ooms_recorded"), r["num_ooms_replayed"])))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"  {k:<{width}}  {v}")


@cli.command("plan")
@click.argument("dump_dir")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per program.")
@click.option(
    "--runtime",
    "runtime_out",
    metavar="OUT.arrow",
    help="Also write the allocations the JAX runtime makes running a program (arguments; per call the outputs and the temp arena), to replay under jax/bfc policies.",
)
@click.option("--program", metavar="NAME", help="With --runtime: the program (a substring of its name; default the largest temp arena).")
@click.option("--calls", type=click.IntRange(min=1), default=3, show_default=True, help="With --runtime: how many calls of the program.")
def plan_cmd(dump_dir: str, as_json: bool, runtime_out: str | None, program: str | None, calls: int) -> None:
    """XLA's buffer assignment of each program in DUMP_DIR (XLA_FLAGS=--xla_dump_to=DUMP_DIR
    --xla_dump_hlo_as_proto): the recorded preallocated-temp size, ours (XLA's heap planner
    replayed from the dump), the max-live lower bound, arguments and outputs."""
    plans = _plan(dump_dir)
    if runtime_out:
        from allocreplay._api import xla_runtime

        xla_runtime(dump_dir, program, calls).save(runtime_out)
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
    click.echo(_table(rows, header))


@cli.command("capture", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", "out", required=True, metavar="OUT.arrow", help="The trace to write; several devices give OUT_STEM.devN.arrow, one per device.")
@click.option(
    "--framework",
    type=click.Choice(["auto", "pytorch", "jax", "tf"]),
    default="auto",
    show_default=True,
    help="What to record: auto records whichever framework the command uses.",
)
@click.option(
    "--max-entries",
    type=click.IntRange(min=1),
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
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND [ARGS]...")
def capture_cmd(out: str, framework: str, max_entries: int, stacks: str, keep_raw: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND (python train.py ...) unchanged with allocation recording on from its first
    allocation, and write what it recorded as an Arrow trace: PyTorch's allocator history
    (dumped at exit, also after an exception or out-of-memory error), JAX's / TensorFlow's BFC
    events through their profiler (for JAX with XLA's dumps of the compiled programs, kept in
    OUT_STEM.xla_dump/), with the device, memory cap, allocator settings and versions that the
    raw formats lack. Exit code: the command's (2 when nothing could be captured)."""
    from allocreplay.capture import _runner

    result = _runner.run(list(command), out, framework=framework, max_entries=max_entries, stacks=stacks, keep_raw=keep_raw)
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
    if outcome and outcome.traces:
        click.echo(f"check it: allocreplay validate {outcome.traces[0].path}", err=True)
    if result.exit_code:
        click.echo(f"the command exited with code {result.exit_code}", err=True)
        sys.exit(result.exit_code)


def main() -> None:
    cli()
