"""xplane import against the fastest Python decode we could write (issue #12).

    python benches/import_xplane.py [XPLANE.pb[.xz]] [ROUNDS]

Both sides start from the same decompressed bytes in the page cache (the file is decompressed
to a temporary file first, not timed):

- allocreplay: ``allocreplay.load(path)`` — the Rust importer (protobuf parse, the allocator's
  memory events, the Arrow trace).
- Python: ``XSpace.FromString(bytes)`` with protobuf's upb backend (C; TensorFlow's
  ``xplane_pb2``), then one pass over every plane, line and event keeping the
  ``MemoryAllocation`` / ``MemoryDeallocation`` events with the stats the importer reads
  (``allocator_name``, ``addr``, ``requested_bytes``, ``allocation_bytes``,
  ``bytes_allocated``), into plain lists: what the importer produces, without the Arrow
  columns. The stat and event metadata ids are resolved once per plane, as the importer does.

Best of ROUNDS (default 5) each, alternated, in one process. Needs tensorflow (for
``xplane_pb2``) or a ``tsl``/``xprof`` package that ships it.
"""

from __future__ import annotations

import importlib
import lzma
import os
import sys
import tempfile
import time
from typing import Any

import allocreplay

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "shared", "traces", "jax", "jaxlm__default.xplane.pb.xz")
MODULES = ("tensorflow.tsl.profiler.protobuf.xplane_pb2", "tsl.profiler.protobuf.xplane_pb2", "xprof.protobuf.xplane_pb2")
WANTED = ("allocator_name", "addr", "requested_bytes", "allocation_bytes", "bytes_allocated")


def xplane_pb2() -> Any:
    for name in MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise SystemExit("needs xplane_pb2 (pip install tensorflow-cpu)")


def python_decode(pb2: Any, data: bytes) -> list[tuple[bool, int, int, int, int, str]]:
    space = pb2.XSpace.FromString(data)
    out: list[tuple[bool, int, int, int, int, str]] = []
    for plane in space.planes:
        kinds = {k: (m.name == "MemoryAllocation") for k, m in plane.event_metadata.items() if m.name in ("MemoryAllocation", "MemoryDeallocation")}
        if not kinds:
            continue
        stat_names = {k: m.name for k, m in plane.stat_metadata.items() if m.name in WANTED}
        for line in plane.lines:
            for ev in line.events:
                alloc = kinds.get(ev.metadata_id)
                if alloc is None:
                    continue
                vals: dict[str, Any] = {}
                for st in ev.stats:
                    name = stat_names.get(st.metadata_id)
                    if name is None:
                        continue
                    which = st.WhichOneof("value")
                    vals[name] = plane.stat_metadata[st.ref_value].name if which == "ref_value" else getattr(st, which)
                out.append(
                    (
                        alloc,
                        line.timestamp_ns + ev.offset_ps // 1000,
                        int(vals.get("addr", 0)),
                        int(vals.get("requested_bytes", 0)),
                        int(vals.get("allocation_bytes", 0)),
                        str(vals.get("allocator_name", "")),
                    )
                )
    return out


def best(fn: Any, rounds: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    src = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    pb2 = xplane_pb2()
    with lzma.open(src) if src.endswith(".xz") else open(src, "rb") as f:
        data = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.xplane.pb")
        with open(path, "wb") as f:
            f.write(data)
        t_ours = t_py = float("inf")
        for _ in range(rounds):
            a, trace = best(lambda: allocreplay.load(path), 1)
            b, events = best(lambda: python_decode(pb2, data), 1)
            t_ours, t_py = min(t_ours, a), min(t_py, b)
    from google.protobuf.internal import api_implementation

    n = len(events)
    print(f"{os.path.basename(src)}: {len(data) / 1e6:.1f} MB, {n:,} memory events (all allocators); allocreplay keeps {len(trace):,} events")
    print(f"python (protobuf {api_implementation.Type()} + one pass): {t_py * 1e3:8.1f} ms")
    print(f"allocreplay.load:                       {t_ours * 1e3:8.1f} ms   {t_py / t_ours:.1f}x faster")


if __name__ == "__main__":
    main()
