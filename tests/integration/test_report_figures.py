"""The report's figures, checked from their data (not pixels), and the page in a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from forethought.models import ScriptedBackend
from forethought.sims import load_scenario, replay, write_report
from forethought.sims._report_figures import (
    LATENCY_AXIS,
    draw_cdf,
    draw_timeline,
    report_data,
    type_table_html,
)

SCENARIO: dict[str, Any] = {
    "name": "t",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle"},
    "events": [
        {"type": "ping", "deadline_ms": 150, "params": {"d": [1, 2]}, "accept": [{"a": "go"}]},
        {"type": "block", "deadline_ms": 900, "effects": {"zone": "blocked"}},
        {"type": "never", "deadline_ms": 40},
    ],
    "trace": [
        {
            "at_ms": 1000 + 500 * i,
            "type": "block" if i == 3 else "ping",
            "params": {} if i == 3 else {"d": 1 + i % 2},
        }
        for i in range(8)
    ]
    + [{"at_ms": 6000, "type": "fault", "params": {}}],
}


@pytest.fixture
def replayed(tmp_path: Path) -> tuple[Any, Any]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    scenario = load_scenario(path)
    runs = replay(scenario, lambda: ScriptedBackend(live_s=0.1, action={"a": "go"}))
    return scenario, runs


def test_every_declared_type_has_a_row_and_one_without_events_says_so(
    replayed: tuple[Any, Any],
) -> None:
    scenario, runs = replayed
    data = report_data(scenario, runs)
    assert data.types == ("ping", "block", "never", "fault")
    for strategy in runs:
        rows = {r.type: r for r in data.rows if r.strategy == strategy}
        assert set(rows) == set(data.types)
        assert rows["never"].events == 0
        assert rows["never"].answered_in_time is None
        assert rows["ping"].events == 7
        assert rows["block"].events == 1
    page = type_table_html(data)
    assert "never (40 ms)" in page
    assert "fault (undeclared)" in page
    assert page.count("no events") == len(runs)


def test_tree_answers_show_on_the_log_axis_at_their_selection_time(
    replayed: tuple[Any, Any],
) -> None:
    scenario, runs = replayed
    data = report_data(scenario, runs)
    tree = [r for r in runs["tree"].records if r.tier == "tree"]
    assert tree, "the planner answered nothing from the tree"
    by_index = dict(
        zip([r.index for r in runs["tree"].records], data.latencies_ms["tree"], strict=True)
    )
    for r in tree:
        assert by_index[r.index] == r.latency_ms + r.decide_cpu_ms
        assert by_index[r.index] > 0.0


def test_the_cdf_labels_each_types_deadline_and_the_timeline_has_a_lane_per_type(
    replayed: tuple[Any, Any],
) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    scenario, runs = replayed
    data = report_data(scenario, runs)
    fig = draw_cdf(plt, data)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == LATENCY_AXIS  # the table's definition, named on the axis
    labels = " ".join(t.get_text() for t in ax.texts)
    for t in ("ping", "block", "never"):
        assert t in labels
    deadlines = sorted({line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--"})
    assert deadlines == [40, 150, 900]
    plt.close(fig)
    fig = draw_timeline(plt, data)
    assert len(fig.axes) == len(runs)
    for ax in fig.axes:
        ticks = [t.get_text() for t in ax.get_yticklabels()]
        assert ticks == [*data.types, "planner 0 %", "planner 100 %"]  # the band's scale
    plt.close(fig)
    for name in runs:
        lanes = {lane.type: lane for lane in data.lanes[name]}
        assert set(lanes) == set(data.types)
        assert len(lanes["ping"].points) == 7
        assert lanes["never"].points == ()
        assert data.state_changes_s[name] == (3.0,)  # the first event after the block (2.5 s)
    assert data.planner["tree"]
    assert data.planner["live"] == ()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

_IMAGE_CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);
  document.body.setAttribute('data-images', String(imgs.length));
  document.body.setAttribute('data-broken', bad.join(' ') || 'none');
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup --broker)")
def test_the_report_renders_in_headless_chromium(replayed: tuple[Any, Any], tmp_path: Path) -> None:
    scenario, runs = replayed
    index = write_report(tmp_path / "report", scenario, runs)
    checked = index.with_name("checked.html")
    checked.write_text(index.read_text().replace("</body>", _IMAGE_CHECK + "</body>"))
    assert CHROMIUM is not None
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--virtual-time-budget=5000",
        "--enable-logging=stderr",
        "--v=0",
    ]
    out = subprocess.run(
        [*common, "--dump-dom", checked.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    body = re.search(r"<body([^>]*)>", out.stdout)
    assert body is not None, out.stdout[:500]
    assert 'data-images="3"' in body.group(1)
    assert 'data-broken="none"' in body.group(1)
    for t in ("ping", "block", "never", "fault"):
        assert t in out.stdout
    console = [ln for ln in out.stderr.splitlines() if "CONSOLE" in ln and "rror" in ln]
    assert console == []
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1000,2200", index.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes().startswith(b"\x89PNG")
