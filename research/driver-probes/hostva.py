"""Is the driver's cudaMalloc placement the host process's mmap placement? (issue 29 item 1)
raw: ctypes cudaMalloc around a host mmap/munmap, fresh process, no torch.
opt350: the opt350_serve workload's model build, with /proc/self/maps before/after and the
first segments' addresses (torch memory history)."""
import ctypes, glob, mmap, os, sys

def maps(tag, lo=0x7e00_0000_0000):
    rows = []
    for line in open("/proc/self/maps"):
        p = line.split()
        a, b = (int(x, 16) for x in p[0].split("-"))
        if b - a >= (1 << 20) and a >= lo:
            rows.append((a, b, p[1], p[5] if len(p) > 5 else ""))
    print(f"## maps {tag}")
    for a, b, perm, name in rows:
        print(f"  {a:#x}-{b:#x} {(b - a) >> 20:6d}MiB {perm} {name}")
    return rows

def raw():
    libs = glob.glob("/usr/local/cuda/lib64/libcudart.so*") + glob.glob("/opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcudart.so*")
    rt = ctypes.CDLL(sorted(libs)[0])
    def malloc(n):
        p = ctypes.c_void_p(); e = rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)); assert e == 0, e
        return p.value
    rt.cudaFree(None)
    a = [malloc(20 << 20) for _ in range(3)]
    print("raw first 3 x 20MiB:", [hex(x) for x in a])
    m = mmap.mmap(-1, 1 << 30)
    h = ctypes.addressof(ctypes.c_char.from_buffer(m))
    print(f"raw host mmap 1GiB at {h:#x}")
    b = malloc(20 << 20); print(f"raw 20MiB while host map live: {b:#x}")
    maps("raw, host map live")
    del h
    m.close()
    c = [malloc(20 << 20) for _ in range(3)]
    print("raw 3 x 20MiB after munmap:", [hex(x) for x in c], "inside freed host range:", [h0 <= x < h0 + (1 << 30) for x in c for h0 in [int(sys.argv[2], 16)]] if len(sys.argv) > 2 else "")
    maps("raw, after")

def opt350():
    import torch
    from transformers import OPTConfig, OPTForCausalLM
    torch.manual_seed(0); torch.cuda.init()
    maps("after torch.cuda.init")
    cfg = OPTConfig(hidden_size=1024, ffn_dim=4096, num_hidden_layers=24, num_attention_heads=16, vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=512)
    model = OPTForCausalLM(cfg)
    cpu = maps("after CPU model build")
    torch.cuda.memory._record_memory_history(max_entries=100000)
    model = model.cuda().half().eval()
    maps("after cuda().half()")
    snap = torch.cuda.memory._snapshot()
    segs = [(e["addr"], e["size"]) for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
    for addr, size in segs[:40]:
        inside = [f"{a:#x}" for a, b, _, _ in cpu if a <= addr < b]
        print(f"seg {addr:#x} {size >> 20}MiB in CPU-build mapping: {inside}")

if __name__ == "__main__":
    {"raw": raw, "opt350": opt350}[sys.argv[1]]()
