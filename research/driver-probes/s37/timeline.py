"""Session 37 (issue 29): a recording's segment events between two segment numbers, with the driver's
memory notes, the host ranges noted by module moves and, at each driver change, the host mappings
changed since the last look (`host_va.driver_changes`), by allocation index; MiB from the first segment.
Usage: python timeline.py TRACE.pickle.xz TRACE.json FIRST_SEGMENT LAST_SEGMENT"""
import json, sys, lzma
import allocreplay as ar, polars as pl
MIB = 1 << 20
tr, meta = sys.argv[1], sys.argv[2]
lo, hi = int(sys.argv[3]), int(sys.argv[4])
df = pl.from_arrow(ar.load(tr).to_arrow()).with_row_index("row")
allocs = (df["action"] == "alloc").cum_sum()
df = df.with_columns(allocs.alias("nalloc"))
seg = df.filter(pl.col("action").is_in(["segment_alloc", "segment_free"])).with_row_index("seg")
d = json.load(open(meta))
base = seg["addr"][0]
rows = []
for r in seg.iter_rows(named=True):
    if lo <= r["seg"] <= hi:
        rows.append((r["nalloc"], 1, f"seg #{r['seg']} {r['action']} {r['size']//MIB} MiB at {(r['addr']-base)/MIB:+.0f}"))
na_lo = min(x[0] for x in rows); na_hi = max(x[0] for x in rows)
for idx, b in d["driver_memory"]["changes"]:
    if na_lo - 50 <= idx <= na_hi + 50:
        rows.append((idx, 0, f"driver {b/MIB:+.0f} MiB"))
for k, s, e, f in d["host_va"]["changes"]:
    if na_lo - 50 <= k <= na_hi + 50:
        rows.append((k, 0, f"host {'free' if f else 'mapped'} {(s-base)/MIB:+.0f}..{(e-base)/MIB:+.0f} ({(e-s)/MIB:.0f} MiB)"))
for k, s_, e, f in d["host_va"].get("driver_changes", []):
    if na_lo - 50 <= k <= na_hi + 50:
        rows.append((k, 0, f"  maps at driver change: {'free' if f else 'mapped'} {(s_-base)/MIB:+.1f}..{(e-base)/MIB:+.1f} ({(e-s_)/MIB:.1f} MiB)"))
for x in sorted(rows):
    print(x[0], x[2])
