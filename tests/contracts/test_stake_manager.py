"""StakeManager: bonding, unbonding locks, collateral, tiers, epoch commitments and slashing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ape
import pytest
from eth_abi import encode
from eth_utils import keccak

from orchestrator.domain.merkle import MerkleTree, score_leaf

from .conftest import SLASH_DISPUTE_WINDOW, TOKEN, UNBONDING_PERIOD, advance, job_id

STAKE = 1_000 * TOKEN
BACKGROUND, STANDARD, HIGH = 0, 1, 2
LOW_SCORE, ABANDONMENT, FAILED_VERIFICATION, OTHER = 0, 1, 2, 3
PENDING, FROZEN, RELEASED, REVERSED = 1, 2, 3, 4
DIGEST = b"\x42" * 32
SALT = b"\x77" * 32


def _stake_tuple(stake_manager: Any, who: Any) -> tuple[int, int, int, int]:
    info = stake_manager.stakeOf(who)
    return (info.bonded, info.locked, info.unbonding, info.tier)


@pytest.fixture
def bonded(staked: Callable[..., None], provider: Any) -> Any:
    staked(provider, STAKE)
    return provider


# ---------------------------------------------------------------- stake


def test_stake_bondsTokensAndEmitsStaked(
    stake_manager: Any, token: Any, fund: Callable[..., None], provider: Any
) -> None:
    fund(provider, STAKE)

    receipt = stake_manager.stake(STAKE, sender=provider)

    assert _stake_tuple(stake_manager, provider) == (STAKE, 0, 0, BACKGROUND)
    assert token.balanceOf(stake_manager) == STAKE
    assert receipt.events.filter(stake_manager.Staked) == [
        stake_manager.Staked(provider=provider, amount=STAKE)
    ]


def test_stake_revertsOnZeroAmount(stake_manager: Any, provider: Any) -> None:
    with ape.reverts(stake_manager.StakeManagerZeroAmount):
        stake_manager.stake(0, sender=provider)


# ---------------------------------------------------------------- unbonding


def test_requestUnbond_movesFreeStakeIntoALockWithWithdrawTime(
    stake_manager: Any, bonded: Any, chain: Any
) -> None:
    receipt = stake_manager.requestUnbond(300 * TOKEN, sender=bonded)

    lock = stake_manager.unbondingLock(bonded, 0)
    assert lock.amount == 300 * TOKEN
    assert lock.withdrawableAt == receipt.timestamp + UNBONDING_PERIOD
    assert _stake_tuple(stake_manager, bonded)[:3] == (700 * TOKEN, 0, 300 * TOKEN)


def test_requestUnbond_givesIncreasingLockIds(stake_manager: Any, bonded: Any) -> None:
    stake_manager.requestUnbond(1 * TOKEN, sender=bonded)
    stake_manager.requestUnbond(2 * TOKEN, sender=bonded)

    assert stake_manager.unbondingLock(bonded, 1).amount == 2 * TOKEN


def test_requestUnbond_revertsOnZeroAmount(stake_manager: Any, bonded: Any) -> None:
    with ape.reverts(stake_manager.StakeManagerZeroAmount):
        stake_manager.requestUnbond(0, sender=bonded)


def test_requestUnbond_revertsBeyondFreeStake(stake_manager: Any, bonded: Any) -> None:
    with ape.reverts(
        stake_manager.StakeManagerInsufficientFreeStake,
        provider=bonded,
        requested=STAKE + 1,
        free=STAKE,
    ):
        stake_manager.requestUnbond(STAKE + 1, sender=bonded)


def test_requestUnbond_cannotTouchCollateralLockedForAJob(
    stake_manager: Any,
    escrow: Any,
    orchestrator: Any,
    bonded: Any,
    create_job: Callable[..., bytes],
) -> None:
    jid = create_job("locked")
    escrow.lockCollateral(jid, [bonded], [600 * TOKEN], sender=orchestrator)

    with ape.reverts(
        stake_manager.StakeManagerInsufficientFreeStake,
        provider=bonded,
        requested=500 * TOKEN,
        free=400 * TOKEN,
    ):
        stake_manager.requestUnbond(500 * TOKEN, sender=bonded)


def test_withdraw_paysOutAfterTheUnbondingPeriod(
    stake_manager: Any, token: Any, bonded: Any, chain: Any
) -> None:
    stake_manager.requestUnbond(300 * TOKEN, sender=bonded)
    advance(chain, UNBONDING_PERIOD)

    receipt = stake_manager.withdraw(0, sender=bonded)

    assert token.balanceOf(bonded) == 300 * TOKEN
    assert _stake_tuple(stake_manager, bonded)[:3] == (700 * TOKEN, 0, 0)
    assert stake_manager.unbondingLock(bonded, 0).amount == 0
    assert receipt.events.filter(stake_manager.Withdrawn) == [
        stake_manager.Withdrawn(provider=bonded, lockId=0, amount=300 * TOKEN)
    ]


def test_withdraw_revertsBeforeTheUnbondingPeriodEnds(
    stake_manager: Any, bonded: Any, chain: Any
) -> None:
    receipt = stake_manager.requestUnbond(300 * TOKEN, sender=bonded)
    advance(chain, UNBONDING_PERIOD - 10)

    with ape.reverts(
        stake_manager.StakeManagerUnbondingNotEnded,
        lockId=0,
        withdrawableAt=receipt.timestamp + UNBONDING_PERIOD,
    ):
        stake_manager.withdraw(0, sender=bonded)


def test_withdraw_revertsOnUnknownOrSpentLock(stake_manager: Any, bonded: Any, chain: Any) -> None:
    stake_manager.requestUnbond(300 * TOKEN, sender=bonded)
    advance(chain, UNBONDING_PERIOD)
    stake_manager.withdraw(0, sender=bonded)

    with ape.reverts(stake_manager.StakeManagerUnknownUnbondingLock, provider=bonded, lockId=0):
        stake_manager.withdraw(0, sender=bonded)
    with ape.reverts(stake_manager.StakeManagerUnknownUnbondingLock, provider=bonded, lockId=7):
        stake_manager.withdraw(7, sender=bonded)


def test_cancelUnbond_returnsTheLockToBondedStake(stake_manager: Any, bonded: Any) -> None:
    stake_manager.requestUnbond(300 * TOKEN, sender=bonded)

    receipt = stake_manager.cancelUnbond(0, sender=bonded)

    assert _stake_tuple(stake_manager, bonded)[:3] == (STAKE, 0, 0)
    assert receipt.events.filter(stake_manager.UnbondCancelled) == [
        stake_manager.UnbondCancelled(provider=bonded, lockId=0, amount=300 * TOKEN)
    ]


def test_cancelUnbond_revertsOnUnknownLock(stake_manager: Any, bonded: Any) -> None:
    with ape.reverts(stake_manager.StakeManagerUnknownUnbondingLock, provider=bonded, lockId=0):
        stake_manager.cancelUnbond(0, sender=bonded)


# ---------------------------------------------------------------- collateral (escrow role)


def test_lockCollateral_locksManyProvidersInOneCall(
    stake_manager: Any,
    escrow: Any,
    orchestrator: Any,
    providers: list[Any],
    staked: Callable[..., None],
    create_job: Callable[..., bytes],
) -> None:
    for p in providers:
        staked(p, STAKE)
    jid = create_job("many")

    escrow.lockCollateral(jid, providers, [10 * TOKEN, 20 * TOKEN, 30 * TOKEN], sender=orchestrator)
    escrow.lockCollateral(jid, providers[:1], [5 * TOKEN], sender=orchestrator)

    assert [stake_manager.lockedFor(jid, p) for p in providers] == [
        15 * TOKEN,
        20 * TOKEN,
        30 * TOKEN,
    ]
    assert stake_manager.stakeOf(providers[0]).locked == 15 * TOKEN


def test_lockCollateral_isAllOrNothing(
    stake_manager: Any,
    escrow: Any,
    orchestrator: Any,
    providers: list[Any],
    staked: Callable[..., None],
    create_job: Callable[..., bytes],
) -> None:
    staked(providers[0], STAKE)
    staked(providers[1], 10 * TOKEN)
    jid = create_job("partial")

    with ape.reverts(
        stake_manager.StakeManagerInsufficientFreeStake,
        provider=providers[1],
        requested=11 * TOKEN,
        free=10 * TOKEN,
    ):
        escrow.lockCollateral(jid, providers[:2], [5 * TOKEN, 11 * TOKEN], sender=orchestrator)
    assert stake_manager.lockedFor(jid, providers[0]) == 0


def test_lockCollateral_revertsOnZeroAmountAndLengthMismatch(
    stake_manager: Any,
    escrow: Any,
    orchestrator: Any,
    bonded: Any,
    create_job: Callable[..., bytes],
) -> None:
    jid = create_job("bad-lock")
    with ape.reverts(stake_manager.StakeManagerZeroAmount):
        escrow.lockCollateral(jid, [bonded], [0], sender=orchestrator)
    with ape.reverts(stake_manager.StakeManagerLengthMismatch, a=1, b=2):
        escrow.lockCollateral(jid, [bonded], [1, 2], sender=orchestrator)


def test_releaseCollateral_revertsOnLengthMismatch(
    stake_manager: Any, admin: Any, stranger: Any
) -> None:
    stake_manager.grantRole(stake_manager.ESCROW_ROLE(), stranger, sender=admin)
    with ape.reverts(stake_manager.StakeManagerLengthMismatch, a=1, b=0):
        stake_manager.releaseCollateral([job_id("x")], [], sender=stranger)


# ---------------------------------------------------------------- tiers and epochs


def test_setTier_emitsOnlyOnChange(stake_manager: Any, orchestrator: Any, provider: Any) -> None:
    receipt = stake_manager.setTier(provider, HIGH, sender=orchestrator)
    again = stake_manager.setTier(provider, HIGH, sender=orchestrator)

    assert stake_manager.stakeOf(provider).tier == HIGH
    assert receipt.events.filter(stake_manager.TierChanged) == [
        stake_manager.TierChanged(provider=provider, oldTier=BACKGROUND, newTier=HIGH)
    ]
    assert list(again.events) == []


def test_commitEpoch_storesTheRootOnce(stake_manager: Any, orchestrator: Any) -> None:
    root = b"\x11" * 32
    stake_manager.commitEpoch(7, root, sender=orchestrator)

    assert stake_manager.epochRoot(7) == root
    with ape.reverts(stake_manager.StakeManagerEpochAlreadyCommitted, epoch=7):
        stake_manager.commitEpoch(7, b"\x22" * 32, sender=orchestrator)


def test_commitEpoch_revertsOnZeroRoot(stake_manager: Any, orchestrator: Any) -> None:
    with ape.reverts(stake_manager.StakeManagerZeroRoot):
        stake_manager.commitEpoch(1, b"\x00" * 32, sender=orchestrator)


# ---------------------------------------------------------------- slashing


def test_slash_takesFreeStakeFirstThenUnbondingAndHoldsProceedsPending(
    stake_manager: Any,
    orchestrator: Any,
    treasury: Any,
    bonded: Any,
    escrow: Any,
    create_job: Callable[..., bytes],
) -> None:
    jid = create_job("backing")
    escrow.lockCollateral(jid, [bonded], [500 * TOKEN], sender=orchestrator)
    stake_manager.requestUnbond(
        300 * TOKEN, sender=bonded
    )  # bonded 700 (500 locked), unbonding 300

    receipt = stake_manager.slash(bonded, 350 * TOKEN, OTHER, DIGEST, sender=orchestrator)

    assert _stake_tuple(stake_manager, bonded)[:3] == (500 * TOKEN, 500 * TOKEN, 150 * TOKEN)
    record = stake_manager.slashOf(1)
    assert (record.provider, record.beneficiary, record.amount, record.status) == (
        bonded.address,
        treasury.address,
        350 * TOKEN,
        PENDING,
    )
    assert record.releasableAt == receipt.timestamp + SLASH_DISPUTE_WINDOW


def test_slash_neverExceedsWhatTheProviderHas(
    stake_manager: Any, orchestrator: Any, bonded: Any
) -> None:
    stake_manager.slash(bonded, 10 * STAKE, OTHER, DIGEST, sender=orchestrator)

    assert stake_manager.slashOf(1).amount == STAKE
    assert _stake_tuple(stake_manager, bonded)[:3] == (0, 0, 0)
    with ape.reverts(stake_manager.StakeManagerNothingToSlash, provider=bonded):
        stake_manager.slash(bonded, 1, OTHER, DIGEST, sender=orchestrator)


def test_slash_revertsOnZeroAmount(stake_manager: Any, orchestrator: Any, bonded: Any) -> None:
    with ape.reverts(stake_manager.StakeManagerZeroAmount):
        stake_manager.slash(bonded, 0, OTHER, DIGEST, sender=orchestrator)


def test_slash_shrinksTheUnbondingPoolSoLocksPayWhatIsLeft(
    stake_manager: Any, orchestrator: Any, token: Any, bonded: Any, chain: Any
) -> None:
    stake_manager.requestUnbond(STAKE, sender=bonded)
    stake_manager.slash(bonded, 400 * TOKEN, OTHER, DIGEST, sender=orchestrator)
    advance(chain, UNBONDING_PERIOD)

    stake_manager.withdraw(0, sender=bonded)

    assert token.balanceOf(bonded) == 600 * TOKEN


def test_slashCollateral_paysTheJobsCustomerAfterTheWindow(
    stake_manager: Any,
    escrow: Any,
    token: Any,
    orchestrator: Any,
    customer: Any,
    bonded: Any,
    create_job: Callable[..., bytes],
    chain: Any,
    stranger: Any,
) -> None:
    jid = create_job("abandoned")
    escrow.lockCollateral(jid, [bonded], [200 * TOKEN], sender=orchestrator)
    customer_before = token.balanceOf(customer)

    stake_manager.slashCollateral(
        jid, bonded, 0, 500 * TOKEN, ABANDONMENT, DIGEST, sender=orchestrator
    )

    assert stake_manager.lockedFor(jid, bonded) == 0
    assert _stake_tuple(stake_manager, bonded)[:2] == (800 * TOKEN, 0)
    with ape.reverts(stake_manager.StakeManagerSlashStillDisputable):
        stake_manager.releaseSlash(1, sender=stranger)
    advance(chain, SLASH_DISPUTE_WINDOW)
    stake_manager.releaseSlash(1, sender=stranger)
    assert token.balanceOf(customer) - customer_before == 200 * TOKEN
    assert stake_manager.slashOf(1).status == RELEASED


def test_slashCollateral_revertsWithoutLockedCollateral(
    stake_manager: Any, orchestrator: Any, bonded: Any
) -> None:
    with ape.reverts(stake_manager.StakeManagerNothingToSlash, provider=bonded):
        stake_manager.slashCollateral(
            job_id("none"), bonded, 0, 1, ABANDONMENT, DIGEST, sender=orchestrator
        )
    with ape.reverts(stake_manager.StakeManagerNothingToSlash, provider=bonded):
        stake_manager.slashCollateral(  # no proven placement 1 either
            job_id("none"), bonded, 1, 1, ABANDONMENT, DIGEST, sender=orchestrator
        )
    with ape.reverts(stake_manager.StakeManagerZeroAmount):
        stake_manager.slashCollateral(
            job_id("none"), bonded, 0, 0, ABANDONMENT, DIGEST, sender=orchestrator
        )


def test_releaseSlash_revertsTwice(
    stake_manager: Any, orchestrator: Any, bonded: Any, chain: Any, stranger: Any
) -> None:
    stake_manager.slash(bonded, 10 * TOKEN, OTHER, DIGEST, sender=orchestrator)
    advance(chain, SLASH_DISPUTE_WINDOW)
    stake_manager.releaseSlash(1, sender=stranger)

    with ape.reverts(stake_manager.StakeManagerSlashNotInStatus, slashId=1, status=RELEASED):
        stake_manager.releaseSlash(1, sender=stranger)


# ---------------------------------------------------------------- slashForScore


def _reveal(
    stake_manager: Any, finder: Any, provider: Any, epoch: int, score: int, proof: list[bytes]
) -> Any:
    """A finding's two steps: the finder commits to it (score and digest included), then
    reveals it in a later block."""
    commitment = keccak(
        encode(
            ["address", "address", "uint64", "uint256", "bytes32", "bytes32"],
            [str(finder), str(provider), epoch, score, DIGEST, SALT],
        )
    )
    stake_manager.commitFinding(commitment, sender=finder)
    return stake_manager.slashForScore(provider, epoch, score, DIGEST, proof, SALT, sender=finder)


def _score_tree(entries: list[tuple[Any, int]]) -> tuple[MerkleTree, dict[str, bytes]]:
    leaves = {str(who): score_leaf(str(who), score, DIGEST) for who, score in entries}
    return MerkleTree.build(list(leaves.values())), leaves


@pytest.fixture
def scored_epoch(
    stake_manager: Any, orchestrator: Any, providers: list[Any], staked: Callable[..., None]
) -> tuple[MerkleTree, dict[str, bytes]]:
    for p in providers:
        staked(p, STAKE)
    tree, leaves = _score_tree(
        [(providers[0], 2_000), (providers[1], 9_000), (providers[2], 4_999)]
    )
    stake_manager.commitEpoch(3, tree.root, sender=orchestrator)
    return tree, leaves


def test_slashForScore_anyoneWithAProofSlashesDemotesAndEarnsTheFinderShare(
    stake_manager: Any,
    orchestrator: Any,
    providers: list[Any],
    finder: Any,
    treasury: Any,
    scored_epoch: tuple[MerkleTree, dict[str, bytes]],
) -> None:
    tree, leaves = scored_epoch
    low = providers[0]
    stake_manager.setTier(low, HIGH, sender=orchestrator)

    _reveal(stake_manager, finder, low, 3, 2_000, tree.proof(leaves[str(low)]))

    # defaults: threshold 5000 bps, slash 10% of stake, finder 10% of the slash
    assert _stake_tuple(stake_manager, low) == (900 * TOKEN, 0, 0, BACKGROUND)
    record = stake_manager.slashOf(1)
    assert (
        record.beneficiary,
        record.amount,
        record.finder,
        record.finderAmount,
        record.reason,
    ) == (treasury.address, 90 * TOKEN, finder.address, 10 * TOKEN, LOW_SCORE)
    assert stake_manager.scoreSlashed(low, 3)


def test_slashForScore_onlyOncePerProviderAndEpoch(
    stake_manager: Any,
    providers: list[Any],
    finder: Any,
    scored_epoch: tuple[MerkleTree, dict[str, bytes]],
) -> None:
    tree, leaves = scored_epoch
    proof = tree.proof(leaves[str(providers[2])])
    _reveal(stake_manager, finder, providers[2], 3, 4_999, proof)

    with ape.reverts(
        stake_manager.StakeManagerAlreadySlashedForEpoch, provider=providers[2], epoch=3
    ):
        _reveal(stake_manager, finder, providers[2], 3, 4_999, proof)


def test_slashForScore_revertsForAScoreAtOrAboveTheThreshold(
    stake_manager: Any,
    providers: list[Any],
    finder: Any,
    scored_epoch: tuple[MerkleTree, dict[str, bytes]],
) -> None:
    tree, leaves = scored_epoch
    with ape.reverts(
        stake_manager.StakeManagerScoreAboveThreshold, scoreBps=9_000, thresholdBps=5_000
    ):
        proof = tree.proof(leaves[str(providers[1])])
        _reveal(stake_manager, finder, providers[1], 3, 9_000, proof)


def test_slashForScore_revertsOnAForgedScore(
    stake_manager: Any,
    providers: list[Any],
    finder: Any,
    scored_epoch: tuple[MerkleTree, dict[str, bytes]],
) -> None:
    tree, leaves = scored_epoch
    with ape.reverts(stake_manager.StakeManagerInvalidScoreProof, provider=providers[1], epoch=3):
        proof = tree.proof(leaves[str(providers[1])])
        _reveal(stake_manager, finder, providers[1], 3, 100, proof)


def test_slashForScore_revertsForAnUncommittedEpoch(
    stake_manager: Any, provider: Any, finder: Any
) -> None:
    with ape.reverts(stake_manager.StakeManagerEpochNotCommitted, epoch=99):
        _reveal(stake_manager, finder, provider, 99, 0, [])


def test_slashForScore_withNothingSlashableStillDemotes(
    stake_manager: Any, orchestrator: Any, provider: Any, finder: Any
) -> None:
    tree, leaves = _score_tree([(provider, 0)])
    stake_manager.commitEpoch(1, tree.root, sender=orchestrator)
    stake_manager.setTier(provider, STANDARD, sender=orchestrator)

    _reveal(stake_manager, finder, provider, 1, 0, tree.proof(leaves[str(provider)]))

    assert stake_manager.stakeOf(provider).tier == BACKGROUND
    assert stake_manager.slashCount() == 0


# ---------------------------------------------------------------- admin


def test_setScoreSlashing_rejectsBpsAbove10000(stake_manager: Any, admin: Any) -> None:
    with ape.reverts(stake_manager.StakeManagerInvalidBps, bps=10_001):
        stake_manager.setScoreSlashing(5_000, 10_001, 0, sender=admin)
    stake_manager.setScoreSlashing(6_000, 2_000, 500, sender=admin)
    assert stake_manager.scoreSlashing() == (6_000, 2_000, 500)


def test_adminSetters_updateParameters(stake_manager: Any, admin: Any, stranger: Any) -> None:
    stake_manager.setUnbondingPeriod(60, sender=admin)
    stake_manager.setSlashDisputeWindow(30, sender=admin)
    stake_manager.setTreasury(stranger, sender=admin)

    assert (stake_manager.unbondingPeriod(), stake_manager.slashDisputeWindow()) == (60, 30)
    assert stake_manager.treasury() == stranger.address
    with ape.reverts(stake_manager.StakeManagerZeroAddress):
        stake_manager.setTreasury("0x" + "00" * 20, sender=admin)


def test_setJobEscrow_worksOnlyOnce(
    stake_manager: Any, escrow: Any, admin: Any, stranger: Any
) -> None:
    assert stake_manager.jobEscrow() == escrow.address
    with ape.reverts(stake_manager.StakeManagerEscrowAlreadySet, escrow=escrow.address):
        stake_manager.setJobEscrow(stranger, sender=admin)
