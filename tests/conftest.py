"""Shared fixtures: the embedded model (converted once per session) and a tiny random Llama.

Session fixtures build only when a collected test asks for them, so ``pytest tests/unit``
converts no model and starts no broker (and the hook below keeps it so).
"""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tiers import Collected, unit_tier_violations

from forethought.policies import ActionSchema
from forethought.testing import MosquittoBroker, mosquitto_path

if TYPE_CHECKING:  # the local extra (torch, transformers): imported by the fixtures using it
    from forethought.models import TransformersBackend
    from forethought.models._model_load import LoadedModel


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a unit-tier test that needs a model, a broker or a server (tests/tiers.py)."""
    bad = unit_tier_violations(
        (
            Collected(
                item.nodeid,
                item.path,
                frozenset(m.name for m in item.iter_markers()),
                frozenset(getattr(item, "fixturenames", ())),
            )
            for item in items
        ),
        Path(__file__).resolve().parent / "unit",
    )
    if bad:
        raise pytest.UsageError(
            "tests/unit is for tests that need nothing but the venv; move these to "
            "tests/model or tests/integration:\n  " + "\n  ".join(bad)
        )


# -- a run that never hangs --------------------------------------------------------------
#
# pytest-timeout (signal method) fails a test that outlives its timeout, once; a test whose
# clean-up then hangs (a task that will not take its cancellation) held a CI run until the
# CI's own limit, with no word of where. So past its timeout and this margin, every
# thread's stack goes to the real stderr and the run ends, failed.
_STUCK_MARGIN_S = 120.0
_STDERR = pytest.StashKey[int]()  # the real stderr's descriptor, kept at configure


def pytest_configure(config: pytest.Config) -> None:
    """Keep a descriptor of the real stderr: pytest captures fd 2 while a test runs."""
    config.stash[_STDERR] = os.dup(sys.__stderr__.fileno() if sys.__stderr__ else 2)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the descriptor kept at configure."""
    os.close(config.stash[_STDERR])


def _arm(item: pytest.Item) -> None:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        timeout = float(marker.args[0])
    else:
        timeout = float(item.config.getini("timeout"))
    faulthandler.dump_traceback_later(
        timeout + _STUCK_MARGIN_S, exit=True, file=item.config.stash[_STDERR]
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """End the run with every thread's stack once a test is stuck past its own timeout."""
    _arm(item)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(trylast=True)
def pytest_exception_interact(node: pytest.Item | pytest.Collector) -> None:
    """Arm again after a failure: pytest's faulthandler plugin disarms here, and a failed
    test's clean-up is where a stuck one hangs."""
    if isinstance(node, pytest.Item):
        _arm(node)


ROBOT_ACTION = {
    "type": "object",
    "properties": {
        "action": {"enum": ["stop", "slow", "go", "turn_left", "turn_right", "dock"]},
        "speed": {"type": "number", "minimum": 0, "maximum": 1.5},
    },
    "required": ["action"],
}


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh FORETHOUGHT_CACHE for the session: the first SmolLM2 load converts into it."""
    path = tmp_path_factory.mktemp("forethought-cache")
    old = os.environ.get("FORETHOUGHT_CACHE")
    os.environ["FORETHOUGHT_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("FORETHOUGHT_CACHE", None)
    else:
        os.environ["FORETHOUGHT_CACHE"] = old


@pytest.fixture(scope="session")
def smollm2_first_load(model_cache: Path) -> LoadedModel:
    """The embedded model's first (converting) load in this session's cache."""
    from forethought.models._model_load import load_model
    from forethought.models._model_source import resolve_model

    return load_model(
        resolve_model("smollm2-135m"), device="cpu", dtype="float32", cache_dir=model_cache
    )


@pytest.fixture(scope="session")
def tiny_model_dir(
    tmp_path_factory: pytest.TempPathFactory, smollm2_first_load: LoadedModel
) -> Path:
    """A 2-layer random-weight Llama with SmolLM2's tokenizer, saved as a local model folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    tok = smollm2_first_load.tokenizer
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir: Path) -> TransformersBackend:
    """A loaded, warmed TransformersBackend on the tiny model (fp32, CPU, llguidance)."""
    from forethought.models import TransformersBackend

    backend = TransformersBackend(model=str(tiny_model_dir), device="cpu", dtype="float32")
    backend.load()
    return backend


@pytest.fixture
async def running_tiny(tiny_backend: TransformersBackend) -> AsyncIterator[TransformersBackend]:
    """The tiny backend started on this test's event loop (its deadlines on that clock)."""
    async with tiny_backend:
        yield tiny_backend


@pytest.fixture(scope="session")
def robot_schema() -> ActionSchema:
    """A small robot action: an enum and an optional bounded number."""
    return ActionSchema.from_json_schema(ROBOT_ACTION)


@pytest.fixture
def broker() -> Iterator[MosquittoBroker]:
    """A broker of this test's own (so a test may restart it)."""
    if mosquitto_path() is None:
        pytest.fail("mosquitto is not installed: scripts/setup --broker installs it")
    with MosquittoBroker() as b:
        yield b


@pytest.fixture
def agent_id(request: pytest.FixtureRequest) -> str:
    """A topic-safe id unique to the calling test."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    return f"t-{name}"[:80]


# -- a small PKI for the TLS tests (MQTT, Zenoh) ------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path
    rogue_ca: Path
    wrong_host_cert: Path
    wrong_host_key: Path
    expired_cert: Path
    expired_key: Path


def _ca(d: Path, name: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        cwd=d,
    )


def _request(d: Path, name: str, san: str) -> None:
    """A key and a certificate request for ``name`` with ``san`` as its subjectAltName."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
    (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")


def _leaf(d: Path, name: str, ca: str, san: str) -> None:
    _request(d, name, san)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile",
             f"{name}.ext", cwd=d)  # fmt: skip


def _expired(d: Path, name: str, ca: str, san: str) -> None:
    """A certificate valid for one day in 2020 (``openssl ca`` sets the dates)."""
    _request(d, name, san)
    (d / "index.txt").write_text("")
    (d / "serial").write_text("1000\n")
    (d / "ca.cnf").write_text(
        "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\n"
        "serial = serial\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n"
    )
    _openssl("ca", "-batch", "-config", "ca.cnf", "-cert", f"{ca}.crt", "-keyfile",
             f"{ca}.key", "-in", f"{name}.csr", "-out", f"{name}.crt", "-startdate",
             "20200101000000Z", "-enddate", "20200102000000Z", "-extfile", f"{name}.ext",
             cwd=d)  # fmt: skip


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate for 127.0.0.1/localhost, and bad ones (made with openssl)."""
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "rogue")
    _leaf(d, "server", "ca", "IP:127.0.0.1,DNS:localhost")
    _leaf(d, "elsewhere", "ca", "DNS:example.org")
    _expired(d, "old", "ca", "IP:127.0.0.1")
    return Pki(
        d / "ca.crt",
        d / "server.crt",
        d / "server.key",
        d / "rogue.crt",
        d / "elsewhere.crt",
        d / "elsewhere.key",
        d / "old.crt",
        d / "old.key",
    )
