"""The world of a closed-loop replay: it answers each action with what comes next.

An open-loop replay fixes its events in advance; a :class:`World` makes them as it goes. It is
reset with a seed, runs on its own clock (a tick every :attr:`World.tick_ms`, and events it
schedules itself) whether or not the agent has decided, receives each action the agent sent
or the default applied in its place (:class:`Applied`), and answers every call with a
:class:`WorldStep`: the events that follow and when, a state patch, a reward, and possibly the
episode's end (:class:`Outcome`). The replay (:mod:`._closed_loop`) owns time; a world never
sleeps and never reads a clock, so a replay is deterministic for a seed on the virtual clock
and runs unchanged on the real one.

Worlds come three ways: declarative reactions in a scenario (:mod:`._reactions`), a
gymnasium environment through :class:`GymWorld` (:mod:`._gym`), or any object with these
methods (a scenario's ``world: {python: "package.module:factory"}``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from forethought.policies import ForethoughtError

__all__ = ["Applied", "Emission", "Outcome", "World", "WorldError", "WorldEvent", "WorldStep"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an episode ended: a name (``collision``, ``delivered``), its score and its kind.

    ``success`` and ``failure`` are counted apart: an episode that ran out of time is often
    neither (the robot stood still, safely, and delivered nothing).
    """

    name: str
    score: float = 0.0
    success: bool = False
    failure: bool = False

    def describe(self) -> str:
        """``collision (failure, score -10)``."""
        kind = "success" if self.success else "failure" if self.failure else "neither"
        return f"{self.name} ({kind}, score {self.score:g})"


@dataclass(frozen=True, slots=True)
class Emission:
    """Something the world makes happen ``after_ms`` from now: an event, or the episode's end.

    An event's ``type`` must be one the spec declares; ``state`` patches the agent's state as
    the event arrives (the world changed); ``deadline_ms`` overrides the type's.
    """

    after_ms: float = 0.0
    type: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] | None = None
    deadline_ms: float | None = None
    outcome: Outcome | None = None

    def describe(self) -> str:
        """``person side=front distance_m=2.0`` or ``end: collision (failure, score -10)``."""
        if self.type is None:
            return f"end: {self.outcome.describe()}" if self.outcome else "nothing"
        params = " ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.type} {params}".strip()


@dataclass(frozen=True, slots=True)
class WorldStep:
    """A world's answer to ``reset``, ``tick`` or ``act``.

    ``state`` patches the agent's state with the next event; ``reward`` adds to the episode's
    score; ``outcome`` ends the episode now (an emission's outcome ends it later).
    """

    events: tuple[Emission, ...] = ()
    state: dict[str, Any] | None = None
    reward: float = 0.0
    outcome: Outcome | None = None


@dataclass(frozen=True, slots=True)
class WorldEvent:
    """An event the world emitted, as the agent received it (``index`` in the episode)."""

    index: int
    type: str
    params: dict[str, Any]
    at_ms: float


@dataclass(frozen=True, slots=True)
class Applied:
    """The action that took effect for ``event``, and when.

    ``defaulted`` is true when the spec's default took effect: the strategy's own fallback, or
    no decision by the deadline (``late``: the replay applied the default at the deadline, and
    the late answer never reached the world).
    """

    event: WorldEvent
    action: dict[str, Any]
    at_ms: float
    tier: str
    defaulted: bool
    late: bool = False


class World(Protocol):
    """A world that reacts: the closed-loop replay's source of events.

    Time is the replay's: ``now_ms`` counts from the episode's start. Every method may raise;
    the replay reports it as a :class:`WorldError` naming the world and the step.
    """

    @property
    def name(self) -> str:
        """What errors and reports call this world."""
        ...

    @property
    def tick_ms(self) -> float | None:
        """The world's own clock: :meth:`tick` is called every ``tick_ms`` (None: never)."""
        ...

    def reset(self, seed: int) -> WorldStep:
        """Start an episode: its initial state patch and first events."""
        ...

    def tick(self, now_ms: float) -> WorldStep:
        """The world moves on, decided or not (a simulator's step)."""
        ...

    def act(self, applied: Applied) -> WorldStep:
        """An action took effect (the agent's, or the default on a miss): what follows."""
        ...


class WorldError(ForethoughtError):
    """A world misbehaved: raised, emitted an undeclared event, or never ended.

    Names the world, the step (the how-many-th call of the episode: reset is 0), what was
    called and when, and the problem.
    """

    def __init__(self, world: str, step: int, call: str, at_ms: float, problem: str) -> None:
        super().__init__(f"world {world!r}, step {step} ({call} at {at_ms:.0f} ms): {problem}")
        self.world = world
        self.step = step
        self.problem = problem
