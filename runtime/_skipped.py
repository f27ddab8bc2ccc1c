"""Why a tier was passed over: the reasons a decision carries, in words and on the wire.

The executor fills a decision's ``skipped`` with ``(tier, why)`` pairs as it falls through the
tiers; :func:`skipped_payload` gives them as the wire's ``skipped`` object (one reason per tier,
``{"score": "action space not enumerable", "live": "p95 13.2 s > budget 680 ms: does not
fit"}``), so a
default on the bus says why no model tier answered. :func:`does_not_fit` words the commonest
reason, a tier whose predicted p95 is longer than what is left of the budget.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["does_not_fit", "seconds_text", "skipped_payload"]


def seconds_text(seconds: float) -> str:
    """A duration as people read it: ``0.4 ms``, ``680 ms``, ``13.2 s``."""
    if seconds >= 1.0:
        return f"{seconds:.1f} s"
    ms = seconds * 1e3
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def does_not_fit(predicted_s: float, left_s: float) -> str:
    """``p95 13.2 s > budget 680 ms: does not fit``: the predicted p95 against what is left."""
    left = seconds_text(max(left_s, 0.0))
    return f"p95 {seconds_text(predicted_s)} > budget {left}: does not fit"


def skipped_payload(skipped: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The ``(tier, why)`` pairs as one reason per tier (a tier passed over twice: joined)."""
    out: dict[str, str] = {}
    for tier, why in skipped:
        out[tier] = f"{out[tier]}; {why}" if tier in out else why
    return out
