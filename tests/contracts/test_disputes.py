"""Disputes: bonded disputes over settlements and slashes, arbiter rulings and default rulings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ape
import pytest

from .conftest import (
    DISPUTE_BOND,
    DISPUTE_WINDOW,
    RULING_PERIOD,
    SLASH_DISPUTE_WINDOW,
    TOKEN,
    advance,
    advance_to,
    payout_release_at,
)

OPEN, GRANTED, DISMISSED, DEFAULTED = 1, 2, 3, 4
SETTLEMENT, SLASH = 0, 1
SLASH_PENDING, SLASH_FROZEN, SLASH_REVERSED = 1, 2, 4
ABANDONMENT = 1
ROOT = b"\x33" * 32
EVIDENCE = b"\x44" * 32
AMOUNT = 100 * TOKEN


@pytest.fixture
def worker(provider: Any, staked: Callable[..., None], fund: Callable[..., None]) -> Any:
    staked(provider, 1_000 * TOKEN)
    fund(provider, DISPUTE_BOND)
    return provider


@pytest.fixture
def settled_job(
    create_job: Callable[..., bytes],
    escrow: Any,
    orchestrator: Any,
    worker: Any,
    customer: Any,
    fund: Callable[..., None],
) -> bytes:
    """A job paying the worker 80 (proven, so disputes may freeze it) and owing the customer 20;
    the customer can pay a bond."""
    jid = create_job("disputed", AMOUNT)
    escrow.lockCollateral(jid, [worker], [50 * TOKEN], sender=orchestrator)
    escrow.settle(jid, [worker], [80 * TOKEN], ROOT, sender=orchestrator)
    escrow.provePayout(jid, worker, [(jid, worker.address, 80 * TOKEN, ROOT)], sender=customer)
    fund(customer, DISPUTE_BOND)
    return jid


@pytest.fixture
def pending_slash(
    stake_manager: Any,
    escrow: Any,
    orchestrator: Any,
    worker: Any,
    create_job: Callable[..., bytes],
) -> int:
    jid = create_job("slashed", AMOUNT)
    escrow.lockCollateral(jid, [worker], [50 * TOKEN], sender=orchestrator)
    stake_manager.slashCollateral(
        jid, worker, 0, 50 * TOKEN, ABANDONMENT, EVIDENCE, sender=orchestrator
    )
    return 1


# ---------------------------------------------------------------- disputeSettlement


def test_disputeSettlement_byTheCustomerFreezesTheProvidersPayoutAndTakesTheBond(
    disputes: Any, escrow: Any, token: Any, customer: Any, worker: Any, settled_job: bytes
) -> None:
    receipt = disputes.disputeSettlement(settled_job, worker, 30 * TOKEN, EVIDENCE, sender=customer)

    dispute = disputes.disputeOf(1)
    assert (
        dispute.opener,
        dispute.respondent,
        dispute.kind,
        dispute.status,
        dispute.bond,
        dispute.frozenAmount,
    ) == (customer.address, worker.address, SETTLEMENT, OPEN, DISPUTE_BOND, 30 * TOKEN)
    assert dispute.rulingDeadline == receipt.timestamp + RULING_PERIOD
    balance = escrow.balanceOf(worker)
    assert (balance.pending, balance.frozen) == (50 * TOKEN, 30 * TOKEN)
    assert token.balanceOf(disputes) == DISPUTE_BOND


def test_disputeSettlement_byAProviderFreezesTheCustomersRefund(
    disputes: Any, escrow: Any, customer: Any, worker: Any, settled_job: bytes
) -> None:
    disputes.disputeSettlement(settled_job, customer, 15 * TOKEN, EVIDENCE, sender=worker)

    assert escrow.jobOf(settled_job).refund == 5 * TOKEN
    assert escrow.balanceOf(customer).frozen == 15 * TOKEN


def test_disputeSettlement_revertsAfterTheWindow(
    disputes: Any, escrow: Any, customer: Any, worker: Any, settled_job: bytes, chain: Any
) -> None:
    advance(chain, DISPUTE_WINDOW)
    with ape.reverts(escrow.JobEscrowDisputeWindowClosed):
        disputes.disputeSettlement(settled_job, worker, TOKEN, EVIDENCE, sender=customer)


def test_disputeSettlement_revertsForAJobNotSettled(
    disputes: Any, customer: Any, worker: Any, create_job: Callable[..., bytes]
) -> None:
    jid = create_job("open")
    with ape.reverts(disputes.DisputesJobNotSettled, jobId=jid):
        disputes.disputeSettlement(jid, worker, TOKEN, EVIDENCE, sender=customer)


def test_disputeSettlement_revertsOnBadRespondentOrZeroAmount(
    disputes: Any, customer: Any, worker: Any, stranger: Any, settled_job: bytes
) -> None:
    with ape.reverts(disputes.DisputesInvalidRespondent, respondent=customer):
        disputes.disputeSettlement(settled_job, customer, TOKEN, EVIDENCE, sender=customer)
    with ape.reverts(disputes.DisputesInvalidRespondent, respondent=stranger):
        disputes.disputeSettlement(settled_job, stranger, TOKEN, EVIDENCE, sender=worker)
    with ape.reverts(disputes.DisputesZeroAmount):
        disputes.disputeSettlement(settled_job, worker, 0, EVIDENCE, sender=customer)


# ---------------------------------------------------------------- rule on settlements


def test_rule_grantedForTheCustomerRefundsAndSlashesTheProvider(
    disputes: Any,
    escrow: Any,
    stake_manager: Any,
    token: Any,
    arbiter: Any,
    customer: Any,
    worker: Any,
    settled_job: bytes,
) -> None:
    disputes.disputeSettlement(settled_job, worker, 30 * TOKEN, EVIDENCE, sender=customer)
    bond_before = token.balanceOf(customer)

    with ape.reverts(
        disputes.DisputesSlashTooLarge, disputeId=1, slashAmount=30 * TOKEN + 1, max=30 * TOKEN
    ):
        disputes.rule(1, True, 30 * TOKEN + 1, EVIDENCE, sender=arbiter)
    disputes.rule(1, True, 30 * TOKEN, EVIDENCE, sender=arbiter)

    assert disputes.disputeOf(1).status == GRANTED
    assert escrow.balanceOf(customer).claimable == 30 * TOKEN
    assert escrow.balanceOf(worker).frozen == 0
    assert stake_manager.stakeOf(worker).bonded == 970 * TOKEN
    assert stake_manager.slashOf(1).amount == 30 * TOKEN
    assert token.balanceOf(customer) - bond_before == DISPUTE_BOND


def test_rule_dismissedReturnsThePayoutToTheRestOfItsWindowAndTheBondToTheRespondent(
    disputes: Any,
    escrow: Any,
    token: Any,
    arbiter: Any,
    customer: Any,
    worker: Any,
    settled_job: bytes,
    chain: Any,
) -> None:
    disputes.disputeSettlement(settled_job, worker, 30 * TOKEN, EVIDENCE, sender=customer)
    before = token.balanceOf(worker)

    disputes.rule(1, False, 0, EVIDENCE, sender=arbiter)

    assert disputes.disputeOf(1).status == DISMISSED
    balance = escrow.balanceOf(worker)
    assert (balance.claimable, balance.pending, balance.frozen) == (0, 80 * TOKEN, 0)
    assert token.balanceOf(worker) - before == DISPUTE_BOND
    advance_to(chain, payout_release_at(escrow.jobOf(settled_job).settledAt))
    assert escrow.balanceOf(worker).claimable == 80 * TOKEN


def test_rule_cannotSlashOnADismissalOrAProviderDispute(
    disputes: Any, arbiter: Any, customer: Any, worker: Any, settled_job: bytes
) -> None:
    disputes.disputeSettlement(settled_job, worker, TOKEN, EVIDENCE, sender=customer)
    disputes.disputeSettlement(settled_job, customer, TOKEN, EVIDENCE, sender=worker)
    with ape.reverts(disputes.DisputesSlashNotAllowed, disputeId=1):
        disputes.rule(1, False, TOKEN, EVIDENCE, sender=arbiter)
    with ape.reverts(disputes.DisputesSlashNotAllowed, disputeId=2):
        disputes.rule(2, True, TOKEN, EVIDENCE, sender=arbiter)


def test_rule_revertsAfterTheRulingDeadlineOrWhenNotOpen(
    disputes: Any, arbiter: Any, customer: Any, worker: Any, settled_job: bytes, chain: Any
) -> None:
    receipt = disputes.disputeSettlement(settled_job, worker, TOKEN, EVIDENCE, sender=customer)
    with ape.reverts(disputes.DisputesNotOpen, disputeId=9):
        disputes.rule(9, True, 0, EVIDENCE, sender=arbiter)
    advance(chain, RULING_PERIOD + 1)
    with ape.reverts(
        disputes.DisputesRulingDeadlinePassed,
        disputeId=1,
        rulingDeadline=receipt.timestamp + RULING_PERIOD,
    ):
        disputes.rule(1, True, 0, EVIDENCE, sender=arbiter)


# ---------------------------------------------------------------- slashes


def test_disputeSlash_freezesTheSlashSoItCannotBeReleased(
    disputes: Any, stake_manager: Any, worker: Any, stranger: Any, pending_slash: int, chain: Any
) -> None:
    disputes.disputeSlash(pending_slash, EVIDENCE, sender=worker)
    advance(chain, SLASH_DISPUTE_WINDOW)

    assert stake_manager.slashOf(pending_slash).status == SLASH_FROZEN
    with ape.reverts(
        stake_manager.StakeManagerSlashNotInStatus, slashId=pending_slash, status=SLASH_FROZEN
    ):
        stake_manager.releaseSlash(pending_slash, sender=stranger)


def test_disputeSlash_onlyByTheSlashedProviderInsideTheWindow(
    disputes: Any, stake_manager: Any, worker: Any, customer: Any, pending_slash: int, chain: Any
) -> None:
    with ape.reverts(disputes.DisputesNotAParty, caller=customer):
        disputes.disputeSlash(pending_slash, EVIDENCE, sender=customer)
    advance(chain, SLASH_DISPUTE_WINDOW)
    with ape.reverts(stake_manager.StakeManagerSlashWindowClosed):
        disputes.disputeSlash(pending_slash, EVIDENCE, sender=worker)


def test_rule_grantedReversesTheSlashIntoBondedStake(
    disputes: Any, stake_manager: Any, token: Any, arbiter: Any, worker: Any, pending_slash: int
) -> None:
    disputes.disputeSlash(pending_slash, EVIDENCE, sender=worker)
    before = token.balanceOf(worker)

    disputes.rule(1, True, 0, EVIDENCE, sender=arbiter)

    assert stake_manager.slashOf(pending_slash).status == SLASH_REVERSED
    assert stake_manager.stakeOf(worker).bonded == 1_000 * TOKEN
    assert token.balanceOf(worker) - before == DISPUTE_BOND


def test_rule_dismissedLetsTheSlashBeReleasedAndPaysTheBondToTheBeneficiary(
    disputes: Any,
    stake_manager: Any,
    token: Any,
    arbiter: Any,
    worker: Any,
    customer: Any,
    stranger: Any,
    pending_slash: int,
    chain: Any,
) -> None:
    disputes.disputeSlash(pending_slash, EVIDENCE, sender=worker)
    before = token.balanceOf(customer)
    disputes.rule(1, False, 0, EVIDENCE, sender=arbiter)
    advance(chain, SLASH_DISPUTE_WINDOW)

    stake_manager.releaseSlash(pending_slash, sender=stranger)

    assert token.balanceOf(customer) - before == DISPUTE_BOND + 50 * TOKEN


# ---------------------------------------------------------------- default ruling


def test_applyDefaultRuling_afterTheDeadlineRestoresTheStatusQuoAndPaysTheBondToTheRespondent(
    disputes: Any,
    escrow: Any,
    token: Any,
    customer: Any,
    worker: Any,
    stranger: Any,
    settled_job: bytes,
    chain: Any,
) -> None:
    disputes.disputeSettlement(settled_job, worker, 30 * TOKEN, EVIDENCE, sender=customer)
    with ape.reverts(disputes.DisputesRulingDeadlineNotReached):
        disputes.applyDefaultRuling(1, sender=stranger)
    advance(chain, RULING_PERIOD + 1)
    before = (token.balanceOf(customer), token.balanceOf(worker))

    disputes.applyDefaultRuling(1, sender=stranger)

    assert disputes.disputeOf(1).status == DEFAULTED
    assert escrow.balanceOf(worker).frozen == 0
    assert escrow.balanceOf(worker).claimable == 80 * TOKEN  # past the job's window by now
    assert (token.balanceOf(customer), token.balanceOf(worker)) == (
        before[0],
        before[1] + DISPUTE_BOND,
    )
    with ape.reverts(disputes.DisputesNotOpen, disputeId=1):
        disputes.applyDefaultRuling(1, sender=stranger)


def test_applyDefaultRuling_onASlashLetsItStand(
    disputes: Any, stake_manager: Any, worker: Any, stranger: Any, pending_slash: int, chain: Any
) -> None:
    disputes.disputeSlash(pending_slash, EVIDENCE, sender=worker)
    advance(chain, RULING_PERIOD + 1)

    disputes.applyDefaultRuling(1, sender=stranger)

    assert stake_manager.slashOf(pending_slash).status == SLASH_PENDING


def test_adminSetters_updateBondAndRulingPeriod(disputes: Any, admin: Any) -> None:
    disputes.setBond(5, sender=admin)
    disputes.setRulingPeriod(7, sender=admin)
    assert (disputes.bond(), disputes.rulingPeriod(), disputes.disputeCount()) == (5, 7, 0)


def test_disputeSettlement_withoutAllowanceForTheBondReverts(
    disputes: Any, token: Any, customer: Any, worker: Any, settled_job: bytes
) -> None:
    token.approve(disputes, 0, sender=customer)
    with ape.reverts(token.ERC20InsufficientAllowance):
        disputes.disputeSettlement(settled_job, worker, TOKEN, EVIDENCE, sender=customer)
    assert disputes.disputeCount() == 0
