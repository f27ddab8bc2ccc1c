"""An import-linter contract type: a room's private modules are its own.

A room is a layer (``forethought.policies`` ... ``forethought.sims``, the CLI at the top of
``forethought``) or a kit of its own (``forethought.testing``, ``forethought.bench``). Another
room reaches a room through its doors only: its ``__init__`` (the public API) and its
``internals`` module (its collaborators, not a stable API). A module is private when a part of
its name after its room's starts with an underscore (``forethought.models._prompt``,
``forethought.models.backends._transformers``); importing one from another room breaks the
contract, which names the importer, the module and the line.

The built-in ``private_modules`` type draws the line at the parent package, which would forbid
``forethought.runtime._serve`` its own ``transports._mqtt``; ``protected`` cannot say "every
private module of each room" without listing them. pyproject.toml registers this type
(``contract_types``); scripts/lint_imports.py runs the linter with scripts/ on ``sys.path``.
"""

from __future__ import annotations

import grimp
from importlinter import Contract, ContractCheck, fields, output


def room_of(module: str, rooms: list[str]) -> str | None:
    """The innermost room that holds ``module`` (None: none does, e.g. an external package)."""
    holding = [room for room in rooms if module == room or module.startswith(f"{room}.")]
    return max(holding, key=len) if holding else None


def is_private_in(module: str, room: str) -> bool:
    """Whether a part of ``module``'s name after ``room``'s is private (``_x``, not ``__x__``)."""
    parts = module[len(room) :].split(".")[1:]
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


class DoorsContract(Contract):
    """No module of one room imports a private module of another room.

    Options:
        - rooms: the rooms, each a package; a module belongs to the innermost room holding it
          (``forethought.bench`` is a room of its own inside ``forethought``).
    """

    type_name = "doors"

    rooms = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        """Every import of a private module from another room, with its line numbers."""
        # The field holds the parsed list once the contract is built (typed as the field).
        rooms: list[str] = list(self.rooms)  # type: ignore[call-overload]
        broken = []
        for imported in sorted(graph.modules):
            owner = room_of(imported, rooms)
            if owner is None or not is_private_in(imported, owner):
                continue
            for importer in sorted(graph.find_modules_that_directly_import(imported)):
                if room_of(importer, rooms) in (owner, None):
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                lines = ", ".join(str(d["line_number"]) for d in details)
                broken.append(f"{importer} -> {imported} (l.{lines})")
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """Each import that passes by another room's doors."""
        output.print_error(
            "A room's private modules are its own: import through its __init__ or its "
            "internals module:",
            bold=False,
        )
        output.new_line()
        for line in check.metadata["broken"]:
            output.print_error(f"- {line}", bold=False)
            output.new_line()
