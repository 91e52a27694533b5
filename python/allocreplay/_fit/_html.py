"""``allocreplay fit -o fit.html``: peak reserved memory against the varied value, one curve per
setting, the device's limit as a line; self-contained (plotly.js inlined, opens offline)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import polars as pl

from allocreplay import _api, _output

if TYPE_CHECKING:
    from allocreplay._fit import FitResult

GIB = float(1 << 30)


def build_html(result: FitResult, *, title: str) -> str:
    from allocreplay.report import _plotly

    go = _plotly()
    t = result.table
    names = result.parameters
    x = names[-1]
    figs = []
    outers = t.select(names[:-1]).unique(maintain_order=True).rows() if len(names) > 1 and len(t) else [()]
    for outer in outers:
        sub = t
        for n, v in zip(names[:-1], outer):
            sub = sub.filter(pl.col(n) == v)
        fig = go.Figure()
        for setting in sub["setting"].unique(maintain_order=True).to_list() if len(sub) else []:
            s = sub.filter(pl.col("setting") == setting).sort(x)
            label = {"pytorch": "defaults", "tuned": "best setting (tune)"}.get(setting) or (s["env"][0] or setting)
            fig.add_trace(
                go.Scatter(
                    x=s[x].to_list(),
                    y=[None if v is None else v / GIB for v in s["peak_reserved_bytes"].to_list()],
                    mode="lines+markers",
                    name=label,
                    marker={"symbol": ["circle" if f else "x" for f in s["fits"].to_list()], "size": 9},
                    text=[f"{e or '(defaults)'}; {'fits' if f else 'does not fit'}" for e, f in zip(s["env"].to_list(), s["fits"].to_list())],
                    hovertemplate=f"{x}=%{{x}}<br>peak reserved %{{y:.2f}} GiB<br>%{{text}}<extra>{html.escape(label)}</extra>",
                )
            )
        fig.add_hline(
            y=result.capacity_bytes / GIB,
            line_dash="dash",
            line_color="crimson",
            annotation_text=f"{result.device}: {_api.format_bytes(result.capacity_bytes)}",
        )
        at = ", ".join(f"{n}={v}" for n, v in zip(names[:-1], outer))
        fig.update_layout(
            title=f"peak reserved against {x}" + (f" at {at}" if at else ""),
            xaxis_title=x,
            yaxis_title="peak reserved (GiB)",
            template="plotly_white",
            height=460,
        )
        figs.append(fig)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>allocreplay fit</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}pre{background:#f6f6f6;padding:1em;white-space:pre-wrap}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head><body>",
        f"<h1>allocreplay fit</h1><p><code>{html.escape(title)}</code></p>",
        f"<pre class='answer'>{html.escape(result.answer)}</pre>",
        f"<p>limit: {result.capacity_bytes:,} bytes: {html.escape(result.capacity_how)}</p>",
    ]
    for i, fig in enumerate(figs):
        parts.append(
            f"<div class='chart' id='fit-{i}'>"
            + fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False, "responsive": True})
            + "</div>"
        )
    if len(t):
        cols = [*names, "setting", "env", "fits", "peak_reserved_bytes", "margin_bytes", "num_alloc_retries", "capture_seconds"]
        parts.append("<h2>candidates</h2><table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
        for r in t.select(cols).iter_rows():
            parts.append("<tr>" + "".join(f"<td>{html.escape('-' if v is None else str(v))}</td>" for v in r) + "</tr>")
        parts.append("</table>")
    if result.breakdown is not None and result.breakdown_at is not None:
        at = ", ".join(f"{k}={v}" for k, v in result.breakdown_at.items())
        parts.append(
            f"<h2>why {html.escape(at)} does not fit (defaults): memory at the peak by category</h2><table><tr><th>category</th><th>bytes</th><th>how tagged</th></tr>"
        )
        for b in result.breakdown.iter_rows(named=True):
            parts.append(
                f"<tr><td>{html.escape(str(b['category']))}</td><td>{_api.format_bytes(int(b['bytes']))}</td><td>{html.escape(str(b.get('how_tagged') or ''))}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(result: FitResult, path: str, *, title: str) -> None:
    text = build_html(result, title=title)
    # Atomically (a file; a symlink's target), written through (a device, a FIFO, "-").
    with _output.open_output(_output.target(path), "w") as f:
        f.write(text)
