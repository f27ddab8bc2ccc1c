"""The house rules, checked: layers import one way, and a layer loads only what it needs."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from extras import needs
from public_packages import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
# Folder -> (its package, its rank). A module may import only from its own rank or below.
LAYERS = {
    "policies": ("forethought.policies", 0),
    "models": ("forethought.models", 1),
    "planner": ("forethought.planner", 2),
    "runtime": ("forethought.runtime", 3),
    "sims": ("forethought.sims", 4),
    "forethought": ("forethought", 5),
}
PACKAGE_RANK = dict(LAYERS.values())


def _target_rank(module: str) -> int | None:
    """The rank of the layer ``module`` belongs to (None: not ours)."""
    if module != "forethought" and not module.startswith("forethought."):
        return None
    parts = module.split(".")
    if len(parts) >= 2 and f"forethought.{parts[1]}" in PACKAGE_RANK:
        return PACKAGE_RANK[f"forethought.{parts[1]}"]
    return PACKAGE_RANK["forethought"]


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_init = path.name == "__init__.py"
    here = package if is_init else f"{package}.{path.stem}"
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = (
                    base[: len(base) - node.level]
                    if not is_init
                    else base[: len(base) - node.level + 1]
                )
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.append((node.lineno, name))
    return out


def _modules() -> list[tuple[Path, str, int]]:
    found = []
    for folder, (package, rank) in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            sub = path.parent.relative_to(ROOT / folder).parts
            found.append((path, ".".join([package, *sub]), rank))
    return found


def test_layers_import_one_way() -> None:
    against = []
    for path, package, rank in _modules():
        for line, module in _imports(path, package):
            top = module.split(".")[0]
            if top in ("runtime", "planner", "models", "policies", "sims"):
                against.append(
                    f"{path.relative_to(ROOT)}:{line} imports {module} (not forethought.*)"
                )
            target = _target_rank(module)
            if target is not None and target > rank:
                against.append(f"{path.relative_to(ROOT)}:{line} imports {module} (upwards)")
            if rank < 5 and module.startswith(("forethought._", "forethought.commands")):
                against.append(f"{path.relative_to(ROOT)}:{line} imports {module} (the CLI host)")
    assert not against, "\n".join(against)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    # The rule above must be able to fail: an upward import in a policies module is caught.
    bad = tmp_path / "_bad.py"
    bad.write_text("from forethought.runtime import Agent\nfrom ..planner import Planner\n")
    found = _imports(bad, "forethought.policies")
    assert [m for _, m in found] == ["forethought.runtime", "forethought.planner"]
    assert all(_target_rank(m) > 0 for _, m in found)  # type: ignore[operator]


def test_sims_import_no_underscored_name_of_lower_layers() -> None:
    # The simulator imports another layer's collaborators (its executor, its planner's parts)
    # through that layer's internals door, but never a name kept private.
    private = []
    for path, _, rank in _modules():
        if rank != 4:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                private += [
                    f"{path.name}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and _target_rank(node.module) in (0, 1, 2, 3)
                ]
    assert not private, private


def _package_imports(path: Path, package: str | None) -> list[tuple[int, str, str]]:
    """(line, package, name) of every ``from <a forethought package> import name`` in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level and package is not None:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            module = ".".join([*base, node.module] if node.module else base)
        elif node.level:
            continue
        else:
            module = node.module or ""
        if module in CURATED and not (path.name == "__init__.py" and module == package):
            out += [(node.lineno, module, a.name) for a in node.names]
    return out


# The packages with a curated public surface (tests/unit/test_public_surface.py).
CURATED = PACKAGES


def test_a_package_is_imported_only_for_its_public_names() -> None:
    needs("torch", "local")  # every public name resolves: the local backend's too
    # A private name is imported from the module that defines it, never through a package:
    # the package's __all__ is the whole of what it offers (layers, CLI, tests, benchmarks,
    # scripts alike).
    import importlib

    public = {name: set(importlib.import_module(name).__all__) for name in CURATED}
    sources = [(path, package) for path, package, _ in _modules()]
    for folder in ("tests", "benchmarks", "scripts"):
        sources += [(path, None) for path in sorted((ROOT / folder).rglob("*.py"))]
    against = [
        f"{path.relative_to(ROOT)}:{line} imports {name} from {module}"
        for path, package in sources
        for line, module, name in _package_imports(path, package)
        if name not in public[module] and f"{module}.{name}" not in public
    ]
    assert not against, "\n".join(against)


def test_the_package_import_check_sees_a_private_name(tmp_path: Path) -> None:
    bad = tmp_path / "_bad.py"
    bad.write_text("from forethought.runtime import Executor\nfrom . import Agent\n")
    found = _package_imports(bad, "forethought.runtime")
    assert [(m, n) for _, m, n in found] == [
        ("forethought.runtime", "Executor"),
        ("forethought.runtime", "Agent"),
    ]


HEAVY = {
    "forethought.policies": ["torch", "transformers", "numpy", "aiomqtt", "pydantic_settings"],
    "forethought.models": ["torch", "transformers", "aiomqtt", "paho", "pydantic_settings"],
    "forethought.planner": ["torch", "transformers", "aiomqtt", "paho", "pydantic_settings"],
    "forethought.runtime": ["torch", "transformers", "forethought.sims"],
    "forethought": [
        "forethought.policies",
        "forethought.runtime",
        "pydantic",
        "torch",
        "transformers",
    ],
}


@pytest.mark.parametrize("layer", sorted(HEAVY))
def test_a_layer_loads_nothing_it_does_not_need(layer: str) -> None:
    code = f"import sys, {layer}; print(','.join(m for m in {HEAVY[layer]!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "", f"import {layer} loaded {out}"


def test_opening_a_server_backend_loads_neither_torch_nor_transformers(tmp_path: Path) -> None:
    # The core install (no `local` extra) has neither: a server backend reads its tokenizer
    # folder with `tokenizers` and jinja2 alone. The port is closed: opening never raises
    # (the health check says down), and the tokenizer is read before it.
    from test_file_tokenizer import write_folder

    from forethought.testing import free_port

    folder = write_folder(tmp_path / "tok")
    url = f"http://127.0.0.1:{free_port()}#tokenizer={folder}"
    code = (
        "import asyncio, sys\n"
        "from forethought.runtime import Agent\n"
        "from forethought.models import ServerBackend\n"
        "from forethought.models._prompt import Prompt\n"
        "from forethought.policies import ActionSchema\n"
        "schema = ActionSchema.from_json_schema({'type': 'object', 'properties': "
        "{'a': {'enum': ['hello', 'world']}}, 'required': ['a']})\n"
        "async def main():\n"
        f"    async with ServerBackend(url={url!r}, poll_s=0) as backend:\n"
        "        prefix, own = backend.prompts.encode(Prompt('hello', 'world'), schema)\n"
        "    print(len(prefix) > 0, len(own) > 0, 'torch' in sys.modules, "
        "'transformers' in sys.modules)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "True", "False", "False"], out.stdout


def test_a_public_name_resolves_lazily() -> None:
    code = (
        "import sys, forethought; assert 'forethought.runtime' not in sys.modules; "
        "a = forethought.Agent; assert 'forethought.runtime' in sys.modules; "
        "print(a.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "forethought.runtime._agent"


def _lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    needs("importlinter", "dev")  # import-linter runs the contracts
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lint_imports.py"), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_import_linter_contracts_hold() -> None:
    done = _lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("where", "code", "broken"),
    [
        ("policies/_upward.py", "from forethought.runtime import Agent\n", "Layers import one way"),
        ("models/_upward.py", "import forethought.planner\n", "Layers import one way"),
        (
            "runtime/_executor.py",
            "from forethought.planner import PlannerConfig\n",
            "The executor asks the model layer",
        ),
        (
            "runtime/_serve.py",
            "from .transports._mqtt import MqttBus\n",
            "The agent core sees a transport only as an EventBus",
        ),
        ("policies/_numeric.py", "import numpy\n", "policies/ is pure data"),
        (
            "runtime/_kit.py",
            "from forethought.testing import free_port\n",
            "The layers never import the test kit",
        ),
        (
            "testing/_bench.py",
            "import forethought.bench\n",
            "The test kit (forethought.testing) does not import the benches",
        ),
        (
            "runtime/_kit.py",
            "from forethought.models._prompt import Prompt\n",
            "A layer's private modules are its own",
        ),
    ],
)
def test_import_linter_sees_a_broken_rule(
    where: str, code: str, broken: str, tmp_path: Path
) -> None:
    # The contracts must be able to fail: plant one bad import in a copy of the package.
    assert _lint_imports().returncode == 0
    shutil.copytree(ROOT / "build" / "importlint" / "forethought", tmp_path / "forethought")
    planted = tmp_path / "forethought" / where
    planted.write_text(code + (planted.read_text() if planted.exists() else ""))
    done = _lint_imports("--tree", str(tmp_path))
    assert done.returncode == 1, done.stdout
    assert "1 broken" in done.stdout
    assert broken in done.stdout.split("Broken contracts")[1]


DOORS = "A layer's private modules are its own"


@pytest.mark.parametrize(
    ("where", "code", "link"),
    [
        # A layer into a lower layer's private module, a nested one too.
        (
            "runtime/_kit.py",
            "from forethought.models._prompt import Prompt\n",
            "forethought.runtime._kit -> forethought.models._prompt (l.1)",
        ),
        (
            "sims/_kit.py",
            "from forethought.models.backends._server_url import is_server_url\n",
            "forethought.sims._kit -> forethought.models.backends._server_url (l.1)",
        ),
        # The CLI into a layer's, and the benches (a room inside forethought) into the CLI's.
        (
            "_kit.py",
            "import forethought.runtime._executor\n",
            "forethought._kit -> forethought.runtime._executor (l.1)",
        ),
        (
            "bench/_kit.py",
            "from forethought._progress import Bars\n",
            "forethought.bench._kit -> forethought._progress (l.1)",
        ),
    ],
)
def test_the_door_contract_names_an_import_past_the_doors(
    where: str, code: str, link: str, tmp_path: Path
) -> None:
    assert _lint_imports().returncode == 0
    shutil.copytree(ROOT / "build" / "importlint" / "forethought", tmp_path / "forethought")
    planted = tmp_path / "forethought" / where
    planted.write_text(code + (planted.read_text() if planted.exists() else ""))
    done = _lint_imports("--tree", str(tmp_path))
    assert done.returncode == 1, done.stdout
    assert "1 broken" in done.stdout
    broken = done.stdout.split("Broken contracts")[1]
    assert DOORS in broken
    assert f"- {link}" in broken


def test_the_door_contract_lets_a_layer_in_through_its_doors(tmp_path: Path) -> None:
    # The same names through the doors (the models layer's __init__ and its internals), and
    # the layer's own private module from a subpackage of it (the parent package is no wall).
    assert _lint_imports().returncode == 0
    shutil.copytree(ROOT / "build" / "importlint" / "forethought", tmp_path / "forethought")
    planted = tmp_path / "forethought" / "runtime" / "transports" / "_kit.py"
    planted.write_text(
        "from forethought.models import TransformersBackend\n"
        "from forethought.models.internals import Prompt\n"
        "from forethought.runtime._executor import Executor\n"
    )
    done = _lint_imports("--tree", str(tmp_path))
    assert done.returncode == 0, done.stdout
    assert "7 kept, 0 broken" in done.stdout


# The packages that once imported each other in a circle (bench/_reliability <-> _faults <->
# _broker_faults), and where their parts went: no file may reach itself through its imports,
# function-level ones included.
ACYCLIC = {
    "forethought.bench": ROOT / "forethought" / "bench",
    "forethought.testing": ROOT / "forethought" / "testing",
    "benchmarks.reliability": ROOT / "benchmarks" / "reliability",
}


def _import_targets(path: Path, package: str) -> list[str]:
    """Every module and ``module.name`` that ``path`` imports (relative ones resolved)."""
    names = [module for _, module in _imports(path, package)]
    resolved = iter(names)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [next(resolved) for _ in node.names]
        elif isinstance(node, ast.ImportFrom):  # ``from m import x``: x may be a submodule
            module = next(resolved)
            out += [module, *(f"{module}.{a.name}" for a in node.names)]
    return out


def _file_cycles(packages: dict[str, Path]) -> list[list[str]]:
    """The circles of files among ``packages``' modules (each one the files it passes through)."""
    files = {
        (pkg if path.name == "__init__.py" else f"{pkg}.{path.stem}"): path
        for pkg, folder in packages.items()
        for path in folder.glob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        graph[name] = set()
        for module in _import_targets(path, package):
            found = module
            while found and found not in files:  # a name inside a module: that module
                found = found.rpartition(".")[0]
            if found and found != name:
                graph[name].add(found)
    cycles = []
    for start in graph:  # small graphs: a walk from each file back to itself
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(trail)
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    return cycles


def test_no_file_imports_itself_through_others() -> None:
    assert _file_cycles(ACYCLIC) == []


def _packages(folder: Path, package: str) -> dict[str, Path]:
    """``package`` (in ``folder``) and each subpackage of it, with its folder."""
    return {
        ".".join([package, *init.parent.relative_to(folder).parts]): init.parent
        for init in sorted(folder.rglob("__init__.py"))
    }


# Every package of every layer, subpackages included (runtime.transports, models.backends...),
# in one graph: a circle may not pass between a package and its subpackage either.
EVERY_PACKAGE = {
    name: path
    for folder, (package, _) in LAYERS.items()
    for name, path in _packages(ROOT / folder, package).items()
}


def test_every_package_is_seen() -> None:
    # The check below covers what it should: each layer, and the subpackages found under it.
    assert {p for p, _ in LAYERS.values()} <= set(EVERY_PACKAGE)
    assert {"forethought.runtime.transports", "forethought.models.backends"} <= set(EVERY_PACKAGE)


def test_no_file_circles_in_any_package() -> None:
    # policies, models, planner, runtime, sims and forethought (with bench and testing): no
    # file reaches itself through its imports, lazy ones, TYPE_CHECKING ones and package
    # re-exports included.
    assert _file_cycles(EVERY_PACKAGE) == []


def test_the_cycle_check_sees_a_circle_through_a_subpackage(tmp_path: Path) -> None:
    # A package re-exports its subpackage, whose module imports the package back.
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("from .sub import y\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from ._x import y\n")
    (tmp_path / "pkg" / "sub" / "_x.py").write_text("from .. import z\n")
    cycles = _file_cycles(_packages(tmp_path / "pkg", "pkg"))
    assert sorted(map(sorted, cycles)) == [["pkg", "pkg.sub", "pkg.sub._x"]] * 3


def test_the_cycle_check_sees_a_circle_planted_in_the_runtime(tmp_path: Path) -> None:
    # The real runtime with one import planted: the health report naming the agent again.
    shutil.copytree(ROOT / "runtime", tmp_path / "runtime")
    assert _file_cycles(_packages(tmp_path / "runtime", "forethought.runtime")) == []
    health = tmp_path / "runtime" / "_health.py"
    health.write_text(health.read_text() + "\nfrom ._agent import Agent\n")
    cycles = _file_cycles(_packages(tmp_path / "runtime", "forethought.runtime"))
    assert any(
        {"forethought.runtime._health", "forethought.runtime._agent"} <= set(c) for c in cycles
    )


def test_the_cycle_check_sees_a_circle(tmp_path: Path) -> None:
    # It must be able to fail: two files that import each other, one of them lazily.
    (tmp_path / "_a.py").write_text("from ._b import x\n")
    (tmp_path / "_b.py").write_text("def f():\n    from ._a import y\n")
    assert sorted(map(sorted, _file_cycles({"pkg": tmp_path}))) == [
        ["pkg._a", "pkg._b"],
        ["pkg._a", "pkg._b"],
    ]
