"""The house rules, read from the code itself (AST): `domain/` is pure (no SQLAlchemy, web3,
FastAPI or ape), only `orchestrator/chain/` imports web3 or ape, and only `orchestrator/db/`
builds queries, touches a session's query API or constructs models.

An exception is never silent: it goes into `ALLOWED` with the reason, and an entry that no
longer matches a violation fails too, so the list only shrinks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "agent")
PURE_FORBIDDEN = {"sqlalchemy", "web3", "fastapi", "starlette", "ape", "alembic"}
CHAIN_ONLY = {"web3", "ape"}
# SQLAlchemy names that build statements; sessions, engines and errors may travel.
QUERY_NAMES = {"select", "update", "delete", "insert", "func", "text", "and_", "or_", "exists",
               "case", "literal", "bindparam", "column", "table", "union", "join", "outerjoin"}
SESSION_QUERY_CALLS = {"get", "execute", "scalar", "scalars", "query", "add", "add_all",
                       "merge", "delete", "refresh"}

# (rule, file relative to ROOT): why it may stay for now.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    path: str
    line: int
    what: str


def sources() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/migrations/" in relative:
                continue
            yield relative, ast.parse(path.read_text(), filename=relative)


def imported_modules(tree: ast.Module) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names imported from it) for every import, nested ones included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, tuple(alias.name for alias in node.names)


def top(module: str) -> str:
    first = module.split(".")[0]
    return "ape" if first.startswith("ape_") else first


def session_like(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else (
        node.attr if isinstance(node, ast.Attribute) else "")
    return "session" in name.lower()


def violations() -> list[Violation]:
    found: list[Violation] = []
    for path, tree in sources():
        in_domain = path.startswith("orchestrator/domain/")
        in_chain = path.startswith("orchestrator/chain/")
        in_db = path.startswith("orchestrator/db/")
        models: set[str] = set()
        for line, module, names in imported_modules(tree):
            if in_domain and top(module) in PURE_FORBIDDEN:
                found.append(Violation("pure-domain", path, line, f"imports {module}"))
            if not in_chain and top(module) in CHAIN_ONLY:
                found.append(Violation("web3-in-chain", path, line, f"imports {module}"))
            if in_db:
                continue
            if module == "sqlalchemy" and (not names or set(names) & QUERY_NAMES):
                found.append(Violation("queries-in-db", path, line,
                                       f"imports {', '.join(names) or 'sqlalchemy'}"))
            if module == "orchestrator.db.models":
                models.update(names)
        if in_db:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr in SESSION_QUERY_CALLS
                    and session_like(func.value)):
                found.append(Violation("queries-in-db", path, node.lineno,
                                       f"calls {ast.unparse(func)}"))
            if isinstance(func, ast.Name) and func.id in models:
                found.append(Violation("queries-in-db", path, node.lineno,
                                       f"constructs the model {func.id}"))
    return found


def test_the_layering_rules_hold() -> None:
    unexplained = [v for v in violations() if (v.rule, v.path) not in ALLOWED]
    assert not unexplained, "layering rules broken:\n" + "\n".join(
        f"  {v.path}:{v.line} [{v.rule}] {v.what}" for v in unexplained)


def test_every_allowed_exception_is_still_needed() -> None:
    live = {(v.rule, v.path) for v in violations()}
    stale = sorted(set(ALLOWED) - live)
    assert not stale, f"no longer violated, drop from ALLOWED: {stale}"


@pytest.mark.parametrize(("path", "code", "rules"), [
    ("orchestrator/domain/x.py", "from sqlalchemy.orm import Session\n", ["pure-domain"]),
    ("orchestrator/domain/x.py", "import fastapi\n", ["pure-domain"]),
    ("orchestrator/domain/x.py", "from sqlalchemy import select\n",
     ["pure-domain", "queries-in-db"]),
    ("orchestrator/services/x.py", "def f():\n    from web3 import Web3\n", ["web3-in-chain"]),
    ("orchestrator/bench/x.py", "import ape_foundry\n", ["web3-in-chain"]),
    ("orchestrator/services/x.py", "from sqlalchemy import select\n", ["queries-in-db"]),
    ("orchestrator/api/x.py", "def f(session):\n    session.get(1, 2)\n", ["queries-in-db"]),
    ("orchestrator/services/x.py",
     "from orchestrator.db.models import Node\nNode(id='n')\n", ["queries-in-db"]),
    ("orchestrator/db/x.py", "from sqlalchemy import select\nsession.get(1)\n", []),
    ("orchestrator/chain/x.py", "from web3 import Web3\n", []),
])
def test_the_checker_catches_each_kind_of_breach(path: str, code: str, rules: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rule fires on a minimal breach and stays quiet where the code belongs (the
    checker itself can fail)."""
    monkeypatch.setattr("tests.test_layering.sources",
                        lambda: iter([(path, ast.parse(code))]))
    assert [v.rule for v in violations()] == rules


def import_graph() -> dict[str, set[str]]:
    """Module -> the orchestrator modules it imports (TYPE_CHECKING and nested included)."""
    modules: dict[str, ast.Module] = {}
    for path, tree in sources():
        if path.startswith("orchestrator/"):
            name = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            modules[name] = tree
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        edges: set[str] = set()
        for _, module, names in imported_modules(tree):
            if not module.startswith("orchestrator"):
                continue
            submodules = {f"{module}.{n}" for n in names} & modules.keys()
            edges |= submodules or ({module} & modules.keys())
        graph[name] = edges
    return graph


def test_no_import_cycles_among_orchestrator_modules() -> None:
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)
    assert "orchestrator.simulation.engine" in graph["orchestrator.simulation.pls_driver"]
