"""Topics: the names an agent is reached by, on MQTT topics and Zenoh keys alike.

Everything of one agent lives under ``forethought/<agent_id>/``: events come in under
``events/`` (one level per event type), decisions go out on ``actions``, refusals and
warnings on ``errors``; MQTT adds the retained ``status``, the ``replies/`` prefix that
response topics must be under, and the ``probe`` topic; Zenoh adds the ``decide`` and
``health`` queryables and the ``alive`` liveliness token. The agent's buses, the ``send``
command, the simulators and the benchmarks all name them through this one value.

Which characters an id may hold differs per transport (MQTT's wildcards are not Zenoh's): each
bus checks its own.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Topics"]


@dataclass(frozen=True, slots=True)
class Topics:
    """The topics (and Zenoh keys) of the agent known as ``agent_id``."""

    agent_id: str

    @property
    def base(self) -> str:
        """``forethought/<agent_id>``: every other name is under it."""
        return f"forethought/{self.agent_id}"

    def event(self, event_type: str) -> str:
        """Where a producer publishes an event of ``event_type``."""
        return f"{self.base}/events/{event_type}"

    @property
    def events_filter(self) -> str:
        """The MQTT subscription to every event type (``events/#``)."""
        return f"{self.base}/events/#"

    @property
    def events_key(self) -> str:
        """The Zenoh key expression of every event type (``events/**``)."""
        return f"{self.base}/events/**"

    @property
    def actions(self) -> str:
        """Where decisions go."""
        return f"{self.base}/actions"

    @property
    def errors(self) -> str:
        """Where refusals (and warnings beside a decision) go."""
        return f"{self.base}/errors"

    @property
    def status(self) -> str:
        """MQTT: the retained health report (the last will says offline)."""
        return f"{self.base}/status"

    @property
    def replies_prefix(self) -> str:
        """MQTT: response topics are answered only under this prefix."""
        return f"{self.base}/replies/"

    def reply(self, tag: str) -> str:
        """MQTT: a response topic of one requester (``tag`` names it)."""
        return f"{self.replies_prefix}{tag}"

    @property
    def probe(self) -> str:
        """MQTT: only ever unsubscribed from, to tell a silent broker is alive."""
        return f"{self.base}/probe"

    @property
    def decide(self) -> str:
        """Zenoh: the queryable that answers a ``get`` with the decision."""
        return f"{self.base}/decide"

    @property
    def alive(self) -> str:
        """Zenoh: the liveliness token (gone when the agent's session is)."""
        return f"{self.base}/alive"

    @property
    def health(self) -> str:
        """Zenoh: the queryable that answers with the last health report."""
        return f"{self.base}/health"
