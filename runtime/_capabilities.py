"""What a bus or a model backend may offer beyond its core protocol, as typed protocols.

An :class:`~forethought.runtime.EventBus` only has to carry events and decisions, and a
:class:`~forethought.models.ModelBackend` only has to answer; some do more -- keep a retained
status, say whether they are connected, count what they did, run their model in a worker
process. The agent and its health report ask for each of these with ``isinstance`` on one of
the small protocols here, so mypy checks every call made after the check (an attribute looked
up by name would check nothing). The runtime's own buses declare the ones they implement; the
model layer cannot import the runtime, so its backends are checked against them statically at
the end of this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from forethought.models import Prediction
    from forethought.policies import ActionSchema

    from ._health_report import BusSection, HealthReport

__all__ = [
    "SupportsAgentId",
    "SupportsBusStats",
    "SupportsConnected",
    "SupportsLivePrediction",
    "SupportsServerStats",
    "SupportsStatus",
    "SupportsWorker",
]


@runtime_checkable
class SupportsAgentId(Protocol):
    """A bus that knows the agent by an id of its own (its topics are named after it)."""

    agent_id: str
    """How the agent is known on the bus: the health report's ``agent``."""


@runtime_checkable
class SupportsStatus(Protocol):
    """A bus that carries the agent's health report (a retained topic, a queryable)."""

    async def publish_status(self, report: HealthReport) -> None:
        """Make ``report`` the agent's current status on the bus."""
        ...


@runtime_checkable
class SupportsConnected(Protocol):
    """A bus with a connection that can be down (a broker's): the report says so."""

    @property
    def connected(self) -> bool:
        """Whether the connection is up now."""
        ...


@runtime_checkable
class SupportsBusStats(Protocol):
    """A bus that counts what it received, dropped and published."""

    def bus_section(self) -> BusSection:
        """Its counters now, as the health report's ``bus`` section."""
        ...


@runtime_checkable
class SupportsServerStats(Protocol):
    """A backend on an inference server: its own figures, for ``Agent.stats()["servers"]``."""

    def stats_dict(self) -> dict[str, Any]:
        """The server's figures (requests, health, restarts of a managed one)."""
        ...


@runtime_checkable
class SupportsLivePrediction(Protocol):
    """A backend that predicts a live call for the prompt it would send.

    Not from the fitted laws alone: an inference server, whose prefix cache and streamed steps
    the laws cannot see (:mod:`forethought.models.backends._call_prediction`).
    """

    def predict_live(self, context: str, event: str, schema: ActionSchema) -> Prediction:
        """What a live call for ``event`` in ``context`` is predicted to take, end to end."""
        ...

    def prompt_cached(self, context: str, schema: ActionSchema) -> bool:
        """Whether the state's prompt prefix is most likely in the server's cache."""
        ...


@runtime_checkable
class SupportsWorker(Protocol):
    """A backend whose model runs in a worker process that is replaced when it dies or hangs."""

    restarts: int
    """Workers started again after one died or hung."""
    hangs: int
    """Workers killed for hanging."""

    @property
    def worker_alive(self) -> bool:
        """Whether a worker process runs now."""
        ...


if TYPE_CHECKING:  # the model layer's backends offer these (mypy checks; nothing runs)
    from forethought.models import ManagedServerBackend, ProcessBackend, ServerBackend

    def _declared(
        process: ProcessBackend, server: ServerBackend, managed: ManagedServerBackend
    ) -> tuple[
        SupportsWorker,
        SupportsServerStats,
        SupportsServerStats,
        SupportsLivePrediction,
        SupportsLivePrediction,
    ]:
        return process, server, managed, server, managed
