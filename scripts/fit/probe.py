"""One probe of gpu_truth.py: run a workload script once, in this fresh process, under a memory cap.

    python probe.py CAP_BYTES SCRIPT [SCRIPT_ARGS...]

Caps PyTorch's caching allocator with torch.cuda.set_per_process_memory_fraction(CAP_BYTES /
total memory) before the script runs, runs SCRIPT as __main__ (runpy, sys.argv = [SCRIPT,
*SCRIPT_ARGS]), then prints one line `GPU_TRUTH_PROBE {json}` on stdout: the status, the
allocator's peaks and counters (max_memory_reserved, max_memory_allocated, num_alloc_retries,
num_ooms), the free device memory at the end and the seconds the script ran. The allocator
configuration comes from the environment (PYTORCH_CUDA_ALLOC_CONF), as for any program.

Exit codes: 0 the script ran to its end; 3 torch.OutOfMemoryError (the traceback on stderr);
4 any other error (the traceback on stderr): gpu_truth.py aborts on it."""

import json
import math
import os
import runpy
import sys
import time
import traceback

import torch

MARKER = "GPU_TRUTH_PROBE"
EXIT_OOM = 3
EXIT_ERROR = 4


def report(status: str, seconds: float, error: str | None = None) -> None:
    record: dict[str, object] = {"status": status, "script_seconds": round(seconds, 3), "error": error}
    try:
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
        record.update(
            max_memory_reserved=torch.cuda.max_memory_reserved(),
            max_memory_allocated=torch.cuda.max_memory_allocated(),
            num_alloc_retries=stats.get("num_alloc_retries", 0),
            num_ooms=stats.get("num_ooms", 0),
            num_device_alloc=stats.get("num_device_alloc", 0),
            device_free_at_end=free,
            device_total=total,
        )
    except Exception as e:  # the device is in no state to answer: say so, keep the status
        record["stats_error"] = f"{type(e).__name__}: {e}"[:500]
    print(f"{MARKER} {json.dumps(record)}", flush=True)


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cap_bytes = int(sys.argv[1])
    script = os.path.abspath(sys.argv[2])
    total = torch.cuda.get_device_properties(0).total_memory
    if cap_bytes > total:
        print(f"probe.py: cap {cap_bytes} bytes is over the device's {total}", file=sys.stderr)
        return EXIT_ERROR
    # The allocator's limit is size_t(fraction * total) (CUDACachingAllocator, setMemoryFraction):
    # nudge the fraction up so that it is the cap to the byte, not one byte short of it.
    fraction = cap_bytes / total
    while int(fraction * total) < cap_bytes:
        fraction = math.nextafter(fraction, 2.0)
    torch.cuda.set_per_process_memory_fraction(min(fraction, 1.0))
    sys.argv = [script, *sys.argv[3:]]
    sys.path.insert(0, os.path.dirname(script))
    start = time.perf_counter()
    try:
        runpy.run_path(script, run_name="__main__")
    except torch.OutOfMemoryError as e:
        traceback.print_exc()
        sys.stderr.flush()
        report("oom", time.perf_counter() - start, str(e).splitlines()[0] if str(e) else "OutOfMemoryError")
        return EXIT_OOM
    except SystemExit as e:
        if e.code not in (None, 0):
            traceback.print_exc()
            report("error", time.perf_counter() - start, f"SystemExit({e.code!r})")
            return EXIT_ERROR
    except BaseException as e:
        traceback.print_exc()
        sys.stderr.flush()
        report("error", time.perf_counter() - start, f"{type(e).__name__}: {e}"[:2000])
        return EXIT_ERROR
    report("ok", time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    # sys.exit, not os._exit: atexit handlers run (an allocation recorder such as
    # `allocreplay capture` dumps its trace there).
    sys.exit(main())
