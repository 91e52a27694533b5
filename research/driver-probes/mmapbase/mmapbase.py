"""Does the CUDA driver place cudaMalloc's virtual ranges with the kernel's own top-down mmap
(mmap(NULL, ...) below mmap_base)? Before each new segment, ask the kernel where it would put
an anonymous PROT_NONE mapping of the segment's size and of size + 32 MiB (mapped, then unmapped
at once), then allocate through PyTorch (empty_cache first, so each allocation is a new
cudaMalloc) and compare. Also frees a host mapping made above everything to see if the driver
takes the hole. Prints one JSON object per step."""
import ctypes, json, torch

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MiB = 1 << 20


def kernel_pick(n):
    a = libc.mmap(None, n, 0, 0x02 | 0x20 | 0x4000, -1, 0)
    libc.munmap(a, n)
    return a


def maps():
    out = []
    for line in open("/proc/self/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        out.append((lo, hi, f[5] if len(f) > 5 else ""))
    return out


def containing(a, ms):
    for lo, hi, name in ms:
        if lo <= a < hi:
            return [hex(lo), hex(hi), name]
    return None


def segs():
    return {s["address"]: s["total_size"] for s in torch.cuda.memory_snapshot()}


torch.cuda.init()
keep = [torch.empty(1, device="cuda")]
ms = maps()
stack = [m for m in ms if m[2] == "[stack]"]
print(json.dumps({"step": "start", "maps": len(ms), "stack": hex(stack[0][0]) if stack else None, "top_mappings": [[hex(a), hex(b), n] for a, b, n in sorted(ms)[-12:]]}), flush=True)
hole = None
for i, s in enumerate([20 * MiB, 40 * MiB, 148 * MiB, 20 * MiB, 80 * MiB, 512 * MiB, 20 * MiB, "hole", 20 * MiB, 40 * MiB, 1024 * MiB, 20 * MiB]):
    if s == "hole":
        # A host mapping the kernel puts at the top, then freed: a gap the driver may take.
        n = 600 * MiB
        hole = libc.mmap(None, n, 3, 0x02 | 0x20, -1, 0)
        ctypes.memset(hole, 1, 4096)
        keep.append(torch.empty(2 * MiB, dtype=torch.uint8, device="cuda"))  # may make a segment after the hole exists
        libc.munmap(hole, n)
        print(json.dumps({"step": "hole", "hole": [hex(hole), hex(hole + n)]}), flush=True)
        continue
    torch.cuda.empty_cache()
    before = segs()
    p0, p32 = kernel_pick(s), kernel_pick(s + 32 * MiB)
    t = torch.empty(s, dtype=torch.uint8, device="cuda")
    keep.append(t)
    new = {a: z for a, z in segs().items() if a not in before}
    ms = maps()
    a = t.data_ptr()
    seg = next((x for x in new), None)
    rule = (p32 + s + 32 * MiB - s) // (32 * MiB) * (32 * MiB)
    print(json.dumps({"step": i, "size": s, "ptr": hex(a), "new_segments": {hex(k): v for k, v in new.items()}, "kernel_pick_s": hex(p0), "kernel_pick_s32": hex(p32),
                      "rule_from_kernel": hex(rule), "ptr_minus_rule_MiB": (a - rule) / MiB, "ptr_map": containing(a, ms), "kernel_s32_map_now": containing(p32, ms)}), flush=True)
ms = maps()
print(json.dumps({"step": "end", "top_mappings": [[hex(a), hex(b), n] for a, b, n in sorted(ms)[-40:]]}), flush=True)
