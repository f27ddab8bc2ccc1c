"""Guards compiled into the grammar: 1,000 actions sampled under it, none forbidden (issue 47).

Per grammar (llguidance, xgrammar), in process, on the tiny model's tokenizer: 1,000 random walks
over the tokens the narrowed grammar allows at each step -- the widest sampling there is, every
value the grammar lets through as likely as any -- and none spells a forbidden action; the same
walks over the grammar as written do. Then the live path end to end: the tiny model generating
through the backend under the narrowed schema.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import pytest

from forethought.models import GenerationStatus, TransformersBackend
from forethought.models.grammar._compilers import make_grammar_compiler
from forethought.policies import ActionForm, ActionSchema, GuardRule, GuardSet

pytestmark = pytest.mark.model

ACTION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {
            "enum": ["stop", "slow_down", "continue", "turn_left", "turn_right", "reverse", "dock"]
        },
        "speed": {"type": "number", "minimum": 0, "maximum": 1.5},
        "lights": {"type": "boolean"},
    },
    "required": ["action", "speed", "lights"],
}
GUARDS = GuardSet(
    [
        GuardRule(name="no-moving-on", forbid=[{"action": ["continue", "reverse", "dock"]}]),
        GuardRule(name="slow", allow=[{"speed": {"max": 0.3}}]),
        GuardRule(name="dark", forbid=[{"lights": True}]),
    ]
)
SAMPLES = 1000


def _random_walks(compiler: Any, tokenizer: Any, vocab: int, schema: ActionSchema) -> list[str]:
    """``SAMPLES`` texts, each a uniformly random walk over the tokens the grammar allows.

    Nothing the grammar allows is less likely than anything else the way a model's taste
    would make it: every value the grammar lets through is there to be drawn.
    """
    compiled = compiler.compile(schema.json_schema(ActionForm.COMPACT))
    rng = random.Random(47)
    mask = compiler.allocate_mask(1)
    texts = []
    for _ in range(SAMPLES):
        matcher = compiler.matcher(compiled)
        tokens: list[int] = []
        for _step in range(200):
            if matcher.done:
                break
            matcher.fill_mask(mask, 0)
            bits = np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")
            allowed = [t for t in np.nonzero(bits)[0].tolist() if t < vocab]
            allowed = [t for t in allowed if t != tokenizer.eos_token_id] or allowed
            token = rng.choice(allowed)
            assert matcher.accept(token)
            tokens.append(token)
        texts.append(tokenizer.decode(tokens))
    return texts


@pytest.mark.parametrize("grammar", ["llguidance", "xgrammar"])
def test_random_walks_over_the_narrowed_grammar_never_spell_a_forbidden_action(
    tiny_backend: TransformersBackend, grammar: str
) -> None:
    schema = ActionSchema.from_json_schema(ACTION)
    narrowed = GUARDS.narrowed(schema, (0, 1, 2))
    assert narrowed is not None
    tok = tiny_backend.loaded.tokenizer
    vocab = tiny_backend.loaded.model.config.vocab_size
    compiler = make_grammar_compiler(grammar, tok, vocab)
    # Each parses and validates under the schema as written.
    walks = _random_walks(compiler, tok, vocab, narrowed)
    actions = [schema.readable(schema.parse(t)) for t in walks]
    assert len(actions) == SAMPLES
    assert [a for a in actions if GUARDS.refusal(a, {}, {}) is not None] == []
    assert {a["action"] for a in actions} == {"stop", "slow_down", "turn_left", "turn_right"}
    assert {a["lights"] for a in actions} == {False}
    assert max(a["speed"] for a in actions) <= 0.3
    # Control: the same walks over the grammar as written spell forbidden actions.
    control = [
        schema.readable(schema.parse(t)) for t in _random_walks(compiler, tok, vocab, schema)
    ]
    assert sum(GUARDS.refusal(a, {}, {}) is not None for a in control) > SAMPLES // 2


def test_the_live_path_generates_under_the_narrowed_grammar(
    tiny_backend: TransformersBackend,
) -> None:
    """End to end through the backend: 100 generations under the narrowed schema."""
    schema = ActionSchema.from_json_schema(ACTION)
    narrowed = GUARDS.narrowed(schema, (0, 1, 2))
    assert narrowed is not None
    events = [f"sensor reading {i}: {i * 7919 % 1000} units" for i in range(100)]
    done = 0
    for start in range(0, len(events), 25):
        gens = tiny_backend.generate_sync(
            "You drive a warehouse robot.",
            events[start : start + 25],
            narrowed,
            deadline=time.monotonic() + 300,
            max_new_tokens=64,
        )
        for g in gens:
            assert g.status is not GenerationStatus.INVALID, g.text
            if g.ok and g.action is not None:
                done += 1
                readable = narrowed.readable(g.action)
                schema.validate(readable)
                assert GUARDS.refusal(readable, {}, {}) is None
    assert done >= 25
