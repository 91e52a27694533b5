"""Session 20: the cudaMalloc/cudaFree sequence (segment_alloc/segment_free) of each capture given,
as lines 'a ID SIZE RECADDR' / 'f ID' in OUT/NAME.devN.seq, for va2.cu. A freed segment's id is
never given again (extract_seq.py reused it). Usage: python3 extract_seq_s20.py OUT TRACE.pickle.xz..."""
import lzma, os, pickle, sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for p in sys.argv[2:]:
    name = os.path.basename(p).replace(".pickle.xz", "")
    s = pickle.load(lzma.open(p))
    for dev, tr in enumerate(s["device_traces"]):
        if not tr:
            continue
        ids, nid, lines = {}, 0, []
        for e in tr:
            if e["action"] == "segment_alloc":
                ids[e["addr"]] = nid
                lines.append(f"a {nid} {e['size']} {e['addr']}")
                nid += 1
            elif e["action"] == "segment_free":
                i = ids.pop(e["addr"], None)
                if i is not None:
                    lines.append(f"f {i}")
        open(f"{out}/{name}.dev{dev}.seq", "w").write("\n".join(lines) + "\n")
        print(name, dev, len(lines))
