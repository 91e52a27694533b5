"""JAX: a profiler session from just before JAX creates its backends, so that the BFC
allocators' ``MemoryAllocation`` / ``MemoryDeallocation`` events of the whole run land in the
``.xplane.pb``; stopped and exported at the end, with each device's ``memory_stats()``.

Where it starts. ``jax.profiler.start_trace`` first calls ``xla_bridge.get_backend()`` (the
PJRT plugins' profilers must be registered before the session exists: the GPU allocator lives
in the CUDA plugin, which records its events through its own tracer), so calling it at
``import jax`` would create the GPU client before the script could call
``jax.distributed.initialize()`` or choose its platforms, and calling it from inside a backend
call re-enters ``get_backend``'s memoization (jax 0.11 refuses that). Instead the hook wraps
``xla_bridge._discover_and_register_pjrt_plugins``, which ``xla_bridge.backends()`` calls first,
before it creates any client: when it returns, the plugins are loaded and their profilers
registered (``register_plugin`` -> ``_profiler.register_plugin_profiler``), and the session is
created right there, as ``start_trace`` creates it (``_profiler.ProfilerSession(options)``).
Nothing is allocated before. Older JAX without that function: ``start_trace`` once the first
outermost backend call has returned.

The XLA dump flags are set by the command line in the child's environment (``XLA_FLAGS`` is
read when the backend is created).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ._recorder import FrameworkRecorder, log, write_json

GPU_PLATFORMS = ("gpu", "cuda", "rocm")


def _options(make: Any) -> Any:
    options = make()
    # The BFC allocator's events are TraceMe instants at level kInfo (2): the host tracer
    # must be at 2 or more. The device tracer gives the device plane (its memory size);
    # Python tracing adds nothing to memory events and costs a lot.
    for attr, value in (("host_tracer_level", 2), ("python_tracer_level", 0), ("device_tracer_level", 1)):
        try:
            setattr(options, attr, value)
        except Exception:
            pass
    return options


class JaxRecorder(FrameworkRecorder):
    name = "jax"
    module = "jax"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.jax: Any = None
        self.logdir = self.path(f"jax-{session.pid}")
        self.profiler_session: Any = None  # ours, when created directly
        self._starting = False
        self._tries = 0
        self._restore: Any = None

    # --- start
    def on_import(self, jax: Any) -> None:
        self.jax = jax
        from jax._src import xla_bridge as xb

        if _initialized(xb):
            self._start_trace()
            return
        discover = getattr(xb, "_discover_and_register_pjrt_plugins", None)
        if callable(discover):
            self._wrap(xb, ["_discover_and_register_pjrt_plugins"], self._before_backends)
        else:
            self._wrap(xb, ["backends", "get_backend", "_get_backend_uncached"], self._after_backends)
        self.status["reason"] = "waiting for JAX's backends"

    def _wrap(self, xb: Any, names: list[str], after: Any) -> None:
        """Wraps module functions of ``xla_bridge`` (JAX's own code looks them up as module
        attributes) so that ``after()`` runs when the outermost of them returns."""
        wrapped: list[tuple[str, Any, Any]] = []
        depth = [0]

        def make(original: Any) -> Any:
            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                depth[0] += 1
                try:
                    result = original(*args, **kwargs)
                finally:
                    depth[0] -= 1
                if depth[0] == 0 and not self._starting:
                    self._starting = True
                    try:
                        after(xb)
                    finally:
                        self._starting = False
                return result

            for attr in ("cache_clear", "cache_info"):  # functools.lru_cache's
                if hasattr(original, attr):
                    setattr(wrapper, attr, getattr(original, attr))
            return wrapper

        for name in names:
            original = getattr(xb, name, None)
            if callable(original):
                wrapper = make(original)
                setattr(xb, name, wrapper)
                wrapped.append((name, original, wrapper))
        self._restore = (xb, wrapped)

    def _unwrap(self) -> None:
        if self._restore is None:
            return
        xb, wrapped = self._restore
        for name, original, wrapper in wrapped:
            if getattr(xb, name, None) is wrapper:
                setattr(xb, name, original)
        self._restore = None

    def _before_backends(self, xb: Any) -> None:
        """Plugins registered, no client created yet: the session starts now."""
        self._unwrap()
        try:
            from jax._src.lib import _profiler

            for key, value in (("jax_version", self.jax.__version__),):
                try:
                    _profiler.set_metadata(key, value)
                except Exception:
                    pass
            os.makedirs(self.logdir, exist_ok=True)
            self.profiler_session = _profiler.ProfilerSession(_options(_profiler.ProfileOptions))
            self._started()
        except Exception as e:
            self.status["reason"] = f"could not start the profiler: {type(e).__name__}: {e}"
            log(f"jax: {self.status['reason']}")
        self.session.write_manifest()

    def _after_backends(self, xb: Any) -> None:
        if self.status["recording"] or not _initialized(xb):
            return
        self._tries += 1
        try:
            self._start_trace()
            self._unwrap()
        except Exception as e:
            self.status["reason"] = f"could not start the profiler: {type(e).__name__}: {e}"
            if self._tries >= 3:
                self._unwrap()
                log(f"jax: {self.status['reason']}")
        self.session.write_manifest()

    def _start_trace(self) -> None:
        """The backends exist already: ``jax.profiler.start_trace``."""
        jax = self.jax
        os.makedirs(self.logdir, exist_ok=True)
        make = getattr(jax.profiler, "ProfileOptions", None)
        if make is not None:
            jax.profiler.start_trace(self.logdir, profiler_options=_options(make))
        else:
            jax.profiler.start_trace(self.logdir)
        self._started()

    def _started(self) -> None:
        self.status["recording"] = True
        self.status["reason"] = None
        self.session.keep_atexit_last()

    # --- end
    def finish(self) -> None:
        self._unwrap()
        jax = self.jax
        if jax is None or not self.status["recording"]:
            if self.status["imported"] and self.status["reason"] == "waiting for JAX's backends":
                self.status["reason"] = "the script never used a JAX device (the backends were not created)"
            return
        if self.profiler_session is not None:
            self.profiler_session.stop_and_export(self.logdir)
            self.profiler_session = None
        else:
            jax.profiler.stop_trace()
        self.status["recording"] = False
        from jax._src import xla_bridge as xb

        if not _initialized(xb):  # never create the backends at exit
            self.status["reason"] = "the script never used a JAX device (the backends were not created)"
            return
        local = jax.local_devices()
        gpus = [d for d in local if d.platform in GPU_PLATFORMS]
        self.status["gpu"] = bool(gpus)
        self.status["devices"] = [f"{d.platform}:{d.id} {getattr(d, 'device_kind', '')}".strip() for d in local]
        if not gpus:
            self.status["reason"] = "no GPU: JAX saw only " + ", ".join(sorted({d.platform for d in local}))
            log(f"jax: {self.status['reason']}: nothing recorded")
            return
        common = self.session.base_meta(self.name)
        common["jax"] = jax.__version__
        try:
            import jaxlib

            common["jaxlib"] = getattr(jaxlib, "__version__", None)
        except Exception:
            pass
        common["xla_dump"] = os.environ.get("ALLOCREPLAY_XLA_DUMP")
        devices: dict[str, str] = {}
        for d in gpus:
            stats = None
            try:
                stats = d.memory_stats()
            except Exception:
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
        except Exception:
            return False
    return bool(getattr(xb, "_backends", None))
