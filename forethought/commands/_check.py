"""``forethought check SPEC``: every problem of a spec or scenario, with no model loaded.

Prints each problem (path, value, fix), then, for a spec that loads, what the planner would
have to precompute: the event keys per reachable state (the initial state and those event
effects lead to) and the planning cost in branches, tokens and seconds under a device profile.
Token counts are estimates (about 3.5 characters per token, the range of small BPE
vocabularies on JSON and English): no tokenizer is loaded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from forethought.models import LatencyModel, LatencyProfile
from forethought.models.internals import state_text
from forethought.planner import PlannerConfig
from forethought.policies import (
    AgentSpec,
    ConfigError,
    ForethoughtError,
    Problem,
    WorldState,
    check_spec,
)
from forethought.policies.internals import load_document
from forethought.sims import resolve_profile
from forethought.sims.internals import SCENARIO_KEYS, check_accept, check_scenario

__all__ = ["CheckResult", "PlanCost", "plan_cost", "reachable_states", "run_check"]

_CHARS_PER_TOKEN = 3.5
REPLAY_KEYS = ("trace", "generate", "mcap")
"""The keys that make a file a scenario to check as one (a spec may carry a profile, say)."""
_MAX_STATES = 256


@dataclass(frozen=True, slots=True)
class TypeCost:
    """One event type's share of the planning work."""

    type: str
    keys: int
    states: int
    depends_on: tuple[str, ...] | None

    @property
    def branches(self) -> int:
        """Keys times the distinct states (as this type's fingerprint sees them)."""
        return self.keys * self.states


@dataclass(frozen=True, slots=True)
class PlanCost:
    """What filling the tree for a spec costs: per type, and in total under a profile."""

    states: int
    capped: bool
    types: tuple[TypeCost, ...]
    tokens_per_action: int
    prompt_tokens: int
    profile: str
    seconds: float
    figures: LatencyProfile
    """The profile's figures (``profile`` is its name, or the figures as given)."""

    @property
    def branches(self) -> int:
        """Every (state, key) the planner would write."""
        return sum(t.branches for t in self.types)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The problems found, and the plan cost when the spec loads."""

    problems: tuple[Problem, ...]
    cost: PlanCost | None

    @property
    def errors(self) -> int:
        """How many problems are errors."""
        return sum(p.severity == "error" for p in self.problems)


def reachable_states(spec: AgentSpec) -> tuple[list[WorldState], bool]:
    """The initial state and every state event effects lead to (breadth first, capped)."""
    space = spec.event_space()
    start = spec.initial_state()
    seen = {start.to_json(): start}
    frontier = [start]
    while frontier and len(seen) < _MAX_STATES:
        nxt = []
        for state in frontier:
            for key in space:
                after = state.after(space.types[key.type], key)
                if after.to_json() not in seen and len(seen) < _MAX_STATES:
                    seen[after.to_json()] = after
                    nxt.append(after)
        frontier = nxt
    return list(seen.values()), bool(frontier)


DEFAULT_PROFILE = "cpu-2core-smollm2"


def plan_cost(spec: AgentSpec, profile: str = DEFAULT_PROFILE) -> PlanCost:
    """Branches per type over the reachable states, and seconds to plan them all on ``profile``.

    Seconds: one batched call per (state, type) group of up to the planner's batch size, each a
    prefill of the context and the rows' event texts, then one decode pass per action token.
    """
    states, capped = reachable_states(spec)
    space = spec.event_space()
    schema = spec.action_schema()
    action_text = schema.compact(schema.validate(spec.default_action))
    tokens = max(1, round(len(action_text) / _CHARS_PER_TOKEN))
    figures = resolve_profile(profile)
    law = LatencyModel(figures, fixed=True)
    batch = PlannerConfig().batch_size
    abstraction = spec.state_abstraction()
    types = []
    seconds = 0.0
    prompt = max(len(state_text(spec.description, s.to_json())) for s in states)
    context_tokens = round(prompt / _CHARS_PER_TOKEN)
    for name in space.types:
        keys = [k for k in space if k.type == name]
        fps = {s.fingerprint_for(name) for s in states}
        fields = abstraction.fields_for(name)
        types.append(TypeCost(name, len(keys), len(fps), fields))
        event_tokens = max(round(len(k.describe()) / _CHARS_PER_TOKEN) for k in keys)
        for _ in fps:
            left = len(keys)
            while left > 0:
                rows = min(left, batch)
                seconds += law.call(context_tokens + rows * event_tokens, tokens, rows=rows).p50
                left -= rows
    return PlanCost(
        states=len(states),
        capped=capped,
        types=tuple(types),
        tokens_per_action=tokens,
        prompt_tokens=context_tokens,
        profile=profile,
        seconds=seconds,
        figures=figures,
    )


def pricing_profile(given: str | None, data: object) -> str:
    """The profile the plan is priced under: ``given`` (``--profile``), else the file's.

    Else the default. Figures are kept as ``step_ms=X,prefill_us_per_token=Y``; a profile that needs
    the model (``cpu-measured``) is refused, since check loads none.
    """
    text = given
    if text is None and isinstance(data, dict):
        own = data.get("profile")
        if isinstance(own, dict):
            text = ",".join(f"{k}={v}" for k, v in own.items())
        elif isinstance(own, str):
            text = own
    text = text or DEFAULT_PROFILE
    if text == "cpu-measured":
        raise ConfigError(
            "--profile",
            text,
            "check loads no model to measure with: give a shipped profile "
            "or figures (step_ms=X,prefill_us_per_token=Y)",
        )
    resolve_profile(text)  # a ConfigError naming the value and the choices
    return text


def check_file(
    path: Path, *, scenario: bool | None = None, profile: str | None = None
) -> CheckResult:
    """Check ``path``: as a scenario when it has a trace/generate block or ``scenario`` is set.

    The plan is priced under ``profile`` (a name or figures), else the file's ``profile:``.
    """
    if profile is not None:
        pricing_profile(profile, None)  # a bad --profile is refused before anything is read
    data = load_document(path)
    as_scenario = scenario or (
        scenario is None and isinstance(data, dict) and any(k in data for k in REPLAY_KEYS)
    )
    spec_log = logging.getLogger("forethought.spec")
    level = spec_log.level
    spec_log.setLevel(logging.ERROR)  # the warnings are this command's output, once
    try:
        problems = (
            check_scenario(data, str(path))
            if as_scenario
            else check_spec(data, extra_keys=SCENARIO_KEYS)
        )
        if not as_scenario:
            problems += check_accept(data)  # grading rules a spec file carries for later
        cost = None
        priced: str | None = None
        try:
            priced = pricing_profile(profile, data)
        except ConfigError as exc:  # the file's own profile: one more problem of the file
            problems.append(Problem("error", "profile", exc.value, exc.problem))
        if priced is not None and not any(p.severity == "error" for p in problems):
            header = {k: v for k, v in data.items() if k not in SCENARIO_KEYS}
            header["events"] = [
                {k: v for k, v in e.items() if k != "accept"} for e in header["events"]
            ]
            try:
                cost = plan_cost(AgentSpec.from_data(header, source=str(path)), priced)
            except ForethoughtError as exc:  # a rule the checker does not know of
                problems.append(Problem("error", str(path), None, str(exc)))
    finally:
        spec_log.setLevel(level)
    return CheckResult(tuple(problems), cost)


def print_result(result: CheckResult, path: Path, out: TextIO) -> None:
    """The problems, then the keys per state and the planning cost."""
    for p in result.problems:
        print(p.line(), file=out)
    cost = result.cost
    if cost is not None:
        more = " (capped)" if cost.capped else ""
        print(f"event keys per state ({cost.states} reachable states{more}):", file=out)
        width = max(len(t.type) for t in cost.types)
        for t in cost.types:
            on = ", ".join(t.depends_on) if t.depends_on is not None else "all state fields"
            if t.depends_on == ():
                on = "no state field"
            print(
                f"  {t.type:<{width}}  {t.keys:>5} keys x {t.states:>3} states = "
                f"{t.branches:>6} branches  (depends on {on})",
                file=out,
            )
        fig = cost.figures
        print(
            f"planning cost: {cost.branches} branches x ~{cost.tokens_per_action} tokens = "
            f"~{cost.branches * cost.tokens_per_action} tokens; ~{cost.seconds:.1f} s to plan "
            f"them all under {cost.profile} (step {fig.step_base_s * 1e3:.3g} ms, prefill "
            f"{fig.prefill_per_token_s * 1e6:.0f} us/token; tokens estimated, no model loaded)",
            file=out,
        )
    n_warn = len(result.problems) - result.errors
    verdict = "ok" if result.errors == 0 else "invalid"
    print(f"{path}: {verdict}: {result.errors} errors, {n_warn} warnings", file=out)


def run_check(path: Path, *, scenario: bool | None, profile: str | None, out: TextIO) -> int:
    """``forethought check``: 0 when the file has no errors (warnings allowed), else 1."""
    result = check_file(path, scenario=scenario, profile=profile)
    print_result(result, path, out)
    return 1 if result.errors else 0
