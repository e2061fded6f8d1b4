#!/usr/bin/env python3
"""Check that the code names the docs mention exist (run by ``scripts/test.sh``).

The docs promise that every sparkmill name in ``code font`` can be found in the tree. This
script reads the inline code spans of README.md and docs/*.md (not fenced blocks) and checks
the ones that are meant as code:

* a file path: ``common/ha/leader.py``, ``services/dispatcher/web/``, ``protos/*.proto`` (a
  path under one of the repository's top-level folders must exist; a bare ``name.py`` or
  ``name.proto`` must be some file's name);
* a module: ``sparkmill.common.rpc.server`` (and ``sparkmill.x.y.Name.attr``: the module, then
  the name in it); ``common.x`` or ``services.x`` is refused (the folders are imported only as
  ``sparkmill.common`` and ``sparkmill.services``);
* a name: a dotted identifier, optionally with a call's parentheses, that has parentheses, an
  underscore, a CamelCase part or a capitalized head (``Dispatcher``, ``Task.start``,
  ``_recover``, ``run_blocking(fn)``). ``Class.attr`` must name a class (Python, or a protobuf
  message or service) that has the attribute (own, inherited, a field, an enum member, an
  attribute set on ``self``, an RPC); ``module.name`` a module that defines it, or else, like
  any other ``x.name`` (a variable's method, ``election.start``), a name defined somewhere; a
  standard-library ``module.name`` must exist there. A bare name must be defined somewhere in
  the project: a function, class, attribute, parameter, constant, enum member, protobuf name,
  an identifier in a string of the code or in a configuration file of the repository (ZooKeeper
  node names, Ansible variables, alert names), a metric (``sparkmill_`` + a name the code
  declares), or a Python builtin.

Dotted names without any of those marks (``heartbeat.timeout``, ``exchange.dir``) are option
keys, not code, and spans with spaces or other punctuation (``sparkmill run``, ``--detach``)
are text. A code name that does not resolve must be in ``EXTERNAL``, the short list of names of
other projects the docs mention as theirs (Flink's, Spark's, Python's, Prometheus'): anything
else is reported as ``file:line: `span`: why``. Links to local files (``[text](path)``) must
resolve too.

``--check`` exits 1 when a reference is broken (without it the problems are only listed);
``--root`` checks another tree (the tests use a scratch copy); extra arguments name the
Markdown files to read instead of README.md and docs/*.md.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import fnmatch
import importlib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Where each part of the one import package lives in the checkout (as in check_imports.py).
SOURCE_DIRS = {
    "sparkmill.common": "common",
    "sparkmill.services": "services",
    "sparkmill": "sparkmill",
}
LINKED = {"common", "services"}  # symlinks inside sparkmill/ to the folders above
# Other Python folders whose definitions count as "somewhere in the project".
EXTRA_PYTHON_DIRS = ("scripts", "tests", "benchmarks", "examples")
SKIP_DIRS = {"__pycache__", "node_modules", "build", "dist", "venv"}
CODE_EXTENSIONS = (".py", ".proto")
PATH_EXTENSIONS = (
    *CODE_EXTENSIONS,
    ".md",
    ".yml",
    ".yaml",
    ".sh",
    ".toml",
    ".json",
    ".j2",
    ".service",
    ".html",
    ".js",
    ".css",
    ".png",
    ".rules",
    ".target",
)

# Names of other projects that the docs mention as theirs (mostly in "Flink" columns and
# "Flink's X" phrases), or placeholders. Keep it short: a sparkmill name that went away must be
# fixed in the docs, not added here.
EXTERNAL = {
    # Apache Flink
    "DefaultExecutionDeploymentReconciler",
    "DefaultVertexParallelismDecider",
    "AdaptiveSkewedJoinOptimizationStrategy",
    "OptimizeSkewedJoin",  # Apache Spark
    "ExecutionFailureHandler",
    "ExecutionDeploymentTracker",
    "JobDetailsInfo",
    "JobLeaderIdService",
    "JobLeaderService",
    "JobManagerRunner",
    "SlotSharingExecutionSlotAllocator",
    "SpeculativeExecutionVertex",
    "SpeculativeScheduler",
    "SuppressRestartsException",
    "ThrowableClassifier",
    # Python's asyncio and enum; Spark SQL
    "loop.call_soon_threadsafe",
    "Enum.__hash__",
    "StructType",
    "collect_list",
    "pmod",
    # Prometheus: prometheus_client's process collector, the suffixes of metric names
    "sparkmill_process_*",
    "_total",
    "_seconds",
    "_bucket",
    "_count",
    "_sum",
    # NFS export options
    "root_squash",
    # Linux socket options: the sender's credentials on a Unix socket
    "SO_PASSCRED",
    "SCM_CREDENTIALS",
    # a placeholder: any RPC of any gateway
    "Gateway.Method",
}

SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
CALL = re.compile(rf"({DOTTED.pattern})\(.*\)")
CAMEL = re.compile(r"^_?[A-Z][a-z0-9]+[A-Z]")
CAPITALIZED = re.compile(r"^_?[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")  # a class, not a CONSTANT
PLACEHOLDER = re.compile(r"[{}<>]")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CONFIG_EXTENSIONS = (".yml", ".yaml", ".j2", ".ini", ".cfg", ".json", ".service", ".target", ".sh")


@dataclass
class ClassInfo:
    attrs: set[str] = field(default_factory=set)
    bases: list[str] = field(default_factory=list)


@dataclass
class Index:
    """What the project defines: Python (by AST, nothing is imported), protobuf, files."""

    root: Path
    files: list[str] = field(default_factory=list)  # every file, relative, with "/"
    modules: dict[str, set[str]] = field(default_factory=dict)  # dotted -> top-level names
    basenames: dict[str, list[str]] = field(default_factory=dict)  # "server" -> dotted names
    classes: dict[str, list[ClassInfo]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)
    # Identifiers inside the code's strings (ZooKeeper node names, metric names built from
    # parts) and in the configuration files of deploy/ and ansible/ (Ansible variables, alert
    # names): a bare name in the docs may be one of those.
    tokens: set[str] = field(default_factory=set)

    def has_path(self, path: str) -> bool:
        path = path.rstrip("/")
        if any(ch in path for ch in "*?["):
            return any(Path(f).match(path) for f in self.files)
        return (self.root / path).exists()

    def has_file_named(self, tail: str) -> bool:
        return any(f == tail or f.endswith("/" + tail) for f in self.files)

    def class_has(self, name: str, attr: str, seen: frozenset[str] = frozenset()) -> bool:
        for info in self.classes.get(name, []):
            if attr in info.attrs:
                return True
            for base in info.bases:
                if base not in seen and self.class_has(base, attr, seen | {name}):
                    return True
        return False


def walk_files(root: Path, base: Path | None = None) -> Iterator[Path]:
    """Files of the tree, without hidden, build and symlinked folders."""
    base = base or root
    for path in sorted(base.iterdir()):
        if path.name.startswith(".") or path.name in SKIP_DIRS:
            continue
        if path.is_dir():
            if not path.is_symlink():
                yield from walk_files(root, path)
        else:
            yield path


def python_modules(root: Path) -> Iterator[tuple[str, Path]]:
    for package, folder in SOURCE_DIRS.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if package == "sparkmill" and rel.parts[0] in LINKED:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join([package, *parts]), path
    for folder in EXTRA_PYTHON_DIRS:
        if (root / folder).is_dir():
            for path in sorted((root / folder).rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                # Not what a hidden or build directory holds (a benchmark's own virtualenv,
                # say): a fresh clone has none of it, so a name found only there is not ours.
                if any(p.startswith(".") or p in SKIP_DIRS for p in parts[:-1]):
                    continue
                yield ".".join(parts), path


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _targets(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            yield from _targets(element)


def _index_python(index: Index, module: str, path: Path) -> None:
    # This script's own strings (the list of other projects' names) prove nothing.
    keep_strings = path.resolve() != Path(__file__).resolve()
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return
    top: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            top.add(statement.name)
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                top.update(_targets(target))
        elif isinstance(statement, ast.AnnAssign):
            top.update(_targets(statement.target))
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            top.update((alias.asname or alias.name).split(".")[0] for alias in statement.names)
    index.modules[module] = top
    index.basenames.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    index.names.update(top)
    index.names.update(module.split("."))
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            info = ClassInfo(bases=[_base_name(base) for base in node.bases])
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    info.attrs.add(item.name)
                elif isinstance(item, ast.Assign):
                    for target in item.targets:
                        info.attrs.update(_targets(target))
                elif isinstance(item, ast.AnnAssign):
                    info.attrs.update(_targets(item.target))
                if (
                    isinstance(item, ast.Attribute)
                    and isinstance(item.ctx, ast.Store)
                    and isinstance(item.value, ast.Name)
                    and item.value.id in ("self", "cls")
                ):
                    info.attrs.add(item.attr)
            info.attrs.discard(node.name)
            index.classes.setdefault(node.name, []).append(info)
            index.names.add(node.name)
            index.names.update(info.attrs)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            index.names.add(node.name)
            arguments = node.args
            for arg in [
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                *([arguments.vararg] if arguments.vararg else []),
                *([arguments.kwarg] if arguments.kwarg else []),
            ]:
                index.names.add(arg.arg)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and keep_strings
            and id(node) not in docstrings
        ):
            if len(node.value) < 200:
                index.strings.add(node.value)
            index.tokens.update(IDENTIFIER.findall(node.value))


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


PROTO_BLOCK = re.compile(r"^(message|enum|service|extend)\s+([\w.]+)$")
PROTO_ONEOF = re.compile(r"^oneof\s+\w+$")
PROTO_RPC = re.compile(r"^rpc\s+(\w+)")
PROTO_FIELD = re.compile(r"^(?:repeated\s+|optional\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+")
PROTO_VALUE = re.compile(r"^(\w+)\s*=\s*-?\d+")


def _index_proto(index: Index, path: Path) -> None:
    """Messages, enums, services and extensions, with their fields, values and RPCs."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", path.read_text(), flags=re.DOTALL)
    stack: list[ClassInfo | None] = []  # one entry per open brace; None: an rpc or option body
    statement = ""
    for token in re.split(r"([{};])", text):
        if token not in ("{", "}", ";"):
            statement += token
            continue
        statement = " ".join(statement.split())
        owner = next((info for info in reversed(stack) if info is not None), None)
        rpc = PROTO_RPC.match(statement)
        if rpc and owner is not None:
            owner.attrs.add(rpc.group(1))
            index.names.add(rpc.group(1))
        if token == "{":
            block = PROTO_BLOCK.match(statement)
            if block:
                info = ClassInfo()
                index.classes.setdefault(block.group(2).rsplit(".", 1)[-1], []).append(info)
                index.names.add(block.group(2))
                stack.append(info)
            else:
                # A oneof's fields belong to its message; rpc and option bodies hold none.
                stack.append(owner if PROTO_ONEOF.match(statement) else None)
        elif token == ";" and owner is not None and not rpc:
            found = PROTO_FIELD.match(statement) or PROTO_VALUE.match(statement)
            if found:
                owner.attrs.add(found.group(1))
                index.names.add(found.group(1))
        elif token == "}" and stack:
            stack.pop()
        statement = ""


def build_index(root: Path) -> Index:
    index = Index(root)
    for path in walk_files(root):
        index.files.append(path.relative_to(root).as_posix())
        if path.suffix == ".proto":
            _index_proto(index, path)
        elif path.suffix in CONFIG_EXTENSIONS or path.parent.name in ("inventory", "group_vars"):
            try:
                index.tokens.update(IDENTIFIER.findall(path.read_text()))
            except UnicodeDecodeError:
                continue
    for module, path in python_modules(root):
        _index_python(index, module, path)
    return index


def spans(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line, kind, text)`` of every inline code span and local link outside fenced blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for found in SPAN.finditer(line):
            yield number, "code", found.group(1).strip()
        for found in LINK.finditer(line):
            yield number, "link", found.group(1)


def top_folders(root: Path) -> set[str]:
    return {
        path.name
        for path in root.iterdir()
        if path.is_dir() and not path.name.startswith(".") and path.name not in SKIP_DIRS
    }


def check_path(index: Index, span: str, doc: Path, folders: set[str]) -> str | None:
    """None when ``span`` is no repository path or one that exists; otherwise why not."""
    if PLACEHOLDER.search(span) or " " in span or span.startswith(("/", "~", "http")):
        return None
    first = span.split("/", 1)[0]
    if "/" in span and first in folders:
        return None if index.has_path(span) else f"no such path {span!r}"
    if span.endswith(CODE_EXTENSIONS) and "*" not in span and not span.startswith("."):
        relative = (doc.parent / span).resolve()
        if relative.exists() or index.has_file_named(span.removeprefix("./")):
            return None
        return f"no file named {span!r}"
    return None


def is_path_like(span: str) -> bool:
    if re.fullmatch(r"\.\w+", span):
        return True  # a file extension (``.proto``), no path: check_path lets it pass
    return "/" in span or span.endswith(PATH_EXTENSIONS)


def code_name(span: str) -> str | None:
    """The dotted name a span means as code, or None when it is no code name."""
    text = span
    called = False
    call = CALL.fullmatch(text)
    if call:
        text, called = call.group(1), True
    if not DOTTED.fullmatch(text):
        return None
    parts = text.split(".")
    if (
        called
        or "_" in text
        or any(CAMEL.match(part) for part in parts)
        or (len(parts) > 1 and (parts[0] in ("sparkmill", *BARE_PACKAGES)))
        or (len(parts) > 1 and CAPITALIZED.match(parts[0]))
    ):
        return text
    return None


def is_external(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXTERNAL)


def _stdlib_has(parts: list[str]) -> bool:
    """``asyncio.start_server``: a standard-library module and a name in it."""
    if parts[0] not in sys.stdlib_module_names or len(parts) < 2:
        return False
    try:
        target: object = importlib.import_module(parts[0])
    except ImportError:
        return False
    for part in parts[1:]:
        if not hasattr(target, part):
            return False
        target = getattr(target, part)
    return True


def _is_metric(index: Index, name: str) -> bool:
    """``sparkmill_x_seconds`` or ``sparkmill_x_total``: the code declares ``x_seconds`` or
    ``x`` (the prefix is added in one place; counters get ``_total`` from the client)."""
    if not name.startswith(METRIC_PREFIX):
        return False
    short = name.removeprefix(METRIC_PREFIX)
    candidates = {short, *(short.removesuffix(suffix) for suffix in METRIC_SUFFIXES)}
    return any(candidate in index.strings for candidate in candidates)


def resolve(index: Index, name: str) -> str | None:
    """None when ``name`` resolves; otherwise why it does not."""
    if is_external(name) or name in index.strings:
        return None
    parts = name.split(".")
    if parts[0] == "sparkmill":
        return _resolve_module_path(index, parts)
    if parts[0] in BARE_PACKAGES and len(parts) > 1:
        return f"write sparkmill.{name}: {parts[0]}/ is imported only as sparkmill.{parts[0]}"
    if len(parts) == 1:
        if name in index.names or name in index.tokens or _is_metric(index, name):
            return None
        if name in dir(builtins):
            return None
        return f"{name} is defined nowhere in the project"
    if _stdlib_has(parts):
        return None
    if len(parts) == 2 and "." + parts[1] in index.strings:
        return None  # a file name with a suffix the code uses (``server.key_secret``)
    head, attr = parts[0], parts[1]
    if head in index.classes:
        if not index.class_has(head, attr):
            return f"class {head} has no attribute {attr}"
        if len(parts) == 2:
            return None
    elif CAPITALIZED.match(head):
        return f"{head} is no class of the project"
    elif (
        head in index.basenames
        and len(parts) == 2
        and any(attr in index.modules[m] for m in index.basenames[head])
    ):
        return None
    # A variable's attribute (``election.start``, ``runtime.run_blocking``): the name must
    # exist somewhere.
    last = parts[-1]
    if last not in index.names:
        return f"{last} is defined nowhere in the project"
    return None


BARE_PACKAGES = ("common", "services")
METRIC_PREFIX = "sparkmill_"
METRIC_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def _resolve_module_path(index: Index, parts: list[str]) -> str | None:
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in index.modules:
            rest = parts[cut:]
            if not rest:
                return None
            if rest[0] not in index.modules[module]:
                return f"module {module} defines no {rest[0]}"
            if len(rest) > 1 and not index.class_has(rest[0], rest[1]):
                return f"{rest[0]} (in {module}) has no attribute {rest[1]}"
            return None
    return f"no module {'.'.join(parts)}"


def check_link(target: str, doc: Path) -> str | None:
    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
        return None
    path = target.split("#", 1)[0]
    if not path or (doc.parent / path).exists():
        return None
    return f"link to a missing file {path!r}"


def check_file(index: Index, doc: Path, folders: set[str]) -> Iterator[tuple[int, str, str]]:
    for line, kind, span in spans(doc.read_text()):
        if kind == "link":
            problem = check_link(span, doc)
        elif is_path_like(span):
            problem = check_path(index, span, doc, folders)
        else:
            name = code_name(span)
            problem = resolve(index, name) if name is not None else None
        if problem is not None:
            yield line, span, problem


def default_docs(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def check(root: Path, docs: list[Path] | None = None) -> list[str]:
    index = build_index(root)
    folders = top_folders(root)
    problems = []
    for doc in docs or default_docs(root):
        shown = doc.relative_to(root) if doc.is_relative_to(root) else doc
        for line, span, problem in check_file(index, doc, folders):
            problems.append(f"{shown}:{line}: `{span}`: {problem}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("docs", nargs="*", type=Path, help="Markdown files (default: the docs)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--check", action="store_true", help="exit 1 if a reference is broken")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    docs = [path.resolve() for path in args.docs] or None
    problems = check(root, docs)
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"{len(problems)} broken reference(s) in the docs: fix the docs, or, for another "
            "project's name, add it to EXTERNAL in scripts/check_docs.py"
        )
        return 1 if args.check else 0
    print("every code reference in the docs resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
