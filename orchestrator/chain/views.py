"""Plain read models of on-chain state, free of web3 types so any layer may hold them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


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
class ProviderStake:
    provider: str
    bonded: int  # stake that backs work (includes locked collateral)
    locked: int  # part of bonded locked as collateral for unsettled jobs
    unbonding: int  # requested for withdrawal, still slashable
    tier: int  # orchestrator.domain.types.Tier value

    @property
    def free(self) -> int:
        """Stake the provider can still lock as collateral for new work."""
        return self.bonded - self.locked
