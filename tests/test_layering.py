"""The house rules, read from the code itself (AST). Three programs meet at a small shared
package: the service (`orchestrator/`) imports neither the agent nor the tools; the provider
agent (`agent/`) imports only `protocol` and the service's pure `orchestrator/domain/`, and no
module of the server stack; `protocol/` imports nothing of the project; the tools (`mesh/`)
may use all three. Nothing imports in a circle.

Inside the service: `domain/` is pure (no SQLAlchemy, web3,
FastAPI or ape), only `orchestrator/chain/` imports web3 or ape, and only `orchestrator/db/`
builds queries, touches a session's query API or constructs models. `chain/` holds web3 only
(no database, no use cases), and HTTP is the api's: nothing below it (`domain/`, `db/`,
`services/`) imports FastAPI or Starlette or chooses a status code. Routes are thin: a route
in `api/routes/` makes at most one call into `orchestrator.services` (a function, or a method of
a service the app context holds or of one of its parts, such as `ctx.pls.staking`), imports
nothing of `orchestrator.db` but its model types, and leaves transactions (commit, rollback,
begin) to the service it calls.

An exception is never silent: it goes into `ALLOWED` with the reason, and an entry that no
longer matches a violation fails too, so the list only shrinks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "agent", "protocol", "mesh")
PROJECT = frozenset(PACKAGES)
# What the agent may import of the project (its own modules aside), and what it never loads:
# a provider's machine installs neither the service's stack nor the chain's.
AGENT_MAY_IMPORT = ("protocol", "orchestrator.domain")
SERVER_STACK = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "web3",
                "ape", "apscheduler", "prometheus_client"}
PURE_FORBIDDEN = {"sqlalchemy", "web3", "fastapi", "starlette", "ape", "alembic"}
CHAIN_ONLY = {"web3", "ape"}
# SQLAlchemy names that build statements; sessions, engines and errors may travel.
QUERY_NAMES = {"select", "update", "delete", "insert", "func", "text", "and_", "or_", "exists",
               "case", "literal", "bindparam", "column", "table", "union", "join", "outerjoin"}
SESSION_QUERY_CALLS = {"get", "execute", "scalar", "scalars", "query", "add", "add_all",
                       "merge", "delete", "refresh"}
HTTP_FREE = ("orchestrator/domain/", "orchestrator/db/", "orchestrator/services/")
HTTP_MODULES = {"fastapi", "starlette"}
HTTP_STATUS_NAMES = {"status", "status_code", "http_status"}
# What chain/ may import from the orchestrator: its own modules, the pure domain, settings, and
# the child-process helpers (anvil runs as one).
CHAIN_MAY_IMPORT = ("orchestrator.chain", "orchestrator.domain", "orchestrator.config",
                    "orchestrator.processes")

ROUTES = "orchestrator/api/routes/"
ROUTE_DECORATORS = {"get", "post", "put", "patch", "delete"}
TRANSACTION_CALLS = {"commit", "rollback", "flush", "begin", "begin_nested"}
DB_TYPES_ONLY = "orchestrator.db.models"  # what routes may import of db/: types to annotate


def context_services() -> set[str]:
    """Attributes of `AppContext` (api/deps.py) whose type is a service: calls on them are
    calls into services/ (`ctx.pls.ingest.record_gpu(...)`)."""
    deps = ast.parse((ROOT / "orchestrator/api/deps.py").read_text())
    service_types = {name for _, module, names in imported_modules(deps)
                     if module.startswith("orchestrator.services") for name in names}
    return {node.target.id for cls in ast.walk(deps)
            if isinstance(cls, ast.ClassDef) and cls.name == "AppContext"
            for node in cls.body if isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name) and isinstance(node.annotation, ast.Name)
            and node.annotation.id in service_types}


def call_root(func: ast.expr) -> tuple[str, list[str]]:
    """`a.b.c(...)` -> ("a", ["b", "c"]): the name a call starts from and the attributes after."""
    attrs: list[str] = []
    while isinstance(func, ast.Attribute):
        attrs.insert(0, func.attr)
        func = func.value
    while isinstance(func, ast.Call):  # `escrow().read(...)` starts from `escrow`
        func = func.func
        while isinstance(func, ast.Attribute):
            attrs.insert(0, func.attr)
            func = func.value
    return (func.id if isinstance(func, ast.Name) else ""), attrs


def service_calls(function: ast.AST, services: set[str], held: set[str]) -> list[ast.Call]:
    """Calls into services/ inside `function`: through a name imported from it (constructing
    one of its result types, a capitalised name, is not a call into it), or a service the app
    context holds, or one of its parts (`ctx.pls.x(...)`, `ctx.pls.ingest.x(...)`)."""
    def into_services(call: ast.Call) -> bool:
        root, attrs = call_root(call.func)
        last = attrs[-1] if attrs else root
        through_import = root in services and not last[:1].isupper()
        through_context = len(attrs) >= 2 and attrs[0] in held and root.lower().endswith("ctx")
        return through_import or through_context

    return [node for node in ast.walk(function)
            if isinstance(node, ast.Call) and into_services(node)]


def is_route(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
               and d.func.attr in ROUTE_DECORATORS for d in function.decorator_list)


def thin_route_breaches(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Where a routes module composes a use case itself (see the module docstring)."""
    services: set[str] = set()
    for line, module, names in imported_modules(tree):
        if module.startswith("orchestrator.db") and module != DB_TYPES_ONLY:
            yield line, f"imports {module}: call a services function instead"
        if module.startswith("orchestrator.services"):
            services.update(names or (module.split(".")[-1],))
    held = context_services()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in TRANSACTION_CALLS):
            yield node.lineno, f"calls {ast.unparse(node.func)}: the service owns the transaction"
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        calls = service_calls(function, services, held)
        allowed = 1 if is_route(function) else 0  # a helper maps; only the route calls
        if len(calls) > allowed:
            yield function.lineno, (f"{function.name} makes {len(calls)} calls into services "
                                    f"({', '.join(ast.unparse(c.func) for c in calls)}); "
                                    f"at most {allowed}")


# (rule, file relative to ROOT): why it may stay for now.
ALLOWED: dict[tuple[str, str], str] = {
    ("thin-routes", "orchestrator/api/routes/verification.py"):
        "merged from issue-15 as it was: lease_check and check_result compose and commit in "
        "the route; move each into one Verifier call that commits",
}


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


def program_breach(program: str, module: str) -> str | None:
    """Why `program` (a top-level package) may not import `module`, or None if it may."""
    first = top(module)
    if program == "orchestrator" and first in {"agent", "mesh"}:
        return f"imports {module}: the service imports neither the agent nor the tools"
    if program == "agent" and first in PROJECT - {"agent"} and not module.startswith(
            AGENT_MAY_IMPORT):
        return f"imports {module}: the agent imports only protocol and orchestrator.domain"
    if program in {"agent", "protocol"} and first in SERVER_STACK:
        return f"imports {module}: a provider's machine does not install the server stack"
    if program == "protocol" and first in PROJECT - {"protocol"}:
        return f"imports {module}: protocol imports nothing of the project"
    return None


def top(module: str) -> str:
    first = module.split(".")[0]
    return "ape" if first.startswith("ape_") else first


def session_like(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else (
        node.attr if isinstance(node, ast.Attribute) else "")
    return "session" in name.lower()


def is_http_status(node: ast.expr | None) -> bool:
    return (isinstance(node, ast.Constant) and type(node.value) is int
            and 100 <= node.value <= 599)


def http_codes(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Status codes chosen in code: `status_code` named anywhere, or an HTTP-range integer
    given to a name like `status` (assigned, a keyword, or a parameter's default)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name | ast.Attribute | ast.arg | ast.keyword):
            name = (node.id if isinstance(node, ast.Name) else node.attr
                    if isinstance(node, ast.Attribute) else node.arg)
            if name == "status_code":
                yield node.lineno, "names status_code"
        if isinstance(node, ast.keyword) and node.arg in HTTP_STATUS_NAMES and is_http_status(
                node.value):
            yield node.lineno, f"passes {node.arg}={ast.unparse(node.value)}"
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = (target.id if isinstance(target, ast.Name) else target.attr
                        if isinstance(target, ast.Attribute) else "")
                if name in HTTP_STATUS_NAMES and is_http_status(node.value):
                    yield node.lineno, f"sets {name} = {ast.unparse(node.value)}"  # type: ignore[arg-type]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            positional = [*arguments.posonlyargs, *arguments.args]
            defaults = [None] * (len(positional) - len(arguments.defaults)) + list(
                arguments.defaults)
            for arg, default in [*zip(positional, defaults, strict=True),
                                 *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)]:
                if arg.arg in HTTP_STATUS_NAMES and is_http_status(default):
                    yield node.lineno, f"defaults {arg.arg} to {ast.unparse(default)}"  # type: ignore[arg-type]


def violations() -> list[Violation]:
    found: list[Violation] = []
    for path, tree in sources():
        program = path.split("/")[0]
        in_domain = path.startswith("orchestrator/domain/")
        in_chain = path.startswith("orchestrator/chain/")
        in_db = path.startswith("orchestrator/db/")
        http_free = path.startswith(HTTP_FREE)
        models: set[str] = set()
        for line, module, names in imported_modules(tree):
            if (breach := program_breach(program, module)) is not None:
                found.append(Violation("programs", path, line, breach))
            if in_domain and top(module) in PURE_FORBIDDEN:
                found.append(Violation("pure-domain", path, line, f"imports {module}"))
            if not in_chain and top(module) in CHAIN_ONLY:
                found.append(Violation("web3-in-chain", path, line, f"imports {module}"))
            if in_chain and (top(module) == "sqlalchemy" or (
                    module.startswith("orchestrator") and not module.startswith(CHAIN_MAY_IMPORT))):
                found.append(Violation("chain-is-web3-only", path, line, f"imports {module}"))
            if http_free and not in_domain and top(module) in HTTP_MODULES:  # domain: pure
                found.append(Violation("http-in-api", path, line, f"imports {module}"))
            if in_db:
                continue
            if module == "sqlalchemy" and (not names or set(names) & QUERY_NAMES):
                found.append(Violation("queries-in-db", path, line,
                                       f"imports {', '.join(names) or 'sqlalchemy'}"))
            if module == "orchestrator.db.models":
                models.update(names)
        if http_free:
            found.extend(Violation("http-in-api", path, line, what)
                         for line, what in http_codes(tree))
        if path.startswith(ROUTES):
            found.extend(Violation("thin-routes", path, line, what)
                         for line, what in thin_route_breaches(tree))
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
    ("mesh/bench/x.py", "import ape_foundry\n", ["web3-in-chain"]),
    ("orchestrator/services/x.py", "from agent.workloads import blender\n", ["programs"]),
    ("orchestrator/api/x.py", "def f():\n    from mesh.cli import app\n", ["programs"]),
    ("agent/x.py", "from orchestrator.db import crud\n", ["programs"]),
    ("agent/x.py", "from orchestrator.api.auth import verify_request\n", ["programs"]),
    ("agent/x.py", "from mesh.customer import submit_job\n", ["programs"]),
    ("agent/x.py", "import fastapi\n", ["programs"]),
    ("agent/x.py", "from orchestrator.domain import popw\nfrom protocol.client import W\n",
     []),
    ("protocol/x.py", "from orchestrator.domain import popw\n", ["programs"]),
    ("protocol/x.py", "from sqlalchemy.orm import Session\n", ["programs"]),
    ("protocol/x.py", "from eth_account import Account\n", []),
    ("mesh/x.py", "from orchestrator.db import crud\nfrom agent import daemon\n", []),
    ("orchestrator/services/x.py", "from sqlalchemy import select\n", ["queries-in-db"]),
    ("orchestrator/api/x.py", "def f(session):\n    session.get(1, 2)\n", ["queries-in-db"]),
    ("orchestrator/services/x.py",
     "from orchestrator.db.models import Node\nNode(id='n')\n", ["queries-in-db"]),
    ("orchestrator/db/x.py", "from sqlalchemy import select\nsession.get(1)\n", []),
    ("orchestrator/chain/x.py", "from web3 import Web3\n", []),
    ("orchestrator/chain/x.py", "from orchestrator.db import outbox\n", ["chain-is-web3-only"]),
    ("orchestrator/chain/x.py", "from sqlalchemy.orm import Session\n", ["chain-is-web3-only"]),
    ("orchestrator/chain/x.py",
     "from orchestrator.domain.chain_actions import decode\nfrom orchestrator.config import S\n",
     []),
    ("orchestrator/db/x.py", "class E(Exception):\n    status = 409\n", ["http-in-api"]),
    ("orchestrator/services/x.py", "raise E('c', 'm', status=404)\n", ["http-in-api"]),
    ("orchestrator/services/x.py", "def f(status: int = 404) -> None: ...\n", ["http-in-api"]),
    ("orchestrator/services/x.py", "def f(*, status=409): ...\n", ["http-in-api"]),
    ("orchestrator/db/x.py", "e.status_code\n", ["http-in-api"]),
    ("orchestrator/services/x.py", "from fastapi import HTTPException\n", ["http-in-api"]),
    ("orchestrator/domain/x.py", "class E(Exception):\n    status_code: int = 404\n",
     ["http-in-api", "http-in-api"]),
    ("orchestrator/services/x.py", "job.status = 'settled'\nretries = 404\n", []),
    ("orchestrator/api/x.py", "raise ApiError(404, 'x', 'y')\nr.status_code\n", []),
    ("orchestrator/api/routes/x.py", "from orchestrator.db import crud\n", ["thin-routes"]),
    ("orchestrator/api/routes/x.py", "from orchestrator.db.models import Node\n", []),
    ("orchestrator/api/routes/x.py", "def f(session):\n    session.commit()\n",
     ["thin-routes"]),
    ("orchestrator/api/routes/x.py", "def f(ctx):\n    with ctx.factory.begin() as s: ...\n",
     ["thin-routes"]),
    ("orchestrator/api/routes/x.py",
     "from orchestrator.services import work\n@router.post('/x')\n"
     "def f(s, ctx):\n    work.drain(s)\n    ctx.pls.node_registered(s)\n", ["thin-routes"]),
    ("orchestrator/api/routes/x.py",
     "from orchestrator.services import work\n@router.post('/x')\n"
     "def f(s, ctx):\n    work.drain(s)\n    ctx.pls.ingest.node_registered(s)\n",
     ["thin-routes"]),
    ("orchestrator/api/routes/x.py",
     "@router.get('/x')\ndef f(s, ctx):\n    return ctx.pls.staking.score_proof(s)\n", []),
    ("orchestrator/api/routes/x.py",
     "from orchestrator.services.nodes import drain, Shown\n@router.post('/x')\n"
     "def f(s, ctx):\n    return drain(s, chunks=[Shown(1)], now=ctx.now())\n", []),
    ("orchestrator/api/routes/x.py",
     "from orchestrator.services import work\ndef helper(s):\n    return work.view(s)\n",
     ["thin-routes"]),
    ("orchestrator/services/x.py", "from orchestrator.db import crud\nsession.commit()\n", []),
])
def test_the_checker_catches_each_kind_of_breach(path: str, code: str, rules: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rule fires on a minimal breach and stays quiet where the code belongs (the
    checker itself can fail)."""
    monkeypatch.setattr("tests.test_layering.sources",
                        lambda: iter([(path, ast.parse(code))]))
    assert [v.rule for v in violations()] == rules


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (TYPE_CHECKING and nested included)."""
    modules: dict[str, ast.Module] = {}
    for path, tree in sources():
        name = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        modules[name] = tree
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        edges: set[str] = set()
        for _, module, names in imported_modules(tree):
            if top(module) not in PROJECT:
                continue
            submodules = {f"{module}.{n}" for n in names} & modules.keys()
            edges |= submodules or ({module} & modules.keys())
        graph[name] = edges
    return graph


def test_no_import_cycles_in_the_house() -> None:
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
    assert "mesh.simulation.engine" in graph["mesh.simulation.pls_driver"]
