"""The house rules, checked: layers import one way, and a layer loads only what it needs."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
            if rank < 5 and module.startswith("forethought._"):
                against.append(f"{path.relative_to(ROOT)}:{line} imports {module} (the CLI host)")
    assert not against, "\n".join(against)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    # The rule above must be able to fail: an upward import in a policies module is caught.
    bad = tmp_path / "_bad.py"
    bad.write_text("from forethought.runtime import Agent\nfrom ..planner import Planner\n")
    found = _imports(bad, "forethought.policies")
    assert [m for _, m in found] == ["forethought.runtime", "forethought.planner"]
    assert all(_target_rank(m) > 0 for _, m in found)  # type: ignore[operator]


def test_sims_use_only_public_names_of_lower_layers() -> None:
    private = []
    for path, _, rank in _modules():
        if rank != 4:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if _target_rank(node.module) in (0, 1, 2, 3) and node.module.count(".") > 1:
                    private.append(f"{path.name}: from {node.module}")
                private += [
                    f"{path.name}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and _target_rank(node.module) in (0, 1, 2, 3)
                ]
    assert not private, private


HEAVY = {
    "forethought.policies": ["torch", "transformers", "numpy", "aiomqtt", "pydantic_settings"],
    "forethought.models": ["torch", "transformers", "aiomqtt", "paho", "pydantic_settings"],
    "forethought.planner": ["torch", "transformers", "aiomqtt", "paho", "pydantic_settings"],
    "forethought.runtime": ["torch", "transformers", "forethought.sims"],
    "forethought": ["forethought.policies", "forethought.runtime", "pydantic", "torch"],
}


@pytest.mark.parametrize("layer", sorted(HEAVY))
def test_a_layer_loads_nothing_it_does_not_need(layer: str) -> None:
    code = f"import sys, {layer}; print(','.join(m for m in {HEAVY[layer]!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "", f"import {layer} loaded {out}"


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
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lint_imports.py"), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_import_linter_contracts_hold() -> None:
    done = _lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("where", "code", "broken"),
    [
        ("policies/_upward.py", "from forethought.runtime import Agent\n", "Layers import one way"),
        ("models/_upward.py", "import forethought.planner\n", "Layers import one way"),
        (
            "runtime/_executor.py",
            "from forethought.planner import Planner\n",
            "The executor asks the model layer",
        ),
        ("policies/_numeric.py", "import numpy\n", "policies/ is pure data"),
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
