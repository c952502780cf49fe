"""What one unit of an outbox pass did (`Tally`): the currency every seam of a pass writes to
and the sender counts in metrics and broadcasts from once the pass has committed."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.chain.tx import SignedTx


@dataclass
class Tally:
    """What one unit of a pass did; counted in metrics only once its writes are kept."""

    signed: list[tuple[str, SignedTx]] = field(default_factory=list)
    replaced: list[tuple[str, SignedTx]] = field(default_factory=list)
    gap_fillers: int = 0
    nonce_checked: set[str] = field(default_factory=set)  # keys whose nonce met the chain
    confirmed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    settlement_lags: list[float] = field(default_factory=list)
    transient: int = 0
    blocked: bool = False  # an in-flight transaction is unaccounted for: sign nothing new
    # A transaction ahead in the queue is not mined yet, so a revert seen now may only mean
    # "its effect is missing" (a slash estimated before its lock landed): not a verdict.
    unmined_ahead: bool = False

    def merge(self, other: Tally) -> None:
        self.signed += other.signed
        self.replaced += other.replaced
        self.gap_fillers += other.gap_fillers
        self.nonce_checked |= other.nonce_checked
        self.confirmed += other.confirmed
        self.failed += other.failed
        self.settlement_lags += other.settlement_lags
        self.transient += other.transient
        self.blocked = self.blocked or other.blocked
        self.unmined_ahead = self.unmined_ahead or other.unmined_ahead
