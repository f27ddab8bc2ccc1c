"""The model-layer sections of ``forethought bench``: the latency law and each optimisation.

Each section runs on the loaded model and reports figures measured in the same run.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from forethought.models import CancelSignal, DecodeOptions, TransformersBackend
from forethought.models.internals import Prompt, make_grammar_compiler
from forethought.policies import ActionForm, ActionSchema

__all__ = ["BENCH_ACTION", "ModelBench"]

BENCH_ACTION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {
            "enum": [
                "stop",
                "slow_down",
                "continue",
                "turn_left",
                "turn_right",
                "reverse",
                "dock",
                "wait",
            ]
        },
        "speed": {"type": "number", "minimum": 0, "maximum": 1.5},
    },
    "required": ["action", "speed"],
}
CONTEXT = (
    "You drive an autonomous mobile robot in a warehouse. Keep people and goods safe; "
    "prefer stopping when unsure. State: zone=aisle_4, battery=0.72, load=pallet, "
    "speed=1.1 m/s, heading=north."
)
EVENTS = [
    "obstacle: side=front distance_m=0.5",
    "obstacle: side=left distance_m=1.25",
    "person: side=right distance_m=2.0",
    "battery_low: level=0.15",
    "path_clear",
    "forklift: side=front distance_m=3.0",
    "spill: distance_m=1.0",
    "dock_free: dock=3",
    "obstacle: side=right distance_m=0.75",
    "person: side=front distance_m=1.0",
    "door_closed: distance_m=4.0",
    "aisle_blocked: aisle=5",
    "battery_low: level=0.05",
    "estop_released",
    "pallet_dropped: distance_m=2.5",
    "zone_change: zone=loading",
]
FILLER = (
    "The warehouse has twelve aisles with racks on both sides. Forklifts have priority at "
    "crossings. Docks are at the south wall. "
)


def _fit(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    pred = slope * x + intercept
    ss_res, ss_tot = float(((y - pred) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    return {
        "slope_ms": slope,
        "intercept_ms": intercept,
        "r2": 1.0 - ss_res / ss_tot if ss_tot else 1.0,
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 2)


def _far() -> float:
    return time.monotonic() + 600.0


class ModelBench:
    """The model suite's sections; each returns its figures and prints a line."""

    def __init__(
        self, backend: TransformersBackend, quick: bool, say: Callable[[str], None]
    ) -> None:
        self.b = backend
        self.quick = quick
        self.say = say
        self.schema = ActionSchema.from_json_schema(BENCH_ACTION)
        self.reps = 1 if quick else 7  # after one warm call per shape

    def variant(self, **options: Any) -> TransformersBackend:
        """The backend decoding another way (same weights and latency fit; a fresh cache)."""
        return self.b.sharing(latency=self.b.latency, options=DecodeOptions(**options))

    def _one(self, b: TransformersBackend, event: str, **kw: Any) -> Any:
        """One action generated for ``event`` (no deadline unless given)."""
        kw.setdefault("deadline", _far())
        return b.generate_sync(CONTEXT, [event], self.schema, **kw)[0]

    def _median_call(self, fn: Callable[[], float]) -> float:
        fn()  # warm this exact shape once
        return statistics.median(fn() for _ in range(self.reps))

    def law(self) -> dict[str, Any]:
        """T against N_out (cached prefix, fixed lengths) and against N_in (no reuse)."""
        d, p = self.b.decoder, self.b.prompts
        prefix, own = p.encode(Prompt(CONTEXT, EVENTS[0]), self.schema)
        n_outs = [4, 8, 16, 24] if self.quick else [4, 8, 16, 32, 64, 96, 128]

        def call(n: int) -> float:
            r = d.decode(prefix, [own], deadline=_far(), max_new_tokens=n, stop_at_eos=False)
            return r.finished_at - r.started_at

        for n in n_outs:  # warm every shape: a GPU pays set-up on a shape's first call
            call(n)
        # Rounds over all lengths, interleaved, the median of each: a busy neighbour on a
        # shared machine then disturbs no single point more than the others.
        rounds = [[call(n) for n in n_outs] for _ in range(2 if self.quick else 3)]
        times = [_ms(statistics.median(col)) for col in zip(*rounds, strict=True)]
        fit = _fit(n_outs, times)
        self.say(f"T vs N_out      {dict(zip(n_outs, times, strict=True))} ms")
        self.say(
            f"  fit: t_step={fit['slope_ms']:.1f} ms, intercept={fit['intercept_ms']:.0f} ms,"
            f" r2={fit['r2']:.4f}"
        )
        filler = p.encode_action(FILLER * 80)
        n_ins = [64, 256, 1024] if self.quick else [64, 128, 256, 512, 1024]

        def pre(n: int) -> float:
            r = d.decode(
                [],
                [filler[:n]],
                deadline=_far(),
                max_new_tokens=8,
                reuse_prefix=False,
                stop_at_eos=False,
            )
            return r.finished_at - r.started_at

        for n in n_ins:  # warm every input length before timing any (see above)
            pre(n)
        rounds_in = [[pre(n) for n in n_ins] for _ in range(2 if self.quick else 3)]
        t_in = [_ms(statistics.median(col)) for col in zip(*rounds_in, strict=True)]
        fit_in = _fit(n_ins, t_in)
        self.say(
            f"T vs N_in (N_out=8) {dict(zip(n_ins, t_in, strict=True))} ms; "
            f"{fit_in['slope_ms'] * 1e3:.0f} us per input token"
        )
        return {
            "rounds": len(rounds),
            "n_out": n_outs,
            "t_ms": times,
            "fit": fit,
            "n_in": n_ins,
            "t_in_ms": t_in,
            "fit_in": fit_in,
        }

    def compact_vs_verbose(self) -> dict[str, Any]:
        """The same decision written verbose (readable keys + reason) and compact."""
        out: dict[str, dict[str, Any]] = {}
        for form in (ActionForm.VERBOSE, ActionForm.COMPACT):
            v = self.variant(form=form)
            v.prepare_sync(self.schema)
            g = self._one(v, EVENTS[0], max_new_tokens=96)
            out[form.value] = {
                "tokens": g.output_tokens,
                "ms": _ms(g.seconds),
                "text": g.text,
                "status": g.status.value,
                "ttft_ms": _ms((g.first_token_at or g.finished_at) - g.started_at),
            }
        ratio = out["compact"]["tokens"] / max(out["verbose"]["tokens"], 1)
        self.say(
            f"verbose {out['verbose']['tokens']} tok {out['verbose']['ms']} ms | compact "
            f"{out['compact']['tokens']} tok {out['compact']['ms']} ms | tokens ratio "
            f"{ratio:.2f}"
        )
        self.say(
            f"  first vs last token: verbose {out['verbose']['ttft_ms']} / "
            f"{out['verbose']['ms']} ms, compact {out['compact']['ttft_ms']} / "
            f"{out['compact']['ms']} ms"
        )
        self.say(f"  verbose: {out['verbose']['text']}")
        self.say(f"  compact: {out['compact']['text']}")
        return {**out, "token_ratio": ratio}

    def constrained(self) -> dict[str, Any]:
        """Ms per decode pass with and without the grammar, for each grammar; compile times."""
        # A measurement script, step after step in the order the report prints: long, linear.
        b, d, p = self.b, self.b.decoder, self.b.prompts
        free = {
            "type": "object",
            "properties": {"note": {"type": "string", "minLength": 200, "maxLength": 400}},
            "required": ["note"],
        }
        prefix, own = p.encode(Prompt(CONTEXT, EVENTS[1]), ActionSchema.from_json_schema(free))
        n = 12 if self.quick else 48
        tok, vocab = b.loaded.tokenizer, b.loaded.model.config.vocab_size

        def per_pass(compiler: Any = None, compiled: object = None) -> float:
            r = d.decode(
                prefix,
                [own],
                deadline=_far(),
                compiler=compiler,
                compiled=compiled,
                max_new_tokens=n,
                jump_forward=False,
                stop_at_eos=False,
            )
            first = r.first_token_at or r.finished_at
            return (r.finished_at - first) / max(r.passes, 1)

        compilers: dict[str, tuple[Any, object]] = {}
        setup: dict[str, dict[str, float]] = {}
        for name in ("llguidance", "xgrammar"):
            t0 = time.perf_counter()
            compiler = make_grammar_compiler(name, tok, vocab)
            init = time.perf_counter() - t0
            t0 = time.perf_counter()
            compiled = compiler.compile(free)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            compiler.compile(BENCH_ACTION)
            setup[name] = {
                "tokenizer_init_ms": _ms(init),
                "first_compile_ms": _ms(first),
                "compile_ms": _ms(time.perf_counter() - t0),
            }
            compilers[name] = (compiler, compiled)
            per_pass(compiler, compiled)  # warm
        per_pass()
        # Interleaved rounds (plain, llguidance, xgrammar, ...) so drift on a shared machine
        # lands on every variant alike; the median per variant.
        samples: dict[str, list[float]] = {"plain": [], **{k: [] for k in compilers}}
        for _ in range(2 if self.quick else 7):
            samples["plain"].append(per_pass())
            for name, (compiler, compiled) in compilers.items():
                samples[name].append(per_pass(compiler, compiled))
        base = _ms(statistics.median(samples["plain"]))
        out: dict[str, Any] = {"unconstrained_ms_per_token": base}
        for name in compilers:
            ms = _ms(statistics.median(samples[name]))
            out[name] = {"ms_per_token": ms, "overhead": ms / base - 1.0, **setup[name]}
            self.say(
                f"{name:10s} {ms} ms/token vs {base} unconstrained "
                f"({(ms / base - 1) * 100:+.1f} %); init {setup[name]['tokenizer_init_ms']} ms, "
                f"first compile {setup[name]['first_compile_ms']} ms, next compile "
                f"{setup[name]['compile_ms']} ms"
            )
        return out

    def score_vs_generate(self) -> dict[str, Any]:
        """Scoring 8 candidates in one pass vs generating one compact action."""
        b = self.b
        cands = [
            self.schema.validate({"action": a, "speed": s})
            for a, s in [
                ("stop", 0),
                ("slow_down", 0.5),
                ("continue", 1.0),
                ("turn_left", 0.5),
                ("turn_right", 0.5),
                ("reverse", 0.3),
                ("dock", 0.5),
                ("wait", 0),
            ]
        ]
        b.prepare_sync(self.schema)
        score = self._median_call(
            lambda: b.score_sync(CONTEXT, EVENTS[2], cands, self.schema, deadline=_far()).seconds
        )
        gen = self._median_call(lambda: self._one(b, EVENTS[2]).seconds)
        self.say(f"score K=8 {_ms(score)} ms vs generate one {_ms(gen)} ms: {gen / score:.2f}x")
        return {"score_ms": _ms(score), "generate_ms": _ms(gen), "speedup": gen / score}

    def batching(self) -> dict[str, Any]:
        """B branches in one prefix-sharing batch vs sequential calls; latency vs throughput."""
        b = self.b
        out: dict[str, Any] = {}
        for size in (1, 4, 16):
            events = EVENTS[:size]
            b.generate_sync(CONTEXT, events, self.schema, deadline=_far())
            t0 = time.perf_counter()
            gens = b.generate_sync(CONTEXT, events, self.schema, deadline=_far())
            total = time.perf_counter() - t0
            out[f"B{size}"] = {
                "request_latency_ms": _ms(total),
                "branches_per_s": size / total,
                "done": sum(g.ok for g in gens),
            }
            self.say(
                f"batch B={size:2d}: one request's latency {_ms(total)} ms, "
                f"throughput {size / total:.2f} branches/s"
            )
        t0 = time.perf_counter()
        for e in EVENTS:
            self._one(b, e)
        seq = time.perf_counter() - t0
        out["sequential16_branches_per_s"] = 16 / seq
        out["speedup16"] = out["B16"]["branches_per_s"] / out["sequential16_branches_per_s"]
        self.say(
            f"16 sequential calls: {16 / seq:.2f} branches/s -> batch is {out['speedup16']:.1f}x"
        )
        return out

    def live_paths(self) -> dict[str, Any]:
        """A live compact action: cached prefix + jump-forward vs neither."""
        b = self.b
        neither = self.variant(reuse_prefix=False, jump_forward=False)
        jump_only = self.variant(reuse_prefix=False)
        fast = self._median_call(lambda: self._one(b, EVENTS[3]).seconds)
        slow = self._median_call(lambda: self._one(neither, EVENTS[3]).seconds)
        jf_only = self._median_call(lambda: self._one(jump_only, EVENTS[3]).seconds)
        self.say(
            f"live action: reuse+jump-forward {_ms(fast)} ms, jump-forward only "
            f"{_ms(jf_only)} ms, neither {_ms(slow)} ms: ratio {fast / slow:.2f}"
        )
        return {
            "reuse_and_jump_ms": _ms(fast),
            "jump_only_ms": _ms(jf_only),
            "neither_ms": _ms(slow),
            "ratio": fast / slow,
        }

    def cancellation(self) -> dict[str, Any]:
        """How far past its deadline a call ends, across deadlines that cut it mid-way."""
        b = self.variant(form=ActionForm.VERBOSE)
        b.prepare_sync(self.schema)
        step = b.latency.step(1).p50
        rng = random.Random(7)
        trials = 6 if self.quick else 40
        over, cuts, not_started = [], 0, 0
        for i in range(trials):
            budget = rng.uniform(0.05, 1.2)
            deadline = time.monotonic() + budget
            g = self._one(
                b,
                EVENTS[i % len(EVENTS)],
                deadline=deadline,
                max_new_tokens=96,
                cancel=CancelSignal(),
            )
            over.append(max(0.0, g.finished_at - deadline))
            cuts += g.status.cut
            not_started += g.status.value == "not_started"
        p50, p95 = float(np.quantile(over, 0.5)), float(np.quantile(over, 0.95))
        self.say(
            f"cancellation overshoot p50 {_ms(p50)} ms, p95 {_ms(p95)} ms "
            f"(step {_ms(step)} ms; {cuts}/{trials} cut, {not_started} not started)"
        )
        return {
            "overshoot_p50_ms": _ms(p50),
            "overshoot_p95_ms": _ms(p95),
            "step_ms": _ms(step),
            "p95_in_steps": p95 / step,
            "cut": cuts,
            "not_started": not_started,
            "trials": trials,
        }
