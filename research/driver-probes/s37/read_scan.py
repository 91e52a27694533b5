"""Reads cap_scan.sh's NAME.scan.json beside NAME.pickle.xz: at each change of the driver's
memory (allocation index), the allocations the driver knows that are not the caching allocator's
segments (no segment of the recording ever had that address and size), new since the last scan or gone,
in MiB from the first segment, with their memory type (host: pinned host memory in the unified
address space) and the segment just below each. The anonymous and device-file mappings of each
scan are kept in the JSON too (`[start, end, path]`).
Usage: python read_scan.py NAME.pickle.xz NAME.scan.json"""
import json
import sys

import allocreplay as ar
import polars as pl

MIB = 1 << 20
trace, scan_path = sys.argv[1], sys.argv[2]
df = pl.from_arrow(ar.load(trace).to_arrow())
seg = df.filter(pl.col("action").is_in(["segment_alloc", "segment_free"])).rows(named=True)
base = seg[0]["addr"]
seg_addrs = {s["addr"] for s in seg}
# A segment is told by its address and size together (a driver allocation may later lie where a
# segment of another size once was, or the other way round).
seg_spans = {(s["addr"], s["size"]) for s in seg}
order = {}
for i, s in enumerate(seg):
    order.setdefault(s["addr"], i)
scan = json.load(open(scan_path))
prev = {}
for index, allocs, _maps in scan["scans"] + [["exit", scan.get("final", []), scan.get("final_maps", [])]]:
    if isinstance(allocs, str):
        print(index, "error", allocs)
        continue
    cur = {a: (n, k) for a, n, k in allocs if (a, n) not in seg_spans}
    added = sorted(set(cur) - set(prev))
    gone = sorted(set(prev) - set(cur))
    print(f"at {index}: {len(cur)} not segments; new {len(added)}, gone {len(gone)}")
    for a in added:
        below = max((x for x in seg_addrs if x <= a), default=None)
        where = f"above segment #{order[below]} at {(below - base) / MIB:+.0f}" if below is not None else "below every segment"
        n, k = cur[a]
        print(f"   + {(a - base) / MIB:+10.2f} MiB  {n / MIB:8.2f} MiB  {dict([(1, 'host'), (2, 'device')]).get(k, '?'):6}  {where}")
    for a in gone:
        print(f"   - {(a - base) / MIB:+10.2f} MiB  {prev[a][0] / MIB:8.2f} MiB")
    prev = cur
