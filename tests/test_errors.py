"""Bad input gives one line `error: <file>: <what is wrong>` on stderr, exit code 2, no
traceback — through a real process and through click's CliRunner — and a typed exception from
the Python API."""

from __future__ import annotations

import collections
import errno
import lzma
import pickle
import re
from fractions import Fraction

import pyarrow as pa
import pytest

import allocreplay
from allocreplay import errors
from conftest import TRACES

GOOD = TRACES / "two_streams__default.pickle.xz"


class Opaque:
    pass


def make(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def bad_inputs(tmp_path):
    raw = lzma.decompress(GOOD.read_bytes())
    xz = GOOD.read_bytes()
    table = pa.table({"x": [1, 2, 3]})
    plain_arrow = tmp_path / "plain.arrow"
    with pa.ipc.new_file(plain_arrow, table.schema) as w:
        w.write_table(table)
    return {
        # name: (path, expected exception, words the message must contain)
        "truncated_pickle": (make(tmp_path, "truncated.pickle", raw[: len(raw) // 2]), errors.TraceFormatError, "truncated"),
        "truncated_xz": (make(tmp_path, "truncated.pickle.xz", xz[: len(xz) // 2]), errors.TraceFormatError, "xz"),
        "corrupt_xz": (make(tmp_path, "corrupt.pickle.xz", xz[:200] + bytes(b ^ 0x5A for b in xz[200:400]) + xz[400:]), errors.TraceFormatError, "corrupt"),
        "corrupt_pickle": (make(tmp_path, "corrupt.pickle", raw[:100] + b"\xff\xfe\xfd" + raw[103:]), errors.TraceFormatError, "pickle"),
        "not_a_snapshot_dict": (make(tmp_path, "dict.pickle", pickle.dumps({"hello": [1, 2]})), errors.TraceFormatError, "device_traces"),
        "not_a_snapshot_list": (make(tmp_path, "list.pickle", pickle.dumps([1, 2, 3])), errors.TraceFormatError, "not a PyTorch memory snapshot"),
        "ordered_dict": (make(tmp_path, "odict.pickle", pickle.dumps(collections.OrderedDict(a=1))), errors.UnsafePickleError, "collections.OrderedDict"),
        "class_instance": (make(tmp_path, "obj.pickle", pickle.dumps(Opaque())), errors.UnsafePickleError, "Opaque"),
        "fraction_reduce": (make(tmp_path, "frac.pickle", pickle.dumps(Fraction(1, 3), protocol=2)), errors.UnsafePickleError, "fractions.Fraction"),
        "protocol0_global": (make(tmp_path, "p0.pickle", pickle.dumps(collections.OrderedDict(a=1), protocol=0)), errors.UnsafePickleError, "OrderedDict"),
        "text_file": (make(tmp_path, "notes.txt", b"just some text\n"), errors.UnknownFormatError, "unrecognised"),
        "empty_file": (make(tmp_path, "empty.pickle", b""), errors.TraceFormatError, "file is empty"),
        "plain_arrow": (plain_arrow, errors.SchemaError, "not an allocreplay trace"),
        "missing_file": (tmp_path / "does_not_exist.pickle", errors.TraceIOError, "No such file"),
        "directory": (tmp_path, errors.UnknownFormatError, "directory"),
    }


CASES = [
    "truncated_pickle",
    "truncated_xz",
    "corrupt_xz",
    "corrupt_pickle",
    "not_a_snapshot_dict",
    "not_a_snapshot_list",
    "ordered_dict",
    "class_instance",
    "fraction_reduce",
    "protocol0_global",
    "text_file",
    "empty_file",
    "plain_arrow",
    "missing_file",
    "directory",
]


def assert_one_line_error(r, path, words):
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and "Traceback" not in r.out
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    assert words.lower() in lines[0].lower(), lines[0]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2(tmp_path, run_cli, case):
    path, _, words = bad_inputs(tmp_path)[case]
    for cmd in (["info", path], ["import", path, "-o", tmp_path / "out.arrow"], ["replay", path]):
        assert_one_line_error(run_cli(*cmd), path, words)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_raises_typed_exception(tmp_path, case):
    path, exc, words = bad_inputs(tmp_path)[case]
    with pytest.raises(exc) as info:
        allocreplay.load(path)
    assert isinstance(info.value, allocreplay.AllocReplayError)
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: ")
    assert words.lower() in str(info.value).lower()


def test_unsafe_pickle_is_never_executed(tmp_path):
    # A pickle whose REDUCE would create a file: refused before anything runs.
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    p = make(tmp_path, "evil.pickle", pickle.dumps(Evil()))
    with pytest.raises(errors.UnsafePickleError, match=r"builtins\.open|io\.open"):
        allocreplay.load(p)
    assert not marker.exists()


def test_unknown_policy_lists_valid_names(run_cli):
    r = run_cli("replay", GOOD, "--policy", "nosuch")
    assert r.code == 2 and "Traceback" not in r.err
    (line,) = r.err.strip().splitlines()
    assert line.startswith("error: ") and "nosuch" in line
    for name in allocreplay.POLICY_NAMES:
        assert name in line
    with pytest.raises(errors.PolicySpecError, match=r"known policies: .*pytorch"):
        allocreplay.replay(allocreplay.load(GOOD), ["nosuch:opt"])


def test_usage_errors_are_one_line(run_cli, tmp_path):
    for args in (["info"], ["import", GOOD], ["frobnicate"], ["info", GOOD, "--bogus"], ["replay", GOOD, "--capacity"]):
        r = run_cli(*args)
        assert r.code == 2, (args, r.err)
        assert len(r.err.strip().splitlines()) == 1 and r.err.startswith("error: "), (args, r.err)
        assert "Traceback" not in r.err


def test_unwritable_output_names_the_file(run_cli, tmp_path):
    out = tmp_path / "no" / "such" / "dir" / "t.arrow"
    r = run_cli("import", GOOD, "-o", out)
    assert_one_line_error(r, out, "does not exist")
    assert not (tmp_path / "no").exists()


def test_exception_hierarchy():
    names = [
        "TraceIOError",
        "TraceFormatError",
        "UnsafePickleError",
        "UnknownFormatError",
        "SchemaError",
        "PolicySpecError",
        "InvalidArgumentError",
        "ReplayError",
        "CaptureError",
        "TraceNotFoundError",
        "InternalError",
    ]
    for n in names:
        cls = getattr(errors, n)
        assert issubclass(cls, errors.AllocReplayError) and cls is getattr(allocreplay, n)
        assert cls.__module__ == "allocreplay.errors"
    assert issubclass(errors.AllocReplayError, Exception)
    assert set(errors.__all__) == {"AllocReplayError", *names}
    assert re.match(r"\d+\.\d+\.\d+", allocreplay.__version__)


def test_progress_shows_only_on_a_terminal_and_is_erased(monkeypatch):
    import io
    import time

    from allocreplay import cli as cli_mod

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(cli_mod.sys, "stderr", tty)
    with cli_mod._Progress("loading big.pickle"):
        time.sleep(1.5)
    out = tty.getvalue()
    assert "\rloading big.pickle ... " in out and out.endswith("\r\033[K")
    # Quick work shows nothing; a pipe (not a terminal) never does.
    tty = Tty()
    monkeypatch.setattr(cli_mod.sys, "stderr", tty)
    with cli_mod._Progress("loading small.pickle"):
        pass
    assert tty.getvalue() == ""
    pipe = io.StringIO()
    monkeypatch.setattr(cli_mod.sys, "stderr", pipe)
    with cli_mod._Progress("loading big.pickle"):
        time.sleep(1.3)
    assert pipe.getvalue() == ""


def test_errors_are_the_builtins_a_caller_catches(tmp_path):
    missing = tmp_path / "missing.pickle"
    # A missing file is an OSError, and a FileNotFoundError, with its errno and path.
    with pytest.raises(FileNotFoundError) as info:
        allocreplay.load(missing)
    assert isinstance(info.value, errors.TraceIOError) and isinstance(info.value, errors.TraceNotFoundError)
    assert info.value.errno == errno.ENOENT and info.value.path == str(missing)
    assert str(info.value).startswith(f"{missing}: ")
    try:
        allocreplay.load(missing)
    except OSError as e:
        assert e.path == str(missing)  # type: ignore[attr-defined]
    # Writing under a regular file: an OSError that is not "not found".
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OSError) as info:
        allocreplay.load(GOOD).save(blocker / "t.arrow")
    assert isinstance(info.value, errors.TraceIOError) and not isinstance(info.value, FileNotFoundError)
    assert info.value.path == str(blocker / "t.arrow") and info.value.errno == errno.ENOTDIR
    # Bad files and bad arguments are ValueErrors.
    for case in ("truncated_pickle", "class_instance", "text_file", "plain_arrow"):
        path, exc, _ = bad_inputs(tmp_path)[case]
        with pytest.raises(ValueError) as info:
            allocreplay.load(path)
        assert type(info.value) is exc and info.value.path == str(path)
    with pytest.raises(ValueError) as info:
        allocreplay.replay(allocreplay.load(GOOD), ["nosuch"])
    assert type(info.value) is errors.PolicySpecError and info.value.path is None
    with pytest.raises(ValueError) as info:
        allocreplay.parse_capacity("12XB")
    assert type(info.value) is errors.InvalidArgumentError


def test_an_argument_that_does_not_fit_the_file_names_it_in_path(tmp_path):
    # An allocator the capture does not hold (shared/traces/README.md: jaxlm has GPU_0_bfc and
    # xla_gpu_host_bfc): a ValueError whose .path is the capture.
    jax = TRACES.parent.parent / "shared" / "traces" / "jax" / "jaxlm__default.xplane.pb.xz"
    assert jax.is_file(), f"missing fixture {jax}: shared/ must sit beside the repository"
    with pytest.raises(ValueError) as info:
        allocreplay.load(jax, allocator="GPU_7_bfc")
    assert type(info.value) is errors.InvalidArgumentError and info.value.path == str(jax)
    assert str(info.value).startswith(f"{jax}: ") and "xla_gpu_host_bfc" in str(info.value)
    with pytest.raises(errors.InvalidArgumentError) as info:
        allocreplay.xla_runtime(TRACES / "jax_train.xla_dump", program="no_such_program")
    assert info.value.path == str(TRACES / "jax_train.xla_dump")
