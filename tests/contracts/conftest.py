"""Deploy fixtures for the contract suite: one DePIN Mesh deployment per session, reverted by ape's
isolation after every test, plus small helpers that keep the tests about behaviour, not set-up."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ape
import pytest
from eth_utils import keccak

# Several suites (and engineers) share this machine: without this, ape's foundry provider starts
# (or silently reuses!) an anvil on port 8545. "auto" picks a free random port. Read by ape when it
# connects, which is after collection, so setting it at conftest import is early enough.
os.environ.setdefault("APE_FOUNDRY_HOST", "auto")

TOKEN = 10**18
UNBONDING_PERIOD = 7 * 24 * 3600
SLASH_DISPUTE_WINDOW = 2 * 24 * 3600
GRACE_PERIOD = 24 * 3600
DISPUTE_WINDOW = 24 * 3600
PAYOUT_PERIOD = 24 * 3600  # JobEscrow.PAYOUT_PERIOD: payout release times are whole multiples
COLLATERAL_SLASH_WINDOW = 24 * 3600  # JobEscrow's default
DISPUTE_BOND = 10 * TOKEN
RULING_PERIOD = 3 * 24 * 3600


@dataclass(frozen=True)
class Mesh:
    """One deployment with its role holders; the same wiring `contracts/README.md` documents."""

    token: Any
    stake_manager: Any
    escrow: Any
    disputes: Any
    admin: Any
    orchestrator: Any
    arbiter: Any
    treasury: Any


def deploy_mesh(project: Any, accounts: Any, token_type: Any = None) -> Mesh:
    """Deploys token, StakeManager, JobEscrow, Disputes in the documented order; grants roles."""
    admin, orchestrator, arbiter, treasury = accounts[0], accounts[1], accounts[2], accounts[3]
    token = admin.deploy(token_type or project.TestToken)
    stake_manager = admin.deploy(
        project.StakeManager, token, admin, treasury, UNBONDING_PERIOD, SLASH_DISPUTE_WINDOW
    )
    escrow = admin.deploy(
        project.JobEscrow, token, stake_manager, admin, GRACE_PERIOD, DISPUTE_WINDOW
    )
    stake_manager.setJobEscrow(escrow, sender=admin)
    disputes = admin.deploy(
        project.Disputes, token, stake_manager, escrow, admin, DISPUTE_BOND, RULING_PERIOD
    )
    stake_manager.grantRole(stake_manager.DISPUTES_ROLE(), disputes, sender=admin)
    stake_manager.grantRole(stake_manager.SLASHER_ROLE(), disputes, sender=admin)
    escrow.grantRole(escrow.DISPUTES_ROLE(), disputes, sender=admin)
    stake_manager.grantRole(stake_manager.ORCHESTRATOR_ROLE(), orchestrator, sender=admin)
    stake_manager.grantRole(stake_manager.SLASHER_ROLE(), orchestrator, sender=admin)
    escrow.grantRole(escrow.ORCHESTRATOR_ROLE(), orchestrator, sender=admin)
    disputes.grantRole(disputes.ARBITER_ROLE(), arbiter, sender=admin)
    return Mesh(token, stake_manager, escrow, disputes, admin, orchestrator, arbiter, treasury)


def job_id(label: str) -> bytes:
    """A readable, unique 32-byte job id."""
    return keccak(text=f"job:{label}")


@pytest.fixture(scope="session")
def chain() -> Any:
    """ape's ChainManager. The root conftest imports the SDK's `chain` fixture (a MeshChain on its
    own anvil), which would otherwise shadow ape's fixture of that name in this directory."""
    return ape.chain


@pytest.fixture(scope="session")
def mesh(project: Any, accounts: Any) -> Mesh:
    return deploy_mesh(project, accounts)


@pytest.fixture(scope="session")
def token(mesh: Mesh) -> Any:
    return mesh.token


@pytest.fixture(scope="session")
def stake_manager(mesh: Mesh) -> Any:
    return mesh.stake_manager


@pytest.fixture(scope="session")
def escrow(mesh: Mesh) -> Any:
    return mesh.escrow


@pytest.fixture(scope="session")
def disputes(mesh: Mesh) -> Any:
    return mesh.disputes


@pytest.fixture(scope="session")
def admin(mesh: Mesh) -> Any:
    return mesh.admin


@pytest.fixture(scope="session")
def orchestrator(mesh: Mesh) -> Any:
    return mesh.orchestrator


@pytest.fixture(scope="session")
def arbiter(mesh: Mesh) -> Any:
    return mesh.arbiter


@pytest.fixture(scope="session")
def treasury(mesh: Mesh) -> Any:
    return mesh.treasury


@pytest.fixture(scope="session")
def customer(accounts: Any) -> Any:
    return accounts[4]


@pytest.fixture(scope="session")
def providers(accounts: Any) -> list[Any]:
    return [accounts[5], accounts[6], accounts[7]]


@pytest.fixture(scope="session")
def provider(providers: list[Any]) -> Any:
    return providers[0]


@pytest.fixture(scope="session")
def stranger(accounts: Any) -> Any:
    return accounts[8]


@pytest.fixture(scope="session")
def finder(accounts: Any) -> Any:
    return accounts[9]


@pytest.fixture(scope="session")
def fund(token: Any, stake_manager: Any, escrow: Any, disputes: Any) -> Callable[[Any, int], None]:
    """Mints `amount` to an account and approves all three contracts to pull it."""

    def _fund(account: Any, amount: int) -> None:
        token.mint(account, amount, sender=account)
        for spender in (stake_manager, escrow, disputes):
            token.approve(spender, 2**256 - 1, sender=account)

    return _fund


@pytest.fixture(scope="session")
def staked(fund: Callable[[Any, int], None], stake_manager: Any) -> Callable[[Any, int], None]:
    """Funds and stakes `amount` for a provider."""

    def _staked(account: Any, amount: int) -> None:
        fund(account, amount)
        stake_manager.stake(amount, sender=account)

    return _staked


@pytest.fixture(scope="session")
def create_job(
    fund: Callable[[Any, int], None], escrow: Any, chain: Any, customer: Any
) -> Callable[..., bytes]:
    """Funds the customer and escrows a job due in an hour; returns its id."""

    def _create(
        label: str, amount: int = 100 * TOKEN, by: Any = None, deadline_in: int = 3600
    ) -> bytes:
        payer = by or customer
        fund(payer, amount)
        jid = job_id(label)
        escrow.createJob(
            jid, amount, chain.pending_timestamp + deadline_in, keccak(text=label), sender=payer
        )
        return jid

    return _create


def advance(chain: Any, seconds: int) -> None:
    """Moves the chain clock forward and mines, so views see the new time."""
    chain.pending_timestamp += seconds
    chain.mine()


def payout_release_at(settled_at: int) -> int:
    """When a payout settled at `settled_at` is claimable: settledAt + window, rounded up to a
    whole payout period (the rule in contracts/README.md)."""
    return -(-(settled_at + DISPUTE_WINDOW) // PAYOUT_PERIOD) * PAYOUT_PERIOD


def advance_to(chain: Any, timestamp: int) -> None:
    """Moves the chain clock to `timestamp` (if it is ahead) and mines."""
    chain.pending_timestamp = max(chain.pending_timestamp, timestamp)
    chain.mine()


@pytest.fixture(scope="session", autouse=True)
def _session_fixtures_first(
    mesh: Mesh,
    chain: Any,
    providers: list[Any],
    provider: Any,
    customer: Any,
    stranger: Any,
    finder: Any,
    token: Any,
    stake_manager: Any,
    escrow: Any,
    disputes: Any,
    admin: Any,
    orchestrator: Any,
    arbiter: Any,
    treasury: Any,
    fund: Any,
    staked: Any,
    create_job: Any,
) -> None:
    """Sets every session fixture up before any test state exists, so ape's per-scope snapshots
    nest in order instead of being rebased (InvalidIsolationWarning)."""
