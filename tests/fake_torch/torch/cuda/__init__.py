import json
import lzma
import os
import pickle

from torch import _log
from torch.cuda import _utils, memory  # noqa: F401
from torch.cuda.memory import (  # noqa: F401
    get_allocator_backend,
    memory_stats,
    set_per_process_memory_fraction,
)

_initialized = False
_queued_calls = []


def _meta():
    with open(os.environ["FAKE_TORCH_META"]) as f:
        return json.load(f)


def is_available():
    return os.environ.get("FAKE_TORCH_GPU", "1") == "1"


def is_initialized():
    return _initialized


def _lazy_call(callable, **kwargs):
    if is_initialized():
        callable()
    else:
        _queued_calls.append((callable, "traceback"))


def _lazy_init():
    global _initialized
    if _initialized:
        return
    if not is_available():
        raise RuntimeError("Found no NVIDIA driver on your system")
    _initialized = True
    _log("cuda_init")
    for fn, _ in _queued_calls:
        fn()


init = _lazy_init


def current_device():
    return int(os.environ.get("FAKE_TORCH_DEVICE", "0"))


def device_count():
    return 2


class _Props:
    def __init__(self, total):
        self.name = "NVIDIA H200 (fake)"
        self.total_memory = total
        self.major, self.minor = 9, 0


def get_device_properties(device):
    _lazy_init()
    return _Props(_meta()["device_total_bytes"])


def allocate(nbytes):
    """What a tensor on the GPU does first: initialize CUDA."""
    _lazy_init()
    _log("allocate", nbytes=nbytes)


def _load_snapshot():
    with lzma.open(os.environ["FAKE_TORCH_SNAPSHOT"]) as f:
        return pickle.load(f)
