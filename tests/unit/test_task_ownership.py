"""Every background task is owned: started in a TaskGroup, or named and kept by its owner.

A task started bare (``asyncio.create_task``, ``ensure_future``, ``loop.create_task``) and
left alone can outlive what started it, fail without anyone hearing, or be collected while it
runs. So every one in the package is one of:

* started by a TaskGroup (``tg.create_task``, ``tg`` bound by ``async with
  asyncio.TaskGroup() as tg`` or a parameter typed ``asyncio.TaskGroup``);
* named (``name=``) and awaited at once, or kept in a local variable (a list of them too) that
  the same function awaits (``await task``, ``await asyncio.wait([...])``) or hands to a
  method of its object (``self._close_later(tasks)``), which then owns it as below;
* named and kept on ``self`` (``self._x = ...`` or ``self._xs.append(...)``) by a class whose
  ``__aexit__`` or ``aclose`` (or a method either calls) handles that attribute.

``ensure_future`` is not used at all: it takes no name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("policies", "models", "planner", "runtime", "sims", "forethought")
STARTERS = {"create_task", "ensure_future"}
CLOSERS = ("__aexit__", "aclose")


@dataclass(frozen=True)
class Bare:
    """A task started where nothing owns it."""

    path: str
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}"


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _task_groups(func: ast.AST) -> set[str]:
    """Names bound to a TaskGroup in ``func``: ``async with ... TaskGroup() as x``, params."""
    names: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and ast.unparse(call.func).endswith("TaskGroup")
                    and isinstance(item.optional_vars, ast.Name)
                ):
                    names.add(item.optional_vars.id)
        if (
            isinstance(node, ast.arg)
            and node.annotation is not None
            and ast.unparse(node.annotation).endswith("TaskGroup")
        ):
            names.add(node.arg)
    return names


def _awaits_name(func: ast.AST, name: str) -> bool:
    """Whether ``func`` awaits ``name`` (in any expression), or hands it to a ``self`` method."""

    def mentions(expr: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr))

    for node in ast.walk(func):
        if isinstance(node, ast.Await) and mentions(node.value):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
            and any(mentions(a) for a in node.args)
        ):
            return True
    return False


def _closing_attrs(cls: ast.ClassDef) -> set[str] | None:
    """``self.<attr>`` names the class's closers (and the methods they call) touch."""
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    todo = [m for m in CLOSERS if m in methods]
    if not todo:
        return None
    seen: set[str] = set()
    attrs: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(methods[name]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                attrs.add(node.attr)
                if node.attr in methods:
                    todo.append(node.attr)
    return attrs


def bare_tasks(path: Path, label: str) -> list[Bare]:
    """Every task started in ``path`` that nothing owns."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parents = _parents(tree)
    out: list[Bare] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        starter = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if starter not in STARTERS:
            continue
        chain = [node]
        while chain[-1] in parents:
            chain.append(parents[chain[-1]])
        functions = [p for p in chain[1:] if isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef)]
        enclosing = functions[0] if functions else None
        cls = next((p for p in chain[1:] if isinstance(p, ast.ClassDef)), None)
        where = Bare(label, node.lineno, "")
        if starter == "ensure_future":
            out.append(Bare(where.path, where.line, "ensure_future: use create_task(name=...)"))
            continue
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if isinstance(receiver, ast.Name) and any(
            receiver.id in _task_groups(f) for f in functions
        ):
            continue  # a TaskGroup's (bound here or in a function around this one)
        if not any(k.arg == "name" for k in node.keywords):
            out.append(Bare(where.path, where.line, "a task without a name"))
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.comprehension | ast.ListComp | ast.SetComp):
            parent = parents.get(parent)  # a list of tasks: as one
            if isinstance(parent, ast.ListComp | ast.SetComp):
                parent = parents.get(parent)
        if isinstance(parent, ast.Await):
            continue  # awaited at once
        targets = (
            parent.targets
            if isinstance(parent, ast.Assign)
            else [parent.target]
            if isinstance(parent, ast.AnnAssign)
            else []
        )
        if len(targets) == 1:
            target = targets[0]
            if isinstance(target, ast.Name) and enclosing and _awaits_name(enclosing, target.id):
                continue
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and cls is not None
                and target.attr in (_closing_attrs(cls) or set())
            ):
                continue
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Attribute)
            and parent.func.attr in ("append", "add")  # a list or a set of owned tasks
            and isinstance(parent.func.value, ast.Attribute)
            and isinstance(parent.func.value.value, ast.Name)
            and parent.func.value.value.id == "self"
            and cls is not None
            and parent.func.value.attr in (_closing_attrs(cls) or set())
        ):
            continue
        out.append(Bare(where.path, where.line, "started bare: no TaskGroup, no owner awaits it"))
    return out


def _sources() -> list[tuple[Path, str]]:
    return [
        (path, str(path.relative_to(ROOT)))
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


def test_every_background_task_is_owned() -> None:
    bare = [b for path, label in _sources() for b in bare_tasks(path, label)]
    assert bare == [], "\n".join(map(str, bare))


def test_the_check_sees_a_bare_task(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import asyncio\n"
        "class Owner:\n"
        "    async def start(self):\n"
        "        self._kept = asyncio.create_task(work(), name='kept')\n"
        "        self._lost = asyncio.create_task(work(), name='lost')\n"
        "        asyncio.create_task(work(), name='dropped')\n"
        "        asyncio.create_task(work())\n"
        "        asyncio.ensure_future(work())\n"
        "        async with asyncio.TaskGroup() as tg:\n"
        "            tg.create_task(work())\n"
        "        local = asyncio.create_task(work(), name='local')\n"
        "        await local\n"
        "    async def __aexit__(self, *exc):\n"
        "        self._kept.cancel()\n"
        "async def work(): ...\n"
    )
    found = {(b.line, b.why.split(":")[0]) for b in bare_tasks(planted, "planted.py")}
    assert found == {
        (5, "started bare"),
        (6, "started bare"),
        (7, "a task without a name"),
        (8, "ensure_future"),
    }
