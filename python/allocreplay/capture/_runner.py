"""``allocreplay capture -o OUT -- COMMAND...``: run the user's command unchanged in a child
process with the recording hook injected, then turn what it recorded into traces.

The hook is injected through ``sitecustomize``: a temporary directory holding a copy of the
hook package and a ``sitecustomize.py`` that starts it is put first on the child's
``PYTHONPATH``, so every Python process the command starts (the script, ``torchrun``'s workers,
``multiprocessing`` spawned children) records itself; the ``sitecustomize`` that it shadows
still runs. The child's exit code is the command's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

from allocreplay.capture import _hook
from allocreplay.capture._convert import Outcome, convert, keep_xla_dump
from allocreplay.errors import CaptureError

HOOK_PACKAGE = "_allocreplay_capture"
HOOK_FILES = (
    "_hook.py",
    "_recorder.py",
    "_pytorch.py",
    "_hostva.py",
    "_driver_memory.py",
    "_jax.py",
    "_tf.py",
    "_nogpu.py",
    "_nogpu_extras.py",
    "_nogpu_dist.py",
    "_devices.py",
    "_tags.py",
    "_cudnn_h200.json.xz",
)
XLA_DUMP_FLAGS = ("--xla_dump_hlo_as_proto", "--xla_dump_hlo_as_text")

SITECUSTOMIZE = f"""\
# Written by `allocreplay capture`: starts recording, then runs the sitecustomize this one shadows.
import os as _os
import sys as _sys

try:
    from {HOOK_PACKAGE} import _hook as _allocreplay_hook
except Exception as _e:  # the user's program runs regardless
    _sys.stderr.write("allocreplay capture: the recording hook did not load: %r\\n" % (_e,))
else:
    _allocreplay_hook.chain_sitecustomize(_os.path.dirname(_os.path.abspath(__file__)))
    _allocreplay_hook.boot()
"""


@dataclass
class Result:
    exit_code: int
    outcome: Outcome | None = None
    raw_dir: str | None = None
    xla_dump: str | None = None
    messages: list[str] = field(default_factory=list)


def stem_of(out: str) -> str:
    return out[: -len(".arrow")] if out.endswith(".arrow") else out


def check_output(out: str) -> None:
    """The trace can be written: its directory exists and takes a file, and it is no directory."""
    if os.path.isdir(out):
        raise CaptureError(f"{out}: is a directory; -o takes the trace's file name (OUT.arrow)", path=out)
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise CaptureError(f"{out}: output not writable: directory {parent} does not exist", path=out)
    try:
        fd, probe = tempfile.mkstemp(prefix=".allocreplay-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise CaptureError(f"{out}: output not writable: {e.strerror or e} in {parent}", path=out) from None
    if os.path.exists(out) and not os.access(out, os.W_OK):
        raise CaptureError(f"{out}: output not writable: the existing file is read-only", path=out)


def python_of(command: list[str]) -> str | None:
    """The Python interpreter that runs ``command``: the command itself (``python3 ...``) or the
    interpreter of its ``#!`` line (``torchrun``, ``accelerate`` ...); None when it is no
    Python program (a shell script may still start Python: the hook works there too)."""
    exe = shutil.which(command[0])
    if exe is None:
        return None
    if re.fullmatch(r"python[0-9.]*", os.path.basename(exe)):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(300)
    except OSError:
        return None
    m = re.match(rb"#!\s*(\S+)(?:\s+(\S+))?", first)
    if not m:
        return None
    interp, arg = m.group(1).decode(errors="replace"), (m.group(2) or b"").decode(errors="replace")
    if os.path.basename(interp) == "env" and arg:
        interp = shutil.which(arg) or arg
    return interp if re.fullmatch(r"python[0-9.]*", os.path.basename(interp)) else None


def installed(python: str, modules: list[str]) -> dict[str, bool]:
    code = "import importlib.util, sys\nprint(' '.join('1' if importlib.util.find_spec(m) else '0' for m in sys.argv[1:]))"
    try:
        p = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    flags = p.stdout.split()
    if p.returncode != 0 or len(flags) != len(modules):
        return {}
    return {m: f == "1" for m, f in zip(modules, flags)}


def check_command(command: list[str], framework: str) -> None:
    if not command:
        raise CaptureError("no script given: put the command to run after --, e.g. allocreplay capture -o run.arrow -- python train.py")
    if shutil.which(command[0]) is None:
        raise CaptureError(f"{command[0]}: command not found", path=command[0])
    python = python_of(command)
    if python is None:
        return
    wanted = list(_hook.MODULE_OF.values()) if framework == "auto" else [_hook.MODULE_OF[framework]]
    found = installed(python, wanted)
    if not found:
        return
    if framework == "auto" and not any(found.values()):
        raise CaptureError(f"no framework installed: none of {', '.join(wanted)} can be imported by {python}")
    if framework != "auto" and not found[wanted[0]]:
        raise CaptureError(f"framework {framework} not installed: {python} cannot import {wanted[0]}")


def hook_dir() -> str:
    """A temporary directory with ``sitecustomize.py`` and a copy of the hook package."""
    d = tempfile.mkdtemp(prefix="allocreplay-hook-")
    pkg = os.path.join(d, HOOK_PACKAGE)
    os.makedirs(pkg)
    here = os.path.dirname(os.path.abspath(__file__))
    for name in HOOK_FILES:
        shutil.copy2(os.path.join(here, name), os.path.join(pkg, name))
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write('"""A copy of allocreplay.capture\'s recording hook, injected by `allocreplay capture`."""\n')
    with open(os.path.join(d, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    return d


def child_env(hook: str, config: _hook.Config, framework: str, xla_dump: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    env["PYTHONPATH"] = hook + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[_hook.ENV_CONFIG] = config.to_json()
    if framework in ("auto", "jax"):
        flags = env.get("XLA_FLAGS", "")
        if "--xla_dump_to" not in flags:
            env["XLA_FLAGS"] = " ".join(p for p in (flags, f"--xla_dump_to={xla_dump}", *XLA_DUMP_FLAGS) if p)
            env["ALLOCREPLAY_XLA_DUMP"] = xla_dump
    return env


def run_child(command: list[str], env: dict[str, str], log: str | None = None, cwd: str | None = None) -> int:
    """Runs the command; Ctrl-C reaches the child (same terminal process group), which then ends
    and dumps its capture, while this process waits for it; SIGTERM is passed on. ``log``: the
    child's stdout and stderr go to that file (``fit`` runs several at once); then, and off the
    main thread, this process's signal handlers are left alone (Ctrl-C still reaches the child
    through the process group)."""
    if log is not None or threading.current_thread() is not threading.main_thread():
        with open(log or os.devnull, "wb") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
            rc = proc.wait()
        return 128 - rc if rc < 0 else rc
    proc = subprocess.Popen(command, env=env, cwd=cwd)
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    old_term = signal.signal(signal.SIGTERM, forward)
    try:
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    # A child killed by a signal: the shell's convention, 128 + the signal.
    return 128 - rc if rc < 0 else rc


def no_gpu_env(env: dict[str, str], hook: str) -> dict[str, str]:
    """``--no-gpu``: the CUDA driver stand-ins built into the hook directory, preloaded."""
    from allocreplay.capture import _nogpu

    try:
        preload, libdir = _nogpu.build_stubs(os.path.join(hook, "nogpu-lib"))
    except RuntimeError as e:
        raise CaptureError(str(e)) from None
    env["LD_PRELOAD"] = preload + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["LD_LIBRARY_PATH"] = libdir + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def check_no_gpu(no_gpu: dict[str, Any] | None, framework: str) -> None:
    if no_gpu is None:
        return
    from allocreplay.capture import _nogpu

    if framework not in ("auto", "pytorch"):
        raise CaptureError(f"--no-gpu records PyTorch programs only, not --framework {framework}")
    if no_gpu.get("unknown", "error") not in ("error", "zero"):
        raise CaptureError(f"unknown --unknown-values {no_gpu.get('unknown')!r}: expected error or zero")
    try:
        _nogpu.parse_device(no_gpu.get("device"))
    except ValueError as e:
        raise CaptureError(str(e)) from None


def run(
    command: list[str],
    out: str,
    *,
    framework: str = "auto",
    max_entries: int = 1_000_000,
    stacks: str = "python",
    keep_raw: bool = False,
    no_gpu: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    log: str | None = None,
    cwd: str | None = None,
) -> Result:
    """``no_gpu``: run without a GPU (``{"device": "h200" or a size, "unknown": "error" or
    "zero"}``, see ``_nogpu``); None records the real GPU run. ``env``: variables set for the
    command on top of this process's; ``log``: a file for the command's stdout and stderr
    (default: this process's); ``cwd``: where the command runs."""
    if framework not in ("auto", *_hook.FRAMEWORKS):
        raise CaptureError(f"unknown framework {framework!r}: expected auto, pytorch, jax or tf")
    check_no_gpu(no_gpu, framework)
    if no_gpu is not None:
        framework = "pytorch"
    if stacks not in ("python", "all", "none"):
        raise CaptureError(f"unknown --stacks {stacks!r}: expected python, all or none")
    if max_entries <= 0:
        raise CaptureError(f"--max-entries must be positive, got {max_entries}")
    check_command(command, framework)
    check_output(out)
    stem = stem_of(out)
    if keep_raw:
        raw_dir = stem + ".raw"
        if os.path.isdir(raw_dir):
            if os.listdir(raw_dir) and not any(f.startswith("manifest-") for f in os.listdir(raw_dir)):
                raise CaptureError(f"{raw_dir}: exists and is not an earlier capture's raw directory; move it or choose another -o", path=raw_dir)
            shutil.rmtree(raw_dir)
        os.makedirs(raw_dir)
    else:
        raw_dir = tempfile.mkdtemp(prefix="allocreplay-capture-")
    hook = hook_dir()
    raw_dump = os.path.join(os.path.abspath(raw_dir), "xla_dump")
    config = _hook.Config(os.path.abspath(raw_dir), [framework], max_entries, stacks, no_gpu)
    result = Result(exit_code=0, raw_dir=raw_dir if keep_raw else None)
    try:
        child = child_env(hook, config, framework, raw_dump, env)
        if no_gpu is not None:
            child = no_gpu_env(child, hook)
        rc = run_child(command, child, log, cwd)
        result.exit_code = rc
        result.xla_dump = keep_xla_dump(raw_dump, stem + ".xla_dump")
        outcome = convert(_ranks_merged(raw_dir) if no_gpu is not None else raw_dir, out, keep_raw=keep_raw, xla_dump=result.xla_dump)
        result.outcome = outcome
        if not outcome.manifests:
            why = f"the recording hook never ran: {command[0]} started no Python, or its Python ignores PYTHONPATH (python -I / -E) or site (python -S)"
            if rc != 0:
                result.messages.append(f"error: {why}")
                return result
            raise CaptureError(why)
        if not outcome.traces:
            why = "; ".join(outcome.notes) or _nothing_seen(outcome, framework)
            if rc != 0:
                result.messages.append(f"error: no trace captured: {why}")
                return result
            raise CaptureError(f"no trace captured: {why}")
        return result
    finally:
        shutil.rmtree(hook, ignore_errors=True)
        if not keep_raw:
            shutil.rmtree(raw_dir, ignore_errors=True)


def _ranks_merged(raw_dir: str) -> str:
    """A ``--no-gpu`` command that started the ranks of a job itself (``torchrun``: each worker a
    rank, ``_nogpu_dist``): their captures merged into one (``RAW/merged``, one trace whose
    device R is rank R), else ``raw_dir`` as it is."""
    from allocreplay.capture import _merge

    if len({dev for _, _, dev, _ in _merge.rank_artifacts(raw_dir)}) < 2:
        return raw_dir
    merged = os.path.join(raw_dir, "merged")
    _merge.merge_raw([raw_dir], merged)
    return merged


def _nothing_seen(outcome: Outcome, framework: str) -> str:
    seen = {name for m in outcome.manifests for name, st in m.get("frameworks", {}).items() if st.get("imported")}
    if not seen:
        wanted = "torch, jax or tensorflow" if framework == "auto" else _hook.MODULE_OF[framework]
        return f"the command never imported {wanted}"
    return "no framework recorded any allocation"
