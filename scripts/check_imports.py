#!/usr/bin/env python3
"""Check the import contracts of sparkmill's layers (run by ``scripts/test.sh``).

The layers, from the bottom::

    sparkmill.common          the shared contract: wire code, states, config, RPC, HA recipes
        ^
    sparkmill.services.<svc>  dispatcher, resourcemanager, jobmaster, taskexecutor
        ^
    sparkmill.services.entrypoint   the one module that knows every service (process main)
        ^
    sparkmill (the rest)      public API, CLI, local cluster, testing helpers

Inside ``sparkmill.common`` the sub-packages are layers too, from the bottom (``COMMON_LAYERS``)::

    v1 (messages)  core  config  exchange  jobgraph  deployment  pipeline  runtime  rpc
    v1.gateways  ha

Contracts:

1. ``sparkmill.common`` imports nothing of this project but ``sparkmill.common``, and a module
   of one of its layers imports only its own layer and the layers below it (the generated
   gateway stubs, ``sparkmill.common.v1.gateways``, are built on the RPC layer, so they are a
   layer of their own above ``rpc`` though they live in ``v1``); every module of
   ``sparkmill.common`` lives in one of those layers;
2. a service package imports ``sparkmill.common`` and itself, never another service, the
   entry point or the public API;
3. the public API package reaches the services only through ``sparkmill.services.entrypoint``;
4. no import cycle between modules, counting imports inside functions and under
   ``TYPE_CHECKING`` too (a cycle hidden by a late import is still a cycle);
5. no Python file of the repository imports ``common`` or ``services`` by their bare folder
   names: in a checkout both names would load, as modules distinct from ``sparkmill.common``
   and ``sparkmill.services`` (two copies of every class, enum and registry).

Every ``import`` statement counts, wherever it is. Exit status 0 when every contract holds,
1 with one line per broken contract otherwise. ``--root`` checks another tree (the test suite
breaks a contract in a scratch copy to see this script fail).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROJECT = "sparkmill"
# Where each subpackage of the one import package lives in the checkout.
SOURCE_DIRS = {
    "sparkmill.common": "common",
    "sparkmill.services": "services",
    "sparkmill": "sparkmill",
}
# Symlinks inside sparkmill/ that point at the folders above; walked once, under their own name.
LINKED = {"common", "services"}
SERVICES = ("dispatcher", "resourcemanager", "jobmaster", "taskexecutor")
ENTRYPOINT = "sparkmill.services.entrypoint"
COMMON = "sparkmill.common"
# The layers inside sparkmill.common, bottom first: a module may import its own layer and the
# ones below it. Between neighbours that do not import each other today, the order says which
# way a future import may go: configuration is read by nearly everything and reads only core;
# runtime (actor, heartbeats, settings) works without RPC, so RPC may use it but not the
# reverse. A dotted entry (``v1.gateways``) is a module placed apart from its package.
COMMON_LAYERS = (
    "v1",
    "core",
    "config",
    "exchange",
    "jobgraph",
    "deployment",
    "pipeline",
    "runtime",
    "rpc",
    "v1.gateways",
    "ha",
)
# Bare folder names that must never be imported (contract 5).
BARE_NAMES = {"common": "sparkmill.common", "services": "sparkmill.services"}
# Directories never searched for bare-name imports.
SKIP_DIRS = {"__pycache__", "node_modules", "build", "dist", "venv"}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    path: Path
    line: int


def discover_modules(root: Path) -> dict[str, Path]:
    """Every module of the project, by dotted name."""
    modules: dict[str, Path] = {}
    for package, folder in SOURCE_DIRS.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if package == PROJECT and rel.parts[0] in LINKED:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[Edge]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _project_edge(module, alias.name, path, node.lineno, modules)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                target = candidate if candidate in modules else base
                yield from _project_edge(module, target, path, node.lineno, modules)


def _project_edge(
    module: str, target: str, path: Path, line: int, modules: dict[str, Path]
) -> Iterator[Edge]:
    if target != PROJECT and not target.startswith(PROJECT + "."):
        return
    # ``import a.b.c`` depends on the deepest module that exists.
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    if target != module:
        yield Edge(module, target, path, line)


def layer_of(module: str) -> str:
    """``common``, ``service:<name>``, ``entrypoint``, ``services`` or ``api``."""
    if module == "sparkmill.common" or module.startswith("sparkmill.common."):
        return "common"
    if module == ENTRYPOINT:
        return "entrypoint"
    for service in SERVICES:
        name = f"sparkmill.services.{service}"
        if module == name or module.startswith(name + "."):
            return f"service:{service}"
    if module == "sparkmill.services" or module.startswith("sparkmill.services."):
        return "services"
    return "api"


def allowed(importer: str, imported: str) -> bool:
    src, dst = layer_of(importer), layer_of(imported)
    if dst == "common":
        return True
    if src == "common":
        return False
    if src.startswith("service:"):
        return dst == src or imported == "sparkmill.services"
    if src == "services":
        # Only package markers live directly in sparkmill.services.
        return dst == "services"
    if src == "entrypoint":
        return dst != "api"
    # The public API package: itself, and the services only through the entry point.
    return dst == "api" or imported in (ENTRYPOINT, "sparkmill.services")


def common_layer(module: str) -> int | None:
    """Index in ``COMMON_LAYERS`` of a ``sparkmill.common`` module, None when outside any."""
    rest = module.removeprefix(COMMON + ".")
    best: tuple[int, int] | None = None  # (length of the matching entry, index)
    for index, layer in enumerate(COMMON_LAYERS):
        if rest == layer or rest.startswith(layer + "."):
            depth = layer.count(".") + 1
            if best is None or depth > best[0]:
                best = (depth, index)
    return None if best is None else best[1]


def common_layer_problem(edge: Edge) -> str | None:
    """Why an import between two modules of ``sparkmill.common`` breaks the layer order."""
    if layer_of(edge.importer) != "common" or layer_of(edge.imported) != "common":
        return None
    if edge.imported == COMMON:
        return None  # the package itself holds nothing
    src, dst = common_layer(edge.importer), common_layer(edge.imported)
    if src is None or dst is None or dst <= src:
        return None  # unlayered modules are reported once each, by ``unlayered_modules``
    return (
        f"{edge.importer} must not import {edge.imported} (common layer "
        f"{COMMON_LAYERS[src]} -> {COMMON_LAYERS[dst]}, which sits above it; the order, "
        f"bottom first: {', '.join(COMMON_LAYERS)})"
    )


def unlayered_modules(modules: dict[str, Path]) -> list[tuple[str, Path]]:
    return [
        (name, path)
        for name, path in sorted(modules.items())
        if layer_of(name) == "common" and name != COMMON and common_layer(name) is None
    ]


def python_files(root: Path) -> Iterator[Path]:
    """Every Python file of the tree, symlinked folders and hidden or build folders skipped."""
    for path in sorted(root.iterdir()):
        if path.is_symlink() or path.name.startswith("."):
            continue
        if path.is_dir():
            if path.name not in SKIP_DIRS:
                yield from python_files(path)
        elif path.suffix == ".py":
            yield path


def bare_name_imports(root: Path) -> Iterator[tuple[Path, int, str]]:
    """``(path, line, name)`` of each absolute import of a bare folder name."""
    for path in python_files(root):
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue  # not this script's business: ruff reports it
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".", 1)[0] in BARE_NAMES:
                    yield path, node.lineno, name


def find_cycles(edges: list[Edge]) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    # A package's __init__ importing its own submodules is how packages re-export; the edge
    # from a submodule back to its package's __init__ is what makes that a cycle, so a cycle
    # through a package and one of its own submodules is still reported like any other.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        # Iterative Tarjan (the import graph can be deep enough to hit the recursion limit).
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def check(root: Path) -> list[str]:
    modules = discover_modules(root)
    edges = sorted(
        {edge for name, path in modules.items() for edge in imports_of(name, path, modules)},
        key=lambda e: (str(e.path), e.line, e.imported),
    )
    problems = [
        f"{edge.path.relative_to(root)}:{edge.line}: {edge.importer} must not import "
        f"{edge.imported} ({layer_of(edge.importer)} -> {layer_of(edge.imported)})"
        for edge in edges
        if not allowed(edge.importer, edge.imported)
    ]
    for edge in edges:
        problem = common_layer_problem(edge)
        if problem is not None:
            problems.append(f"{edge.path.relative_to(root)}:{edge.line}: {problem}")
    problems += [
        f"{path.relative_to(root)}: {name} is in no layer of sparkmill.common (put it in one "
        f"of {', '.join(COMMON_LAYERS)}, or add a layer to COMMON_LAYERS in this script)"
        for name, path in unlayered_modules(modules)
    ]
    problems += [
        f"{path.relative_to(root)}:{line}: import of bare name {name!r}: import "
        f"{BARE_NAMES[name.split('.', 1)[0]]}{name[len(name.split('.', 1)[0]) :]} instead"
        for path, line, name in bare_name_imports(root)
    ]
    problems += [f"import cycle: {' <-> '.join(cycle)}" for cycle in find_cycles(edges)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    problems = check(args.root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} import contract(s) broken (see scripts/check_imports.py)")
        return 1
    print("import contracts hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
