"""Plain read models of on-chain state, free of web3 types so any layer may hold them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from orchestrator.domain.types import SlashReason


class EscrowStatus(IntEnum):
    """Same numbering as `IJobEscrow.JobStatus`."""

    NONE = 0
    FUNDED = 1
    SETTLED = 2
    RECLAIMED = 3


@dataclass(frozen=True, slots=True)
class EscrowedJob:
    job_id: bytes  # 32 bytes
    customer: str  # checksummed address
    amount: int  # token units held in escrow
    deadline: int  # unix seconds; reclaimable after deadline + grace
    spec_hash: bytes  # 32 bytes: keccak of the canonical job spec
    status: EscrowStatus


@dataclass(frozen=True, slots=True)
class ReservationTerms:
    """What a provider lets the orchestrator reserve of its stake: a reservation raised or
    extended is at most `ceiling`, lapsing at most `horizon_s` after the raise."""

    ceiling: int  # token units
    horizon_s: int


@dataclass(frozen=True, slots=True)
class ProviderStake:
    provider: str
    bonded: int  # stake that backs work (includes locked collateral)
    locked: int  # part of bonded locked for single jobs (`lockCollateral`)
    unbonding: int  # requested for withdrawal, still slashable
    tier: int  # orchestrator.domain.types.Tier value
    reserved: int = 0  # the live standing reservation, part of bonded, backing assignments
    reserved_until: int = 0  # unix seconds the reservation lapses
    # The provider's reservation terms (`setReservationTerms`); None: it set none, and only its
    # free stake and MAX_PERIOD bound a reservation.
    terms: ReservationTerms | None = None

    @property
    def free(self) -> int:
        """Stake that may back new assignments, reserved already or not (the orchestrator
        subtracts the collateral of its open assignments, which only it knows)."""
        return self.bonded - self.locked


@dataclass(frozen=True, slots=True)
class UnbondingLock:
    lock_id: int  # per provider, from 0
    amount: int  # stake requested out; payout capped by what slashing left
    withdrawable_at: int  # unix seconds from which `withdraw` pays it


class SlashStatus(IntEnum):
    """Same numbering as `IStakeManager.SlashStatus`."""

    NONE = 0
    PENDING = 1  # proceeds held until releasable_at
    FROZEN = 2  # disputed, held until the arbiter rules
    RELEASED = 3
    REVERSED = 4


@dataclass(frozen=True, slots=True)
class SlashRecord:
    slash_id: int
    provider: str
    releasable_at: int  # end of the dispute window
    status: SlashStatus
    reason: SlashReason
    beneficiary: str  # injured customer, or the treasury
    amount: int  # beneficiary's share
    finder: str  # who proved the fault, or the zero address
    finder_amount: int
    evidence: bytes  # 32 bytes: hash of the evidence
    prior_tier: int  # the provider's tier before the slash (Tier value); a reversal restores it


@dataclass(frozen=True, slots=True)
class EscrowBalance:
    """One account's money inside JobEscrow (`IJobEscrow.Balance`)."""

    claimable: int  # can be claimed now
    pending: int  # credited by settlement, claimable from release_at
    release_at: int  # unix seconds
    frozen: int  # held by an open dispute


class DisputeKind(IntEnum):
    """Same numbering as `IDisputes.DisputeKind`."""

    SETTLEMENT = 0  # subject: the job id
    SLASH = 1  # subject: the slash id as bytes32


class DisputeStatus(IntEnum):
    """Same numbering as `IDisputes.DisputeStatus`."""

    NONE = 0
    OPEN = 1
    GRANTED = 2  # ruled for the opener
    DISMISSED = 3  # ruled for the respondent
    DEFAULTED = 4  # no ruling in time: status quo, bond returned


@dataclass(frozen=True, slots=True)
class DisputeRecord:
    dispute_id: int
    opener: str  # posted the bond
    ruling_deadline: int  # unix seconds; after it anyone applies the default
    kind: DisputeKind
    status: DisputeStatus
    respondent: str  # wins the bond if dismissed
    bond: int
    subject: bytes  # 32 bytes: job id or slash id
    frozen_amount: int  # settlement disputes: payout frozen on the escrow
