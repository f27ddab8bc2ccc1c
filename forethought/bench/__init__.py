"""``forethought bench``: the benchmark suites, written against the public API.

Suites: ``model`` (the latency law and each optimisation of the model layer), ``planner`` (the
idle-time planner), ``executor`` (the critical path while the planner is busy, in-process and
over a real Mosquitto). Figures are ratios measured side by side in one run.
"""

from ._broker import MosquittoBroker, free_port, mosquitto_path
from ._engine import memory_bandwidth, run_engine_bench
from ._llama_server import LLAMA_CPP_VERSION, LlamaServer, build_llama_server, llama_server_path
from ._nats import NatsCluster, NatsUser, nats_server_path
from ._suites import BENCH_ACTION, run_bench

__all__ = [
    "BENCH_ACTION",
    "LLAMA_CPP_VERSION",
    "LlamaServer",
    "MosquittoBroker",
    "NatsCluster",
    "NatsUser",
    "build_llama_server",
    "free_port",
    "llama_server_path",
    "memory_bandwidth",
    "mosquitto_path",
    "nats_server_path",
    "run_bench",
    "run_engine_bench",
]
