"""ProcessBackend: the model in a worker process, so model work never holds our GIL.

With the model on a thread of the agent's process, every forward pass runs Python code of
transformers that holds the interpreter lock, so the event loop can wait for it. In a worker
process the loop only shares the CPU (the worker runs at a lower priority). On our 2-core CPU
the thread measured as well or better (``forethought bench --suite executor`` runs both), so
the agent uses a thread unless configured otherwise; on machines with more cores, or with a
GPU doing the model work, measure both. The worker runs a :class:`TransformersBackend`; requests
and replies go over a pipe, a call's cancel signal is a shared event the worker polls before
each forward pass, and each reply carries the worker's latency fit, which the parent adopts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing as mp
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any, Self, cast

from pydantic import BaseModel

from forethought.policies import (
    ActionSchema,
    BackendError,
    ConfigError,
    DeadlinePassed,
    ForethoughtError,
    InvalidAction,
    NotStarted,
    PromptTooLong,
    SchemaError,
)

from .._backend import CancelSignal, DecodeOptions, Generation, GenerationStatus, Scores
from .._latency import LatencyModel
from .._model_source import DEFAULT_MODEL, resolve_model
from ..grammar._protocol import GRAMMARS

log = logging.getLogger("forethought.model")

__all__ = ["ProcessBackend"]


class _SharedCancel:
    """What the worker's decoder polls: a byte of shared memory the parent sets.

    Lock-free on purpose: a ``multiprocessing.Event`` takes a lock on every read, and a worker
    killed while holding it (it reads before every forward pass) would leave the parent
    blocked for ever on its next ``set`` or ``clear`` -- which the fault bench hit.
    """

    def __init__(self, flag: Any) -> None:
        self.flag = flag

    @property
    def cancelled(self) -> bool:
        return bool(self.flag.value)

    def is_set(self) -> bool:
        """What the decoder polls (it takes the signal's ``event``: this object)."""
        return bool(self.flag.value)

    @property
    def event(self) -> _SharedCancel:
        return self


def _encode_error(exc: BaseException) -> tuple[str, Any]:
    if isinstance(exc, DeadlinePassed):
        return "DeadlinePassed", (exc.deadline, exc.now)
    if isinstance(exc, PromptTooLong):
        return "PromptTooLong", (exc.tokens, exc.limit)
    if isinstance(exc, SchemaError):
        return "SchemaError", (exc.field, repr(exc.value), exc.problem)
    if isinstance(exc, ConfigError):
        return "ConfigError", (exc.field, repr(exc.value), exc.problem)
    return "BackendError", f"{type(exc).__name__}: {exc}"


def _decode_error(kind: str, data: Any) -> ForethoughtError:
    if kind == "DeadlinePassed":
        return DeadlinePassed(*data)
    if kind == "PromptTooLong":
        return PromptTooLong(*data)
    if kind == "SchemaError":
        return SchemaError(*data)
    if kind == "ConfigError":
        return ConfigError(*data)
    return BackendError(str(data))


def _worker_main(
    conn: Connection, cancel: Any, options: dict[str, Any], nice: int, threads: int | None
) -> None:
    """The worker process: load the model, then serve one call at a time."""
    import os  # noqa: PLC0415

    import torch  # noqa: PLC0415 - only in the worker

    from ._transformers import TransformersBackend  # noqa: PLC0415

    # Yield the CPU to the agent's event loop whenever it wakes up (a lower scheduling weight),
    # and optionally leave it a core of its own.
    if nice:
        os.nice(nice)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        backend = TransformersBackend(**options)
        backend.load()
    except Exception as exc:
        conn.send(("error", *_encode_error(exc)))
        return
    conn.send(("ready", backend.latency.profile(), backend.latency.typical_steps()))
    schemas: dict[str, ActionSchema] = {}
    shared = cast(CancelSignal, _SharedCancel(cancel))
    while True:
        try:
            call_id, method, portable, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            key = str(portable)
            schema = schemas.get(key)
            if schema is None:
                schema = schemas[key] = ActionSchema.from_json_schema(portable)
            result = _serve(backend, method, schema, args, shared)
            reply: tuple[Any, ...] = ("ok", call_id, result)
        except Exception as exc:
            reply = ("error", call_id, *_encode_error(exc))
        conn.send((*reply, backend.latency.profile(), backend.latency.typical_steps()))


def _strip(g: Generation) -> Generation:
    # The action's class was built in this process; the parent re-parses the text.
    return replace(g, action=None)


def _serve(
    backend: Any, method: str, schema: ActionSchema, args: dict[str, Any], cancel: CancelSignal
) -> Any:
    if method == "prepare":
        backend.calibrate_sync(schema)
        return None
    if method == "generate":
        gens = backend.generate_sync(
            args["context"],
            args["events"],
            schema,
            cancel=cancel,
            deadline=args["deadline"],
            max_new_tokens=args["max_new_tokens"],
        )
        return [_strip(g) for g in gens]
    if method == "score":
        return backend.score_sync(
            args["context"],
            args["event"],
            [schema.validate(c) for c in args["cands"]],
            schema,
            deadline=args["deadline"],
            cancel=cancel,
        )
    raise BackendError(f"unknown method {method!r}", retryable=False)


class ProcessBackend:
    """A ModelBackend whose model runs in a worker process (see the module docstring).

    Takes the same arguments as :class:`TransformersBackend`; ``async with`` starts the worker
    (which loads and warms the model) and stops it. The worker is *spawned*, so a script that
    uses it needs the usual ``if __name__ == "__main__":`` guard.

    A cancelled call returns at once; the worker stops before its next forward pass, and one
    that has not replied ``cancel_grace_s`` later is stuck and is killed. A worker that died
    (killed, crashed, out of memory, or killed as stuck) fails the call it was serving with a
    BackendError and is started again at once, in the background (:attr:`restarts`); calls
    made meanwhile fail fast with a BackendError (:meth:`wait_ready` waits for it).
    """

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        device: str = "auto",
        dtype: str = "auto",
        grammar: str = "llguidance",
        prefix_cache_size: int = 8,
        options: DecodeOptions | None = None,
        nice: int = 10,
        threads: int | None = None,
        cancel_grace_s: float = 2.0,
    ) -> None:
        if grammar not in GRAMMARS:
            raise ConfigError("grammar", grammar, f"choose one of {GRAMMARS}")
        resolve_model(model)  # fail here, with the install hint, not in the worker
        self._options = {
            "model": model,
            "device": device,
            "dtype": dtype,
            "grammar": grammar,
            "prefix_cache_size": prefix_cache_size,
            "options": options or DecodeOptions(),
        }
        self._form = (options or DecodeOptions()).form
        self._model_id = model
        self._nice = nice
        self._threads = threads
        self._latency = LatencyModel()
        self._ctx = mp.get_context("spawn")  # fork is unsafe with torch's threads
        self._cancel: Any = None  # the shared cancel byte of the running worker
        self._conn: Connection | None = None
        self._proc: Any = None
        self._lock: asyncio.Lock | None = None
        self._ids = itertools.count()
        self._cancel_grace_s = cancel_grace_s
        self._draining: asyncio.Future[None] | None = None
        self._starting: asyncio.Future[None] | None = None
        self.calls = 0
        self.restarts = 0
        """Workers started again after one died (killed, crashed, or killed here as stuck)."""
        self.hangs = 0
        """Cancelled calls whose worker did not stop within ``cancel_grace_s`` (killed)."""

    @property
    def model_id(self) -> str:
        """The model's name as given."""
        return self._model_id

    @property
    def latency(self) -> LatencyModel:
        """The latency model, adopted from the worker's after every call."""
        return self._latency

    async def __aenter__(self) -> Self:
        self._lock = asyncio.Lock()
        await self._start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in (self._draining, self._starting):
            if task is not None and not task.done():
                task.cancel()
        self._stop()

    async def _start(self) -> None:
        """Spawn the worker and wait until its model is loaded (BackendError if it fails)."""
        parent, child = self._ctx.Pipe()
        self._cancel = self._ctx.RawValue("b", 0)  # a fresh one per worker
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child, self._cancel, self._options, self._nice, self._threads),
            name="forethought-model",
            daemon=True,
        )
        await asyncio.to_thread(proc.start)  # a spawn: fork, exec, send the preparation data
        child.close()
        self._conn, self._proc = parent, proc
        first = await asyncio.to_thread(self._recv)
        if first is None or first[0] == "error":
            self._stop()
            if first is None:
                raise BackendError("the model worker process exited while loading")
            raise _decode_error(first[1], first[2])
        self._latency.adopt(first[1], first[2])

    def _stop(self) -> None:
        if self._proc is not None:
            if self._conn is not None:
                self._conn.close()  # the worker's recv ends: it returns
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=5)
            self._proc = None
        self._conn = None

    def _kill(self) -> None:
        """End a stuck or broken worker now (its reader thread sees EOF and returns)."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()  # reaped by _replace, off the loop: a large process takes a while

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id (None while none runs)."""
        return None if self._proc is None else int(self._proc.pid)

    @property
    def worker_alive(self) -> bool:
        """Whether a worker process runs now (a dead one is replaced by the next call)."""
        return self._proc is not None and bool(self._proc.is_alive())

    def _recv(self) -> Any:
        conn = self._conn
        if conn is None:
            return None
        try:
            return conn.recv()
        except (EOFError, OSError):
            return None  # the worker exited (or was killed)

    async def _drain(self, reader: asyncio.Future[Any]) -> None:
        """Take a cancelled call's reply; a worker that does not stop in time is killed."""
        try:
            async with asyncio.timeout(self._cancel_grace_s):
                reply = await asyncio.shield(reader)
        except TimeoutError:
            self.hangs += 1
            log.warning(
                "model worker did not stop %.1f s after a cancel: killed", self._cancel_grace_s
            )
            self._kill()
            with contextlib.suppress(Exception):
                await reader
            self._replace()
            return
        if reply is not None:
            *_, profile, steps = reply
            self._latency.adopt(profile, steps)

    def _replace(self) -> None:
        """Start a new worker in a task of its own, the old one reaped there first.

        Nothing here waits on the loop: reaping a killed process that held a model, and
        spawning the next, take tens of milliseconds, which a tree hit cannot spare.
        """
        old, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        self.restarts += 1
        log.warning("model worker is gone: starting a new one (restart %d)", self.restarts)
        self._starting = asyncio.create_task(self._restart(old), name="forethought.worker.restart")

    async def _restart(self, old: Any) -> None:
        if old is not None:
            if old.is_alive():
                old.kill()
            await asyncio.to_thread(old.join, 5)
        await self._start()

    async def wait_ready(self) -> None:
        """Wait until a replacement worker (if one is starting) has loaded its model."""
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._starting)

    async def _ready(self) -> Connection:
        """The pipe to a live worker, once a cancelled call's reply has been taken.

        A worker found dead is replaced in a task of its own, and calls made while it starts
        fail at once with a BackendError: the planner backs off and the live tiers fall to the
        default, rather than spend their deadlines on a model load.
        """
        if self._draining is not None:
            await asyncio.shield(self._draining)
            self._draining = None
        starting = self._starting
        if starting is not None:
            if not starting.done():
                raise BackendError(f"the model worker is starting again (restart {self.restarts})")
            self._starting = None
            failed = None if starting.cancelled() else starting.exception()
            if failed is not None:  # the next call tries again
                raise BackendError(f"the model worker did not start again: {failed}")
        if self._conn is None or self._proc is None or not self._proc.is_alive():
            self._replace()
            raise BackendError(f"the model worker had exited: starting it again ({self.restarts})")
        return self._conn

    async def _call(
        self, method: str, schema: ActionSchema, args: dict[str, Any], cancel: CancelSignal | None
    ) -> Any:
        if self._lock is None:
            raise NotStarted("ProcessBackend")
        async with self._lock:  # the worker serves one call at a time
            conn = await self._ready()
            flag = self._cancel
            flag.value = 0
            if cancel is not None:
                cancel.on_cancel(lambda: setattr(flag, "value", 1))
            call_id = next(self._ids)
            try:
                conn.send((call_id, method, schema.portable(), args))
            except OSError:  # it died after the check (an exit not yet reaped)
                self._kill()
                self._replace()
                raise BackendError("the model worker had exited: starting it again") from None
            self.calls += 1
            # A dedicated thread waits for the reply; cancelling the await cancels the call.
            reader = asyncio.create_task(
                asyncio.to_thread(self._recv), name="forethought.worker.reply"
            )
            try:
                reply = await asyncio.shield(reader)
            except asyncio.CancelledError:
                # Return now (the caller's deadline is not ours to spend): the worker stops
                # before its next forward pass, and the next call takes the reply first.
                flag.value = 1
                self._draining = asyncio.create_task(
                    self._drain(reader), name="forethought.worker.drain"
                )
                raise
        if reply is None:
            self._replace()
            raise BackendError("the model worker process exited during the call")
        status = reply[0]
        *_, profile, steps = reply
        self._latency.adopt(profile, steps)
        if status == "error":
            raise _decode_error(reply[2], reply[3])
        return reply[2]

    def _reparse(self, schema: ActionSchema, g: Generation) -> Generation:
        if g.status is not GenerationStatus.DONE:
            return g
        try:
            return replace(g, action=schema.parse(g.text, self._form))
        except InvalidAction:
            return replace(g, status=GenerationStatus.INVALID)

    async def prepare(self, schema: ActionSchema) -> None:
        """Compile the schema's grammar in the worker."""
        await self._call("prepare", schema, {}, None)

    async def generate(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """Generate one action per event in one batch in the worker."""
        gens = await self._call(
            "generate",
            schema,
            {
                "context": context,
                "events": list(events),
                "deadline": deadline,
                "max_new_tokens": max_new_tokens,
            },
            cancel,
        )
        return [self._reparse(schema, g) for g in gens]

    async def score(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Score candidates in one pass in the worker."""
        cands = [schema.readable(schema.validate(c)) for c in candidates]
        result: Scores = await self._call(
            "score",
            schema,
            {"context": context, "event": event, "cands": cands, "deadline": deadline},
            cancel,
        )
        return result
