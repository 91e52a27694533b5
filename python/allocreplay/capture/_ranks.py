"""``allocreplay capture --no-gpu --world-size N [--rank R | --all-ranks]``: the ranks of a
distributed job, each run as its own process on the CPU (``_nogpu_dist``: collectives complete
without communicating), in the environment ``torchrun`` gives a worker of a one-node job of N
GPUs (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``...). One rank's trace holds that rank's requests
at device R; all ranks' are merged into one trace whose device R is rank R, so ``replay``,
``tune``, ``report`` and ``fit`` replay every rank as they replay the devices of a multi-GPU
capture.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from allocreplay.capture import _nogpu_dist, _runner
from allocreplay.capture._convert import convert
from allocreplay.capture._merge import merge_raw
from allocreplay.errors import CaptureError

DEVICES_ENV = "ALLOCREPLAY_NOGPU_DEVICES"
"""How many devices the no-GPU stand-in reports (``_nogpu.CUDART_STUB``): the node's."""


def rank_env(rank: int, world_size: int) -> dict[str, str]:
    """The environment of rank ``rank``: torchrun's variables, and the node's devices."""
    env = _nogpu_dist.torchrun_env(rank, world_size)
    env[DEVICES_ENV] = env["LOCAL_WORLD_SIZE"]
    return env


def check_ranks(world_size: int, ranks: Sequence[int]) -> None:
    if world_size < 1:
        raise CaptureError(f"--world-size must be at least 1, got {world_size}")
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise CaptureError(f"--rank {bad[0]}: not a rank of a world of {world_size} (0 to {world_size - 1})")
    if not ranks:
        raise CaptureError("no rank to capture")


def run(
    command: list[str],
    out: str,
    *,
    world_size: int,
    ranks: Sequence[int],
    no_gpu: dict[str, Any],
    jobs: int | None = None,
    env: dict[str, str] | None = None,
    log: str | None = None,
    **kw: Any,
) -> _runner.Result:
    """Captures ``ranks`` of a ``world_size``-rank job (``no_gpu``: as for
    :func:`_runner.run`), ``jobs`` ranks at once (default: the CPUs); one rank: the trace of
    device R; several: one trace, device R = rank R. ``kw``: the rest of :func:`_runner.run`'s
    options."""
    check_ranks(world_size, ranks)
    _runner.check_output(out)
    if len(ranks) == 1:
        r = ranks[0]
        return _runner.run(command, out, no_gpu={**no_gpu, "world_size": world_size, "rank": r}, env={**(env or {}), **rank_env(r, world_size)}, log=log, **kw)
    keep_raw = bool(kw.pop("keep_raw", False))
    stem = _runner.stem_of(out)
    work = tempfile.mkdtemp(prefix="allocreplay-ranks-")
    try:
        results = _run_ranks(command, work, world_size, list(ranks), no_gpu, jobs, env, kw)
        if log is not None:
            _join_logs(work, list(ranks), log)
        result = _runner.Result(exit_code=next((results[r].exit_code for r in ranks if results[r].exit_code), 0))
        for r in ranks:
            result.messages += [f"rank {r}: {m}" for m in results[r].messages]
            if results[r].exit_code:
                kept = _keep_log(work, r, stem) if log is None else f"{log} (rank {r})"
                result.messages.append(f"rank {r}: the command exited with code {results[r].exit_code} (its output: {kept})")
        missing = [r for r in ranks if not (results[r].outcome and results[r].outcome.traces)]  # type: ignore[union-attr]
        if missing:
            raise CaptureError(f"no trace captured for rank(s) {', '.join(map(str, missing))}: " + "; ".join(result.messages or ["see the command's output"]))
        merged = os.path.join(work, "merged.raw")
        merge_raw([os.path.join(work, f"rank{r}.raw") for r in ranks], merged)
        result.outcome = convert(merged, out, keep_raw=keep_raw)
        if keep_raw:
            result.raw_dir = _keep(work, stem + ".raw", ranks)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_ranks(
    command: list[str],
    work: str,
    world_size: int,
    ranks: list[int],
    no_gpu: dict[str, Any],
    jobs: int | None,
    env: dict[str, str] | None,
    kw: dict[str, Any],
) -> dict[int, _runner.Result]:
    """Runs every rank (``jobs`` at once), each rank's output in ``work/rankR.log``; returns
    each rank's result."""
    results: dict[int, _runner.Result] = {}
    errors: dict[int, BaseException] = {}
    todo = list(ranks)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                r = todo.pop(0)
            try:
                res = _runner.run(
                    command,
                    os.path.join(work, f"rank{r}.arrow"),
                    no_gpu={**no_gpu, "world_size": world_size, "rank": r},
                    env={**(env or {}), **rank_env(r, world_size)},
                    log=os.path.join(work, f"rank{r}.log"),
                    keep_raw=True,
                    **kw,
                )
            except BaseException as e:  # reported after every rank has run
                errors[r] = e
                continue
            with lock:
                results[r] = res

    n = max(1, min(len(ranks), jobs or os.cpu_count() or 1))
    threads = [threading.Thread(target=worker, name=f"allocreplay-rank-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        r, e = min(errors.items())
        if isinstance(e, CaptureError):
            raise CaptureError(f"rank {r}: {e}") from None
        raise e
    return results


def _keep(work: str, raw_dir: str, ranks: Sequence[int]) -> str:
    """``--keep-raw``: each rank's raw capture in ``OUT_STEM.raw/rankR/``, the merged one in
    ``OUT_STEM.raw/merged/``."""
    if os.path.isdir(raw_dir):
        shutil.rmtree(raw_dir)
    os.makedirs(raw_dir)
    for r in ranks:
        shutil.move(os.path.join(work, f"rank{r}.raw"), os.path.join(raw_dir, f"rank{r}"))
        if os.path.isfile(os.path.join(work, f"rank{r}.log")):
            shutil.move(os.path.join(work, f"rank{r}.log"), os.path.join(raw_dir, f"rank{r}.log"))
    shutil.move(os.path.join(work, "merged.raw"), os.path.join(raw_dir, "merged"))
    return raw_dir


def _join_logs(work: str, ranks: list[int], log: str) -> None:
    """The ranks' outputs, one after the other, in ``log`` (each under a ``== rank R ==`` line)."""
    with open(log, "wb") as out:
        for r in ranks:
            out.write(f"== rank {r} ==\n".encode())
            try:
                with open(os.path.join(work, f"rank{r}.log"), "rb") as f:
                    shutil.copyfileobj(f, out)
            except OSError:
                pass


def _keep_log(work: str, rank: int, stem: str) -> str:
    """A rank that failed: its output, kept beside the trace as ``OUT_STEM.rankR.log``."""
    dest = f"{stem}.rank{rank}.log"
    src = os.path.join(work, f"rank{rank}.log")
    if os.path.isfile(src):
        shutil.copy2(src, dest)
    return dest
