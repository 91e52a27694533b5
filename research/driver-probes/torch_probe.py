"""On the GPU: the CUDA context's footprint under PyTorch, the limit PyTorch can actually reserve,
and cudaMalloc sequence replays inside a PyTorch process (after its context and cuBLAS init)."""
import ctypes, json, os, sys
import torch
mode = sys.argv[1]
out = os.environ["OUT"]

def info(tag, res):
    f, t = torch.cuda.mem_get_info()
    res[tag] = {"free": f, "total": t, "reserved": torch.cuda.memory_reserved(), "used_outside_torch": t - f - torch.cuda.memory_reserved()}

if mode == "footprint":
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "total_memory": torch.cuda.get_device_properties(0).total_memory}
    torch.cuda.init(); info("after_init", res)
    x = torch.empty(1, device="cuda"); torch.cuda.synchronize(); info("after_first_tensor", res)
    a = torch.randn(1024, 1024, device="cuda"); b = a @ a; torch.cuda.synchronize(); info("after_fp32_matmul", res)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        c = a @ a
    torch.cuda.synchronize(); info("after_bf16_matmul", res)
    q = torch.randn(4, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.nn.functional.scaled_dot_product_attention(q, q, q); torch.cuda.synchronize(); info("after_sdpa", res)
    # Fill: how much can the caching allocator reserve in all?
    held = []
    for chunk in (1 << 30, 20 << 20, 2 << 20):
        while True:
            try:
                held.append(torch.empty(chunk if chunk > (1 << 20) else (1 << 20), dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                break
    info("at_fill", res)
    res["fill_max_reserved"] = torch.cuda.memory_reserved()
    res["fill_stats"] = {k: v for k, v in torch.cuda.memory_stats().items() if k in ("num_ooms", "num_alloc_retries", "reserved_bytes.all.peak", "allocated_bytes.all.peak")}
    json.dump(res, open(f"{out}/footprint.json", "w"), indent=1)
    print(json.dumps(res, indent=1))
elif mode == "seq":
    torch.cuda.init()
    a = torch.randn(1024, 1024, device="cuda"); b = a @ a
    with torch.autocast("cuda", dtype=torch.bfloat16):
        c = a @ a
    torch.cuda.synchronize()
    lib = None
    for line in open("/proc/self/maps"):
        if "libcudart" in line:
            lib = line.split()[-1]; break
    rt = ctypes.CDLL(lib)
    live = {}
    log = []
    for line in open(sys.argv[2]):
        p = line.split()
        if p[0] == "a":
            ptr = ctypes.c_void_p()
            e = rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(int(p[2])))
            if e != 0:
                log.append(f"a {p[1]} {p[2]} OOM"); continue
            live[p[1]] = (ptr.value, p[2]); log.append(f"a {p[1]} {p[2]} {ptr.value} 0")
        else:
            if p[1] in live:
                ptr, size = live.pop(p[1]); rt.cudaFree(ctypes.c_void_p(ptr)); log.append(f"f {p[1]} {size} {ptr}")
    print("\n".join(log))
