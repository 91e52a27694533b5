"""Runs a workload script on the GPU with PyTorch's own allocator history recorded, for
comparing a real run's requests with `allocreplay capture --no-gpu`'s:

    python scripts/fit/snapshot_run.py OUT.pickle.xz [--cap-bytes N] -- scripts/fit/llama1b.py --batch-size 9

Writes OUT.pickle.xz (the `torch.cuda.memory._snapshot()` dict, xz-compressed) and OUT.json (the
final `memory_stats()`, the device's total memory, whether it ended in out-of-memory)."""

import json
import lzma
import pickle
import runpy
import sys

import torch


def main() -> int:
    args = sys.argv[1:]
    if "--" not in args:
        print(__doc__, file=sys.stderr)
        return 2
    cut = args.index("--")
    own, script = args[:cut], args[cut + 1 :]
    out = own[0]
    cap = int(own[own.index("--cap-bytes") + 1]) if "--cap-bytes" in own else None
    total = torch.cuda.get_device_properties(0).total_memory
    if cap:
        torch.cuda.set_per_process_memory_fraction(cap / total)
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    oom = False
    sys.argv = script
    try:
        runpy.run_path(script[0], run_name="__main__")
    except torch.OutOfMemoryError:
        oom = True
    snap = torch.cuda.memory._snapshot()
    with lzma.open(out, "wb", preset=3) as f:
        pickle.dump(snap, f)
    stem = out[: -len(".pickle.xz")] if out.endswith(".pickle.xz") else out
    with open(stem + ".json", "w") as f:
        json.dump(
            {"device_total_bytes": total, "cap_bytes": cap, "oom": oom, "argv": script, "torch": torch.__version__, "memory_stats": torch.cuda.memory_stats()},
            f,
        )
    return 3 if oom else 0


if __name__ == "__main__":
    sys.exit(main())
