"""The install targets of pyproject.toml (the base and its extras) against requirements.lock:
what each one brings, read offline from the metadata of the packages this environment has
installed (`make setup` installs the whole lock, so every one of them is here at its pin)."""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "depin-mesh"
# What a provider's node never installs: the service's stack, the chain tooling, the plots.
SERVER_STACK = frozenset({
    "fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "psycopg-binary",
    "apscheduler", "prometheus-client", "web3", "aiohttp", "eth-ape", "ape-solidity",
    "ape-foundry", "py-solc-x", "eth-tester", "py-evm", "matplotlib", "pandas", "click"})
# The import names the agent-only install must not find (tests/agent/test_install.py).
SERVER_MODULES = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg",
                  "apscheduler", "prometheus_client", "web3", "ape", "solcx", "eth_tester",
                  "matplotlib", "click")

EVERY_VENV = ("pip", "setuptools", "wheel")  # what `python -m venv` itself may bring


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock() -> dict[str, str]:
    """requirements.lock: canonical name -> pinned version."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonical(name)] = version.strip()
    return pins


def project_requirements(extras: Iterable[str] = ()) -> list[Requirement]:
    """The base dependencies of pyproject.toml and those of the extras named (self-references
    such as `depin-mesh[tools]` left in)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def closure(extras: Iterable[str] = ()) -> dict[str, str]:
    """Every distribution `pip install '.[extras]'` brings (canonical name -> the version
    installed here), walking the installed packages' own requirements with their markers and
    extras evaluated for this platform."""
    found: dict[str, set[str]] = {}
    project_extras: set[str] = set()
    todo = project_requirements(extras)
    project_extras.update(extras)
    while todo:
        requirement = todo.pop()
        name = canonical(requirement.name)
        if name == PROJECT:  # an extra naming others of the same project
            new = requirement.extras - project_extras
            project_extras |= new
            todo += project_requirements(new)
            continue
        wanted = set(requirement.extras)
        if name in found and wanted <= found[name]:
            continue
        found.setdefault(name, set()).update(wanted)
        for line in metadata.distribution(name).requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": extra})
                                         for extra in ("", *found[name])):
                todo.append(sub)
    return {name: metadata.version(name) for name in found}


def modules_outside(extras: Iterable[str] = ()) -> list[str]:
    """The top-level import names of every installed distribution that the target does not
    bring (the project's own packages, the standard library and what every venv has aside):
    what an environment of only that target would fail to import."""
    inside = set(closure(extras)) | {PROJECT, *EVERY_VENV}
    ours = {path.name for path in ROOT.iterdir() if path.is_dir()}  # some wheels ship `tests`
    return sorted(module for module, dists in metadata.packages_distributions().items()
                  if module not in sys.stdlib_module_names and module not in ours
                  and module.isidentifier() and not {canonical(d) for d in dists} & inside)
