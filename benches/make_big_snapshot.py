"""Builds a multi-million-entry PyTorch memory snapshot pickle by tiling a real capture.

    python benches/make_big_snapshot.py SRC.pickle.xz OUT.pickle --entries 4000000 [--no-frames]

The source's device-0 history is repeated K times (K = ceil(entries / history length)): each
copy's addresses shifted apart by K - 1 - k << 40 (the last copy at the recorded addresses, so
that the final ``segments`` match it) and its times placed before the next copy's. Every copied
entry is a new dict, as in a longer capture; values the source held once per entry (the fresh
``compile_context`` string of each entry) are fresh objects again, so the pickler writes them
anew as PyTorch's does. With frames, each copy gets new ``frames`` lists (shared within the
copy the way the source shares them: an allocation and its frees hold one list), holding the
source's frame dicts, which the pickler memoizes once for the whole file, as in a real
snapshot. ``--no-frames`` drops the ``frames`` key (a capture recorded without stacks).

Written with ``pickle.dump(protocol=4)``, what ``torch.cuda.memory._dump_snapshot`` uses. The
source is one of our own captures (trusted): it is read with ``pickle.loads``. Outputs go to a
git-ignored folder (``scratch/``); they are never committed.
"""

from __future__ import annotations

import argparse
import collections
import lzma
import math
import os
import pickle
import sys
import time
from typing import Any


def tile(snap: dict[str, Any], entries: int, frames: bool) -> dict[str, Any]:
    hist: list[dict[str, Any]] = snap["device_traces"][0]
    copies = max(1, math.ceil(entries / len(hist)))
    times = [e["time_us"] for e in hist if e.get("time_us") is not None]
    span = max(times) - min(times) + 1
    # Strings held by exactly one entry (a fresh object per entry in the source).
    uses = collections.Counter(id(v) for e in hist for v in e.values() if isinstance(v, str))
    out: list[dict[str, Any]] = []
    for k in range(copies):
        back = copies - 1 - k
        lists: dict[int, list[Any]] = {}
        for e in hist:
            if len(out) == entries:
                break
            d: dict[str, Any] = {}
            for key, v in e.items():
                if key == "addr" and e["action"] != "oom":
                    v = v + (back << 40)
                elif key == "time_us" and v is not None:
                    v = v - back * span
                elif key == "frames":
                    if not frames:
                        continue
                    lst = lists.get(id(v))
                    if lst is None:
                        lst = lists[id(v)] = list(v)
                    v = lst
                elif isinstance(v, str) and uses[id(v)] == 1 and v:
                    v = v[:1] + v[1:]  # a new str object with the same text
                d[key] = v
            out.append(d)
    big = dict(snap)
    big["device_traces"] = [out, *snap["device_traces"][1:]]
    return big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--entries", type=int, default=4_000_000)
    ap.add_argument("--no-frames", action="store_true")
    a = ap.parse_args()
    t = time.perf_counter()
    with open(a.src, "rb") as f:
        raw = f.read()
    if raw.startswith(b"\xfd7zXZ"):
        raw = lzma.decompress(raw)
    snap = pickle.loads(raw)  # our own capture: trusted
    big = tile(snap, a.entries, not a.no_frames)
    with open(a.out, "wb") as f:
        pickle.dump(big, f, protocol=4)
    n = sum(len(h) for h in big["device_traces"])
    size = os.path.getsize(a.out)
    print(f"{a.out}: {n:,} entries, {size:,} bytes ({size / n:.1f} B/entry) in {time.perf_counter() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
