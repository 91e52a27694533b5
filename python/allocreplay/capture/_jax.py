"""JAX: the profiler (``jax.profiler.start_trace``) from the moment JAX's backends exist, so
that the BFC allocators' ``MemoryAllocation`` / ``MemoryDeallocation`` events of the whole run
land in the ``.xplane.pb``; ``stop_trace`` at the end, with each device's ``memory_stats()``.

``start_trace`` initializes the backends itself (``xla_bridge.get_backend()``), so starting it
at ``import jax`` would create the GPU client before the script could call
``jax.distributed.initialize()`` or set ``jax_platforms``. Instead ``xla_bridge.backends`` and
``get_backend`` — the functions through which the backends are created — are wrapped, and the
profiler starts right after the script's own first call has created them (before any buffer exists: the BFC
allocator's preallocated region is made at client creation without a trace event, as in the
team's jax captures). The XLA dump flags are set by the command line, in the child's
environment (``XLA_FLAGS`` is read when the backend is created).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ._hook import FrameworkRecorder, log, write_json

GPU_PLATFORMS = ("gpu", "cuda", "rocm")


class JaxRecorder(FrameworkRecorder):
    name = "jax"
    module = "jax"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.jax: Any = None
        self.logdir = self.path(f"jax-{session.pid}")
        self._starting = False
        self._tries = 0
        self._restore: Any = None

    def on_import(self, jax: Any) -> None:
        self.jax = jax
        from jax._src import xla_bridge as xb

        if _initialized(xb) or not callable(getattr(xb, "backends", None)):
            self._start()
            return
        # Every path to a backend goes through one of these module functions (looked up as
        # module attributes by JAX's own code). They call each other (get_backend ->
        # _get_backend_uncached -> backends) and some are memoized against re-entry, so the
        # profiler starts when the OUTERMOST wrapped call returns with the backends created:
        # before the caller can put a buffer on them. A failed start is retried at the next
        # outermost call (at most 3 tries); then the originals are put back.
        recorder = self
        wrapped: list[tuple[str, Any, Any]] = []
        depth = [0]

        def after_outermost_call() -> None:
            if recorder._starting or recorder.status["recording"] or not _initialized(xb):
                return
            recorder._starting = True
            recorder._tries += 1
            try:
                recorder._start()
                recorder._unwrap()
            except Exception as e:  # noqa: BLE001 - never break the user's program
                recorder.status["reason"] = f"could not start the profiler: {type(e).__name__}: {e}"
                if recorder._tries >= 3:
                    recorder._unwrap()
                    log(f"jax: {recorder.status['reason']}")
            finally:
                recorder._starting = False
                recorder.session.write_manifest()

        for name in ("backends", "get_backend", "_get_backend_uncached"):
            original = getattr(xb, name, None)
            if not callable(original):
                continue

            def make(original: Any) -> Any:
                @functools.wraps(original)
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    depth[0] += 1
                    try:
                        result = original(*args, **kwargs)
                    finally:
                        depth[0] -= 1
                    if depth[0] == 0:
                        after_outermost_call()
                    return result

                for attr in ("cache_clear", "cache_info"):  # functools.lru_cache's
                    if hasattr(original, attr):
                        setattr(wrapper, attr, getattr(original, attr))
                return wrapper

            wrapper = make(original)
            setattr(xb, name, wrapper)
            wrapped.append((name, original, wrapper))
        self._restore = (xb, wrapped)
        self.status["reason"] = "waiting for JAX's backends"

    def _unwrap(self) -> None:
        if self._restore is None:
            return
        xb, wrapped = self._restore
        for name, original, wrapper in wrapped:
            if getattr(xb, name, None) is wrapper:
                setattr(xb, name, original)
        self._restore = None

    def _start(self) -> None:
        jax = self.jax
        devices = jax.local_devices()
        gpus = [d for d in devices if d.platform in GPU_PLATFORMS]
        self.status["gpu"] = bool(gpus)
        self.status["devices"] = [f"{d.platform}:{d.id} {getattr(d, 'device_kind', '')}".strip() for d in devices]
        if not gpus:
            self.status["reason"] = "no GPU: JAX sees only " + ", ".join(sorted({d.platform for d in devices}))
            log(f"jax: {self.status['reason']}: nothing will be recorded in this process")
            return
        options = None
        make = getattr(jax.profiler, "ProfileOptions", None)
        if make is not None:
            options = make()
            # The BFC allocator's events are TraceMe instants at level kInfo (2): the host
            # tracer must be at 2 or more. The device tracer gives the device plane (its
            # memory size); Python tracing adds nothing to memory events and costs a lot.
            for attr, value in (("host_tracer_level", 2), ("python_tracer_level", 0), ("device_tracer_level", 1)):
                try:
                    setattr(options, attr, value)
                except Exception:  # noqa: BLE001
                    pass
        os.makedirs(self.logdir, exist_ok=True)
        if options is not None:
            jax.profiler.start_trace(self.logdir, profiler_options=options)
        else:
            jax.profiler.start_trace(self.logdir)
        self.status["recording"] = True
        self.status["reason"] = None
        self.session.keep_atexit_last()

    def finish(self) -> None:
        self._unwrap()
        jax = self.jax
        if jax is None or not self.status["recording"]:
            if self.status["imported"] and self.status["reason"] == "waiting for JAX's backends":
                self.status["reason"] = "the script never used a JAX device (the backends were not created)"
            return
        jax.profiler.stop_trace()
        self.status["recording"] = False
        common = self.session.base_meta(self.name)
        common["jax"] = jax.__version__
        try:
            import jaxlib

            common["jaxlib"] = getattr(jaxlib, "__version__", None)
        except Exception:  # noqa: BLE001
            pass
        common["xla_dump"] = os.environ.get("ALLOCREPLAY_XLA_DUMP")
        devices: dict[str, str] = {}
        for d in jax.local_devices():
            if d.platform not in GPU_PLATFORMS:
                continue
            stats = None
            try:
                stats = d.memory_stats()
            except Exception:  # noqa: BLE001
                pass
            meta = dict(common)
            meta.update(
                {
                    "device": d.id,
                    "device_name": getattr(d, "device_kind", None),
                    "device_str": str(d),
                    "platform": d.platform,
                    # The BFC allocator of device N is "GPU_N_bfc" (its local hardware id).
                    "allocator": f"GPU_{getattr(d, 'local_hardware_id', d.id)}_bfc",
                }
            )
            if stats:
                meta["memory_stats"] = dict(stats)
            path = self.path(f"jax-{self.session.pid}-dev{d.id}.json")
            write_json(path, meta)
            devices[str(d.id)] = os.path.basename(path)
        self.artifacts.append({"framework": self.name, "kind": "xplane", "raw": os.path.basename(self.logdir), "devices": devices})


def _initialized(xb: Any) -> bool:
    check = getattr(xb, "backends_are_initialized", None)
    if check is not None:
        try:
            return bool(check())
        except Exception:  # noqa: BLE001
            return False
    return bool(getattr(xb, "_backends", None))
