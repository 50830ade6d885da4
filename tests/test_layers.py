"""The package's shape, checked: layers import only downward, no import circle, and no import inside a
function unless it is there for start-up time and says so.

ARCHITECTURE.md draws the layers; :data:`LAYERS` is the same list, lowest first. A module may import a
module of its own layer's package or of a lower layer. Imports under ``if TYPE_CHECKING:`` never run and
are not counted. An import made inside a function must carry a comment on its line or the line above saying why it
waits: ``start-up`` (kept off the import path of ``laraq --version``, ``laraq work`` and ``import laraq``)
or ``optional dependency`` (a package that may not be installed).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "laraq"

#: lowest first; a module is in the first layer whose name is a prefix of its own
LAYERS: list[tuple[str, ...]] = [
    ("laraq._version", "laraq._speedups", "laraq.exitcodes", "laraq.repeated", "laraq.logtext"),
    ("laraq.protocol",),
    ("laraq.config",),
    ("laraq.stores",),
    ("laraq.horizon",),
    ("laraq.bus",),
    ("laraq.worker",),
    ("laraq.horizon.listener", "laraq.horizon.phpwait"),
    ("laraq.schedule",),
    ("laraq.app",),
    ("laraq.production",),
    ("laraq.ops",),
    ("laraq.cli", "laraq.dashboard"),
    ("laraq", "laraq.__main__"),
]

#: the words one of which the comment on an import inside a function must hold
REASONS = ("start-up", "optional dependency")


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, rank = len(name), i
    if rank < 0:
        raise AssertionError(f"{module} is in no layer of tests/test_layers.py (and ARCHITECTURE.md)")
    return rank


@dataclass
class Module:
    name: str
    path: Path
    #: (target module, line, inside a function, has the start-up comment)
    imports: list[tuple[str, int, bool, bool]] = field(default_factory=list)
    #: imports of anything (stdlib included) inside a function: (what, line, has the comment)
    inner: list[tuple[str, int, bool]] = field(default_factory=list)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _commented(lines: list[str], lineno: int) -> bool:
    here = lines[lineno - 1]
    above = lines[lineno - 2] if lineno >= 2 else ""
    comment = here.partition("#")[2] + " " + (above.strip() if above.strip().startswith("#") else "")
    return any(reason in comment for reason in REASONS)


def _targets(node: ast.Import | ast.ImportFrom, known: set[str], package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == "laraq" or a.name.startswith("laraq.")]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    if not (base == "laraq" or base.startswith("laraq.")):
        return []
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in known else base)
    return out


def load_modules() -> dict[str, Module]:
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {_module_name(p) for p in paths} | {"laraq._speedups"}
    modules: dict[str, Module] = {}
    for path in paths:
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        text = path.read_text()
        lines = text.splitlines()
        mod = Module(name, path)

        def visit(node: ast.AST, in_function: bool, mod: Module = mod, lines: list[str] = lines,
                  package: str = package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    for sub in child.orelse:
                        visit(sub, in_function)
                    continue
                if isinstance(child, ast.Import | ast.ImportFrom):
                    commented = _commented(lines, child.lineno)
                    if in_function:
                        what = ", ".join(a.name for a in child.names) if isinstance(child, ast.Import) \
                            else "." * child.level + (child.module or "")
                        mod.inner.append((what, child.lineno, commented))
                    for target in _targets(child, known, package):
                        mod.imports.append((target, child.lineno, in_function, commented))
                visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

        visit(ast.parse(text), False)
        modules[name] = mod
    return modules


def _with_parents(target: str, importer: str) -> list[str]:
    """Importing ``a.b.c`` runs ``a/__init__``, ``a.b/__init__`` and ``a.b.c``; the importer's own
    ancestors are already running, so they are no edge."""
    parts = target.split(".")
    chain = [".".join(parts[: i + 1]) for i in range(len(parts))]
    return [m for m in chain if not importer.startswith(m + ".") and m != importer]


def test_every_module_sits_in_a_layer() -> None:
    for name in load_modules():
        layer_of(name)


def test_imports_run_downward_only() -> None:
    wrong = []
    for mod in load_modules().values():
        here = layer_of(mod.name)
        for target, line, _, _ in mod.imports:
            there = layer_of(target)
            if there > here:
                wrong.append(f"{mod.path.relative_to(PACKAGE.parent)}:{line}: {mod.name} "
                             f"(layer {LAYERS[here][0]}) imports {target} (layer {LAYERS[there][0]})")
    assert not wrong, "imports that run upward:\n" + "\n".join(wrong)


def test_no_import_circle() -> None:
    modules = load_modules()
    graph = {
        name: sorted({t for target, _, _, _ in mod.imports for t in _with_parents(target, name) if t in modules})
        for name, mod in modules.items()
    }
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    circles: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            recurse = False
            for j in range(i, len(graph[node])):
                nxt = graph[node][j]
                if nxt not in index:
                    work.append((node, j + 1))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_imports_inside_functions_say_why() -> None:
    silent = [
        f"{mod.path.relative_to(PACKAGE.parent)}:{line}: import {what}"
        for mod in load_modules().values()
        for what, line, commented in mod.inner
        if not commented
    ]
    assert not silent, (
        f"imports inside a function without a comment saying why they wait ({' or '.join(REASONS)}):\n" + "\n".join(silent)
    )


def test_a_module_outside_the_layers_is_named() -> None:
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("elsewhere.nowhere")


#: names that hold a protocol object (a queue, its client, its scripts, the acks) wherever they appear
_PROTOCOL_NAMES = {"queue", "client", "reserving", "acks", "pipe", "scripts", "conn", "redis_queue"}


def test_the_worker_patches_no_other_object() -> None:
    """In ``laraq/worker/`` an object sets only its own attributes and those of the small records it owns
    (a running job, a buffered one, the pace): never an attribute of an object it was handed (``self.x.y =
    ...``), and never one of a protocol object, whose every Redis command is the protocol layer's."""
    found = []
    for path in sorted((PACKAGE / "worker").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            else:
                continue
            for target in targets:
                for sub in ast.walk(target):
                    if not isinstance(sub, ast.Attribute):
                        continue
                    base = sub.value
                    handed = isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
                        and base.value.id == "self"
                    protocol = any(isinstance(n, ast.Name | ast.Attribute)
                                   and (n.id if isinstance(n, ast.Name) else n.attr) in _PROTOCOL_NAMES
                                   for n in ast.walk(base))
                    if handed or protocol:
                        found.append(f"{path.name}:{node.lineno}: {ast.unparse(sub)} = ...")
    assert not found, "\n".join(found)


def test_no_redis_command_is_sent_from_the_worker() -> None:
    """Every Redis command is the protocol layer's: ``laraq/worker/`` calls its operations, never a client."""
    found = []
    for path in sorted((PACKAGE / "worker").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("client", "scripts", "pipeline", "execute_command"):
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert not found, "\n".join(found)
