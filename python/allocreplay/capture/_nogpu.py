"""``allocreplay capture --no-gpu``: run an unmodified PyTorch script on a machine without a GPU,
with CUDA *allocation semantics*, and record the caching allocator's requests as the GPU run
would make them.

How: every tensor that would live on ``cuda`` is a ``FakeTensor`` (``torch._subclasses``): a
meta tensor that says it is on ``cuda:0`` and carries CUDA's dispatch keys, so shapes, dtypes,
strides, autograd, autocast and the optimizers' CUDA paths (foreach / fused) behave as on the
GPU while no memory is used and nothing is computed. CPU tensors stay real. A dispatch mode
pushed for the whole process sends each operator that touches ``cuda`` to the fake mode and
records every new storage it returns: an allocation of ``storage.nbytes()`` bytes (what
``CUDACachingAllocator::malloc`` is asked for when ``at::empty`` creates the storage), freed when
the storage dies (a weak reference on the storage object, which PyTorch keeps alive exactly as
long as the C++ ``StorageImpl``). The ``torch.cuda`` functions scripts call answer as the chosen
device would.

What the GPU run adds beyond the tensors the program sees (the cuBLAS workspace, kernels'
temporaries) is added by :mod:`_nogpu_extras`, each rule measured on real captures.

At the end the requests are written as a PyTorch memory snapshot (``torch-PID.pickle``: the dict
``torch.cuda.memory._snapshot()`` returns, history only, no segments) and its ``.json``: the same
raw files the GPU recorder writes, so the importers read it like any capture.

Only the standard library and torch: this file is copied into the recorded process (``_hook``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import linecache
import os
import sys
import threading
import weakref
from typing import Any

from . import _devices
from ._recorder import alloc_conf

# Named devices: (name as torch reports it, total memory in bytes, compute capability, SMs), from
# the catalogue in _devices (each number's source there; `allocreplay devices` lists them).
DEVICES: dict[str, tuple[str, int, tuple[int, int], int]] = {k: (d.name, d.total_bytes, d.compute_capability, d.sms) for k, d in _devices.DEVICES.items()}
DEFAULT_DEVICE = "h200"

# What the trace holds beyond the program's own tensors (the trace's metadata lists these).
MODELLED = (
    "every storage of a cuda tensor: allocated when an operator creates it, freed when Python releases it",
    "autocast casts (and the cast-weight cache) and autograd's saved tensors, as on the GPU (CUDA dispatch keys)",
    "scaled_dot_product_attention: the backend an sm90 device picks (flash, efficient, math)",
)
BASE_ADDR = 0x7F00_0000_0000
RANK_ADDR_STRIDE = 1 << 44


# The CUDA runtime and driver entry points PyTorch calls when it sets up a device's streams and
# guards (the autograd engine asks for the current stream of every CUDA tensor it records), and
# the events and capture queries of torch.distributed's code (DDP's Reducer times its first
# iterations with CUDA events: c10d's CudaTimer): a library preloaded ahead of libcudart answers
# "one device (under --world-size or torchrun: the rank's node's, ALLOCREPLAY_NOGPU_DEVICES or
# LOCAL_WORLD_SIZE), no context";
# every other call goes to the real runtime, which is never reached since no kernel runs and
# nothing is allocated.
CUDART_STUB = r"""
#include <stdlib.h>
typedef int cudaError_t;
typedef void *cudaStream_t;
static int current_device = 0;
static int devices(void) {
  const char *s = getenv("ALLOCREPLAY_NOGPU_DEVICES");
  if (!s) s = getenv("LOCAL_WORLD_SIZE");
  int n = s ? atoi(s) : 1; return n > 0 ? n : 1;
}
cudaError_t cudaGetDeviceCount(int *n) { *n = devices(); return 0; }
cudaError_t cudaGetDevice(int *d) { *d = current_device; return 0; }
cudaError_t cudaSetDevice(int d) { if (d < 0 || d >= devices()) return 101; current_device = d; return 0; }
cudaError_t cudaDeviceGetStreamPriorityRange(int *lo, int *hi) { if (lo) *lo = 0; if (hi) *hi = -5; return 0; }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned f, int p) { static long n = 0x100; *s = (cudaStream_t)(n++); return 0; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { static long n = 0x10000; *s = (cudaStream_t)(n++); return 0; }
cudaError_t cudaGetLastError(void) { return 0; }
cudaError_t cudaPeekAtLastError(void) { return 0; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return 0; }
cudaError_t cudaDeviceSynchronize(void) { return 0; }
cudaError_t cudaStreamQuery(cudaStream_t s) { return 0; }
typedef void *cudaEvent_t;
cudaError_t cudaEventCreate(cudaEvent_t *e) { static long n = 0x1000000; *e = (cudaEvent_t)(n++); return 0; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { return 0; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return 0; }
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned f) { return 0; }
cudaError_t cudaEventQuery(cudaEvent_t e) { return 0; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return 0; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = 0.0f; return 0; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { return 0; }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, int *status) { *status = 0; return 0; }
"""
LIBCUDA_STUB = r"""
typedef int CUresult;
CUresult cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active) { if (flags) *flags = 0; if (active) *active = 0; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { static const char *m = "allocreplay capture --no-gpu: no driver"; *s = m; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { static const char *m = "CUDA_ERROR_NO_DEVICE"; *s = m; return 0; }
CUresult cuInit(unsigned f) { return 100; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
"""
PRELOAD = "libcudart_nogpu.so"
LIBCUDA = "libcuda.so.1"


def build_stubs(dest: str) -> tuple[str, str]:
    """Compiles the two stand-ins into ``dest`` with the C compiler (``$CC`` or ``cc``);
    returns (the library to preload, the directory holding ``libcuda.so.1``). Raises
    RuntimeError with one line when there is no compiler."""
    import shutil
    import subprocess

    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("--no-gpu needs a C compiler (cc, gcc or clang, or $CC) to build its stand-in for the CUDA driver; none found")
    os.makedirs(dest, exist_ok=True)
    for src, name, extra in ((CUDART_STUB, PRELOAD, []), (LIBCUDA_STUB, LIBCUDA, ["-Wl,-soname," + LIBCUDA])):
        c = os.path.join(dest, name + ".c")
        with open(c, "w") as f:
            f.write(src)
        p = subprocess.run([cc, "-shared", "-fPIC", "-O1", *extra, "-o", os.path.join(dest, name), c], capture_output=True, text=True)
        if p.returncode != 0:
            first = (p.stderr.strip().splitlines() or ["?"])[0]
            raise RuntimeError(f"--no-gpu: {cc} could not build the CUDA driver stand-in: {first}")
    return os.path.join(dest, PRELOAD), dest


_stubs: list[Any] = []


def stubs_loaded() -> bool:
    """The stand-ins are in this process: loaded by capture(no_gpu=True), or preloaded by
    ``allocreplay capture --no-gpu``."""
    return bool(_stubs) or PRELOAD in os.environ.get("LD_PRELOAD", "")


def load_stubs(preload: str, libdir: str) -> None:
    """In-process (``capture(no_gpu=True)``): the stand-ins loaded globally before torch is, so
    that torch's libraries bind to them as they would with LD_PRELOAD."""
    import ctypes

    _stubs.append(ctypes.CDLL(preload, mode=ctypes.RTLD_GLOBAL))
    _stubs.append(ctypes.CDLL(os.path.join(libdir, LIBCUDA), mode=ctypes.RTLD_GLOBAL))


class NoGpuValueError(RuntimeError):
    """The program asked for a value computed on the GPU (``.item()``, ``bool(t)``, a
    data-dependent shape): without a GPU there is none."""


def user_line() -> str:
    """``FILE:LINE: code`` of the innermost frame outside torch and this package: the line of
    the program that asked for a GPU value."""
    torch_dir = os.sep + "torch" + os.sep
    here = os.path.dirname(os.path.abspath(__file__))
    f: Any = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not (torch_dir in name or name.startswith("<") or os.path.dirname(os.path.abspath(name)) == here):
            code = linecache.getline(name, f.f_lineno).strip()
            return f"{name}:{f.f_lineno} ({code})" if code else f"{name}:{f.f_lineno}"
        f = f.f_back
    return "<unknown line>"


class FakeProps:
    """What ``torch.cuda.get_device_properties`` returns, for the chosen device."""

    def __init__(self, name: str, total: int, cc: tuple[int, int], sms: int) -> None:
        self.name = name
        self.total_memory = total
        self.major, self.minor = cc
        self.multi_processor_count = sms
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.uuid = "GPU-00000000-0000-0000-0000-000000000000"
        self.L2_cache_size = 50 << 20
        self.max_threads_per_multi_processor = 2048
        self.warp_size = 32
        self.regs_per_multiprocessor = 65536
        self.shared_memory_per_block = 49152
        self.shared_memory_per_block_optin = 232448
        self.shared_memory_per_multiprocessor = 233472
        self.gcnArchName = "NVIDIA"
        self.pci_bus_id = self.pci_device_id = self.pci_domain_id = 0
        self.clock_rate = 1980000
        self.memory_clock_rate = 2619000
        self.memory_bus_width = 6144

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, total_memory={self.total_memory >> 20}MB, multi_processor_count={self.multi_processor_count})"


class FakeStream:
    """A CUDA stream without CUDA: an id the allocations made under it carry."""

    _next = 1

    def __init__(self, device: Any = None, priority: int = 0, stream_id: int | None = None, **_: Any) -> None:
        if stream_id is None:
            stream_id = FakeStream._next * 0x1000
            FakeStream._next += 1
        self.stream_id = stream_id
        self.cuda_stream = stream_id
        self.device_index = _current_device()
        self.device_type = 1
        self.priority = priority

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", self.device_index)

    def wait_stream(self, other: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event if event is not None else FakeEvent()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def __enter__(self) -> FakeStream:
        self._prev = _state.stream
        _state.stream = self
        return self

    def __exit__(self, *exc: object) -> None:
        _state.stream = self._prev

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeStream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(self.stream_id)

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.stream_id:#x}>"


class FakeEvent:
    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: Any) -> float:
        return 0.0


def _current_device() -> int:
    """The device the program selected (``torch.cuda.set_device``; the stand-in's
    ``cudaGetDevice``): 0 but under ``--world-size`` where a rank picks its node's device."""
    import torch

    try:
        return int(torch._C._cuda_getDevice())
    except Exception:
        return 0


class _State(threading.local):
    stream: Any = None


_state = _State()


class Recorder:
    """The allocation requests, in the order the caching allocator would receive them."""

    def __init__(self, device: str, total: int, cc: tuple[int, int], sms: int, trace_device: int = 0) -> None:
        self.props = FakeProps(device, total, cc, sms)
        self.entries: list[dict[str, Any]] = []
        self.live: dict[int, tuple[int, int, int]] = {}  # key -> (addr, size, stream)
        self.storages: set[int] = set()  # keys of the live storages (live or resized to 0 bytes)
        # The trace's device: 0, or the rank under --world-size (each rank a device of the
        # merged trace), whose addresses start apart so that the ranks' never meet.
        self.trace_device = trace_device
        self.next_addr = BASE_ADDR + trace_device * RANK_ADDR_STRIDE
        self.allocated = 0
        self.peak = 0
        self.num_allocs = 0
        self.fraction: float | None = None
        self.assumed: dict[str, int] = {}  # lines that read unknown GPU values as zeros
        self.lock = threading.RLock()
        self.default_stream = FakeStream(stream_id=0)
        self._tmp_key = -1
        self.debug = bool(os.environ.get("ALLOCREPLAY_NOGPU_DEBUG"))
        self.op = ""
        self.ops: list[str] = []  # with ALLOCREPLAY_NOGPU_DEBUG: the operator of each allocation
        # An autograd gradient accumulation that the GPU run does in place (see accumulated):
        # (key of the sum, key of the buffer's old gradient, index of the sum's alloc entry).
        self.inplace: tuple[int, int, int] | None = None

    def stream_id(self) -> int:
        s = _state.stream
        return 0 if s is None else int(s.stream_id)

    def alloc(self, key: int, size: int, stream: int | None = None) -> None:
        with self.lock:
            self.inplace = None
            addr = self.next_addr
            self.next_addr += (size + 511) // 512 * 512 or 512
            st = self.stream_id() if stream is None else stream
            self.live[key] = (addr, size, st)
            self.entries.append({"action": "alloc", "addr": addr, "size": size, "stream": st})
            if self.debug:
                self.ops.append(self.op)
            self.allocated += _rounded(size)
            self.num_allocs += 1
            self.peak = max(self.peak, self.allocated)

    def free(self, key: int) -> None:
        with self.lock:
            pending, self.inplace = self.inplace, None
            if pending is not None and pending[1] == key and len(self.entries) == pending[2] + 1 and pending[0] in self.live:
                # The old gradient died as the sum replaced it: it was the last reference, so
                # the GPU run added into it in place. The sum takes the old gradient's block.
                self.entries.pop()
                if self.debug:
                    self.ops.pop()
                _, size, _ = self.live[pending[0]]
                self.allocated -= _rounded(size)
                self.num_allocs -= 1
                self.live[pending[0]] = self.live.pop(key)
                return
            got = self.live.pop(key, None)
            if got is None:
                return
            addr, size, st = got
            self.entries.append({"action": "free_requested", "addr": addr, "size": size, "stream": st})
            self.entries.append({"action": "free_completed", "addr": addr, "size": size, "stream": st})
            self.allocated -= _rounded(size)

    def accumulated(self, sum_key: int, old_key: int) -> None:
        """``sum_key`` was just allocated for ``old + new`` in autograd's gradient accumulation.

        ``InputBuffer::accumulate`` (torch/csrc/autograd/input_buffer.cpp) adds the new
        gradient into the old one in place when grad mode is off and it holds the last
        reference to the old gradient and its storage (``can_accumulate_inplace``), but never
        for a tensor subclass — which the fake tensors are, so here the sum is a new storage.
        Whether it held the last reference shows at once: the old gradient's storage is freed
        by the very next event, as ``buffer[pos] = old_var + var`` replaces it; :meth:`free`
        then takes the sum's allocation back (the sum lives in the old gradient's block).
        """
        with self.lock:
            last = self.entries[-1] if self.entries else None
            if last is not None and last["action"] == "alloc" and sum_key in self.live and self.live[sum_key][0] == last["addr"]:
                self.inplace = (sum_key, old_key, len(self.entries) - 1)

    def temporary(self, size: int) -> None:
        """A buffer a kernel allocates and frees inside one operator (a workspace)."""
        if size <= 0:
            return
        with self.lock:
            self._tmp_key -= 1
            key = self._tmp_key
        self.alloc(key, size)
        self.free(key)

    def persistent(self, size: int) -> int:
        """A buffer that lives to the end of the process (the cuBLAS workspace), or until a
        storage adopts it; returns its key."""
        with self.lock:
            self._tmp_key -= 1
            key = self._tmp_key
        self.alloc(key, size)
        return key

    def resized(self, key: int, nbytes: int) -> None:
        """The storage ``key`` of a cuda tensor was resized to ``nbytes`` in place
        (``UntypedStorage.resize_``, as FSDP2 frees and re-allocates its unsharded parameters:
        ``_fsdp_param.py``, ``free_storage`` / ``alloc_storage``). ``resize_bytes_cuda``
        (aten/src/ATen/native/cuda/Resize.cpp) allocates the new block (none for 0 bytes), copies
        and frees the old one."""
        with self.lock:
            if key not in self.storages:
                return
            old = self.live.pop(key, None)
            tmp = None
            if old is not None:
                self._tmp_key -= 1
                tmp = self._tmp_key
                self.live[tmp] = old
        if nbytes > 0:
            self.alloc(key, nbytes)
        if tmp is not None:
            self.free(tmp)

    def adopt(self, storage: Any, key: int) -> None:
        """``storage`` is the buffer allocated as ``key``: freed when it dies."""
        with self.lock:
            got = self.live.pop(key, None)
            if got is None:
                return
            self.live[storage._cdata] = got
            self.storages.add(storage._cdata)
        weakref.finalize(storage, self.died, storage._cdata)

    def track(self, storage: Any, nbytes: int) -> None:
        key = storage._cdata
        with self.lock:
            if key in self.live:
                return
        if nbytes <= 0:
            return
        self.alloc(key, nbytes)
        with self.lock:
            self.storages.add(key)
        weakref.finalize(storage, self.died, key)

    def died(self, key: int) -> None:
        """A recorded storage's last reference went: its block is freed."""
        with self.lock:
            self.storages.discard(key)
        self.free(key)

    def snapshot(self, conf: str) -> dict[str, Any]:
        dump = os.environ.get("ALLOCREPLAY_NOGPU_DEBUG", "")
        if dump.endswith(".json"):
            # For studying the trace against a real capture: the operator of each allocation.
            with open(dump, "w") as f:
                json.dump(self.ops, f)
        return {
            "segments": [],
            "device_traces": [[] for _ in range(self.trace_device)] + [list(self.entries)],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": conf, "expandable_segments": "expandable_segments:true" in conf.replace(" ", "").lower()},
        }

    def stats(self) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak,
            "reserved_bytes.all.current": self.allocated,
            "reserved_bytes.all.peak": self.peak,
            "active_bytes.all.current": self.allocated,
            "active_bytes.all.peak": self.peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
            "allocation.all.allocated": self.num_allocs,
        }


def _rounded(size: int) -> int:
    # c10/cuda/CUDACachingAllocator.cpp, round_size: kMinBlockSize (512) multiples.
    return 512 if size < 512 else (size + 511) // 512 * 512


def parse_device(spec: str | None) -> tuple[str, int, tuple[int, int], int]:
    """``h200`` / ``a100-80gb`` ..., or a memory size (bytes, ``80GiB``, ``81920MiB``, ``80GB``):
    an H200-like device of that memory. Raises ValueError."""
    if not spec:
        return DEVICES[DEFAULT_DEVICE]
    key = spec.strip().lower()
    if key in DEVICES:
        return DEVICES[key]
    with contextlib.suppress(ValueError):
        d = _devices.lookup(key)
        return (d.name, d.total_bytes, d.compute_capability, d.sms)
    import re

    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b?|b)?", key)
    if not m:
        raise ValueError(f"--device-memory {spec!r}: expected a size (80GiB, 81920MiB, 85899345920) or a device ({', '.join(DEVICES)})")
    unit = (m.group(2) or "b").rstrip("b") or "b"
    mult = {"b": 1, "k": 1000, "ki": 1 << 10, "m": 1000**2, "mi": 1 << 20, "g": 1000**3, "gi": 1 << 30, "t": 1000**4, "ti": 1 << 40}[unit]
    total = int(float(m.group(1)) * mult)
    name, _, cc, sms = DEVICES[DEFAULT_DEVICE]
    return (f"{name} ({total} bytes)", total, cc, sms)


# --- torch.cuda without CUDA ---------------------------------------------------------------


def patch_torch_cuda(torch: Any, rec: Recorder) -> None:
    """Replaces the ``torch.cuda`` functions that would reach the driver with answers for the
    chosen device, in ``torch.cuda`` and the submodules that define them."""
    cuda = torch.cuda
    props = rec.props

    def props_of(device: Any = None) -> FakeProps:
        return props

    def noop(*a: Any, **k: Any) -> None:
        return None

    def set_device(device: Any) -> None:
        # torch.cuda.set_device -> torch._C._cuda_setDevice -> the stand-in's cudaSetDevice.
        index = torch.cuda._utils._get_device_index(device, optional=True)
        if index >= 0:
            torch._C._cuda_setDevice(index)

    def memory_stats(device: Any = None) -> dict[str, int]:
        return rec.stats()

    def set_fraction(fraction: float, device: Any = None) -> None:
        rec.fraction = float(fraction)

    @contextlib.contextmanager
    def stream(s: Any) -> Any:
        prev = _state.stream
        if s is not None:
            _state.stream = s
        try:
            yield
        finally:
            _state.stream = prev

    def set_stream(s: Any) -> None:
        _state.stream = s

    def current_stream(device: Any = None) -> Any:
        return _state.stream if _state.stream is not None else rec.default_stream

    def record_stream(self: Any, s: Any) -> None:
        return None

    def snapshot(*a: Any, **k: Any) -> dict[str, Any]:
        return rec.snapshot(alloc_conf()[1])

    answers: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: _nogpu_devices(),
        "is_initialized": lambda: True,
        "init": noop,
        "_lazy_init": noop,
        "current_device": _current_device,
        "set_device": set_device,
        "get_device_properties": props_of,
        "get_device_name": lambda device=None: props.name,
        "get_device_capability": lambda device=None: (props.major, props.minor),
        "is_bf16_supported": lambda including_emulation=True: props.major >= 8,
        "is_tf32_supported": lambda: props.major >= 8,
        "get_arch_list": lambda: [f"sm_{props.major}{props.minor}"],
        "synchronize": noop,
        "empty_cache": noop,
        "ipc_collect": noop,
        "manual_seed": noop,
        "manual_seed_all": noop,
        "seed": noop,
        "seed_all": noop,
        "initial_seed": lambda: 0,
        "memory_allocated": lambda device=None: rec.allocated,
        "max_memory_allocated": lambda device=None: rec.peak,
        "memory_reserved": lambda device=None: rec.allocated,
        "max_memory_reserved": lambda device=None: rec.peak,
        "memory_cached": lambda device=None: rec.allocated,
        "max_memory_cached": lambda device=None: rec.peak,
        "memory_stats": memory_stats,
        "reset_peak_memory_stats": noop,
        "reset_max_memory_allocated": noop,
        "reset_accumulated_memory_stats": noop,
        "mem_get_info": lambda device=None: (props.total_memory - rec.allocated, props.total_memory),
        "set_per_process_memory_fraction": set_fraction,
        "get_per_process_memory_fraction": lambda device=None: rec.fraction if rec.fraction is not None else 1.0,
        "get_allocator_backend": lambda: "native",
        "_record_memory_history": noop,
        "_snapshot": snapshot,
        "memory_snapshot": lambda *a, **k: [],
        "stream": stream,
        "set_stream": set_stream,
        "current_stream": current_stream,
        "default_stream": lambda device=None: rec.default_stream,
        "Stream": FakeStream,
        "Event": FakeEvent,
        "is_current_stream_capturing": lambda: False,
    }
    modules = [cuda, cuda.memory, cuda.random, getattr(cuda, "streams", None)]
    for name, value in answers.items():
        if callable(value) and not isinstance(value, type):
            value = _distinct(value, name)
        for mod in modules:
            if mod is not None and hasattr(mod, name):
                setattr(mod, name, value)
        if not hasattr(cuda, name):
            setattr(cuda, name, value)
    torch.Tensor.record_stream = record_stream
    resize = torch.UntypedStorage.resize_

    def resize_storage(self: Any, size: int) -> Any:
        out = resize(self, size)
        rec.resized(self._cdata, int(size))
        return out

    torch.UntypedStorage.resize_ = resize_storage

    def to_cuda(self: Any, device: Any = None, non_blocking: bool = False, memory_format: Any = torch.preserve_format) -> Any:
        # Tensor.cuda (THPVariable_cuda) sets a CUDA device guard first: go through Tensor.to.
        dev = torch.device("cuda", _current_device() if device is None else device) if device is None or isinstance(device, int) else torch.device(device)
        return self.to(device=dev, non_blocking=non_blocking, memory_format=memory_format)

    def pin_memory(self: Any, device: Any = None) -> Any:
        return self  # pinned host memory is not the device's: a plain CPU tensor will do

    def factory(original: Any) -> Any:
        # torch.tensor(data, device="cuda") copies in C++ under a CUDA device guard: build it on
        # the CPU, then move it through the dispatcher.
        def make(data: Any, *a: Any, device: Any = None, **k: Any) -> Any:
            if device is not None and torch.device(device).type == "cuda":
                return original(data, *a, **k).to(torch.device(device) if torch.device(device).index is not None else torch.device("cuda", _current_device()))
            return original(data, *a, device=device, **k)

        make.__name__ = original.__name__
        make.__doc__ = original.__doc__
        return make

    torch.tensor = factory(torch.tensor)
    torch.as_tensor = factory(torch.as_tensor)
    setattr(torch.Tensor, "cuda", to_cuda)  # noqa: B010 (mypy: a method)
    torch.Tensor.pin_memory = pin_memory
    torch.Tensor.is_pinned = lambda self, device=None: False
    # The fake mode would create a real CUDA tensor to initialize the GPU context.
    from torch._subclasses import fake_tensor

    setattr(fake_tensor, "init_gpu_context", lambda device: None)  # noqa: B010 (mypy: a method)
    _patch_module_apply(torch)


def _patch_module_apply(torch: Any) -> None:
    """torch.nn.Module._apply swaps a fake parameter for its converted copy (swap_tensors), which
    refuses tensors the fake mode's memo refers to weakly: recompile it without that case, so that
    the module gets a new parameter, the old one freed at once, as with CUDA tensors of another
    dtype (the real run's `param.data = ...` frees each old storage before the next parameter
    is converted: llama_generate's `.to(torch.bfloat16)`)."""
    import inspect
    import textwrap

    import torch.nn.modules.module as module_mod

    check = "or isinstance(param, FakeTensor)"
    loop = "for key, param in self._parameters.items():\n"
    new_param = "self._parameters[key] = out_param\n"
    try:
        src = textwrap.dedent(inspect.getsource(module_mod.Module._apply))
    except (OSError, TypeError):
        return
    if check not in src or src.count(loop) != 1 or src.count(new_param) != 1:
        return
    # A parameter shared by two modules (tied embeddings) becomes one new parameter, as
    # `.data =` keeps it one on the GPU.
    indent = src.split(loop)[0].rsplit("\n", 1)[1]
    src = src.replace(check, "or False")
    src = src.replace(
        loop,
        loop
        + indent
        + "    if param is not None and id(param) in _AR_REPLACED and _AR_REPLACED[id(param)][0]() is param:\n"
        + indent
        + "        self._parameters[key] = _AR_REPLACED[id(param)][1]\n"
        + indent
        + "        continue\n",
    )
    at = src.split(new_param)[0].rsplit("\n", 1)[1]
    # A weak reference: the old parameter (and its storage) must go as soon as nothing else
    # holds it, before the next parameter is converted, as `.data =` frees it on the GPU.
    src = src.replace(new_param, new_param + at + "_AR_REPLACED[id(param)] = (_ar_weakref(param), out_param)\n")
    scope = dict(module_mod.__dict__)
    replaced: dict[int, Any] = {}
    scope["_AR_REPLACED"] = replaced
    scope["_ar_weakref"] = weakref.ref
    exec(compile(src, module_mod.__file__, "exec"), scope)
    inner = scope["_apply"]
    depth = [0]

    def _apply(self: Any, fn: Any, recurse: bool = True) -> Any:
        depth[0] += 1
        try:
            return inner(self, fn, recurse)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                replaced.clear()

    setattr(module_mod.Module, "_apply", _apply)  # noqa: B010 (mypy: a method)


def _nogpu_devices() -> int:
    """``torch.cuda.device_count()``: the stand-in's (ALLOCREPLAY_NOGPU_DEVICES, else a
    torchrun worker's LOCAL_WORLD_SIZE: its node's GPUs; default 1)."""
    try:
        return max(1, int(os.environ.get("ALLOCREPLAY_NOGPU_DEVICES") or os.environ.get("LOCAL_WORLD_SIZE") or "1"))
    except ValueError:
        return 1


def _distinct(fn: Any, name: str) -> Any:
    """A function object of its own for each name: torch._dynamo's rules map each torch.cuda
    function object to one rule, and refuse one object under two names."""

    def answer(*a: Any, **k: Any) -> Any:
        return fn(*a, **k)

    answer.__name__ = answer.__qualname__ = name
    return answer


# --- the dispatch mode ---------------------------------------------------------------------


VALUE_LIMIT = 1 << 20
FLOAT_VALUE_LIMIT = 1 << 12
"""Integer and boolean tensors of up to VALUE_LIMIT elements (floating-point ones: up to
FLOAT_VALUE_LIMIT) whose values are known (built from CPU data or by ``ones``/``arange``/
``randint``..., and what is computed from those alone) keep a CPU copy of their values, so that
control flow on them (``if mask.all()``, a generation loop's stopping test) goes as on the GPU;
activations and weights never do (that would be the whole computation, on the CPU)."""


ZERO_LIMIT = 1 << 22
"""With ``--unknown-values zero``, unknown tensors of up to this many elements read as zeros
where a small integer or boolean result (a token id, a flag) is computed from them."""


SHAPE_ONLY = {"ones_like", "zeros_like", "full_like", "new_ones", "new_zeros", "new_full"}
"""Operators whose result's values do not depend on their input's (torch.ones_like(ids))."""


HOST_LIMIT = 1 << 20
"""Floating-point CPU tensors of at least this many bytes that a factory makes (``torch.empty``,
``zeros``, ``ones``, ``full``, ``rand``, ``randn``, ``normal``, ``Tensor.new_*``: the parameters a
module builds before ``.cuda()``, and their initializers) are fake CPU tensors, without storage:
a model built on the CPU and moved to the device costs no host memory. Their values are unknown
(reading them is reading a GPU value); random initializers still advance the CPU generator as
the real run's do."""

HOST_FACTORIES: tuple[str, ...] = ("empty", "empty_strided", "zeros", "ones", "full", "rand", "randn", "normal")
HOST_FACTORIES += ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full")


def _small(t: Any) -> bool:
    n = int(t.numel())
    return n <= (FLOAT_VALUE_LIMIT if (t.is_floating_point() or t.is_complex()) else VALUE_LIMIT)


def make_mode(torch: Any, rec: Recorder, unknown: str) -> Any:
    """The dispatch mode. ``unknown``: what reading a GPU value that is not known does:
    ``error`` (a NoGpuValueError naming the line) or ``zero`` (the value reads as zeros, and
    the line is listed in the trace's metadata)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensor,
        FakeTensorMode,
    )
    from torch.utils._pytree import tree_flatten, tree_map, tree_map_only

    TorchDispatchMode: Any = importlib.import_module("torch.utils._python_dispatch").TorchDispatchMode

    from . import _nogpu_extras as extras

    fake = FakeTensorMode(allow_non_fake_inputs=True)
    converter = fake.fake_tensor_converter
    cuda_type = "cuda"
    add_tensor = torch.ops.aten.add.Tensor
    is_non_overlapping_and_dense = extras._dense

    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    def is_wrapper(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) and is_traceable_wrapper_subclass(t)

    value_ops = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default, torch.ops.aten.equal.default}
    cpu = torch.device("cpu")
    random_tag = torch.Tag.nondeterministic_seeded

    def on_cuda(flat: list[Any], kwargs: dict[str, Any]) -> bool:
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == cuda_type:
            return True
        return any(isinstance(a, FakeTensor) for a in flat)

    def on_device(flat: list[Any], kwargs: dict[str, Any]) -> bool:
        # on_cuda, less the operators on fake CPU tensors alone (host_factory's): no request,
        # no kernel's workspace.
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == cuda_type:
            return True
        return any(isinstance(a, FakeTensor) and a.fake_device.type == cuda_type for a in flat)

    host_factories = {getattr(torch.ops.aten, name) for name in HOST_FACTORIES}
    from torch.utils.data import get_worker_info

    def host_factory(func: Any, args: Any, kwargs: Any) -> Any:
        """A fake CPU tensor for a factory's large floating-point CPU tensor (HOST_LIMIT), or
        None: the operator runs for real."""
        if func.overloadpacket not in host_factories:
            return None
        names = [a.name for a in func._schema.arguments]
        if "size" not in names or "out" in names:
            return None
        i = names.index("size")
        size = args[i] if i < len(args) else kwargs.get("size")
        try:
            n = 1
            for s in size:
                n *= int(s)
        except (TypeError, ValueError):
            return None
        dev = kwargs.get("device")
        if n * 8 < HOST_LIMIT or (dev is not None and torch.device(dev).type != "cpu"):
            return None
        if get_worker_info() is not None:
            return None  # a DataLoader worker's tensors go to the main process through shared memory
        a, k = tree_map_only(torch.Tensor, twin, (args, kwargs))
        try:
            with fake:
                out = func(*a, **k)
        except Exception:
            return None
        if not (isinstance(out, FakeTensor) and out.fake_device.type == "cpu" and out.is_floating_point() and out.untyped_storage().nbytes() >= HOST_LIMIT):
            return None
        if random_tag in func.tags:
            # torch.randn(...) on the CPU: the CPU generator advances as in the real run, so
            # that what the program draws from it afterwards is what the real run drew. The
            # operator's out= form fills a scratch tensor (randn.out is what randn runs).
            name = "out" if func._overloadname == "default" else func._overloadname + "_out"
            out_op = getattr(func.overloadpacket, name, None)
            keep = {key: v for key, v in kwargs.items() if key not in ("dtype", "layout", "device", "pin_memory", "memory_format")}
            if out_op is not None:
                advance(out_op, args, {**keep, "out": out})
            else:
                func(*args, **kwargs)
        return out

    def scratch(t: Any) -> Any:
        # A real CPU tensor of t's layout. A large one lives in a mapping of its own, unmapped
        # when it dies: freed memory the C library keeps would be the host memory saved.
        if not isinstance(t, FakeTensor):
            return t
        v = getattr(t, "_ng_value", None)
        if v is not None:
            return v.clone()
        with torch._C._DisableTorchDispatch():
            nbytes = int(t.untyped_storage().nbytes())
            if nbytes < HOST_LIMIT:
                return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
            import mmap

            buf = torch.frombuffer(mmap.mmap(-1, nbytes), dtype=torch.uint8)
            return buf.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())

    def advance(func: Any, args: Any, kwargs: Any) -> None:
        """A random operator on fake CPU tensors (``normal_`` of a parameter being initialized):
        run on a scratch tensor of the same layout, freed at once, for the CPU generator to
        advance as in the real run (``torch.manual_seed(0)`` then the model then the data: the
        data's values are the real run's)."""
        a, k = tree_map_only(FakeTensor, scratch, (args, kwargs))
        with contextlib.suppress(Exception), torch._C._DisableTorchDispatch():
            func(*a, **k)

    def twin(t: Any) -> Any:
        # A fake tensor of t's layout, without the converter's memo (a weak reference on t would
        # stop Module._apply from swapping t for its fake copy); small ones keep their values.
        if isinstance(t, FakeTensor):
            return t
        with torch._C._DisableTorchDispatch():
            meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        f = converter.from_meta_and_device(fake, meta, t.device)
        if _small(t) and t.layout == torch.strided:
            vars(f)["_ng_value"] = t.detach().clone()
        return f

    def known(t: Any) -> bool:
        return not isinstance(t, FakeTensor) or getattr(t, "_ng_value", None) is not None

    def value_of(t: Any, why: Any, count: bool = True) -> Any:
        """The CPU values of ``t``; unknown ones are zeros under --unknown-values zero (marked
        ``_ng_guessed``). ``count``: the program reads them (a branch, ``.item()``, a shape), so
        a read of guessed values counts in ``values_read_as_zeros``; values computed ahead, in
        case the program reads them later, count only when it does."""
        if not isinstance(t, FakeTensor):
            return t
        v = getattr(t, "_ng_value", None)
        if v is None:
            line = user_line()
            if unknown != "zero":
                raise NoGpuValueError(
                    f"{line}: {why} needs the values of a tensor computed on the GPU; without a GPU there are none (--unknown-values zero reads them as zeros)"
                )
            v = torch.zeros(t.shape, dtype=t.dtype)
            vars(t)["_ng_value"] = v
            vars(t)["_ng_guessed"] = True
            if count:
                rec.assumed[line] = rec.assumed.get(line, 0) + 1
        elif count and getattr(t, "_ng_guessed", False):
            line = user_line()
            rec.assumed[line] = rec.assumed.get(line, 0) + 1
        return v

    numpy = torch.Tensor.numpy

    def to_numpy(self: Any, *, force: bool = False) -> Any:
        # A fake CPU tensor (a `.cpu()` copy, a parameter built on the host) has no storage to
        # share: its values (unknown: the rule of --unknown-values), as a new array.
        if not isinstance(self, FakeTensor):
            return numpy(self, force=force)
        if self.fake_device.type != "cpu" and not force:
            raise TypeError(f"can't convert {self.fake_device} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return numpy(value_of(self, "numpy()").detach(), force=force)

    setattr(torch.Tensor, "numpy", to_numpy)  # noqa: B010 (mypy: a method)

    def on_cpu(x: Any) -> Any:
        if isinstance(x, torch.device) and x.type == cuda_type:
            return cpu
        if isinstance(x, str) and x.startswith(cuda_type):
            return cpu
        return x

    def compute(func: Any, args: Any, kwargs: Any, why: Any, count: bool = True) -> Any:
        """Runs func on the CPU values of its arguments (RNG state of the CPU kept as it was)."""
        if func._opname in SHAPE_ONLY:
            a, k = tree_map_only(FakeTensor, lambda t: torch.zeros(t.shape, dtype=t.dtype), (args, kwargs))
        else:
            a, k = tree_map_only(FakeTensor, lambda t: value_of(t, why, count), (args, kwargs))
        a, k = tree_map(on_cpu, (a, k))
        if "device" in k:
            k["device"] = cpu
        with torch.random.fork_rng(devices=[]):
            return func(*a, **k)

    def compute_quietly(func: Any, args: Any, kwargs: Any) -> Any:
        try:
            return compute(func, args, kwargs, func.__name__, count=False)
        except NoGpuValueError:
            raise
        except Exception:
            return None

    def attach(out: Any, vals: Any) -> None:
        fo, _ = tree_flatten(out)
        vo, _ = tree_flatten(vals)
        if len(fo) != len(vo):
            return
        for f, v in zip(fo, vo):
            if isinstance(f, FakeTensor) and isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(f.shape):
                vars(f)["_ng_value"] = v

    def mutated(func: Any, args: Any, kwargs: Any) -> list[Any]:
        out = []
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                v = args[i] if i < len(args) else kwargs.get(arg.name)
                if isinstance(v, FakeTensor):
                    out.append(v)
        return out

    def new_fake(r: Any) -> Any:
        with torch._C._DisableTorchDispatch():
            meta = torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device="meta")
        f = converter.from_meta_and_device(fake, meta, torch.device("cuda", _current_device()))
        vars(f)["_ng_value"] = r
        return f

    class NoGpuMode(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            flat, _ = tree_flatten((args, kwargs))
            if any(is_wrapper(a) for a in flat):
                # A wrapper subclass (DTensor: FSDP2's parameters, gradients and optimizer
                # state) dispatches its operator to the tensors it wraps: let it (returning
                # NotImplemented hands the operator to the subclass, this mode still active), so
                # that what it makes of the fake tensors inside comes back here and is recorded.
                return NotImplemented
            if not on_cuda(flat, kwargs):
                made = host_factory(func, args, kwargs)
                return func(*args, **kwargs) if made is None else made
            extras.libraries()
            device = on_device(flat, kwargs)
            # Real (CPU) tensors going to the GPU: their fake twins, so that the fake mode never
            # runs the operator for real (its constant propagation would call CUDA).
            args, kwargs = tree_map_only(torch.Tensor, twin, (args, kwargs))
            flat, _ = tree_flatten((args, kwargs))
            if func in value_ops:
                return compute(func, args, kwargs, func.__name__)
            plan: dict[int, int] = {}
            if device:
                rec.op = str(func)
                if rec.debug:
                    rec.op += " " + repr([tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in flat])
                plan = extras.before(func, args, kwargs, rec)
            elif random_tag in func.tags:
                advance(func, args, kwargs)
            try:
                with fake:
                    out = func(*args, **kwargs)
            except (DataDependentOutputException, DynamicOutputShapeException):
                # An output whose shape depends on values: computed from the values.
                vals = compute(func, args, kwargs, func.__name__)
                out = tree_map_only(torch.Tensor, new_fake, vals) if device else vals
            else:
                fakes = [t for t in flat if isinstance(t, FakeTensor)]
                outs_f = [t for t in tree_flatten(out)[0] if isinstance(t, FakeTensor)]
                vals = None
                # Random operators' values are the GPU generator's: unknown here.
                exact = all((known(t) or func._opname in SHAPE_ONLY) and _small(t) for t in fakes)
                zeros = unknown == "zero" and not any(t.is_floating_point() for t in outs_f) and all(known(t) or t.numel() <= ZERO_LIMIT for t in fakes)
                if func.namespace == "aten" and random_tag not in func.tags and all(_small(t) for t in outs_f) and (exact or zeros):
                    vals = compute_quietly(func, args, kwargs)
                if vals is not None:
                    attach(out, vals)
                    if any(getattr(t, "_ng_guessed", False) for t in fakes):
                        for t in outs_f:
                            vars(t)["_ng_guessed"] = True  # computed from guessed values
                else:
                    for t in mutated(func, args, kwargs):
                        vars(t)["_ng_value"] = None
            outs, _ = tree_flatten(out)
            for i, t in enumerate(outs):
                if isinstance(t, FakeTensor) and t.fake_device.type == cuda_type:
                    st = t.untyped_storage()
                    if i in plan:
                        key = plan.pop(i)
                        if key != extras.NOT_ON_DEVICE:
                            rec.adopt(st, key)
                    else:
                        rec.track(st, st.nbytes())
                    extras.after_output(func, args, kwargs, i, rec)
            if not device:  # fake CPU tensors only: nothing on the device
                return out
            for key in plan.values():  # not taken over: freed with the operator
                if key != extras.NOT_ON_DEVICE:
                    rec.free(key)
            extras.after(func, args, kwargs, out, rec)
            if func is add_tensor and not kwargs and len(args) == 2 and not torch.is_grad_enabled():
                old = args[0]
                if (
                    isinstance(out, FakeTensor)
                    and isinstance(old, FakeTensor)
                    and isinstance(args[1], torch.Tensor)
                    and out.shape == old.shape
                    and out.dtype == old.dtype
                    and torch._C._current_autograd_node() is not None
                    and is_non_overlapping_and_dense(old)
                    # A view (a tied weight's lm_head gradient is TBackward's grad.t()) shares
                    # its storage with the base its ViewInfo keeps: storage().use_count() is 2,
                    # so can_accumulate_inplace fails and the sum is a new block, as here.
                    # Measured: traces/nogpu/gpt2fp32_train_b16__default, one vocab x hidden
                    # request and two frees after the embedding's backward.
                    and old._base is None
                ):
                    rec.accumulated(out.untyped_storage()._cdata, old.untyped_storage()._cdata)
            return out

    return NoGpuMode()


class NoGpuSession:
    """Started by ``_pytorch.TorchRecorder`` when the capture is ``--no-gpu``."""

    def __init__(self, torch: Any, device: tuple[str, int, tuple[int, int], int], unknown: str = "error", dist: tuple[int, int] | None = None) -> None:
        """``dist``: (rank, world size) under ``--world-size`` (``_nogpu_dist``)."""
        self.torch = torch
        self.dist = dist
        self.rec = Recorder(*device, trace_device=dist[0] if dist else 0)
        patch_torch_cuda(torch, self.rec)
        from torch.utils._python_dispatch import _push_mode

        from . import _nogpu_dist, _nogpu_extras

        _nogpu_extras.patch(torch, self.rec)
        if dist is not None:
            _nogpu_dist.patch(torch, *dist)
        self.mode = make_mode(torch, self.rec, unknown)
        _push_mode(self.mode)

    def stop(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

        if self.mode in _get_current_dispatch_mode_stack():
            while _get_current_dispatch_mode_stack() and _pop_mode() is not self.mode:
                pass
