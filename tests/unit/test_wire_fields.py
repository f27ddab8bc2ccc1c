"""Every field a decision carries on the wire is documented, and a default says why."""

from __future__ import annotations

import re
from pathlib import Path

from forethought.runtime import Decision, Tier
from forethought.runtime._skipped import does_not_fit, seconds_text, skipped_payload

TIERS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "tiers.md"
SEND_ONLY = {"round_trip_ms", "warning"}  # forethought.commands._run adds them to the reply


def _wire_table() -> set[str]:
    text = TIERS_PAGE.read_text()
    section = text[text.index("### On the wire") :]
    section = section[: section.index("\n\n", section.index("| wire field |"))]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE))


def test_every_wire_field_is_on_the_tiers_page() -> None:
    decision = Decision(
        event_id="e1",
        tier=Tier.DEFAULT,
        action={"a": "stop"},
        latency_s=0.001,
        budget_s=0.68,
        met=True,
        skipped=(("tree", "out of space"), ("live", does_not_fit(13.2, 0.68))),
    )
    assert _wire_table() == set(decision.payload()) | SEND_ONLY


def test_a_default_on_the_wire_says_why_each_tier_was_skipped() -> None:
    decision = Decision(
        event_id="e1",
        tier=Tier.DEFAULT,
        action={"a": "stop"},
        latency_s=0.001,
        budget_s=0.68,
        met=True,
        skipped=(
            ("tree", "out of space"),
            ("score", "action space not enumerable"),
            ("live", does_not_fit(13.162, 0.68)),
        ),
    )
    assert decision.payload()["skipped"] == {
        "tree": "out of space",
        "score": "action space not enumerable",
        "live": "p95 13.2 s > budget 680 ms: does not fit",
    }


def test_reasons_read_as_people_read_durations() -> None:
    assert seconds_text(0.0004) == "0.4 ms"
    assert seconds_text(0.68) == "680 ms"
    assert seconds_text(13.162) == "13.2 s"
    assert does_not_fit(0.5, -0.01) == "p95 500 ms > budget 0.0 ms: does not fit"
    assert skipped_payload([("live", "timed out"), ("live", "invalid action")]) == {
        "live": "timed out; invalid action"
    }
