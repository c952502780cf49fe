"""The folds of indexed events into chain state, against hand-worked histories (what the
contracts' storage holds after those events), not against the fold's own arithmetic."""

from __future__ import annotations

from typing import Any

from orchestrator.domain import chain_ledger
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.domain.chain_views import (
    DisputeKind,
    DisputeRecord,
    DisputeStatus,
    EscrowedJob,
    EscrowStatus,
    ProviderStake,
    ReservationTerms,
)
from orchestrator.domain.types import Tier

ALICE = "0x" + "a1" * 20
BOB = "0x" + "b2" * 20
CUSTOMER = "0x" + "c3" * 20
JOB_1, JOB_2, NO_JOB = b"\x01" * 32, b"\x02" * 32, bytes(32)
_heights = iter(range(1, 10_000))


def event(contract: str, name: str, **args: Any) -> ChainEvent:
    height = next(_heights)
    return ChainEvent(contract=contract, name=name, args=args, block_number=height,
                      block_hash=height.to_bytes(32, "big"), tx_hash=height.to_bytes(32, "big"),
                      log_index=0)


def job_status(events: list[ChainEvent]) -> EscrowStatus:
    job = chain_ledger.escrowed_job(JOB_1, events)
    assert job is not None
    return job.status


def dispute_status(events: list[ChainEvent]) -> DisputeStatus:
    record = chain_ledger.dispute(7, events)
    assert record is not None
    return record.status


def stake(name: str, provider: str = ALICE, **args: Any) -> ChainEvent:
    return event("StakeManager", name, provider=provider, **args)


def test_stake_follows_bonds_unbonds_cancels_withdrawals_and_tiers() -> None:
    history = [
        stake("Staked", amount=1_000),
        stake("Staked", amount=500),                 # bonded 1,500
        stake("UnbondRequested", amount=400),        # bonded 1,100, unbonding 400
        stake("UnbondCancelled", amount=100),        # bonded 1,200, unbonding 300
        stake("Withdrawn", amount=300),              # unbonding 0
        stake("Staked", provider=BOB, amount=9_999),  # someone else's
        stake("TierChanged", newTier=int(Tier.HIGH)),
    ]
    view = chain_ledger.provider_stake(ALICE, history)
    assert (view.bonded, view.unbonding, view.locked, view.tier) == (1_200, 0, 0, int(Tier.HIGH))
    assert view.free == 1_200


def test_a_provider_never_seen_is_background_with_nothing_bonded() -> None:
    view = chain_ledger.provider_stake(ALICE, [stake("Staked", provider=BOB, amount=5)])
    assert (view.bonded, view.unbonding, view.locked, view.tier) == (0, 0, 0,
                                                                      int(Tier.BACKGROUND))


def test_locks_are_released_by_their_events_only_and_never_by_a_settlement() -> None:
    history = [
        stake("Staked", amount=1_000),
        stake("CollateralLocked", jobId=JOB_1, amount=100),
        stake("CollateralLocked", jobId=JOB_1, amount=50),   # job 1: 150
        stake("CollateralLocked", jobId=JOB_2, amount=70),   # job 2: 70
        stake("CollateralReleased", jobId=JOB_2, amount=20),  # job 2: 50
    ]
    assert chain_ledger.provider_stake(ALICE, history).locked == 200
    # Paid or not, a lock stays slashable until the job's collateral slash window closes.
    batch = [*history, event("JobEscrow", "JobsSettled", jobIds=[JOB_1, JOB_2])]
    view = chain_ledger.provider_stake(ALICE, batch)
    assert (view.locked, view.free) == (200, 800)
    released = [*batch, stake("CollateralReleased", jobId=JOB_1, amount=150)]
    assert chain_ledger.provider_stake(ALICE, released).locked == 50


def test_an_assignment_slash_takes_from_the_reservation_and_a_lapsed_one_reads_zero() -> None:
    history = [
        stake("Staked", amount=1_000),
        stake("CollateralReserved", amount=400, until=5_000),
        stake("CollateralLocked", jobId=JOB_2, amount=100),
        # job 1 has no lock: its assignment is backed by the reservation, which pays 60
        stake("Slashed", jobId=JOB_1, placement=7, amount=50, finderAmount=10),
        stake("Slashed", jobId=JOB_2, placement=0, amount=30, finderAmount=0),  # its lock: 30
    ]
    view = chain_ledger.provider_stake(ALICE, history)
    assert (view.bonded, view.locked, view.reserved, view.reserved_until) == (910, 70, 340,
                                                                                5_000)
    assert view.free == 840
    assert chain_ledger.provider_stake(ALICE, history, now=4_999).reserved == 340
    lapsed = chain_ledger.provider_stake(ALICE, history, now=5_000)
    assert (lapsed.reserved, lapsed.reserved_until, lapsed.free) == (0, 5_000, 840)
    raised = [*history, stake("CollateralReserved", amount=600, until=9_000)]
    assert chain_ledger.provider_stake(ALICE, raised, now=5_000).reserved == 600
    # a slash of unlocked stake (no job) leaves the reservation; a 1-wei lock pays its own slash
    edges = [*history, stake("Slashed", jobId=NO_JOB, placement=0, amount=5, finderAmount=0),
             stake("CollateralLocked", jobId=b"\x03" * 32, amount=1),
             stake("Slashed", jobId=b"\x03" * 32, placement=0, amount=1, finderAmount=0)]
    view = chain_ledger.provider_stake(ALICE, edges)
    assert (view.bonded, view.locked, view.reserved) == (904, 70, 340)


def test_the_reservation_terms_are_the_providers_last_set_and_none_before() -> None:
    history = [stake("Staked", amount=1_000)]
    assert chain_ledger.provider_stake(ALICE, history).terms is None
    history += [stake("ReservationTermsSet", ceiling=300, horizon=86_400),
                stake("CollateralReserved", amount=200, until=5_000),
                stake("ReservationTermsSet", ceiling=0, horizon=0)]
    view = chain_ledger.provider_stake(ALICE, history)
    assert (view.terms, view.reserved) == (ReservationTerms(ceiling=0, horizon_s=0), 200)


def test_a_placement_slash_takes_from_the_reservation_even_where_the_job_has_a_lock() -> None:
    history = [
        stake("Staked", amount=1_000),
        stake("CollateralReserved", amount=400, until=5_000),
        stake("CollateralLocked", jobId=JOB_1, amount=100),
        stake("Slashed", jobId=JOB_1, placement=3, amount=60, finderAmount=0),  # a placement
        stake("Slashed", jobId=JOB_1, placement=0, amount=10, finderAmount=0),  # the job lock
    ]
    view = chain_ledger.provider_stake(ALICE, history)
    assert (view.bonded, view.locked, view.reserved) == (930, 90, 340)


def test_slashes_take_stake_and_the_collateral_of_their_job_and_a_reversal_gives_it_back(
        ) -> None:
    history = [
        stake("Staked", amount=1_000),
        stake("CollateralLocked", jobId=JOB_1, amount=300),
        # a collateral slash of 100 to the customer and 20 to the finder, from job 1's lock
        stake("Slashed", jobId=JOB_1, placement=0, amount=100, finderAmount=20),
    ]
    view = chain_ledger.provider_stake(ALICE, history)
    assert (view.bonded, view.locked) == (880, 180)
    free_slash = [*history, stake("Slashed", jobId=NO_JOB, placement=0, amount=50, finderAmount=0)]
    assert chain_ledger.provider_stake(ALICE, free_slash).locked == 180  # not from a lock
    assert chain_ledger.provider_stake(ALICE, free_slash).bonded == 830
    reversed_ = [*free_slash, stake("SlashReversed", amount=50)]
    assert chain_ledger.provider_stake(ALICE, reversed_).bonded == 880


def test_a_slash_of_an_unbonding_lock_counts_once() -> None:
    history = [
        stake("Staked", amount=1_000),
        stake("UnbondRequested", amount=600),                     # bonded 400, unbonding 600
        stake("UnbondingLockSlashed", amount=200),                # the cut comes from unbonding
        # counted once, in bonded
        stake("Slashed", jobId=NO_JOB, placement=0, amount=200, finderAmount=0),
    ]
    view = chain_ledger.provider_stake(ALICE, history)
    assert (view.bonded, view.unbonding) == (400, 400)


def test_an_escrow_is_funded_then_settled_or_reclaimed_and_none_before_it_exists() -> None:
    created = event("JobEscrow", "JobCreated", jobId=JOB_1, customer=CUSTOMER, amount=900,
                    deadline=2_000_000_000, specHash=b"\x09" * 32)
    assert chain_ledger.escrowed_job(JOB_1, []) is None
    assert chain_ledger.escrowed_job(JOB_1, [event("JobEscrow", "JobSettled",
                                                   jobId=JOB_1)]) is None
    job = chain_ledger.escrowed_job(JOB_1, [created])
    assert job is not None
    assert (job.customer, job.amount, job.deadline, job.spec_hash, job.status) == (
        CUSTOMER, 900, 2_000_000_000, b"\x09" * 32, EscrowStatus.FUNDED)
    other = event("JobEscrow", "JobSettled", jobId=JOB_2)
    assert job_status([created, other]) is EscrowStatus.FUNDED
    batch = event("JobEscrow", "JobsSettled", jobIds=[JOB_2, JOB_1])
    assert job_status([created, batch]) is EscrowStatus.SETTLED
    reclaimed = event("JobEscrow", "JobReclaimed", jobId=JOB_1)
    assert job_status([created, reclaimed]) is EscrowStatus.RECLAIMED


def test_a_dispute_is_open_until_ruled_granted_dismissed_or_defaulted() -> None:
    opened = event("Disputes", "DisputeOpened", disputeId=7, opener=CUSTOMER,
                   rulingDeadline=1_700_100_000, kind=0, respondent=ALICE, bond=10,
                   subject=JOB_1, frozenAmount=400)
    assert chain_ledger.dispute(7, []) is None
    record = chain_ledger.dispute(7, [opened])
    assert record is not None
    assert (record.opener, record.respondent, record.bond, record.frozen_amount,
            record.status) == (CUSTOMER, ALICE, 10, 400, DisputeStatus.OPEN)
    granted = event("Disputes", "DisputeRuled", disputeId=7, granted=True, slashId=0,
                    evidence=bytes(32))
    dismissed = event("Disputes", "DisputeRuled", disputeId=7, granted=False, slashId=0,
                      evidence=bytes(32))
    defaulted = event("Disputes", "DisputeDefaulted", disputeId=7)
    elsewhere = event("Disputes", "DisputeDefaulted", disputeId=8)
    assert dispute_status([opened, granted]) is DisputeStatus.GRANTED
    assert dispute_status([opened, dismissed]) is DisputeStatus.DISMISSED
    assert dispute_status([opened, defaulted]) is DisputeStatus.DEFAULTED
    ruled = chain_ledger.dispute(7, [opened, elsewhere])
    assert ruled is not None and ruled.status is DisputeStatus.OPEN
    assert ruled.frozen_amount == 400


# ----- whole records: every field the fold carries, with unrelated events interleaved -------
def opened(dispute_id: int, **overrides: Any) -> ChainEvent:
    args: dict[str, Any] = {"disputeId": dispute_id, "opener": CUSTOMER, "respondent": BOB,
                            "rulingDeadline": 900, "kind": 1, "bond": 50,
                            "subject": (3).to_bytes(32, "big"), "frozenAmount": 0}
    return event("Disputes", "DisputeOpened", **(args | overrides))


def test_a_dispute_record_carries_every_field_through_its_ruling() -> None:
    expected_open = DisputeRecord(dispute_id=7, opener=CUSTOMER, ruling_deadline=900,
                                  kind=DisputeKind.SLASH, status=DisputeStatus.OPEN,
                                  respondent=BOB, bond=50, subject=(3).to_bytes(32, "big"),
                                  frozen_amount=0)
    other = opened(8, opener=BOB)  # another dispute's events, before and between
    history = [other, stake("Staked", amount=1), opened(7),
               event("Disputes", "DisputeRuled", disputeId=8, granted=True)]
    assert chain_ledger.dispute(7, history) == expected_open
    ruled = [*history, event("Disputes", "DisputeRuled", disputeId=7, granted=False)]
    assert chain_ledger.dispute(7, ruled) == DisputeRecord(
        dispute_id=7, opener=CUSTOMER, ruling_deadline=900, kind=DisputeKind.SLASH,
        status=DisputeStatus.DISMISSED, respondent=BOB, bond=50,
        subject=(3).to_bytes(32, "big"), frozen_amount=0)


def test_a_ruling_without_its_opening_is_no_dispute() -> None:
    assert chain_ledger.dispute(7, [event("Disputes", "DisputeRuled", disputeId=7,
                                          granted=True)]) is None


def test_an_escrow_record_carries_every_field_through_its_settlement() -> None:
    created = event("JobEscrow", "JobCreated", jobId=JOB_1, customer=CUSTOMER, amount=5,
                    deadline=99, specHash=b"\x03" * 32)
    noise = [stake("Staked", amount=1),  # another contract, before the job exists
             event("JobEscrow", "JobCreated", jobId=JOB_2, customer=BOB, amount=1,
                   deadline=1, specHash=bytes(32)),  # another job, before it too
             created,
             event("JobEscrow", "JobReclaimed", jobId=JOB_2),  # another job's reclaim
             event("JobEscrow", "JobSettled", jobId=JOB_2)]
    funded = EscrowedJob(job_id=JOB_1, customer=CUSTOMER, amount=5, deadline=99,
                         spec_hash=b"\x03" * 32, status=EscrowStatus.FUNDED)
    assert chain_ledger.escrowed_job(JOB_1, noise) == funded
    settled = chain_ledger.escrowed_job(JOB_1, [*noise, event("JobEscrow", "JobSettled",
                                                               jobId=JOB_1)])
    assert settled == EscrowedJob(job_id=JOB_1, customer=CUSTOMER, amount=5, deadline=99,
                                  spec_hash=b"\x03" * 32, status=EscrowStatus.SETTLED)


def test_a_stake_view_carries_its_provider_and_adds_up_over_interleaved_events() -> None:
    history = [event("JobEscrow", "JobsSettled", jobIds=(JOB_2,)),  # a job it never locked
               stake("Staked", amount=100),
               stake("UnbondRequested", amount=10),
               stake("UnbondRequested", amount=20),
               stake("Staked", provider=BOB, amount=7),
               stake("CollateralLocked", jobId=JOB_1, amount=30)]
    assert chain_ledger.provider_stake(ALICE, history) == ProviderStake(
        provider=ALICE, bonded=70, locked=30, unbonding=30, tier=int(Tier.BACKGROUND))
