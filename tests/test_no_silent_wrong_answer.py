"""Issue 28, classes 1, 2, 7 and 8 (docs/bad-inputs.md): every way into a Trace is checked by
the one checker; numbers at the edges of their types are errors with a stated range, never a
clamp or an ``OverflowError``; an ``oom`` entry of petabytes loads and stays an OOM; files of
the wrong kind are named for what they are."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
import subprocess

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import allocreplay
from allocreplay import errors
from conftest import TRACES, run_clirunner, run_subprocess

OOM_ARROW = TRACES / "torch_oom.arrow"
SMALL_PICKLE = TRACES / "two_streams__default.pickle.xz"
POLICIES = [p.name for p in allocreplay.policies()]
# The policies that replay requests (not the offline bounds `ideal` / `offline`, which plan
# the allocations and replay no recorded `oom` entry, whatever its size).
ONLINE = [p.name for p in allocreplay.policies() if p.kind != "offline-bound"]


def one_line_exit_2(r) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.err
    assert "Traceback" not in r.err
    return lines[0]


def entry(action: str, addr: int, size: int, t: int, **kw) -> dict:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": [], **kw}


# --- Class 1: inputs that skip the checks -------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ({"action": ["alloc", "free_completed", "free_completed"], "alloc_id": [0, 0, 0], "size": [8, 8, 8]}, r"a double free"),
        ({"action": ["free_completed", "alloc"], "alloc_id": [0, 0], "size": [8, 8]}, r"a free of alloc_id 0 before its alloc"),
        ({"action": ["alloc", "free_completed"], "alloc_id": [0, 0], "size": [8, 16]}, r"frees 16 bytes of alloc_id 0, allocated with 8 bytes"),
        ({"action": ["alloc", "free_completed"], "alloc_id": [0, None], "size": [8, 8]}, r"a free of a null alloc_id"),
        ({"action": ["alloc", "alloc"], "alloc_id": [0, 1], "size": [8, 8], "time_ns": [10, 5]}, r"time goes backwards: 5 ns is before 10 ns"),
    ],
)
def test_from_events_is_checked_as_load_checks_a_file(tmp_path, rows, message):
    # Before: each of these replayed to numbers; saved and reloaded, the same trace was refused.
    df = pl.DataFrame(rows)
    with pytest.raises(errors.TraceFormatError, match=rf"^<Trace.from_events>: event \d+ \(\w+\): {message}"):
        allocreplay.Trace.from_events(df)
    # lenient=True skips the events, as load(..., lenient=True) does.
    t = allocreplay.Trace.from_events(df, lenient=True)
    assert t.info()["lenient_skipped"] >= 1


def test_from_events_refuses_floats_that_are_not_whole_numbers():
    with pytest.raises(errors.InvalidArgumentError, match=r"column 'size' row 1 is 2.5, not a whole number"):
        allocreplay.Trace.from_events(pl.DataFrame({"action": ["alloc", "alloc"], "alloc_id": [0, 1], "size": [8.0, 2.5]}))
    with pytest.raises(errors.InvalidArgumentError, match=r"column 'time_ns' row 0 is nan"):
        allocreplay.Trace.from_events(pl.DataFrame({"action": ["alloc"], "alloc_id": [0], "size": [8], "time_ns": [float("nan")]}))
    with pytest.raises(errors.InvalidArgumentError, match=r"metadata devices\[\]\.index is 0.5, not an integer"):
        allocreplay.Trace.from_events(pl.DataFrame({"action": ["alloc"], "alloc_id": [0], "size": [8]}), {"devices": [{"index": 0.5}]})
    # A device or pool entry without its index names the entry (it was a KeyError traceback).
    for md in ({"devices": [{"total_memory": 1 << 30}]}, {"pools": [{"kind": "private"}]}, {"devices": [7]}):
        with pytest.raises(errors.InvalidArgumentError, match=r"metadata (devices|pools)\[\] entry .* has no 'index'"):
            allocreplay.Trace.from_events(pl.DataFrame({"action": ["alloc"], "alloc_id": [0], "size": [8]}), md)
    # Whole floats are their value.
    t = allocreplay.Trace.from_events(pl.DataFrame({"action": ["alloc"], "alloc_id": [0], "size": [4096.0]}))
    assert t.events["size"].to_list() == [4096]


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "free_requested", "free_completed"]),
        st.one_of(st.none(), st.integers(0, 5)),
        st.sampled_from([8, 16, 512]),
        st.one_of(st.none(), st.integers(0, 100)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=EVENTS)
def test_every_constructor_of_a_trace_rejects_what_load_rejects(tmp_path, events):
    # The rule of class 1: `Trace.from_events`, `Trace.from_arrow` and `load` of the same
    # events agree: all refuse them, or all accept them and replay the same.
    n = len(events)
    df = pl.DataFrame(
        {
            "action": [e[0] for e in events],
            "alloc_id": [None if e[1] is None else min(e[1], n - 1) for e in events],
            "size": [e[2] for e in events],
            "time_ns": [e[3] for e in events],
        },
        schema={"action": pl.String, "alloc_id": pl.UInt64, "size": pl.UInt64, "time_ns": pl.Int64},
    )
    from allocreplay._api._build import to_table

    p = tmp_path / "events.arrow"
    table = to_table(df)
    with pa.ipc.new_file(p, table.schema) as w:
        w.write_table(table)
    try:
        t = allocreplay.Trace.from_events(df)
    except errors.TraceFormatError as e:
        why = str(e).split(": ", 1)[1]
        assert str(e).startswith("<Trace.from_events>: event ")
        # The same events as an .arrow file: load refuses them with the same reason, and so
        # does from_arrow.
        with pytest.raises(errors.TraceFormatError) as loaded:
            allocreplay.load(p)
        assert str(loaded.value) == f"{p}: {why}"
        with pytest.raises(errors.TraceFormatError) as arrowed:
            allocreplay.Trace.from_arrow(table)
        assert str(arrowed.value).endswith(why)
        return
    assert len(allocreplay.load(p)) == len(t)
    p = tmp_path / "events.arrow"
    t.save(p)
    back = allocreplay.load(p)
    again = allocreplay.Trace.from_arrow(t.to_arrow())
    want = allocreplay.replay(t, "pytorch").summary.drop("replay_seconds")
    assert allocreplay.replay(back, "pytorch").summary.drop("replay_seconds").equals(want)
    assert allocreplay.replay(again, "pytorch").summary.drop("replay_seconds").equals(want)


def test_arrow_nulls_in_required_columns_are_errors_not_the_bytes_under_them(tmp_path):
    t = pa.ipc.open_file(OOM_ARROW).read_all()
    for name in ("size", "stream", "device", "pool", "seed"):
        col = t.column(name).to_pylist()
        col[2] = None
        fields = [f.with_nullable(True) for f in t.schema]
        bad = t.set_column(t.schema.get_field_index(name), name, pa.array(col, t.schema.field(name).type)).cast(pa.schema(fields, metadata=t.schema.metadata))
        p = tmp_path / f"null_{name}.arrow"
        with pa.ipc.new_file(p, bad.schema) as w:
            w.write_table(bad)
        with pytest.raises(errors.TraceFormatError, match=rf"column {name} is null at row 2 \(1 nulls\): a required column may hold no nulls"):
            allocreplay.load(p, lenient=True)
        line = one_line_exit_2(run_clirunner("replay", p))
        assert f"column {name} is null at row 2" in line


def snapshot_file(tmp_path, name: str, traces: list, segments: list | None = None) -> object:
    p = tmp_path / name
    snap = {"device_traces": traces, "allocator_settings": {}}
    if segments is not None:
        snap["segments"] = segments
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return p


def test_snapshot_entries_missing_a_required_key_are_errors(tmp_path):
    for missing, action in (("addr", "alloc"), ("size", "alloc"), ("addr", "segment_alloc"), ("size", "free_completed")):
        e = entry(action, 0x1000, 512, 1)
        del e[missing]
        p = snapshot_file(tmp_path, f"no_{missing}_{action}.pickle", [[e]])
        with pytest.raises(errors.TraceFormatError, match=rf"device_traces\[0\]\[0\] \({action}\) has no '{missing}': every {action} entry records it$"):
            allocreplay.load(p)
    # An oom entry records `device_free`, not `addr`, as upstream writes it: loads.
    p = snapshot_file(tmp_path, "oom.pickle", [[{"action": "oom", "device_free": 5, "size": 512, "stream": 0, "time_us": 1}]])
    assert len(allocreplay.load(p)) == 1


def test_segments_that_contradict_the_history_are_an_error_and_lenient_loads(tmp_path):
    seg = {
        "device": 0,
        "address": 0x10000,
        "total_size": 2 << 20,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "blocks": [{"address": 0x10000, "size": 2 << 20, "requested_size": 1 << 20, "state": "inactive"}],
    }
    history = [entry("segment_alloc", 0x10000, 2 << 20, 1), entry("alloc", 0x10000, 1 << 20, 2)]
    # The history allocates a block it never frees; the segments hold none there.
    p = snapshot_file(tmp_path, "contradiction.pickle", [history], [seg])
    with pytest.raises(
        errors.TraceFormatError,
        match=r"device_traces\[0\]\[1\] \(alloc of 1048576 bytes at 0x10000\): the history allocates this block and never frees it, but the final segments hold no block there: the snapshot's segments contradict its history; pass --lenient",
    ):
        allocreplay.load(p)
    assert len(allocreplay.load(p, lenient=True)) >= 2
    one_line_exit_2(run_clirunner("validate", p))
    # A segment the history frees last but the segments still list.
    history = [entry("segment_free", 0x10000, 2 << 20, 3)]
    p = snapshot_file(tmp_path, "contradiction2.pickle", [history], [seg])
    with pytest.raises(errors.TraceFormatError, match=r"the history frees this segment last, but the final segments list it"):
        allocreplay.load(p)
    # Agreeing segments load.
    seg["blocks"][0]["state"] = "active_allocated"
    p = snapshot_file(tmp_path, "agrees.pickle", [[entry("segment_alloc", 0x10000, 2 << 20, 1), entry("alloc", 0x10000, 1 << 20, 2)]], [seg])
    assert len(allocreplay.load(p)) == 2


def test_meta_values_are_checked_not_truncated_or_dropped(tmp_path):
    p = snapshot_file(tmp_path, "run.pickle", [[entry("alloc", 0x1000, 512, 1)]])
    for value, ok in ((80e9, True), (1.5e9 + 0.5, False), (-1, False), ("80GiB", False)):
        meta = tmp_path / "m.json"
        meta.write_text(json.dumps({"device_total_bytes": 150_000_000_000, "cap_bytes": value}))
        if ok:
            t = allocreplay.load(p, meta=meta)
            assert t.metadata["devices"][0]["memory_cap"] == int(value)
        else:
            with pytest.raises(errors.TraceFormatError, match=r"m.json: metadata 'cap_bytes' is .*, not a number of bytes \(an integer from 0 to 2\^64 - 1\)$"):
                allocreplay.load(p, meta=meta)
            assert "metadata 'cap_bytes'" in one_line_exit_2(run_clirunner("import", p, "--meta", meta, "-o", tmp_path / "o.arrow"))


def test_times_beyond_64_bits_of_nanoseconds_are_errors_not_saturated(tmp_path):
    # Before: both saturated to 2^63 - 1 ns and the backwards step went unnoticed.
    big = 2**62
    p = snapshot_file(tmp_path, "times.pickle", [[entry("alloc", 0x1000, 512, big + 5), entry("alloc", 0x2000, 512, big + 1)]])
    with pytest.raises(
        errors.TraceFormatError, match=rf"device_traces\[0\]\[0\]: 'time_us' is {big + 5}: microseconds beyond what 64 bits of nanoseconds hold"
    ):
        allocreplay.load(p)


# --- Class 2: numbers that overflow ----------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        (
            "offline:alignment=9223372036854775808",
            errors.PolicySpecError,
            r"offline: alignment must be 0 \(the trace's default\) or a power of two from 1 to 2\^30",
        ),
        ("ideal:alignment=9223372036854775808", errors.PolicySpecError, r"ideal: alignment must be 0"),
        ("ideal:alignment=3", errors.PolicySpecError, r"ideal: alignment must be 0"),
    ],
)
def test_option_values_outside_their_range_are_spec_errors(spec, error, message):
    t = allocreplay.load(OOM_ARROW)
    with pytest.raises(error, match=message):
        allocreplay.replay(t, spec)


@pytest.mark.parametrize("capacity", [2**56 + 1, 2**64 - 1, "65537TiB", str(2**70)])
def test_capacities_beyond_what_the_policies_model_are_refused(capacity):
    # Before: 2^64 - 1 replayed (clamped by each policy its own way), and jax:mem_fraction=64
    # under it panicked (a multiplication overflow).
    t = allocreplay.load(OOM_ARROW)
    with pytest.raises(errors.InvalidArgumentError, match=r"2\^56 bytes \(64 PiB\), the largest device memory the policies model"):
        allocreplay.replay(t, "jax:mem_fraction=64", capacity=capacity)
    assert "64 PiB" in one_line_exit_2(run_clirunner("replay", OOM_ARROW, "--capacity", str(capacity)))
    # The largest one replays under the bounds; an allocator that cannot model it is a row
    # naming the largest device memory it models (docs/bad-inputs.md, capacities per policy).
    s = allocreplay.replay(t, ["ideal", "jax:mem_fraction=64", "pytorch"], capacity=2**56).summary
    why = dict(zip(s["policy"].to_list(), s["error"].to_list(), strict=True))
    assert why["ideal"] is None
    for name in ("jax", "pytorch"):
        assert why[next(p for p in why if p.startswith(name))].startswith(f"{name} models device memories up to 16492640862208 bytes (15.00 TiB")


def test_counts_beyond_their_type_are_errors_not_overflow_tracebacks(tmp_path):
    t = allocreplay.load(OOM_ARROW)
    for bad in (2**64, -1, 2.5, True):
        with pytest.raises(errors.InvalidArgumentError, match=r"timeline_points must be an integer from 0 to 2\^32 - 1"):
            allocreplay.replay(t, "pytorch", timeline_points=bad)
    huge = str(2**70)
    for args in (
        ("synth", OOM_ARROW, "--tile", huge, "-o", tmp_path / "x.arrow"),
        ("tune", OOM_ARROW, "--budget", huge),
        ("tune", OOM_ARROW, "--threads", huge),
        ("tune", OOM_ARROW, "--top", huge),
        ("plan", TRACES / "jax_train.xla_dump", "--runtime", tmp_path / "r.arrow", "--calls", huge),
        ("export-perfetto", OOM_ARROW, "-o", tmp_path / "m.json", "--points", huge),
    ):
        r = run_clirunner(*args)
        assert r.code == 2 and "Traceback" not in r.err and "OverflowError" not in r.err, (args, r.err)
        assert "is not in the range" in r.err or "range" in r.err, r.err


# --- Class 7: what upstream treats as an OOM ---------------------------------------------------


def test_an_oom_entry_of_petabytes_loads_and_is_an_oom_in_every_policy(tmp_path):
    # PyTorch's test_out_of_memory asks for 1024 * 1024 * 1024 * 8000000000 bytes; the snapshot
    # records it as an `oom` entry (size_t written as int64: 2^63 and more come back negative).
    asked = 1024 * 1024 * 1024 * 8000000000
    history = [
        entry("segment_alloc", 0x10000, 2 << 20, 1),
        entry("alloc", 0x10000, 4096, 2),
        {"action": "oom", "device_free": 10 << 30, "size": asked, "stream": 0, "time_us": 3, "frames": []},
        {"action": "oom", "device_free": 10 << 30, "size": -(2**62), "stream": 0, "time_us": 4, "frames": []},
        entry("free_requested", 0x10000, 4096, 5),
        entry("free_completed", 0x10000, 4096, 5),
    ]
    p = snapshot_file(tmp_path, "petabytes.pickle", [history])
    t = allocreplay.load(p)
    ooms = t.events.with_row_index().filter(pl.col("action") == "oom")
    assert ooms["size"].to_list() == [2**56 - 1, 2**56 - 1]
    assert [x["size"] for x in t.metadata["extra"]["oom_requests_beyond_max_size"]] == [asked, 2**64 - 2**62]
    s = allocreplay.replay(t, ONLINE, capacity="80GiB").summary
    first = ooms["index"][0]
    assert sorted(s.filter((pl.col("first_oom_event") == first) & (pl.col("num_ooms") == 2))["policy"].to_list()) == sorted(ONLINE), s
    # Saved and reloaded, the same.
    t.save(tmp_path / "petabytes.arrow")
    back = allocreplay.replay(allocreplay.load(tmp_path / "petabytes.arrow"), ONLINE, capacity="80GiB").summary
    assert back.drop("replay_seconds").equals(s.drop("replay_seconds"))


# --- Class 8: messages -----------------------------------------------------------------------


def test_a_protocol_0_pickle_says_what_it_is_and_how_to_resave_it(tmp_path):
    p = tmp_path / "p0.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry("alloc", 512, 100, 1)]]}, protocol=0))
    with pytest.raises(errors.TraceFormatError, match=r"a protocol-0/1 \(text\) pickle: .*re-save it with pickle.dump\(.*protocol=4\)"):
        allocreplay.load(p)
    assert "protocol-0/1" in one_line_exit_2(run_clirunner("info", p))


def test_a_compressed_arrow_file_loads_and_streaming_says_what_it_is(tmp_path):
    gz = tmp_path / "t.arrow.gz"
    with open(OOM_ARROW, "rb") as a, gzip.open(gz, "wb") as b:
        shutil.copyfileobj(a, b)
    want = allocreplay.replay(OOM_ARROW, "pytorch").summary.drop("replay_seconds")
    assert allocreplay.replay(gz, "pytorch").summary.drop("replay_seconds").equals(want)
    # Where the file is read as Arrow directly (a streamed replay): named for what it is.
    from allocreplay import _core

    with pytest.raises(errors.TraceFormatError, match=r"a gzip-compressed file, not an Arrow IPC file: .*gunzip -k FILE"):
        _core.replay_file(str(gz), ["pytorch"])


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd command")
def test_a_multi_frame_zstd_snapshot_loads(tmp_path):
    raw = tmp_path / "s.pickle"
    with __import__("lzma").open(SMALL_PICKLE) as f:
        raw.write_bytes(f.read())
    half = raw.read_bytes()
    (tmp_path / "a").write_bytes(half[: len(half) // 2])
    (tmp_path / "b").write_bytes(half[len(half) // 2 :])
    for part in ("a", "b"):
        subprocess.run(["zstd", "-q", "-f", str(tmp_path / part)], check=True)
    z = tmp_path / "s.pickle.zst"
    z.write_bytes((tmp_path / "a.zst").read_bytes() + (tmp_path / "b.zst").read_bytes())
    assert len(allocreplay.load(z)) == len(allocreplay.load(SMALL_PICKLE))


def test_a_format_version_with_a_space_says_it_is_not_a_version_number(tmp_path):
    t = pa.ipc.open_file(OOM_ARROW).read_all()
    md = dict(t.schema.metadata)
    md[b"allocreplay.format_version"] = md[b"allocreplay.format_version"] + b" "
    p = tmp_path / "v.arrow"
    with pa.ipc.new_file(p, t.schema.with_metadata(md)) as w:
        w.write_table(t.cast(t.schema.with_metadata(md)))
    with pytest.raises(errors.SchemaError, match=r"allocreplay.format_version in its schema metadata is \"\d+ \", not a version number"):
        allocreplay.load(p)
    r = run_subprocess("info", p)
    assert "not a version number" in one_line_exit_2(r)


def test_save_with_replaced_metadata_never_writes_a_trace_load_refuses(tmp_path):
    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    out = tmp_path / "patched.arrow"
    out.write_bytes(b"the previous file")
    # A capacity above what any policy models (2^56 bytes) is refused on load: so is the save.
    with pytest.raises(errors.InvalidArgumentError, match=r"patched.arrow: not written: the metadata given to save\(\) makes a trace load refuses"):
        t.save(out, metadata={"devices": [{"index": 0, "total_memory": 1 << 60}]})
    assert out.read_bytes() == b"the previous file"
    assert [p.name for p in tmp_path.iterdir()] == ["patched.arrow"]
    # Valid replaced metadata is written, and loads with it.
    t.save(out, metadata={"devices": [{"index": 0, "memory_cap": 1 << 31}]})
    assert allocreplay.load(out).metadata["devices"][0]["memory_cap"] == 1 << 31
