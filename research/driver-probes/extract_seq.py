"""Write each capture's cudaMalloc/cudaFree sequence (segment_alloc/segment_free, non-seed) as
lines 'a ID SIZE RECADDR' / 'f ID'."""
import lzma, pickle, sys, os, glob
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
srcs = sorted(glob.glob('/work/shared/traces/pytorch/*.pickle.xz') + glob.glob('/work/main/traces/*.pickle.xz') + glob.glob('/work/main/traces/cuda/*.pickle.xz'))
seen = set()
for p in srcs:
    name = os.path.basename(p).replace('.pickle.xz', '')
    if name in seen or 'ring20k' in name:
        continue
    seen.add(name)
    s = pickle.load(lzma.open(p))
    if s['allocator_settings'].get('expandable_segments'):
        continue
    for dev, tr in enumerate(s['device_traces']):
        if not tr:
            continue
        ids = {}
        next_id = 0
        lines = []
        for e in tr:
            if e['action'] == 'segment_alloc':
                i = next_id; next_id += 1; ids[e["addr"]] = i
                lines.append(f"a {i} {e['size']} {e['addr']}")
            elif e['action'] == 'segment_free':
                i = ids.pop(e['addr'])
                lines.append(f"f {i}")
        open(f"{out}/{name}.dev{dev}.seq", 'w').write("\n".join(lines) + "\n")
        print(name, dev, len(lines))
