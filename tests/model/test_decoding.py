"""Mechanics of the decoder on a tiny random-weight Llama (fp32, CPU)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from forethought.models import (
    GenerationStatus,
    LatencyModel,
    LatencyProfile,
    TransformersBackend,
)
from forethought.models._prompt import Prompt
from forethought.policies import ActionSchema, DeadlinePassed, PromptTooLong

pytestmark = pytest.mark.model

CONTEXT = "You steer a robot. State: zone=aisle, battery=0.8."
EVENTS = ["obstacle left 0.5 m", "battery low", "path clear", "person ahead", "door closed"]


def far() -> float:
    return time.monotonic() + 120.0


def _full_logits(backend: TransformersBackend, ids: list[int]) -> torch.Tensor:
    model = backend.loaded.model
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def test_prefix_reuse_gives_the_same_logits_as_no_reuse(tiny_backend: TransformersBackend) -> None:
    d, p = tiny_backend.decoder, tiny_backend.prompts
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    )
    prefix, own = p.encode(Prompt(CONTEXT, EVENTS[0]), schema)
    # The score path runs prefix-cached passes; compare its per-token log-likelihoods with a
    # full forward pass over the same tokens.
    cand = [[11, 12, 13, 14], [11, 12, 15], [16, 17, 18, 19, 20]]
    result = d.score(prefix, own, cand, deadline=far())
    assert result.reason is GenerationStatus.DONE
    assert result.scores is not None
    for tokens, got in zip(cand, result.scores, strict=True):
        full = torch.log_softmax(_full_logits(tiny_backend, [*prefix, *own, *tokens]), dim=-1)
        start = len(prefix) + len(own)
        want = sum(float(full[start + j - 1, t]) for j, t in enumerate(tokens))
        assert got == pytest.approx(want, abs=1e-3)


def test_reuse_and_no_reuse_decode_the_same_tokens(tiny_backend: TransformersBackend) -> None:
    d, p = tiny_backend.decoder, tiny_backend.prompts
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    )
    prefix, own = p.encode(Prompt(CONTEXT, EVENTS[1]), schema)
    a = d.decode(prefix, [own], deadline=far(), max_new_tokens=12, stop_at_eos=False)
    b = d.decode(
        prefix, [own], deadline=far(), max_new_tokens=12, stop_at_eos=False, reuse_prefix=False
    )
    assert a.rows[0].tokens == b.rows[0].tokens
    assert len(a.rows[0].tokens) == 12
    assert a.prefill_tokens < b.prefill_tokens or d.prefix_hits > 0


def test_batched_greedy_equals_sequential(
    tiny_backend: TransformersBackend, robot_schema: ActionSchema
) -> None:
    batch = tiny_backend.generate_sync(CONTEXT, EVENTS, robot_schema, deadline=far())
    for event, got in zip(EVENTS, batch, strict=True):
        (alone,) = tiny_backend.generate_sync(CONTEXT, [event], robot_schema, deadline=far())
        assert got.text == alone.text
        assert got.status is alone.status


def test_unconstrained_batch_equals_sequential_tokens(tiny_backend: TransformersBackend) -> None:
    d, p = tiny_backend.decoder, tiny_backend.prompts
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    )
    enc = [p.encode(Prompt(CONTEXT, e), schema) for e in EVENTS]
    prefix = enc[0][0]
    rows = [o for _, o in enc]
    batch = d.decode(prefix, rows, deadline=far(), max_new_tokens=10, stop_at_eos=False)
    for row, got in zip(rows, batch.rows, strict=True):
        alone = d.decode(prefix, [row], deadline=far(), max_new_tokens=10, stop_at_eos=False)
        assert got.tokens == alone.rows[0].tokens


def test_jump_forward_feeds_forced_tokens_in_fewer_passes(
    tiny_backend: TransformersBackend, robot_schema: ActionSchema
) -> None:
    d, p = tiny_backend.decoder, tiny_backend.prompts
    prefix, own = p.encode(Prompt(CONTEXT, EVENTS[2]), robot_schema)
    compiler = tiny_backend.grammar_compiler
    compiled = compiler.compile(robot_schema.json_schema())
    fast = d.decode(prefix, [own], deadline=far(), compiler=compiler, compiled=compiled)
    slow = d.decode(
        prefix, [own], deadline=far(), compiler=compiler, compiled=compiled, jump_forward=False
    )
    assert fast.rows[0].reason is GenerationStatus.DONE
    assert slow.rows[0].reason is GenerationStatus.DONE
    assert fast.rows[0].forced > 0
    assert slow.rows[0].forced == 0
    assert fast.passes < slow.passes
    for r in (fast, slow):
        robot_schema.parse(tiny_backend.loaded.tokenizer.decode(r.rows[0].tokens))


class _WatchedCancel(threading.Event):
    """A cancel event that counts the decoder's checks of it (one before every pass)."""

    def __init__(self, checks_before_cancel: int) -> None:
        super().__init__()
        self.checks = 0
        self.checks_seeing_it = 0
        self.due = threading.Event()
        """Set once the decoder has checked ``checks_before_cancel`` times: passes ran."""
        self._before = checks_before_cancel

    def is_set(self) -> bool:
        now_set = super().is_set()
        self.checks += 1
        self.checks_seeing_it += now_set
        if self.checks >= self._before:
            self.due.set()
        return now_set


def test_cancel_stops_within_a_step(tiny_backend: TransformersBackend) -> None:
    """Cancelled from another thread mid-decode, it stops at its next check: the pass in
    flight finishes and no other starts. The cancel comes after the decoder's checks, not
    after a fixed time: a loaded machine once cancelled before the first pass."""
    d, p = tiny_backend.decoder, tiny_backend.prompts
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    )
    prefix, own = p.encode(Prompt(CONTEXT, EVENTS[3]), schema)
    # Three checks come before the first pass (the call, the prefix, the prefill), one
    # before each pass after: the sixth means two passes ran.
    cancel = _WatchedCancel(checks_before_cancel=6)

    def fire() -> None:
        if cancel.due.wait(60):
            cancel.set()

    timer = threading.Thread(target=fire, name="test.cancel")
    timer.start()
    result = d.decode(
        prefix,
        [own],
        deadline=far(),
        cancel=cancel,
        max_new_tokens=100_000,
        stop_at_eos=False,
    )
    timer.join()
    assert cancel.due.is_set()
    assert result.rows[0].reason is GenerationStatus.CANCELLED
    assert result.passes >= 2
    # It returned at the first check that saw the cancel: no pass after it, whatever the
    # machine's speed (within one step: the pass in flight when it came).
    assert cancel.checks_seeing_it == 1
    assert result.passes <= cancel.checks - 3  # no pass without a check before it


def test_deadline_stops_before_the_overshooting_pass(tiny_backend: TransformersBackend) -> None:
    d, p = tiny_backend.decoder, tiny_backend.prompts
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    )
    prefix, own = p.encode(Prompt(CONTEXT, EVENTS[4]), schema)
    d.decode(prefix, [own], deadline=far(), max_new_tokens=2)  # cache the prefix
    overshoots = []
    lat = tiny_backend.latency
    # Budgets the call is admitted under (its predicted p95 and more), whatever the machine's
    # speed today; each one cuts the 100,000-token run.
    admitted = lat.call(len(own), lat.typical_steps()).p95
    for factor in (1.2, 2.0, 3.5, 6.0):
        deadline = time.monotonic() + admitted * factor
        r = d.decode(prefix, [own], deadline=deadline, max_new_tokens=100_000, stop_at_eos=False)
        assert r.rows[0].reason is GenerationStatus.DEADLINE
        overshoots.append(r.finished_at - deadline)
    step = tiny_backend.latency.step(1).p95
    # One pass can run long on a busy 2-core machine (scheduling, GC): allow one outlier.
    ranked = sorted(overshoots)
    assert ranked[-2] <= step + 0.005, (overshoots, step)
    assert ranked[-1] <= 5 * step + 0.05, (overshoots, step)


def test_call_predicted_not_to_fit_is_not_started(
    tiny_model_dir, robot_schema: ActionSchema
) -> None:
    # A device whose prefill is predicted at 1 s: a 0.5 s budget must not start at all.
    slow = LatencyModel(LatencyProfile(1.0, 0.001, 0.05, 0.001), fixed=True)
    backend = TransformersBackend(
        model=str(tiny_model_dir), device="cpu", dtype="float32", latency=slow
    )
    backend.load(warm_up=False)
    t0 = time.monotonic()
    (g,) = backend.generate_sync(
        CONTEXT, [EVENTS[0]], robot_schema, deadline=time.monotonic() + 0.5
    )
    assert time.monotonic() - t0 < 0.25
    assert g.status is GenerationStatus.NOT_STARTED
    assert g.status.cut
    assert g.action is None
    assert g.output_tokens == 0


def test_past_deadline_raises(
    tiny_backend: TransformersBackend, robot_schema: ActionSchema
) -> None:
    with pytest.raises(DeadlinePassed) as info:
        tiny_backend.generate_sync(CONTEXT, ["x"], robot_schema, deadline=time.monotonic() - 0.5)
    assert info.value.late_by >= 0.5


def test_prompt_longer_than_context_raises(
    tiny_backend: TransformersBackend, robot_schema: ActionSchema
) -> None:
    with pytest.raises(PromptTooLong) as info:
        tiny_backend.generate_sync(CONTEXT * 60, ["x"], robot_schema, deadline=far())
    assert info.value.limit == 512


def test_latency_model_predicts_measured_calls(tiny_backend: TransformersBackend) -> None:
    d, p = tiny_backend.decoder, tiny_backend.prompts
    lat = tiny_backend.latency
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    )
    prefix, own = p.encode(Prompt(CONTEXT, "calibrate"), schema)
    for _ in range(6):  # let the online fit see this shape
        d.decode(prefix, [own], deadline=far(), max_new_tokens=20, stop_at_eos=False)
    errors = []
    for _ in range(5):
        predicted = lat.call(len(own), steps=19)
        r = d.decode(prefix, [own], deadline=far(), max_new_tokens=20, stop_at_eos=False)
        measured = r.finished_at - r.started_at
        errors.append(abs(measured - predicted.p50) / measured)
    assert sorted(errors)[2] < 0.5  # median relative error under 50 % on a noisy 2-core box


def test_an_action_the_prefill_completes_counts_as_zero_decode_passes(
    tiny_backend: TransformersBackend,
) -> None:
    # One enum: the prefill's logits choose the value, the grammar forces the rest, so the
    # action needs no decode pass. That is an observation (0), not "nothing seen": left out,
    # typical_steps keeps its default 8 and every live call is predicted 8 steps too long.
    lat = LatencyModel()
    backend = tiny_backend.sharing(latency=lat)
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]}
    )
    gen = backend.generate_sync(CONTEXT, [EVENTS[0]], schema, deadline=far())[0]
    assert gen.status is GenerationStatus.DONE
    assert gen.output_tokens == gen.forced_tokens + 1  # one chosen token, from the prefill
    assert lat.history().steps == ()  # no decode pass ran
    assert lat.typical_steps() == 0
