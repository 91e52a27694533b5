"""Session 36 (issue 29): where each capture's driver space begins, from the host's first note.
The hook's first `host_va` note (made just after the caching allocator's first allocation) lists
every free gap below the kernel's `mmap_base`; the highest gap of more than 10 GiB ends at the
lowest mapping the driver had made by then: the local memory's base (the model's `VA_TOP`), or the
first segment's base where that went below it. The model anchors its coordinates on the first
segment instead (`engine/host_ranges.rs`: where `AddressSpace::new().malloc(size)` puts it), which
predicts that gap's end at the first segment (first segment below the local memory), 414 MiB
below it (a 2 MiB first segment in the local memory's hole) or 488 MiB below it (one of at most
24 MiB in the context's hole). Prints, per capture, the first five segments (MiB, MiB from the
first) and the gaps of the first note near the first segment.
Usage: python big_gap_anchor.py CAPTURE.json ... (the .pickle.xz beside each)"""
import json, sys
import allocreplay as ar, polars as pl

MIB = 1 << 20
for meta in sys.argv[1:]:
    trace = meta.replace(".json", ".pickle.xz")
    try:
        d = json.load(open(meta)); h = d.get("host_va")
        if not h:
            continue
        df = pl.from_arrow(ar.load(trace).to_arrow())
    except Exception:
        continue
    seg = df.filter(pl.col("action") == "segment_alloc").rows(named=True)
    a0 = seg[0]["addr"]
    first = min(c[0] for c in h["changes"])
    gaps = sorted(((c[1] - a0) / MIB, (c[2] - a0) / MIB) for c in h["changes"] if c[0] == first and c[3] == 1)
    near = [(round(s), round(e)) for s, e in gaps if e > -2500 and s < 1500]
    top_big = max((g for g in gaps if g[1] - g[0] > 10 * 1024), key=lambda g: g[1], default=None)
    print(meta, "segments:", [(round(r["size"] / MIB), round((r["addr"] - a0) / MIB)) for r in seg[:5]])
    print("   end of the big gap:", top_big and round(top_big[1]), " gaps near:", near[:14])
