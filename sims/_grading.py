"""Grading: which actions a domain expert accepts for an event, as rules in the scenario.

An event type may carry ``accept``, applying to every event of that type (a trace event's own
``accept`` overrides its type's). It is either a list of partial actions, or rules tried in
order, the first whose ``when`` holds deciding::

    accept:
      - when: {distance_m: {max: 1.5}}            # params, or state.<field>
        then: [{action: stop}]
      - when: {side: [left, right]}               # a list: any of these values
        then: [{action: slow_down}, {action: stop}]
      - then: [{action: stop}, {action: slow_down}]   # no `when`: the catch-all

Conditions read the event's parameters as received (not snapped to the grid) and the state at
the time of the event. A partial action matches an action when each field it names is equal
(for numbers, a ``{min, max}`` range also works). Checked at load: every field, rule and
condition must make sense for the spec, or the load fails naming the file and the path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.policies import ActionForm, ActionSchema, ConfigError, ForethoughtError
from forethought.policies._events import EventType

__all__ = ["Grader", "Rule", "matches"]

_Value = Any


def _range(v: Any) -> bool:
    return isinstance(v, Mapping) and set(v) <= {"min", "max"} and bool(v)


def matches(value: Any, want: _Value) -> bool:
    """Whether ``value`` satisfies one condition or partial-action field ``want``."""
    if _range(want):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        lo, hi = want.get("min"), want.get("max")
        return (lo is None or value >= lo) and (hi is None or value <= hi)
    if isinstance(want, list):
        return any(matches(value, w) for w in want)
    if isinstance(want, bool) or isinstance(value, bool):
        return type(want) is type(value) and want == value  # true is never 1
    return bool(value == want)


@dataclass(frozen=True, slots=True)
class Rule:
    """``when`` every condition holds (none: always), the action must match one of ``then``."""

    when: tuple[tuple[str, _Value], ...]
    then: tuple[Mapping[str, _Value], ...]

    def applies(self, params: Mapping[str, Any], state: Mapping[str, Any]) -> bool:
        """Whether the conditions hold for this event's params and state."""
        for name, want in self.when:
            if name.startswith("state."):
                source, field = state, name.removeprefix("state.")
            else:
                source, field = params, name
            if field not in source or not matches(source[field], want):
                return False
        return True

    def accepts(self, action: Mapping[str, Any]) -> bool:
        """Whether ``action`` matches one of the partial actions."""
        return any(
            all(k in action and matches(action[k], v) for k, v in part.items())
            for part in self.then
        )


class Grader:
    """The accept rules of one event (its own, else its type's), checked against a spec."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._rules = tuple(rules)

    def __bool__(self) -> bool:
        return bool(self._rules)

    def grade(
        self, action: Mapping[str, Any], params: Mapping[str, Any], state: Mapping[str, Any]
    ) -> bool | None:
        """True or False by the first rule that applies; None when none does."""
        for rule in self._rules:
            if rule.applies(params, state):
                return rule.accepts(action)
        return None

    @classmethod
    def parse(
        cls,
        raw: Any,
        *,
        where: str,
        schema: ActionSchema,
        default: Mapping[str, Any],
        event_type: EventType | None,
        state: Mapping[str, Any],
    ) -> Grader:
        """Read ``accept`` data; errors name ``where`` (file and path) and the problem."""
        if not isinstance(raw, list) or not raw:
            raise ConfigError(where, raw, "accept must be a non-empty list")
        is_rule = [
            isinstance(e, Mapping) and "then" in e and set(e) <= {"when", "then"} for e in raw
        ]
        if any(is_rule) and not all(is_rule):
            raise ConfigError(where, raw, "mix of rules (when/then) and partial actions")
        if not all(is_rule):
            raw = [{"then": raw}]
        rules = []
        for i, entry in enumerate(raw):
            at = f"{where}[{i}]" if all(is_rule) else where
            when = entry.get("when", {})
            if not isinstance(when, Mapping):
                raise ConfigError(f"{at}.when", when, "must be a mapping of conditions")
            for name, want in when.items():
                _check_condition(f"{at}.when.{name}", name, want, event_type, state)
            then = entry["then"]
            if not isinstance(then, list) or not then:
                raise ConfigError(f"{at}.then", then, "must be a non-empty list of partial actions")
            for j, part in enumerate(then):
                _check_partial(
                    f"{at}.then[{j}]" if all(is_rule) else f"{at}[{j}]", part, schema, default
                )
            rules.append(Rule(tuple(when.items()), tuple(then)))
        return cls(rules)


def _check_condition(
    where: str, name: str, want: Any, event_type: EventType | None, state: Mapping[str, Any]
) -> None:
    if name.startswith("state."):
        field = name.removeprefix("state.")
        if field not in state:
            raise ConfigError(where, name, f"the spec's state has no field {field!r}")
    elif event_type is None or name not in event_type.params:
        declared = sorted(event_type.params) if event_type is not None else []
        raise ConfigError(where, name, f"not a declared parameter of this event type {declared}")
    if isinstance(want, Mapping) and not _range(want):
        raise ConfigError(where, dict(want), "a condition is a value, a list, or {min, max}")
    if isinstance(want, list) and not want:
        raise ConfigError(where, want, "an empty list matches nothing")


def _check_partial(where: str, part: Any, schema: ActionSchema, default: Mapping[str, Any]) -> None:
    if not isinstance(part, Mapping) or not part:
        raise ConfigError(where, part, "a partial action is a non-empty mapping")
    fields = schema.json_schema(ActionForm.VERBOSE).get("properties", {})
    unknown = sorted(set(part) - set(fields))
    if unknown:
        raise ConfigError(where, dict(part), f"unknown action fields {unknown}")
    exact = {k: v for k, v in part.items() if not _range(v) and not isinstance(v, list)}
    try:
        schema.validate({**default, **exact})
    except ForethoughtError as exc:
        raise ConfigError(where, dict(part), f"cannot match any valid action: {exc}") from None
