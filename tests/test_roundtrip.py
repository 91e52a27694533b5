"""import -> save -> load gives back identical tables; the Python API's views of a trace."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pytest

import allocreplay
from conftest import TRACES, load_snapshot, shared

CASES = [
    TRACES / "two_streams__default.pickle.xz",
    TRACES / "two_streams__expandable.pickle.xz",
    TRACES / "compiled_mlp__default.pickle.xz",
]


@pytest.mark.parametrize("src", [*CASES, "ring20k"], ids=lambda p: str(p).split("/")[-1].split(".")[0])
def test_import_save_load_round_trips(tmp_path, src):
    if src == "ring20k":
        src = shared("gpt2_train__default_ring20k.pickle.xz")
    t = allocreplay.load(src)
    out = tmp_path / "t.arrow"
    t.save(out)
    back = allocreplay.load(out)
    a, b = t.to_arrow(), back.to_arrow()
    assert a.num_rows == len(t) > 0
    assert a.equals(b, check_metadata=True)
    assert t.events.equals(back.events)
    assert back.metadata == t.metadata
    assert back.frames.equals(t.frames) and back.stacks.equals(t.stacks)
    # Any Arrow reader opens the file, and sees the same table.
    with pa.ipc.open_file(out) as f:
        assert f.read_all().equals(a, check_metadata=True)
    assert pl.read_ipc(out).shape == t.events.shape


def test_cli_import_writes_a_loadable_trace(tmp_path, run_cli):
    out = tmp_path / "two.arrow"
    r = run_cli("import", TRACES / "two_streams__default.pickle.xz", "-o", out)
    assert r.code == 0, r.err
    t = allocreplay.load(out)
    assert t.to_arrow().equals(allocreplay.load(TRACES / "two_streams__default.pickle.xz").to_arrow(), check_metadata=True)
    # info reads the .arrow the same as the raw source.
    a = json.loads(run_cli("info", out, "--json").out)
    b = json.loads(run_cli("info", TRACES / "two_streams__default.pickle.xz", "--json").out)
    assert a == b


def test_events_columns_and_action_codes():
    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    ev = t.events
    assert ev.columns[:10] == ["action", "alloc_id", "size", "addr", "stream", "device", "pool", "time_ns", "seed", "stack_id"]
    snap = load_snapshot(TRACES / "two_streams__default.pickle.xz")
    entries = snap["device_traces"][0]
    # One row per history entry, in order, with the recorded action, size and address.
    assert ev["action"].cast(pl.String).to_list() == [e["action"] for e in entries]
    assert ev["size"].to_list() == [e["size"] for e in entries]
    assert ev["addr"].to_list() == [e["addr"] for e in entries]
    assert ev["time_ns"].to_list() == [e["time_us"] * 1000 for e in entries]
    assert ev["stream"].n_unique() == 2
    # alloc ids pair every free_completed with its alloc.
    allocs = ev.filter(pl.col("action") == "alloc")
    frees = ev.filter(pl.col("action") == "free_completed")
    assert allocs["alloc_id"].n_unique() == allocs.height
    assert set(frees["alloc_id"].to_list()) <= set(allocs["alloc_id"].to_list())
    # The Arrow dictionary is the action codes of traces/README.md.
    action = t.to_arrow().column("action").combine_chunks()
    assert action.dictionary.to_pylist() == [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
        "empty_cache",
    ]


def test_metadata_and_schema_metadata():
    t = allocreplay.load(TRACES / "compiled_mlp__default.pickle.xz")
    md = t.metadata
    assert md["format_version"] == allocreplay.FORMAT_VERSION == 1
    assert md["source"] == "pytorch" and md["source_version"] == "2.11.0+cu130"
    # compiled_mlp__default.json device_total_bytes; CUDA graphs use private pool (0, 1).
    assert md["devices"] == [{"index": 0, "name": None, "total_memory": 150_109_880_320, "memory_cap": None}]
    assert {"index": 1, "id": [0, 1], "kind": "private"} in md["pools"]
    schema_md = t.to_arrow().schema.metadata
    assert schema_md[b"allocreplay.format_version"] == b"1"
    assert json.loads(schema_md[b"allocreplay.metadata"]) == md


def test_meta_option_supplies_total_memory(tmp_path):
    # Without a sidecar .json the device memory is unknown; --meta supplies it.
    src = tmp_path / "x.pickle.xz"
    src.write_bytes((TRACES / "two_streams__default.pickle.xz").read_bytes())
    assert allocreplay.load(src).metadata["devices"][0]["total_memory"] is None
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"device_total_bytes": 80 * 2**30, "cap_bytes": 40 * 2**30}))
    d = allocreplay.load(src, meta=meta).metadata["devices"][0]
    assert (d["total_memory"], d["memory_cap"]) == (80 * 2**30, 40 * 2**30)


def test_save_keeps_one_device_and_applies_metadata_overrides(tmp_path):
    # The writer capture uses for each device of a multi-device run (capture/_convert.py).
    src = allocreplay.load(TRACES / "torch_ddp.dev1.arrow")
    out = tmp_path / "d.arrow"
    src.save(out, device=1, metadata={"source_path": None, "extra": {"note": "kept"}})
    back = allocreplay.load(out)
    assert back.info().devices == [1] and len(back) == len(src)
    assert back.metadata["source_path"] is None and back.metadata["extra"]["note"] == "kept"
    # The other extra keys are merged, not replaced.
    assert set(src.metadata["extra"]) <= set(back.metadata["extra"])
    # A device the trace does not hold, or a bad override: ValueError, and the file is kept.
    with pytest.raises(ValueError, match="no events on device 0"):
        src.save(out, device=0)
    assert allocreplay.load(out).info().devices == [1]
    with pytest.raises(ValueError, match="metadata override"):
        src.save(out, metadata={"devices": "not a list"})
