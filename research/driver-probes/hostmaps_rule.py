"""Which gap condition reproduces the driver's choice of new region during .cuda()? (issue 29 item 1)
Usage: python hostmaps_rule.py hostmaps-h200/opt350.json.xz hostmaps-h200/gemma.json.xz
A: gap length >= size + 32 MiB (docs/driver-address-space.md rule 2);
B: align_down(end - size, 32 MiB) - 32 MiB >= gap start (32 MiB of the gap below the allocation)."""
import json, lzma, sys
M = 1 << 20; AL = 32 * M
def gaps(maps, lo=0x7000_0000_0000):
    ms = sorted((a, b) for a, b, _, _ in maps); out = []; prev = lo
    for a, b in ms:
        if a > prev: out.append((prev, a))
        prev = max(prev, b)
    return out
rules = {"A": lambda s, e, size: e - s >= size + AL, "B": lambda s, e, size: (e - size) // AL * AL - AL >= s}
for path in sys.argv[1:]:
    r = json.load(lzma.open(path) if path.endswith(".xz") else open(path)); moves = r["moves"]
    segs = [e for e in r["segment_events"] if e[1] == "segment_alloc"]
    res = {k: [0, 0] for k in rules}
    for k, (i, act, addr, size) in enumerate(segs):
        js = [j for j, m in enumerate(moves) if m["segs"] <= k]
        if not js or k >= moves[-1]["segs"] + 1 and js[-1] == len(moves) - 1: continue
        mp = moves[js[-1]]["maps"]
        if any(a <= addr < b for a, b, _, _ in mp): continue
        for name, ok in rules.items():
            fit = [(s, e) for s, e in gaps(mp) if ok(s, e, size)]
            pred = (max(fit, key=lambda x: x[1])[1] - size) // AL * AL if fit else None
            res[name][0] += 1; res[name][1] += pred == addr
    print(path, {k: f"{v[1]}/{v[0]}" for k, v in res.items()})
