"""Run import-linter's contracts (pyproject.toml) over the installed shape of the package.

setuptools maps runtime/ to forethought.runtime (package-dir), which import-linter's graph
builder cannot follow: it walks the folder of the top package. scripts/typecheck_tree.py lays out
that shape under build/typecheck as links; this copies it (the graph builder skips linked files)
to build/importlint, puts that first and hides the editable install's finder, so the graph is
the package as users import it.

    python scripts/lint_imports.py                # lay out build/importlint, then lint it
    python scripts/lint_imports.py --tree DIR     # lint DIR/forethought as it is (tests plant
                                                  # a bad import there to see a contract fail)
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import typecheck_tree  # beside this file: python puts scripts/ first on sys.path
from importlinter.cli import lint_imports_command

ROOT = Path(__file__).resolve().parent.parent


def lay_out(tree: Path) -> None:
    """Copy the installed shape of the package to ``tree``/forethought."""
    typecheck_tree.main()
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(ROOT / "build" / "typecheck" / "forethought", tree / "forethought")


def lint(tree: Path) -> int:
    """Lint ``tree``/forethought against pyproject's contracts; lint-imports' exit status."""
    sys.path.insert(0, str(tree))
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in type(f).__module__]
    # lint-imports puts the working directory first on sys.path, and the repo root holds a
    # forethought/ folder of its own (the CLI layer alone).
    os.chdir(tree)
    status = lint_imports_command.main(
        args=["--no-cache", "--no-logo", str(ROOT / "pyproject.toml")], standalone_mode=False
    )
    return int(status or 0)


def main(argv: list[str]) -> int:
    """Lay out (unless ``--tree`` names a tree) and lint."""
    if argv[:1] == ["--tree"]:
        return lint(Path(argv[1]).resolve())
    tree = ROOT / "build" / "importlint"
    lay_out(tree)
    return lint(tree)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
