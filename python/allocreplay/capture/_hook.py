"""What runs inside the recorded process: switch each framework's recording on as soon as the
framework loads, and write the raw captures and their metadata when the process ends.

This module and the framework modules beside it (``_pytorch``, ``_jax``, ``_tf``, and
``_recorder``, what the recorders are given: they import it, never this module) use only the
standard library and the frameworks themselves, never the rest of allocreplay: the command line
copies them into a temporary directory as a package of their own, next to a ``sitecustomize.py``
that calls :func:`boot`, so that they run in the user's Python whatever is installed there. ``allocreplay.capture()`` (in-process) uses them directly.

Layout of the raw directory (``--keep-raw`` keeps it):

- ``manifest-PID.json``: one per recorded process, written when the hook starts and again at
  the end: the process's command line, each framework seen (imported, GPU visible, recording,
  why not), and the raw artifacts with their metadata files.
- ``torch-PID.pickle`` + ``torch-PID-devN.json``: the PyTorch memory snapshot of the process
  and one metadata file per device it used (the ``.json`` format the importers read).
- ``jax-PID/`` or ``tf-PID/``: the profiler's log directory (``plugins/profile/RUN/HOST.xplane.pb``)
  + ``jax-PID-devN.json`` / ``tf-PID.json``.
- ``xla_dump/``: XLA's dumps (``XLA_FLAGS=--xla_dump_to``) of every compiled program.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ._recorder import Config as Config
from ._recorder import FrameworkRecorder as FrameworkRecorder
from ._recorder import log as log
from ._recorder import write_json as write_json

ENV_CONFIG = "ALLOCREPLAY_CAPTURE"
"""The child's configuration: a JSON object (see :class:`Config`)."""

FRAMEWORKS = ("pytorch", "jax", "tf")
MODULE_OF = {"pytorch": "torch", "jax": "jax", "tf": "tensorflow"}

# Environment variables that configure the allocators (or the devices) of the frameworks: the
# metadata records those that are set, so that a trace says what its allocator was told.
ENV_PREFIXES = ("PYTORCH_", "CUDA_", "XLA_", "JAX_", "TF_", "NCCL_", "HIP_", "ROCR_")
ENV_EXACT = ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "LOCAL_RANK", "RANK", "WORLD_SIZE")


def relevant_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_EXACT}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after a watched top-level module has been executed,
    whoever imports it: that is how recording starts 'from the first allocation' without
    importing a framework the script never uses."""

    def __init__(self, callbacks: dict[str, Callable[[Any], None]]) -> None:
        self.callbacks = callbacks
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        callback = self.callbacks.get(fullname)
        if callback is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        finder = self
        on_import: Callable[[Any], None] = callback  # narrowed: not None past the check above

        class _Loader(importlib.abc.Loader):
            def create_module(self, s: Any) -> Any:
                return loader.create_module(s)

            def exec_module(self, module: Any) -> None:
                # Put the real loader back before the module's code runs: packages that look
                # at __spec__.loader (resources, lazy loaders) see what they would see anyway.
                module.__spec__.loader = loader
                module.__loader__ = loader
                loader.exec_module(module)
                finder.callbacks.pop(fullname, None)
                on_import(module)

        spec.loader = _Loader()
        return spec


class Session:
    """Recording in one process: the frameworks' recorders, the manifest, the end."""

    def __init__(self, config: Config, *, in_process: bool) -> None:
        self.config = config
        self.in_process = in_process
        self.pid = os.getpid()
        self.started = time.time()
        self.error: str | None = None
        self.recorders: dict[str, FrameworkRecorder] = {}
        self._finder: _PostImportFinder | None = None
        self._finished = False
        self._lock = threading.Lock()
        self._prev_excepthook: Any = None

    # --- start
    def start(self) -> None:
        from . import _jax, _pytorch, _tf

        classes = {"pytorch": _pytorch.TorchRecorder, "jax": _jax.JaxRecorder, "tf": _tf.TfRecorder}
        os.makedirs(self.config.dir, exist_ok=True)
        watch: dict[str, Callable[[Any], None]] = {}
        for fw in FRAMEWORKS:
            if not self.config.wants(fw):
                continue
            rec = classes[fw](self)
            self.recorders[fw] = rec
            mod = sys.modules.get(rec.module)
            if mod is not None:
                self._on_import(rec, mod)
            else:
                watch[rec.module] = functools.partial(self._on_import, rec)
        if watch:
            self._finder = _PostImportFinder(watch)
            sys.meta_path.insert(0, self._finder)
        if not self.in_process:
            self._prev_excepthook = sys.excepthook
            sys.excepthook = self._excepthook
            self.keep_atexit_last()
        self.write_manifest()

    def keep_atexit_last(self) -> None:
        """atexit runs its handlers last-registered first: moving ours to the end of the list
        whenever a framework loads (or starts recording) makes it run before the handlers the
        framework registered on import (jax's ``clean_up`` destroys the backends), while the
        framework still works."""
        if not self.in_process and not self._finished:
            atexit.unregister(self.finish)
            atexit.register(self.finish)

    def _on_import(self, rec: FrameworkRecorder, module: Any) -> None:
        rec.status["imported"] = True
        self.keep_atexit_last()
        try:
            rec.on_import(module)
        except Exception as e:
            rec.status["reason"] = f"could not start recording: {type(e).__name__}: {e}"
            log(f"{rec.name}: {rec.status['reason']}")
        self.write_manifest()

    def _excepthook(self, tp: Any, value: Any, tb: Any) -> None:
        self.note_exception(value)
        (self._prev_excepthook or sys.__excepthook__)(tp, value, tb)

    def note_exception(self, exc: BaseException | None) -> None:
        if exc is not None and self.error is None:
            first = (str(exc).strip().splitlines() or [""])[0]
            self.error = f"{type(exc).__name__}: {first}" if first else type(exc).__name__

    # --- end
    def finish(self) -> dict[str, Any]:
        with self._lock:
            if self._finished:
                return self.manifest()
            self._finished = True
        if self._finder is not None:
            try:
                sys.meta_path.remove(self._finder)
            except ValueError:
                pass
        if self._prev_excepthook is not None and sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_excepthook
        for rec in self.recorders.values():
            try:
                rec.finish()
            except Exception as e:
                rec.status["reason"] = f"could not write the capture: {type(e).__name__}: {e}"
                log(f"{rec.name}: {rec.status['reason']}")
                if not self.in_process:
                    traceback.print_exc()
        m = self.manifest()
        m["finished"] = True
        self.write_manifest(m)
        return m

    def manifest(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "hostname": socket.gethostname(),
            "argv": list(sys.argv),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "in_process": self.in_process,
            "wall_s": time.time() - self.started,
            "error": self.error,
            "frameworks": {name: rec.status for name, rec in self.recorders.items()},
            "artifacts": [a for rec in self.recorders.values() for a in rec.artifacts],
            "finished": False,
        }

    def write_manifest(self, m: dict[str, Any] | None = None) -> None:
        try:
            write_json(os.path.join(self.config.dir, f"manifest-{self.pid}.json"), m or self.manifest())
        except OSError as e:
            log(f"cannot write the manifest in {self.config.dir}: {e}")

    def base_meta(self, framework: str) -> dict[str, Any]:
        """Metadata every framework's ``.json`` carries."""
        return {
            "framework": framework,
            "captured_by": "allocreplay capture",
            "argv": list(sys.argv),
            "pid": self.pid,
            "hostname": socket.gethostname(),
            "python": sys.version.split()[0],
            "env": relevant_env(),
            "error": self.error,
            "wall_s": time.time() - self.started,
        }


_session: Session | None = None


def boot() -> None:
    """Entry point of the injected ``sitecustomize``: read the configuration from the
    environment and start a session for this process. Never raises."""
    global _session
    text = os.environ.get(ENV_CONFIG)
    if not text or _session is not None:
        return
    try:
        _session = Session(Config.from_json(text), in_process=False)
        _session.start()
    except Exception as e:
        log(f"not recording: {type(e).__name__}: {e}")


def chain_sitecustomize(own_dir: str) -> None:
    """Run the ``sitecustomize`` that ours shadows (a distribution's or a virtualenv's), as
    Python would have without us."""
    own = os.path.realpath(own_dir)
    path = [p for p in sys.path if os.path.realpath(p or ".") != own]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        traceback.print_exc()
