"""Lay out build/typecheck/forethought as the installed package, for mypy.

mypy cannot follow setuptools' package-dir mapping (runtime/ -> forethought.runtime), so this
builds the installed shape out of symbolic links to the real files, and mypy reads that.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPING = {
    "": "forethought",
    "bench": "forethought/bench",
    "commands": "forethought/commands",
    "testing": "forethought/testing",
    "runtime": "runtime",
    "runtime/fleet": "runtime/fleet",
    "runtime/transports": "runtime/transports",
    "models": "models",
    "models/backends": "models/backends",
    "models/grammar": "models/grammar",
    "planner": "planner",
    "policies": "policies",
    "sims": "sims",
}


def main() -> None:
    """Rebuild the link tree from scratch."""
    target = ROOT / "build" / "typecheck" / "forethought"
    if target.exists():
        shutil.rmtree(target)
    for sub, source in MAPPING.items():
        dest = target / sub if sub else target
        dest.mkdir(parents=True, exist_ok=True)
        for path in [*sorted((ROOT / source).glob("*.py")), ROOT / source / "py.typed"]:
            if path.exists():
                (dest / path.name).symlink_to(path)


if __name__ == "__main__":
    main()
