"""``fit --backend ray``: each capture is a Ray task (a capture is CPU work: a cluster runs many
at once). The task captures into a scratch cache on its node and returns the trace's bytes;
the driver keeps them in its own cache, so a rerun on one machine or another device needs no
cluster. The command runs in the driver's working directory on every node: a cluster needs the
script and its Python at the same paths (a shared file system, or Ray's ``working_dir``)."""

from __future__ import annotations

import importlib
import json
import os
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from allocreplay._fit._candidates import Candidate, Capturer
from allocreplay.errors import InvalidArgumentError

_lock = threading.Lock()


def _ray() -> Any:
    try:
        ray: Any = importlib.import_module("ray")
    except ImportError as e:
        raise InvalidArgumentError("--backend ray needs Ray: pip install 'allocreplay[ray]'") from e
    return ray


def _capture_task(capturer: Capturer, values: dict[str, int]) -> tuple[bytes, dict[str, Any], str]:
    scratch = tempfile.mkdtemp(prefix="allocreplay-fit-ray-")
    capturer.cache_dir = scratch
    capturer.use_cache = False
    cand = capturer.capture(values)
    with open(cand.trace_path, "rb") as f:
        data = f.read()
    info = {
        "values": values,
        "command": cand.command,
        "capture_seconds": cand.capture_seconds,
        "values_guessed": cand.values_guessed,
        "guessed_where": cand.guessed_where,
        "node": os.uname().nodename,
    }
    log = cand.trace_path[: -len(".arrow")] + ".log"
    text = ""
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            text = f.read()
    return data, info, text


def capture_on_ray(capturer: Capturer, values: Mapping[str, int], address: str | None) -> Candidate:
    hit = capturer.cached(values)
    if hit is not None:
        return hit
    ray = _ray()
    with _lock:
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    task = ray.remote(num_cpus=1, max_retries=0)(_capture_task)
    key = capturer.key(values)
    try:
        data, info, log_text = ray.get(task.remote(capturer, dict(values)))
    except Exception as e:  # a RayTaskError wraps the capture's own error
        cause = getattr(e, "cause", None)
        raise (cause if cause is not None else e) from None
    os.makedirs(capturer.cache_dir, exist_ok=True)
    base = os.path.join(capturer.cache_dir, key)
    for suffix, payload, mode in ((".arrow", data, "wb"), (".log", log_text, "w"), (".json", json.dumps(info), "w")):
        tmp = base + suffix + ".tmp"
        with open(tmp, mode) as f:
            f.write(payload)
        os.replace(tmp, base + suffix)
    return Candidate(
        dict(values), base + ".arrow", float(info["capture_seconds"]), False, int(info["values_guessed"]), list(info["guessed_where"]), list(info["command"])
    )
