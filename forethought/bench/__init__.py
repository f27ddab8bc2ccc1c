"""``forethought bench``: the benchmark suites, written against the public API.

Suites: ``model`` (the latency law and each optimisation of the model layer), ``planner`` (the
idle-time planner), ``executor`` (the critical path while the planner is busy, in-process and
over a real Mosquitto), ``engine`` (the local engines side by side), and ``--backend URL`` (an
inference server beside the in-process model). Figures are ratios measured side by side in one
run. The servers these start come from :mod:`forethought.testing`; the reliability suite (abuse
and what must hold under it) is not shipped: it lives in the repository's
``benchmarks/reliability/``.
"""

from ._engine import run_engine_bench
from ._suites import run_bench

__all__ = [
    "run_bench",
    "run_engine_bench",
]
