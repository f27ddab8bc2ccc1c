"""Every number the simulator prints is explained: each row label is defined on the scoreboard
page, and each report figure has a caption that says what to read and one latency definition."""

from __future__ import annotations

import colorsys
import re
from pathlib import Path

from forethought.commands._sim_side_by_side import _ROWS as SIDE_BY_SIDE_ROWS
from forethought.sims._report import CAPTIONS, TABLE_ROWS
from forethought.sims._report_figures import LATENCY_AXIS, TIER_COLORS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "scoreboard.md"


def _defined() -> set[str]:
    text = PAGE.read_text()
    section = text[text.index("## Rows of the table") :]
    section = section[: section.index("\nCorrectness is")]
    cells = re.findall(r"^\| ([^|]+) \|", section, flags=re.MULTILINE)
    return {name for cell in cells for name in re.findall(r"`([^`]+)`", cell)}


def test_every_printed_row_label_is_defined_on_the_scoreboard_page() -> None:
    defined = _defined()
    missing = [label for label in TABLE_ROWS if label not in defined]
    assert missing == [], f"rows printed by `forethought sim` not defined: {missing}"
    text = PAGE.read_text()
    for label, _ in SIDE_BY_SIDE_ROWS:
        assert f"`{label}`" in text, label


def test_each_figure_has_a_caption_that_says_what_to_read() -> None:
    assert set(CAPTIONS) == {"latency_cdf.png", "timeline.png", "hit_rate_by_type.png"}
    for name, caption in CAPTIONS.items():
        assert "Read " in caption, name
        assert name not in caption


def test_one_latency_definition_named_on_the_axis_and_on_the_page() -> None:
    assert "stimulus to decision" in LATENCY_AXIS
    assert "perception included" in LATENCY_AXIS
    assert "from the stimulus to the decision, perception included" in PAGE.read_text()


def test_tiers_have_distinct_colours() -> None:
    def hue(colour: str) -> float:
        r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
        return colorsys.rgb_to_hsv(r, g, b)[0] * 360

    hues = [hue(c) for c in TIER_COLORS.values()]
    for i, a in enumerate(hues):
        for b in hues[i + 1 :]:
            # At least 30 degrees of hue apart (the old score/live/default oranges were 15).
            assert min(abs(a - b), 360 - abs(a - b)) >= 30, (a, b)
