"""Where a capture's replay without addresses parts from the run (session 35, issue 29): the
run's segment events against those of the modelled address space (`allocreplay export-snapshot`,
the replay `validate --no-addresses` makes), the first one whose size differs, and, among the
segments live just before it, the pairs whose address order differs between run and replay (the
caching allocator breaks best-fit ties by address, so such a pair can change a later choice).
Addresses are MiB from each one's first segment.
Usage: python segment_order.py TRACE [--meta JSON]"""
import subprocess, sys, tempfile
import allocreplay as ar
import polars as pl

MIB = 1 << 20


def segments(path, meta=None):
    df = pl.from_arrow(ar.load(path, meta).to_arrow()) if meta else pl.from_arrow(ar.load(path).to_arrow())
    return df.filter(pl.col("action").is_in(["segment_alloc", "segment_free"])).rows(named=True)


def main(trace, meta=None):
    with tempfile.TemporaryDirectory() as d:
        sim = f"{d}/sim.pickle"
        subprocess.run(["allocreplay", "export-snapshot", trace, "-q", "-o", sim] + (["--meta", meta] if meta else []), check=True, stdout=subprocess.DEVNULL)
        run, rep = segments(trace, meta), segments(sim)
    r0, s0 = run[0]["addr"], rep[0]["addr"]
    first = next((i for i, (a, b) in enumerate(zip(run, rep)) if (a["action"], a["size"]) != (b["action"], b["size"])), None)
    print(f"{trace}: {len(run)} segment events recorded, {len(rep)} replayed; first differing: #{first}")
    if first is None:
        return
    for i in range(max(0, first - 3), min(first + 3, len(run), len(rep))):
        a, b = run[i], rep[i]
        print(f"  #{i}: run {a['action']} {a['size'] / MIB:g} MiB at {(a['addr'] - r0) / MIB:+g}; replay {b['action']} {b['size'] / MIB:g} MiB at {(b['addr'] - s0) / MIB:+g}")
    live = {}
    for k, (a, b) in enumerate(zip(run[:first], rep[:first])):
        if a["action"] == "segment_alloc":
            live[a["addr"]] = ((a["addr"] - r0) / MIB, (b["addr"] - s0) / MIB, a["size"] / MIB, k)
        else:
            live.pop(a["addr"], None)
    by_run = sorted(live.values())
    inverted = [(p, q) for k, p in enumerate(by_run) for q in by_run[k + 1:] if q[1] < p[1]]
    moved = sorted({x[3] for pq in inverted for x in pq})
    print(f"  {len(by_run)} segments live before #{first}; {len(inverted)} pairs in the opposite address order, among segments {moved[:40]}")
    for run_at, rep_at, size, k in by_run:
        print(f"    #{k:<4} {size:6g} MiB  run {run_at:+9g}  replay {rep_at:+9g}{'  *' if k in moved else ''}")


if __name__ == "__main__":
    args = sys.argv[1:]
    meta = args[args.index("--meta") + 1] if "--meta" in args else None
    main(args[0], meta)
