"""Chain fixtures shared by every test package (loaded through `pytest_plugins` in
tests/conftest.py): one anvil and one deployment per session; every test runs inside an
evm snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mesh.localgrid import Grid
from orchestrator.chain.anvil import Anvil, dev_account, revert_to, snapshot
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.deployment import Deployment
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.chain.tx import connect

FUNDS = 1_000_000 * 10**18


@pytest.fixture(scope="session")
def anvil() -> Iterator[Anvil]:
    with Anvil() as chain:
        yield chain


@pytest.fixture(scope="session")
def session_chain(anvil: Anvil) -> MeshChain:
    w3 = connect(anvil.rpc_url)
    deployment = deploy_local(
        w3,
        dev_account(0).key,
        orchestrator=dev_account(1).address,
        slasher=dev_account(2).address,
        arbiter=dev_account(3).address,
    )
    chain = MeshChain(w3, deployment)
    admin = chain.account(dev_account(0))
    for index in (4, 5, 6, 7):
        admin.mint(dev_account(index).address, FUNDS)
    return chain


@pytest.fixture
def chain(session_chain: MeshChain) -> Iterator[MeshChain]:
    """The session deployment, rolled back after each test so tests cannot see each other."""
    snapshot_id = snapshot(session_chain.w3)
    yield session_chain
    revert_to(session_chain.w3, snapshot_id)
    session_chain.resync_nonces()


@pytest.fixture
def deployment(chain: MeshChain) -> Deployment:
    return chain.deployment


def _role_fixture(index: int, doc: str) -> Any:
    def account(chain: MeshChain) -> MeshAccount:
        return chain.account(dev_account(index))

    account.__doc__ = doc
    return pytest.fixture(account)


admin = _role_fixture(0, "Deployer: DEFAULT_ADMIN_ROLE only.")
orchestrator = _role_fixture(1, "Locks collateral, settles, commits epochs, sets tiers.")
slasher = _role_fixture(2, "SLASHER_ROLE on the StakeManager.")
arbiter = _role_fixture(3, "ARBITER_ROLE on Disputes.")
customer = _role_fixture(4, "Funded user who escrows jobs.")
provider = _role_fixture(5, "Funded user who stakes and runs jobs.")
other_provider = _role_fixture(6, "A second funded provider.")
stranger = _role_fixture(7, "Funded user without any role.")


@pytest.fixture
def grid(chain: MeshChain, anvil: Anvil, tmp_path: Path) -> Iterator[Grid]:
    """A local grid (`mesh.localgrid`) on the session's chain; the test starts its service with
    the settings it is about (`grid.start(**env)`), every process is stopped after it."""
    local = Grid(chain, tmp_path / "grid", rpc_url=anvil.rpc_url)
    try:
        yield local
    finally:
        local.close()
