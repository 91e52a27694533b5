"""docs/bad-inputs.md through the Python API and the CLI: crafted and inconsistent inputs raise
the catalogued exception class with the catalogued message, `lenient=True` / `--lenient` skip
and count the events that break a trace's semantics, and requests no allocator can serve are
OOMs in every policy."""

from __future__ import annotations

import lzma
import pickle

import pyarrow as pa
import pytest
from click.testing import CliRunner

import allocreplay
from allocreplay import errors
from allocreplay.cli import cli
from conftest import TRACES

OOM_ARROW = TRACES / "torch_oom.arrow"
POLICIES = ["pytorch", "pytorch:expandable_segments:True", "bfc", "jax:allocator=platform", "cuda-async", "cuda-malloc", "managed"]


def snapshot(tmp_path, name, obj) -> str:
    p = tmp_path / name
    p.write_bytes(pickle.dumps(obj, protocol=4))
    return str(p)


def entry(size, addr=1 << 20):
    return {"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": 1, "frames": []}


def test_nesting_20000_deep_is_an_error_not_a_crash(tmp_path):
    # pickle.dumps itself recurses: the opcodes are written by hand (EMPTY_LIST ×N, APPEND ×N-1).
    def s(text: str) -> bytes:
        return b"\x8c" + bytes([len(text)]) + text.encode()

    data = b"\x80\x04}(" + s("device_traces") + b"]" + s("allocator_settings") + b"]" * 20_000 + b"a" * 19_999 + b"u."
    p = tmp_path / "deep.pickle"
    p.write_bytes(data)
    with pytest.raises(errors.TraceFormatError, match=r"deep\.pickle: 'allocator_settings': a value nests containers deeper than 64 levels"):
        allocreplay.load(p)


def test_billion_laughs_is_refused_not_expanded(tmp_path):
    laugh: list = [1, 1]
    for _ in range(30):
        laugh = [laugh] * 10
    p = snapshot(tmp_path, "laughs.pickle", {"device_traces": [[]], "allocator_settings": laugh})
    with pytest.raises(errors.TraceFormatError, match=r"expands to more than 4× the pickle's \d+ bytes \(shared memo references\)"):
        allocreplay.load(p)


@pytest.mark.parametrize(
    ("size", "shown"),
    [(-5, "-5"), (2.5, "the float 2.5"), ("512", 'the string "512"'), (2**70, "1180591620717411303424"), (2**56, "72057594037927936")],
)
def test_sizes_that_are_not_sizes_are_errors_naming_the_entry(tmp_path, size, shown):
    p = snapshot(tmp_path, "sizes.pickle", {"device_traces": [[entry(512), entry(size)]]})
    with pytest.raises(errors.TraceFormatError) as e:
        allocreplay.load(p)
    assert str(e.value) == f"{p}: device_traces[0][1]: 'size' is {shown}, not a size (an integer from 0 to 2^56 - 1)"


def test_truncated_frame_is_refused_as_cpython_does(tmp_path):
    data = pickle.dumps({"device_traces": [[entry(512)] * 3]}, protocol=4)
    assert data[2] == 0x95  # FRAME
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(data[:-30] + b".")
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(cut.read_bytes())
    with pytest.raises(errors.TraceFormatError, match=r"FRAME at byte 2 declares \d+ bytes but only \d+ follow"):
        allocreplay.load(cut)


def test_an_xz_bomb_stops_at_the_limit(tmp_path):
    c = lzma.LZMACompressor(preset=0)
    zeros = bytes(1 << 20)
    out = b"".join(c.compress(zeros) for _ in range(300)) + c.flush()
    p = tmp_path / "bomb.pickle.xz"
    p.write_bytes(out)
    with pytest.raises(errors.TraceFormatError, match=r"bomb\.pickle\.xz: xz data inflates beyond 268435456 bytes .* refused as a decompression bomb"):
        allocreplay.load(p)


def rewritten(tmp_path, name, column, edit) -> str:
    """torch_oom.arrow with one column changed, its schema (and metadata) kept."""
    t = pa.ipc.open_file(OOM_ARROW).read_all()
    values = t.column(column).to_pylist()
    edit(values)
    i = t.schema.get_field_index(column)
    t = t.set_column(i, t.schema.field(i), pa.array(values, type=t.schema.field(i).type))
    p = tmp_path / name
    with pa.ipc.new_file(p, t.schema) as w:
        w.write_table(t)
    return str(p)


def first_alloc() -> int:
    return pa.ipc.open_file(OOM_ARROW).read_all().column("action").to_pylist().index("alloc")


def test_undeclared_pool_is_an_error_and_lenient_skips_it(tmp_path):
    runner = CliRunner()
    k = first_alloc()
    p = rewritten(tmp_path, "pool.arrow", "pool", lambda v: v.__setitem__(k, 2**32 - 1))
    with pytest.raises(errors.TraceFormatError) as e:
        allocreplay.load(p)
    assert str(e.value).startswith(f"{p}: event {k} (alloc): pool 4294967295 is not declared in the trace metadata's pools; pass --lenient")
    t = allocreplay.load(p, lenient=True)
    assert t.info()["lenient_skipped"] >= 1
    assert allocreplay.load(OOM_ARROW).info()["lenient_skipped"] is None
    r = runner.invoke(cli, ["info", p])
    assert r.exit_code == 2 and "pool 4294967295 is not declared" in r.output and "Traceback" not in r.output
    r = runner.invoke(cli, ["info", p, "--lenient"])
    assert r.exit_code == 0, r.output
    assert "skipped (--lenient)" in r.output and "events skipped (--lenient)" in r.output


def test_double_free_names_the_event_and_lenient_replays_the_rest(tmp_path):
    t = pa.ipc.open_file(OOM_ARROW).read_all()
    actions = t.column("action").to_pylist()
    k = actions.index("free_completed")
    doubled = pa.concat_tables([t.slice(0, k + 1), t.slice(k, 1), t.slice(k + 1)])
    p = tmp_path / "double.arrow"
    with pa.ipc.new_file(p, t.schema) as w:
        w.write_table(doubled)
    with pytest.raises(errors.TraceFormatError, match=rf"event {k + 1} \(free_completed\): a double free: alloc_id \d+ was freed at event {k}"):
        allocreplay.load(p)
    lenient = allocreplay.load(p, lenient=True)
    assert lenient.info()["lenient_skipped"] == 1
    strict = allocreplay.load(OOM_ARROW)
    a = allocreplay.replay(lenient, "pytorch").summary.drop("replay_seconds")
    b = allocreplay.replay(strict, "pytorch").summary.drop("replay_seconds")
    assert a.equals(b)


def test_an_unservable_request_is_an_oom_in_every_policy(tmp_path):
    k = first_alloc()
    huge = 2**56 - 1  # the largest size a trace may hold; no device has it

    t = pa.ipc.open_file(OOM_ARROW).read_all()
    ident = t.column("alloc_id")[k].as_py()
    sizes = t.column("size").to_pylist()
    ids = t.column("alloc_id").to_pylist()
    p = rewritten(tmp_path, "huge.arrow", "size", lambda v: [v.__setitem__(i, huge) for i in range(len(v)) if ids[i] == ident])
    assert sizes[k] != huge
    trace = allocreplay.load(p)
    s = allocreplay.replay(trace, POLICIES, capacity="80GiB").summary
    rows = s.filter(s["first_oom_event"] == k)
    assert sorted(rows["policy"].to_list()) == sorted(POLICIES), s


def test_runtime_calls_are_bounded():
    dump = TRACES / "jax_train.xla_dump"
    with pytest.raises(errors.InvalidArgumentError, match=r"^10000000 calls of .* more than the limit of 10000000; ask for at most \d+ calls$"):
        allocreplay.xla_runtime(dump, calls=10**7)
