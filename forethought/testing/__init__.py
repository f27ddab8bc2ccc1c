"""What your own tests need to run Forethought against real services and faults.

Public and documented (docs/guides/testing.md): the launchers start a real Mosquitto, a real
NATS JetStream cluster or a real llama.cpp ``llama-server`` on free loopback ports and clean up
after themselves; the doubles stand in for a model: :class:`ScriptedBackend` answers as
scripted, :class:`FaultyBackend` wraps a real one and fails its next planner call in a named
way. Our own test suite, benchmarks and scripts use exactly these.

Nothing here is imported by the runtime: ``import forethought`` never loads this package.
``python -m forethought.testing._llama_server`` builds ``llama-server`` once (cached under
``~/.cache/forethought/llama-server/``) and prints its path.
"""

from forethought.models import ScriptedBackend

from ._faulty_backend import INJECTED_FAULTS, FaultyBackend
from ._llama_server import LLAMA_CPP_VERSION, LlamaServer, build_llama_server, llama_server_path
from ._mosquitto import MosquittoBroker, mosquitto_path
from ._nats import NatsCluster, NatsUser, nats_server_path
from ._polling import until, until_holds, until_holds_blocking
from ._ports import free_port

__all__ = [
    "INJECTED_FAULTS",
    "LLAMA_CPP_VERSION",
    "FaultyBackend",
    "LlamaServer",
    "MosquittoBroker",
    "NatsCluster",
    "NatsUser",
    "ScriptedBackend",
    "build_llama_server",
    "free_port",
    "llama_server_path",
    "mosquitto_path",
    "nats_server_path",
    "until",
    "until_holds",
    "until_holds_blocking",
]
