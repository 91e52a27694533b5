"""Hashes of every output the product computes on the real traces: imports, replays (summary,
timeline, segments, placements) under every registered policy, validations, and XLA plans.

A refactor that must not change behaviour (issue 27) is checked by running this before and after
and comparing: ``python scripts/output_hashes.py -o before.json`` on the old build (e.g.
``PYTHONPATH=/path/to/old/package``), then ``python scripts/output_hashes.py --compare before.json``
on the new one; the second prints each output that differs and exits 1 if any does.
``--without-key KEY`` leaves a key out of every validation report before it is hashed: hashes
written before the key was added (session 21's base predates ``address_notes``) then compare
equal where nothing else changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl

import allocreplay

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"

# The traces replayed: every real capture shipped in traces/ and the shared ones.
PATTERNS = [
    (ROOT / "traces", "*.arrow"),
    (ROOT / "traces", "*.pickle.xz"),
    (ROOT / "traces" / "cuda", "*.pickle.xz"),
    (ROOT / "traces" / "nogpu", "*.pickle.xz"),
    (ROOT / "traces" / "large", "*.pickle.xz"),
    (SHARED / "pytorch", "*.pickle.xz"),
    (SHARED / "jax", "*.xplane.pb.xz"),
    (SHARED / "tf", "*.xplane.pb"),
]
# Settings beyond each policy's defaults, and limits, replayed on every trace too.
VARIANTS = [
    ("pytorch:expandable_segments:True", None),
    ("pytorch:roundup_power2_divisions:4", None),
    ("pytorch:garbage_collection_threshold:0.6", "0.5"),
    ("pytorch:max_split_size_mb:128", None),
    ("pytorch", "1GiB"),
    ("bfc", "1GiB"),
    ("cuda-async", "0.25"),
    ("offline:alignment=4096", None),
]
XLA_DUMPS = [ROOT / "traces" / "jax_train.xla_dump", SHARED / "jax" / "jaxlm_xla_dump"]


def _digest(frame: pl.DataFrame) -> str:
    # Wall-clock columns (a replay's `replay_seconds`) differ run to run: not outputs to compare.
    frame = frame.drop([c for c in frame.columns if c.endswith("_seconds")])
    return hashlib.sha256(frame.write_csv().encode()).hexdigest()[:16]


def _text(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


# Keys left out of the validation reports before they are hashed (`--without-key`).
WITHOUT_KEYS: set[str] = set()


def _validation(report: dict[str, Any]) -> str:
    def keep(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k not in WITHOUT_KEYS}

    kept = keep(report)
    if "devices" in kept:
        kept["devices"] = [keep(d) for d in kept["devices"]]
    return _text(kept)


def _guard(out: dict[str, str], key: str, work: Callable[[], str]) -> None:
    try:
        out[key] = work()
    except allocreplay.AllocReplayError as e:
        out[key] = f"error {type(e).__name__}: {e}"


def _replay(trace: allocreplay.Trace, spec: str, capacity: str | None, placements: bool) -> str:
    r = allocreplay.replay(trace, [spec], capacity, placements=placements)
    frames = (r.summary, r.timeline, r.segments, r.placements) if placements else (r.summary, r.timeline, r.segments)
    return " ".join(_digest(f) for f in frames)


def _trace_hashes(name: str, trace: allocreplay.Trace, out: dict[str, str]) -> None:
    out[f"{name} import"] = _digest(trace.events)
    for policy in allocreplay.POLICY_NAMES:
        _guard(out, f"{name} replay {policy}", partial(_replay, trace, policy, None, True))
    for spec, capacity in VARIANTS:
        _guard(out, f"{name} replay {spec} capacity {capacity}", partial(_replay, trace, spec, capacity, False))
    if len(trace) < 200_000:
        _guard(out, f"{name} tune", lambda: _digest(allocreplay.tune(trace, "4GiB")))
    _guard(out, f"{name} validate", lambda: _validation(allocreplay.validate(trace)))
    _guard(out, f"{name} validate --no-addresses", lambda: _validation(allocreplay.validate(trace, no_addresses=True)))


def hashes(traces: list[Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in traces:
        name = str(path.relative_to(ROOT.parent))
        started = time.monotonic()
        _trace_hashes(name, allocreplay.load(path), out)
        print(f"{name}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    for dump in XLA_DUMPS:
        _guard(out, f"{dump.relative_to(ROOT.parent)} plan", partial(_plan, dump))
    return out


def _plan(dump: Path) -> str:
    return _digest(allocreplay.plan(dump))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", type=Path, help="write the hashes here (JSON)")
    parser.add_argument("--compare", type=Path, help="compare with hashes written before; exit 1 on a difference")
    parser.add_argument("--without-key", action="append", default=[], metavar="KEY", help="leave KEY out of every validation report (repeatable)")
    args = parser.parse_args()
    WITHOUT_KEYS.update(args.without_key)
    traces = sorted({p for folder, pattern in PATTERNS for p in folder.glob(pattern)})
    now = hashes(traces)
    if args.output:
        args.output.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    if args.compare:
        before = json.loads(args.compare.read_text())
        differ = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
        for key in differ:
            print(f"differs: {key}: {before.get(key)} -> {now.get(key)}")
        print(f"{len(now)} outputs, {len(differ)} differ")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
