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

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forethought.policies import ActionForm, ActionSchema, ConfigError, ForethoughtError
from forethought.policies.internals import EventType

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
        params = event_type.params if event_type is not None else None
        rules, problems = _read(raw, where, schema, default, params, state)
        if problems:
            raise problems[0]
        return cls(rules)

    @staticmethod
    def problems(
        raw: Any,
        *,
        where: str,
        schema: ActionSchema | None,
        default: Mapping[str, Any] | None,
        params: Collection[str] | None,
        state: Mapping[str, Any],
    ) -> list[ConfigError]:
        """Every problem of ``accept`` data (``check``'s), not only the first.

        ``schema``/``default`` None (the spec's action does not load): partial actions are
        not checked against it; ``params`` None: the event type is unknown.
        """
        return _read(raw, where, schema, default, params, state)[1]


def _read(
    raw: Any,
    where: str,
    schema: ActionSchema | None,
    default: Mapping[str, Any] | None,
    params: Collection[str] | None,
    state: Mapping[str, Any],
) -> tuple[list[Rule], list[ConfigError]]:
    """The rules of ``accept`` data and every problem found, in document order."""
    if not isinstance(raw, list) or not raw:
        return [], [ConfigError(where, raw, "accept must be a non-empty list")]
    is_rule = [isinstance(e, Mapping) and "then" in e and set(e) <= {"when", "then"} for e in raw]
    if any(is_rule) and not all(is_rule):
        return [], [ConfigError(where, raw, "mix of rules (when/then) and partial actions")]
    if not all(is_rule):
        raw = [{"then": raw}]
    rules: list[Rule] = []
    problems: list[ConfigError] = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]" if all(is_rule) else where
        when = entry.get("when", {})
        if not isinstance(when, Mapping):
            problems.append(ConfigError(f"{at}.when", when, "must be a mapping of conditions"))
            when = {}
        for name, want in when.items():
            problems += _condition_problems(f"{at}.when.{name}", name, want, params, state)
        then = entry["then"]
        if not isinstance(then, list) or not then:
            problems.append(
                ConfigError(f"{at}.then", then, "must be a non-empty list of partial actions")
            )
            continue
        for j, part in enumerate(then):
            path = f"{at}.then[{j}]" if all(is_rule) else f"{at}[{j}]"
            problems += _partial_problems(path, part, schema, default)
        rules.append(Rule(tuple(when.items()), tuple(then)))
    return rules, problems


def _condition_problems(
    where: str,
    name: str,
    want: Any,
    params: Collection[str] | None,
    state: Mapping[str, Any],
) -> list[ConfigError]:
    out = []
    if name.startswith("state."):
        field = name.removeprefix("state.")
        if field not in state:
            out.append(ConfigError(where, name, f"the spec's state has no field {field!r}"))
    elif params is None or name not in params:
        declared = sorted(params) if params is not None else []
        out.append(
            ConfigError(where, name, f"not a declared parameter of this event type {declared}")
        )
    if isinstance(want, Mapping) and not _range(want):
        out.append(ConfigError(where, dict(want), "a condition is a value, a list, or {min, max}"))
    if isinstance(want, list) and not want:
        out.append(ConfigError(where, want, "an empty list matches nothing"))
    return out


def _partial_problems(
    where: str, part: Any, schema: ActionSchema | None, default: Mapping[str, Any] | None
) -> list[ConfigError]:
    """A partial action's problems: not a mapping, unknown fields, values no action can have.

    Each exact value (and each member of a list of values) is tried in the default action,
    so a value outside a field's enum or bounds is named on its own.
    """
    if not isinstance(part, Mapping) or not part:
        return [ConfigError(where, part, "a partial action is a non-empty mapping")]
    if schema is None:
        return []
    fields = schema.json_schema(ActionForm.VERBOSE).get("properties", {})
    unknown = sorted(set(part) - set(fields))
    out = []
    if unknown:
        out.append(
            ConfigError(
                where,
                dict(part),
                f"unknown action fields {unknown} (known: {', '.join(sorted(fields))})",
            )
        )
    if default is None:
        return out
    exact: dict[str, Any] = {}
    for key, value in part.items():
        if key in unknown or _range(value):
            continue
        for one in value if isinstance(value, list) else [value]:
            if _range(one):
                continue
            try:
                schema.validate({**default, key: one})
            except ForethoughtError as exc:
                out.append(
                    ConfigError(f"{where}.{key}", one, f"cannot match any valid action: {exc}")
                )
        if not isinstance(value, list):
            exact[key] = value
    if not out:
        try:
            schema.validate({**default, **exact})
        except ForethoughtError as exc:
            out.append(ConfigError(where, dict(part), f"cannot match any valid action: {exc}"))
    return out


def _check_condition(
    where: str, name: str, want: Any, event_type: EventType | None, state: Mapping[str, Any]
) -> None:
    """Raise the first problem of one ``when`` condition (for readers that stop at it)."""
    params = event_type.params if event_type is not None else None
    problems = _condition_problems(where, name, want, params, state)
    if problems:
        raise problems[0]


def _check_partial(
    where: str, part: Any, schema: ActionSchema | None, default: Mapping[str, Any] | None
) -> None:
    """Raise the first problem of one partial action (for readers that stop at it)."""
    problems = _partial_problems(where, part, schema, default)
    if problems:
        raise problems[0]
