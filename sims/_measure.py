"""Measuring this machine: the forward-pass law and everything a real call pays besides.

``cpu-measured`` is what a virtual replay charges when it should agree with the wall clock on
this machine. Three groups of figures, each from warm work only (the first round of every
shape is run and dropped: a first pass pays one-off set-up a replay never pays again):

* **forward passes** -- with a scenario, the passes of its calls made through the real path
  (below), one line per kind through the medians of the one-row and the sixteen-row passes;
  first, and without a scenario the whole law, a tight loop of prefills of a short and a long
  prompt and decode passes of one and sixteen rows (the planner's batches) after its prompt
  prefix, fitted by the runtime's own law (Theil-Sen over tokens fed per pass), which also
  refuses a busy machine. On a 2-core CPU the tight loop ran 1.3-1.5x faster than the same
  shapes through the real path, so only a scenario-less profile is charged by it;
* **a call's own costs** -- live-shaped calls (the scenario's schema and prompts, cached prefix,
  grammar, jump-forward) made through the real path, awaited on an event loop: the call's wall
  time minus its forward passes is the hop to the worker thread and back, tokenizing, the
  grammar's set-up and reading the output (:attr:`LatencyProfile.call_cost`); the gap before
  each decode pass is that pass's own work (the grammar mask, the argmax, the next tensors:
  :attr:`LatencyProfile.pass_cost`), and how it grows with rows in a sixteen-row call is
  :attr:`LatencyProfile.row_cost`;
* **idle time** -- the same live-shaped call made right after the previous one and after the
  model sat idle for a while, interleaved: what a call pays on top after idle time
  (:attr:`LatencyProfile.idle_cost`), from the shortest idle time that costs measurably
  (:attr:`LatencyProfile.idle_after_s`), and after each longer one up to the scenario's own
  gap between events (:attr:`LatencyProfile.longer_idle`);
* **a fresh backend's first call** -- a replay's first call (``prepare``'s calibration, on the
  fresh backend each strategy gets, after the model sat idle) against the same call at once:
  its forward passes' ratio (:attr:`LatencyProfile.first_call_factor`), which the latency model
  learns from before the first event;
* **tree selection** -- the executor deciding events from a filled tree, from the moment the
  event is handed over to the decision (:attr:`LatencyProfile.select_cost`).

Each cost keeps its measured distribution (:class:`~forethought.models._cost.Cost`).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from forethought.models import LatencyModel, LatencyProfile
from forethought.models.internals import Cost, Pass, PassKind, Prompt, state_text
from forethought.policies import ActionSchema, ConfigError, PolicyNode, PolicyTree
from forethought.runtime import Event, Tier
from forethought.runtime.internals import Executor

from ._scenario import Scenario

if TYPE_CHECKING:
    # The local model (torch): only named in annotations, so the sims import without it.
    from forethought.models import TransformersBackend

__all__ = ["measure_profile"]

_T = TypeVar("_T")
_BATCH = 16  # the planner's batch size (PlannerConfig.batch_size's default)
_IDLE_GAPS = (0.0, 0.02, 0.1, 0.3, 1.0)  # idle seconds before a call; 0: back to back
_FIRST_IDLE_S = 1.0  # idle seconds before a fresh backend's first call


@dataclass(frozen=True, slots=True)
class _Timed:
    """One forward pass as it ran: its shape, and when it started and ended."""

    shape: Pass
    start: float
    end: float


class _PassLog:
    """A real clock (the event loop's: monotonic) that notes every forward pass it times."""

    def __init__(self) -> None:
        self.passes: list[_Timed] = []

    def now(self) -> float:
        """Monotonic seconds, the clock asyncio's loops read."""
        return time.monotonic()

    def timed(self, work: Callable[[], _T], shape: Pass) -> tuple[_T, float]:
        """Run the pass, note it, return its seconds."""
        start = time.monotonic()
        out = work()
        end = time.monotonic()
        self.passes.append(_Timed(shape, start, end))
        return out, end - start

    def begin_call(self) -> None:
        """Nothing to note: real time passes by itself."""

    def start_call(self) -> None:
        """Nothing to note: real time passes by itself."""

    def end_call(self) -> None:
        """Nothing to note: real time passes by itself."""


@dataclass(slots=True)
class _CallSamples:
    """What the calls measured: per-call and per-pass costs outside the forward passes."""

    call: list[float]
    pass_gaps: list[tuple[int, float]]  # (rows of the pass, the gap before it)
    idle: list[tuple[float, float]]  # (idle seconds before a call, its wall seconds)
    passes: list[_Timed]  # the forward passes of the warm calls, back to back


def _split(wall: float, passes: Sequence[_Timed]) -> tuple[float, list[tuple[int, float]]]:
    """A call's wall time minus its forward passes and the gaps before its decode passes."""
    gaps = [
        (p.shape.rows, max(p.start - before.end, 0.0))
        for before, p in itertools.pairwise(passes)
        if p.shape.kind is PassKind.STEP
    ]
    forward = sum(p.end - p.start for p in passes)
    return wall - forward - sum(g for _, g in gaps), gaps


async def _measure_calls(
    backend: TransformersBackend,
    log: _PassLog,
    schema: ActionSchema,
    context: str,
    events: Sequence[str],
    rounds: int,
    idle_gaps: Sequence[float] = _IDLE_GAPS,
) -> _CallSamples:
    """Live-shaped calls (one event) and planner-shaped ones (sixteen), awaited on this loop."""
    loop = asyncio.get_running_loop()
    out = _CallSamples([], [], [], [])
    async with backend:
        await backend.prepare(schema)
        batch = [events[i % len(events)] + f" #{i}" for i in range(_BATCH)]
        shapes = [[e] for e in events] * 2 + [batch] * max(rounds // 2, 2)
        for k, rows in enumerate([shapes[0], batch, *shapes]):
            log.passes.clear()
            t0 = loop.time()
            await backend.generate(context, rows, schema, deadline=math.inf, max_new_tokens=48)
            wall = loop.time() - t0
            if k < 2:
                continue  # each shape's first call warms it up
            call, gaps = _split(wall, log.passes)
            out.pass_gaps.extend(gaps)
            out.passes.extend(log.passes)
            if len(rows) == 1:
                out.call.append(call)
        # The same call (the same passes) after each idle time, in a shuffled order per round
        # so a drift of the machine spreads over every idle time alike.
        order = random.Random(1)
        for _ in range(max(rounds, 4)):  # each idle time gets a distribution of its own
            gaps_ = list(idle_gaps)
            order.shuffle(gaps_)
            for gap in gaps_:
                await backend.generate(
                    context, events[:1], schema, deadline=math.inf, max_new_tokens=48
                )
                await asyncio.sleep(gap)
                t0 = loop.time()
                await backend.generate(
                    context, events[:1], schema, deadline=math.inf, max_new_tokens=48
                )
                out.idle.append((gap, loop.time() - t0))
    return out


async def _measure_first_calls(
    backend: TransformersBackend, log: _PassLog, schema: ActionSchema, rounds: int
) -> list[float]:
    """How much slower a fresh backend's first call's forward passes are, after a second's idle.

    A replay gives each strategy a fresh backend, started after the model sat idle (the
    measurement before it, the strategy before), and its first call is ``prepare``'s
    calibration. Per round: a fresh one after ``_FIRST_IDLE_S``, its first ``prepare``, then the
    same call again at once; the ratio of the first's forward passes to the second's. The first
    call's passes are what the latency model learns from before any event (its own work
    aside: it runs before the first event).
    """
    out = []
    for _ in range(max(rounds, 3)):
        twin = backend.sharing(clock=log)
        await asyncio.sleep(_FIRST_IDLE_S)
        async with twin:
            forward = []
            for _ in range(2):
                log.passes.clear()
                await twin.prepare(schema)
                forward.append(sum(p.end - p.start for p in log.passes))
        out.append(forward[0] / max(forward[1], 1e-9))
    return out


def _idle(
    samples: Sequence[tuple[float, float]], gaps: Sequence[float] = _IDLE_GAPS
) -> tuple[float, Cost, tuple[tuple[float, Cost], ...]]:
    """The shortest idle time that costs, what a call pays on top after it, and after longer.

    A call after ``gap`` seconds idle pays its wall time minus the median back-to-back one.
    The threshold is the longest idle time that still cost nothing measurable (5 % of the call,
    or 2 ms) below the first from which every longer one did; none: idle time is free here.
    Each idle time from there on keeps its own distribution (the first is the profile's
    ``idle_cost``, the longer ones its ``longer_idle``).
    """
    walls = {g: [w for gap, w in samples if gap == g] for g in gaps}
    base = statistics.median(walls[0.0])
    noise = max(0.002, 0.05 * base)
    for k in range(1, len(gaps)):
        later = gaps[k:]
        if all(statistics.median(walls[g]) - base > noise for g in later):
            costs = [(g, Cost.measured(w - base for w in walls[g])) for g in later]
            return gaps[k - 1], costs[0][1], tuple(costs[1:])
    return math.inf, Cost(), ()


def _held_spread(spread: float) -> float:
    """The spread a measured profile charges: its passes' p95 / p50, held to [1.05, 1.5].

    One bound for the tight-loop law and for the real path's.
    """
    return max(1.05, min(spread, 1.5))


def _path_line(
    passes: Sequence[_Timed], kind: PassKind, fallback: tuple[float, float]
) -> tuple[float, float, list[float]]:
    """``y = a + b * x`` for the real path's passes of ``kind``, and each pass's ratio to it.

    x is what the latency law counts: a prefill's tokens, a decode pass's tokens beyond the
    first. The line runs through the medians of the one-row passes (a live call's) and of
    the many-row ones (a planner batch's): a median per group, not a fit over every pair, as
    one-row passes differ by a few tokens and pairs of them would give slopes of pure noise.
    With one group only, ``fallback`` (the tight-loop law) is scaled to meet its median.
    """

    def x_of(shape: Pass) -> int:
        return shape.tokens if kind is PassKind.PREFILL else shape.tokens - 1

    groups = [
        [
            (x_of(p.shape), p.end - p.start)
            for p in passes
            if p.shape.kind is kind and one == (p.shape.rows == 1)
        ]
        for one in (True, False)
    ]
    medians = [
        (statistics.median(x for x, _ in g), statistics.median(y for _, y in g))
        for g in groups
        if g
    ]
    a, b = fallback
    if len(medians) == 2 and medians[1][0] > medians[0][0]:
        (x1, y1), (x2, y2) = medians
        b = max((y2 - y1) / (x2 - x1), 0.0)
        a = max(y1 - b * x1, 1e-6)
    elif medians:
        x, y = medians[0]
        scale = y / max(a + b * x, 1e-9)
        a, b = a * scale, b * scale
    ratios = [y / max(a + b * x, 1e-9) for g in groups for x, y in g]
    return a, b, ratios


def _law(
    backend: TransformersBackend, log: _PassLog, rounds: int, prefix: Sequence[int] = ()
) -> tuple[LatencyModel, float]:
    """Fit the forward-pass law on prefills and 1- and 16-row decode passes after ``prefix``.

    ``prefix``: the scenario's prompt prefix, prefilled once (in the dropped first round) and
    reused from the cache, as a replay's calls reuse it. Returns the fitted model and the
    spread of the rounds' median 1-row steps (max / min).
    """
    decoder = backend.decoder
    rng = random.Random(0)
    vocab = min(backend.loaded.tokenizer.vocab_size, 1000)
    fit = LatencyModel()
    step_medians = []
    for r in range(rounds + 1):  # the first round warms up and is dropped
        log.passes.clear()
        for length, rows, steps in ((16, 1, 1), (144, 1, 1), (16, 1, 9), (16, _BATCH, 5)):
            batch = [[rng.randrange(5, vocab) for _ in range(length)] for _ in range(rows)]
            decoder.decode(
                prefix,
                batch,
                deadline=math.inf,
                max_new_tokens=steps,
                reuse_prefix=bool(prefix),
                stop_at_eos=False,
            )
        if r == 0:
            continue
        ones = []
        for p in log.passes:
            seconds = p.end - p.start
            if p.shape.kind is PassKind.PREFILL:
                fit.observe_prefill(p.shape.tokens, seconds)
            else:
                fit.observe_step(p.shape.tokens, seconds)
                if p.shape.tokens == 1:
                    ones.append(seconds)
        step_medians.append(statistics.median(ones))
    spread = max(step_medians) / max(min(step_medians), 1e-9)
    return fit, spread


def _selection(scenario: Scenario, rounds: int) -> Cost:
    """Time the executor deciding the scenario's events from a tree that holds them all."""
    spec = scenario.spec
    schema, space, state = spec.action_schema(), spec.event_space(), spec.initial_state()
    action = schema.readable(schema.validate(spec.default_action))
    tree = PolicyTree()
    keys = [k for e in scenario.events() if (k := space.key(e.type, e.params)) is not None]
    for key in dict.fromkeys(keys):
        fp = state.fingerprint_for(key.type)
        tree.insert(PolicyNode(fp, key, dict(action), "", 1.0, "measure", 0, 0.0, 0.0))
    executor = Executor(
        space=space,
        schema=schema,
        tree=tree,
        default_action=spec.default_action,
        description=spec.description,
        guards=spec.guard_set(),
        type_defaults=spec.type_defaults(),
    )
    events = [e for e in scenario.events() if space.key(e.type, e.params) is not None]

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        seconds = []
        for i in range(max(rounds, 1) * 40):
            ev = events[i % len(events)]
            now = loop.time()
            event = Event(f"m{i}", ev.type, dict(ev.params), arrived_at=now, deadline=now + 60)
            decision = await asyncio.create_task(
                executor.decide(event, state), name="sims.measure.decide"
            )
            if decision.tier is Tier.TREE:
                seconds.append(loop.time() - now)
        return seconds[len(seconds) // 10 :]  # the first tenth warms caches up

    return Cost.measured(asyncio.run(run())) if events else Cost()


def measure_profile(
    backend: TransformersBackend,
    *,
    scenario: Scenario | None = None,
    rounds: int = 5,
    max_spread: float = 1.5,
    alternatives: Sequence[str] = (),
) -> LatencyProfile:
    """Measure this machine: warm rounds of passes, calls and decisions (see the module).

    The calls and decisions are the ``scenario``'s (its schema, its prompts, its events); with
    none, a call's own costs and tree selection are not measured (left free). A schema whose
    actions need no decode pass (one enum field: the first token decides, the grammar writes
    the rest) leaves the pass costs empty: its calls never pay them. Refused with a
    ConfigError when the rounds' decode steps disagree by more than ``max_spread`` (the machine
    is busy, and any figure would be an accident of the moment).
    """
    log = _PassLog()
    twin = backend.sharing(clock=log)
    context = ""
    prefix: list[int] = []
    if scenario is not None:
        spec = scenario.spec
        context = state_text(spec.description, spec.initial_state().to_json())
        prefix, _ = twin.prompts.encode(Prompt(context, "-"), spec.action_schema())
    fit, spread = _law(twin, log, rounds, prefix)
    if spread > max_spread:
        others = f" ({', '.join(alternatives)})" if alternatives else ""
        raise ConfigError(
            "--profile",
            "cpu-measured",
            f"this machine is busy: decode steps varied {spread:.1f}x over {rounds} rounds; "
            f"re-run when it is quiet, or choose a fixed profile{others}",
        )
    law = fit.profile()
    profile = replace(law, spread95=_held_spread(law.spread95))
    if scenario is None:
        return profile
    spec = scenario.spec
    space = spec.event_space()
    texts = [k.describe() for e in scenario.events()[:8] if (k := space.key(e.type, e.params))]
    # Idle times up to the scenario's own: its typical gap between events, where that is
    # longer than the longest fixed one (a replay's live calls come after about that long).
    # Not more of its gaps: a call is charged the cost of the longest measured idle time it
    # waited past, and _idle needs every idle time from its threshold on to cost measurably,
    # so one cheap long pause (noise) would make idle time free.
    at = [e.at_ms / 1e3 for e in scenario.events()]
    typical = statistics.median(b - a for a, b in itertools.pairwise(at)) if len(at) > 2 else 0.0
    gaps = (*_IDLE_GAPS, round(typical, 1)) if typical > _IDLE_GAPS[-1] + 0.05 else _IDLE_GAPS
    samples = asyncio.run(
        _measure_calls(
            backend.sharing(clock=log),
            log,
            spec.action_schema(),
            context,
            texts or ["event"],
            rounds,
            gaps,
        )
    )
    # The forward passes are charged as they ran on the real path (through the worker, with
    # the grammar's work between them), not as in the tight loop above: on the
    # same machine and shapes those ran 1.3-1.5x faster, so a replay charged by them fitted
    # live calls in budgets that the real clock's live calls did not fit.
    pa, pb, p_ratios = _path_line(
        samples.passes, PassKind.PREFILL, (law.prefill_base_s, law.prefill_per_token_s)
    )
    sa, sb, s_ratios = _path_line(
        samples.passes, PassKind.STEP, (law.step_base_s, law.step_per_row_s)
    )
    ratios = sorted(p_ratios + s_ratios)
    spread = ratios[min(len(ratios) - 1, int(0.95 * len(ratios)))] if ratios else law.spread95
    profile = replace(
        profile,
        prefill_base_s=pa,
        prefill_per_token_s=pb,
        step_base_s=sa,
        step_per_row_s=sb,
        spread95=_held_spread(spread),
    )
    one = [g for rows, g in samples.pass_gaps if rows == 1]
    base = statistics.median(one) if one else 0.0
    per_row = [(g - base) / (rows - 1) for rows, g in samples.pass_gaps if rows > 1]
    idle_after, idle_cost, longer_idle = _idle(samples.idle, gaps)
    first = asyncio.run(_measure_first_calls(backend, log, spec.action_schema(), rounds))
    return replace(
        profile,
        call_cost=Cost.measured(samples.call),
        pass_cost=Cost.measured(one),
        row_cost=Cost.measured(per_row),
        select_cost=_selection(scenario, rounds),
        idle_cost=idle_cost,
        idle_after_s=idle_after,
        longer_idle=longer_idle,
        first_call_factor=Cost.measured(first),
    )
