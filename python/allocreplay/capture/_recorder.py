"""What the recording hook (``_hook``) gives each framework's recorder (``_pytorch``, ``_jax``,
``_tf``): the base class, the session it records in (seen through :class:`RecordingSession`,
which the hook's ``Session`` is), the configuration and the two writers. The hook imports the
recorders and the recorders import this module, never the hook. Standard library only: it is
copied into the recorded process with the hook (``_runner.HOOK_FILES``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Protocol


def log(message: str) -> None:
    """One line on the process's stderr, prefixed so that it stands out from the script's."""
    try:
        sys.stderr.write(f"allocreplay capture [{os.getpid()}]: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


def alloc_conf() -> tuple[str | None, str]:
    """The variable the caching allocator's settings come from in this process, and its text:
    ``PYTORCH_CUDA_ALLOC_CONF``, else ``PYTORCH_ALLOC_CONF`` (the name torch 2.9 added), in the
    order ``CUDAAllocatorConfig::instance()`` reads them (c10/cuda/CUDAAllocatorConfig.h); ``(None,
    "")`` where neither is set."""
    var = next((v for v in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF") if v in os.environ), None)
    return var, os.environ.get(var, "") if var else ""


def write_json(path: str, obj: Any) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


class Config:
    """What to record: ``dir`` (raw directory), ``frameworks`` (names, or ``["auto"]``),
    ``max_entries`` (PyTorch's history ring buffer), ``stacks`` (``python``, ``all``, ``none``),
    ``no_gpu`` (``--no-gpu``: ``{"device": SPEC, "unknown": "error"|"zero"}``, see ``_nogpu``)."""

    def __init__(self, dir: str, frameworks: list[str], max_entries: int, stacks: str, no_gpu: dict[str, Any] | None = None) -> None:
        self.dir = dir
        self.frameworks = frameworks
        self.max_entries = max_entries
        self.stacks = stacks
        self.no_gpu = no_gpu

    def to_json(self) -> str:
        return json.dumps({"dir": self.dir, "frameworks": self.frameworks, "max_entries": self.max_entries, "stacks": self.stacks, "no_gpu": self.no_gpu})

    @classmethod
    def from_json(cls, text: str) -> Config:
        d = json.loads(text)
        return cls(d["dir"], list(d["frameworks"]), int(d["max_entries"]), str(d["stacks"]), d.get("no_gpu"))

    def wants(self, framework: str) -> bool:
        return "auto" in self.frameworks or framework in self.frameworks


class FrameworkRecorder:
    """One framework's recording in one process. Subclasses: ``_pytorch.TorchRecorder``,
    ``_jax.JaxRecorder``, ``_tf.TfRecorder``."""

    name = ""
    module = ""

    def __init__(self, session: RecordingSession) -> None:
        self.session = session
        self.status: dict[str, Any] = {"imported": False, "gpu": None, "recording": False, "reason": None}
        self.artifacts: list[dict[str, Any]] = []

    def path(self, name: str) -> str:
        return os.path.join(self.session.config.dir, name)

    def on_import(self, module: Any) -> None:
        """The framework has just been imported: switch recording on (or arrange for it)."""

    def finish(self) -> None:
        """The process (or the ``with`` block) ends: stop recording, write the raw files."""


class RecordingSession(Protocol):
    """What a recorder uses of the hook's ``Session``: its configuration, its process, the
    first exception of the program, and the manifest and metadata it writes."""

    config: Config
    pid: int
    in_process: bool
    error: str | None
    _prev_excepthook: Any

    def write_manifest(self, m: dict[str, Any] | None = None) -> None: ...

    def keep_atexit_last(self) -> None: ...

    def base_meta(self, framework: str) -> dict[str, Any]: ...
