"""Answers that do not depend on timing, decoded once in batches and charged to every replay.

``live-naive`` runs each call to completion (nothing is cut at a deadline), so its answer is a
pure function of the model and the prompt, and so are the passes it runs: one prefill of the
whole prompt, then one decode pass per output token. :func:`decode_naive` decodes a
scenario's distinct naive prompts together, several rows a batch, and fills the replay's
:data:`CallMemo` with each answer and the passes one call of its own would have run; each
replay (each strategy run, each profile) then charges those passes on its own clock, draw by
draw, without decoding again. :func:`decode_references` does the same for fidelity's
deadline-free references, rows that share a context decoded together.

A batch pads its rows to one width, so its arithmetic is not bit for bit that of a call of
one row; greedy answers agree but for near-ties. Either is the model's answer to the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from forethought.models import Generation, GenerationStatus, MonotonicClock
from forethought.models.internals import Pass, PassKind, Prompt, state_text

from ._records import StrategyRun
from ._replay import NAIVE_OPTIONS, CallMemo
from ._scenario import Scenario

if TYPE_CHECKING:
    # The local model (torch): only named in annotations, so the sims import without it.
    from forethought.models import TransformersBackend

__all__ = ["decode_naive", "decode_references", "naive_passes", "naive_prompts"]

NAIVE_MAX_NEW_TOKENS = 128
"""live-naive's cap on one answer (as its calls in :mod:`._replay` are made)."""
NAIVE_BATCH = 64
"""Rows decoded together. A decode pass on a CPU costs about the same for 8 rows as for 34
(it reads the weights once either way), and finished rows leave the batch: the main job's 34
prompts took 27 s in one batch against 56-58 s in batches of 8, with the same 34 answers."""

ReferenceCache = dict[tuple[str, str], dict[str, Any] | None]
"""(context, event) -> the model's deadline-free compact answer (None: it gave none)."""


def naive_prompts(scenario: Scenario) -> list[tuple[str, str]]:
    """The distinct (context, event) prompts live-naive sends, in first-use order.

    The state each event sees is its patches and the effects of the events before it, none of
    which depends on timing.
    """
    spec = scenario.spec
    space = spec.event_space()
    state = spec.initial_state()
    seen: dict[tuple[str, str], None] = {}
    for ev in scenario.events():
        if ev.state:
            state = state.patched(ev.state)
        key = space.key(ev.type, ev.params)
        text = key.describe() if key is not None else ev.describe()
        seen.setdefault((state_text(spec.description, state.to_json()), text), None)
        if key is not None and space.types[key.type].effects:
            state = state.after(space.types[key.type], key)
    return list(seen)


def naive_passes(gen: Generation, cap: int) -> list[Pass]:
    """The passes one uncut call without prefix reuse or jump-forward ran for ``gen``.

    A prefill of the whole prompt, then a decode pass per token fed back: every output token
    but the one that ended the answer (the grammar completed it, or it reached ``cap``); a
    row stopped at a grammar dead end fed back every token it kept.
    """
    ended_on_token = gen.status is not GenerationStatus.LENGTH or gen.output_tokens >= cap
    steps = gen.output_tokens - 1 if ended_on_token else gen.output_tokens
    return [Pass(PassKind.PREFILL, gen.prompt_tokens), *[Pass(PassKind.STEP, 1)] * max(steps, 0)]


def _batches(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def decode_naive(
    scenario: Scenario,
    backend: TransformersBackend,
    memo: CallMemo,
    *,
    batch: int = NAIVE_BATCH,
    progress: Callable[[int], None] = lambda n: None,
) -> int:
    """Fill ``memo`` with live-naive's answer to each of the scenario's prompts.

    Returns how many were decoded (prompts already in ``memo`` are skipped). ``progress`` gets
    each batch's size as it finishes.
    """
    schema = scenario.spec.action_schema()
    naive = backend.sharing(clock=MonotonicClock(), options=NAIVE_OPTIONS)
    naive.prepare_sync(schema)
    cap = min(NAIVE_MAX_NEW_TOKENS, naive.max_output_tokens(schema))
    missing = [p for p in naive_prompts(scenario) if p not in memo]
    for chunk in _batches(missing, batch):
        gens = naive.generate_each_sync(
            [Prompt(context, text) for context, text in chunk],
            schema,
            max_new_tokens=NAIVE_MAX_NEW_TOKENS,
        )
        for prompt, gen in zip(chunk, gens, strict=True):
            memo[prompt] = (gen, naive_passes(gen, cap))
        progress(len(chunk))
    return len(missing)


def decode_references(
    scenario: Scenario,
    runs: Iterable[Mapping[str, StrategyRun]],
    backend: TransformersBackend,
    cache: ReferenceCache,
    *,
    batch: int = 8,
    progress: Callable[[int], None] = lambda n: None,
) -> int:
    """Fill ``cache`` with the reference answer to every (context, event) the runs decided.

    The events of one context are decoded together; returns how many were decoded.
    """
    ref = backend.sharing(clock=MonotonicClock())
    schema = scenario.spec.action_schema()
    ref.prepare_sync(schema)
    by_context: dict[str, list[str]] = {}
    for group in runs:
        for run in group.values():
            for r in run.records:
                if (r.context, r.event_text) not in cache:
                    texts = by_context.setdefault(r.context, [])
                    if r.event_text not in texts:
                        texts.append(r.event_text)
    done = 0
    for context, texts in by_context.items():
        for chunk in _batches(texts, batch):
            gens = ref.generate_sync(context, chunk, schema, deadline=math.inf)
            for text, g in zip(chunk, gens, strict=True):
                cache[context, text] = schema.readable(g.action) if g.action is not None else None
            done += len(chunk)
            progress(len(chunk))
    return done
