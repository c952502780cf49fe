"""Attacks: reentrant and fee-on-transfer tokens, unauthorised callers of every role-gated function,
replayed settlements, 1-wei front-runs and job-id squatting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ape
import pytest
from eth_utils import keccak

from .conftest import (
    TOKEN,
    UNBONDING_PERIOD,
    Mesh,
    advance,
    advance_to,
    deploy_mesh,
    job_id,
    payout_release_at,
)

ROOT = b"\x33" * 32
MAX = 2**256 - 1


def _role(name: str) -> bytes:
    return b"\x00" * 32 if name == "DEFAULT_ADMIN_ROLE" else keccak(text=name)


# ---------------------------------------------------------------- reentrant token


@pytest.fixture(scope="module")
def reentrant(mesh: Mesh, project: Any, accounts: Any) -> Mesh:
    """A second deployment on a token that calls back; after `mesh` so snapshots nest in order."""
    return deploy_mesh(project, accounts, project.TestReentrantToken)


@pytest.fixture(scope="module", autouse=True)
def _deploy_alternative_meshes_first(reentrant: Mesh, fee_token_mesh: Mesh) -> None:
    """Module fixtures must exist before any function-scoped state, or ape rebases its snapshots."""


def _fund(mesh: Mesh, who: Any, amount: int) -> None:
    mesh.token.mint(who, amount, sender=who)
    for spender in (mesh.stake_manager, mesh.escrow, mesh.disputes):
        mesh.token.approve(spender, MAX, sender=who)


def test_withdraw_reentryFromTheTokenIsRefused(reentrant: Mesh, provider: Any, chain: Any) -> None:
    sm = reentrant.stake_manager
    _fund(reentrant, provider, 100 * TOKEN)
    sm.stake(100 * TOKEN, sender=provider)
    sm.requestUnbond(40 * TOKEN, sender=provider)
    sm.requestUnbond(40 * TOKEN, sender=provider)
    advance(chain, UNBONDING_PERIOD)
    reentrant.token.arm(sm, sm.withdraw.encode_input(1), sender=provider)

    with ape.reverts(sm.ReentrancyGuardReentrantCall):
        sm.withdraw(0, sender=provider)
    assert sm.stakeOf(provider).unbonding == 80 * TOKEN


def test_claim_reentryFromTheTokenIsRefused(
    reentrant: Mesh, provider: Any, customer: Any, chain: Any
) -> None:
    escrow = reentrant.escrow
    _fund(reentrant, customer, 100 * TOKEN)
    jid = job_id("reenter")
    escrow.createJob(jid, 100 * TOKEN, chain.pending_timestamp + 3600, ROOT, sender=customer)
    receipt = escrow.settle(jid, [provider], [100 * TOKEN], ROOT, sender=reentrant.orchestrator)
    advance_to(chain, payout_release_at(receipt.timestamp))
    reentrant.token.arm(escrow, escrow.claim.encode_input(), sender=provider)

    with ape.reverts(escrow.ReentrancyGuardReentrantCall):
        escrow.claim(sender=provider)
    assert escrow.balanceOf(provider).claimable == 100 * TOKEN


# ---------------------------------------------------------------- fee-on-transfer token


@pytest.fixture(scope="module")
def fee_token_mesh(mesh: Mesh, project: Any, accounts: Any) -> Mesh:
    """A second deployment on a token that burns 1% of each transfer."""
    return deploy_mesh(project, accounts, project.TestFeeOnTransferToken)


def test_stake_rejectsAFeeOnTransferToken(fee_token_mesh: Mesh, provider: Any) -> None:
    _fund(fee_token_mesh, provider, 100 * TOKEN)
    sm = fee_token_mesh.stake_manager
    with ape.reverts(sm.StakeManagerFeeOnTransferToken, expected=100 * TOKEN, received=99 * TOKEN):
        sm.stake(100 * TOKEN, sender=provider)


def test_createJob_rejectsAFeeOnTransferToken(
    fee_token_mesh: Mesh, customer: Any, chain: Any
) -> None:
    _fund(fee_token_mesh, customer, 100 * TOKEN)
    escrow = fee_token_mesh.escrow
    with ape.reverts(escrow.JobEscrowFeeOnTransferToken, expected=100 * TOKEN, received=99 * TOKEN):
        escrow.createJob(
            job_id("fee"), 100 * TOKEN, chain.pending_timestamp + 60, ROOT, sender=customer
        )


# ---------------------------------------------------------------- unauthorised callers

JID = job_id("auth")
# (contract fixture, function, args, role it needs)
GATED: list[tuple[str, str, tuple[Any, ...], str]] = [
    ("stake_manager", "lockCollateral", (JID, [], []), "ESCROW_ROLE"),
    ("stake_manager", "releaseCollateral", ([], []), "ESCROW_ROLE"),
    ("stake_manager", "setTier", ("0x" + "11" * 20, 2), "ORCHESTRATOR_ROLE"),
    ("stake_manager", "commitEpoch", (1, ROOT), "ORCHESTRATOR_ROLE"),
    ("stake_manager", "reserveCollateral", ([], [], 2**40), "ORCHESTRATOR_ROLE"),
    ("stake_manager", "slash", ("0x" + "11" * 20, 1, 3, ROOT), "SLASHER_ROLE"),
    ("stake_manager", "slashCollateral", (JID, "0x" + "11" * 20, 0, 1, 1, ROOT), "SLASHER_ROLE"),
    ("stake_manager", "freezeSlash", (1,), "DISPUTES_ROLE"),
    ("stake_manager", "resolveSlash", (1, True), "DISPUTES_ROLE"),
    ("stake_manager", "setUnbondingPeriod", (1,), "DEFAULT_ADMIN_ROLE"),
    ("stake_manager", "setSlashDisputeWindow", (1,), "DEFAULT_ADMIN_ROLE"),
    ("stake_manager", "setScoreProofWindow", (1,), "DEFAULT_ADMIN_ROLE"),
    ("stake_manager", "setScoreSlashing", (1, 1, 1), "DEFAULT_ADMIN_ROLE"),
    ("stake_manager", "setTreasury", ("0x" + "11" * 20,), "DEFAULT_ADMIN_ROLE"),
    ("stake_manager", "setJobEscrow", ("0x" + "11" * 20,), "DEFAULT_ADMIN_ROLE"),
    ("escrow", "lockCollateral", (JID, [], []), "ORCHESTRATOR_ROLE"),
    ("escrow", "commitAssignments", (ROOT,), "ORCHESTRATOR_ROLE"),
    ("escrow", "settle", (JID, [], [], ROOT), "ORCHESTRATOR_ROLE"),
    ("escrow", "settleBatch", ([],), "ORCHESTRATOR_ROLE"),
    ("escrow", "settleBatchSolo", ([],), "ORCHESTRATOR_ROLE"),
    ("escrow", "freezePayout", (JID, "0x" + "11" * 20, 1), "DISPUTES_ROLE"),
    ("escrow", "unfreezePayout", (JID, "0x" + "11" * 20, "0x" + "11" * 20, 1), "DISPUTES_ROLE"),
    ("escrow", "pause", (), "DEFAULT_ADMIN_ROLE"),
    ("escrow", "unpause", (), "DEFAULT_ADMIN_ROLE"),
    ("escrow", "setGracePeriod", (1,), "DEFAULT_ADMIN_ROLE"),
    ("escrow", "setDisputeWindow", (1,), "DEFAULT_ADMIN_ROLE"),
    ("escrow", "setCollateralSlashWindow", (1,), "DEFAULT_ADMIN_ROLE"),
    ("disputes", "rule", (1, True, 0, ROOT), "ARBITER_ROLE"),
    ("disputes", "setBond", (1,), "DEFAULT_ADMIN_ROLE"),
    ("disputes", "setRulingPeriod", (1,), "DEFAULT_ADMIN_ROLE"),
]


@pytest.mark.parametrize(
    ("contract_name", "function", "args", "role"), GATED, ids=[f"{c}.{f}" for c, f, _, _ in GATED]
)
def test_roleGatedFunction_revertsForAnUnauthorisedCaller(
    request: pytest.FixtureRequest,
    stranger: Any,
    contract_name: str,
    function: str,
    args: tuple[Any, ...],
    role: str,
) -> None:
    contract = request.getfixturevalue(contract_name)
    with ape.reverts(
        contract.AccessControlUnauthorizedAccount, account=stranger, neededRole=_role(role)
    ):
        getattr(contract, function)(*args, sender=stranger)


def test_roleGatedFunctions_listCoversEveryGatedFunction(mesh: Mesh) -> None:
    """Guards the list above: a new role-gated function must be added to it."""
    gated_names = {(c, f) for c, f, _, _ in GATED}
    expected = (
        {
            ("stake_manager", n)
            for n in (
                "lockCollateral",
                "releaseCollateral",
                "setTier",
                "commitEpoch",
                "reserveCollateral",
                "slash",
                "slashCollateral",
                "freezeSlash",
                "resolveSlash",
                "setUnbondingPeriod",
                "setSlashDisputeWindow",
                "setScoreProofWindow",
                "setScoreSlashing",
                "setTreasury",
                "setJobEscrow",
            )
        }
        | {
            ("escrow", n)
            for n in (
                "lockCollateral",
                "commitAssignments",
                "settle",
                "settleBatch",
                "settleBatchSolo",
                "freezePayout",
                "unfreezePayout",
                "pause",
                "unpause",
                "setGracePeriod",
                "setDisputeWindow",
                "setCollateralSlashWindow",
            )
        }
        | {("disputes", n) for n in ("rule", "setBond", "setRulingPeriod")}
    )
    assert gated_names == expected


# (function, args) of the StakeManager's payout books, which only the JobEscrow may change
PAYOUT_BOOKS: list[tuple[str, tuple[Any, ...]]] = [
    ("settleCollateral", ([(JID, "0x" + "11" * 20, 1, ROOT)], 1)),
    ("takeClaimable", ("0x" + "11" * 20,)),
    ("freezePending", ("0x" + "11" * 20, 1, 0)),
    ("creditPayout", ("0x" + "11" * 20, 1, 0)),
]


@pytest.mark.parametrize(("function", "args"), PAYOUT_BOOKS, ids=[f for f, _ in PAYOUT_BOOKS])
def test_payoutBooks_refuseAnEscrowRoleHolderThatIsNotTheJobEscrow(
    stake_manager: Any, admin: Any, stranger: Any, function: str, args: tuple[Any, ...]
) -> None:
    """The books decide what the escrow pays out: a granted ESCROW_ROLE must not reach them."""
    stake_manager.grantRole(stake_manager.ESCROW_ROLE(), stranger, sender=admin)

    with ape.reverts(stake_manager.StakeManagerNotJobEscrow, caller=stranger):
        getattr(stake_manager, function)(*args, sender=stranger)


# ---------------------------------------------------------------- replay and front-running


@pytest.fixture
def job_with_worker(
    create_job: Callable[..., bytes],
    staked: Callable[..., None],
    provider: Any,
    escrow: Any,
    orchestrator: Any,
) -> bytes:
    staked(provider, 1_000 * TOKEN)
    jid = create_job("race", 100 * TOKEN)
    escrow.lockCollateral(jid, [provider], [50 * TOKEN], sender=orchestrator)
    return jid


def test_replayedSettlement_inALaterBatchRevertsAndPaysNothingTwice(
    escrow: Any, orchestrator: Any, provider: Any, job_with_worker: bytes
) -> None:
    escrow.settle(job_with_worker, [provider], [60 * TOKEN], ROOT, sender=orchestrator)

    with ape.reverts(escrow.JobEscrowAlreadySettled, jobId=job_with_worker):
        escrow.settleBatch([(job_with_worker, [provider], [60 * TOKEN], ROOT)], sender=orchestrator)
    assert escrow.balanceOf(provider).pending == 60 * TOKEN


def test_oneWeiDonationBeforeSettlement_changesNothing(
    escrow: Any, token: Any, orchestrator: Any, provider: Any, stranger: Any, job_with_worker: bytes
) -> None:
    token.mint(stranger, 1, sender=stranger)
    token.transfer(escrow, 1, sender=stranger)

    escrow.settle(job_with_worker, [provider], [100 * TOKEN], ROOT, sender=orchestrator)

    assert escrow.balanceOf(provider).pending == 100 * TOKEN
    assert escrow.jobOf(job_with_worker).refund == 0


def test_oneWeiOverpayment_revertsTheWholeSettlement(
    escrow: Any, stake_manager: Any, orchestrator: Any, provider: Any, job_with_worker: bytes
) -> None:
    with ape.reverts(
        escrow.JobEscrowPayoutExceedsEscrow,
        jobId=job_with_worker,
        total=100 * TOKEN + 1,
        amount=100 * TOKEN,
    ):
        escrow.settle(job_with_worker, [provider], [100 * TOKEN + 1], ROOT, sender=orchestrator)

    assert escrow.balanceOf(provider).pending == 0
    assert stake_manager.lockedFor(job_with_worker, provider) == 50 * TOKEN


def test_jobIdSquatting_withOneWeiCostsTheVictimNothing(
    escrow: Any, token: Any, customer: Any, stranger: Any, fund: Callable[..., None], chain: Any
) -> None:
    """A front-runner can take a job id (ids are public in the mempool) but not the victim's money:
    the victim's createJob reverts, and the orchestrator only accepts a job whose on-chain customer
    signed its spec."""
    fund(stranger, 1)
    fund(customer, 100 * TOKEN)
    jid = job_id("squatted")
    escrow.createJob(jid, 1, chain.pending_timestamp + 60, ROOT, sender=stranger)

    with ape.reverts(escrow.JobEscrowJobExists, jobId=jid):
        escrow.createJob(jid, 100 * TOKEN, chain.pending_timestamp + 60, ROOT, sender=customer)
    assert token.balanceOf(customer) == 100 * TOKEN
    assert escrow.jobOf(jid).customer == stranger.address
