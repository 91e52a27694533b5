"""PyTorch: ``torch.cuda.memory._record_memory_history`` from CUDA's initialization on, and
``torch.cuda.memory._snapshot()`` at the end, with the metadata the snapshot lacks.

Recording starts inside ``torch.cuda._lazy_init`` (a call queued with ``torch.cuda._lazy_call``,
as ``torch.cuda.manual_seed`` queues its own): after ``torch._C._cuda_init()`` has created the
caching allocator's per-device allocators and before the first allocation, without
initializing CUDA earlier than the script would (which would break scripts that fork, or that
choose their devices after importing torch).
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
from typing import Any

from . import _tags
from ._recorder import FrameworkRecorder, alloc_conf, log, write_json


class TorchRecorder(FrameworkRecorder):
    name = "pytorch"
    module = "torch"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.torch: Any = None
        self.fractions: dict[int, float] = {}
        self.host_va: Any = None
        self.driver_memory: Any = None

    # --- start
    def on_import(self, torch: Any) -> None:
        self.torch = torch
        if self.session.config.no_gpu is not None:
            self._start_no_gpu()
            return
        self._watch_memory_fraction()
        try:
            available = bool(torch.cuda.is_available())
        except Exception:
            available = False
        self.status["gpu"] = available
        if available:
            self._watch_host_va()
        if not available:
            self.status["reason"] = "no GPU: torch.cuda.is_available() is False" + (
                f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r})" if "CUDA_VISIBLE_DEVICES" in os.environ else ""
            )
            log(f"pytorch: {self.status['reason']}: nothing will be recorded in this process")
            return
        if torch.cuda.is_initialized() or not hasattr(torch.cuda, "_lazy_call"):
            self._record()
        else:
            torch.cuda._lazy_call(self._record_quietly)
            self.status["reason"] = "waiting for CUDA's initialization"

    def _record_quietly(self) -> None:
        # Runs inside torch.cuda._lazy_init: an exception here would become the script's
        # DeferredCudaCallError, so it is reported and swallowed.
        try:
            self._record()
        except Exception as e:
            self.status["reason"] = f"could not start recording: {type(e).__name__}: {e}"
            log(f"pytorch: {self.status['reason']}")
        self.session.write_manifest()

    def _record(self) -> None:
        torch = self.torch
        stacks = self.session.config.stacks
        kwargs: dict[str, Any] = {"max_entries": self.session.config.max_entries}
        if stacks == "none":
            kwargs.update(context=None)
        else:
            kwargs.update(context="all", stacks=stacks)
        torch.cuda.memory._record_memory_history(**kwargs)
        self.status["recording"] = True
        self.status["reason"] = None
        self.status["record_memory_history"] = kwargs
        self._watch_driver_memory()
        self.session.keep_atexit_last()

    def _watch_host_va(self) -> None:
        """Note the host ranges freed while modules move to the GPU (``_hostva``), which the
        driver uses for new segments; from the import on, so that the first ``.cuda()``, which
        initializes CUDA, is seen."""
        if not sys.platform.startswith("linux") or not hasattr(getattr(self.torch, "nn", None), "Module"):
            return
        self.host_va = self._install("host ranges", "_hostva", "HostVA")

    def _watch_driver_memory(self) -> None:
        """Note the device memory the driver takes for itself between allocations
        (``_driver_memory``), which shares the address space with the segments."""
        if not hasattr(getattr(self.torch, "_C", None), "_activate_gpu_trace"):
            return
        self.driver_memory = self._install("the driver's memory", "_driver_memory", "DriverMemory")
        if self.driver_memory is not None and self.host_va is not None:
            # The host's mappings at each change (kept apart: `_hostva`'s `driver_changes`).
            self.driver_memory.on_change = self.host_va.note_driver_change

    def _install(self, what: str, module: str, watcher: str) -> Any:
        """``module.watcher(torch)``, installed; None (logged) when that fails: a note is never
        worth breaking the recorded program."""
        try:
            made = getattr(importlib.import_module(f".{module}", __package__), watcher)(self.torch)
            made.install()
            return made
        except Exception as e:
            log(f"pytorch: not noting {what}: {type(e).__name__}: {e}")
            return None

    def _watch_memory_fraction(self) -> None:
        """Remember what ``set_per_process_memory_fraction`` is given: the memory cap of the
        caching allocator (``allowed_memory_maximum = fraction * total``), in case this torch
        cannot report it back (``get_per_process_memory_fraction`` is recent)."""
        memory = self.torch.cuda.memory
        original = getattr(memory, "set_per_process_memory_fraction", None)
        if original is None or getattr(original, "_allocreplay", False):
            return
        recorder = self

        def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
            original(fraction, device)
            try:
                index = recorder.torch.cuda._utils._get_device_index(device, optional=True) if device is not None else recorder.torch.cuda.current_device()
                recorder.fractions[int(index)] = float(fraction)
            except Exception:
                pass

        set_per_process_memory_fraction._allocreplay = True  # type: ignore[attr-defined]
        set_per_process_memory_fraction.__doc__ = original.__doc__
        memory.set_per_process_memory_fraction = set_per_process_memory_fraction
        if getattr(self.torch.cuda, "set_per_process_memory_fraction", None) is original:
            self.torch.cuda.set_per_process_memory_fraction = set_per_process_memory_fraction

    def _start_no_gpu(self) -> None:
        from . import _nogpu, _nogpu_dist

        opts = self.session.config.no_gpu or {}
        dist = _nogpu_dist.config_of(opts)
        self.no_gpu = _nogpu.NoGpuSession(self.torch, _nogpu.parse_device(opts.get("device")), opts.get("unknown", "error"), dist)
        self._start_tags(self.no_gpu.rec)
        self.status.update(gpu=False, recording=True, reason=None, no_gpu=True)
        self.session.keep_atexit_last()
        session = self.session
        if not session.in_process:
            # A GPU value the program needs: one line naming it, not a traceback.
            prev = session._prev_excepthook or sys.__excepthook__

            def one_line(tp: Any, value: Any, tb: Any) -> None:
                if isinstance(value, _nogpu.NoGpuValueError):
                    log(f"--no-gpu: {value}")
                else:
                    prev(tp, value, tb)

            session._prev_excepthook = one_line

    # --- end
    def finish(self) -> None:
        if getattr(self, "no_gpu", None) is not None:
            self._finish_no_gpu()
            return
        torch = self.torch
        if torch is None or not self.status["recording"]:
            if self.status["imported"] and self.status["gpu"] and self.status["reason"] == "waiting for CUDA's initialization":
                self.status["reason"] = "the script never used the GPU (CUDA was not initialized)"
            return
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        self.status["recording"] = False
        pid = self.session.pid
        raw = self.path(f"torch-{pid}.pickle")
        with open(raw, "wb") as f:
            pickle.dump(snapshot, f)  # as torch.cuda.memory._dump_snapshot writes it
        traces = snapshot.get("device_traces") or []
        used = sorted({i for i, t in enumerate(traces) if t} | {int(s.get("device", 0)) for s in snapshot.get("segments", [])})
        if not used:
            self.status["reason"] = "the allocator recorded no event (no CUDA memory was allocated)"
            self.artifacts.append({"framework": self.name, "kind": "pytorch_snapshot", "raw": os.path.basename(raw), "devices": {}})
            return
        stats = {d: _plain(torch.cuda.memory_stats(d)) for d in used}
        common = self.session.base_meta(self.name)
        conf_var, conf = alloc_conf()
        common.update(
            {
                "torch": torch.__version__,
                "cuda": getattr(torch.version, "cuda", None),
                "alloc_conf": conf,
                "alloc_conf_variable": conf_var,
                "allocator_backend": _try(torch.cuda.get_allocator_backend),
                "allocator_settings": snapshot.get("allocator_settings"),
                "max_entries": self.session.config.max_entries,
                "stacks": self.session.config.stacks,
            }
        )
        host_va = self.host_va.to_json() if self.host_va is not None else None
        if host_va is not None:
            common["host_va"] = host_va
        # The driver's memory was noted for one device: only that device's metadata carries it.
        driver_memory = self.driver_memory.to_json() if self.driver_memory is not None else None
        devices: dict[str, str] = {}
        for d in used:
            props = torch.cuda.get_device_properties(d)
            total = int(props.total_memory)
            fraction = self._fraction(d)
            # c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::setMemoryFraction:
            # allowed_memory_maximum = static_cast<size_t>(fraction * device_total).
            cap = int(fraction * total) if fraction is not None and fraction < 1.0 else 0
            meta = dict(common)
            meta.update(
                {
                    "device": d,
                    "device_name": props.name,
                    "device_total_bytes": total,
                    "device_uuid": str(getattr(props, "uuid", "")) or None,
                    "compute_capability": f"{props.major}.{props.minor}",
                    "memory_fraction": fraction,
                    "cap_bytes": cap,
                    "trace_entries": len(traces[d]) if d < len(traces) else 0,
                    "max_entries_reached": d < len(traces) and len(traces[d]) >= self.session.config.max_entries,
                    "memory_stats_per_device": {str(d): stats[d]},
                }
            )
            if len(used) == 1:
                meta["memory_stats"] = stats[d]
            if driver_memory is not None and driver_memory["device"] == d:
                meta["driver_memory"] = driver_memory
            path = self.path(f"torch-{pid}-dev{d}.json")
            write_json(path, meta)
            devices[str(d)] = os.path.basename(path)
        self.artifacts.append({"framework": self.name, "kind": "pytorch_snapshot", "raw": os.path.basename(raw), "devices": devices})

    def _finish_no_gpu(self) -> None:
        """The requests the run would have made, as the snapshot and metadata the GPU path writes
        (no memory statistics: there was no device to measure)."""
        from . import _nogpu

        ng = self.no_gpu
        tags = self._finish_tags()
        ng.stop()
        self.status["recording"] = False
        error = self.session.error or ""
        if "NoGpuValueError" in error:
            # A run cut short where it needed a GPU value: no trace rather than a wrong one.
            self.status["reason"] = error.split(": ", 1)[1] if ": " in error else error
            return
        rec = ng.rec
        pid = self.session.pid
        conf_var, conf = alloc_conf()
        raw = self.path(f"torch-{pid}.pickle")
        with open(raw, "wb") as f:
            pickle.dump(rec.snapshot(conf), f)
        if not rec.entries:
            self.status["reason"] = "the script allocated nothing on cuda"
            self.artifacts.append({"framework": self.name, "kind": "pytorch_snapshot", "raw": os.path.basename(raw), "devices": {}})
            return
        props = rec.props
        fraction = rec.fraction
        meta = self.session.base_meta(self.name)
        meta.update(
            {
                "torch": self.torch.__version__,
                "cuda": getattr(self.torch.version, "cuda", None),
                "alloc_conf": conf,
                "alloc_conf_variable": conf_var,
                "allocator_backend": "native",
                "device": 0,
                "device_name": props.name,
                "device_total_bytes": props.total_memory,
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_fraction": fraction,
                "cap_bytes": int(fraction * props.total_memory) if fraction is not None and fraction < 1.0 else 0,
                "trace_entries": len(rec.entries),
                _tags.METADATA_KEY: tags,
                "no_gpu": {
                    "captured_by": "allocreplay capture --no-gpu",
                    "unknown_values": (self.session.config.no_gpu or {}).get("unknown", "error"),
                    "values_read_as_zeros": dict(rec.assumed),
                    "modelled": list(_nogpu.MODELLED),
                },
            }
        )
        dev = rec.trace_device
        if ng.dist is not None:
            from . import _nogpu_dist

            meta["device"] = dev
            meta["no_gpu"].update(rank=ng.dist[0], world_size=ng.dist[1])
            meta["no_gpu"]["modelled"] += list(_nogpu_dist.MODELLED)
        path = self.path(f"torch-{pid}-dev{dev}.json")
        write_json(path, meta)
        self.artifacts.append({"framework": self.name, "kind": "pytorch_snapshot", "raw": os.path.basename(raw), "devices": {str(dev): os.path.basename(path)}})

    def _start_tags(self, rec: Any) -> None:
        """Tags storages by category as the program runs (``_tags``); a no-GPU allocation is
        named by its address (the recorder never reuses one)."""

        def address(storage: Any) -> int | None:
            got = rec.live.get(storage._cdata)
            return None if got is None else int(got[0])

        try:
            self.tagger: _tags.StorageTagger | None = _tags.StorageTagger(self.torch, address, device=rec.trace_device)
            self.tagger.install()
        except Exception as e:
            self.tagger = None
            log(f"pytorch: storages will not be tagged: {type(e).__name__}: {e}")

    def _finish_tags(self) -> dict[str, Any] | None:
        tagger = getattr(self, "tagger", None)
        if tagger is None:
            return None
        try:
            tagger.finish()
            tags: dict[str, Any] = tagger.to_json()
            return tags
        except Exception as e:
            log(f"pytorch: storages could not be tagged: {type(e).__name__}: {e}")
            return None

    def _fraction(self, device: int) -> float | None:
        get = getattr(self.torch.cuda, "get_per_process_memory_fraction", None)
        if get is not None:
            try:
                return float(get(device))
            except Exception:
                pass
        return self.fractions.get(device)


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _plain(stats: Any) -> dict[str, Any]:
    # memory_stats() is an OrderedDict of ints (and one nested dict in recent versions).
    return {str(k): (_plain(v) if isinstance(v, dict) else v) for k, v in dict(stats).items()}
