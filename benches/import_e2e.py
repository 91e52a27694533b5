"""End-to-end import speed from Python: ``allocreplay.load(path)`` against CPython's own
``pickle.loads(open(path, 'rb').read())`` of the same file, interleaved in one process.

    python benches/import_e2e.py FILE [FILE...] [--runs 5] [--memory]

For each file, ``--runs`` rounds each time one ``allocreplay.load`` (file read, decompression
if any, pickle parse, events, stack frames, the trace check) and one ``pickle.loads`` of the
file's bytes (read from the file in the timed region too; decompressed with ``lzma`` /
``gzip`` first, *outside* the timed region, for a compressed file: pickle.loads gets the
plain bytes), and one more ``pickle.loads`` with the cyclic garbage collector off (CPython's
collector runs many times while millions of dicts and lists are created: with it off is the
stronger baseline). Each result is dropped before the next run. Reports the medians, events/s
and the ratios ``pickle.loads time / allocreplay.load time`` (above 1: allocreplay is faster).

``--baseline-core SO``: also times ``load`` of another build of the extension (an
``_core*.so`` built from an earlier commit, e.g. with ``maturin build --release`` from a ``git
archive`` of it), interleaved with the others, for a before/after ratio in the same run.

``--memory``: also runs ``allocreplay.load`` once in a child process and reports its resident
memory after the load and at the peak (VmRSS / VmHWM from /proc, minus the interpreter's
resident size before the load), per event.

Use a release build of the extension (``maturin develop --release``).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import importlib.util
import lzma
import os
import pickle
import statistics
import subprocess
import sys
import time
from typing import Any

import allocreplay


def plain_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        raw = f.read()
    if raw.startswith(b"\xfd7zXZ"):
        return lzma.decompress(raw)
    if raw.startswith(b"\x1f\x8b"):
        return gzip.decompress(raw)
    return raw


def load_core(so: str) -> Any:
    """The extension module in file ``so``, under another name than ``allocreplay._core``."""
    spec = importlib.util.spec_from_file_location("allocreplay_baseline._core", so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rss() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes."""
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                vals[k] = int(v.split()[0]) * 1024
    return vals["VmRSS"], vals["VmHWM"]


def child_memory(path: str) -> None:
    before, _ = rss()
    t = allocreplay.load(path)
    after, peak = rss()
    n = len(t)
    print(f"{n} {after - before} {peak - before}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--baseline-core", help="an _core*.so of an earlier build, timed too")
    ap.add_argument("--child-memory", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_memory:
        child_memory(a.child_memory)
        return
    print(f"python {sys.version.split()[0]}, allocreplay from {os.path.dirname(allocreplay.__file__)}, {os.cpu_count()} CPUs")
    base = load_core(a.baseline_core) if a.baseline_core else None
    head = "| file | MB | events | allocreplay.load s | M events/s | pickle.loads s | ratio | pickle.loads, gc off, s | ratio |"
    if base is not None:
        head += " baseline load s | speedup |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for path in a.files:
        with open(path, "rb") as f:
            compressed = not f.read(1).startswith(b"\x80")
        plain = None
        load_t: list[float] = []
        pick_t: list[float] = []
        nogc_t: list[float] = []
        base_t: list[float] = []
        n = 0
        for _ in range(a.runs):
            gc.collect()
            t0 = time.perf_counter()
            tr = allocreplay.load(path)
            load_t.append(time.perf_counter() - t0)
            n = len(tr)
            del tr
            gc.collect()
            if compressed:
                plain = plain if plain is not None else plain_bytes(path)
                t0 = time.perf_counter()
                obj = pickle.loads(plain)
            else:
                t0 = time.perf_counter()
                with open(path, "rb") as f:
                    obj = pickle.loads(f.read())
            pick_t.append(time.perf_counter() - t0)
            del obj
            if base is not None:
                gc.collect()
                t0 = time.perf_counter()
                bt = base.load(path, None, None, False)
                base_t.append(time.perf_counter() - t0)
                del bt
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                if compressed:
                    obj = pickle.loads(plain)  # type: ignore[arg-type]
                else:
                    with open(path, "rb") as f:
                        obj = pickle.loads(f.read())
                nogc_t.append(time.perf_counter() - t0)
                del obj
            finally:
                gc.enable()
        lm, pm, gm = statistics.median(load_t), statistics.median(pick_t), statistics.median(nogc_t)
        size = os.path.getsize(path) / 1e6
        row = f"| {os.path.basename(path)} | {size:.0f} | {n:,} | {lm:.3f} | {n / lm / 1e6:.2f} | {pm:.3f} | {pm / lm:.2f}x | {gm:.3f} | {gm / lm:.2f}x |"
        if base is not None:
            bm = statistics.median(base_t)
            row += f" {bm:.3f} | {bm / lm:.2f}x |"
        print(row, flush=True)
        if a.memory:
            out = subprocess.run([sys.executable, __file__, "--child-memory", path, "x"], capture_output=True, text=True, check=True).stdout
            n2, resident, peak = (int(x) for x in out.split())
            print(
                f"  memory: {resident / n2:.0f} B/event resident after load, {peak / n2:.0f} B/event at the peak ({resident / 1e6:.0f} / {peak / 1e6:.0f} MB)",
                flush=True,
            )


if __name__ == "__main__":
    main()
