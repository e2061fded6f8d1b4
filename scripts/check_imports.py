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

Contracts:

1. ``sparkmill.common`` imports nothing of this project but ``sparkmill.common``;
2. a service package imports ``sparkmill.common`` and itself, never another service, the
   entry point or the public API;
3. the public API package reaches the services only through ``sparkmill.services.entrypoint``;
4. no import cycle between modules, counting imports inside functions and under
   ``TYPE_CHECKING`` too (a cycle hidden by a late import is still a cycle).

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
