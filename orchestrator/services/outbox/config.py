"""The outbox sender's knobs (`SenderConfig`), read by every seam of a pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.domain.fees import FeePolicy

GWEI = 10**9


@dataclass(frozen=True, slots=True)
class SenderConfig:
    confirmations: int = 0  # blocks mined on top of the receipt's block before `confirmed`
    replace_after_s: float = 60.0  # unmined this long after signing: replace with a fee bump
    fees: FeePolicy = field(default_factory=lambda: FeePolicy(
        priority_fee_wei=GWEI, max_fee_cap_wei=500 * GWEI))
    settle_batch_size: int = 50  # jobs per settleBatch or assignment root (settle: ~15k gas/job)
    max_rows: int = 500  # rows looked at per phase and pass
    backoff_base_s: float = 1.0
    backoff_max_s: float = 300.0
