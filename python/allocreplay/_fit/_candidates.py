"""One candidate of ``allocreplay fit``: the user's command with the varied values put in,
captured (``capture --no-gpu`` by default), cached, and replayed at the device's capacity under
every setting.

The cache: a capture is stored under a key of everything that decides its requests — the
command after substitution, the variables set for it, the working directory, the torch version
of the Python that runs it, allocreplay's version and a digest of its capture code, the device it was captured for, how unknown
values are read, and the size and modification time of every argument that names a file (the
script) — in ``$XDG_CACHE_HOME/allocreplay/fit`` (``~/.cache/allocreplay/fit``) or
``--cache-dir``. Each entry is written under a temporary name and renamed once complete, so a
rerun, a second device or a run after Ctrl-C captures only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from allocreplay import _api
from allocreplay.errors import CaptureError, InvalidArgumentError

__all__ = ["WORLD_SIZE", "Candidate", "Capturer", "default_cache_dir", "substitute"]

WORLD_SIZE = "world_size"
"""The axis ``fit --world-size`` adds: the ranks of the job each candidate captures."""

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute(text: str, values: Mapping[str, int]) -> str:
    """``{name}`` replaced by its value; ``{{`` and ``}}`` stay literal braces; an unknown name is
    an error (a typo would otherwise capture the same command at every value)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            raise InvalidArgumentError(f"{{{name}}} in the command is not a varied parameter (--vary {name}=...); varied: {', '.join(values)}")
        return str(values[name])

    parts = text.split("{{")
    return "{".join(_FIELD.sub(one, p).replace("}}", "}") for p in parts)


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "allocreplay", "fit")


@dataclass
class Candidate:
    """A captured candidate: its values, the trace, how long the capture took (seconds, as first
    captured), whether it came from the cache, and the values the CPU run read as zeros."""

    values: dict[str, int]
    trace_path: str
    capture_seconds: float
    cached: bool
    values_guessed: int = 0
    guessed_where: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def _torch_version(command: Sequence[str]) -> str:
    from allocreplay.capture._runner import python_of

    python = python_of(list(command))
    if python is None:
        return "unknown"
    try:
        p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return p.stdout.strip() or "unknown"


_CODE: list[str] = []


def _capture_code() -> str:
    """A digest of the recording hook's files: a capture made by other capture code (another
    release, a development tree) is not reused."""
    if not _CODE:
        from allocreplay.capture import _runner

        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(_runner.__file__))
        for name in _runner.HOOK_FILES:
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
        _CODE.append(h.hexdigest()[:16])
    return _CODE[0]


def _file_stamps(args: Sequence[str], cwd: str) -> dict[str, list[int]]:
    stamps = {}
    for a in args:
        path = a if os.path.isabs(a) else os.path.join(cwd, a)
        try:
            if os.path.isfile(path):
                st = os.stat(path)
                stamps[a] = [st.st_size, st.st_mtime_ns]
        except OSError:
            pass
    return stamps


class Capturer:
    """Captures candidates of one command (through the cache)."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        device: str,
        gpu: bool = False,
        unknown_values: str = "zero",
        cache_dir: str | None = None,
        use_cache: bool = True,
        cwd: str | None = None,
        ranks: bool = False,
    ) -> None:
        """``ranks``: the values hold ``world_size`` (``fit --world-size``): each candidate is
        every rank of a job of that many, captured without a GPU (``capture --no-gpu
        --world-size N --all-ranks``), one trace whose device R is rank R."""
        if not command:
            raise InvalidArgumentError(
                "fit: no command given: put it after --, e.g. allocreplay fit --vary batch_size=1:256 -- python train.py --batch-size {batch_size}"
            )
        self.command = list(command)
        self.env = dict(env)
        self.device = device
        self.gpu = gpu
        self.unknown_values = unknown_values
        self.cache_dir = os.path.abspath(cache_dir or default_cache_dir())
        self.use_cache = use_cache
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.ranks = ranks
        self._torch: str | None = None

    def commandline(self, values: Mapping[str, int]) -> tuple[list[str], dict[str, str]]:
        return [substitute(a, values) for a in self.command], {k: substitute(v, values) for k, v in self.env.items()}

    def check(self, names: Sequence[str]) -> None:
        """Every varied name appears in the command or its variables (else every candidate would
        be the same run)."""
        self.commandline(dict.fromkeys(names, 1))  # an unknown {name} fails here, before any capture
        text = " ".join(self.command) + " " + " ".join(self.env.values())
        missing = [n for n in names if "{" + n + "}" not in text and not (self.ranks and n == WORLD_SIZE)]
        if missing:
            raise InvalidArgumentError(
                f"fit: {', '.join('{' + n + '}' for n in missing)} appears nowhere in the command or its --env values: "
                "put it where the value goes, e.g. -- python train.py --batch-size {batch_size}"
            )

    def key(self, values: Mapping[str, int]) -> str:
        if self._torch is None:
            self._torch = _torch_version(self.command)
        cmd, env = self.commandline(values)
        blob = {
            "command": cmd,
            "env": env,
            "cwd": self.cwd,
            "torch": self._torch,
            "allocreplay": _api.__version__,
            "capture_code": _capture_code(),
            "format": _api.FORMAT_VERSION,
            "device": self.device,
            "gpu": self.gpu,
            "unknown_values": self.unknown_values,
            "files": _file_stamps(cmd, self.cwd),
        }
        if self.ranks:
            blob["world_size"] = int(values[WORLD_SIZE])
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:32]

    def _paths(self, key: str) -> tuple[str, str, str]:
        base = os.path.join(self.cache_dir, key)
        return base + ".arrow", base + ".json", base + ".log"

    def cached(self, values: Mapping[str, int]) -> Candidate | None:
        if not self.use_cache:
            return None
        trace, meta, _ = self._paths(self.key(values))
        if not (os.path.isfile(trace) and os.path.isfile(meta)):
            return None
        try:
            with open(meta) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return None
        return Candidate(
            dict(values),
            trace,
            float(info.get("capture_seconds", 0.0)),
            True,
            int(info.get("values_guessed", 0)),
            list(info.get("guessed_where", [])),
            list(info.get("command", [])),
        )

    def capture(self, values: Mapping[str, int]) -> Candidate:
        """Runs the command with ``values`` under the capture (or takes it from the cache)."""
        hit = self.cached(values)
        if hit is not None:
            return hit
        from allocreplay.capture import _runner

        key = self.key(values)
        trace, meta, log = self._paths(key)
        os.makedirs(self.cache_dir, exist_ok=True)
        cmd, env = self.commandline(values)
        tmp = tempfile.mkdtemp(prefix=".fit-", dir=self.cache_dir)
        try:
            out = os.path.join(tmp, "run.arrow")
            no_gpu = None if self.gpu else {"device": self.device, "unknown": self.unknown_values}
            t0 = time.monotonic()
            opts: dict[str, Any] = {"max_entries": 10_000_000, "stacks": "none", "env": env, "log": os.path.join(tmp, "run.log"), "cwd": self.cwd}
            if self.ranks and no_gpu is not None:
                from allocreplay.capture import _ranks

                n = int(values[WORLD_SIZE])
                result = _ranks.run(cmd, out, world_size=n, ranks=list(range(n)), no_gpu=no_gpu, **opts)
            else:
                result = _runner.run(cmd, out, no_gpu=no_gpu, **opts)
            seconds = time.monotonic() - t0
            shutil.copyfile(os.path.join(tmp, "run.log"), log)
            traces = result.outcome.traces if result.outcome else []
            if result.exit_code != 0 and not (self.gpu and traces):
                raise CaptureError(
                    f"fit: the command failed at {_describe(values)} (exit code {result.exit_code}): {' '.join(cmd)}\n{_tail(log)}\n(whole output: {log})",
                    path=log,
                )
            if len(traces) != 1:
                why = "no trace" if not traces else f"{len(traces)} traces (one per device); fit works on one device"
                raise CaptureError(f"fit: the capture at {_describe(values)} gave {why}: {' '.join(cmd)}\n{_tail(log)}", path=log)
            n_guessed, guessed = _guessed(traces[0].path)
            os.replace(traces[0].path, trace)
            info = {"values": dict(values), "command": cmd, "env": env, "capture_seconds": seconds, "values_guessed": n_guessed, "guessed_where": guessed}
            with open(meta + ".tmp", "w") as f:
                json.dump(info, f)
            os.replace(meta + ".tmp", meta)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return Candidate(dict(values), trace, seconds, False, n_guessed, guessed, cmd)


def _describe(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _tail(log: str, n: int = 15) -> str:
    try:
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return "\n".join("  | " + line for line in lines[-n:])


def _guessed(trace_path: str) -> tuple[int, list[str]]:
    """How many values computed on the GPU the CPU run read as zeros, and at which program lines."""
    from allocreplay._api import load

    md: dict[str, Any] = load(trace_path).metadata
    cap = (md.get("extra") or {}).get("capture") or {}
    ng = cap.get("no_gpu") or {}
    got = ng.get("values_read_as_zeros") or []
    if isinstance(got, dict) and ng.get("ranks") is not None:
        # Every rank's (capture --all-ranks): {rank: {line: count}}.
        got = {f"rank {r}: {k}": v for r, per in got.items() for k, v in (per or {}).items()}
    if isinstance(got, dict):
        return sum(int(v) for v in got.values()), [f"{k} ({v}x)" for k, v in got.items()]
    return len(got), [str(x) for x in got]
