"""Write docs/results/clock-agreement.md from docs/results/clock-agreement.json.

python scripts/clock_agreement_md.py [JSON] [MD]
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
TARGET_POINTS = 5.0


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _tiers(m: dict[str, Any]) -> str:
    t = m["tiers"]
    return "/".join(str(t.get(k, 0)) for k in ("tree", "score", "live", "default"))


def _scenario(s: dict[str, Any]) -> list[str]:
    p = s["virtual"]["profile"]
    lines = [
        f"## {s['scenario']}",
        "",
        f"{s['events']} events, seed {s['seed']}; load average when it started "
        f"{s['load_1m']:.2f}. Virtual clock charged by `{p['name']}` as measured then: decode "
        f"step {p['step_ms']:.1f} ms + {p['step_per_row_ms']:.2f} ms per further row, prefill "
        f"{p['prefill_ms']:.1f} ms + {p['prefill_us_per_token']:.0f} us/token, spread95 "
        f"{p['spread95']:.2f}; a call's own work p50/p95 {p['call_p50_ms']:.1f}/"
        f"{p['call_p95_ms']:.1f} ms, a decode pass's {p['pass_p50_ms']:.1f}/"
        f"{p['pass_p95_ms']:.1f} ms (+{p['row_p50_ms']:.2f} ms per further row), tree "
        f"selection {p['select_p50_ms']:.3f}/{p['select_p95_ms']:.3f} ms; "
        + (
            f"a call after more than {p['idle_after_ms']:.0f} ms idle pays "
            f"{p['idle_p50_ms']:.1f}/{p['idle_p95_ms']:.1f} ms on top"
            + "".join(
                f", after {m[1]} ms {p[k]:.1f}/{p[f'idle_{m[1]}ms_p95_ms']:.1f} ms"
                for k in p
                if (m := re.fullmatch(r"idle_(\d+)ms_p50_ms", k))
            )
            + "."
            if "idle_after_ms" in p
            else "idle time measured free."
            if "idle_p50_ms" in p
            else ""
        )
        + (
            f" A fresh backend's first call (each strategy's, after idle time) took "
            f"{p['first_call_p50_x']:.2f}/{p['first_call_p95_x']:.2f}x its passes' charge."
            if "first_call_p50_x" in p
            else ""
        ),
        "",
        "| strategy | answered in time, virtual | answered in time, real | gap (points) "
        "| within 5 | tiers t/s/l/d virtual | tiers t/s/l/d real |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in s["gaps"]:
        if g["figure"] != "answered_in_time":
            continue
        name = g["strategy"]
        mv = s["virtual"]["strategies"][name]
        mr = s["real"]["strategies"][name]
        pts = g["points"]
        ok = "yes" if pts is not None and abs(pts) <= TARGET_POINTS else "**no**"
        lines.append(
            f"| {name} | {_pc(g['virtual'])} | {_pc(g['real'])} | {pts:+.1f} | {ok} "
            f"| {_tiers(mv)} | {_tiers(mr)} |"
        )
    lines += [
        "",
        "Other figures, virtual / real (gap in points):",
        "",
        "| strategy | correct in time | fallback rate | deadline hit rate |",
        "|---|---|---|---|",
    ]
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for g in s["gaps"]:
        by.setdefault(g["strategy"], {})[g["figure"]] = g
    for name, figs in by.items():
        cells = []
        for fig in ("correct_in_time", "fallback_rate", "deadline_hit_rate"):
            g = figs[fig]
            pts = "-" if g["points"] is None else f"{g['points']:+.1f}"
            cells.append(f"{_pc(g['virtual'])} / {_pc(g['real'])} ({pts})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Why each default was the default (the last tier's reason, events):", ""]
    for clock in ("virtual", "real"):
        for name, d in s[clock]["defaults"].items():
            reasons = "; ".join(f"{why}: {n}" for why, n in d["by_reason"].items()) or "none"
            live = d["live_answers_ms"]
            took = (
                f" (the {live['n']} live answers took {live['p50']:.0f} ms p50, "
                f"{live['p95']:.0f} ms p95 from the stimulus)"
                if live["n"]
                else ""
            )
            lines.append(f"- {name}, {clock} clock: {reasons}{took}")
    return [*lines, "", *_explained(s)]


def _span(xs: list[float]) -> str:
    """min-max (median), in ms."""
    if not xs:
        return "-"
    return f"{min(xs):.0f}-{max(xs):.0f} ms (median {statistics.median(xs):.0f} ms)"


def _median(xs: list[float]) -> str:
    return "-" if not xs else f"{statistics.median(xs):.0f} ms"


def _typical(xs: list[int]) -> str:
    return "-" if not xs else f"{statistics.median(xs):g}"


def _live_calls(s: dict[str, Any], clock: str, name: str) -> list[str]:
    """What decided one strategy's defaults on one clock, from its per-call log."""
    d = s[clock]["defaults"][name]
    log = s[clock]["calls"][name]["log"]
    declined = [e for e in d["events"] if "does not fit" in e["reason"]]
    p95s = [
        float(m.group(1)) for e in declined if (m := re.search(r"p95 ([0-9.]+) ms", e["reason"]))
    ]
    budgets = [e["budget_ms"] for e in declined if e["budget_ms"] is not None]
    live = [c for c in log if c["kind"] == "live"]
    measured = [c for c in log if c["kind"] == "measure"]
    ran = live + measured
    forward = [c["forward_ms"] for c in ran]
    predicted = [c["predicted_p95_ms"] for c in live if c["predicted_p95_ms"] is not None]
    took = [c["took_ms"] for c in ran]
    would = statistics.median(took) if took else None
    fits = sum(b >= would for b in budgets) if would is not None else 0
    others = len(d["events"]) - len(declined)
    lines = [
        f"- **{clock} clock**: {len(d['events'])} defaults; {len(declined)} declined by the p95 "
        f"check before any model work (budget {_span(budgets)}; the live tier's p95 then "
        f"{_span(p95s)})"
        + (f"; {others} for other reasons (listed below)" if others else "")
        + ".",
        f"  The model ran {len(live)} live call(s) and {len(measured)} background latency "
        "measurement(s)"
        + (f" (the live calls' p95 when handed over: {_median(predicted)})" if predicted else "")
        + f": they took {_median(took)} on the worker ({_median(forward)} in "
        f"forward passes, {_typical([c['prefills'] for c in ran])} prefill(s) and "
        f"{_typical([c['steps'] for c in ran])} decode pass(es)), after "
        f"{_median([c['idle_before_ms'] for c in ran if c['idle_before_ms'] is not None])} idle"
        + (
            f"; {sum(c['idle_charged_ms'] > 0 for c in ran)} of them charged the idle cost"
            if clock == "virtual"
            else ""
        )
        + ".",
    ]
    if would is not None and declined:
        lines.append(
            f"  A call as long as their median would have fitted {fits} of the "
            f"{len(declined)} declined budgets"
            + (" (none was declined that would have fitted)." if fits == 0 else ".")
        )
    return lines


def _explained(s: dict[str, Any]) -> list[str]:
    """The live strategy's defaults on both clocks, explained from the per-call logs."""
    if "live" not in s["real"]["defaults"] or "calls" not in s["real"]:
        return []
    lines = [
        f"### What decided the live strategy's defaults on {s['scenario']}",
        "",
        "From the per-call log (`calls` in the JSON: every model call with the p95 predicted "
        "when it was handed over, what it took, its passes and the idle time before it):",
        "",
    ]
    for clock in ("real", "virtual"):
        lines += _live_calls(s, clock, "live")
    return [*lines, ""]


def render(data: dict[str, Any]) -> str:
    """The page."""
    m = data["machine"]
    events = data["events_per_scenario"]
    scope = "every event" if events is None else f"the first {events} events"
    out = [
        "# The virtual clock against the wall clock",
        "",
        "Each scenario replayed on this machine twice, on "
        f"{scope} of its trace: on the real clock right after a profile of this machine was "
        "measured (no profile used: every pass, hop and mask takes the time it takes), then on "
        "the virtual clock charged by that profile (`cpu-measured`: forward passes as calls "
        "through the real path ran them after the scenario's prompt prefix, each call's and "
        "each decode pass's own work, the cost of a call after each idle time, how much "
        "slower a fresh backend's first call runs, tree selection, all as measured "
        "distributions; the idle cost is charged inside a call's first pass, where the real "
        "clock measures it). The target: "
        "answered in time within 5 points on both clocks, for every strategy.",
        "",
        f"Generated by `scripts/clock_agreement_md.py` from `clock-agreement.json` (commit "
        f"`{data['commit']}`, {data['date']}; {m['cpu']}, {m['cores']} cores; model "
        f"{data['model']}; profile {data['profile']}; rounds: profile measurement "
        f"{data['rounds']['profile_measurement']}, replays {data['rounds']['replays']}; "
        f"{data['wall_s']:.0f} s in all). Rerun with "
        f"`python benchmarks/clock_agreement.py{'' if events is None else f' --events {events}'}`.",
        "",
    ]
    for s in data["scenarios"]:
        out += _scenario(s)
    return "\n".join(out)


def main() -> None:
    """Read the JSON, write the page."""
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/results/clock-agreement.json"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else src.with_suffix(".md")
    dst.write_text(render(orjson.loads(src.read_bytes())), encoding="utf-8")
    print(dst)


if __name__ == "__main__":
    main()
