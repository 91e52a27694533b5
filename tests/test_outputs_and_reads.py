"""Issue 28, classes 3 and 4 (docs/bad-inputs.md, *Outputs* and *Reads that do not end*).

Outputs: every writer replaces a regular file atomically, writes through to ``-``, a character
device or a FIFO (never replacing the node), follows a symlink (its target replaced, the link
kept), refuses to overwrite one of its inputs, removes its temporary files on SIGINT / SIGTERM,
and names the user's path in its errors; ``-o -`` into a closed pipe ends with exit code 0.

Reads: a FIFO, a character device (``/dev/zero``), a socket is refused before it is read; a
long replay stops within a second of Ctrl-C, from the CLI and in a library call; a file truncated
while it is streamed is an error, not a SIGBUS. (The two ``needs_rust`` tests name what needed the
Rust core: ``trace::MappedTrace`` reads by ``pread``, and the bindings' ``interrupt::detach``.)
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import allocreplay
from allocreplay import _core, _output, errors
from conftest import TRACES, run_clirunner, run_subprocess

TRAIN = TRACES / "torch_train.arrow"
TWO = TRACES / "two_streams__default.pickle.xz"

# Every command that writes a file with -o, and how to check what it wrote.
WRITERS = {
    "import": lambda src, out: ["import", src, "-o", out],
    "replay": lambda src, out: ["replay", src, "-q", "-o", out],
    "export-snapshot": lambda src, out: ["export-snapshot", src, "-q", "-o", out],
    "export-perfetto": lambda src, out: ["export-perfetto", src, "-q", "--points", "50", "-o", out],
    "synth": lambda src, out: ["synth", src, "--tile", "2", "-o", out],
}


def _valid(command: str, data: bytes) -> bool:
    if command in ("import", "synth", "replay"):
        return pa.ipc.open_file(io.BytesIO(data)).read_all().num_rows > 0
    if command == "export-perfetto":
        return len(json.loads(data)["traceEvents"]) > 0
    return data[:1] == b"\x80"  # a pickle (protocol 4)


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _no_temporary_files(folder: Path) -> None:
    left = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert left == [], left


def _device(tmp_path: Path, name: str, real: str) -> str:
    """A character device like ``real`` (/dev/full, /dev/null). As root, a node made in
    ``tmp_path`` (so that a regression replaces that node, not the machine's /dev); otherwise the
    real one (which a non-root process cannot replace anyway)."""
    if os.geteuid() != 0:
        return real
    node = tmp_path / name
    os.mknod(node, stat.S_IFCHR | 0o666, os.stat(real).st_rdev)
    return str(node)


# ---------------------------------------------------------------------------------------------
# Outputs


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_an_output_that_is_the_input_is_refused_and_the_input_kept(command, tmp_path):
    src = tmp_path / "in.arrow"
    src.write_bytes(TRAIN.read_bytes())
    before = src.read_bytes()
    os.link(src, tmp_path / "hardlink.arrow")
    for out in (src, tmp_path / "hardlink.arrow", tmp_path / "." / "in.arrow"):
        r = run_clirunner(*WRITERS[command](src, out))
        assert r.code == 2, (command, r.err)
        line = _one_line_error(r.err)
        assert line.startswith(f"error: {out}: ") and "input" in line
        assert src.read_bytes() == before
    _no_temporary_files(tmp_path)


def test_the_metadata_input_is_not_overwritten_either(tmp_path):
    meta = tmp_path / "two.json"
    meta.write_text((TRACES / "two_streams__default.json").read_text())
    r = run_clirunner("import", TWO, "--meta", meta, "-o", meta)
    assert r.code == 2 and "input" in _one_line_error(r.err)
    assert meta.read_text() == (TRACES / "two_streams__default.json").read_text()
    # The sidecar NAME.json a raw capture is read with is an input too.
    src = tmp_path / "two.pickle.xz"
    src.write_bytes(TWO.read_bytes())
    r = run_clirunner("import", src, "-o", meta)
    assert r.code == 2 and "input" in _one_line_error(r.err)


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_symlink_output_keeps_the_link_and_replaces_its_target(command, tmp_path):
    real = tmp_path / "real.out"
    real.write_bytes(b"an older result")
    real.chmod(0o640)
    link = tmp_path / "link.out"
    link.symlink_to("real.out")
    r = run_clirunner(*WRITERS[command](TRAIN, link))
    assert r.code == 0, r.err
    assert link.is_symlink() and os.readlink(link) == "real.out"
    assert _valid(command, real.read_bytes())
    assert stat.S_IMODE(real.stat().st_mode) == 0o640  # the replaced file's permissions kept
    # A dangling link: its target is created.
    dangling = tmp_path / "dangling.out"
    dangling.symlink_to("new.out")
    assert run_clirunner(*WRITERS[command](TRAIN, dangling)).code == 0
    assert dangling.is_symlink() and _valid(command, (tmp_path / "new.out").read_bytes())
    _no_temporary_files(tmp_path)


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_character_device_is_written_through_never_replaced(command, tmp_path):
    null = _device(tmp_path, "null", "/dev/null")
    r = run_subprocess(*WRITERS[command](TRAIN, null))
    assert r.code == 0, r.err
    assert stat.S_ISCHR(os.stat(null).st_mode)
    full = _device(tmp_path, "full", "/dev/full")
    r = run_subprocess(*WRITERS[command](TRAIN, full))
    assert r.code == 2
    line = _one_line_error(r.err)
    assert line.startswith(f"error: {full}: ") and "No space left on device" in line
    assert stat.S_ISCHR(os.stat(full).st_mode) and os.stat(full).st_rdev == os.stat("/dev/full").st_rdev
    _no_temporary_files(tmp_path)


def test_trace_save_follows_links_and_writes_devices_through(tmp_path):
    t = allocreplay.load(TRAIN)
    full = _device(tmp_path, "full", "/dev/full")
    with pytest.raises(errors.TraceIOError, match=r"No space left on device") as e:
        t.save(full)
    assert str(e.value).startswith(f"{full}: ")
    assert stat.S_ISCHR(os.stat(full).st_mode)
    link = tmp_path / "link.arrow"
    link.symlink_to("real.arrow")
    t.save(link)
    assert link.is_symlink() and allocreplay.load(tmp_path / "real.arrow").to_arrow().equals(t.to_arrow())
    _no_temporary_files(tmp_path)


def test_a_fifo_output_is_written_through(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = bytearray()

    def read() -> None:
        with open(fifo, "rb") as f:
            got.extend(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    r = run_subprocess("import", TRAIN, "-o", fifo)
    reader.join(30)
    assert r.code == 0, r.err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    back = tmp_path / "back.arrow"
    back.write_bytes(bytes(got))
    assert allocreplay.load(back).to_arrow().equals(allocreplay.load(TRAIN).to_arrow())


def test_a_fifo_output_nobody_reads_is_an_error_not_a_hang(tmp_path, monkeypatch):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(_output, "FIFO_WAIT_S", 0.3)
    started = time.monotonic()
    r = run_clirunner("replay", TRAIN, "-q", "-o", fifo)
    assert r.code == 2 and time.monotonic() - started < 20
    line = _one_line_error(r.err)
    assert line.startswith(f"error: {fifo}: ") and "reading" in line


@pytest.mark.parametrize("kind", ["directory", "socket", "block device"])
def test_outputs_that_are_neither_files_devices_nor_fifos_are_refused(kind, tmp_path):
    out = tmp_path / "out"
    if kind == "directory":
        out.mkdir()
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(out))
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a block device needs root")
        os.mknod(out, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    before = os.stat(out)
    r = run_clirunner("export-perfetto", TRAIN, "-q", "-o", out)
    assert r.code == 2
    assert _one_line_error(r.err).startswith(f"error: {out}: ")
    after = os.stat(out)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


@pytest.mark.parametrize("command", ["export-snapshot", "export-perfetto"])
def test_a_write_that_fails_halfway_leaves_the_old_file_and_no_temporary(command, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.write_bytes(b"an older result")
    module = "pickle" if command == "export-snapshot" else "json"

    def half_then_fail(obj, f, *args, **kwargs):
        f.write(b"half" if "b" in getattr(f, "mode", "wb") else "half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(f"allocreplay.export.{module}.dump", half_then_fail)
    r = run_clirunner(*WRITERS[command](TRAIN, out))
    assert r.code == 2
    line = _one_line_error(r.err)
    assert line == f"error: {out}: No space left on device"
    assert out.read_bytes() == b"an older result"
    _no_temporary_files(tmp_path)


def test_concurrent_writers_never_mix_their_bytes(tmp_path):
    out = tmp_path / "memory.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "allocreplay", "export-perfetto", str(TRAIN), "-q", "--points", str(points), "-o", str(out)],
            stderr=subprocess.PIPE,
        )
        for points in (0, 10, 500, 3)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0
    assert json.loads(out.read_text())["traceEvents"]
    _no_temporary_files(tmp_path)


@pytest.mark.parametrize(
    "args",
    [
        ["import", TRAIN, "-o", "-"],
        ["replay", TRAIN, "-q", "-o", "-"],
        ["synth", TRAIN, "--tile", "50", "-o", "-"],
        ["export-perfetto", TRAIN, "-q", "--points", "0", "-o", "-"],
        ["export-snapshot", TRAIN, "-q", "-o", "-"],
    ],
)
def test_output_dash_piped_into_head_exits_0(args):
    cmd = " ".join(f"'{a}'" for a in [sys.executable, "-m", "allocreplay", *map(str, args)])
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} | head -c 10 >/dev/null"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "error" not in p.stderr


SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    from allocreplay import _output
    import allocreplay
    _output.install_signal_handlers()
    t = _output.target(sys.argv[1])
    if sys.argv[2] == "file":
        with _output.open_output(t) as f:
            f.write(b"partial"); f.flush()
            print("writing", flush=True)
            time.sleep(60)
    else:
        with _output.output_path(t) as tmp:
            allocreplay.load(sys.argv[3]).save(tmp)
            print("writing", flush=True)
            time.sleep(60)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("how", ["file", "path"])
def test_a_signal_while_writing_removes_the_temporary_file(sig, how, tmp_path):
    out = tmp_path / "out.arrow"
    out.write_bytes(b"an older result")
    p = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(out), how, str(TRAIN)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline() == "writing\n"
    assert any(n.name.endswith(".tmp") for n in tmp_path.iterdir())
    p.send_signal(sig)
    p.wait(timeout=30)
    assert out.read_bytes() == b"an older result"
    _no_temporary_files(tmp_path)


# ---------------------------------------------------------------------------------------------
# Reads that do not end


def _inputs(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.arrow"
    zero.symlink_to("/dev/zero")
    sock = tmp_path / "trace.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    profile = tmp_path / "logdir" / "plugins" / "profile" / "run"
    profile.mkdir(parents=True)
    os.mkfifo(profile / "host.xplane.pb")
    return {"fifo": fifo, "/dev/zero": Path("/dev/zero"), "link to /dev/zero": zero, "socket": sock, "profile dir with a FIFO": tmp_path / "logdir"}


def test_inputs_that_cannot_be_sized_are_refused_not_read(tmp_path):
    for name, path in _inputs(tmp_path).items():
        for args in (["info", path], ["replay", path, "-q"], ["import", path, "-o", tmp_path / "x.arrow"], ["replay", TRAIN, "-q", "--meta", path]):
            started = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "allocreplay", *map(str, args)], capture_output=True, text=True, timeout=60)
            assert p.returncode == 2, (name, args, p.stderr)
            line = _one_line_error(p.stderr)
            refused = "not a regular file" in line or ("--meta" in args and path.is_dir() and "is a directory" in line)
            assert refused and str(path) in line, line
            assert time.monotonic() - started < 30
        with pytest.raises(errors.InvalidArgumentError, match="not a regular file"):
            allocreplay.load(path)
    assert not (tmp_path / "x.arrow").exists()


def test_a_dump_dir_with_a_fifo_is_refused_by_plan(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    os.mkfifo(dump / "module_0001.jit_f.sm_9.0_gpu_after_optimizations-buffer-assignment.txt")
    r = run_subprocess("plan", dump)
    assert r.code == 2 and "not a regular file" in _one_line_error(r.err)


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch_train tiled 1,000 times: 2.97 M events, whose offline plan takes seconds."""
    path = tmp_path_factory.mktemp("long") / "long.arrow"
    _core.tile_file(allocreplay.load(TRAIN)._inner, 1000, str(path))
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_cli_stops_within_a_second_of_a_signal_during_a_long_replay(long_trace, tmp_path, sig):
    out = tmp_path / "r.arrow"
    args = ["replay", long_trace, "-q", "-p", "offline", "-p", "offline:alignment=4096", "-p", "ideal", "-o", out]
    p = subprocess.Popen([sys.executable, "-m", "allocreplay", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert p.poll() is None, "the replay ended before the signal: make the trace longer"
    sent = time.monotonic()
    p.send_signal(sig)
    _out, err = p.communicate(timeout=60)
    assert time.monotonic() - sent < 1.0, "the signal was not seen for a second"
    assert p.returncode == (2 if sig == signal.SIGINT else 128 + sig)
    _one_line_error(err)
    assert not out.exists()
    _no_temporary_files(tmp_path)


def test_needs_rust_a_file_truncated_during_a_streamed_replay_is_an_error_not_sigbus(long_trace, tmp_path):
    """``_core.replay_file`` (and ``info_file``, and the load of a raw capture of 32 MiB or
    more) read the file through a memory map until issue 28: a file truncated by another process
    meanwhile faulted with SIGBUS and killed the process. The core now reads each record batch
    with ``pread`` into a buffer of its own (``trace::MappedTrace``; the loads read the file),
    and a read beyond the new end is ``F: the file changed (shrank) while it was read ...``."""
    path = tmp_path / "shrinks.arrow"
    path.write_bytes(long_trace.read_bytes())
    script = textwrap.dedent(
        """
        import os, sys, threading, time
        from allocreplay import _core
        path = sys.argv[1]
        counter = _core.Progress()
        box = {}
        def work():
            try:
                box["r"] = _core.replay_file(path, ["pytorch"], None, 100, False, counter)
            except Exception as e:
                box["e"] = e
        th = threading.Thread(target=work)
        th.start()
        while counter.done == 0 and th.is_alive():
            time.sleep(0.001)
        os.truncate(path, os.path.getsize(path) // 2)
        th.join()
        e = box.get("e")
        print(type(e).__name__ if e else "result", "the file changed (shrank) while it was read" in str(e))
        """
    )
    p = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"killed by signal {-p.returncode}" if p.returncode < 0 else p.stderr
    # Truncated once the replay has started (a batch of 1,048,576 rows of 2.97 M): the batches
    # after it are beyond the new end.
    assert p.stdout.strip() == "TraceFormatError True", p.stdout + p.stderr


def test_needs_rust_ctrl_c_stops_a_library_replay_within_a_second(tmp_path):
    """``allocreplay.replay(trace, "offline")`` called from Python (not the CLI, whose worker
    thread hides the problem): the core runs with the GIL released and, until issue 28, never
    looked at signals, so KeyboardInterrupt came only when the replay ended. The bindings now run
    the core's work on a thread of their own (``interrupt::detach``) and look at Python's signals
    every 50 ms; on KeyboardInterrupt they cancel the call's token (``cancel::Cancel``), which
    the core's long loops (the offline planner, the engine, the loaders) poll."""
    script = textwrap.dedent(
        """
        import sys, time
        import allocreplay
        from allocreplay import _core
        big = allocreplay.Trace(_core.tile(allocreplay.load(sys.argv[1])._inner, 2000))
        print("go", flush=True)
        try:
            allocreplay.replay(big, ["offline"], placements=False)
            print("done", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script, str(TRAIN)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline() == "go\n"
    time.sleep(0.5)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    rest, _err = p.communicate(timeout=120)
    assert rest.strip() == "interrupted"
    assert time.monotonic() - sent < 1.0
