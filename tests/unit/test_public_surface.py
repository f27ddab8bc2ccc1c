"""The public surface: each package's ``__all__`` is exactly what docs/api.md documents.

A name in a package's ``__all__`` must have a ``::: package.name`` entry in the API reference
(or, for a name a package re-exports from another documented one, that one's entry), every
entry must name something in its package's ``__all__``, and every public name must resolve and
carry a docstring (for a constant: the string literal after its assignment, which is what the
reference shows).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from extras import LOCAL_NAMES, needs
from public_packages import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api.md"
# The layers forethought's lazy names come from (forethought.__init__'s _LAYER).
LAYERS = ["forethought.policies", "forethought.models", "forethought.runtime"]


def _entries(text: str) -> list[tuple[str, str]]:
    """(package, name) of every ``::: package.name`` entry of ``text``."""
    found = []
    for path in re.findall(r"^::: (\S+)$", text, flags=re.MULTILINE):
        package, _, name = path.rpartition(".")
        found.append((package, name))
    return found


def _undocumented(entries: list[tuple[str, str]]) -> list[str]:
    """Names in a package's ``__all__`` that no entry documents.

    A re-exported name (``forethought.Agent``, ``forethought.testing.ScriptedBackend``) is
    documented by the entry of any package that exports the same definition.
    """
    documented = {(_module_of(p, n)[0], n) for p, n in entries}
    return [
        f"{package}.{name}"
        for package in PACKAGES
        for name in importlib.import_module(package).__all__
        if (package, name) not in entries and (_module_of(package, name)[0], name) not in documented
    ]


def _not_public(entries: list[tuple[str, str]]) -> list[str]:
    """Entries that name something outside their package's ``__all__``."""
    return [
        f"{p}.{n}"
        for p, n in entries
        if p not in PACKAGES or n not in importlib.import_module(p).__all__
    ]


def test_every_public_name_is_documented() -> None:
    needs("torch", "local")  # every public name resolves: the local backend's too
    missing = _undocumented(_entries(API.read_text()))
    assert not missing, f"in __all__ but not in docs/api.md: {missing}"


def test_every_documented_name_is_public() -> None:
    needs("torch", "local")  # every public name resolves: the local backend's too
    extra = _not_public(_entries(API.read_text()))
    assert not extra, f"in docs/api.md but not in its package's __all__: {extra}"


def test_the_reference_documents_each_name_once() -> None:
    entries = _entries(API.read_text())
    assert len(entries) == len(set(entries))


def test_the_checks_see_a_missing_and_a_private_entry() -> None:
    needs("torch", "local")  # every public name resolves: the local backend's too
    # Both directions must be able to fail: drop an entry, plant a private one.
    entries = [e for e in _entries(API.read_text()) if e != ("forethought.runtime", "Tier")]
    assert "forethought.runtime.Tier" in _undocumented(entries)
    entries.append(("forethought.runtime", "Executor"))
    assert _not_public(entries) == ["forethought.runtime.Executor"]


def _module_of(package: str, name: str) -> tuple[str, ast.Module]:
    """The module that defines ``package.name`` and its syntax tree, through re-exports."""
    spec = importlib.util.find_spec(package)
    assert spec is not None
    assert spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    is_package = spec.submodule_search_locations is not None
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            return _module_of(source, alias.name)
    return package, tree


def _docstring(package: str, name: str) -> str | None:
    """The docstring ``name`` has where it is defined (a constant's: the string after it)."""
    module, tree = _module_of(package, name)
    body = list(ast.walk(tree))
    for node in body:
        if (
            isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == name
        ):
            return ast.get_docstring(node)
    for node in body:
        if not hasattr(node, "body") or not isinstance(node.body, list):
            continue
        for stmt, after in zip(node.body, [*node.body[1:], None], strict=True):
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    return str(after.value.value)
                return None
    raise AssertionError(f"{name} is not defined in {module}")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_and_has_a_docstring(package: str) -> None:
    if package in LOCAL_NAMES:
        needs("torch", "local")  # every public name resolves: the local backend's too
    module = importlib.import_module(package)
    undocumented = []
    for name in module.__all__:
        getattr(module, name)  # resolves (lazy names included)
        if not (_docstring(package, name) or "").strip():
            undocumented.append(name)
    assert not undocumented, f"{package}: no docstring on {undocumented}"


def test_the_docstring_check_sees_a_bare_constant() -> None:
    # The check must be able to fail: HealthStatus (private) is a constant with no docstring.
    assert _docstring("forethought.models._health", "HealthStatus") is None
    assert _docstring("forethought.runtime", "Agent")  # through the package's re-export
    with pytest.raises(AssertionError, match="not defined"):
        _docstring("forethought.runtime", "NoSuchName")


def test_every_top_level_name_imports_from_forethought() -> None:
    needs("torch", "local")  # every public name resolves: the local backend's too
    import forethought

    namespace: dict[str, Any] = {}
    for name in forethought.__all__:
        exec(f"from forethought import {name}", namespace)
        assert namespace[name] is getattr(forethought, name)


def test_every_top_level_name_is_public_in_its_layer() -> None:
    import forethought

    layer_names = {n for layer in LAYERS for n in importlib.import_module(layer).__all__}
    assert set(forethought.__all__) - {"__version__"} <= layer_names
