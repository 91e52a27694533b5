import sys
from collections import Counter
from replay_log import load
w = sys.argv[1]
ev, addr, size, base = load(w)
free = {}  # start -> [end, stamp]
top = 0; c = Counter(); stamp = 0; total = 0
M=2**20; shown = 0
for e in ev:
    k = e[0]; i = int(e[1])
    if k == "a":
        a = addr[i]
        if not a: continue
        off = a - base; s = size[i]
        starts = sorted(free)
        # run length from each start (contiguous free blocks), capped at top (top counts as free)
        runlen = {}; nxt = None
        for st in reversed(starts):
            en = free[st][0]
            if en == top: runlen[st] = float("inf")  # merges with top
            else: runlen[st] = (en - st) + (runlen[en] if en in runlen else 0)
        cands = [st for st in starts if runlen[st] >= s]
        if off >= top and not any(st == off for st in cands):
            c["top"] += 1
            if cands: c["top although cand"] += 1
        elif off in free:
            total += 1
            blen = {st: free[st][0]-st for st in cands}
            rules = {
              "newest block": max(cands, key=lambda st: free[st][1]),
              "oldest block": min(cands, key=lambda st: free[st][1]),
              "lowest": min(cands), "highest": max(cands),
              "best block len": min(cands, key=lambda st: (blen[st], st)),
              "best run len": min(cands, key=lambda st: (runlen[st], st)),
              "best run len newest": min(cands, key=lambda st: (runlen[st], -free[st][1])),
              "exact block else newest": next((st for st in sorted(cands, key=lambda st: -free[st][1]) if blen[st]==s), max(cands, key=lambda st: free[st][1])),
              "exact block else best run": next((st for st in sorted(cands) if blen[st]==s), min(cands, key=lambda st: (runlen[st], st))),
              "exact block(lowest) else lowest": next((st for st in sorted(cands) if blen[st]==s), min(cands)),
              "block>=s best": min([st for st in cands if blen[st] >= s] or cands, key=lambda st: (blen[st] if blen[st]>=s else 1<<62, st)),
            }
            for name, p in rules.items():
                if p == off: c[name] += 1
            if rules["best run len"] != off and shown < 10 and len(sys.argv) > 2:
                shown += 1
                print(f"a{i} s={s/M:.4f} -> {off/M:.4f}; cands (start,blocklen,runlen,age):", sorted([(round(st/M,3), round(blen[st]/M,3), round(runlen[st]/M,3) if runlen[st]!=float('inf') else 'top', stamp-free[st][1]) for st in cands], key=lambda x:x[2] if x[2]!='top' else 1e9)[:8])
        else:
            c["?"] += 1
        # apply: take blocks covering [off, off+s)
        for st in [st for st in list(free) if st < off + s and free[st][0] > off]:
            en, sp = free.pop(st)
            if st < off: free[st] = [off, sp]
            if en > off + s: free[off + s] = [en, sp]
        top = max(top, off + s)
    elif k == "r":
        a = addr.get(i)
        if not a: continue
        off = a - base; stamp += 1; free[off] = [off + size[i], stamp]
print(w, "allocs in free blocks", total)
for k, v in c.most_common(): print(f"{v:7d} {100*v/max(total,1):5.1f}% {k}")
