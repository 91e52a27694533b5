"""`allocreplay report`: one self-contained HTML file, opened in a real browser.

The browser is Debian's `chromium` (.ci/run installs it: `apt-get install -y chromium`). Without
it the browser tests FAIL under CI=true, since a skipped test there would hide that the report was
never rendered; elsewhere (a fresh clone's `make test`) they are skipped, and pytest says why.
The page is opened headless with a probe prepended that records script errors, console errors
and every resource the page loads; the DOM is dumped after the page settled, and a screenshot
is saved (`report.png` beside the report, under pytest's tmp_path; `ALLOCREPLAY_ARTIFACTS=DIR`
also copies it there).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import TRACES, run_subprocess

PROBE = """<script>
window.__probe = {errors: []};
window.addEventListener('error', e => window.__probe.errors.push('error: ' + e.message));
window.addEventListener('unhandledrejection', e => window.__probe.errors.push('rejection: ' + e.reason));
for (const level of ['error', 'warn']) {
  const orig = console[level];
  console[level] = (...a) => { window.__probe.errors.push(level + ': ' + a.join(' ')); orig.apply(console, a); };
}
window.addEventListener('load', () => setTimeout(() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const out = {
    errors: window.__probe.errors,
    charts: document.querySelectorAll('div.chart').length,
    plots: plots.map(p => ({
      id: p.closest('div.chart').id,
      svgs: p.querySelectorAll('.main-svg').length,
      traces: p.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length,
      points: p.querySelectorAll('.scatterlayer path.js-line, .barlayer path').length,
      title: (p.querySelector('.gtitle') || {}).textContent || '',
    })),
    external: performance.getEntriesByType('resource').map(r => r.name).filter(n => !n.startsWith('file:') && !n.startsWith('data:') && !n.startsWith('blob:')),
  };
  const pre = document.createElement('pre');
  pre.id = '__probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 1000));
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI") == "true":
        pytest.fail("no chromium on PATH: CI must check the report in a real browser (.ci/run: apt-get install -y chromium)", pytrace=False)
    pytest.skip("no chromium on PATH: the report's browser test runs where there is one (apt-get install -y chromium; CI installs it)")


def _browser(*args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000", "--no-first-run"]
    return subprocess.run([_chromium(), *flags, *args], capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    # Under 2.25 GiB expandable segments run out of memory on two_streams; default PyTorch fits.
    run = run_subprocess(
        "report", TRACES / "two_streams__default.pickle.xz", "-p", "pytorch", "-p", "pytorch:expandable_segments:True", "--capacity", "2.25GiB", "-o", out
    )
    assert run.code == 0, run.err
    return out


def test_the_report_is_self_contained(report):
    text = report.read_text()
    # plotly.js is inlined once; nothing is fetched: no external scripts, styles or frames.
    assert len(re.findall(r"<script[^>]*\bsrc=", text)) == 0
    assert not re.search(r"<link[^>]+href=\"?https?:", text)
    assert not re.search(r"<iframe", text)
    assert text.count("plotly.js v") >= 1 and len(text) > 3_000_000
    assert "pytorch:expandable_segments:True" in text and "No policy ran out of memory" not in text


def test_the_report_renders_every_chart_in_chromium(report):
    probed = report.with_name("probed.html")
    probed.write_text(report.read_text().replace("<head>", "<head>\n" + PROBE, 1))
    dom = _browser("--dump-dom", probed.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'<pre id="__probe">(.*?)</pre>', dom.stdout, re.S)
    assert m, "the probe did not run: " + dom.stdout[-500:]
    probe = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert probe["errors"] == []
    assert probe["external"] == []
    # Every chart became a Plotly plot with its SVG and its traces drawn.
    ids = [p["id"] for p in probe["plots"]]
    assert probe["charts"] == len(probe["plots"]) == 5, ids
    assert ids[:2] == ["chart-timeline", "chart-fragmentation"] and ids[-1] == "chart-call-sites"
    for p in probe["plots"]:
        assert p["svgs"] >= 1 and p["traces"] >= 1 and p["points"] >= 1, p
    timeline = probe["plots"][0]
    # Two policies x (reserved, allocated) + the OOM marker of expandable segments.
    assert timeline["traces"] == 5
    assert "capacity" not in timeline["title"] or "above the chart" not in timeline["title"]
    shot = report.with_name("report.png")
    r = _browser("--window-size=1400,3600", f"--screenshot={shot}", report.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    if os.environ.get("ALLOCREPLAY_ARTIFACTS"):
        dest = Path(os.environ["ALLOCREPLAY_ARTIFACTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, dest / "report.png")
        shutil.copy(report, dest / "report.html")


def test_capacity_far_above_the_data_is_a_label_not_a_line():
    import allocreplay
    from allocreplay.plot import capacity_in_range
    from allocreplay.report import _plotly, _timeline_figure

    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    r = allocreplay.replay(t, ["pytorch"])  # capacity: the H200's 139.8 GiB over a 2.80 GiB peak
    fig = _timeline_figure(_plotly(), r, "two_streams")
    top = fig.layout.yaxis.range[1]
    assert 2.80 < top < 2.80 * 1.1  # GiB: fitted to the peak
    assert "above the chart" in fig.layout.title.text and not fig.layout.shapes
    r = allocreplay.replay(t, ["pytorch"], "3GiB")
    fig = _timeline_figure(_plotly(), r, "two_streams")
    assert len(fig.layout.shapes) == 1 and fig.layout.shapes[0].y0 == 3.0
    assert capacity_in_range(3 * 2**30, 2.8 * 2**30) and not capacity_in_range(140 * 2**30, 2.8 * 2**30)


def test_the_plot_y_axis_fits_the_data(tmp_path):
    pytest.importorskip("matplotlib")
    import allocreplay
    from allocreplay.plot import timeline_figure

    t = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    fig = timeline_figure(allocreplay.replay(t, ["pytorch", "pytorch:expandable_segments:True"]))
    ax = fig.axes[0]
    # Peak reserved 2.80 GiB (the real run's 3,011,510,272 bytes); capacity 139.8 GiB is not drawn.
    assert 2.80 < ax.get_ylim()[1] < 3.1
    assert "above the chart" in ax.get_title()
    fig = timeline_figure(allocreplay.replay(t, ["pytorch"], "3GiB"))
    assert any("capacity 3.00 GiB" in (line.get_label() or "") for line in fig.axes[0].get_lines())


def test_a_truncated_history_s_report_says_what_it_assumes(tmp_path):
    # traces/truncated (issue 29 item 2): the recording starts mid-run; the report must say so
    # and name its peak the recorded part's, as replay and validate do.
    out = tmp_path / "t.html"
    run = run_subprocess("report", TRACES / "truncated" / "trunc_train_fp32_medium.pickle.xz", "-p", "pytorch", "-o", out)
    assert run.code == 0, run.err
    text = out.read_text()
    assert "<b>Assumed:</b> the history starts mid-run" in text
    assert "the recorded part&#x27;s peak reserved" in text or "the recorded part's peak reserved" in text
    whole = tmp_path / "w.html"
    assert run_subprocess("report", TRACES / "two_streams__default.pickle.xz", "-p", "pytorch", "-o", whole).code == 0
    assert "Assumed:" not in whole.read_text()


def _policy_table(path: Path) -> tuple[list[str], list[list[str]]]:
    text = path.read_text()
    table = text[text.index("<table>") : text.index("</table>")]
    head = re.findall(r"<th>(.*?)</th>", table)
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table) if "<td>" in r]
    return head, rows


def test_the_policy_table_shows_a_range_only_where_a_policy_has_one(tmp_path):
    import allocreplay

    trace = TRACES / "two_streams__default.pickle.xz"
    plain, spread = tmp_path / "p.html", tmp_path / "s.html"
    assert run_subprocess("report", trace, "-p", "pytorch", "-o", plain).code == 0
    head, _ = _policy_table(plain)
    # The verdict column says what `fits` would; a caching allocator's replay has no range.
    assert "verdict" in head and "fits" not in head
    assert not any("range" in h for h in head), head
    # cuda-async's predicted range (docs/cuda-async-band.md), in GiB, the ends the replay gives.
    assert run_subprocess("report", trace, "-p", "pytorch", "-p", "cuda-async", "-o", spread).code == 0
    head, rows = _policy_table(spread)
    low, high = head.index("peak reserved, range low"), head.index("peak reserved, range high")
    row = next(r for r in rows if r[head.index("policy")] == "cuda-async")
    s = allocreplay.replay(trace, ["cuda-async"], placements=False).summary.row(0, named=True)
    assert s["peak_reserved_low_bytes"] < s["peak_reserved_high_bytes"]
    from allocreplay._api import format_bytes

    assert (row[low], row[high]) == (format_bytes(s["peak_reserved_low_bytes"]), format_bytes(s["peak_reserved_high_bytes"]))
