"""pyproject.toml's install targets against requirements.lock, offline (read from the metadata
of the packages `make setup` installed): every direct pin is the lock's, the lock is exactly
what the whole project needs (the `dev` target), and a provider's `agent` target brings none
of the server stack. A provider installs with the lock as constraints
(`pip install -c requirements.lock '.[agent]'`), so the lock is the one list of pins: there is
no second lock to drift. tests/agent/test_install.py builds that environment for real."""

from __future__ import annotations

import pytest

from tests.install_targets import (
    PROJECT,
    SERVER_STACK,
    canonical,
    closure,
    lock,
    project_requirements,
)

EXTRAS = ("agent", "service", "tools", "dev")


def test_everyDirectDependency_isPinnedAsTheLockPinsIt() -> None:
    pins = lock()
    direct = [r for r in project_requirements(EXTRAS) if canonical(r.name) != PROJECT]
    assert len(direct) > 20
    for requirement in direct:
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{requirement}: pin it as requirements.lock does"
        assert pins.get(canonical(requirement.name)) == spec.version, (
            f"{requirement}: requirements.lock pins {pins.get(canonical(requirement.name))}")


def test_theLock_isExactlyWhatTheDevTargetBrings() -> None:
    """Nothing pinned that no target needs, nothing needed that is not pinned (so the lock as
    constraints pins every package of every target)."""
    assert closure(["dev"]) == lock()


@pytest.mark.parametrize("extras", [(), ("agent",)])
def test_aProvidersInstall_bringsNoneOfTheServerStack(extras: tuple[str, ...]) -> None:
    brought = closure(extras)
    assert not set(brought) & SERVER_STACK, sorted(set(brought) & SERVER_STACK)
    assert {"eth-account", "httpx", "numpy", "scipy", "openexr", "typer"} <= set(brought)
    assert ("bpy" in brought) == ("agent" in extras)
    assert len(closure(["agent"])) < len(lock()) / 3  # 49 of 166 when this was written


def test_theServiceAndTools_bringTheirStacks() -> None:
    service, tools = closure(["service"]), closure(["tools"])
    assert {"fastapi", "sqlalchemy", "web3", "psycopg-binary"} <= set(service)
    assert "bpy" not in service and "eth-ape" not in service  # an orchestrator renders nothing
    assert set(closure(["agent"])) | set(service) | {"eth-ape", "matplotlib"} <= set(tools)
