"""The model layer and the idle-time planner: backends, grammars, latency, prompts."""

from ._backend import (
    CancelSignal,
    DecodeOptions,
    Generation,
    GenerationStatus,
    ModelBackend,
    Scores,
)
from ._budget import BudgetBucket, PlannerBudget
from ._calibration import Calibration, calibration, markov_bound
from ._clock import Clock, LoopClock, MonotonicClock, Pass, PassKind
from ._cover import BorrowAgreement, cover
from ._decode_run import DecodeResult, RowResult, ScoreResult
from ._decoding import Decoder
from ._drift import StateDrift
from ._engine import ENGINE_KINDS, EngineChoice, EngineKind, choose_engine
from ._fleet_link import FleetLink
from ._forecaster import Forecaster
from ._gate import ModelGate
from ._grammar import GrammarEngine, GrammarMatcher, LLGuidanceEngine, XGrammarEngine, make_engine
from ._health import HealthStatus, PlannerHealth
from ._latency import LatencyModel, LatencyPredictor, LatencyProfile, Prediction
from ._llama_binary import (
    BUILD,
    BUILD_COMMAND,
    LLAMA_CPP_VERSION,
    build_dir,
    llama_server_path,
)
from ._lookahead import Expected, Pace, look_ahead
from ._managed import ManagedServerBackend
from ._model_source import (
    DEFAULT_MODEL,
    LoadedModel,
    ModelSource,
    cache_root,
    load_model,
    load_tokenizer,
    resolve_model,
)
from ._planner import Branch, Planner, PlannerConfig, PlannerStats
from ._process import ProcessBackend
from ._prompt import Prompt, PromptEncoder, describe_format, state_context
from ._scripted import ScriptedBackend, ScriptMode
from ._server import ServerBackend, ServerLatency, is_server_url, parse_server_url
from ._server_process import ServerProcess, ServerProcessStats, process_alive
from ._transformers import TransformersBackend

__all__ = [
    "BUILD",
    "BUILD_COMMAND",
    "DEFAULT_MODEL",
    "ENGINE_KINDS",
    "LLAMA_CPP_VERSION",
    "BorrowAgreement",
    "Branch",
    "BudgetBucket",
    "Calibration",
    "CancelSignal",
    "Clock",
    "DecodeOptions",
    "DecodeResult",
    "Decoder",
    "EngineChoice",
    "EngineKind",
    "Expected",
    "FleetLink",
    "Forecaster",
    "Generation",
    "GenerationStatus",
    "GrammarEngine",
    "GrammarMatcher",
    "HealthStatus",
    "LLGuidanceEngine",
    "LatencyModel",
    "LatencyPredictor",
    "LatencyProfile",
    "LoadedModel",
    "LoopClock",
    "ManagedServerBackend",
    "ModelBackend",
    "ModelGate",
    "ModelSource",
    "MonotonicClock",
    "Pace",
    "Pass",
    "PassKind",
    "Planner",
    "PlannerBudget",
    "PlannerConfig",
    "PlannerHealth",
    "PlannerStats",
    "Prediction",
    "ProcessBackend",
    "Prompt",
    "PromptEncoder",
    "RowResult",
    "ScoreResult",
    "Scores",
    "ScriptMode",
    "ScriptedBackend",
    "ServerBackend",
    "ServerLatency",
    "ServerProcess",
    "ServerProcessStats",
    "StateDrift",
    "TransformersBackend",
    "XGrammarEngine",
    "build_dir",
    "cache_root",
    "calibration",
    "choose_engine",
    "cover",
    "describe_format",
    "is_server_url",
    "llama_server_path",
    "load_model",
    "load_tokenizer",
    "look_ahead",
    "make_engine",
    "markov_bound",
    "parse_server_url",
    "process_alive",
    "resolve_model",
    "state_context",
]
