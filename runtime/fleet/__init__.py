"""The fleet, in one room: robots and planner workers sharing one tree over NATS JetStream.

Its settings and security (:class:`FleetConfig`, :func:`fleet_permissions`, re-exported by
``forethought.runtime``, where users import them), a branch as the bucket stores it, the tree an
agent watches into its local :class:`~forethought.policies.PolicyTree`, and the planner worker
that fills it (``forethought plan --fleet``). Only the settings load with this package: the tree
and the worker need the ``fleet`` extra (nats-py) and are imported from their modules when a
fleet is used.

Three pieces of the fleet live in other layers, because the layer rule puts them there: what a
planner needs from a fleet (``forethought.planner``'s ``FleetLink`` protocol, which the tree
implements: the planner cannot import the runtime), the simulated fleet (``forethought.sims``,
a replay), and the CLI's ``sim --fleet`` command.
"""

from ._config import FleetConfig, fleet_permissions

__all__ = ["FleetConfig", "fleet_permissions"]
