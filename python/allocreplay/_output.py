"""Every file a command writes, and the checks on the files it reads (docs/bad-inputs.md,
*Outputs* and *Reads that do not end*).

Outputs. :func:`target` resolves what the user named, before any work: ``-`` is stdout; a
symlink is followed (its target is written, the link kept); a regular file (or a new one) is
written atomically — into a temporary file beside it, flushed to disk (fsync), then renamed over
it with the old file's permissions, so a full disk, an error or a signal leaves the old file as
it was and concurrent writers never mix their bytes; a character device (``/dev/null``,
``/dev/full``) or a FIFO is written through, never replaced; anything else (a directory, a block
device, a socket) is refused, and so is a file that is also one of the command's inputs.
:func:`open_output` writes through a file object, :func:`output_path` hands a writer that takes
a path (the Rust core's) a temporary path. Every error names the user's path.

Temporary files are removed on SIGTERM too (:func:`install_signal_handlers`: SIGTERM is raised
as :class:`Terminated`, so ``finally`` blocks run; SIGINT is Python's ``KeyboardInterrupt``).

Inputs. :func:`check_input` refuses what cannot be sized before the Rust core opens it: a FIFO
(a read without a writer never ends), a character device (``/dev/zero`` never ends), a socket,
a block device — also inside a profile or dump directory. :func:`interruptible` runs a long call
of the core in a worker thread so that Ctrl-C stops the command at once.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from allocreplay.errors import InvalidArgumentError, TraceIOError, TraceNotFoundError

__all__ = [
    "Target",
    "Terminated",
    "check_input",
    "install_signal_handlers",
    "interruptible",
    "open_output",
    "output_path",
    "target",
]

# How long a write to a FIFO waits for a reader to open it before giving up (a blocking open
# would wait for ever).
FIFO_WAIT_S = 10.0
# Entries of an input directory looked at for FIFOs and devices (a profile or dump directory
# holds tens).
MAX_DIR_ENTRIES = 100_000

T = TypeVar("T")


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: raised in the main thread so that ``finally`` blocks remove
    temporary files; the CLI exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _io_error(path: str, e: OSError) -> TraceIOError:
    err = TraceIOError(f"{path}: {e.strerror or e}", path)
    err.errno = e.errno
    return err


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


# ---------------------------------------------------------------------------------------------
# Inputs


def check_input(path: str | os.PathLike[str] | None) -> None:
    """Refuses an input whose reading may never end or cannot be bounded: anything but a
    regular file or a directory (whose entries are checked the same way). A missing file is
    left to the loader to report."""
    if path is None:
        return
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError:
        return  # missing, a loop, no permission: the loader says so, with the path
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        _check_dir(p)
        return
    raise InvalidArgumentError(
        f"{p}: {_kind(st.st_mode)}, not a regular file: its size cannot be known and a read of it may never end; refused (save it to a file first)",
        p,
    )


def _check_dir(root: str) -> None:
    seen = 0
    for folder, dirs, files in os.walk(root):
        for name in files + dirs:
            seen += 1
            if seen > MAX_DIR_ENTRIES:
                return
            p = os.path.join(folder, name)
            try:
                st = os.stat(p)
            except OSError:
                continue  # a dangling link: the loader reports it if it reads it
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise InvalidArgumentError(
                    f"{root}: {p} is {_kind(st.st_mode)}, not a regular file: its size cannot be known and a read of it may never end; refused",
                    root,
                )


# ---------------------------------------------------------------------------------------------
# Outputs


@dataclass(frozen=True)
class Target:
    """A file to write. ``path``: as the user named it (every message uses it); ``real``: the
    file written (symlinks resolved); ``kind``: ``stdout``, ``file`` (replaced atomically) or
    ``stream`` (a character device or FIFO, written through)."""

    path: str
    real: str
    kind: str


def target(path: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str] | None] = ()) -> Target:
    """Resolves and checks the output ``path`` (``-``: stdout) before any work; ``inputs``: the
    command's input files, which it must not be."""
    p = os.fspath(path)
    if p == "-":
        return Target(p, p, "stdout")
    if p == "":
        raise InvalidArgumentError("an empty output path")
    real = os.path.realpath(p)
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise _io_error(p, e) from None
    if st is None:
        if os.path.islink(real) or os.path.lexists(real):
            # realpath stopped at a link it could not follow (a loop).
            raise _io_error(p, OSError(errno.ELOOP, os.strerror(errno.ELOOP)))
        kind = "file"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        kind = "stream"
    elif stat.S_ISDIR(st.st_mode):
        raise InvalidArgumentError(f"{p}: is a directory, not a file to write", p)
    else:
        raise InvalidArgumentError(f"{p}: {_kind(st.st_mode)}: only a regular file, a character device or a FIFO can be written; refused", p)
    if kind == "file":
        folder = os.path.dirname(real)
        if not os.path.isdir(folder):
            raise TraceNotFoundError(f"{p}: the folder {folder} does not exist", p)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise TraceIOError(f"{p}: the folder {folder} is not writable (permission denied)", p)
    if st is not None and stat.S_ISREG(st.st_mode):
        for inp in inputs:
            if inp is None:
                continue
            try:
                ist = os.stat(os.fspath(inp))
            except OSError:
                continue
            if (ist.st_dev, ist.st_ino) == (st.st_dev, st.st_ino):
                raise InvalidArgumentError(f"{p}: is also the input {os.fspath(inp)}: writing it would destroy the input; refused (write to another file)", p)
    return Target(p, real, kind)


# Temporary files and folders being written, removed by the signal handlers' exceptions (via
# ``finally``) and, as a last resort, by :func:`remove_pending`.
_pending: set[str] = set()
_pending_lock = threading.Lock()


def _track(p: str) -> None:
    with _pending_lock:
        _pending.add(p)


def _untrack(p: str) -> None:
    with _pending_lock:
        _pending.discard(p)


def remove_pending() -> None:
    """Removes every temporary file or folder still being written."""
    with _pending_lock:
        left = list(_pending)
        _pending.clear()
    for p in left:
        _remove(p)


def _remove(p: str) -> None:
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.remove(p)
    except OSError:
        pass


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mkstemp_beside(t: Target) -> tuple[int, str]:
    folder, name = os.path.split(t.real)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise _io_error(t.path, e) from None
    _track(tmp)
    return fd, tmp


def _commit(t: Target, tmp: str) -> None:
    """fsync ``tmp``, give it the permissions of the file it replaces (else the umask's), and
    rename it over ``t.real``."""
    try:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            mode = stat.S_IMODE(os.stat(t.real).st_mode)
        except OSError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, t.real)
    except OSError as e:
        raise _io_error(t.path, e) from None
    _untrack(tmp)
    try:  # the rename itself on disk (best effort: not every file system allows it)
        dfd = os.open(os.path.dirname(t.real), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _open_stream(t: Target) -> int:
    """Opens a character device or FIFO for writing; a FIFO without a reader is waited for
    ``FIFO_WAIT_S`` seconds, then refused (a blocking open would wait for ever)."""
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(t.real, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            if e.errno == errno.ENXIO and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            if e.errno == errno.ENXIO:
                raise TraceIOError(f"{t.path}: a FIFO that no process opened for reading in {FIFO_WAIT_S:g} s: nothing written", t.path) from None
            raise _io_error(t.path, e) from None
        os.set_blocking(fd, True)
        return fd


@contextmanager
def _mapped_errors(t: Target) -> Iterator[None]:
    """OSErrors of the writes, named with the user's path (not the temporary file's)."""
    try:
        yield
    except TraceIOError:
        raise
    except BrokenPipeError:
        if t.kind == "stdout":
            raise  # the reader went away: the CLI ends quietly
        raise _io_error(t.path, OSError(errno.EPIPE, os.strerror(errno.EPIPE))) from None
    except OSError as e:
        raise _io_error(t.path, e) from None


@contextmanager
def open_output(t: Target, mode: str = "wb") -> Iterator[IO[Any]]:
    """A file object writing ``t`` (``mode``: ``wb`` or ``w``, UTF-8 text). stdout is written
    once the block completes (a block that fails writes nothing); a file atomically."""
    text = "b" not in mode
    if t.kind == "stdout":
        buf = io.BytesIO()
        f: IO[Any] = io.TextIOWrapper(buf, encoding="utf-8", newline="", write_through=True) if text else buf
        with _mapped_errors(t):
            yield f
            f.flush()
            out = sys.stdout.buffer
            out.write(buf.getvalue())
            out.flush()
        return
    if t.kind == "stream":
        with _mapped_errors(t):
            fd = _open_stream(t)
            with open(fd, mode, encoding="utf-8" if text else None) as f:
                yield f
        return
    fd, tmp = _mkstemp_beside(t)
    try:
        with _mapped_errors(t), open(fd, mode, encoding="utf-8" if text else None) as f:
            yield f
        _commit(t, tmp)
    finally:
        if tmp in _pending:
            _untrack(tmp)
            _remove(tmp)


@contextmanager
def output_path(t: Target) -> Iterator[str]:
    """A path for a writer that takes one (the Rust core's): a temporary file beside a regular
    target, renamed over it once the block completes; for stdout, a device or a FIFO, a file in
    a temporary folder, copied to it."""
    if t.kind == "file":
        fd, tmp = _mkstemp_beside(t)
        os.close(fd)
        # The Rust core writes its own temporary file beside ``tmp`` and renames it over
        # ``tmp`` (``trace::ipc::tmp_beside``): removed too if the block ends early.
        folder, name = os.path.split(tmp)
        core_tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
        _track(core_tmp)
        try:
            with _mapped_errors(t):
                yield tmp
            _commit(t, tmp)
        finally:
            _untrack(core_tmp)
            _remove(core_tmp)
            if tmp in _pending:
                _untrack(tmp)
                _remove(tmp)
        return
    folder = tempfile.mkdtemp(prefix="allocreplay-out-")
    _track(folder)
    try:
        staged = os.path.join(folder, os.path.basename(t.real) or "out")
        with _mapped_errors(t):
            yield staged
        with open(staged, "rb") as src, open_output(t, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        _untrack(folder)
        _remove(folder)


def write_bytes(t: Target, writer: Callable[[IO[bytes]], object]) -> None:
    """Writes ``t`` with ``writer`` (given a binary file object)."""
    with open_output(t, "wb") as f:
        writer(f)


# ---------------------------------------------------------------------------------------------
# Signals


_installed = False


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (once: a second signal
    finds the default action again), so that temporary files are removed on the way out.
    Only from the main thread; a handler the program set itself is kept."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is None:
            continue
        try:
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _raise_terminated)
        except (OSError, ValueError):
            pass
    _installed = True


def interruptible(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` — a long call of the Rust core, which releases the GIL and cannot see
    signals — in a worker thread, the main thread waiting on it, so that Ctrl-C (or SIGTERM)
    reaches the main thread at once instead of when the call returns. The worker is abandoned
    (a daemon thread: the process may exit while it runs). Outside the main thread, or before
    :func:`install_signal_handlers` (a library call rather than the CLI), just ``fn(*args)``."""
    if not _installed or threading.current_thread() is not threading.main_thread():
        return fn(*args)
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed to the main thread
            box["error"] = e

    worker = threading.Thread(target=work, name="allocreplay-work", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in box:
        err = box["error"]
        raise err.with_traceback(err.__traceback__)
    return box["value"]  # type: ignore[no-any-return]


def work_still_running() -> bool:
    """Whether an abandoned worker of :func:`interruptible` still runs (the CLI then exits at
    once with ``os._exit``: the interpreter's shutdown must not wait for, or race, it)."""
    return any(t.name == "allocreplay-work" and t.is_alive() for t in threading.enumerate())
