"""Device profiles: the latency law a virtual replay charges model passes by.

A report always names the profile it used. The shipped ones are fixed figures, so a replay's
table is the same on any machine; ``cpu-measured`` measures this machine (robustly, or not at
all: a busy machine is refused rather than measured).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from forethought.models import LatencyProfile
from forethought.models.internals import Cost
from forethought.policies import ConfigError

from ._measure import measure_profile
from ._scenario import Scenario

if TYPE_CHECKING:
    # The local model (torch): only named in annotations, so the sims import without it.
    from forethought.models import TransformersBackend

__all__ = [
    "PROFILES",
    "measure_profile",
    "profile_figures",
    "profile_list",
    "replay_threads",
    "resolve_profile",
    "validate_profiles",
]

# What a call pays on top after the model sat idle, as a share of a typical live call's
# prefill. Measured once here for SmolLM2-135M on the 2-core CPU: a live call's prefill took
# 119 ms after idle time against 84 ms back to back (10 interleaved rounds), +0.42x at the
# median. The spread around that median (0.2x-0.7x) is assumed, not measured: `cpu-measured`
# measures the whole distribution on the machine at hand. A CPU model of another size pays the
# same share of its own prefill (cold caches and threads scale with the work); a GPU's idle cost
# is not measured, so none is charged.
_IDLE_SHARE = Cost((0.2, 0.3, 0.42, 0.55, 0.7))
_IDLE_AFTER_S = 0.1  # assumed (a point of cpu-measured's grid), not measured for these profiles


def _with_idle(profile: LatencyProfile, live_prefill_tokens: int = 48) -> LatencyProfile:
    """``profile`` with the idle cost derived from its own prefill of a live call."""
    prefill = profile.prefill_base_s + live_prefill_tokens * profile.prefill_per_token_s
    return replace(profile, idle_cost=_IDLE_SHARE.scaled(prefill), idle_after_s=_IDLE_AFTER_S)


PROFILES: dict[str, LatencyProfile] = {
    # SmolLM2-135M (bf16, our decoder) on the project's 2-core CPU VM (Xeon with AMX). The
    # bench measured t_step 35-66 ms and prefill ~800 us/token across sessions; fixed at the
    # middle so `scripts/main` prints the same table on any machine.
    "cpu-2core-smollm2": _with_idle(
        LatencyProfile(
            prefill_base_s=0.020,
            prefill_per_token_s=800e-6,
            step_base_s=0.045,
            step_per_row_s=0.0009,
            spread95=1.15,
        )
    ),
    # The design note's agent: a 48-token action JSON in 411 ms, i.e. 8.6 ms per output token
    # on a GPU. The note gives no prefill figure; 50 us/token is an assumption (a GPU prefills
    # tens of thousands of tokens per second for a model this size).
    "design-note-gpu": LatencyProfile(
        prefill_base_s=0.0086,
        prefill_per_token_s=50e-6,
        step_base_s=0.0086,
        step_per_row_s=0.0086 * 0.02,
        spread95=1.10,
    ),
    # An 8B model in bf16 on one data-centre GPU: 16 GB of weights streamed per decode step at
    # an effective ~1.5 TB/s is ~11 ms; single-stream serving reports 10-15 ms/token, so 12 ms.
    # Prefill ~8-10k tokens/s, so 120 us/token. Derived figures, not measured here.
    "gpu-8b": LatencyProfile(
        prefill_base_s=0.012,
        prefill_per_token_s=120e-6,
        step_base_s=0.012,
        step_per_row_s=0.012 * 0.01,
        spread95=1.10,
    ),
    # The same 8B model quantised to 4 bits on an 8-core laptop CPU (llama.cpp class): ~4.5 GB
    # per step at ~40 GB/s is ~110 ms; prefill ~50 tokens/s per core-set, so 15 ms/token.
    # Derived figures: the "large model on modest hardware" case, not measured here.
    "cpu-8b-q4": _with_idle(
        LatencyProfile(
            prefill_base_s=0.110,
            prefill_per_token_s=15e-3,
            step_base_s=0.110,
            step_per_row_s=0.110 * 0.05,
            spread95=1.20,
        )
    ),
}
"""The shipped device profiles by name (``resolve_profile`` also reads figures)."""


def profile_figures(profile: LatencyProfile) -> dict[str, float]:
    """The profile in the figures people quote (for reports)."""
    costs = {
        "call": profile.call_cost,
        "pass": profile.pass_cost,
        "row": profile.row_cost,
        "select": profile.select_cost,
        "idle": profile.idle_cost,
        **{f"idle_{after * 1e3:.0f}ms": cost for after, cost in profile.longer_idle},
    }
    # Only a finite threshold is a figure (none: idle time costs nothing on this profile).
    after = {} if math.isinf(profile.idle_after_s) else {"idle_after_ms": profile.idle_after_s}
    # A ratio, not a cost; only a measured profile has one (the shipped ones' figures stay).
    first = profile.first_call_factor
    factor = (
        {"first_call_p50_x": round(first.p50, 3), "first_call_p95_x": round(first.p95, 3)}
        if first.quantiles
        else {}
    )
    return {
        **{k: round(v * 1e3, 4) for k, v in after.items()},
        **factor,
        "step_ms": round(profile.step_base_s * 1e3, 4),
        "step_per_row_ms": round(profile.step_per_row_s * 1e3, 4),
        "prefill_ms": round(profile.prefill_base_s * 1e3, 4),
        "prefill_us_per_token": round(profile.prefill_per_token_s * 1e6, 3),
        "spread95": round(profile.spread95, 4),
        **{
            f"{name}_{q}_ms": round(getattr(cost, q) * 1e3, 4)
            for name, cost in costs.items()
            for q in ("p50", "p95")
        },
    }


def resolve_profile(
    text: str, backend: TransformersBackend | None = None, scenario: Scenario | None = None
) -> LatencyProfile:
    """The profile ``text`` names.

    A shipped profile's name, ``cpu-measured`` (needs ``backend``; measures the costs outside
    forward passes on ``scenario``'s calls when given), or figures as
    ``step_ms=X,prefill_us_per_token=Y``.
    """
    if text in PROFILES:
        return PROFILES[text]
    if text == "cpu-measured":
        if backend is None:
            raise ConfigError("--profile", text, "measuring needs the model")
        return measure_profile(backend, scenario=scenario, alternatives=tuple(PROFILES))
    if "=" not in text:
        raise ConfigError(
            "--profile",
            text,
            f"unknown profile; {_did_you_mean(text)}: {', '.join(PROFILES)}, cpu-measured, or "
            "figures as step_ms=X,prefill_us_per_token=Y",
        )
    try:
        pairs = dict(item.strip().split("=", 1) for item in text.split(",") if item.strip())
        figures = {k: float(pairs.pop(k)) for k in _FIGURES}
    except KeyError as exc:
        raise ConfigError(
            "--profile", text, f"{exc.args[0]} is missing: give step_ms=X,prefill_us_per_token=Y"
        ) from None
    except ValueError:
        raise ConfigError(
            "--profile", text, "a figure is not a number: give step_ms=X,prefill_us_per_token=Y"
        ) from None
    if pairs:
        raise ConfigError(
            "--profile", text, f"unknown figures {sorted(pairs)}; give only {', '.join(_FIGURES)}"
        )
    if figures["step_ms"] <= 0 or figures["prefill_us_per_token"] < 0:
        raise ConfigError("--profile", text, "step_ms must be > 0, prefill_us_per_token >= 0")
    return LatencyProfile.from_figures(**figures)


_FIGURES = ("step_ms", "prefill_us_per_token")


def _did_you_mean(text: str) -> str:
    close = difflib.get_close_matches(text, [*PROFILES, "cpu-measured"], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? choose from" if close else "choose from"


def profile_list(text: str) -> list[str]:
    """``--profile``'s value as one entry per profile: names and groups of figures.

    Items are comma-separated; consecutive ``key=value`` items make one profile, so
    ``gpu-8b,step_ms=8.6,prefill_us_per_token=50`` is two profiles (a repeated key starts a
    new group of figures).
    """
    out: list[str] = []
    keys: set[str] = set()
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        key = item.partition("=")[0]
        if "=" in item and out and "=" in out[-1] and key not in keys:
            out[-1] += f",{item}"
            keys.add(key)
        else:
            out.append(item)
            keys = {key} if "=" in item else set()
    return out


def validate_profiles(text: str) -> list[str]:
    """``--profile``'s profiles, each checked without a model (``cpu-measured`` passes here).

    Raises a ConfigError naming the bad one, so a replay refuses it before loading the model.
    """
    entries = profile_list(text)
    if not entries:
        raise ConfigError("--profile", text, "give a profile name or figures")
    for entry in entries:
        if entry != "cpu-measured":
            resolve_profile(entry)
    return entries


def replay_threads(clock: str, *profiles: object) -> int | None:
    """Torch's threads for a replay: one on virtual time charged by fixed profiles, else chosen.

    A pass's floating-point results, and so the tokens it picks, depend on torch's thread
    count. On virtual time charged by a fixed profile nothing else of the machine reaches a
    decision, so one thread makes a replay's output the same on every machine with the same
    torch build and CPU instruction set, whatever its core count or load. A measured profile
    (``cpu-measured``) times this machine's passes as it will decode them, so it keeps the
    count chosen at load, as the real clock does.
    """
    if clock != "virtual":
        return None
    if any(isinstance(p, str) and "cpu-measured" in p for p in profiles):
        return None
    return 1
