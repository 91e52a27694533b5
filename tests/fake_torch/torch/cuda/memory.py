import torch

_recording = {"on": False, "args": None}
_fractions = {}


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=2**63 - 1, **kw):
    from torch import cuda

    if not cuda._initialized:
        # The real allocator has no per-device allocators before CUDA's initialization: the
        # call would record nothing. The hook must not call it that early.
        torch._log("record_before_init")
        return
    _recording["on"] = enabled is not None
    _recording["args"] = {"enabled": enabled, "context": context, "stacks": stacks, "max_entries": max_entries}
    torch._log("record_memory_history", **_recording["args"])


def _snapshot(device=None):
    from torch import cuda

    snap = cuda._load_snapshot()
    if not _recording["on"]:
        snap["device_traces"] = [[] for _ in snap["device_traces"]]
    torch._log("snapshot", recording=_recording["on"])
    return snap


def memory_stats(device=None):
    from torch import cuda

    meta = cuda._meta()
    d = cuda.current_device() if device is None else device
    per = meta.get("memory_stats_per_device")
    return dict(per[str(d)]) if per else dict(meta["memory_stats"])


def set_per_process_memory_fraction(fraction, device=None):
    from torch import cuda

    cuda._lazy_init()
    _fractions[cuda.current_device() if device is None else device] = fraction
    torch._log("set_fraction", fraction=fraction)


def get_allocator_backend():
    return "native"
