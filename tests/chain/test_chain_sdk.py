"""Every SDK call against the real contracts on anvil; reverts arrive as named domain errors."""

from __future__ import annotations

import pytest
from eth_utils import keccak

from orchestrator.chain.anvil import increase_time
from orchestrator.chain.errors import ContractError
from orchestrator.chain.sdk import MeshAccount, MeshChain, Settlement
from orchestrator.domain.chain_views import DisputeStatus, EscrowStatus, SlashStatus
from orchestrator.domain.merkle import MerkleTree, score_leaf
from orchestrator.domain.types import Tier

STAKE = 1_000 * 10**18
PAYMENT = 100 * 10**18
COLLATERAL = 50 * 10**18


def _job_id(label: str) -> bytes:
    return keccak(text=label)


def _now(chain: MeshChain) -> int:
    return int(chain.w3.eth.get_block("latest")["timestamp"])


def _funded_job(
    chain: MeshChain, customer: MeshAccount, label: str = "job-1", amount: int = PAYMENT
) -> bytes:
    job_id = _job_id(label)
    customer.create_job(job_id, amount, _now(chain) + 3600, keccak(text=f"spec {label}"))
    return job_id


def _locked_job(
    chain: MeshChain,
    customer: MeshAccount,
    provider: MeshAccount,
    orchestrator: MeshAccount,
    label: str = "job-1",
) -> bytes:
    provider.stake(STAKE)
    job_id = _funded_job(chain, customer, label)
    orchestrator.lock_collateral(job_id, [provider.address], [COLLATERAL])
    return job_id


# ------------------------------------------------------------------ stake


def test_stake_bondsTokensAndReportsGasAndBlock(chain: MeshChain, provider: MeshAccount) -> None:
    before = chain.token_balance(provider.address)

    receipt = provider.stake(STAKE)

    stake = chain.provider_stake(provider.address)
    assert (stake.bonded, stake.locked, stake.unbonding) == (STAKE, 0, 0)
    assert chain.token_balance(provider.address) == before - STAKE
    assert receipt.gas_used > 21_000
    assert receipt.block_number == chain.w3.eth.block_number
    assert receipt.tx_hash.startswith("0x") and len(receipt.tx_hash) == 66


def test_stake_revertsWithZeroAmountBeforeSending(chain: MeshChain, provider: MeshAccount) -> None:
    nonce_before = chain.w3.eth.get_transaction_count(provider.address)

    with pytest.raises(ContractError) as caught:
        provider.stake(0)

    assert caught.value.name == "StakeManagerZeroAmount"
    assert chain.w3.eth.get_transaction_count(provider.address) == nonce_before


def test_request_unbond_returnsSequentialLockIdsAndMovesStakeToUnbonding(
    chain: MeshChain, provider: MeshAccount
) -> None:
    provider.stake(STAKE)

    first, _ = provider.request_unbond(100)
    second, _ = provider.request_unbond(200)

    assert (first, second) == (0, 1)
    stake = chain.provider_stake(provider.address)
    assert (stake.bonded, stake.unbonding) == (STAKE - 300, 300)
    lock = chain.unbonding_lock(provider.address, second)
    assert lock is not None and lock.amount == 200
    assert lock.withdrawable_at == _now(chain) + chain.unbonding_period()


def test_request_unbond_revertsWithFreeStakeWhenCollateralIsLocked(
    chain: MeshChain, provider: MeshAccount, customer: MeshAccount, orchestrator: MeshAccount
) -> None:
    _locked_job(chain, customer, provider, orchestrator)

    with pytest.raises(ContractError) as caught:
        provider.request_unbond(STAKE)

    assert caught.value.name == "StakeManagerInsufficientFreeStake"
    assert caught.value.arguments == {"provider": provider.address, "requested": STAKE,
                                      "free": STAKE - COLLATERAL}


def test_withdraw_revertsUntilUnbondingEndsThenPaysOut(
    chain: MeshChain, provider: MeshAccount
) -> None:
    provider.stake(STAKE)
    lock_id, _ = provider.request_unbond(STAKE)
    lock = chain.unbonding_lock(provider.address, lock_id)
    assert lock is not None

    with pytest.raises(ContractError) as caught:
        provider.withdraw(lock_id)
    assert caught.value.name == "StakeManagerUnbondingNotEnded"
    assert caught.value.arguments == {"lock_id": lock_id, "withdrawable_at": lock.withdrawable_at}

    increase_time(chain.w3, chain.unbonding_period())
    before = chain.token_balance(provider.address)
    provider.withdraw(lock_id)

    assert chain.token_balance(provider.address) == before + STAKE
    assert chain.unbonding_lock(provider.address, lock_id) is None


def test_cancel_unbond_returnsTheLockToBondedStake(chain: MeshChain, provider: MeshAccount) -> None:
    provider.stake(STAKE)
    lock_id, _ = provider.request_unbond(STAKE // 2)

    provider.cancel_unbond(lock_id)

    stake = chain.provider_stake(provider.address)
    assert (stake.bonded, stake.unbonding) == (STAKE, 0)


# ------------------------------------------------------------------ escrow


def test_create_job_escrowsPaymentReadableAsEscrowedJob(
    chain: MeshChain, customer: MeshAccount
) -> None:
    deadline = _now(chain) + 3600
    job_id = _job_id("render-42")

    customer.create_job(job_id, PAYMENT, deadline, keccak(text="spec"))

    job = chain.escrowed_job(job_id)
    assert job is not None
    assert job.customer == customer.address
    assert (job.amount, job.deadline, job.status) == (PAYMENT, deadline, EscrowStatus.FUNDED)
    assert job.spec_hash == keccak(text="spec")


def test_escrowed_job_isNoneForUnknownJob(chain: MeshChain) -> None:
    assert chain.escrowed_job(_job_id("never created")) is None


def test_create_job_revertsOnDuplicateId(chain: MeshChain, customer: MeshAccount) -> None:
    job_id = _funded_job(chain, customer)

    with pytest.raises(ContractError) as caught:
        _funded_job(chain, customer)

    assert caught.value.name == "JobEscrowJobExists"
    assert caught.value.arguments == {"job_id": job_id}


def test_lock_collateral_locksProviderStakeForTheJob(
    chain: MeshChain, provider: MeshAccount, customer: MeshAccount, orchestrator: MeshAccount
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)

    assert chain.locked_for(job_id, provider.address) == COLLATERAL
    assert chain.provider_stake(provider.address).free == STAKE - COLLATERAL


def test_lock_collateral_isRefusedToAnyoneButTheOrchestrator(
    chain: MeshChain, provider: MeshAccount, stranger: MeshAccount, customer: MeshAccount
) -> None:
    provider.stake(STAKE)
    job_id = _funded_job(chain, customer)

    with pytest.raises(ContractError) as caught:
        stranger.lock_collateral(job_id, [provider.address], [COLLATERAL])

    assert caught.value.name == "AccessControlUnauthorizedAccount"
    assert caught.value.arguments["account"] == stranger.address


def test_settle_paysProviderRefundsRestAndKeepsCollateralSlashable(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)

    receipt = orchestrator.settle(job_id, [provider.address], [PAYMENT - 10], bytes(32))

    job = chain.escrowed_job(job_id)
    assert job is not None and job.status == EscrowStatus.SETTLED
    assert chain.provider_stake(provider.address).locked == COLLATERAL  # until close + S
    assert chain.escrow_balance(provider.address).pending == PAYMENT - 10
    assert chain.refund_owed(job_id) == 10
    # What the job paid the provider, proven by anyone from the settlement's own calldata.
    pairs = chain.settlement_pairs(receipt.tx_hash)
    assert pairs == [(job_id, provider.address, PAYMENT - 10, bytes(32))]
    assert not chain.payout_proven(job_id, provider.address)
    customer.prove_payout(job_id, provider.address, pairs)
    assert chain.payout_proven(job_id, provider.address)


def test_settle_revertsWhenAlreadySettled(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)
    orchestrator.settle(job_id, [provider.address], [PAYMENT], bytes(32))

    with pytest.raises(ContractError) as caught:
        orchestrator.settle(job_id, [provider.address], [PAYMENT], bytes(32))

    assert caught.value.name == "JobEscrowAlreadySettled"
    assert caught.value.arguments == {"job_id": job_id}


def test_settle_revertsWhenPayoutsExceedEscrow(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)

    with pytest.raises(ContractError) as caught:
        orchestrator.settle(job_id, [provider.address], [PAYMENT + 1], bytes(32))

    assert caught.value.name == "JobEscrowPayoutExceedsEscrow"
    assert caught.value.arguments == {"job_id": job_id, "total": PAYMENT + 1, "amount": PAYMENT}


def test_settle_batch_settlesEveryJobInOneTransaction(
    chain: MeshChain, provider: MeshAccount, orchestrator: MeshAccount, customer: MeshAccount
) -> None:
    provider.stake(STAKE)
    job_ids = [_funded_job(chain, customer, f"batch-{index}") for index in range(3)]
    for job_id in job_ids:
        orchestrator.lock_collateral(job_id, [provider.address], [COLLATERAL])

    receipt = orchestrator.settle_batch([
        Settlement(job_id, (provider.address,), (PAYMENT,), bytes(32))
        for job_id in job_ids
    ])

    assert all(chain.escrowed_job(job_id).status == EscrowStatus.SETTLED  # type: ignore[union-attr]
               for job_id in job_ids)
    assert chain.escrow_balance(provider.address).pending == 3 * PAYMENT
    assert chain.provider_stake(provider.address).locked == 3 * COLLATERAL  # until close + S
    assert receipt.gas_used > 0
    assert chain.settlement_pairs(receipt.tx_hash) == [
        (job_id, provider.address, PAYMENT, bytes(32)) for job_id in job_ids]


def test_claim_paysPendingOnlyAfterTheDisputeWindow(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)
    orchestrator.settle(job_id, [provider.address], [PAYMENT], bytes(32))

    with pytest.raises(ContractError) as caught:
        provider.claim()
    assert caught.value.name == "JobEscrowNothingToClaim"

    increase_time(chain.w3, chain.settlement_dispute_window() + chain.payout_period())
    before = chain.token_balance(provider.address)
    claimed, _ = provider.claim()

    assert claimed == PAYMENT
    assert chain.token_balance(provider.address) == before + PAYMENT


def test_claim_refund_paysTheUnusedEscrowOnlyAfterTheDisputeWindow(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)
    orchestrator.settle(job_id, [provider.address], [PAYMENT - 30], bytes(32))

    with pytest.raises(ContractError) as caught:
        customer.claim_refund(job_id)
    assert caught.value.name == "JobEscrowRefundNotClaimableYet"
    assert caught.value.arguments["job_id"] == job_id

    increase_time(chain.w3, chain.settlement_dispute_window() + chain.payout_period())
    before = chain.token_balance(customer.address)
    refunded, _ = customer.claim_refund(job_id)

    assert refunded == 30
    assert chain.token_balance(customer.address) == before + 30
    assert chain.refund_owed(job_id) == 0


def test_reclaim_refundsCustomerOnlyAfterDeadlinePlusGrace(
    chain: MeshChain, customer: MeshAccount
) -> None:
    job_id = _funded_job(chain, customer)
    job = chain.escrowed_job(job_id)
    assert job is not None

    with pytest.raises(ContractError) as caught:
        customer.reclaim(job_id)
    assert caught.value.name == "JobEscrowNotReclaimableYet"

    increase_time(chain.w3, job.deadline + chain.grace_period() - _now(chain) + 1)
    before = chain.token_balance(customer.address)
    customer.reclaim(job_id)

    assert chain.token_balance(customer.address) == before + PAYMENT
    reclaimed = chain.escrowed_job(job_id)
    assert reclaimed is not None and reclaimed.status == EscrowStatus.RECLAIMED


# ------------------------------------------------------------------ epochs and slashing


def test_slash_for_score_slashesAProviderProvenUnderThreshold(
    chain: MeshChain,
    provider: MeshAccount,
    other_provider: MeshAccount,
    orchestrator: MeshAccount,
    stranger: MeshAccount,
) -> None:
    provider.stake(STAKE)
    other_provider.stake(STAKE)
    digest = keccak(text="telemetry")
    low = score_leaf(provider.address, 100, digest)
    tree = MerkleTree.build([low, score_leaf(other_provider.address, 9_500, digest)])
    orchestrator.commit_epoch(7, tree.root)

    slash_id, _ = stranger.slash_for_score(provider.address, 7, 100, digest,
                                                  tree.proof(low))

    assert chain.epoch_root(7) == tree.root
    slash = chain.slash_of(slash_id)
    assert slash is not None and slash.status == SlashStatus.PENDING
    assert slash.finder == stranger.address
    stake = chain.provider_stake(provider.address)
    assert stake.bonded < STAKE
    assert stake.tier == Tier.BACKGROUND


def test_slash_for_score_revertsOnAProofForAnotherScore(
    chain: MeshChain,
    provider: MeshAccount,
    other_provider: MeshAccount,
    orchestrator: MeshAccount,
    stranger: MeshAccount,
) -> None:
    provider.stake(STAKE)
    digest = keccak(text="telemetry")
    leaf = score_leaf(provider.address, 9_000, digest)
    tree = MerkleTree.build([leaf, score_leaf(other_provider.address, 9_500, digest)])
    orchestrator.commit_epoch(1, tree.root)

    with pytest.raises(ContractError) as caught:
        stranger.slash_for_score(provider.address, 1, 100, digest, tree.proof(leaf))

    assert caught.value.name == "StakeManagerInvalidScoreProof"
    assert caught.value.arguments == {"provider": provider.address, "epoch": 1}


def test_commit_epoch_revertsWhenTheEpochIsAlreadyCommitted(
    chain: MeshChain, orchestrator: MeshAccount
) -> None:
    orchestrator.commit_epoch(3, keccak(text="root"))

    with pytest.raises(ContractError) as caught:
        orchestrator.commit_epoch(3, keccak(text="other root"))

    assert caught.value.name == "StakeManagerEpochAlreadyCommitted"
    assert caught.value.arguments == {"epoch": 3}


def test_set_tier_isAnOrchestratorPower(
    chain: MeshChain, provider: MeshAccount, orchestrator: MeshAccount
) -> None:
    provider.stake(STAKE)

    orchestrator.set_tier(provider.address, Tier.HIGH)

    assert chain.provider_stake(provider.address).tier == Tier.HIGH
    with pytest.raises(ContractError, match="AccessControlUnauthorizedAccount"):
        provider.set_tier(provider.address, Tier.HIGH)


def test_slash_collateral_sendsAbandonedCollateralTowardTheCustomer(
    chain: MeshChain,
    slasher: MeshAccount,
    provider: MeshAccount,
    customer: MeshAccount,
    orchestrator: MeshAccount,
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)

    slash_id, _ = slasher.slash_collateral(job_id, provider.address, 0, COLLATERAL,
                                                  1, keccak(text="abandoned"))

    slash = chain.slash_of(slash_id)
    assert slash is not None
    assert slash.beneficiary == customer.address
    assert slash.amount + slash.finder_amount == COLLATERAL
    assert chain.locked_for(job_id, provider.address) == 0


# ------------------------------------------------------------------ disputes


def test_settlement_dispute_isResolvedByTheArbiterOnly(
    chain: MeshChain,
    orchestrator: MeshAccount,
    provider: MeshAccount,
    customer: MeshAccount,
    arbiter: MeshAccount,
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)
    settled = orchestrator.settle(job_id, [provider.address], [PAYMENT], bytes(32))
    with pytest.raises(ContractError, match="DisputesInvalidRespondent"):
        customer.open_settlement_dispute(job_id, provider.address, PAYMENT, bytes(32))
    customer.prove_payout(job_id, provider.address, chain.settlement_pairs(settled.tx_hash))

    dispute_id, _ = customer.open_settlement_dispute(
        job_id, provider.address, PAYMENT, keccak(text="bad frames"))

    opened = chain.dispute_of(dispute_id)
    assert opened is not None and opened.status == DisputeStatus.OPEN
    assert opened.frozen_amount == PAYMENT
    assert chain.escrow_balance(provider.address).frozen == PAYMENT
    with pytest.raises(ContractError, match="AccessControlUnauthorizedAccount"):
        orchestrator.resolve_dispute(dispute_id, granted=True)

    arbiter.resolve_dispute(dispute_id, granted=True)

    ruled = chain.dispute_of(dispute_id)
    assert ruled is not None and ruled.status == DisputeStatus.GRANTED
    assert chain.escrow_balance(provider.address).frozen == 0


def test_open_settlement_dispute_revertsForAnUnsettledJob(
    chain: MeshChain, customer: MeshAccount, provider: MeshAccount
) -> None:
    job_id = _funded_job(chain, customer)

    with pytest.raises(ContractError) as caught:
        customer.open_settlement_dispute(job_id, provider.address, 1, bytes(32))

    assert caught.value.name == "DisputesJobNotSettled"
    assert caught.value.arguments == {"job_id": job_id}


def test_slash_dispute_grantedByTheArbiterReturnsTheStakeAndTheBond(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount,
    slasher: MeshAccount, arbiter: MeshAccount,
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)
    slash_id, _ = slasher.slash_collateral(job_id, provider.address, 0, COLLATERAL, 1, bytes(32))
    tokens_before = chain.token_balance(provider.address)

    dispute_id, _ = provider.open_slash_dispute(slash_id, keccak(text="I was online"))

    frozen = chain.slash_of(slash_id)
    assert frozen is not None and frozen.status == SlashStatus.FROZEN
    assert chain.token_balance(provider.address) == tokens_before - chain.dispute_bond()

    arbiter.resolve_dispute(dispute_id, granted=True, evidence=keccak(text="logs agree"))

    reversed_slash = chain.slash_of(slash_id)
    assert reversed_slash is not None and reversed_slash.status == SlashStatus.REVERSED
    assert chain.provider_stake(provider.address).bonded == STAKE
    assert chain.token_balance(provider.address) == tokens_before


def test_apply_default_ruling_waitsForTheRulingDeadlineThenLetsTheSlashStand(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount,
    slasher: MeshAccount, stranger: MeshAccount,
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)
    slash_id, _ = slasher.slash_collateral(job_id, provider.address, 0, COLLATERAL, 1, bytes(32))
    dispute_id, _ = provider.open_slash_dispute(slash_id, bytes(32))
    dispute = chain.dispute_of(dispute_id)
    assert dispute is not None

    with pytest.raises(ContractError) as caught:
        stranger.apply_default_ruling(dispute_id)
    assert caught.value.name == "DisputesRulingDeadlineNotReached"
    assert caught.value.arguments == {"dispute_id": dispute_id,
                                      "ruling_deadline": dispute.ruling_deadline}

    increase_time(chain.w3, dispute.ruling_deadline - _now(chain) + 1)
    stranger.apply_default_ruling(dispute_id)

    defaulted = chain.dispute_of(dispute_id)
    assert defaulted is not None and defaulted.status == DisputeStatus.DEFAULTED
    slash = chain.slash_of(slash_id)
    assert slash is not None and slash.status == SlashStatus.PENDING


def test_release_slash_paysTheCustomerOnlyAfterTheSlashDisputeWindow(
    chain: MeshChain, orchestrator: MeshAccount, provider: MeshAccount, customer: MeshAccount,
    slasher: MeshAccount, stranger: MeshAccount,
) -> None:
    job_id = _locked_job(chain, customer, provider, orchestrator)
    slash_id, _ = slasher.slash_collateral(job_id, provider.address, 0, COLLATERAL, 1, bytes(32))
    slash = chain.slash_of(slash_id)
    assert slash is not None

    with pytest.raises(ContractError) as caught:
        stranger.release_slash(slash_id)
    assert caught.value.name == "StakeManagerSlashStillDisputable"

    increase_time(chain.w3, slash.releasable_at - _now(chain) + 1)
    before = chain.token_balance(customer.address)
    stranger.release_slash(slash_id)

    assert chain.token_balance(customer.address) == before + slash.amount
    released = chain.slash_of(slash_id)
    assert released is not None and released.status == SlashStatus.RELEASED
