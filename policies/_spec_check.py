"""Check a spec document and report every problem at once, each with the fix.

:meth:`AgentSpec.from_data` validates a spec and stops at the first problem; a person writing
one wants them all, each with its path, the value found and what to write instead.
:func:`check_spec` walks the plain document: unknown keys (with a did-you-mean), parameters
(a categorical one is a plain list), deadlines, the action schema and default, and it warns
where the spec is valid but probably not what was meant: ``effects`` and ``state_fields`` that
name no state field, values of the wrong kind. ``forethought check`` prints the result; a spec
loaded by an agent runs the same checks (errors stop it, warnings are logged).

:class:`StateDomain` is the state's domain as a spec declares it: the fields and, for
categorical fields (strings, booleans), the values the planner can know of (the initial one and
those effects set). A state update naming anything else is legal but leaves the tree with nothing
planned for it; :meth:`StateDomain.unknown` says so.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ._errors import ForethoughtError, error_path
from ._spec_fields import EVENT_EXTRA_KEYS, SpecFields, event_keys, required_spec_keys, spec_keys

__all__ = ["Problem", "StateDomain", "check_spec", "did_you_mean", "validation_problems"]

Severity = Literal["error", "warning"]

# Every key list derives from the models of record (:mod:`._spec_fields`): a field declared
# there is known here, to the loader and to the JSON Schema at once. Only the examples below
# are this module's own, and a test checks there is one for each required key.
_REQUIRED = {
    "name": "name: my-agent",
    "description": "description: what the agent controls and what matters (the model reads it)",
    "action": "action: {type: object, properties: {...}, required: [...]} (a JSON Schema)",
    "default_action": "default_action: {...} (the safe action; it must validate against action)",
    "events": "events: [{type: obstacle, deadline_ms: 500, params: {...}}]",
}
_GRID_KEYS = ("min", "max", "step")
_CATEGORICAL_WORDS = ("enum", "values", "choices", "options", "one_of", "oneOf", "items")


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem of a spec: where, the value found, what is wrong and what to write."""

    severity: Severity
    path: str
    value: object
    problem: str
    fix: str = ""

    def line(self) -> str:
        """One line: ``error events[0].params.side: ... (got ...); write ...``."""
        shown = repr(self.value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        got = f" (got {shown})" if self.value is not None else ""
        fix = f"; {self.fix}" if self.fix else ""
        return f"{self.severity} {self.path}: {self.problem}{got}{fix}"


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``did you mean 'x'?`` for the closest known word, or the list of known ones."""
    options = sorted(set(known))
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"known: {', '.join(options)}" if options else "none is declared"


def validation_problems(
    exc: ValidationError, prefix: str, known: Collection[str] = ()
) -> list[Problem]:
    """Every problem of a pydantic error, at its path.

    An unknown key gets a did-you-mean among ``known``, a missing key "add it", any other
    what to write where it can be said.
    """
    out = []
    for err in exc.errors():
        path = error_path(err["loc"], prefix)
        if err["type"] == "missing":
            out.append(Problem("error", path, None, "required key is missing", "add it"))
        elif err["type"] == "extra_forbidden" and known:
            word = str(err["loc"][-1])
            out.append(
                Problem("error", path, err.get("input"), "unknown key", did_you_mean(word, known))
            )
        else:
            msg = err["msg"].removeprefix("Value error, ")
            out.append(Problem("error", path or "spec", err.get("input"), msg, _fix(err)))
    return out


_KINDS = {
    "float": "a number",
    "int": "a whole number",
    "string": "a string",
    "bool": "true or false",
    "dict": "a mapping",
    "list": "a list",
}


def _fix(err: Any) -> str:
    """What to write instead, from a pydantic error's type and context."""
    kind, ctx = err["type"], err.get("ctx") or {}
    bounds = {
        "greater_than": ("> ", "gt"),
        "greater_than_equal": (">= ", "ge"),
        "less_than": ("< ", "lt"),
        "less_than_equal": ("<= ", "le"),
    }
    if kind in bounds:
        op, key = bounds[kind]
        return f"give a number {op}{ctx.get(key)}"
    if kind == "string_too_short":
        return "give a non-empty string"
    if kind == "too_short":
        return f"give at least {ctx.get('min_length', 1)}"
    if kind == "extra_forbidden":
        return "remove it"
    for prefix, what in _KINDS.items():
        if kind.startswith(prefix):
            return f"give {what}"
    return ""


def _validate(
    model: type[BaseModel], data: Any, prefix: str
) -> tuple[BaseModel | None, list[Problem]]:
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, validation_problems(exc, prefix)


class _Checker:
    """One walk over one document; problems accumulate in order."""

    def __init__(self, data: Mapping[str, Any], extra_keys: Collection[str]) -> None:
        self.data = data
        self.extra = set(extra_keys)
        self.problems: list[Problem] = []
        state = data.get("state")
        self.state: dict[str, Any] = dict(state) if isinstance(state, Mapping) else {}

    def error(self, path: str, value: object, problem: str, fix: str = "") -> None:
        self.problems.append(Problem("error", path, value, problem, fix))

    def warn(self, path: str, value: object, problem: str, fix: str = "") -> None:
        self.problems.append(Problem("warning", path, value, problem, fix))

    def run(self) -> list[Problem]:
        self.top_level()
        grids = self.events()
        self.action()
        self.state_parts(grids)
        if not any(p.severity == "error" for p in self.problems):
            self.guards()
        return self.problems

    def guards(self) -> None:
        """Guards against the whole spec (the default's proof), once all else is right."""
        plain = {k: v for k, v in self.data.items() if k in spec_keys()}
        plain["events"] = [
            {k: v for k, v in e.items() if k != "accept"} if isinstance(e, Mapping) else e
            for e in plain.get("events", [])
        ]
        from ._events import EventType  # noqa: PLC0415
        from ._guard_proof import guard_errors  # noqa: PLC0415 - it imports this module
        from ._guards import GuardRule  # noqa: PLC0415

        try:
            rules = [GuardRule.model_validate(g) for g in plain.pop("guards", None) or []]
            events = [EventType.model_validate(e) for e in plain["events"]]
            # Without guards and event defaults first, then with them as they are: every
            # problem of theirs is listed on its own instead of the first the loader stops at.
            plain["events"] = [e.model_copy(update={"default_action": None}) for e in events]
            spec = SpecFields.model_validate(plain).model_copy(
                update={"guards": rules, "events": events}
            )
        except ValidationError as exc:
            self.problems += validation_problems(exc, "guards")
            return
        for line in guard_errors(spec):
            path, _, problem = line.partition(": ")
            problem, sep, fix = problem.rpartition("; ")
            if not sep:
                problem, fix = fix, ""
            self.error(path, None, problem, fix)
        if any(p.severity == "error" for p in self.problems):
            return
        schema = spec.action_schema()
        names = [g.name for g in spec.guards]
        for name, why in spec.guard_set().not_compilable(schema):
            self.warn(
                f"guards[{names.index(name)}]",
                name,
                f"cannot be compiled into the action grammar ({why}): the model may write "
                "what it forbids, and the executor refuses it when an action is selected",
                "a pattern on one field (an enum value, a range at one end) compiles",
            )

    # -- top level ---------------------------------------------------------------------------

    def top_level(self) -> None:
        spec_fields = spec_keys()
        known = (*spec_fields, *sorted(self.extra))
        for key in self.data:
            if not isinstance(key, str) or key not in known:
                self.error(str(key), self.data[key], "unknown key", did_you_mean(str(key), known))
        for key in required_spec_keys():
            if key not in self.data:
                example = _REQUIRED.get(key, f"{key}: ...")
                self.error(key, None, "required key is missing", f"write {example}")
        # The plain fields, through the model of record (events and the cross-field rules are
        # checked below, where each problem can be named on its own).
        fields = {
            k: v
            for k, v in self.data.items()
            if k in spec_fields and k not in ("events", "action", "default_action", "candidates")
        }
        fields |= {"events": [], "action": {}, "default_action": {}}
        try:
            SpecFields.model_validate(fields)
        except ValidationError as exc:
            for p in validation_problems(exc, ""):
                if p.path.split(".")[0].split("[")[0] in fields and not p.path.startswith(
                    ("events", "action", "default_action")
                ):
                    self.problems.append(p)

    # -- events --------------------------------------------------------------------------------

    def events(self) -> dict[str, set[str]]:
        """Check ``events``; returns each valid type's grid parameter names."""
        from ._events import EventType  # noqa: PLC0415

        events = self.data.get("events")
        grids: dict[str, set[str]] = {}
        if "events" not in self.data:
            return grids
        if not isinstance(events, list) or not events:
            self.error(
                "events", events, "a non-empty list of event types is required", _REQUIRED["events"]
            )
            return grids
        seen: dict[str, int] = {}
        for i, ev in enumerate(events):
            where = f"events[{i}]"
            if not isinstance(ev, Mapping):
                self.error(where, ev, "an event type is a mapping", _REQUIRED["events"])
                continue
            known_keys = event_keys()
            for key in ev:
                if key not in known_keys:
                    self.error(
                        f"{where}.{key}",
                        ev[key],
                        "unknown key",
                        did_you_mean(str(key), known_keys),
                    )
            raw_params = ev.get("params", {})
            params, grid_names = self.params(where, raw_params)
            plain = {k: v for k, v in ev.items() if k in known_keys and k not in EVENT_EXTRA_KEYS}
            plain |= {"params": {}, "effects": {}, "tolerance": {}}
            _, problems = _validate(EventType, plain, where)
            self.problems += [p for p in problems if p.path != where]  # cross-field: below
            etype = ev.get("type")
            if isinstance(etype, str):
                if etype in seen:
                    self.error(
                        f"{where}.type",
                        etype,
                        f"declared twice (first at events[{seen[etype]}])",
                        "give each event type one entry",
                    )
                seen.setdefault(etype, i)
                grids[etype] = grid_names
            domains = raw_params if isinstance(raw_params, Mapping) else {}
            self.effects(where, ev.get("effects", {}), params, domains)
            self.tolerance(where, ev.get("tolerance", {}), params, grid_names)
            fields = ev.get("state_fields")
            if isinstance(fields, list):
                self.state_names(f"{where}.state_fields", fields)
        return grids

    def params(self, where: str, params: Any) -> tuple[set[str], set[str]]:
        """Check one event type's ``params``; returns its parameter and grid names."""
        from ._events import Grid  # noqa: PLC0415

        names: set[str] = set()
        grid_names: set[str] = set()
        if not isinstance(params, Mapping):
            self.error(
                f"{where}.params",
                params,
                "params is a mapping of parameter name to domain",
                "write params: {side: [left, right], distance_m: {min: 0.5, max: 2, step: 0.5}}",
            )
            return names, grid_names
        for name, domain in params.items():
            path = f"{where}.params.{name}"
            names.add(str(name))
            if isinstance(domain, list):
                self.categorical(path, domain)
            elif isinstance(domain, Mapping):
                words = [w for w in domain if w in _CATEGORICAL_WORDS]
                if words:
                    values = domain[words[0]]
                    shown = ", ".join(map(str, values)) if isinstance(values, list) else "..."
                    self.error(
                        path,
                        dict(domain),
                        "a categorical parameter is a plain list, not a mapping",
                        f"write {name}: [{shown}]",
                    )
                    continue
                unknown = [w for w in domain if w not in _GRID_KEYS]
                for w in unknown:
                    self.error(
                        f"{path}.{w}",
                        domain[w],
                        "a numeric parameter is {min, max, step}",
                        did_you_mean(str(w), _GRID_KEYS),
                    )
                if unknown:
                    continue
                _, problems = _validate(Grid, domain, path)
                for p in problems:
                    fix = p.fix
                    if "divide" in p.problem:
                        fix = "choose a step that divides max - min"
                    self.problems.append(
                        Problem(
                            "error",
                            p.path,
                            p.value if p.path != path else dict(domain),
                            p.problem,
                            fix or f"write {name}: {{min: 0, max: 1, step: 0.5}}",
                        )
                    )
                if not problems:
                    grid_names.add(str(name))
            else:
                self.error(
                    path,
                    domain,
                    "a parameter's domain is a list of values (categorical) or "
                    "{min, max, step} (numeric)",
                    f"write {name}: [a, b] or {name}: {{min: 0, max: 1, step: 0.5}}",
                )
        return names, grid_names

    def categorical(self, path: str, domain: list[Any]) -> None:
        if not domain:
            self.error(path, domain, "empty domain", "list at least one value")
            return
        bad = [v for v in domain if not isinstance(v, str | int | float | bool)]
        if bad:
            self.error(path, bad[0], "a value of a list domain is a string, number or boolean")
        if len(set(map(repr, domain))) != len(domain):
            self.error(path, domain, "lists a value twice", "list each value once")

    def effects(
        self, where: str, effects: Any, params: set[str], domains: Mapping[str, Any]
    ) -> None:
        if not isinstance(effects, Mapping):
            self.error(
                f"{where}.effects",
                effects,
                "effects map state fields to the value an event leaves",
                "write effects: {zone: blocked} or {battery: $level}",
            )
            return
        for field, value in effects.items():
            path = f"{where}.effects.{field}"
            if isinstance(value, str) and value.startswith("$") and value[1:] not in params:
                self.error(
                    path,
                    value,
                    "names no parameter of this event type",
                    did_you_mean(value[1:], params),
                )
            if field not in self.state:
                self.warn(
                    path,
                    value,
                    "sets a field the state does not declare",
                    f"{did_you_mean(str(field), self.state)} (or declare it in state)",
                )
            elif not isinstance(value, str) or not value.startswith("$"):
                self.same_kind(path, field, value)
            elif value[1:] in domains:
                self.copied_kind(path, field, value, domains[value[1:]])

    def copied_kind(self, path: str, field: str, ref: str, domain: object) -> None:
        """Warn when ``$param`` copies values of another kind than ``field`` starts with."""
        initial = self.state.get(field)
        if initial is None:
            return
        if isinstance(domain, Mapping):
            kinds = {"number"}  # a grid
        elif isinstance(domain, list):
            kinds = {_kind(v) for v in domain}
        else:
            return
        if kinds != {_kind(initial)}:
            shown = " or ".join(sorted(kinds))
            self.warn(
                path,
                ref,
                f"copies {ref} (a {shown}) into state.{field}, which starts as a "
                f"{_kind(initial)} ({initial!r})",
                f"copy a parameter whose values are {_kind(initial)}s, or set a literal",
            )

    def same_kind(self, path: str, field: str, value: object) -> None:
        """Warn when ``value`` is of another kind than the state's initial value of ``field``."""
        initial = self.state.get(field)
        if initial is None or value is None:
            return
        if _kind(initial) != _kind(value):
            self.warn(
                path,
                value,
                f"state.{field} starts as a {_kind(initial)} ({initial!r}); this is a "
                f"{_kind(value)}",
                f"give a {_kind(initial)}",
            )

    def tolerance(self, where: str, tol: Any, params: set[str], grids: set[str]) -> None:
        if not isinstance(tol, Mapping):
            self.error(f"{where}.tolerance", tol, "a mapping of grid parameter to distance")
            return
        for name, value in tol.items():
            path = f"{where}.tolerance.{name}"
            if name not in grids:
                kind = "is not a grid parameter" if name in params else "names no parameter"
                self.error(
                    path,
                    value,
                    f"{kind}: only grid parameters can have a tolerance",
                    did_you_mean(str(name), grids) if grids else "remove it",
                )
            elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                self.error(path, value, "a tolerance is a number >= 0")

    def state_names(self, path: str, fields: list[Any]) -> None:
        for j, name in enumerate(fields):
            if name not in self.state:
                self.warn(
                    f"{path}[{j}]",
                    name,
                    "names no field of state (the fingerprint would never change with it)",
                    f"{did_you_mean(str(name), self.state)} (or declare it in state)",
                )

    # -- action and state ----------------------------------------------------------------------

    def action(self) -> None:
        from ._action import ActionSchema  # noqa: PLC0415

        action = self.data.get("action")
        if action is None:
            return
        if not isinstance(action, Mapping):
            self.error("action", action, "the action is a JSON Schema object", _REQUIRED["action"])
            return
        try:
            schema = ActionSchema.from_json_schema(action)
        except ForethoughtError as exc:
            self.error("action", _short(action), f"not a usable action schema: {exc}")
            return
        for path, value in [
            ("default_action", self.data.get("default_action")),
            *((f"candidates[{i}]", c) for i, c in enumerate(self.data.get("candidates") or [])),
        ]:
            if value is None:
                continue
            if not isinstance(value, Mapping):
                self.error(path, value, "an action is a mapping")
                continue
            try:
                schema.validate(value)
            except ForethoughtError as exc:
                self.error(
                    path,
                    value,
                    f"does not validate against action: {exc}",
                    "give an action the schema accepts",
                )

    def state_parts(self, grids: dict[str, set[str]]) -> None:
        fields = self.data.get("state_fields")
        if isinstance(fields, list):
            self.state_names("state_fields", fields)
        state_grids = self.data.get("state_grids")
        if isinstance(state_grids, Mapping):
            for name in state_grids:
                if name not in self.state:
                    self.warn(
                        f"state_grids.{name}",
                        state_grids[name],
                        "names no field of state",
                        did_you_mean(str(name), self.state),
                    )
                elif _kind(self.state[name]) != "number":
                    self.error(
                        f"state_grids.{name}",
                        self.state[name],
                        "only a numeric state field can be snapped to a grid",
                    )
        tol = self.data.get("state_tolerance")
        if isinstance(tol, Mapping):
            known = state_grids if isinstance(state_grids, Mapping) else {}
            for name, value in tol.items():
                if name not in known:
                    self.error(
                        f"state_tolerance.{name}",
                        value,
                        "only a field in state_grids can have one",
                        f"add state_grids.{name}: {{min, max, step}} or remove it",
                    )
                elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    self.error(f"state_tolerance.{name}", value, "a tolerance is a number >= 0")
        if "state" in self.data and not isinstance(self.data["state"], Mapping):
            self.error(
                "state",
                self.data["state"],
                "the state is a mapping (a JSON object)",
                "write state: {zone: aisle, battery: 0.8}",
            )


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


def _short(value: object) -> object:
    text = repr(value)
    return value if len(text) <= 80 else text[:77] + "..."


def check_spec(data: Any, *, extra_keys: Collection[str] = ()) -> list[Problem]:
    """Every problem of a spec document (plain data), errors and warnings, in document order.

    ``extra_keys`` are top-level keys a larger document may hold (a scenario's ``trace``).
    """
    if not isinstance(data, Mapping):
        return [
            Problem(
                "error",
                "spec",
                type(data).__name__,
                "a spec is a mapping of keys",
                "start from name:, description:, action:, default_action:, events:",
            )
        ]
    return _Checker(data, extra_keys).run()


class StateDomain:
    """The state's domain: the declared fields, and the values the categorical ones can take.

    A field is declared by the spec's ``state``; a categorical (string or boolean) field's
    values by its initial value, the literal ``effects`` that set it and the categorical
    parameters an effect copies (``$side``). Numbers take any value.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, set[object] | None]) -> None:
        self._values = dict(values)

    @classmethod
    def of(cls, spec: Any) -> StateDomain:
        """The declarations of an :class:`AgentSpec`."""
        from ._events import Grid  # noqa: PLC0415

        values: dict[str, set[object] | None] = {}
        for field, initial in spec.state.items():
            values[field] = None if _kind(initial) == "number" else {_hashable(initial)}
        for t in spec.events:
            for field, value in t.effects.items():
                known = values.get(field)
                if field not in values or known is None:
                    continue
                if isinstance(value, str) and value.startswith("$"):
                    domain = t.params.get(value[1:])
                    if isinstance(domain, Grid):
                        values[field] = None
                    elif domain is not None:
                        known.update(_hashable(v) for v in domain)
                else:
                    known.add(_hashable(value))
        return cls(values)

    @classmethod
    def of_document(cls, data: Mapping[str, Any]) -> StateDomain:
        """The same declarations read leniently from a spec document that may not load.

        ``check`` uses it to warn about unreachable conditions even while other parts of the
        spec have errors.
        """
        state = data.get("state")
        values: dict[str, set[object] | None] = {}
        for field, initial in state.items() if isinstance(state, Mapping) else ():
            values[field] = None if _kind(initial) == "number" else {_hashable(initial)}
        events = data.get("events")
        for t in events if isinstance(events, list) else ():
            if not isinstance(t, Mapping) or not isinstance(t.get("effects"), Mapping):
                continue
            raw_params = t.get("params")
            params: Mapping[str, Any] = raw_params if isinstance(raw_params, Mapping) else {}
            for field, value in t["effects"].items():
                known = values.get(field)
                if known is None:
                    continue
                if isinstance(value, str) and value.startswith("$"):
                    domain = params.get(value[1:])
                    if isinstance(domain, Mapping):
                        values[field] = None
                    elif isinstance(domain, list):
                        known.update(_hashable(v) for v in domain)
                else:
                    known.add(_hashable(value))
        return cls(values)

    @property
    def fields(self) -> list[str]:
        """The declared fields."""
        return sorted(self._values)

    def declared(self, field: str) -> list[object] | None:
        """The values a categorical field can take (None: a number, any value)."""
        known = self._values.get(field)
        return None if known is None else sorted(known, key=repr)

    def unknown(self, patch: Mapping[str, Any], where: str = "state") -> list[Problem]:
        """Warnings for a state patch's fields or values the spec does not declare."""
        out = []
        for field, value in patch.items():
            path = f"{where}.{field}"
            if field not in self._values:
                out.append(
                    Problem(
                        "warning",
                        path,
                        value,
                        "a field the spec's state does not declare "
                        "(no precomputed answer depends on it)",
                        did_you_mean(str(field), self._values),
                    )
                )
                continue
            known = self._values[field]
            if value is None or known is None:
                continue
            if _hashable(value) not in known:
                shown = ", ".join(repr(v) for v in sorted(known, key=repr))
                out.append(
                    Problem(
                        "warning",
                        path,
                        value,
                        f"a value neither the spec's state nor any effect gives {field} "
                        f"(declared: {shown}): the planner cannot plan for it ahead, so "
                        "the first events after it find no tree answer",
                        f"if it is expected, declare it: an event type whose effects set "
                        f"{field} to it",
                    )
                )
        return out


def _hashable(value: object) -> object:
    return repr(value) if isinstance(value, list | dict) else value
