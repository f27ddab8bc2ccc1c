"""The model layer and the idle-time planner: backends, grammars, latency, prompts."""

from ._backend import (
    CancelSignal,
    DecodeOptions,
    Generation,
    GenerationStatus,
    ModelBackend,
    Scores,
)
from ._calibration import Calibration, calibration, markov_bound
from ._clock import Clock, LoopClock, MonotonicClock, Pass, PassKind
from ._cost import Cost
from ._cover import BorrowAgreement, cover
from ._decode_run import DecodeResult, RowResult, ScoreResult
from ._decoding import Decoder
from ._drift import StateDrift
from ._forecaster import Forecaster
from ._gate import ModelGate
from ._grammar import GrammarEngine, GrammarMatcher, LLGuidanceEngine, XGrammarEngine, make_engine
from ._health import HealthStatus, PlannerHealth
from ._latency import LatencyModel, LatencyPredictor, LatencyProfile, Prediction
from ._lookahead import Expected, Pace, look_ahead
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
from ._transformers import TransformersBackend

__all__ = [
    "DEFAULT_MODEL",
    "BorrowAgreement",
    "Branch",
    "Calibration",
    "CancelSignal",
    "Clock",
    "Cost",
    "DecodeOptions",
    "DecodeResult",
    "Decoder",
    "Expected",
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
    "ModelBackend",
    "ModelGate",
    "ModelSource",
    "MonotonicClock",
    "Pace",
    "Pass",
    "PassKind",
    "Planner",
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
    "StateDrift",
    "TransformersBackend",
    "XGrammarEngine",
    "cache_root",
    "calibration",
    "cover",
    "describe_format",
    "is_server_url",
    "load_model",
    "load_tokenizer",
    "look_ahead",
    "make_engine",
    "markov_bound",
    "parse_server_url",
    "resolve_model",
    "state_context",
]
