"""Results cross from Rust as typed objects and Arrow tables, never JSON text. Each typed class
has exactly the properties its stub declares, each of the declared type, and ``to_dict()`` (what
``--json`` prints) has the same keys: a field renamed in Rust fails here, not in a user's
script. The JSON keys users' scripts read are listed literally: extend them, never rename."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import allocreplay
from allocreplay import _core
from conftest import TRACES, run_subprocess

STUB = Path(allocreplay.__file__).parent / "_core.pyi"
SHARED = TRACES.parent.parent / "shared" / "traces"
KERAS = SHARED / "tf" / "kerascnn__bfc.xplane.pb"

# `info --json` and `validate --json` keys as they were when the JSON strings were replaced
# (users' scripts read them).
INFO_KEYS = {
    "format_version",
    "source",
    "source_version",
    "devices",
    "events",
    "allocs",
    "frees",
    "free_requests",
    "segment_events",
    "ooms",
    "empty_caches",
    "lenient_skipped",
    "streams",
    "pools",
    "seed_allocs",
    "seed_segments",
    "peak_live_requested_bytes",
    "recorded_peak_reserved_bytes",
    "recorded_peak_reserved_bytes_per_device",
    "duration_s",
    "assumed",
}
PYTORCH_VALIDATE_KEYS = {
    "device",
    "policy",
    "capacity",
    "device_limit",
    "capacity_source",
    "allocs",
    "address_match",
    "first_address_mismatch_event",
    "segment_events_match",
    "segment_addresses_match",
    "segment_events_recorded",
    "segment_events_replayed",
    "first_segment_mismatch",
    "peak_reserved_recorded",
    "peak_reserved_replayed",
    "peak_allocated_recorded",
    "peak_allocated_replayed",
    "num_alloc_retries_recorded",
    "num_alloc_retries_replayed",
    "num_ooms_recorded",
    "num_ooms_replayed",
    "no_addresses",
    "settings_assumed",
    "seeded",
    "assumed",
    "address_notes",
    "ok",
}
BFC_VALIDATE_KEYS = {
    "device",
    "allocator",
    "policy",
    "settings_source",
    "events",
    "allocs",
    "frees",
    "chunk_match",
    "in_use_match",
    "address_match",
    "chunk_mismatches",
    "in_use_mismatches",
    "first_chunk_mismatch_event",
    "first_in_use_mismatch_event",
    "peak_in_use_recorded",
    "peak_in_use_replayed",
    "peak_before_window",
    "pool_bytes_recorded",
    "pool_bytes_replayed",
    "peak_pool_bytes_recorded",
    "peak_pool_bytes_replayed",
    "regions_replayed",
    "ooms_replayed",
    "seeded",
    "ok",
}


def stub_properties(cls: str) -> dict[str, str]:
    """The properties the stub declares for ``cls``, with their annotations as written."""
    tree = ast.parse(STUB.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {
        f.name: ast.unparse(f.returns)
        for f in node.body
        if isinstance(f, ast.FunctionDef) and f.returns is not None and any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)
    }


def conforms(value: Any, annotation: str) -> bool:
    """``value`` has the type the annotation names (bool is not an int here)."""
    for alt in (a.strip() for a in annotation.split("|")):
        if alt == "None" and value is None:
            return True
        if alt == "int" and type(value) is int:
            return True
        if alt in ("float", "str", "bool") and type(value).__name__ == alt:
            return True
        if alt == "list[int]" and isinstance(value, list) and all(type(x) is int for x in value):
            return True
        if alt == "list[str]" and isinstance(value, list) and all(type(x) is str for x in value):
            return True
        if alt == "dict[int, int]" and isinstance(value, dict) and all(type(k) is int and type(v) is int for k, v in value.items()):
            return True
    return False


def objects() -> dict[str, Any]:
    two = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    assert KERAS.is_file(), f"missing fixture {KERAS}: shared/ must sit beside the repository"
    return {
        "TraceInfo": two.info(),
        "ValidationReport": allocreplay.validate_reports(two)[0],
        "BfcValidationReport": allocreplay.validate_reports(KERAS)[0],
    }


@pytest.mark.parametrize(
    "cls,keys",
    [("TraceInfo", INFO_KEYS), ("ValidationReport", PYTORCH_VALIDATE_KEYS), ("BfcValidationReport", BFC_VALIDATE_KEYS)],
)
def test_typed_fields_exist_with_their_declared_types(cls, keys):
    obj = objects()[cls]
    assert type(obj) is getattr(_core, cls)
    declared = stub_properties(cls)
    # The stub, the object and the JSON keys name the same fields.
    assert set(declared) == keys
    assert set(obj.to_dict()) == keys
    # --json prints the fields in the struct's order, which the stub follows.
    assert list(obj.to_dict()) == list(declared)
    actual = {n for n in dir(obj) if not n.startswith("_") and n != "to_dict"}
    # Scripts written when these were dicts still index them by key.
    assert all(obj[k] is getattr(obj, k) or obj[k] == getattr(obj, k) for k in keys)
    with pytest.raises(KeyError):
        obj["no_such_field"]
    assert actual == keys
    for name, annotation in declared.items():
        value = getattr(obj, name)
        assert conforms(value, annotation), f"{cls}.{name} = {value!r} is not {annotation}"
        if not isinstance(value, dict):  # per-device maps: JSON keys are strings
            assert obj.to_dict()[name] == value
    # A readable repr naming every field.
    assert repr(obj).startswith(f"{cls}(") and all(f"{k}=" in repr(obj) for k in keys)


def test_typed_objects_are_frozen():
    info = objects()["TraceInfo"]
    with pytest.raises(AttributeError):
        info.events = 3  # type: ignore[misc]


def test_frames_and_stacks_tables_hold_the_files_frame_table():
    path = TRACES / "torch_train.arrow"
    t = allocreplay.load(path)
    # The frame table as the file stores it (traces/README.md: `allocreplay.frames`), read
    # with pyarrow alone.
    with pa.ipc.open_file(path) as f:
        stored = json.loads(f.schema.metadata[b"allocreplay.frames"])
    assert t.frames.columns == ["frame_id", "filename", "line", "name"]
    assert t.frames.height == len(stored["filename"]) > 0
    assert t.frames["frame_id"].to_list() == list(range(t.frames.height))
    assert t.frames["filename"].to_list() == stored["filename"]
    assert t.frames["line"].to_list() == stored["line"]
    assert t.frames["name"].to_list() == stored["name"]
    assert t.stacks.columns == ["stack_id", "depth", "frame_id"]
    rebuilt: list[list[int]] = [[] for _ in stored["stacks"]]
    for s, d, f in t.stacks.iter_rows():
        assert d == len(rebuilt[s])  # depths count up from the innermost frame
        rebuilt[s].append(f)
    assert rebuilt == stored["stacks"]
    # Every event's stack is a stack of the table.
    ids = t.events["stack_id"].drop_nulls()
    assert ids.len() > 0 and ids.max() < len(stored["stacks"])


def test_plan_and_offline_are_tables_with_the_structs_columns():
    plans = allocreplay.plan(TRACES / "jax_train.xla_dump")
    assert plans.columns == ["program", "recorded_temp_bytes", "planned_temp_bytes", "lower_bound_bytes", "argument_bytes", "output_bytes"]
    assert plans.height > 0 and all(str(d) == "Int64" for d in plans.dtypes[1:])
    bounds = allocreplay.offline(allocreplay.load(TRACES / "two_streams__default.pickle.xz"))
    assert bounds.columns == ["device", "alignment", "buffers", "ideal_peak_bytes", "offline_peak_bytes", "strategy", "plan_seconds"]
    row = bounds.row(0, named=True)
    # No allocator can hold less than the live bytes; the run recorded 596 allocations
    # (info: allocs), every one planned.
    assert row["ideal_peak_bytes"] <= row["offline_peak_bytes"] and row["buffers"] == 596


def test_metadata_is_a_plain_dict_like_the_stored_json():
    path = TRACES / "torch_ddp.dev1.arrow"
    with pa.ipc.open_file(path) as f:
        stored = json.loads(f.schema.metadata[b"allocreplay.metadata"])
    assert allocreplay.load(path).metadata == stored


def test_validate_cli_json_keys_are_stable():
    r = run_subprocess("validate", TRACES / "two_streams__default.pickle.xz", "--json")
    assert r.code == 0, r.err
    # One device: the flat object, and itself again under devices (as before).
    report = json.loads(r.out)
    assert set(report) == PYTORCH_VALIDATE_KEYS | {"devices"}
    assert report["devices"] == [{k: v for k, v in report.items() if k != "devices"}]
    r = run_subprocess("info", TRACES / "two_streams__default.pickle.xz", "--json")
    assert set(json.loads(r.out)) == INFO_KEYS
