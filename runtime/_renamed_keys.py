"""Settings read under their old names for one release after a rename, with a warning once.

A renamed field of a settings model keeps its old key working (TOML, the environment, keyword
arguments): the model's ``mode="before"`` validator hands its input here, which moves the old
key's value to the new key and warns (a ``FutureWarning``: Python shows it once per place by
default, and an application may filter it as any other) which key to write instead. Giving
both is an error naming both.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["renamed_keys"]


def renamed_keys(data: Any, renamed: Mapping[str, str], *, where: str) -> Any:
    """``data`` with each old key of ``renamed`` (old -> new) moved to its new name.

    ``where``: the section the keys are in (``executor``), for the messages. Anything but a
    mapping is returned as it is (pydantic then says what is wrong with it).
    """
    if not isinstance(data, Mapping) or not any(old in data for old in renamed):
        return data
    out = dict(data)
    for old, new in renamed.items():
        if old not in out:
            continue
        if new in out:
            raise ValueError(
                f"{where}.{old} was renamed {where}.{new}: give {new} only (both are given)"
            )
        out[new] = out.pop(old)
        warnings.warn(
            f"{where}.{old} was renamed {where}.{new}: write {new} (the old name is read "
            "until the next release)",
            FutureWarning,
            stacklevel=2,
        )
    return out
