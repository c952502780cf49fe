"""Value types shared by the pure domain modules (matching, reliability, policy, simulation).

Times are seconds (float) on whatever clock the caller runs: wall time in the
service, the virtual clock in the churn simulator. Money is integer token
units (wei of the stake/payment ERC-20).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum, StrEnum

TOKEN_DECIMALS = 18  # the stake/payment ERC-20's (TestToken's)


def show_tokens(units: int) -> str:
    """Token units as a person reads them: whole tokens, the decimals it needs (`1.5`)."""
    whole = Decimal(units) / 10**TOKEN_DECIMALS
    return f"{whole.normalize():f}"


class Tier(IntEnum):
    """Provider tier, same numbering as `IStakeManager.Tier` on chain."""

    BACKGROUND = 0  # demoted or unproven: low-priority work only
    STANDARD = 1  # default for a staked node
    HIGH = 2  # fresh PoPW handshake and sustained reliability


class SlashReason(IntEnum):
    """Why stake was slashed; same numbering as `IStakeManager.SlashReason` on chain."""

    LOW_SCORE = 0  # RS under the threshold for a sustained window (slashForScore)
    ABANDONMENT = 1  # a task lost because its node departed
    FAILED_VERIFICATION = 2  # a result that failed a spot check or redundancy vote
    OTHER = 3


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"  # needs a fresh PoPW handshake and Tier.HIGH


class NodeHealth(StrEnum):
    ALIVE = "alive"
    SUSPECT = "suspect"  # a gap the failure detector does not yet call a departure: lease kept
    DEAD = "dead"  # departure: leases are revoked and tasks resume elsewhere


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What the scheduler knows of one GPU node when placing work."""

    node_id: str
    provider: str  # checksummed wallet address that stakes for this node
    gpu_model: str
    vram_gb: int
    compute_capability: float
    region: str
    price_per_gpu_hour: int  # token units the node asks per GPU-hour
    slots: int  # concurrent GPU slots (one lease per slot)
    tier: Tier = Tier.STANDARD


@dataclass(frozen=True, slots=True)
class TaskNeeds:
    """What one task requires of a node, and what it is worth."""

    min_vram_gb: int = 0
    gpu_models: frozenset[str] | None = None  # None: any model
    regions: frozenset[str] | None = None  # None: any region
    # Checksummed provider addresses the customer trusts with the scene (None: any provider)
    providers: frozenset[str] | None = None
    # Providers whose result of this task failed verification: it never goes back to them
    excluded_providers: frozenset[str] = frozenset()
    max_price_per_gpu_hour: int | None = None
    priority: Priority = Priority.NORMAL
    expected_duration_s: float = 60.0
    value: int = 0  # token units the customer pays for this task
    # The job's longest task, in the same reference seconds: the job's result waits for it,
    # so this task may run that long on a slower node without delaying anyone. 0: its own.
    critical_path_s: float = 0.0
