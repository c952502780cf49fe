"""Standing reservations and committed assignments: the orchestrator's cheap collateral path.

Each test states a rule of who may take what, and when stake may leave: reserved stake cannot
be unbonded while the reservation is live, a live reservation never shrinks or shortens (a
request raises it to at least what it asks, in any order), it lapses by itself, and it is
slashable only for a proven assignment whose job's collateral slash window is open, at most
that assignment's collateral, to the job's customer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ape
import pytest

from orchestrator.domain.merkle import MerkleTree, assignment_leaf

from .conftest import COLLATERAL_SLASH_WINDOW, GRACE_PERIOD, TOKEN, advance

STAKE = 1_000 * TOKEN
DAY = 24 * 3600
MAX_PERIOD = 365 * DAY
ABANDONMENT, OTHER = 1, 3
EVIDENCE = b"\x42" * 32


@pytest.fixture
def bonded(staked: Callable[..., None], provider: Any) -> Any:
    staked(provider, STAKE)
    return provider


def _reserve(stake_manager: Any, orchestrator: Any, provider: Any, amount: int, until: int) -> Any:
    return stake_manager.reserveCollateral([provider], [amount], until, sender=orchestrator)


PLACEMENT = 1  # the placement id of each (job, provider) these tests assign once


def _assign(escrow: Any, orchestrator: Any, entries: list[tuple[bytes, Any, int]]) -> MerkleTree:
    """Commits one assignment root over `entries` (job, provider, collateral), each as placement
    PLACEMENT; returns the tree."""
    tree = MerkleTree.build([assignment_leaf(j, p.address, PLACEMENT, c) for j, p, c in entries])
    escrow.commitAssignments(tree.root, sender=orchestrator)
    return tree


def _slash(stake_manager: Any, orchestrator: Any, jid: bytes, who: Any, amount: int) -> Any:
    return stake_manager.slashCollateral(jid, who, PLACEMENT, amount, ABANDONMENT, EVIDENCE,
                                         sender=orchestrator)


def _prove(escrow: Any, tree: MerkleTree, jid: bytes, who: Any, collateral: int) -> Any:
    proof = tree.proof(assignment_leaf(jid, who.address, PLACEMENT, collateral))
    return escrow.proveAssignment(jid, who, PLACEMENT, collateral, proof, sender=who)


# ---------------------------------------------------------------- what may leave when


def test_reserve_locksStakeUntilItLapsesAndThenFreesItWithoutATransaction(
    stake_manager: Any, orchestrator: Any, bonded: Any, chain: Any
) -> None:
    until = chain.pending_timestamp + 10 * DAY

    receipt = _reserve(stake_manager, orchestrator, bonded, 600 * TOKEN, until)

    assert receipt.events.filter(stake_manager.CollateralReserved) == [
        stake_manager.CollateralReserved(provider=bonded, amount=600 * TOKEN, until=until)
    ]
    assert stake_manager.stakeOf(bonded).locked == 600 * TOKEN
    with ape.reverts(
        stake_manager.StakeManagerInsufficientFreeStake,
        provider=bonded, requested=401 * TOKEN, free=400 * TOKEN,
    ):
        stake_manager.requestUnbond(401 * TOKEN, sender=bonded)
    advance(chain, 10 * DAY)
    assert stake_manager.stakeOf(bonded).locked == 0
    stake_manager.requestUnbond(STAKE, sender=bonded)  # all of it may leave now


def test_reservationTermsOf_readsWhatTheProviderLastSetAndNoneBefore(
    stake_manager: Any, bonded: Any
) -> None:
    assert stake_manager.reservationTermsOf(bonded) == (False, 0, 0)

    stake_manager.setReservationTerms(300 * TOKEN, 2 * DAY, sender=bonded)
    assert stake_manager.reservationTermsOf(bonded) == (True, 300 * TOKEN, 2 * DAY)
    stake_manager.setReservationTerms(0, 0, sender=bonded)  # lends nothing more: still set
    assert stake_manager.reservationTermsOf(bonded) == (True, 0, 0)


def test_reserve_liveReservationMayGrowAndLastLongerButNeverShrinkOrShorten(
    stake_manager: Any, orchestrator: Any, bonded: Any, chain: Any
) -> None:
    until = chain.pending_timestamp + 10 * DAY
    _reserve(stake_manager, orchestrator, bonded, 300 * TOKEN, until)

    lower = _reserve(stake_manager, orchestrator, bonded, 299 * TOKEN, until + DAY)
    shorter = _reserve(stake_manager, orchestrator, bonded, 400 * TOKEN, until - 1)

    # Each request is granted at least what it asked, and nothing live was given back.
    assert stake_manager.reservationOf(bonded) == (400 * TOKEN, until + DAY)
    assert lower.events.filter(stake_manager.CollateralReserved) == [
        stake_manager.CollateralReserved(provider=bonded, amount=300 * TOKEN, until=until + DAY)]
    assert shorter.events.filter(stake_manager.CollateralReserved) == [
        stake_manager.CollateralReserved(provider=bonded, amount=400 * TOKEN, until=until + DAY)]
    with ape.reverts(
        stake_manager.StakeManagerInsufficientFreeStake,
        provider=bonded, requested=601 * TOKEN, free=600 * TOKEN,
    ):
        stake_manager.requestUnbond(601 * TOKEN, sender=bonded)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_reserve_requestsFromReplicasEndAtTheLargestAmountAndLatestLapseInAnyOrder(
    stake_manager: Any, orchestrator: Any, bonded: Any, chain: Any, order: tuple[int, ...]
) -> None:
    until = chain.pending_timestamp + 10 * DAY
    requests = [(200 * TOKEN, until + 2 * DAY), (500 * TOKEN, until), (350 * TOKEN, until + DAY)]

    for i in order:
        _reserve(stake_manager, orchestrator, bonded, *requests[i])

    assert stake_manager.reservationOf(bonded) == (500 * TOKEN, until + 2 * DAY)


def test_reserve_aLapsedReservationMayBeSetLower(
    stake_manager: Any, orchestrator: Any, bonded: Any, chain: Any
) -> None:
    _reserve(stake_manager, orchestrator, bonded, 300 * TOKEN, chain.pending_timestamp + DAY)
    advance(chain, DAY)
    until = chain.pending_timestamp + DAY

    _reserve(stake_manager, orchestrator, bonded, 100 * TOKEN, until)

    assert stake_manager.reservationOf(bonded) == (100 * TOKEN, until)


def test_reserve_coversOnlyStakeNotLockedForJobsAndJobLocksOnlyStakeNotReserved(
    stake_manager: Any, escrow: Any, orchestrator: Any, bonded: Any, chain: Any,
    create_job: Callable[..., bytes],
) -> None:
    jid = create_job("pinned")
    escrow.lockCollateral(jid, [bonded], [400 * TOKEN], sender=orchestrator)
    until = chain.pending_timestamp + DAY

    with ape.reverts(
        stake_manager.StakeManagerInsufficientFreeStake,
        provider=bonded, requested=601 * TOKEN, free=600 * TOKEN,
    ):
        _reserve(stake_manager, orchestrator, bonded, 601 * TOKEN, until)
    _reserve(stake_manager, orchestrator, bonded, 600 * TOKEN, until)
    with ape.reverts(stake_manager.StakeManagerInsufficientFreeStake, free=0):
        escrow.lockCollateral(create_job("more"), [bonded], [1], sender=orchestrator)
    assert stake_manager.stakeOf(bonded).locked == STAKE


def test_reserve_refusesAPastOrTooDistantLapseAndMismatchedLists(
    stake_manager: Any, orchestrator: Any, bonded: Any, chain: Any
) -> None:
    now = chain.pending_timestamp
    with ape.reverts(stake_manager.StakeManagerParameterOutOfRange, value=now):
        _reserve(stake_manager, orchestrator, bonded, TOKEN, now)
    too_far = now + MAX_PERIOD + 3600  # the block may be a few seconds past `now`
    with ape.reverts(stake_manager.StakeManagerParameterOutOfRange, value=too_far):
        _reserve(stake_manager, orchestrator, bonded, TOKEN, too_far)
    with ape.reverts(stake_manager.StakeManagerLengthMismatch, a=1, b=0):
        stake_manager.reserveCollateral([bonded], [], now + DAY, sender=orchestrator)


def test_slash_ofFreeStakeNeverTakesReservedStake(
    stake_manager: Any, orchestrator: Any, bonded: Any, chain: Any
) -> None:
    _reserve(stake_manager, orchestrator, bonded, 700 * TOKEN, chain.pending_timestamp + DAY)

    stake_manager.slash(bonded, STAKE, OTHER, EVIDENCE, sender=orchestrator)

    info = stake_manager.stakeOf(bonded)
    assert (info.bonded, info.locked) == (700 * TOKEN, 700 * TOKEN)


# ---------------------------------------------------------------- assignments


def test_commitAssignments_refusesZeroAndARepeatedRoot(escrow: Any, orchestrator: Any) -> None:
    root = b"\x11" * 32
    receipt = escrow.commitAssignments(root, sender=orchestrator)
    assert receipt.events.filter(escrow.AssignmentsCommitted) == [
        escrow.AssignmentsCommitted(root=root)
    ]
    assert escrow.assignmentsCommittedAt(root) == receipt.timestamp
    with ape.reverts(escrow.JobEscrowAssignmentsAlreadyCommitted, root=root):
        escrow.commitAssignments(root, sender=orchestrator)
    with ape.reverts(escrow.JobEscrowZeroAssignmentRoot):
        escrow.commitAssignments(b"\x00" * 32, sender=orchestrator)


def test_commitAssignments_refusedWhilePaused(escrow: Any, orchestrator: Any, admin: Any) -> None:
    escrow.pause(sender=admin)
    with ape.reverts(escrow.EnforcedPause):
        escrow.commitAssignments(b"\x11" * 32, sender=orchestrator)


def test_proveAssignment_makesTheProviderABackerOnceAndOnlyWithAValidProof(
    escrow: Any, orchestrator: Any, providers: list[Any], create_job: Callable[..., bytes]
) -> None:
    jid = create_job("assigned")
    first, second, outsider = providers
    tree = _assign(escrow, orchestrator, [(jid, first, 5 * TOKEN), (jid, second, 7 * TOKEN)])

    proof = tree.proof(assignment_leaf(jid, first.address, PLACEMENT, 5 * TOKEN))
    with ape.reverts(
        escrow.JobEscrowInvalidAssignmentProof, jobId=jid, provider=outsider, collateral=5 * TOKEN
    ):
        escrow.proveAssignment(jid, outsider, PLACEMENT, 5 * TOKEN, proof, sender=outsider)
    with ape.reverts(escrow.JobEscrowInvalidAssignmentProof, collateral=50 * TOKEN):
        # a provider cannot inflate its own collateral (or shrink it)
        escrow.proveAssignment(jid, first, PLACEMENT, 50 * TOKEN, proof, sender=first)
    with ape.reverts(escrow.JobEscrowInvalidAssignmentProof, placement=2):
        escrow.proveAssignment(jid, first, 2, 5 * TOKEN, proof, sender=first)  # nor move it
    with ape.reverts(escrow.JobEscrowZeroPlacement, jobId=jid, provider=first):
        escrow.proveAssignment(jid, first, 0, 5 * TOKEN, proof, sender=first)  # the lock's id
    receipt = _prove(escrow, tree, jid, first, 5 * TOKEN)

    assert receipt.events.filter(escrow.AssignmentProven) == [
        escrow.AssignmentProven(jobId=jid, provider=first, placement=PLACEMENT,
                                collateral=5 * TOKEN)
    ]
    assert not escrow.isBacker(jid, first)  # a proof alone (the orchestrator's leaf) makes no party
    assert escrow.assignmentOf(jid, first, PLACEMENT)[:2] == (True, 5 * TOKEN)
    assert escrow.assignmentOf(jid, first, 2) == (False, 0, 0)
    assert not _prove(escrow, tree, jid, first, 5 * TOKEN).events.filter(escrow.AssignmentProven)


# ---------------------------------------------------------------- who may take what


@pytest.fixture
def assigned(
    stake_manager: Any, escrow: Any, orchestrator: Any, bonded: Any, chain: Any,
    create_job: Callable[..., bytes],
) -> tuple[bytes, MerkleTree]:
    """A job assigned to `bonded` with 50 collateral of a 200 reservation outliving its window."""
    _reserve(stake_manager, orchestrator, bonded, 200 * TOKEN, chain.pending_timestamp + 30 * DAY)
    jid = create_job("abandoned")
    tree = _assign(escrow, orchestrator, [(jid, bonded, 50 * TOKEN)])
    return jid, tree


def test_slashCollateral_ofAnUnprovenAssignmentTakesNothing(
    stake_manager: Any, orchestrator: Any, bonded: Any, assigned: tuple[bytes, MerkleTree]
) -> None:
    jid, _ = assigned
    with ape.reverts(stake_manager.StakeManagerNothingToSlash, provider=bonded):
        _slash(stake_manager, orchestrator, jid, bonded, TOKEN)


def test_slashCollateral_takesAProvenAssignmentFromTheReservationForTheCustomerUpToItsCollateral(
    stake_manager: Any, escrow: Any, orchestrator: Any, customer: Any, bonded: Any,
    assigned: tuple[bytes, MerkleTree],
) -> None:
    jid, tree = assigned
    _prove(escrow, tree, jid, bonded, 50 * TOKEN)

    first = _slash(stake_manager, orchestrator, jid, bonded, 30 * TOKEN)
    _slash(stake_manager, orchestrator, jid, bonded, 30 * TOKEN)

    # the event names the placement (0 would be the job lock), for the index and the evidence
    (slashed,) = first.events.filter(stake_manager.Slashed)
    assert (slashed.jobId, slashed.placement) == (jid, PLACEMENT)
    assert [stake_manager.slashOf(i).amount for i in (1, 2)] == [30 * TOKEN, 20 * TOKEN]
    assert stake_manager.slashOf(1).beneficiary == customer.address
    assert stake_manager.assignmentSlashed(jid, bonded, PLACEMENT) == 50 * TOKEN
    assert stake_manager.reservationOf(bonded)[0] == 150 * TOKEN
    info = stake_manager.stakeOf(bonded)
    assert (info.bonded, info.locked) == (STAKE - 50 * TOKEN, 150 * TOKEN)
    with ape.reverts(stake_manager.StakeManagerNothingToSlash, provider=bonded):
        _slash(stake_manager, orchestrator, jid, bonded, 1)
    _prove(escrow, tree, jid, bonded, 50 * TOKEN)  # proving again does not refill it
    with ape.reverts(stake_manager.StakeManagerNothingToSlash, provider=bonded):
        _slash(stake_manager, orchestrator, jid, bonded, 1)


def test_slashCollateral_ofAnAssignmentClosesWithTheJobsCollateralSlashWindow(
    stake_manager: Any, escrow: Any, orchestrator: Any, bonded: Any, chain: Any,
    assigned: tuple[bytes, MerkleTree],
) -> None:
    jid, tree = assigned
    _prove(escrow, tree, jid, bonded, 50 * TOKEN)
    closed_at = escrow.collateralReleasableAt(jid)
    advance(chain, closed_at - chain.pending_timestamp)

    with ape.reverts(
        stake_manager.StakeManagerCollateralSlashWindowClosed, jobId=jid, closedAt=closed_at
    ):
        _slash(stake_manager, orchestrator, jid, bonded, TOKEN)


def test_slashCollateral_ofAnAssignmentTakesAtMostTheLiveReservation(
    stake_manager: Any, escrow: Any, orchestrator: Any, bonded: Any, chain: Any,
    create_job: Callable[..., bytes],
) -> None:
    until = chain.pending_timestamp + 2 * 3600  # lapses before the job's window closes
    _reserve(stake_manager, orchestrator, bonded, 20 * TOKEN, until)
    jid = create_job("thin")
    tree = _assign(escrow, orchestrator, [(jid, bonded, 50 * TOKEN)])
    _prove(escrow, tree, jid, bonded, 50 * TOKEN)

    _slash(stake_manager, orchestrator, jid, bonded, 50 * TOKEN)
    assert stake_manager.slashOf(1).amount == 20 * TOKEN

    _reserve(stake_manager, orchestrator, bonded, 20 * TOKEN, until)
    advance(chain, until - chain.pending_timestamp)
    assert escrow.collateralReleasableAt(jid) > chain.pending_timestamp  # the job's window is open
    with ape.reverts(stake_manager.StakeManagerNothingToSlash, provider=bonded):
        _slash(stake_manager, orchestrator, jid, bonded, TOKEN)


def test_slashCollateral_ofAnAssignmentStaysOpenAfterAReclaimForTheSlashWindow(
    stake_manager: Any, escrow: Any, orchestrator: Any, customer: Any, bonded: Any, chain: Any,
    assigned: tuple[bytes, MerkleTree],
) -> None:
    jid, tree = assigned
    advance(chain, 3600 + GRACE_PERIOD + 1)
    escrow.reclaim(jid, sender=customer)
    _prove(escrow, tree, jid, bonded, 50 * TOKEN)
    closes_at = escrow.collateralReleasableAt(jid)

    _slash(stake_manager, orchestrator, jid, bonded, 50 * TOKEN)

    assert stake_manager.slashOf(1).amount == 50 * TOKEN
    assert closes_at == escrow.jobOf(jid).deadline + GRACE_PERIOD + COLLATERAL_SLASH_WINDOW


# ---------------------------------------------------------------- disputes name proven backers


def test_disputeSettlement_namesOnlyAPayeeTheSettlementListed(
    escrow: Any, disputes: Any, orchestrator: Any, customer: Any, providers: list[Any],
    staked: Callable[..., None], fund: Callable[..., None], chain: Any,
    create_job: Callable[..., bytes],
) -> None:
    worker, bystander, _ = providers
    staked(worker, STAKE)
    staked(bystander, STAKE)
    jid = create_job("disputed", 100 * TOKEN)
    tree = _assign(escrow, orchestrator, [(jid, worker, 5 * TOKEN)])
    escrow.settleBatchSolo([(jid, worker, 60 * TOKEN, b"\x00" * 32)], sender=orchestrator)
    other = create_job("bystander's", 100 * TOKEN)
    escrow.settleBatchSolo([(other, bystander, 60 * TOKEN, b"\x00" * 32)], sender=orchestrator)
    fund(customer, 10 * 10 * TOKEN)

    with ape.reverts(disputes.DisputesInvalidRespondent, respondent=worker):
        disputes.disputeSettlement(jid, worker, TOKEN, EVIDENCE, sender=customer)
    with ape.reverts(disputes.DisputesInvalidRespondent, respondent=bystander):
        disputes.disputeSettlement(jid, bystander, TOKEN, EVIDENCE, sender=customer)
    _prove(escrow, tree, jid, worker, 5 * TOKEN)  # the orchestrator's leaf alone makes no party
    with ape.reverts(disputes.DisputesInvalidRespondent, respondent=worker):
        disputes.disputeSettlement(jid, worker, TOKEN, EVIDENCE, sender=customer)
    pairs = [(jid, worker.address, 60 * TOKEN, b"\x00" * 32)]
    with ape.reverts(escrow.JobEscrowNotAPayee, jobId=jid, provider=bystander):
        escrow.provePayout(jid, bystander, pairs, sender=bystander)
    escrow.provePayout(jid, worker, pairs, sender=bystander)  # anyone may
    assert escrow.payeeOf(jid, worker) == (True, 60 * TOKEN, 0)
    disputes.disputeSettlement(jid, worker, TOKEN, EVIDENCE, sender=customer)

    assert escrow.balanceOf(worker).frozen == TOKEN
    assert escrow.payeeOf(jid, worker) == (True, 60 * TOKEN, TOKEN)
    assert escrow.balanceOf(bystander).frozen == 0
