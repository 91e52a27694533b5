"""Synthetic cudaMalloc/cudaFree patterns (seq format) for the VA probes."""
import os, sys
M = 1 << 20
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
P = {}
def pat(name, ops): P[name] = ops
pat("p01_20x24", [("a", 20 * M)] * 24)
pat("p02_ascending", [("a", s * 2 * M) for s in range(1, 40)])
pat("p03_2x40", [("a", 2 * M)] * 40)
pat("p04_gpt2start", [("a", 148 * M), ("a", 20 * M), ("a", 2 * M)] + [("a", 20 * M)] * 20)
pat("p05_reuse20", [("a", 20 * M)] * 8 + [("f", 2), ("f", 4), ("f", 6)] + [("a", 20 * M)] * 4 + [("a", 2 * M)] * 4)
pat("p06_40tail", [("a", 40 * M)] * 4 + [("a", 20 * M)] * 6 + [("a", 2 * M)] * 6)
pat("p07_80tail", [("a", 80 * M)] * 4 + [("a", 20 * M)] * 6 + [("a", 2 * M)] * 10)
pat("p08_big", [("a", s * M) for s in (1024, 2048, 512, 300, 64, 96, 100, 148, 160, 4096, 10000)])
pat("p09_odd", [("a", s * M) for s in (22, 26, 30, 34, 46, 54, 58, 62, 66, 70, 74, 126, 130)])
pat("p10_free_all_then_40", [("a", 20 * M)] * 10 + [("f", i) for i in range(10)] + [("a", 40 * M)] * 6 + [("a", 20 * M)] * 6)
pat("p11_unaligned", [("a", s) for s in (20 * M + 512, 2 * M + 512, 21 * M, 1 * M, 3 * M, 5 * M, 7 * M, 20 * M - 512)])
pat("p12_free_mid_big", [("a", 80 * M)] * 6 + [("f", 1), ("f", 3)] + [("a", 20 * M)] * 4 + [("a", 40 * M)] * 3 + [("a", 80 * M)] * 3)
pat("p13_20_free_2", [("a", 20 * M)] * 6 + [("f", 1)] + [("a", 2 * M)] * 8 + [("a", 20 * M)] * 2)
pat("p14_fill", [("a", 10 << 30)] * 14 + [("a", 1 << 30)] * 4 + [("a", 20 * M)] * 60 + [("a", 2 * M)] * 100 + [("f", 3), ("f", 15)] + [("a", 20 * M)] * 3 + [("a", 2 << 30)] * 3)
pat("p15_big_then_small", [("a", 1 << 30), ("a", 20 * M), ("a", 1 << 30), ("a", 2 * M), ("f", 0), ("a", 20 * M), ("a", 40 * M), ("a", 512 * M), ("a", 600 * M)])
for name, ops in P.items():
    n = 0; lines = []
    for op, v in ops:
        if op == "a":
            lines.append(f"a {n} {v}"); n += 1
        else:
            lines.append(f"f {v}")
    open(f"{out}/{name}.seq", "w").write("\n".join(lines) + "\n")
