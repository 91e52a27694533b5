"""Capture a trace from a real run: ``allocreplay capture -o OUT -- python train.py`` (a child
process with recording switched on from the start), or in-process around a block::

    import allocreplay

    with allocreplay.capture("run.arrow") as cap:
        train()                   # PyTorch, JAX or TensorFlow
    cap.traces                    # the traces written: one per device

What is recorded, per framework:

- PyTorch: the caching allocator's history (``torch.cuda.memory._record_memory_history``,
  ``max_entries`` events kept, Python / C++ stacks or none), dumped with
  ``torch.cuda.memory._snapshot()`` at the end — also when the run ends with an exception or
  an out-of-memory error.
- JAX / TensorFlow: the BFC allocators' events through the profiler (``jax.profiler`` /
  ``tf.profiler.experimental``); for JAX, XLA's dumps of the compiled programs (their buffer
  assignments) are kept beside the trace as ``OUT_STEM.xla_dump/``.

Each trace's metadata holds what the raw formats lack: the device's name and total memory, the
memory cap (PyTorch's per-process memory fraction; BFC's memory limit), the allocator settings
and the environment variables that set them, the framework's version, and the run's final
memory statistics (what ``allocreplay validate`` checks a replay against).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from types import TracebackType
from typing import Literal

from allocreplay.capture import _hook
from allocreplay.capture._convert import Captured, convert, keep_xla_dump
from allocreplay.capture._runner import Result, check_output, run, stem_of
from allocreplay.errors import CaptureError

__all__ = ["Capture", "Captured", "Result", "capture", "run"]


class Capture:
    """The context manager :func:`capture` returns; after the block, ``traces`` lists what was
    written (:class:`Captured`: ``path``, ``framework``, ``device``, ``info``) and ``notes``
    why a framework recorded nothing."""

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        framework: str = "auto",
        max_entries: int = 1_000_000,
        stacks: str = "python",
        keep_raw: bool = False,
        no_gpu: bool = False,
        device_memory: str | None = None,
        unknown_values: str = "error",
    ) -> None:
        if framework not in ("auto", *_hook.FRAMEWORKS):
            raise CaptureError(f"unknown framework {framework!r}: expected auto, pytorch, jax or tf")
        if stacks not in ("python", "all", "none"):
            raise CaptureError(f"unknown stacks {stacks!r}: expected python, all or none")
        if max_entries <= 0:
            raise CaptureError(f"max_entries must be positive, got {max_entries}")
        self.out = os.fspath(out)
        self.framework = framework
        self.max_entries = max_entries
        self.stacks = stacks
        self.keep_raw = keep_raw
        self.no_gpu: dict[str, str] | None = {"device": device_memory or "h200", "unknown": unknown_values} if no_gpu else None
        from allocreplay.capture._runner import check_no_gpu

        check_no_gpu(self.no_gpu, framework)
        if self.no_gpu is not None:
            self.framework = "pytorch"
        self.traces: list[Captured] = []
        self.notes: list[str] = []
        self.raw_dir: str | None = None
        self.xla_dump: str | None = None
        self._session: _hook.Session | None = None
        self._xla_env: tuple[str | None, str | None] | None = None

    def __enter__(self) -> Capture:
        if _hook._session is not None or self._session is not None:
            raise CaptureError("a capture is already recording in this process (allocreplay capture's hook, or an enclosing capture())")
        check_output(self.out)
        stem = stem_of(self.out)
        if self.keep_raw:
            self.raw_dir = stem + ".raw"
            if os.path.isdir(self.raw_dir):
                shutil.rmtree(self.raw_dir)
            os.makedirs(self.raw_dir)
        else:
            self.raw_dir = tempfile.mkdtemp(prefix="allocreplay-capture-")
        self._raw_dump = os.path.join(os.path.abspath(self.raw_dir), "xla_dump")
        if self.no_gpu is not None:
            self._load_no_gpu_stubs()
        self._set_xla_flags()
        config = _hook.Config(os.path.abspath(self.raw_dir), [self.framework], self.max_entries, self.stacks, self.no_gpu)
        self._session = _hook.Session(config, in_process=True)
        self._session.start()
        return self

    def _load_no_gpu_stubs(self) -> None:
        """``no_gpu``: the CUDA driver stand-ins, loaded before torch (which binds to them)."""
        import sys

        from allocreplay.capture import _nogpu

        if "torch" in sys.modules and not _nogpu.stubs_loaded():
            raise CaptureError(
                "capture(no_gpu=True) must begin before torch is imported (torch binds to the CUDA driver when it loads); or use `allocreplay capture --no-gpu`"
            )
        if not _nogpu.stubs_loaded():
            try:
                preload, libdir = _nogpu.build_stubs(tempfile.mkdtemp(prefix="allocreplay-nogpu-"))
            except RuntimeError as e:
                raise CaptureError(str(e)) from None
            _nogpu.load_stubs(preload, libdir)

    def _set_xla_flags(self) -> None:
        # XLA reads XLA_FLAGS when JAX creates its backends: too late if they already exist.
        if self.framework not in ("auto", "jax"):
            return
        import sys

        xb = sys.modules.get("jax._src.xla_bridge")
        if xb is not None and getattr(xb, "backends_are_initialized", lambda: bool(getattr(xb, "_backends", None)))():
            self.notes.append(
                "jax: the backends existed before capture() began, so XLA_FLAGS could not ask for the programs' dumps; set them before JAX starts (or use `allocreplay capture`)"
            )
            return
        flags = os.environ.get("XLA_FLAGS", "")
        if "--xla_dump_to" in flags:
            return
        self._xla_env = (os.environ.get("XLA_FLAGS"), os.environ.get("ALLOCREPLAY_XLA_DUMP"))
        os.environ["XLA_FLAGS"] = " ".join(p for p in (flags, f"--xla_dump_to={self._raw_dump}", "--xla_dump_hlo_as_proto", "--xla_dump_hlo_as_text") if p)
        os.environ["ALLOCREPLAY_XLA_DUMP"] = self._raw_dump

    def _restore_env(self) -> None:
        if self._xla_env is None:
            return
        for key, value in zip(("XLA_FLAGS", "ALLOCREPLAY_XLA_DUMP"), self._xla_env):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._xla_env = None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> Literal[False]:
        session, self._session = self._session, None
        assert session is not None and self.raw_dir is not None
        try:
            session.note_exception(exc)
            session.finish()
            self._restore_env()
            self.xla_dump = keep_xla_dump(self._raw_dump, stem_of(self.out) + ".xla_dump")
            outcome = convert(self.raw_dir, self.out, keep_raw=self.keep_raw, xla_dump=self.xla_dump)
            self.traces = outcome.traces
            self.notes += outcome.notes
        finally:
            if not self.keep_raw:
                shutil.rmtree(self.raw_dir, ignore_errors=True)
        if not self.traces and exc is None:
            raise CaptureError("no trace captured: " + ("; ".join(self.notes) or _nothing_imported(self.framework)))
        return False  # an exception of the block (an OOM...) goes on, after the trace is written


def _nothing_imported(framework: str) -> str:
    if framework == "auto":
        return "the block used none of torch, jax, tensorflow on a GPU"
    return f"the block never used {_hook.MODULE_OF[framework]}"


def capture(
    out: str | os.PathLike[str],
    *,
    framework: str = "auto",
    max_entries: int = 1_000_000,
    stacks: str = "python",
    keep_raw: bool = False,
    no_gpu: bool = False,
    device_memory: str | None = None,
    unknown_values: str = "error",
) -> Capture:
    """Records the block's allocations into ``out`` (an Arrow trace; several devices give
    ``OUT_STEM.devN.arrow``, one per device). ``framework``: ``auto`` (whichever of PyTorch,
    JAX, TensorFlow allocates), ``pytorch``, ``jax`` or ``tf``; ``max_entries``: PyTorch's
    history ring buffer (the oldest events beyond it are dropped and the trace is seeded from
    the final state); ``stacks``: ``python``, ``all`` (with C++ frames) or ``none``;
    ``keep_raw``: keep the raw captures in ``OUT_STEM.raw/``. ``no_gpu``: PyTorch without a
    GPU (docs/no-gpu.md; must begin before torch is imported, and the process stays without
    one): ``device_memory`` (``h200``, ``a100-80gb``... or a size) and ``unknown_values``
    (``error`` or ``zero``) as ``allocreplay capture --no-gpu``'s options.

    Memory allocated before the block shows up as seeds (live allocations whose origin is not
    recorded). An exception inside the block — an out-of-memory error included — still writes
    the trace, then propagates."""
    return Capture(
        out,
        framework=framework,
        max_entries=max_entries,
        stacks=stacks,
        keep_raw=keep_raw,
        no_gpu=no_gpu,
        device_memory=device_memory,
        unknown_values=unknown_values,
    )
