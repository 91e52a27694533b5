"""``allocreplay report``: one self-contained HTML file that opens offline.

Charts are Plotly figures (plotly.js inlined once, no CDN): the reserved / allocated timelines
of every policy on one interactive chart (the y-axis fitted to the data; the device capacity
drawn as a line only when it lies within the data's range, else named in the title), unused
bytes (reserved − allocated) over time, the segment map at each policy's peak (allocated
blocks and free holes), the top call sites at the peak, and each policy's first OOM if any;
for a capture that tags its storages (``capture --no-gpu``), the bytes at each policy's peak by
category (``analysis.breakdown``: parameters, gradients, optimizer state... and the allocator's
cache), as a table and a stacked bar chart.

Needs plotly (``pip install 'allocreplay[report]'``).
"""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from allocreplay import _api, _output, analysis
from allocreplay.errors import InternalError, InvalidArgumentError
from allocreplay.plot import capacity_in_range

if TYPE_CHECKING:
    from allocreplay._api import ReplayResult, Trace

__all__ = ["build_report", "write_report"]

GIB = float(2**30)
# Segments drawn per segment map (the largest); the rest are summarised in its title.
MAX_SEGMENTS = 60
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InvalidArgumentError("the HTML report needs plotly: pip install 'allocreplay[report]' (or pip install plotly)") from e
    return go


def _gib(n: float | None) -> str:
    return "-" if n is None else _api.format_bytes(int(n))


def _timeline_figure(go: Any, result: ReplayResult, title: str) -> Any:
    tl, summary = result.timeline, result.summary
    fig = go.Figure()
    data_max = float(cast(float, tl["reserved_bytes"].max() or 0)) if tl.height else 0.0
    data_max = max(data_max, float(cast(float, summary["peak_reserved_bytes"].max() or 0)))
    caps = [c for c in summary["capacity_bytes"].to_list() if c]
    cap = min(caps) if caps else None
    for k, row in enumerate(summary.iter_rows(named=True)):
        if row["error"] is not None:
            continue  # a policy that could not run: no line; its reason is in the tables
        color = COLORS[k % len(COLORS)]
        name = f"{row['policy']} (device {row['device']})" if summary["device"].n_unique() > 1 else row["policy"]
        t = tl.filter((pl.col("policy") == row["policy"]) & (pl.col("device") == row["device"]))
        if t.height:
            x = t["event"].to_list()
            fig.add_trace(
                go.Scatter(
                    x=x, y=(t["reserved_bytes"] / GIB).to_list(), name=f"{name} reserved", mode="lines", line={"color": color, "width": 2}, legendgroup=name
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=(t["allocated_bytes"] / GIB).to_list(),
                    name=f"{name} allocated",
                    mode="lines",
                    line={"color": color, "width": 1, "dash": "dash"},
                    legendgroup=name,
                )
            )
        else:  # offline bounds: their peak as a flat line
            fig.add_hline(y=row["peak_reserved_bytes"] / GIB, line={"color": color, "dash": "dot"}, annotation_text=f"{name} peak")
        if row["first_oom_event"] is not None:
            at = t.filter(pl.col("event") >= row["first_oom_event"]).head(1)
            y = float(at["reserved_bytes"][0]) / GIB if at.height else row["peak_reserved_bytes"] / GIB
            fig.add_trace(
                go.Scatter(
                    x=[row["first_oom_event"]],
                    y=[y],
                    mode="markers+text",
                    marker={"symbol": "x", "size": 14, "color": color},
                    text=["OOM"],
                    textposition="top center",
                    name=f"{name} first OOM (event {row['first_oom_event']:,}, {_gib(row['first_oom_requested_bytes'])} requested)",
                    legendgroup=name,
                )
            )
    top = data_max * 1.08 / GIB
    cap_note = ""
    if cap is not None and capacity_in_range(cap, data_max):
        top = max(top, cap * 1.05 / GIB)
        fig.add_hline(y=cap / GIB, line={"color": "black", "width": 1}, annotation_text=f"capacity {_gib(cap)}", annotation_position="top left")
    elif cap is not None:
        cap_note = f" — capacity {_gib(cap)} (above the chart)"
    fig.update_layout(
        title=f"{title}: reserved (solid) and allocated (dashed) memory{cap_note}",
        xaxis_title="event",
        yaxis_title="GiB",
        yaxis={"range": [0, top if top > 0 else 1]},
        height=480,
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 60, "l": 60, "r": 20},
    )
    return fig


def _fragmentation_figure(go: Any, result: ReplayResult) -> Any:
    fr = analysis.fragmentation(result)
    fig = go.Figure()
    for k, ((policy, device), g) in enumerate(fr.group_by("policy", "device", maintain_order=True)):
        fig.add_trace(
            go.Scatter(
                x=g["event"].to_list(),
                y=(g["unused_bytes"] / GIB).to_list(),
                name=f"{policy}" + (f" (device {device})" if fr["device"].n_unique() > 1 else ""),
                mode="lines",
                line={"color": COLORS[k % len(COLORS)]},
            )
        )
    fig.update_layout(
        title="Unused reserved memory (reserved − allocated): cache and fragmentation",
        xaxis_title="event",
        yaxis_title="GiB",
        yaxis={"rangemode": "tozero"},
        height=380,
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 60, "l": 60, "r": 20},
    )
    return fig


def _segment_map_figure(go: Any, st: analysis.State, policy: str) -> Any | None:
    segs, blocks = st.segments, st.blocks
    if segs.is_empty():
        return None
    segs = (
        segs.sort("size", descending=True)
        .head(MAX_SEGMENTS)
        .with_columns(label=pl.format("{} {} @{}", pl.col("kind"), pl.col("device"), pl.col("addr").map_elements(hex, return_dtype=pl.String)))
    )
    b = blocks.join(segs.select(pl.col("addr").alias("segment"), "device", "label"), on=["segment", "device"]).with_columns(
        offset=(pl.col("addr") - pl.col("segment")) / 2**20, mib=pl.col("size") / 2**20
    )
    fig = go.Figure()
    for allocated, color, name in ((True, "#1f77b4", "allocated block"), (False, "#f2b134", "free hole")):
        part = b.filter(pl.col("allocated") == allocated)
        fig.add_trace(
            go.Bar(
                y=part["label"].to_list(),
                x=part["mib"].to_list(),
                base=part["offset"].to_list(),
                orientation="h",
                name=name,
                marker={"color": color, "line": {"color": "white", "width": 0.5}},
                customdata=[_gib(s) for s in part["size"].to_list()],
                hovertemplate="%{y}<br>offset %{base:.1f} MiB, %{customdata}<extra>" + name + "</extra>",
            )
        )
    summary = st.summary.row(0, named=True) if st.summary.height else {}
    total = st.segments.height
    more = f", the {MAX_SEGMENTS} largest of {total} shown" if total > MAX_SEGMENTS else ""
    fig.update_layout(
        title=f"Segments of {policy} at its peak (event {summary.get('event', 0):,}): {_gib(summary.get('reserved_bytes'))} reserved, "
        f"{_gib(summary.get('free_cached_bytes'))} in free holes{more}",
        barmode="overlay",
        xaxis_title="MiB from the segment's base",
        yaxis={"autorange": "reversed", "type": "category"},
        height=max(320, 22 * segs.height + 140),
        legend={"orientation": "h", "y": -0.12},
        margin={"t": 60, "l": 200, "r": 20},
    )
    return fig


def _call_sites_figure(go: Any, trace: Trace, policies: list[str], capacity: str | float | None, n: int) -> Any:
    fig = go.Figure()
    sites: set[str] = set()
    for k, p in enumerate(policies):
        top = analysis.top_call_sites(trace, p, capacity=capacity, n=n).with_columns(pl.col("call_site").fill_null("(no stack recorded)"))
        sites.update(top["call_site"].to_list())
        fig.add_trace(
            go.Bar(
                y=top["call_site"].to_list(),
                x=(top["bytes"] / GIB).to_list(),
                orientation="h",
                name=p,
                marker={"color": COLORS[k % len(COLORS)]},
                hovertemplate="%{y}<br>%{x:.3f} GiB<extra>" + p + "</extra>",
            )
        )
    fig.update_layout(
        title=f"Top {n} call sites by bytes live at each policy's peak",
        barmode="group",
        xaxis_title="GiB",
        yaxis={"autorange": "reversed", "automargin": True},
        height=max(280, (18 + 14 * len(policies)) * len(sites) + 160),
        legend={"orientation": "h", "y": -0.15},
        margin={"t": 60, "r": 20},
    )
    return fig


CATEGORY_COLORS = {
    "parameters": "#1f77b4",
    "buffers": "#17becf",
    "gradients": "#ff7f0e",
    "optimizer_state": "#9467bd",
    "activations": "#2ca02c",
    "untagged": "#7f7f7f",
    "allocator_cache": "#f2b134",
}


def _breakdown_figure(go: Any, bd: pl.DataFrame) -> Any:
    """One stacked bar per policy (and device): the bytes at its peak by category."""
    bd = bd.with_columns(label=pl.format("{} (device {})", pl.col("policy"), pl.col("device")) if bd["device"].n_unique() > 1 else pl.col("policy"))
    fig = go.Figure()
    for k, (cat,) in enumerate(bd.select("category").unique(maintain_order=True).iter_rows()):
        part = bd.filter(pl.col("category") == cat)
        fig.add_trace(
            go.Bar(
                y=part["label"].to_list(),
                x=(part["bytes"] / GIB).to_list(),
                orientation="h",
                name=cat,
                marker={"color": CATEGORY_COLORS.get(cat, COLORS[k % len(COLORS)])},
                customdata=[f"{_gib(b)} ({s:.1%})" if s is not None else _gib(b) for b, s in zip(part["bytes"].to_list(), part["share"].to_list())],
                hovertemplate="%{y}<br>%{customdata}<extra>" + cat + "</extra>",
            )
        )
    fig.update_layout(
        title="What each policy reserves at its peak, by category",
        barmode="stack",
        xaxis_title="GiB",
        yaxis={"autorange": "reversed", "automargin": True},
        height=max(240, 60 * bd["label"].n_unique() + 160),
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 60, "r": 20},
    )
    return fig


def _table(df: pl.DataFrame, fmt: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    rows = []
    for r in df.iter_rows(named=True):
        cells = []
        for c in df.columns:
            v = r[c]
            s = "-" if v is None else fmt[c](v) if c in fmt else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
            cells.append(f"<td>{html.escape(s)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def build_report(trace: Trace, result: ReplayResult, *, title: str, capacity: str | float | None = None, top: int = 10) -> str:
    """The report's HTML (see the module's docstring)."""
    go = _plotly()
    # Policies that could not run on a device (their summary row's `error`) have no state to
    # look at: they are ranked last in the table, with their reason, and left out of the charts.
    failed = set(result.summary.filter(pl.col("error").is_not_null())["policy"].to_list())
    policies = [p for p in dict.fromkeys(result.summary["policy"].to_list()) if p.split(":", 1)[0] not in ("ideal", "offline") and p not in failed]
    figures: list[tuple[str, Any]] = [
        ("timeline", _timeline_figure(go, result, title)),
        ("fragmentation", _fragmentation_figure(go, result)),
    ]
    for p in policies:
        fig = _segment_map_figure(go, analysis.state(trace, p, capacity=capacity), p)
        if fig is not None:
            figures.append((f"segments-{len(figures)}", fig))
    if policies:
        figures.append(("call-sites", _call_sites_figure(go, trace, policies, capacity, top)))
    # Bytes by category at each policy's peak: only for a capture that tags its storages.
    breakdown_html = ""
    if policies and analysis.storage_tags(trace) is not None:
        bd = pl.concat([analysis.breakdown(trace, p, capacity=capacity) for p in policies], how="vertical_relaxed")
        if not bd.is_empty():
            figures.append(("breakdown", _breakdown_figure(go, bd)))
            how = bd.select("category", "how_tagged").unique("category", maintain_order=True)
            breakdown_html = (
                "<h2>What the memory is made of at each policy's peak</h2>\n"
                + _table(
                    bd.select("policy", "device", "event", "category", "bytes", pl.col("share").alias("share of reserved"), "allocations"),
                    {"bytes": _gib, "share of reserved": lambda v: f"{v:.1%}"},
                )
                + "<p>How each category was tagged:</p><ul>"
                + "".join(f"<li><b>{html.escape(c)}</b>: {html.escape(h)}</li>" for c, h in how.iter_rows())
                + "</ul>"
            )
    ranked = analysis.compare(trace, result)
    ranked = ranked.with_columns(
        oom=pl.when(pl.col("error").is_not_null())
        .then(pl.lit("cannot run"))
        .when(pl.col("oom"))
        .then(pl.lit("OOM"))
        .when(~pl.col("fits"))
        .then(pl.lit("may OOM (range's high end over the limit)"))
        .otherwise(pl.lit("fits"))
    )
    if ranked["error"].null_count() == ranked.height:
        ranked = ranked.drop("error")
    # The verdict says what `fits` does; the predicted range (cuda-async's) is shown only where a
    # policy has one, low and high apart: for the others both ends are the replay's peak.
    ranked = ranked.drop("fits")
    spread = ranked.filter(pl.col("peak_reserved_low_bytes") != pl.col("peak_reserved_high_bytes"))
    if spread.is_empty():
        ranked = ranked.drop("peak_reserved_low_bytes", "peak_reserved_high_bytes")
    size = lambda v: _gib(v)  # noqa: E731
    table = _table(
        ranked.drop("first_oom_requested_bytes", "num_ooms", "capacity_source").rename(
            {
                "peak_reserved_low_bytes": "peak reserved, range low",
                "peak_reserved_high_bytes": "peak reserved, range high",
                "peak_reserved_bytes": "peak reserved",
                "peak_allocated_bytes": "peak allocated",
                "device_calls": "device calls",
                "num_alloc_retries": "retries",
                "first_oom_event": "first OOM event",
                "first_oom_call_site": "first OOM call site",
                "capacity_bytes": "capacity",
                "oom": "verdict",
            }
            | ({"error": "why it could not run"} if "error" in ranked.columns else {}),
            strict=False,
        ),
        {
            "peak reserved": size,
            "peak reserved, range low": size,
            "peak reserved, range high": size,
            "peak allocated": size,
            "capacity": size,
            "efficiency": lambda v: f"{v:.1%}",
        },
    )
    ooms = pl.concat([analysis.oom(trace, p, capacity=capacity) for p in policies], how="vertical_relaxed") if policies else pl.DataFrame()
    # The table above and this section come from replays at the same limit (analysis.limits):
    # they agree on which policies ran out of memory, and where.
    replay_ooms = {(r["policy"], r["device"], r["first_oom_event"]) for r in ranked.iter_rows(named=True) if r["oom"] == "OOM" and r["policy"] in policies}
    found = set(ooms.select("policy", "device", "event").iter_rows()) if not ooms.is_empty() else set()
    if replay_ooms != found:
        raise InternalError(
            f"the replay and the analysis disagree on the out-of-memory events (replay: {sorted(replay_ooms)}, analysis.oom: {sorted(found)}); please report it"
        )
    oom_html = (
        "<p>No policy ran out of memory.</p>"
        if ooms.is_empty()
        else _table(
            ooms.select(
                "policy",
                "device",
                "event",
                pl.col("requested_bytes").alias("requested"),
                pl.col("reserved_bytes").alias("reserved"),
                pl.col("capacity_bytes").alias("capacity"),
                pl.col("largest_free_block_bytes").alias("largest free block"),
                pl.col("free_cached_bytes").alias("free in holes"),
                pl.col("fragmented").alias("fragmented (the memory is there, in pieces)"),
                pl.col("call_site").alias("call site"),
            ),
            dict.fromkeys(("requested", "reserved", "capacity", "largest free block", "free in holes"), size),
        )
    )
    parts = []
    for i, (name, fig) in enumerate(figures):
        # plotly.js once, inlined into the page: the file opens offline.
        parts.append(
            f'<div class="chart" id="chart-{html.escape(name)}">'
            + fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False, "responsive": True})
            + "</div>"
        )
    info = trace.info()
    # What the recording cannot show (a truncated history's start, ...): said, not hidden (issue 29).
    assumed_html = "".join(f"<p><b>Assumed:</b> {html.escape(a)}</p>" for a in info.assumed)
    whose = "the recorded part's" if info.seed_allocs or info.seed_segments else "the recorded run's"
    limit_html = "".join(
        f"<br>Limit of device {d}: {'none' if cap is None else f'{cap:,} bytes ({_gib(cap)})'} — {html.escape(analysis.CAPACITY_SOURCES.get(src, src))}."
        for d, cap, src in analysis.limits(trace, capacity).iter_rows()
    )
    failed_html = "".join(
        f"<li><b>{html.escape(r['policy'])}</b> (device {r['device']}): {html.escape(r['error'])}</li>"
        for r in result.summary.filter(pl.col("error").is_not_null()).iter_rows(named=True)
    )
    if failed_html:
        failed_html = f"<h2>Policies that could not run</h2>\n<ul>{failed_html}</ul>"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>allocreplay report: {html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; font-size: 13px; margin: 8px 0 24px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f3f3; }}
td:nth-child(2), td:last-child {{ text-align: left; max-width: 420px; }}
.chart {{ margin: 12px 0 28px; }}
</style>
</head>
<body>
<h1>allocreplay report: {html.escape(title)}</h1>
<p>{info["events"]:,} events on device(s) {", ".join(map(str, info["devices"]))}; {whose} peak reserved: {_gib(info["recorded_peak_reserved_bytes"])}.
Policies replayed: {html.escape(", ".join(result.summary["policy"].unique(maintain_order=True).to_list()))}.{limit_html}</p>
{assumed_html}
<h2>Policies, best first</h2>
{table}
{failed_html}
<h2>Out of memory</h2>
{oom_html}
{breakdown_html}
<h2>Charts</h2>
{"".join(parts)}
<p style="color:#777;font-size:12px">Written by allocreplay {_api.__version__}.</p>
</body>
</html>
"""


def write_report(trace: Trace, result: ReplayResult, path: str | os.PathLike[str], *, title: str, capacity: str | float | None = None, top: int = 10) -> None:
    """Writes :func:`build_report` to ``path``."""
    text = build_report(trace, result, title=title, capacity=capacity, top=top)
    # Atomically (a file), written through (a device, a FIFO, "-"): allocreplay._output.
    with _output.open_output(_output.target(path), "w") as f:
        f.write(text)
