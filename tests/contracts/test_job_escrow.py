"""JobEscrow: escrow, collateral, exactly-once settlement with pull payments, refunds, reclaim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ape
import pytest
from eth_abi import encode
from eth_utils import keccak

from .conftest import (
    COLLATERAL_SLASH_WINDOW,
    DISPUTE_WINDOW,
    GRACE_PERIOD,
    TOKEN,
    advance,
    advance_to,
    job_id,
    payout_release_at,
)

NONE, FUNDED, SETTLED, RECLAIMED = 0, 1, 2, 3
ROOT = b"\x33" * 32
AMOUNT = 100 * TOKEN


@pytest.fixture
def workers(providers: list[Any], staked: Callable[..., None]) -> list[Any]:
    for p in providers:
        staked(p, 1_000 * TOKEN)
    return providers


@pytest.fixture
def funded_job(
    create_job: Callable[..., bytes], escrow: Any, orchestrator: Any, workers: list[Any]
) -> bytes:
    jid = create_job("funded", AMOUNT)
    escrow.lockCollateral(jid, workers[:2], [50 * TOKEN, 50 * TOKEN], sender=orchestrator)
    return jid


# ---------------------------------------------------------------- createJob


def test_createJob_pullsPaymentIntoEscrow(
    escrow: Any, token: Any, customer: Any, chain: Any, fund: Callable[..., None]
) -> None:
    fund(customer, AMOUNT)
    deadline = chain.pending_timestamp + 3600
    jid, spec = job_id("new"), keccak(text="spec")

    receipt = escrow.createJob(jid, AMOUNT, deadline, spec, sender=customer)

    job = escrow.jobOf(jid)
    assert (job.customer, job.amount, job.deadline, job.specHash, job.status, job.refund) == (
        customer.address,
        AMOUNT,
        deadline,
        spec,
        FUNDED,
        0,
    )
    assert token.balanceOf(escrow) == AMOUNT
    assert receipt.events.filter(escrow.JobCreated) == [
        escrow.JobCreated(
            jobId=jid, customer=customer, amount=AMOUNT, deadline=deadline, specHash=spec
        )
    ]


def test_createJob_rejectsADuplicateId(
    escrow: Any, customer: Any, chain: Any, create_job: Callable[..., bytes]
) -> None:
    jid = create_job("dup")
    with ape.reverts(escrow.JobEscrowJobExists, jobId=jid):
        escrow.createJob(jid, AMOUNT, chain.pending_timestamp + 60, ROOT, sender=customer)


def test_createJob_rejectsZeroAmount(escrow: Any, customer: Any, chain: Any) -> None:
    with ape.reverts(escrow.JobEscrowZeroAmount):
        escrow.createJob(job_id("zero"), 0, chain.pending_timestamp + 60, ROOT, sender=customer)


def test_createJob_rejectsAmountBeyondUint96(escrow: Any, customer: Any, chain: Any) -> None:
    with ape.reverts(escrow.JobEscrowAmountTooLarge, amount=2**96, max=2**96 - 1):
        escrow.createJob(job_id("huge"), 2**96, chain.pending_timestamp + 60, ROOT, sender=customer)


def test_createJob_rejectsADeadlineInThePast(
    escrow: Any, customer: Any, chain: Any, fund: Callable[..., None]
) -> None:
    fund(customer, AMOUNT)
    with ape.reverts(escrow.JobEscrowDeadlineInPast):
        escrow.createJob(job_id("late"), AMOUNT, chain.pending_timestamp - 1, ROOT, sender=customer)


def test_createJob_rejectedWhilePausedAndAcceptedAfterUnpause(
    escrow: Any, admin: Any, customer: Any, chain: Any, fund: Callable[..., None]
) -> None:
    fund(customer, AMOUNT)
    escrow.pause(sender=admin)
    with ape.reverts(escrow.EnforcedPause):
        escrow.createJob(
            job_id("paused"), AMOUNT, chain.pending_timestamp + 60, ROOT, sender=customer
        )

    escrow.unpause(sender=admin)
    escrow.createJob(job_id("paused"), AMOUNT, chain.pending_timestamp + 60, ROOT, sender=customer)
    assert escrow.jobOf(job_id("paused")).status == FUNDED


# ---------------------------------------------------------------- lockCollateral


def test_lockCollateral_revertsForAJobThatIsNotFunded(
    escrow: Any, orchestrator: Any, workers: list[Any]
) -> None:
    with ape.reverts(escrow.JobEscrowJobNotFunded, jobId=job_id("ghost"), status=NONE):
        escrow.lockCollateral(job_id("ghost"), workers[:1], [TOKEN], sender=orchestrator)


def test_lockCollateral_revertsWhilePaused(
    escrow: Any, admin: Any, orchestrator: Any, funded_job: bytes, workers: list[Any]
) -> None:
    escrow.pause(sender=admin)
    with ape.reverts(escrow.EnforcedPause):
        escrow.lockCollateral(funded_job, workers[:1], [TOKEN], sender=orchestrator)


# ---------------------------------------------------------------- settle


def test_settle_creditsPendingPayoutsKeepsCollateralSlashableAndOwesTheRest(
    escrow: Any, stake_manager: Any, orchestrator: Any, funded_job: bytes, workers: list[Any]
) -> None:
    receipt = escrow.settle(
        funded_job, workers[:2], [60 * TOKEN, 30 * TOKEN], ROOT, sender=orchestrator
    )

    job = escrow.jobOf(funded_job)
    assert (job.status, job.refund, job.settledAt) == (SETTLED, 10 * TOKEN, receipt.timestamp)
    first = escrow.balanceOf(workers[0])
    assert (first.claimable, first.pending, first.releaseAt) == (
        0,
        60 * TOKEN,
        payout_release_at(receipt.timestamp),
    )
    # Paid or not, collateral stays slashable until close + S (released after).
    assert [stake_manager.lockedFor(funded_job, p) for p in workers[:2]] == [50 * TOKEN] * 2
    assert stake_manager.stakeOf(workers[0]).locked == 50 * TOKEN
    assert receipt.events.filter(escrow.JobSettled) == [
        escrow.JobSettled(jobId=funded_job, refund=10 * TOKEN, resultRoot=ROOT)
    ]
    pairs = [(funded_job, workers[0].address, 60 * TOKEN, ROOT),
             (funded_job, workers[1].address, 30 * TOKEN, ROOT)]
    digest = keccak(encode(["(bytes32,address,uint256,bytes32)[]"], [pairs]))
    assert receipt.events.filter(escrow.PayoutsCommitted) == [
        escrow.PayoutsCommitted(digest=digest)
    ]
    assert escrow.payoutListCommitted(digest)


def test_settle_revertsWhenAlreadySettled(
    escrow: Any, orchestrator: Any, funded_job: bytes, workers: list[Any]
) -> None:
    escrow.settle(funded_job, workers[:1], [AMOUNT], ROOT, sender=orchestrator)

    with ape.reverts(escrow.JobEscrowAlreadySettled, jobId=funded_job):
        escrow.settle(funded_job, workers[:1], [AMOUNT], ROOT, sender=orchestrator)


def test_settle_revertsWhenPayoutsExceedTheEscrow(
    escrow: Any, orchestrator: Any, funded_job: bytes, workers: list[Any]
) -> None:
    with ape.reverts(
        escrow.JobEscrowPayoutExceedsEscrow, jobId=funded_job, total=AMOUNT + 1, amount=AMOUNT
    ):
        escrow.settle(funded_job, workers[:2], [AMOUNT, 1], ROOT, sender=orchestrator)
    assert escrow.jobOf(funded_job).status == FUNDED
    assert escrow.balanceOf(workers[0]).pending == 0


def test_settle_revertsOnLengthMismatch(
    escrow: Any, orchestrator: Any, funded_job: bytes, workers: list[Any]
) -> None:
    with ape.reverts(escrow.JobEscrowLengthMismatch, a=2, b=1):
        escrow.settle(funded_job, workers[:2], [TOKEN], ROOT, sender=orchestrator)


def test_settle_revertsForUnknownOrReclaimedJobs(
    escrow: Any, orchestrator: Any, customer: Any, funded_job: bytes, workers: list[Any], chain: Any
) -> None:
    with ape.reverts(escrow.JobEscrowJobNotFunded, jobId=job_id("ghost"), status=NONE):
        escrow.settle(job_id("ghost"), [], [], ROOT, sender=orchestrator)
    advance(chain, 3600 + GRACE_PERIOD + 1)
    escrow.reclaim(funded_job, sender=customer)
    with ape.reverts(escrow.JobEscrowJobNotFunded, jobId=funded_job, status=RECLAIMED):
        escrow.settle(funded_job, [], [], ROOT, sender=orchestrator)


def test_settle_worksWhilePaused(
    escrow: Any, admin: Any, orchestrator: Any, funded_job: bytes, workers: list[Any]
) -> None:
    escrow.pause(sender=admin)
    escrow.settle(funded_job, workers[:1], [AMOUNT], ROOT, sender=orchestrator)
    assert escrow.jobOf(funded_job).status == SETTLED


# ---------------------------------------------------------------- settleBatch


def test_settleBatch_settlesEveryJobInOneTransaction(
    escrow: Any,
    stake_manager: Any,
    orchestrator: Any,
    workers: list[Any],
    create_job: Callable[..., bytes],
) -> None:
    jobs = [create_job(f"batch-{i}", AMOUNT) for i in range(3)]
    for jid, p in zip(jobs, workers, strict=True):
        escrow.lockCollateral(jid, [p], [10 * TOKEN], sender=orchestrator)

    receipt = escrow.settleBatch(
        [(jid, [p], [AMOUNT], ROOT) for jid, p in zip(jobs, workers, strict=True)],
        sender=orchestrator,
    )

    assert [escrow.jobOf(j).status for j in jobs] == [SETTLED] * 3
    assert [stake_manager.stakeOf(p).locked for p in workers] == [10 * TOKEN] * 3
    assert [escrow.balanceOf(p).pending for p in workers] == [AMOUNT] * 3
    assert receipt.events.filter(escrow.JobsSettled) == [escrow.JobsSettled(jobIds=jobs)]


def test_settleBatch_isAllOrNothingWhenOneJobIsBad(
    escrow: Any, orchestrator: Any, workers: list[Any], create_job: Callable[..., bytes]
) -> None:
    good, bad = create_job("good", AMOUNT), create_job("bad", AMOUNT)

    with ape.reverts(escrow.JobEscrowPayoutExceedsEscrow):
        escrow.settleBatch(
            [(good, [workers[0]], [AMOUNT], ROOT), (bad, [workers[1]], [AMOUNT + 1], ROOT)],
            sender=orchestrator,
        )
    assert escrow.jobOf(good).status == FUNDED
    assert escrow.balanceOf(workers[0]).pending == 0


def test_settleBatch_revertsWhenAJobRepeatsInTheBatch(
    escrow: Any, orchestrator: Any, workers: list[Any], create_job: Callable[..., bytes]
) -> None:
    jid = create_job("twice", AMOUNT)
    with ape.reverts(escrow.JobEscrowAlreadySettled, jobId=jid):
        escrow.settleBatch([(jid, [workers[0]], [TOKEN], ROOT)] * 2, sender=orchestrator)


# ---------------------------------------------------------------- settleBatchSolo


def test_settleBatchSolo_settlesEveryJobAsSettleBatchDoes(
    escrow: Any,
    stake_manager: Any,
    orchestrator: Any,
    workers: list[Any],
    create_job: Callable[..., bytes],
) -> None:
    jobs = [create_job(f"solo-{i}", AMOUNT) for i in range(3)]
    for jid, p in zip(jobs, workers, strict=True):
        escrow.lockCollateral(jid, [p], [10 * TOKEN], sender=orchestrator)

    receipt = escrow.settleBatchSolo(
        [(jid, p, 60 * TOKEN, ROOT) for jid, p in zip(jobs, workers, strict=True)],
        sender=orchestrator,
    )

    assert [escrow.jobOf(j).status for j in jobs] == [SETTLED] * 3
    assert [escrow.jobOf(j).refund for j in jobs] == [40 * TOKEN] * 3
    assert [stake_manager.stakeOf(p).locked for p in workers] == [10 * TOKEN] * 3
    assert [stake_manager.lockedFor(j, p) for j, p in zip(jobs, workers, strict=True)] == [
        10 * TOKEN
    ] * 3
    assert [escrow.balanceOf(p).pending for p in workers] == [60 * TOKEN] * 3
    assert receipt.events.filter(escrow.JobsSettled) == [escrow.JobsSettled(jobIds=jobs)]


def test_settleBatchSolo_isAllOrNothingWhenOneJobOverpays(
    escrow: Any,
    stake_manager: Any,
    orchestrator: Any,
    workers: list[Any],
    create_job: Callable[..., bytes],
) -> None:
    good, bad = create_job("solo-good", AMOUNT), create_job("solo-bad", AMOUNT)
    escrow.lockCollateral(good, [workers[0]], [10 * TOKEN], sender=orchestrator)

    with ape.reverts(
        escrow.JobEscrowPayoutExceedsEscrow, jobId=bad, total=AMOUNT + 1, amount=AMOUNT
    ):
        escrow.settleBatchSolo(
            [(good, workers[0], AMOUNT, ROOT), (bad, workers[1], AMOUNT + 1, ROOT)],
            sender=orchestrator,
        )
    assert escrow.jobOf(good).status == FUNDED
    assert stake_manager.lockedFor(good, workers[0]) == 10 * TOKEN
    assert escrow.balanceOf(workers[0]).pending == 0


def test_settleBatchSolo_revertsWhenAJobRepeatsInTheBatch(
    escrow: Any, orchestrator: Any, workers: list[Any], create_job: Callable[..., bytes]
) -> None:
    jid = create_job("solo-twice", AMOUNT)
    with ape.reverts(escrow.JobEscrowAlreadySettled, jobId=jid):
        escrow.settleBatchSolo([(jid, workers[0], TOKEN, ROOT)] * 2, sender=orchestrator)


def test_settleBatchSolo_revertsForAJobSettledBefore(
    escrow: Any, orchestrator: Any, funded_job: bytes, workers: list[Any]
) -> None:
    escrow.settle(funded_job, workers[:1], [TOKEN], ROOT, sender=orchestrator)
    with ape.reverts(escrow.JobEscrowAlreadySettled, jobId=funded_job):
        escrow.settleBatchSolo([(funded_job, workers[0], TOKEN, ROOT)], sender=orchestrator)


def test_settle_creditsAMaturedPendingPayoutAsClaimableBeforeTheNewOne(
    escrow: Any, orchestrator: Any, workers: list[Any], create_job: Callable[..., bytes], chain: Any
) -> None:
    first = create_job("mature-1", AMOUNT)
    second = create_job("mature-2", AMOUNT, deadline_in=10 * 24 * 3600)
    receipt = escrow.settleBatchSolo([(first, workers[0], 30 * TOKEN, ROOT)], sender=orchestrator)
    advance_to(chain, payout_release_at(receipt.timestamp))

    escrow.settleBatchSolo([(second, workers[0], 20 * TOKEN, ROOT)], sender=orchestrator)

    balance = escrow.balanceOf(workers[0])
    assert (balance.claimable, balance.pending) == (30 * TOKEN, 20 * TOKEN)


# ---------------------------------------------------------------- claim and claimRefund


def test_claim_paysOnlyAfterTheDisputeWindow(
    escrow: Any, token: Any, orchestrator: Any, funded_job: bytes, workers: list[Any], chain: Any
) -> None:
    settled = escrow.settle(funded_job, workers[:1], [70 * TOKEN], ROOT, sender=orchestrator)
    advance_to(chain, payout_release_at(settled.timestamp) - 2)
    with ape.reverts(escrow.JobEscrowNothingToClaim, account=workers[0]):
        escrow.claim(sender=workers[0])

    advance_to(chain, payout_release_at(settled.timestamp))
    receipt = escrow.claim(sender=workers[0])

    assert token.balanceOf(workers[0]) == 70 * TOKEN
    assert escrow.balanceOf(workers[0]).claimable == 0
    assert receipt.events.filter(escrow.Claimed) == [
        escrow.Claimed(account=workers[0], amount=70 * TOKEN)
    ]


def test_claim_aLaterPayoutDoesNotDelayAMaturedOne(
    escrow: Any, orchestrator: Any, workers: list[Any], create_job: Callable[..., bytes], chain: Any
) -> None:
    first, second = (
        create_job("first", AMOUNT),
        create_job("second", AMOUNT, deadline_in=10 * 24 * 3600),
    )
    receipt = escrow.settle(first, workers[:1], [AMOUNT], ROOT, sender=orchestrator)
    advance_to(chain, payout_release_at(receipt.timestamp))
    escrow.settle(second, workers[:1], [40 * TOKEN], ROOT, sender=orchestrator)

    balance = escrow.balanceOf(workers[0])
    assert (balance.claimable, balance.pending) == (AMOUNT, 40 * TOKEN)


def test_claimRefund_paysTheCustomerAfterTheWindowOnce(
    escrow: Any,
    token: Any,
    orchestrator: Any,
    customer: Any,
    stranger: Any,
    funded_job: bytes,
    workers: list[Any],
    chain: Any,
) -> None:
    receipt = escrow.settle(funded_job, workers[:1], [75 * TOKEN], ROOT, sender=orchestrator)
    with ape.reverts(
        escrow.JobEscrowRefundNotClaimableYet,
        jobId=funded_job,
        claimableAt=receipt.timestamp + DISPUTE_WINDOW,
    ):
        escrow.claimRefund(funded_job, sender=stranger)
    advance(chain, DISPUTE_WINDOW)
    before = token.balanceOf(customer)

    escrow.claimRefund(funded_job, sender=stranger)

    assert token.balanceOf(customer) - before == 25 * TOKEN
    with ape.reverts(escrow.JobEscrowNoRefund, jobId=funded_job):
        escrow.claimRefund(funded_job, sender=customer)


def test_claimRefund_paysAtOnceWhenTheSettlementPaidNobody(
    escrow: Any, token: Any, orchestrator: Any, customer: Any, stranger: Any, funded_job: bytes
) -> None:
    """A failed, cancelled or unplaceable job settles paying nobody: the whole escrow comes
    back without waiting for the dispute window (nobody was paid, so no payee can dispute)."""
    escrow.settle(funded_job, [], [], ROOT, sender=orchestrator)
    before = token.balanceOf(customer)

    escrow.claimRefund(funded_job, sender=stranger)

    assert token.balanceOf(customer) - before == AMOUNT
    with ape.reverts(escrow.JobEscrowNoRefund, jobId=funded_job):
        escrow.claimRefund(funded_job, sender=customer)


def test_claimRefund_waitsForTheWindowWhenAnyoneWasPaid(
    escrow: Any, orchestrator: Any, stranger: Any, funded_job: bytes, workers: list[Any]
) -> None:
    receipt = escrow.settle(funded_job, workers[:1], [1], ROOT, sender=orchestrator)

    with ape.reverts(escrow.JobEscrowRefundNotClaimableYet, jobId=funded_job,
                     claimableAt=receipt.timestamp + DISPUTE_WINDOW):
        escrow.claimRefund(funded_job, sender=stranger)


def test_claimRefund_revertsForAJobNotSettled(
    escrow: Any, customer: Any, funded_job: bytes
) -> None:
    with ape.reverts(escrow.JobEscrowJobNotSettled, jobId=funded_job, status=FUNDED):
        escrow.claimRefund(funded_job, sender=customer)


# ---------------------------------------------------------------- reclaim and releaseCollateral


def test_reclaim_refundsTheCustomerAfterDeadlinePlusGraceEvenWhilePaused(
    escrow: Any, token: Any, admin: Any, customer: Any, funded_job: bytes, chain: Any
) -> None:
    reclaimable_at = escrow.jobOf(funded_job).deadline + GRACE_PERIOD
    with ape.reverts(
        escrow.JobEscrowNotReclaimableYet, jobId=funded_job, reclaimableAt=reclaimable_at
    ):
        escrow.reclaim(funded_job, sender=customer)
    advance(chain, 3600 + GRACE_PERIOD + 1)
    escrow.pause(sender=admin)
    before = token.balanceOf(customer)

    escrow.reclaim(funded_job, sender=customer)

    assert token.balanceOf(customer) - before == AMOUNT
    assert escrow.jobOf(funded_job).status == RECLAIMED


def test_reclaim_onlyByTheCustomerAndOnlyOnce(
    escrow: Any, customer: Any, stranger: Any, funded_job: bytes, chain: Any
) -> None:
    advance(chain, 3600 + GRACE_PERIOD + 1)
    with ape.reverts(escrow.JobEscrowNotCustomer, jobId=funded_job, customer=customer):
        escrow.reclaim(funded_job, sender=stranger)
    escrow.reclaim(funded_job, sender=customer)
    with ape.reverts(escrow.JobEscrowJobNotFunded, jobId=funded_job, status=RECLAIMED):
        escrow.reclaim(funded_job, sender=customer)


def test_releaseCollateral_freesStakeOfAReclaimedJob(
    escrow: Any,
    stake_manager: Any,
    customer: Any,
    stranger: Any,
    funded_job: bytes,
    workers: list[Any],
    chain: Any,
) -> None:
    releasable_at = escrow.jobOf(funded_job).deadline + GRACE_PERIOD + COLLATERAL_SLASH_WINDOW
    with ape.reverts(
        escrow.JobEscrowCollateralStillSlashable, jobId=funded_job, releasableAt=releasable_at
    ):
        escrow.releaseCollateral(funded_job, workers[:2], sender=stranger)
    advance(chain, 3600 + GRACE_PERIOD + 1)
    escrow.reclaim(funded_job, sender=customer)
    with ape.reverts(escrow.JobEscrowCollateralStillSlashable):
        escrow.releaseCollateral(funded_job, workers[:2], sender=stranger)
    advance_to(chain, releasable_at)

    escrow.releaseCollateral(funded_job, workers[:2], sender=stranger)

    assert [stake_manager.stakeOf(p).locked for p in workers[:2]] == [0, 0]
    assert stake_manager.lockedFor(funded_job, workers[0]) == 0


def test_releaseCollateral_freesALockTheSettlementDidNotList(
    escrow: Any,
    stake_manager: Any,
    orchestrator: Any,
    stranger: Any,
    funded_job: bytes,
    workers: list[Any],
    chain: Any,
) -> None:
    receipt = escrow.settle(funded_job, workers[:1], [AMOUNT], ROOT, sender=orchestrator)
    assert stake_manager.stakeOf(workers[1]).locked == 50 * TOKEN
    with ape.reverts(
        escrow.JobEscrowCollateralStillSlashable,
        jobId=funded_job,
        releasableAt=receipt.timestamp + COLLATERAL_SLASH_WINDOW,
    ):
        escrow.releaseCollateral(funded_job, workers[1:2], sender=stranger)
    advance_to(chain, receipt.timestamp + COLLATERAL_SLASH_WINDOW)

    receipt = escrow.releaseCollateral(funded_job, workers[1:2], sender=stranger)

    assert stake_manager.stakeOf(workers[1]).locked == 0
    assert receipt.events.filter(stake_manager.CollateralReleased) == [
        stake_manager.CollateralReleased(jobId=funded_job, provider=workers[1], amount=50 * TOKEN)
    ]


def test_releaseCollateral_revertsForAnUnknownJob(escrow: Any, stranger: Any) -> None:
    with ape.reverts(escrow.JobEscrowUnknownJob, jobId=job_id("ghost")):
        escrow.releaseCollateral(job_id("ghost"), [], sender=stranger)


# ---------------------------------------------------------------- disputes role and admin


def test_freezePayout_revertsBeyondTheJobsCapsOrAfterTheWindow(
    escrow: Any,
    admin: Any,
    customer: Any,
    orchestrator: Any,
    stranger: Any,
    funded_job: bytes,
    workers: list[Any],
    chain: Any,
) -> None:
    escrow.grantRole(escrow.DISPUTES_ROLE(), stranger, sender=admin)
    receipt = escrow.settle(funded_job, workers[:1], [60 * TOKEN], ROOT, sender=orchestrator)
    with ape.reverts(escrow.JobEscrowPayoutNotProven, jobId=funded_job, account=workers[0]):
        escrow.freezePayout(funded_job, workers[0], TOKEN, sender=stranger)
    pairs = [(funded_job, workers[0].address, 60 * TOKEN, ROOT)]
    with ape.reverts(escrow.JobEscrowUnknownPayoutList):
        escrow.provePayout(funded_job, workers[0], [(*pairs[0][:2], 61 * TOKEN, ROOT)],
                           sender=stranger)
    escrow.provePayout(funded_job, workers[0], pairs, sender=stranger)
    with ape.reverts(
        escrow.JobEscrowDisputeCapExceeded,
        jobId=funded_job,
        requested=61 * TOKEN,
        available=60 * TOKEN,
    ):
        escrow.freezePayout(funded_job, workers[0], 61 * TOKEN, sender=stranger)
    with ape.reverts(
        escrow.JobEscrowDisputeCapExceeded,
        jobId=funded_job,
        requested=41 * TOKEN,
        available=40 * TOKEN,
    ):
        escrow.freezePayout(funded_job, customer, 41 * TOKEN, sender=stranger)
    with ape.reverts(
        escrow.JobEscrowInsufficientFrozen, account=workers[0], requested=1, available=0
    ):
        escrow.unfreezePayout(funded_job, workers[0], workers[0], 1, sender=stranger)
    advance(chain, DISPUTE_WINDOW)
    with ape.reverts(
        escrow.JobEscrowDisputeWindowClosed,
        jobId=funded_job,
        closedAt=receipt.timestamp + DISPUTE_WINDOW,
    ):
        escrow.freezePayout(funded_job, workers[0], TOKEN, sender=stranger)


def test_adminSetters_updateParameters(escrow: Any, admin: Any) -> None:
    escrow.setGracePeriod(5, sender=admin)
    escrow.setDisputeWindow(6, sender=admin)
    assert (escrow.gracePeriod(), escrow.disputeWindow()) == (5, 6)
