"""Memory timelines as pictures: reserved (solid) and allocated (dashed) bytes after each event,
one colour per policy, with the capacity and each policy's first OOM marked.

Needs matplotlib (``pip install 'allocreplay[plot]'``)."""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING, Any

from allocreplay.errors import InvalidArgumentError

if TYPE_CHECKING:
    from allocreplay._api import ReplayResult

__all__ = ["plot_timeline"]


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
    by extension, or ``format``), or into a binary file object. Policies that could not run
    (an ``error`` in their summary row) have nothing to draw."""
    plt = _pyplot()
    timeline, summary = result.timeline, result.summary
    devices = sorted(summary["device"].unique().to_list())
    fig, axes = plt.subplots(len(devices), 1, figsize=(11, 4.2 * len(devices)), squeeze=False, sharex=False)
    gib = float(2**30)
    for ax, dev in zip(axes[:, 0], devices):
        ran = summary.filter((summary["device"] == dev) & summary["error"].is_null())
        for k, row in enumerate(ran.iter_rows(named=True)):
            color = f"C{k % 10}"
            t = timeline.filter((timeline["policy"] == row["policy"]) & (timeline["device"] == dev))
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
                ax.annotate("OOM", (row["first_oom_event"], ax.get_ylim()[1] * 0.95), color=color, fontsize=8)
        caps = [c for c in summary.filter(summary["device"] == dev)["capacity_bytes"].to_list() if c]
        if caps:
            ax.axhline(min(caps) / gib, color="black", lw=0.8, ls="-", alpha=0.5, label=f"capacity {min(caps) / gib:.2f} GiB")
        ax.set_xlabel("event")
        ax.set_ylabel("GiB")
        ax.set_title(f"{title + ' — ' if title else ''}device {dev} (solid: reserved, dashed: allocated)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(os.fspath(path) if isinstance(path, (str, os.PathLike)) else path, dpi=110, format=format)
    plt.close(fig)
