"""Model backends, one module each: transformers, process, server, scripted."""

from ._llama_binary import BUILD, BUILD_COMMAND, LLAMA_CPP_VERSION, build_dir, llama_server_path
from ._managed import ManagedServerBackend
from ._process import ProcessBackend
from ._scripted import ScriptedBackend, ScriptMode
from ._server import ServerBackend, ServerLatency, is_server_url, parse_server_url
from ._server_process import ServerProcess, ServerProcessStats, process_alive
from ._transformers import TransformersBackend

__all__ = [
    "BUILD",
    "BUILD_COMMAND",
    "LLAMA_CPP_VERSION",
    "ManagedServerBackend",
    "ProcessBackend",
    "ScriptMode",
    "ScriptedBackend",
    "ServerBackend",
    "ServerLatency",
    "ServerProcess",
    "ServerProcessStats",
    "TransformersBackend",
    "build_dir",
    "is_server_url",
    "llama_server_path",
    "parse_server_url",
    "process_alive",
]
