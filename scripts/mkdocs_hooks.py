"""mkdocs hooks: lay out the package's installed shape before the API reference is collected.

mkdocstrings reads the sources statically, and like mypy it cannot follow setuptools'
package-dir mapping (runtime/ -> forethought.runtime); scripts/typecheck_tree.py builds that
shape out of symbolic links under build/typecheck, which mkdocs.yml names as the search path.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

_TREE = Path(__file__).resolve().parent / "typecheck_tree.py"


def on_config(config: Any) -> Any:
    """Build the link tree once per build, before any page is read."""
    runpy.run_path(str(_TREE), run_name="__main__")
    return config
