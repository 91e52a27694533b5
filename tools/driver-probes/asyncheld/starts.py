import sys
from collections import Counter
from replay_log import load
w = sys.argv[1]
ev, addr, size, base = load(w)
free = {}  # no coalescing: start -> end
top = 0; c = Counter(); M=2**20; shown=0
for e in ev:
    k = e[0]; i = int(e[1])
    if k == "a":
        a = addr[i]
        if not a: continue
        off = a - base; s = size[i]
        if off >= top:
            c["top"] += 1; top = max(top, off + s)
            # blocks overlapping [off, off+s) below old top?
            for st in [st for st,en in free.items() if st < off + s and en > off]:
                en = free.pop(st)
                if st < off: free[st] = off
            continue
        covered = sorted((st, en) for st, en in free.items() if st < off + s and en > off)
        # check contiguity
        ok = covered and covered[0][0] <= off and all(covered[j][1] == covered[j+1][0] for j in range(len(covered)-1)) and covered[-1][1] >= off + s
        if not ok:
            c["not inside free space"] += 1
        else:
            st0 = covered[0][0]; enl = covered[-1][1]
            tag = ("start" if off == st0 else ("end" if off + s == enl else "mid")) + f" nblocks={min(len(covered),3)}"
            if off != st0 and off + s == covered[0][1]: tag += " endOfFirst"
            c[tag] += 1
            if tag.startswith("mid") and shown < 8:
                shown += 1; print(f"a{i} s {s/M:.4f} off {off/M:.4f} blocks", [(round(x/M,4), round((y-x)/M,4)) for x,y in covered])
        for st, en in covered:
            del free[st]
            if st < off: free[st] = off
            if en > off + s: free[off + s] = en
    elif k == "r":
        a = addr.get(i)
        if not a: continue
        off = a - base; free[off] = off + size[i]
for k, v in c.most_common(): print(f"{v:7d} {k}")
