"""The agent spec: what one agent decides about (the scenario header).

``name``, ``description`` (the task context given to the model), ``action`` (JSON Schema of one
action), ``default_action`` (the safe action, which must validate), the initial ``state`` and the
``events`` the planner anticipates. ``state_fields``, ``state_grids``, ``state_tolerance`` and
each event type's own ``state_fields`` say what part of the state a decision depends on
(:class:`StateAbstraction`). ``forethought run`` takes one; a simulator scenario is a spec plus
a trace.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import ValidationError

from ._errors import ConfigError, first_problem
from ._spec_check import check_spec
from ._spec_fields import SpecFields

_log = logging.getLogger("forethought.spec")

__all__ = ["AgentSpec", "load_document"]


class AgentSpec(SpecFields):
    """One agent: its task, action schema, safe default, state and event space."""

    @classmethod
    def from_data(
        cls, data: Any, *, source: str = "spec", ignore: Collection[str] = ()
    ) -> AgentSpec:
        """Validate plain data; errors name the source, the field path and the problem.

        ``ignore`` names top-level keys that belong to a larger document the spec is part of
        (a simulator scenario's ``trace``, say); any other unknown key is an error. An invalid
        spec's error lists every problem :func:`check_spec` finds (``forethought check``'s);
        a valid spec's warnings (effects naming no state field, say) are logged.
        """
        if not isinstance(data, dict):
            raise ConfigError(source, type(data).__name__, "a spec must be a mapping")
        header = {k: v for k, v in data.items() if k not in ignore}
        try:
            spec = cls.model_validate(header)
        except ValidationError as exc:
            error = _config_error(source, exc)
            others = [p for p in check_spec(header) if p.severity == "error"]
            if len(others) > 1:
                listed = "".join(f"\n  {p.line()}" for p in others)
                error = ConfigError(
                    error.field, error.value, f"{error.problem}; all {len(others)}:{listed}"
                )
            raise error from None
        for problem in check_spec(header):
            if problem.severity == "warning":
                _log.warning("%s: %s", source, problem.line())
        return spec

    @classmethod
    def from_file(cls, path: str | Path, *, ignore: Collection[str] = ()) -> AgentSpec:
        """Load from a YAML or JSON file (top-level keys in ``ignore`` are skipped)."""
        return cls.from_data(load_document(path), source=str(path), ignore=ignore)


def _config_error(source: str, exc: ValidationError) -> ConfigError:
    where, value, problem = first_problem(exc)
    return ConfigError(f"{source}: {where}" if where else source, value, problem)


MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""The largest spec or scenario file read (checked before parsing)."""


def load_document(path: str | Path, *, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """Read a YAML (``safe_load``) or JSON file; errors are ConfigErrors naming the file."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise ConfigError(str(p), f"{size} bytes", f"larger than {max_bytes} bytes")
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise ConfigError(str(p), str(p), "not found (no such file)") from None
    except OSError as exc:
        raise ConfigError(str(p), str(p), f"cannot read: {exc.strerror}") from None
    if len(raw) > max_bytes:  # grew while we looked (or a device): still refused
        raise ConfigError(str(p), f"> {max_bytes} bytes", f"larger than {max_bytes} bytes")
    try:
        if p.suffix == ".json":
            return orjson.loads(raw)
        return yaml.safe_load(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        kind = p.suffix.lstrip(".") or "YAML"
        raise ConfigError(str(p), p.name, f"not valid {kind}: {exc}") from None
