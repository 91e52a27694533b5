"""Memory timelines as pictures: reserved (solid) and allocated (dashed) bytes after each event,
one colour per policy, with the capacity and each policy's first OOM marked.

Needs matplotlib (``pip install 'allocreplay[plot]'``)."""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING, Any, cast

from allocreplay.errors import InvalidArgumentError

if TYPE_CHECKING:
    from allocreplay._api import ReplayResult

__all__ = ["capacity_in_range", "plot_timeline", "timeline_figure"]


def capacity_in_range(capacity: int | None, data_max: float) -> bool:
    """Whether a capacity line belongs on a chart of data up to ``data_max`` bytes: only when
    it is at most 1.5 times the data's maximum (a 140 GiB line over 3 GiB curves would flatten
    them)."""
    return capacity is not None and capacity > 0 and capacity <= 1.5 * max(data_max, 1.0)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InvalidArgumentError("plotting needs matplotlib: pip install 'allocreplay[plot]' (or pip install matplotlib)") from e
    return plt


def plot_timeline(result: ReplayResult, path: str | os.PathLike[str] | IO[bytes], *, title: str | None = None, format: str | None = None) -> None:
    """Writes the timeline of every (policy, device) of ``result`` to ``path`` (PNG, SVG, PDF:
    by extension)."""
    plt = _pyplot()
    fig = timeline_figure(result, title=title)
    fig.savefig(os.fspath(path) if isinstance(path, (str, os.PathLike)) else path, dpi=110, format=format)
    plt.close(fig)


def timeline_figure(result: ReplayResult, *, title: str | None = None) -> Any:
    """The matplotlib figure :func:`plot_timeline` writes: one axes per device, the y-axis
    fitted to the data, the capacity drawn only when :func:`capacity_in_range`."""
    plt = _pyplot()
    timeline, summary = result.timeline, result.summary
    devices = sorted(summary["device"].unique().to_list())
    fig, axes = plt.subplots(len(devices), 1, figsize=(11, 4.2 * len(devices)), squeeze=False, sharex=False)
    gib = float(2**30)
    for ax, dev in zip(axes[:, 0], devices):
        # Policies that could not run (an `error` in their row) have nothing to draw.
        rows = summary.filter((summary["device"] == dev) & summary["error"].is_null())
        t_dev = timeline.filter(timeline["device"] == dev)
        # The y-axis is fitted to the data: the highest curve or offline bound.
        tl_max = cast(float, t_dev["reserved_bytes"].max() or 0) if t_dev.height else 0.0
        data_max = max([float(tl_max), *(float(v or 0) for v in rows["peak_reserved_bytes"].to_list())])
        top = max(data_max * 1.08, 1.0) / gib
        caps = [c for c in rows["capacity_bytes"].to_list() if c]
        cap = min(caps) if caps else None
        cap_note = ""
        if cap is not None and capacity_in_range(cap, data_max):
            top = max(top, cap * 1.05 / gib)
            ax.axhline(cap / gib, color="black", lw=0.8, ls="-", alpha=0.5, label=f"capacity {cap / gib:.2f} GiB")
        elif cap is not None:
            cap_note = f"; capacity {cap / gib:.2f} GiB, above the chart"
        ax.set_ylim(0, top)
        for k, row in enumerate(rows.iter_rows(named=True)):
            color = f"C{k % 10}"
            t = t_dev.filter(t_dev["policy"] == row["policy"])
            if t.height:
                x = t["event"].to_numpy()
                ax.plot(
                    x,
                    t["reserved_bytes"].to_numpy() / gib,
                    color=color,
                    lw=1.4,
                    label=f"{row['policy']} reserved (peak {row['peak_reserved_bytes'] / gib:.2f} GiB)",
                )
                ax.plot(x, t["allocated_bytes"].to_numpy() / gib, color=color, lw=0.9, ls="--", alpha=0.8)
            else:  # offline bounds have no timeline: their peak as a line
                ax.axhline(
                    row["peak_reserved_bytes"] / gib, color=color, lw=1.0, ls=":", label=f"{row['policy']} (peak {row['peak_reserved_bytes'] / gib:.2f} GiB)"
                )
            if row.get("first_oom_event") is not None:
                ax.axvline(row["first_oom_event"], color=color, lw=0.8, ls="-.")
                ax.annotate("OOM", (row["first_oom_event"], top * 0.95), color=color, fontsize=8)
        ax.set_xlabel("event")
        ax.set_ylabel("GiB")
        ax.set_title(f"{title + ' — ' if title else ''}device {dev} (solid: reserved, dashed: allocated{cap_note})", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
