"""The proof that the safe default keeps every guard in every declared state and event.

The default is one fixed action per event type (its own ``default_action``, else the spec's),
so whether it breaks a guard does not depend on the event: only whether the guard *applies*
does. A guard's ``when`` is a conjunction of conditions on single fields, so it can hold for
some declared (state, event) exactly when each condition has a witness in its field's declared
domain: an event parameter's values (a list, or any number within a grid's range: events carry
raw readings), a categorical state field's values (:class:`StateDomain`: the initial one and
those effects set), a numeric state field any number. The search is therefore exact and linear
in the conditions: no enumeration of the product of domains. A counter-example names the guard,
the event (type and parameters) and the state. Events of an undeclared type get the spec's
default with no parameters; a guard whose ``when`` reads only the state is proved for them too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._action import ActionSchema
from ._events import EventType, Grid
from ._guards import Guard, GuardRule, GuardSet, is_range, pattern_matches


class SpecFields(Protocol):
    """What the proof reads of a spec.

    A protocol: the spec's model runs this proof, so this module does not import it.
    """

    @property
    def guards(self) -> Sequence[GuardRule]: ...
    @property
    def events(self) -> Sequence[EventType]: ...
    @property
    def state(self) -> Mapping[str, Any]: ...
    @property
    def default_action(self) -> Mapping[str, Any]: ...
    def action_schema(self) -> ActionSchema: ...


__all__ = ["DefaultBreach", "default_breaches", "guard_errors"]

_NONE = object()


@dataclass(frozen=True, slots=True)
class DefaultBreach:
    """A declared (state, event) in which a default breaks a guard."""

    guard: str
    path: str
    """Which default: ``default_action`` or ``events[i].default_action``."""
    event_type: str | None
    """None: an event of an undeclared type."""
    params: dict[str, Any]
    state: dict[str, Any]
    action: dict[str, Any]

    def describe(self) -> str:
        """One sentence: the guard, the default, the state and the event."""
        event = (
            f"event {self.event_type} {self.params}"
            if self.event_type is not None
            else "an event of an undeclared type"
        )
        return (
            f"the default {self.action} breaks guard {self.guard!r} in state {self.state} "
            f"on {event}"
        )


def default_breaches(spec: SpecFields, guards: GuardSet | None = None) -> list[DefaultBreach]:
    """Every guard a default breaks, each with one declared (state, event) that shows it."""
    guards = guards if guards is not None else GuardSet(spec.guards)
    if not guards:
        return []
    values = _state_domain(spec)
    out = []
    for i, t in enumerate(spec.events):
        default = t.default_action if t.default_action is not None else spec.default_action
        path = f"events[{i}].default_action" if t.default_action is not None else "default_action"
        out += _breaches(guards, default, path, t, spec.state, values)
    out += _breaches(guards, spec.default_action, "default_action", None, spec.state, values)
    return out


def _breaches(
    guards: GuardSet,
    default: Mapping[str, Any],
    path: str,
    t: EventType | None,
    state: Mapping[str, Any],
    values: Mapping[str, list[Any] | None],
) -> list[DefaultBreach]:
    out = []
    for g in guards.guards:
        if g.permits(default):
            continue
        found = _witness(g, t, state, values)
        if found is not None:
            params, st = found
            out.append(
                DefaultBreach(g.name, path, t.type if t else None, params, st, dict(default))
            )
    return out


def _witness(
    g: Guard,
    t: EventType | None,
    initial: Mapping[str, Any],
    values: Mapping[str, list[Any] | None],
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A declared (params, state) in which ``g`` applies to an event of ``t``, or None."""
    params: dict[str, Any] = {}
    if t is not None:
        for name, domain in t.params.items():
            params[name] = domain.values()[0] if isinstance(domain, Grid) else domain[0]
    state = dict(initial)
    for from_state, field, want in g.when:
        if from_state:
            if field not in values:
                return None
            declared = values[field]
            v = _number_witness(want) if declared is None else _first(declared, want)
        else:
            if t is None or field not in t.params:
                return None
            v = _param_witness(t.params[field], want)
        if v is _NONE:
            return None
        (state if from_state else params)[field] = v
    return params, state


def _state_domain(spec: SpecFields) -> dict[str, list[Any] | None]:
    """Per declared state field, the values it can take (None: a number, any value).

    What ``StateDomain`` in ``_spec_check`` declares (the initial value, the literals effects
    set, the list parameters an effect copies), kept as values rather than reprs: the proof
    matches them against conditions. Its own copy so that the spec's model, which runs this
    proof, does not import the checker that imports the model.
    """
    values: dict[str, list[Any] | None] = {}
    for field, initial in spec.state.items():
        number = isinstance(initial, int | float) and not isinstance(initial, bool)
        # A boolean can be patched to either value at run time (update_state, a trace's state).
        either = [False, True] if isinstance(initial, bool) else [initial]
        values[field] = None if number else either
    for t in spec.events:
        for field, value in t.effects.items():
            known = values.get(field)
            if known is None:
                continue
            if isinstance(value, str) and value.startswith("$"):
                domain = t.params.get(value[1:])
                if isinstance(domain, Grid):
                    values[field] = None
                elif domain is not None:
                    known += [v for v in domain if v not in known]
            elif value not in known:
                known.append(value)
    return values


def _first(options: list[Any], want: Any) -> Any:
    return next((v for v in options if pattern_matches(v, want)), _NONE)


def _param_witness(domain: list[Any] | Grid, want: Any) -> Any:
    if not isinstance(domain, Grid):
        return _first(domain, want)
    on_grid = _first(domain.values(), want)
    if on_grid is not _NONE:
        return on_grid
    # Events carry raw readings: any number within the grid's range may arrive.
    for w in want if isinstance(want, list) else [want]:
        if is_range(w):
            lo = max(w.get("min", -math.inf), domain.min)
            hi = min(w.get("max", math.inf), domain.max)
            if lo <= hi:
                return lo
        elif _number(w) and domain.min <= w <= domain.max:
            return w
    return _NONE


def _number(w: Any) -> bool:
    return isinstance(w, int | float) and not isinstance(w, bool)


def _number_witness(want: Any) -> Any:
    for w in want if isinstance(want, list) else [want]:
        if is_range(w):
            return w.get("min", w.get("max"))
        if _number(w):
            return w
    return _NONE


def guard_errors(spec: SpecFields) -> list[str]:
    """What makes a spec's guards or defaults unusable, each naming the path and the fix.

    Names unique; pattern fields that are action fields; conditions on declared parameters
    (of some event type) and declared state fields; each type's ``default_action`` valid;
    every default keeping every guard (:func:`default_breaches`).
    """
    from ._errors import ForethoughtError  # noqa: PLC0415

    schema = spec.action_schema()
    out = []
    for i, t in enumerate(spec.events):
        if t.default_action is not None:
            try:
                schema.validate(t.default_action)
            except ForethoughtError as exc:
                out.append(f"events[{i}].default_action: does not validate against action: {exc}")
    out += _rule_errors(spec, set(schema.portable().get("properties", {})))
    if out:
        return out
    for breach in default_breaches(spec):
        fix = (
            "give that event type its own default_action that keeps the guard"
            if breach.event_type is not None
            else "change default_action so that it keeps the guard"
        )
        out.append(f"{breach.path}: {breach.describe()}; {fix}")
    return out


def _rule_errors(spec: SpecFields, fields: set[str]) -> list[str]:
    out = []
    params = {p for t in spec.events for p in t.params}
    seen: set[str] = set()
    for i, rule in enumerate(spec.guards):
        at = f"guards[{i}]"
        if rule.name in seen:
            out.append(f"{at}.name: {rule.name!r} is used twice; give each guard its own name")
        seen.add(rule.name)
        for j, part in enumerate(rule.patterns):
            unknown = sorted(set(part) - fields)
            if unknown:
                kind = "forbid" if rule.forbid is not None else "allow"
                out.append(
                    f"{at}.{kind}[{j}]: unknown action fields {unknown} (known: {sorted(fields)})"
                )
        for name in rule.when:
            if name.startswith("state."):
                if name.removeprefix("state.") not in spec.state:
                    out.append(
                        f"{at}.when.{name}: the spec's state has no field "
                        f"{name.removeprefix('state.')!r}; declare it in state"
                    )
            elif name not in params:
                out.append(
                    f"{at}.when.{name}: no event type declares a parameter {name!r} "
                    f"(declared: {sorted(params)}); write state.{name} for a state field"
                )
    return out
