"""Runs SCRIPT (a torchrun worker) under PyTorch's own allocator history and writes OUT.pickle (the
``torch.cuda.memory._snapshot()`` dict) and OUT.json (the device, the allocator setting and the
final ``memory_stats()``: the ground truth). How traces/dist/fsdp2toy1gpu__* were recorded:

    torchrun --standalone --nproc_per_node 1 scripts/dist/record.py OUT scripts/dist/fsdp2_toy.py
"""

import json
import os
import pickle
import runpy
import sys

import torch


def main() -> None:
    out, script = sys.argv[1], sys.argv[2]
    sys.argv = sys.argv[2:]
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.memory._record_memory_history(max_entries=10_000_000, context=None)
    runpy.run_path(script, run_name="__main__")
    snap = torch.cuda.memory._snapshot()
    with open(out + ".pickle", "wb") as f:
        pickle.dump(snap, f)
    d = torch.cuda.current_device()
    meta = {
        "torch": torch.__version__,
        "device_total_bytes": torch.cuda.get_device_properties(d).total_memory,
        "device_name": torch.cuda.get_device_name(d),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "memory_stats": dict(torch.cuda.memory_stats(d)),
    }
    with open(out + ".json", "w") as f:
        json.dump(meta, f, indent=1, default=str)
    print(out, torch.cuda.max_memory_allocated(d), torch.cuda.max_memory_reserved(d), flush=True)


if __name__ == "__main__":
    main()
