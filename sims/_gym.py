"""GymWorld: any ``gymnasium.Env`` as a closed-loop world, stepping at a fixed rate.

Two user functions make the bridge: ``observe`` turns an observation (and the step's info)
into the events the agent receives and a state patch, and ``action`` turns the agent's JSON
action into the env's. The env steps every ``period_ms`` of replay time whether or not the
agent decided: each step applies the action the world received for the last observation's
events (the agent's, or the spec's default where no decision came by the deadline), and when
none came at all, ``action(default)``. ``terminated`` and ``truncated`` end the episode with
``outcome(terminated, truncated, total_reward)`` (by default: terminated with a positive
return is a success, without one a failure, truncated neither).

gymnasium is imported by the caller that builds the env (the ``gym`` extra), never here: this
module only calls ``reset``, ``step`` and ``close`` on what it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._world import Applied, Emission, Outcome, WorldStep

__all__ = ["GymEnv", "GymWorld", "Observed"]


class GymEnv(Protocol):
    """The part of ``gymnasium.Env`` the adapter uses."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """A new episode's first observation and info."""
        ...

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Apply an action: observation, reward, terminated, truncated, info."""
        ...

    def close(self) -> None:
        """Release the env's resources."""
        ...


@dataclass(frozen=True, slots=True)
class Observed:
    """What one observation means to the agent: events (type, params) and a state patch."""

    events: Sequence[tuple[str, dict[str, Any]]] = ()
    state: dict[str, Any] | None = None


def _default_outcome(terminated: bool, truncated: bool, total: float) -> Outcome:
    if terminated:
        return Outcome("terminated", 0.0, success=total > 0, failure=total <= 0)
    return Outcome("truncated" if truncated else "ended")


@dataclass
class GymWorld:
    """A gymnasium env as a :class:`World` (see the module's docstring).

    Args:
        name: what errors and reports call it (the env's id, say).
        env: a ``gymnasium.Env`` (made once; reset per episode with the episode's seed).
        observe: observation, info -> :class:`Observed`.
        action: the agent's action -> the env's.
        default_action: the spec's default action (applied when no decision came).
        period_ms: replay time between two env steps.
        start_ms: when the first observation reaches the agent (the robot boots meanwhile).
        outcome: terminated, truncated, the episode's return -> its :class:`Outcome`.

    """

    name: str
    env: GymEnv
    observe: Callable[[Any, Mapping[str, Any]], Observed]
    action: Callable[[Mapping[str, Any]], Any]
    default_action: Mapping[str, Any]
    period_ms: float
    start_ms: float = 0.0
    outcome: Callable[[bool, bool, float], Outcome] = _default_outcome
    _pending: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _total: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.period_ms <= 0:
            raise ValueError(f"period_ms must be > 0 (got {self.period_ms})")

    @property
    def tick_ms(self) -> float:
        """The env's step period."""
        return self.period_ms

    def _emit(self, obs: Any, info: Mapping[str, Any], after_ms: float) -> WorldStep:
        seen = self.observe(obs, info)
        events = tuple(Emission(after_ms, t, dict(p)) for t, p in seen.events)
        return WorldStep(events=events, state=seen.state)

    def reset(self, seed: int) -> WorldStep:
        """Reset the env with ``seed``; its first observation's events at ``start_ms``."""
        obs, info = self.env.reset(seed=seed)
        self._pending, self._total = None, 0.0
        return self._emit(obs, info, self.start_ms)

    def tick(self, now_ms: float) -> WorldStep:
        """One env step with the action received since the last (else the default)."""
        if now_ms < self.start_ms + self.period_ms - 1e-6:
            return WorldStep()  # the first observation has not had its period yet
        act = self._pending if self._pending is not None else dict(self.default_action)
        self._pending = None
        obs, reward, terminated, truncated, info = self.env.step(self.action(act))
        self._total += float(reward)
        if terminated or truncated:
            return WorldStep(
                reward=float(reward), outcome=self.outcome(terminated, truncated, self._total)
            )
        step = self._emit(obs, info, 0.0)
        return WorldStep(events=step.events, state=step.state, reward=float(reward))

    def act(self, applied: Applied) -> WorldStep:
        """Keep the action for the next step (a later one replaces it: the newest wins)."""
        self._pending = dict(applied.action)
        return WorldStep()
