"""Chain state folded from indexed events: the orchestrator's own view of free stake, escrows
and disputes, which needs no call to the chain and follows reorgs as the index does.

Each fold takes one subject's events in chain order (`ChainEvent.key`) and mirrors what the
contracts do to their storage when they emit them (contracts/StakeManager.sol, JobEscrow.sol,
Disputes.sol). Calls to the chain remain for checks at the moment of a decision.
"""

from __future__ import annotations

from collections.abc import Iterable

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

STAKE = "StakeManager"
ESCROW = "JobEscrow"
DISPUTES = "Disputes"


def provider_stake(provider: str, events: Iterable[ChainEvent], *,
                   now: int | None = None) -> ProviderStake:
    """Bonded, locked, reserved and unbonding stake, tier and reservation terms of `provider`
    after `events`, its own StakeManager events.

    Settlement touches no collateral: a job lock is released only by `CollateralReleased`
    (after the job's collateral slash window). A collateral slash names what it took from:
    placement 0 is the job's lock, any other placement the standing reservation. The
    reservation counts until `reserved_until`; given the chain's `now`, a lapsed one is 0, as
    the contract reports it."""
    bonded = unbonding = reserved = reserved_until = 0
    locks: dict[bytes, int] = {}  # job id -> collateral still locked for it
    tier = int(Tier.BACKGROUND)  # the contract's zero value, until a TierChanged
    terms: ReservationTerms | None = None
    for event in events:
        args, name = event.args, event.name
        if event.contract != STAKE or args.get("provider") != provider:
            continue
        if name == "Staked":
            bonded += args["amount"]
        elif name == "UnbondRequested":
            bonded -= args["amount"]
            unbonding += args["amount"]
        elif name == "UnbondCancelled":
            bonded += args["amount"]
            unbonding -= args["amount"]
        elif name == "Withdrawn":
            unbonding -= args["amount"]
        elif name == "CollateralLocked":
            locks[args["jobId"]] = locks.get(args["jobId"], 0) + args["amount"]
        elif name == "CollateralReleased":
            locks[args["jobId"]] = locks.get(args["jobId"], 0) - args["amount"]
        elif name == "UnbondingLockSlashed":
            # The slash takes this cut from an unbonding lock; the Slashed event that follows
            # in the same transaction counts the whole amount against bonded stake.
            unbonding -= args["amount"]
            bonded += args["amount"]
        elif name == "CollateralReserved":
            reserved, reserved_until = args["amount"], args["until"]
        elif name == "ReservationTermsSet":
            terms = ReservationTerms(args["ceiling"], args["horizon"])
        elif name == "Slashed":
            taken = args["amount"] + args["finderAmount"]
            bonded -= taken
            job_id = args["jobId"]
            if job_id != bytes(32) and args["placement"] == 0:  # of the job's lock
                locks[job_id] = locks.get(job_id, 0) - taken
            elif job_id != bytes(32):  # of a placement, which the reservation backs
                reserved -= taken
        elif name == "SlashReversed":
            bonded += args["amount"]
        elif name == "TierChanged":
            tier = args["newTier"]
    live = now is None or reserved_until > now
    return ProviderStake(provider=provider, bonded=bonded, locked=sum(locks.values()),
                         unbonding=unbonding, tier=tier, reserved=reserved if live else 0,
                         reserved_until=reserved_until, terms=terms)


def escrowed_job(job_id: bytes, events: Iterable[ChainEvent]) -> EscrowedJob | None:
    """The escrow of `job_id` after `events`, or None before its JobCreated."""
    job: EscrowedJob | None = None
    for event in events:
        if event.contract != ESCROW:
            continue
        args, name = event.args, event.name
        if name == "JobCreated" and args["jobId"] == job_id:
            job = EscrowedJob(job_id=job_id, customer=args["customer"], amount=args["amount"],
                              deadline=args["deadline"], spec_hash=args["specHash"],
                              status=EscrowStatus.FUNDED)
        elif job is None:
            continue
        elif ((name == "JobSettled" and args["jobId"] == job_id)
              or (name == "JobsSettled" and job_id in args["jobIds"])):
            job = _with_status(job, EscrowStatus.SETTLED)
        elif name == "JobReclaimed" and args["jobId"] == job_id:
            job = _with_status(job, EscrowStatus.RECLAIMED)
    return job


def _with_status(job: EscrowedJob, status: EscrowStatus) -> EscrowedJob:
    return EscrowedJob(job_id=job.job_id, customer=job.customer, amount=job.amount,
                       deadline=job.deadline, spec_hash=job.spec_hash, status=status)


def dispute(dispute_id: int, events: Iterable[ChainEvent]) -> DisputeRecord | None:
    """Dispute `dispute_id` after `events`, or None before its DisputeOpened."""
    record: DisputeRecord | None = None
    for event in events:
        if event.contract != DISPUTES or event.args.get("disputeId") != dispute_id:
            continue
        args = event.args
        if event.name == "DisputeOpened":
            record = DisputeRecord(dispute_id=dispute_id, opener=args["opener"],
                                   ruling_deadline=args["rulingDeadline"],
                                   kind=DisputeKind(args["kind"]), status=DisputeStatus.OPEN,
                                   respondent=args["respondent"], bond=args["bond"],
                                   subject=args["subject"],
                                   frozen_amount=args["frozenAmount"])
        elif record is not None and event.name in ("DisputeRuled", "DisputeDefaulted"):
            status = (DisputeStatus.DEFAULTED if event.name == "DisputeDefaulted"
                      else DisputeStatus.GRANTED if args["granted"] else DisputeStatus.DISMISSED)
            record = DisputeRecord(dispute_id=dispute_id, opener=record.opener,
                                   ruling_deadline=record.ruling_deadline, kind=record.kind,
                                   status=status, respondent=record.respondent,
                                   bond=record.bond, subject=record.subject,
                                   frozen_amount=record.frozen_amount)
    return record
