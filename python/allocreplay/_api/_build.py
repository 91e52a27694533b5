"""``Trace.from_events`` / ``Trace.from_arrow``: a trace built from a table of events, for
synthetic or edited traces. The table is completed to the canonical schema (traces/README.md)
here and checked in Rust exactly as an ``.arrow`` file is (``trace::trace_from_batches``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from allocreplay import _core
from allocreplay.errors import InvalidArgumentError

if TYPE_CHECKING:
    import pyarrow as pa

# traces/README.md, "Actions": codes are the positions in this list.
ACTIONS = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"]
_REQUESTS = ("alloc", "free_requested", "free_completed")
_CORE: dict[str, Any] = {
    "alloc_id": pl.UInt64,
    "size": pl.UInt64,
    "addr": pl.UInt64,
    "stream": pl.Int64,
    "device": pl.Int32,
    "pool": pl.UInt32,
    "time_ns": pl.Int64,
    "seed": pl.Boolean,
    "stack_id": pl.UInt32,
}
_DEFAULTS: dict[str, Any] = {"stream": 0, "device": 0, "pool": 0, "seed": False}
# `schema::optional_field` in rust/allocreplay-core/src/trace/schema.rs.
_OPTIONAL: dict[str, Any] = {
    **dict.fromkeys(("chunk_bytes", "in_use_bytes", "peak_in_use_bytes", "reserved_bytes"), pl.UInt64),
    "fragmentation": pl.Float64,
    **dict.fromkeys(("op", "shape", "data_type", "region_type", "allocator", "program", "compile_context", "user_metadata"), pl.String),
    **dict.fromkeys(("step", "thread_id"), pl.Int64),
}
ORIGIN = "<Trace.from_events>"


def _fail(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{ORIGIN}: {message}")


def _action_codes(col: pl.Series) -> pl.Series:
    if col.dtype.is_integer():
        bad = col.filter((col < 0) | (col >= len(ACTIONS)) | col.is_null())
        if len(bad):
            raise _fail(f"action code {bad[0]} is not one of 0..{len(ACTIONS) - 1}")
        codes: pl.Series = col.cast(pl.UInt8)
        return codes
    names = col.cast(pl.String)
    unknown = names.filter(~names.is_in(ACTIONS) | names.is_null()).unique()
    if len(unknown):
        raise _fail(f"unknown action {unknown[0]!r}; actions: {', '.join(ACTIONS)}")
    mapped: pl.Series = names.replace_strict(ACTIONS, list(range(len(ACTIONS))), return_dtype=pl.UInt8)
    return mapped


def _complete(df: pl.DataFrame) -> pl.DataFrame:
    for required in ("action", "size"):
        if required not in df.columns:
            raise _fail(f"missing column {required!r} (columns: {', '.join(df.columns)})")
    extra = [c for c in df.columns if c != "action" and c not in _CORE and c not in _OPTIONAL]
    if extra:
        raise _fail(f"column {extra[0]!r} is not a trace column (traces/README.md lists them)")
    codes = _action_codes(df["action"])
    df = df.with_columns(codes.alias("action"))
    for name, default in _DEFAULTS.items():
        if name not in df.columns:
            df = df.with_columns(pl.lit(default).alias(name))
    for name in ("addr", "time_ns", "stack_id"):
        if name not in df.columns:
            df = df.with_columns(pl.lit(None).alias(name))
    if "alloc_id" not in df.columns:
        # Pair frees with allocations by address: each alloc opens a new id; a free takes the
        # id of the last alloc at its address on its device.
        if df["addr"].null_count() and df.filter(pl.col("action") <= 2)["addr"].null_count():
            raise _fail("without an alloc_id column every alloc and free needs an addr to pair them by")
        is_alloc = pl.col("action") == 0
        df = df.with_columns(_id=pl.when(is_alloc).then(is_alloc.cum_sum() - 1)).with_columns(
            alloc_id=pl.when(pl.col("action") <= 2).then(pl.col("_id").forward_fill().over("device", "addr"))
        )
        df = df.drop("_id")
    for name, dtype in {**_CORE, **_OPTIONAL}.items():
        if name in df.columns and dtype.is_integer() and df[name].dtype.is_float():
            # A float column cast to integers would truncate (2.5 bytes -> 2): a value that is
            # not a whole number is an error naming its row, never a truncation.
            col = df[name]
            bad = (col.is_nan() | col.is_infinite() | (col != col.floor())).fill_null(False)
            if bad.any():
                row = int(cast(int, bad.arg_true()[0]))
                raise _fail(f"column {name!r} row {row} is {col[row]!r}, not a whole number: trace columns hold integers (round them first)")
    casts = [pl.col(c).cast(t, strict=True) for c, t in {**_CORE, **_OPTIONAL}.items() if c in df.columns]
    try:
        df = df.with_columns(casts)
    except pl.exceptions.PolarsError as e:
        raise _fail(f"a column cannot be converted to its trace type: {' '.join(str(e).split())[:300]}") from None
    for name in ("size", "stream", "device", "pool", "seed"):
        if df[name].null_count():
            raise _fail(f"column {name!r} has nulls; it may not")
    core = ["action", *_CORE]
    return df.select(core + [c for c in _OPTIONAL if c in df.columns])


def _whole(value: Any, what: str) -> int:
    """An integer of the metadata (a device or pool index): a float that is not a whole number,
    a bool or a string is an error, never truncated by ``int()``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
        raise _fail(f"metadata {what} is {value!r}, not an integer")
    return int(value)


def _index(entry: Any, what: str) -> Any:
    """An entry of the metadata's ``devices`` or ``pools``: a dict with an ``index``, else an
    error naming the entry (not a KeyError)."""
    if not isinstance(entry, Mapping) or "index" not in entry:
        raise _fail(f"metadata {what}[] entry {entry!r} has no 'index' (each of {what} is a dict with an integer 'index')")
    return entry["index"]


def _metadata(df: pl.DataFrame, given: Mapping[str, Any] | None) -> dict[str, Any]:
    md: dict[str, Any] = {
        "format_version": _core.FORMAT_VERSION,
        "source": "python",
        "source_version": None,
        "source_path": None,
        "devices": [],
        "pools": [],
        "allocator_settings": None,
        "seeded": bool(df["seed"].any()),
        "extra": {},
    }
    md.update(dict(given or {}))
    md["format_version"] = _core.FORMAT_VERSION
    by_index = {_whole(_index(d, "devices"), "devices[].index"): {**d, "index": _whole(d["index"], "devices[].index")} for d in md.get("devices") or []}
    for d in sorted(set(df["device"].to_list())):
        by_index.setdefault(int(d), {"index": int(d)})
    md["devices"] = [{"name": None, "total_memory": None, "memory_cap": None, **by_index[i]} for i in sorted(by_index)]
    pools = {_whole(_index(p, "pools"), "pools[].index"): {**p, "index": _whole(p["index"], "pools[].index")} for p in md.get("pools") or []}
    for p in sorted(set(df["pool"].to_list()) | {0}):
        pools.setdefault(int(p), {"index": int(p), "id": [0, int(p)], "kind": "default" if p == 0 else "private"})
    md["pools"] = [pools[i] for i in sorted(pools)]
    return md


def frame_table_dict(frames: pl.DataFrame, stacks: pl.DataFrame) -> dict[str, list[Any]]:
    """The stored form of a frame table (``traces/README.md``: ``allocreplay.frames``) from
    ``Trace.frames`` and ``Trace.stacks``."""
    frames = frames.sort("frame_id")
    if frames.height and frames["frame_id"].to_list() != list(range(frames.height)):
        raise _fail("frames: frame_id must number the frames 0, 1, 2, ...")
    by_stack = stacks.sort("stack_id", "depth").group_by("stack_id", maintain_order=True).agg(pl.col("frame_id"))
    count = int(cast(int, by_stack["stack_id"].max())) + 1 if by_stack.height else 0
    stack_lists: list[list[int]] = [[] for _ in range(count)]
    for sid, fids in by_stack.iter_rows():
        stack_lists[sid] = list(fids)
    return {"filename": frames["filename"].to_list(), "line": frames["line"].to_list(), "name": frames["name"].to_list(), "stacks": stack_lists}


def inner_from_events(
    df: pl.DataFrame | pa.Table,
    metadata: Mapping[str, Any] | None = None,
    frames: Mapping[str, Any] | pl.DataFrame | None = None,
    stacks: pl.DataFrame | None = None,
    lenient: bool = False,
) -> _core.Trace:
    """The extension's trace of ``Trace.from_events`` (which wraps it)."""
    # Checked in Rust as every load is (the columns, then the events: `trace::check`).
    return _core.trace_from_arrow(to_table(df, metadata, frames, stacks), ORIGIN, lenient)


def to_table(
    df: pl.DataFrame | pa.Table,
    metadata: Mapping[str, Any] | None = None,
    frames: Mapping[str, Any] | pl.DataFrame | None = None,
    stacks: pl.DataFrame | None = None,
) -> pa.Table:
    """The Arrow table of a trace (canonical schema and schema metadata) that
    :func:`inner_from_events` checks, before any check of its events: what an ``.arrow`` file of
    these events holds."""
    if isinstance(frames, pl.DataFrame):
        if stacks is None:
            raise _fail("frames given as a table needs stacks too (Trace.frames and Trace.stacks)")
        frames = frame_table_dict(frames, stacks)

    if not isinstance(df, pl.DataFrame):
        df = pl.DataFrame(df)
    df = _complete(df)
    md = _metadata(df, metadata)
    table = df.to_arrow()
    import pyarrow as pa

    action = pa.DictionaryArray.from_arrays(table.column("action").combine_chunks().cast(pa.uint8()), pa.array(ACTIONS, pa.string()))
    table = table.set_column(0, pa.field("action", action.type, nullable=False), action)
    fields = []
    for f in table.schema:
        nullable = f.name not in ("action", "size", "stream", "device", "pool", "seed")
        fields.append(pa.field(f.name, f.type, nullable=nullable))
    schema_md = {"allocreplay.format_version": str(_core.FORMAT_VERSION), "allocreplay.metadata": json.dumps(md)}
    if frames and frames.get("stacks"):
        schema_md["allocreplay.frames"] = json.dumps({k: list(frames[k]) for k in ("filename", "line", "name", "stacks")})
    return table.cast(pa.schema(fields, metadata=schema_md))


def inner_from_arrow(
    table: Any,
    metadata: Mapping[str, Any] | None = None,
    frames: Mapping[str, Any] | pl.DataFrame | None = None,
    stacks: pl.DataFrame | None = None,
    lenient: bool = False,
) -> _core.Trace:
    """The extension's trace of ``Trace.from_arrow`` (which wraps it): a table that already is
    a trace (``Trace.to_arrow()``, ``pyarrow.ipc`` read of an ``.arrow`` file: its schema
    metadata says so) is taken as it is; any other Arrow table goes through
    :func:`inner_from_events`."""
    import pyarrow as pa

    if not isinstance(table, pa.Table):
        table = pa.table(table)
    if metadata is None and frames is None and b"allocreplay.format_version" in (table.schema.metadata or {}):
        return _core.trace_from_arrow(table, "<Trace.from_arrow>", lenient)
    return inner_from_events(pl.DataFrame(table), metadata, frames, stacks, lenient)
