"""ServerProcess: one ``llama-server`` of the agent's own, kept running and never left behind.

The agent's local engine is llama.cpp's server, started here on a private Unix socket (in a
``0700`` temporary folder: no port to collide with, nothing else on the machine can reach it)
and watched:

* **restarted when it dies** -- a task waits on the process; when it exits while the agent
  still runs, it is started again after a pause that doubles with each failed start in a row
  (:class:`PlannerHealth`, the planner's own backoff: a server that crashes at load is not
  spun, one killed once is back at once). Calls made meanwhile fail fast (the socket refuses),
  so the executor falls to its next tier instead of waiting;
* **stopped with the agent** -- ``stop`` ends it (SIGTERM, then SIGKILL); and because an agent
  killed outright runs no ``stop``, the server is started with Linux's parent-death signal
  (``PR_SET_PDEATHSIG``: the kernel sends it SIGKILL when the agent exits, however it exits).
  That signal follows the *thread* that started the process, so the process is started from the
  event loop's thread, never from a worker thread that may end first.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forethought.policies import ConfigError

from .._cancellation import wait_cancelled
from .._health import PlannerHealth

if TYPE_CHECKING:
    import httpx

__all__ = ["ServerProcess", "ServerProcessStats", "process_alive"]

log = logging.getLogger("forethought.engine")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Ask the kernel to SIGKILL this child when its parent exits (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(slots=True)
class ServerProcessStats:
    """What the supervisor did."""

    starts: int = 0
    restarts: int = 0
    """Starts after the server died while the agent ran."""
    deaths: list[int] = field(default_factory=list)
    """Exit status of each unexpected exit (negative: killed by that signal)."""
    back_s: list[float] = field(default_factory=list)
    """Per restart: seconds from the exit being seen to ``/health`` answering again."""


class ServerProcess:
    """A supervised ``llama-server`` serving one GGUF on a private Unix socket.

    Args:
        exe: the ``llama-server`` executable.
        gguf: the model file.
        slots: parallel slots (``--parallel``): requests decoded together in one batch.
        context: total context (``-c``), shared by the slots.
        threads: CPU threads for decoding (None: llama.cpp's default).
        start_timeout_s: how long a start may take until ``/health`` answers.
        restart_base_s: the pause before a restart after one failure; doubles per failed
            start in a row, up to ``restart_max_s``.
        extra_args: more ``llama-server`` arguments.

    """

    def __init__(
        self,
        *,
        exe: Path,
        gguf: str,
        slots: int = 8,
        context: int = 8192,
        threads: int | None = None,
        start_timeout_s: float = 60.0,
        restart_base_s: float = 0.0,
        restart_max_s: float = 10.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        if slots < 1:
            raise ConfigError("engine.slots", slots, "must be at least 1")
        if context < 256 * slots:
            raise ConfigError("engine.context", context, f"give at least 256 per slot ({slots})")
        self._exe = exe
        self.gguf = gguf
        self.slots = slots
        self.context = context
        self._threads = threads
        self._start_timeout_s = start_timeout_s
        self._health = PlannerHealth(retry_base_s=restart_base_s, retry_max_s=restart_max_s)
        self._extra = list(extra_args)
        self._dir: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        self._log_path: Path | None = None
        self._restarted: asyncio.Condition | None = None
        self.stats = ServerProcessStats()

    # -- where it is ---------------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        """The Unix socket the server listens on (fixed across restarts)."""
        if self._dir is None:
            raise ConfigError("engine", None, "the server process has not been started")
        return self._dir / "llama-server.sock"

    @property
    def log_path(self) -> Path | None:
        """The server's own log (its last start's), while it runs."""
        return self._log_path

    def transport(self) -> httpx.AsyncHTTPTransport:
        """An HTTP transport to the server's socket (the URL's host is then ignored)."""
        # httpx is imported where a server is used (see _server.ServerBackend.__aenter__).
        import httpx  # noqa: PLC0415

        return httpx.AsyncHTTPTransport(uds=str(self.socket_path))

    @property
    def pid(self) -> int | None:
        """The running server's process id (None while none runs)."""
        proc = self._proc
        return None if proc is None or proc.returncode is not None else proc.pid

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` has been called (an exit is then expected, not restarted)."""
        return self._stopping

    @property
    def health(self) -> PlannerHealth:
        """Restart backoff and failure streak."""
        return self._health

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the server and wait until its model is loaded; then keep it running."""
        self._stopping = False
        self._restarted = asyncio.Condition()
        self._dir = Path(tempfile.mkdtemp(prefix="forethought-engine-"))  # mode 0700
        try:
            await self._spawn()
        except BaseException:
            await self.stop()
            raise
        self._watcher = asyncio.create_task(self._watch(), name="forethought.engine.watch")

    async def stop(self) -> None:
        """End the server (SIGTERM, SIGKILL after 5 s) and remove its socket folder."""
        self._stopping = True
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            await wait_cancelled(watcher)
        await self._end(self._proc)
        self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def _end(self, proc: asyncio.subprocess.Process | None) -> None:
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            async with asyncio.timeout(5.0):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    def _command(self) -> list[str]:
        cmd = [
            str(self._exe),
            "-m", self.gguf,
            "--host", str(self.socket_path),
            "--parallel", str(self.slots),
            "-c", str(self.context),
            "--no-webui",
            # Slots by LRU, prompts from the RAM cache: a batch's shared prefix, prefilled once,
            # reaches every row's slot from that cache (ServerBackend._share_prefix). With
            # similarity on, the first row takes the slot that holds the prefix, which is then
            # busy and never saved to the cache for the others.
            "--slot-prompt-similarity", "0",
            "--cache-idle-slots",
        ]  # fmt: skip
        if self._threads is not None:
            cmd += ["-t", str(self._threads)]
        return cmd + self._extra

    async def _spawn(self) -> None:
        """One start: the process, then ``/health`` until it answers 200."""
        sock = self.socket_path
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()  # a killed server leaves its socket file behind
        assert self._dir is not None
        self._log_path = self._dir / "llama-server.log"
        with self._log_path.open("ab") as out:
            # From the loop's thread (see the module docstring): the parent-death signal
            # follows the thread that forked.
            self._proc = await asyncio.create_subprocess_exec(
                *self._command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self.stats.starts += 1
        proc = self._proc
        loop = asyncio.get_running_loop()
        end = loop.time() + self._start_timeout_s
        import httpx  # noqa: PLC0415 - see transport()

        async with httpx.AsyncClient(transport=self.transport(), base_url="http://engine") as c:
            while loop.time() < end and proc.returncode is None:
                with contextlib.suppress(httpx.HTTPError):
                    if (await c.get("/health", timeout=1.0)).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        status = proc.returncode
        await self._end(proc)
        tail = self._log_path.read_text(errors="replace")[-1500:]
        why = (
            f"exited with status {status} while loading"
            if status is not None
            else f"did not answer /health within {self._start_timeout_s} s"
        )
        raise ConfigError("engine", str(self._exe), f"llama-server {why}:\n{tail}")

    async def _watch(self) -> None:
        """Wait for the server to exit; start it again (with backoff) until stopped."""
        loop = asyncio.get_running_loop()
        while not self._stopping:
            proc = self._proc
            assert proc is not None
            status = await proc.wait()
            if self.stopping:  # stop() ended it (read again: the await let stop() run)
                return
            seen = loop.time()
            self.stats.deaths.append(status)
            log.warning("llama-server exited (status %s): starting it again", status)
            delay = self._health.failed("exited", f"status {status}", seen)
            while not self._stopping:
                await asyncio.sleep(delay)
                try:
                    await self._spawn()
                except (ConfigError, OSError) as exc:  # a load that failed; an exe gone
                    why = (str(exc).splitlines() or [repr(exc)])[0]
                    delay = self._health.failed("start", why, loop.time())
                    log.warning("llama-server did not start again; next try in %.1f s", delay)
                    continue
                self._health.succeeded(loop.time())
                self.stats.restarts += 1
                self.stats.back_s.append(loop.time() - seen)
                if self._restarted is not None:
                    async with self._restarted:
                        self._restarted.notify_all()
                break

    async def wait_restarts(self, count: int) -> None:
        """Wait until the server has been started again ``count`` times in all."""
        cond = self._restarted
        if cond is None:
            raise ConfigError("engine", None, "the server process has not been started")
        async with cond:
            await cond.wait_for(lambda: self.stats.restarts >= count)

    async def __aenter__(self) -> ServerProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (for tests and reports)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
