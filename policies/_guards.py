"""Guards: rules no action may break, whatever tier wrote it.

A spec's ``guards`` are state- and event-dependent limits on the action::

    guards:
      - name: door-clear
        when: {state.person_in_doorway: true}     # accept's `when`: params, state.<field>
        forbid: [{command: close}]                # an action matching one is never sent
      - name: slow-near-people
        when: {state.people_near: true}
        allow: [{speed: {max: 0.3}}]              # only actions matching one may be sent

``when`` reads the event's parameters as received and the state at the event (each condition a
value, a list of values or a ``{min, max}`` range; none: always). Patterns are partial actions as
in ``accept``'s ``then``: each field they name must match (a value, a list, a range on numbers).

:class:`GuardSet` is the compiled form the executor asks on every decision (:meth:`refusal`:
a few dict lookups per guard), and what narrows the action schema per (state, event)
(:meth:`narrowed`: enum values removed, numeric bounds narrowed, cached per set of guards that
apply) so a model constrained by it cannot write what a compilable guard forbids. A guard that
cannot be compiled (a pattern over two fields together, a hole in a range) is still enforced at
selection; :meth:`not_compilable` names it and why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._action import ActionSchema

if TYPE_CHECKING:
    from ._tree import PolicyTree

__all__ = [
    "Guard",
    "GuardRule",
    "GuardSet",
    "compile_want",
    "drop_guarded",
    "pattern_matches",
]

_MISSING = object()


class _Readable(Protocol):
    def get(self, field: str, default: Any = None, /) -> Any: ...


def is_range(want: Any) -> bool:
    """Whether ``want`` is a ``{min, max}`` range (one or both ends)."""
    return isinstance(want, Mapping) and bool(want) and set(want) <= {"min", "max"}


def pattern_matches(value: Any, want: Any) -> bool:
    """Whether ``value`` satisfies one condition or pattern field ``want``.

    A range matches numbers within it (ends included); a list matches any of its members; a
    boolean matches only a boolean (``true`` is never ``1``); anything else by equality.
    """
    if is_range(want):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        lo, hi = want.get("min"), want.get("max")
        return (lo is None or value >= lo) and (hi is None or value <= hi)
    if isinstance(want, list):
        return any(pattern_matches(value, w) for w in want)
    if isinstance(want, bool) or isinstance(value, bool):
        return type(want) is type(value) and want == value
    return bool(value == want)


def _check_want(where: str, want: Any) -> None:
    if isinstance(want, Mapping):
        if not is_range(want):
            raise ValueError(f"{where}: a condition is a value, a list, or {{min, max}}")
        for end in want.values():
            if isinstance(end, bool) or not isinstance(end, int | float):
                raise ValueError(f"{where}: range ends must be numbers, not {end!r}")  # noqa: TRY004 - pydantic reports ValueErrors
        lo, hi = want.get("min"), want.get("max")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"{where}: min {lo} is above max {hi}")
    elif isinstance(want, list):
        if not want:
            raise ValueError(f"{where}: an empty list matches nothing")
        for i, w in enumerate(want):
            _check_want(f"{where}[{i}]", w)


class GuardRule(BaseModel):
    """One entry of the spec's ``guards``: a name, when it applies, and forbid or allow."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """Reports count refusals by it."""
    when: dict[str, Any] = Field(default_factory=dict)
    """Conditions on the event's parameters (as received) and ``state.<field>``; none: always."""
    forbid: list[dict[str, Any]] | None = None
    """An action matching any of these partial actions is never sent."""
    allow: list[dict[str, Any]] | None = None
    """Only an action matching one of these partial actions may be sent."""

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        if (self.forbid is None) == (self.allow is None):
            raise ValueError(f"guard {self.name!r}: give exactly one of forbid or allow")
        kind = "forbid" if self.forbid is not None else "allow"
        patterns = self.patterns
        if not patterns:
            raise ValueError(f"guard {self.name!r}: {kind} must list at least one pattern")
        for name, want in self.when.items():
            _check_want(f"when.{name}", want)
        for i, part in enumerate(patterns):
            if not part:
                raise ValueError(f"{kind}[{i}]: a pattern names at least one action field")
            for field, want in part.items():
                _check_want(f"{kind}[{i}].{field}", want)
        return self

    @property
    def patterns(self) -> list[dict[str, Any]]:
        """The forbid or allow patterns."""
        return self.forbid if self.forbid is not None else (self.allow or [])


_Test = Callable[[Any], bool]


def compile_want(want: Any) -> _Test:
    """``want`` as a one-argument test, equal to ``pattern_matches(value, want)``.

    Built once per guard: the hot path then makes one call per condition instead of the
    type dispatch of :func:`pattern_matches` (``isinstance`` against ``Mapping`` is slow).
    """
    if is_range(want):
        lo = want.get("min", -math.inf)
        hi = want.get("max", math.inf)

        def in_range(v: Any) -> bool:
            t = type(v)
            return (t is float or t is int) and lo <= v <= hi

        if all(type(x) in (int, float) for x in (lo, hi)):
            return in_range
        return lambda v: pattern_matches(v, want)
    if isinstance(want, list):
        tests = tuple(compile_want(w) for w in want)
        return lambda v: any(t(v) for t in tests)
    if type(want) is bool:
        return lambda v: v is want
    if type(want) in (int, float, str):

        def equal(v: Any) -> bool:
            return v == want and type(v) is not bool

        return equal
    return lambda v: pattern_matches(v, want)


@dataclass(frozen=True, slots=True)
class Guard:
    """One compiled guard: its conditions and patterns as tuples, for the hot path."""

    name: str
    when: tuple[tuple[bool, str, Any], ...]
    """(reads the state, field, wanted) per condition."""
    patterns: tuple[tuple[tuple[str, Any], ...], ...]
    forbid: bool
    _when_tests: tuple[tuple[bool, str, _Test], ...] = dataclasses.field(
        default=(), repr=False, compare=False
    )
    _pattern_tests: tuple[tuple[tuple[str, _Test], ...], ...] = dataclasses.field(
        default=(), repr=False, compare=False
    )

    def __post_init__(self) -> None:
        whens = tuple((s, f, compile_want(w)) for s, f, w in self.when)
        pats = tuple(tuple((f, compile_want(w)) for f, w in p) for p in self.patterns)
        object.__setattr__(self, "_when_tests", whens)
        object.__setattr__(self, "_pattern_tests", pats)

    @classmethod
    def of(cls, rule: GuardRule) -> Guard:
        """Compile one rule."""
        when = tuple(
            (name.startswith("state."), name.removeprefix("state."), want)
            for name, want in rule.when.items()
        )
        patterns = tuple(tuple(p.items()) for p in rule.patterns)
        return cls(rule.name, when, patterns, rule.forbid is not None)

    def applies(self, params: Mapping[str, Any], state: _Readable) -> bool:
        """Whether every condition holds (a field that is absent holds none)."""
        for from_state, field_name, test in self._when_tests:
            value = (
                state.get(field_name, _MISSING) if from_state else params.get(field_name, _MISSING)
            )
            if value is _MISSING or not test(value):
                return False
        return True

    def permits(self, action: Mapping[str, Any]) -> bool:
        """Whether ``action`` keeps this guard (when it applies)."""
        hit = False
        for part in self._pattern_tests:
            for field_name, test in part:
                value = action.get(field_name, _MISSING)
                if value is _MISSING or not test(value):
                    break
            else:
                hit = True
                break
        return not hit if self.forbid else hit


class GuardSet:
    """The spec's guards, compiled: the check on every decision, and the narrowed schemas.

    Args:
        rules: the spec's ``guards``.

    """

    __slots__ = ("_candidates", "_guards", "_narrowed")

    def __init__(self, rules: Sequence[GuardRule | Guard] = ()) -> None:
        self._guards = tuple(r if isinstance(r, Guard) else Guard.of(r) for r in rules)
        self._narrowed: dict[tuple[int, ...], ActionSchema | None] = {}
        self._candidates: dict[tuple[int, ...], tuple[int, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self._guards)

    def __len__(self) -> int:
        return len(self._guards)

    @property
    def guards(self) -> tuple[Guard, ...]:
        """The compiled guards, in spec order."""
        return self._guards

    @property
    def names(self) -> list[str]:
        """Every guard's name, in spec order."""
        return [g.name for g in self._guards]

    def refusal(
        self, action: Mapping[str, Any], params: Mapping[str, Any], state: _Readable
    ) -> str | None:
        """The name of the first guard ``action`` breaks for this event and state, or None.

        :meth:`Guard.applies` and :meth:`Guard.permits` inlined: this runs on every tree hit.
        """
        missing = _MISSING
        for g in self._guards:
            for from_state, name, test in g._when_tests:
                value = state.get(name, missing) if from_state else params.get(name, missing)
                if value is missing or not test(value):
                    break
            else:
                hit = False
                for part in g._pattern_tests:
                    for name, test in part:
                        value = action.get(name, missing)
                        if value is missing or not test(value):
                            break
                    else:
                        hit = True
                        break
                if hit is g.forbid:
                    return g.name
        return None

    def applicable(self, params: Mapping[str, Any], state: _Readable) -> tuple[int, ...]:
        """The indices of the guards that apply to this event and state."""
        return tuple(i for i, g in enumerate(self._guards) if g.applies(params, state))

    def refusal_among(self, action: Mapping[str, Any], applicable: tuple[int, ...]) -> str | None:
        """The first guard of ``applicable`` that ``action`` breaks, or None."""
        for i in applicable:
            g = self._guards[i]
            if not g.permits(action):
                return g.name
        return None

    # -- compilation into what the model may write ------------------------------------------

    def not_compilable(self, schema: ActionSchema) -> list[tuple[str, str]]:
        """``(guard, why)`` for each guard that cannot narrow ``schema`` (checked at selection)."""
        props, required = _props(schema)
        out = []
        for g in self._guards:
            why = _narrow(dict(props), required, g, dry=True)
            if isinstance(why, str):
                out.append((g.name, why))
        return out

    def narrowed(self, schema: ActionSchema, applicable: tuple[int, ...]) -> ActionSchema | None:
        """``schema`` with the compilable guards of ``applicable`` written into it.

        Enum values a guard forbids are removed, numeric bounds narrowed; cached per set of
        guards. ``schema`` itself when none narrows it; None when the guards leave no action
        to write (every value of a required field forbidden).
        """
        if not applicable:
            return schema
        if applicable in self._narrowed:
            return self._narrowed[applicable]
        portable = schema.portable()
        props: dict[str, Any] = dict(portable.get("properties", {}))
        required = set(portable.get("required", []))
        changed = False
        empty = False
        for i in applicable:
            result = _narrow(props, required, self._guards[i], dry=False)
            if result is None:
                empty = True
                break
            changed |= result is True
        out: ActionSchema | None
        if empty:
            out = None
        elif not changed:
            out = schema
        else:
            portable["properties"] = props
            title = portable.get("title")
            name = title if isinstance(title, str) and title.isidentifier() else "Action"
            out = ActionSchema.from_json_schema(portable, name=name)
        self._narrowed[applicable] = out
        return out

    def allowed_candidates(
        self, candidates: Sequence[Mapping[str, Any]], applicable: tuple[int, ...]
    ) -> tuple[int, ...]:
        """The indices of ``candidates`` that keep every guard of ``applicable`` (cached).

        ``candidates`` must be the same sequence on every call (the executor's fixed set).
        """
        found = self._candidates.get(applicable)
        if found is None:
            found = tuple(
                j for j, c in enumerate(candidates) if self.refusal_among(c, applicable) is None
            )
            self._candidates[applicable] = found
        return found


def _props(schema: ActionSchema) -> tuple[dict[str, Any], set[str]]:
    portable = schema.portable()
    return dict(portable.get("properties", {})), set(portable.get("required", []))


def _narrow(props: dict[str, Any], required: set[str], g: Guard, *, dry: bool) -> bool | str | None:
    """Write guard ``g`` into ``props`` (replacing the entries it changes).

    Returns True when something narrowed, False when nothing needed to, None when no value
    is left for a required field, or a string: why ``g`` cannot be compiled (``props`` is
    then unchanged).
    """
    staged = dict(props)
    result = (_narrow_forbid if g.forbid else _narrow_allow)(staged, required, g)
    if result is None:
        return True if dry else None
    if not dry and result is True:
        props.update(staged)
    return result


def _narrow_forbid(staged: dict[str, Any], required: set[str], g: Guard) -> bool | str | None:
    singles: list[tuple[str, Any]] = []
    for part in g.patterns:
        if len(part) != 1:
            return "a pattern over several fields together"
        field, want = part[0]
        singles += [(field, w) for w in (want if isinstance(want, list) else [want])]
    changed = False
    for field, want in singles:
        if field not in staged:
            return f"{field!r} is not an action field"
        sub = _forbid_one(staged[field], want)
        if isinstance(sub, str):
            return f"{field}: {sub}"
        if sub is None:
            if field in required:
                return None
            sub = {"not": {}}  # an optional field no value of which is allowed: leave it out
        changed |= sub != staged[field]
        staged[field] = sub
    return changed


def _narrow_allow(staged: dict[str, Any], required: set[str], g: Guard) -> bool | str | None:
    # One pattern (a conjunction on required fields), or several on one field.
    fields = {f for part in g.patterns for f, _ in part}
    if len(g.patterns) > 1 and len(fields) > 1:
        return "allow patterns over different fields (a choice between fields)"
    changed = False
    for field in sorted(fields):
        if field not in staged:
            return f"{field!r} is not an action field"
        if field not in required:
            return f"{field}: an optional field (a grammar cannot require it here)"
        sub = _allow_only(staged[field], [w for part in g.patterns for f, w in part if f == field])
        if isinstance(sub, str):
            return f"{field}: {sub}"
        if sub is None:
            return None
        changed |= sub != staged[field]
        staged[field] = sub
    return changed


def _values(sub: Mapping[str, Any]) -> list[Any] | None:
    if "enum" in sub:
        return list(sub["enum"])
    if "const" in sub:
        return [sub["const"]]
    if sub.get("type") == "boolean":
        return [False, True]
    return None


def _with_values(sub: Mapping[str, Any], values: list[Any]) -> dict[str, Any] | None:
    if not values:
        return None
    out = {k: v for k, v in sub.items() if k not in ("enum", "const")}
    out["enum"] = values
    return out


def _numeric(sub: Mapping[str, Any]) -> bool:
    kinds = sub.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return bool({"number", "integer"} & set(kinds)) and not ({"enum", "const", "anyOf"} & set(sub))


def _bounds(sub: Mapping[str, Any]) -> tuple[float, float]:
    lo = max(sub.get("minimum", -math.inf), sub.get("exclusiveMinimum", -math.inf))
    hi = min(sub.get("maximum", math.inf), sub.get("exclusiveMaximum", math.inf))
    return lo, hi


def _forbid_one(sub: Mapping[str, Any], want: Any) -> dict[str, Any] | str | None:
    values = _values(sub)
    if values is not None:
        return _with_values(sub, [v for v in values if not pattern_matches(v, want)])
    if not _numeric(sub):
        return "not an enum, a boolean or a number"
    if not is_range(want):
        return "a single forbidden number (a hole a range cannot express)"
    lo, hi = _bounds(sub)
    a, b = want.get("min", -math.inf), want.get("max", math.inf)
    out = dict(sub)
    if b < lo or a > hi:  # the forbidden range lies outside the field's: nothing to narrow
        return out
    if a <= lo and b >= hi:
        return None
    if a <= lo:  # the low end is forbidden: values must be above b
        out.pop("minimum", None)
        out["exclusiveMinimum"] = b
        return out
    if b >= hi:  # the high end is forbidden: values must be below a
        out.pop("maximum", None)
        out["exclusiveMaximum"] = a
        return out
    return f"a forbidden range inside the field's range ({a}..{b} within {lo}..{hi})"


def _allow_only(sub: Mapping[str, Any], wants: list[Any]) -> dict[str, Any] | str | None:
    values = _values(sub)
    if values is not None:
        return _with_values(sub, [v for v in values if any(pattern_matches(v, w) for w in wants)])
    if not _numeric(sub):
        return "not an enum, a boolean or a number"
    if len(wants) != 1 or not is_range(wants[0]):
        return "allowed numbers that are not one range"
    lo, hi = _bounds(sub)
    a, b = wants[0].get("min", -math.inf), wants[0].get("max", math.inf)
    if a > hi or b < lo:
        return None
    out = dict(sub)
    if a > lo:
        out.pop("exclusiveMinimum", None)
        out["minimum"] = a
    if b < hi:
        out.pop("exclusiveMaximum", None)
        out["maximum"] = b
    return out


def drop_guarded(tree: PolicyTree, guards: GuardSet) -> dict[str, int]:
    """Drop the branches of a loaded tree that a guard now refuses; counts by guard.

    A branch is kept for its (state fingerprint, event key); the state itself is not stored,
    so a guard whose ``when`` reads the state cannot be decided here and stays with the check
    at selection. A guard that reads only event parameters is decided on the branch's key (its
    parameters as snapped to the grid).
    """
    dropped: dict[str, int] = {}
    stateless = [g for g in guards.guards if not any(s for s, _, _ in g.when)]
    if not stateless:
        return dropped
    empty: dict[str, Any] = {}
    for node in list(tree.nodes()):
        params = dict(node.key.params)
        for g in stateless:
            if g.applies(params, empty) and not g.permits(node.action):
                tree.remove(node.fingerprint, node.key)
                dropped[g.name] = dropped.get(g.name, 0) + 1
                break
    return dropped
