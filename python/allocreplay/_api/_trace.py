"""The two objects of the API that hold the extension's own: :class:`Trace` and
:class:`ReplayResult`. Their ``_inner`` (the ``allocreplay._core`` object) is for the modules
of ``allocreplay._api`` only (tests/test_architecture.py)."""

from __future__ import annotations

import os
from functools import cached_property
from typing import TYPE_CHECKING, Any

import polars as pl

from allocreplay import _core, _output
from allocreplay._api import _build
from allocreplay._core import TraceInfo
from allocreplay.errors import AllocReplayError, InvalidArgumentError

if TYPE_CHECKING:
    import pyarrow as pa


class Trace:
    """An allocation trace: one row per event (see ``traces/README.md`` for every column).

    Get one with :func:`load`. ``events`` is a Polars DataFrame, ``metadata`` a dict,
    ``frames`` / ``stacks`` Polars DataFrames, ``info()`` a :class:`TraceInfo`, ``to_arrow()`` a
    pyarrow Table (schema metadata included), ``save(path)`` writes ``.arrow``.
    """

    __slots__ = ("__dict__", "_inner")

    def __init__(self, inner: _core.Trace) -> None:
        self._inner = inner

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._inner.__arrow_c_stream__(requested_schema)

    def __len__(self) -> int:
        return len(self._inner)

    def __repr__(self) -> str:
        md = self.metadata
        return f"<allocreplay.Trace {md.get('source')} from {md.get('source_path')!r}: {len(self)} events>"

    @cached_property
    def events(self) -> pl.DataFrame:
        """The events as a Polars DataFrame (zero-copy from the Rust record batch)."""
        return pl.DataFrame(self._inner)

    @cached_property
    def metadata(self) -> dict[str, Any]:
        """Trace-level metadata: format_version, source, devices, pools, allocator_settings..."""
        return self._inner.metadata

    @cached_property
    def frames(self) -> pl.DataFrame:
        """Stack frames, one row each: ``frame_id``, ``filename``, ``line``, ``name``."""
        return pl.DataFrame(self._inner.frames)

    @classmethod
    def from_events(
        cls,
        df: pl.DataFrame | pa.Table,
        metadata: dict[str, Any] | None = None,
        frames: dict[str, Any] | pl.DataFrame | None = None,
        stacks: pl.DataFrame | None = None,
        *,
        lenient: bool = False,
    ) -> Trace:
        """A trace from a table of events, one row per event (see ``traces/README.md``).

        Needed: ``action`` (names such as ``"alloc"``, or codes) and ``size``. Optional:
        ``alloc_id`` (without it, frees are paired with the last ``alloc`` at their ``addr``),
        ``addr``, ``stream``, ``device``, ``pool`` (0 by default), ``time_ns``, ``seed``
        (false), ``stack_id``, and the optional columns of the format. ``metadata``: keys of the
        trace metadata to set (``devices=[{"index": 0, "total_memory": ...}]``,
        ``allocator_settings``...); ``frames`` and ``stacks``: the tables ``Trace.frames`` and
        ``Trace.stacks`` (or one dict in the stored form: filename, line, name, stacks).
        Checked as ``load`` checks an ``.arrow`` file (its columns, then its events: a double
        free, a free before its alloc, a size that differs... are errors; ``lenient=True`` skips
        such events as ``load(..., lenient=True)`` does); a problem raises
        ``InvalidArgumentError``, ``SchemaError`` or ``TraceFormatError`` naming
        ``<Trace.from_events>``. A float that is not a whole number is an error, never truncated.
        """
        return cls(_build.inner_from_events(df, metadata, frames, stacks, lenient))

    @classmethod
    def from_arrow(
        cls,
        table: Any,
        metadata: dict[str, Any] | None = None,
        frames: dict[str, Any] | pl.DataFrame | None = None,
        stacks: pl.DataFrame | None = None,
        *,
        lenient: bool = False,
    ) -> Trace:
        """A trace from an Arrow table: one with a trace's schema metadata (``to_arrow()``)
        as it is, any other through :meth:`from_events`; checked as ``load`` checks a file."""
        return cls(_build.inner_from_arrow(table, metadata, frames, stacks, lenient))

    @cached_property
    def stacks(self) -> pl.DataFrame:
        """Stacks, one row per frame: ``stack_id`` (the events' ``stack_id`` column), ``depth``
        (0 the innermost frame) and ``frame_id`` (a row of :attr:`frames`)."""
        return pl.DataFrame(self._inner.stacks)

    def info(self) -> TraceInfo:
        """Counts, recorded peaks and duration, one attribute each; ``info().to_dict()`` is
        what ``allocreplay info --json`` prints."""
        return self._inner.info()

    def to_arrow(self) -> pa.Table:
        """The events as a pyarrow Table, with the trace's schema metadata."""
        import pyarrow as pa

        return pa.RecordBatchReader.from_stream(self._inner).read_all()

    def save(self, path: str | os.PathLike[str], *, device: int | None = None, metadata: dict[str, Any] | None = None) -> None:
        """Writes the trace as an Arrow IPC file (``.arrow``), readable by :func:`load`;
        atomically (a temporary file beside ``path``, flushed to disk and renamed once
        complete). A symlink is followed (its target replaced, the link kept); a character
        device or a FIFO is written through; ``-`` is stdout (see ``allocreplay._output``).

        ``device``: keep only that device's events (and its entries of the metadata).
        ``metadata``: keys to replace in the metadata (nested dicts merge key by key).
        """
        with _output.output_path(_output.target(path)) as tmp:
            self._inner.save(tmp, device, metadata)
            if metadata is not None and os.path.isfile(tmp):
                # Replaced metadata is checked as load checks it, before the file takes the
                # place of the target: a writer never leaves a file that load refuses.
                try:
                    _core.load(tmp)
                except AllocReplayError as e:
                    raise InvalidArgumentError(
                        f"{os.fspath(path)}: not written: the metadata given to save() makes a trace load refuses: {str(e).replace(tmp, '<the trace>')}"
                    ) from None

    def ipc_bytes(self) -> bytes:
        """The bytes :meth:`save` would write."""
        return self._inner.ipc_bytes()


class ReplayResult:
    """What a replay produced, as Polars DataFrames built in Rust.

    - ``summary``: one row per policy and device (peaks, device allocations, retries, OOMs...).
    - ``timeline``: allocated/reserved bytes over the events, downsampled.
    - ``segments``: the segments each policy holds at the end.
    - ``placements``: where each request was placed, built on first read by replaying the
      request again (see :func:`allocreplay.replay`).
    """

    __slots__ = ("__dict__", "_inner")

    def __init__(self, inner: _core.ReplayResult) -> None:
        self._inner = inner

    @cached_property
    def summary(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.summary)

    @cached_property
    def timeline(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.timeline)

    @cached_property
    def segments(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.segments)

    @cached_property
    def placements(self) -> pl.DataFrame:
        return pl.DataFrame(self._inner.placements)

    def __repr__(self) -> str:
        return f"<allocreplay.ReplayResult\n{self.summary}>"
