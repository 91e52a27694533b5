"""The CLI's edges: files it writes (checked before any work, written atomically, `-` for
stdout), a reader that closes the pipe early, and a policy that cannot run on a trace."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest
from click.testing import CliRunner

import allocreplay
from allocreplay.cli import cli
from conftest import REPO, TRACES

TWO = TRACES / "two_streams__default.pickle.xz"
KERAS = REPO.parent / "shared" / "traces" / "tf" / "kerascnn__bfc.xplane.pb"


def run_bytes(*args: object) -> tuple[int, bytes, str]:
    """The CLI as a process, its stdout as bytes."""
    p = subprocess.run([sys.executable, "-m", "allocreplay", *map(str, args)], capture_output=True, timeout=300)
    return p.returncode, p.stdout, p.stderr.decode()


@pytest.mark.parametrize("option", ["-o", "--plot"])
def test_an_output_in_a_missing_folder_fails_first_in_one_line(run_cli, tmp_path, option):
    out = tmp_path / "missing" / ("r.arrow" if option == "-o" else "t.png")
    # The trace does not exist either: the output is checked first, before anything is read.
    r = run_cli("replay", tmp_path / "no_such_trace.pickle", option, out)
    assert r.code == 2, r.err
    (line,) = r.err.strip().splitlines()
    assert line.startswith(f"error: {out}: ") and "does not exist" in line and "no_such_trace" not in line
    assert "Traceback" not in r.err and not (tmp_path / "missing").exists()
    # A folder given as the file: the same (click.Path says so).
    r = run_cli("replay", TWO, option, tmp_path)
    assert r.code == 2 and r.err.count("\n") == 1 and "is a directory" in r.err


def test_outputs_are_written_whole_and_leave_no_temporary_file(run_cli, tmp_path):
    out = tmp_path / "r.arrow"
    out.write_bytes(b"an older result")
    # A run that fails (unknown policy) leaves the old file as it was.
    r = run_cli("replay", TWO, "-p", "nosuch", "-o", out)
    assert r.code == 2 and out.read_bytes() == b"an older result"
    r = run_cli("replay", TWO, "-o", out)
    assert r.code == 0, r.err
    with pa.ipc.open_file(out) as f:
        assert f.read_all().column("policy").to_pylist() == ["pytorch"]
    trace = tmp_path / "t.arrow"
    assert run_cli("import", TWO, "-o", trace).code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.arrow", "t.arrow"]


def test_a_write_that_fails_halfway_leaves_the_old_file(tmp_path, monkeypatch):
    import polars as pl

    out = tmp_path / "r.arrow"
    out.write_bytes(b"an older result")

    def half_then_fail(self, f, *args, **kwargs):
        f.write(b"ARROW1 and then the disk was full")
        raise OSError(28, "No space left on device", str(f.name))

    monkeypatch.setattr(pl.DataFrame, "write_ipc", half_then_fail)
    res = CliRunner().invoke(cli, ["replay", str(TWO), "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert "No space left on device" in res.stderr and res.stderr.count("\n") == 1
    assert out.read_bytes() == b"an older result"
    assert [p.name for p in tmp_path.iterdir()] == ["r.arrow"]


def test_replay_output_dash_writes_arrow_to_stdout_and_the_table_to_stderr(tmp_path):
    code, out, err = run_bytes("replay", TWO, "-p", "pytorch", "-p", "pytorch:expandable_segments:True", "-o", "-")
    assert code == 0, err
    table = pa.ipc.open_file(io.BytesIO(out)).read_all()
    assert table.column("policy").to_pylist() == ["pytorch", "pytorch:expandable_segments:True"]
    # traces/two_streams__default.json: reserved_bytes.all.peak 3,011,510,272.
    assert table.column("peak_reserved_bytes").to_pylist()[0] == 3011510272
    assert "peak reserved" in err and "2.80 GiB" in err
    # Through CliRunner too.
    res = CliRunner().invoke(cli, ["replay", str(TWO), "-o", "-"])
    assert res.exit_code == 0
    assert pa.ipc.open_file(io.BytesIO(res.stdout_bytes)).read_all().num_rows == 1


def test_import_output_dash_writes_the_trace_to_stdout(tmp_path):
    code, out, err = run_bytes("import", TWO, "-o", "-")
    assert code == 0, err
    path = tmp_path / "from_stdout.arrow"
    path.write_bytes(out)
    back = allocreplay.load(path)
    assert back.to_arrow().equals(allocreplay.load(TWO).to_arrow(), check_metadata=True)


def test_two_things_on_stdout_is_a_usage_error(run_cli, tmp_path):
    r = run_cli("replay", TWO, "-o", "-", "--json")
    assert r.code == 2 and r.err.count("\n") == 1 and "stdout" in r.err


@pytest.mark.parametrize("args", [["info", TWO], ["validate", TWO], ["replay", TWO, "--json"]])
def test_a_closed_pipe_ends_quietly_with_exit_0(args):
    # As `allocreplay info X | head -0`: the reader is gone before the first write.
    p = subprocess.Popen([sys.executable, "-m", "allocreplay", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0, err
    assert err == ""


def test_a_policy_that_cannot_run_says_why_in_its_row(run_cli, tmp_path):
    # Without its .json the TensorFlow capture does not record the device's memory, which the
    # jax and tf presets take their limit from; bfc (no limit) still runs.
    assert KERAS.is_file(), f"missing fixture {KERAS}: shared/ must sit beside the repository"
    bare = tmp_path / KERAS.name
    shutil.copy(KERAS, bare)
    r = run_cli("replay", bare, "-p", "bfc", "-p", "jax", "--json")
    assert r.code == 0, r.err
    rows = {row["policy"]: row for row in json.loads(r.out)}
    assert rows["bfc"]["error"] is None and rows["bfc"]["peak_reserved_bytes"] > 0
    assert "device's memory" in rows["jax"]["error"] and rows["jax"]["peak_reserved_bytes"] is None
    r = run_cli("replay", bare, "-p", "bfc", "-p", "jax")
    assert r.code == 0, r.err
    jax_line = next(line for line in r.out.splitlines() if line.startswith("jax "))
    assert "--capacity" in jax_line
    # The Python API gets the same rows; with --capacity jax runs.
    s = allocreplay.replay(bare, ["jax"], capacity="16GiB").summary
    assert s["error"].to_list() == [None]
    # A typo still stops everything.
    r = run_cli("replay", bare, "-p", "bfc", "-p", "jax:mem_fractoin=0.5")
    assert r.code == 2 and "mem_fractoin" in r.err


def test_a_folder_of_several_captures_is_not_called_one_per_host(run_cli, tmp_path):
    for name in ("a.xplane.pb", "b.xplane.pb"):
        shutil.copy(KERAS, tmp_path / name)
    r = run_cli("info", tmp_path)
    assert r.code == 2 and r.err.count("\n") == 1
    assert "2 profiler captures" in r.err and "a.xplane.pb" in r.err and "one per host" not in r.err
