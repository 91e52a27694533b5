"""TensorFlow: the profiler (``tf.profiler.experimental.start``) from ``import tensorflow`` on,
with the host tracer at level 2 so that ``tsl::BFCAllocator::AddTraceMe``'s
``MemoryAllocation`` / ``MemoryDeallocation`` instants (TraceMe level kInfo) are kept; stopped at
the end, with each GPU's ``get_memory_info``.

Without a GPU, TensorFlow's CPU tensors go through BFC only with
``TF_CPU_ALLOCATOR_USE_BFC=true`` (allocator "bfc_cpu_allocator_for_gpu"); otherwise there is
nothing to record and the capture says so.
"""

from __future__ import annotations

import os
from typing import Any

from ._recorder import FrameworkRecorder, log, write_json


def cpu_bfc_enabled() -> bool:
    # tensorflow/core/common_runtime/process_state.cc reads it with ReadBoolFromEnvVar.
    return os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").strip().lower() in ("1", "true")


class TfRecorder(FrameworkRecorder):
    name = "tf"
    module = "tensorflow"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.tf: Any = None
        self.logdir = self.path(f"tf-{session.pid}")
        self.gpus: list[str] = []

    def on_import(self, tf: Any) -> None:
        self.tf = tf
        self.gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
        self.status["gpu"] = bool(self.gpus)
        if not self.gpus and not cpu_bfc_enabled():
            self.status["reason"] = "no GPU: TensorFlow sees none (set TF_CPU_ALLOCATOR_USE_BFC=true to trace its CPU allocator instead)"
            log(f"tf: {self.status['reason']}")
            return
        prof = tf.profiler.experimental
        options = prof.ProfilerOptions(host_tracer_level=2, python_tracer_level=0, device_tracer_level=1 if self.gpus else 0)
        os.makedirs(self.logdir, exist_ok=True)
        prof.start(self.logdir, options=options)
        self.status["recording"] = True
        self.status["allocator"] = "GPU_0_bfc" if self.gpus else "bfc_cpu_allocator_for_gpu"

    def finish(self) -> None:
        tf = self.tf
        if tf is None or not self.status["recording"]:
            return
        tf.profiler.experimental.stop()
        self.status["recording"] = False
        meta = self.session.base_meta(self.name)
        meta["tf"] = tf.__version__
        meta["cpu_allocator_use_bfc"] = cpu_bfc_enabled()
        meta["gpus"] = self.gpus
        info: dict[str, Any] = {}
        for i in range(len(self.gpus)):
            try:
                info[str(i)] = dict(tf.config.experimental.get_memory_info(f"GPU:{i}"))
            except Exception:
                pass
        if info:
            meta["memory_info"] = info
        devices: dict[str, str] = {}
        if self.gpus:
            for i in range(len(self.gpus)):
                m = dict(meta, device=i, allocator=f"GPU_{i}_bfc")
                path = self.path(f"tf-{self.session.pid}-dev{i}.json")
                write_json(path, m)
                devices[str(i)] = os.path.basename(path)
        else:
            m = dict(meta, device="cpu", allocator="bfc_cpu_allocator_for_gpu")
            path = self.path(f"tf-{self.session.pid}-cpu.json")
            write_json(path, m)
            devices["cpu"] = os.path.basename(path)
        self.artifacts.append({"framework": self.name, "kind": "xplane", "raw": os.path.basename(self.logdir), "devices": devices})
