"""EIP-1559 fees for the outbox sender: the first offer for a transaction, and the bump that
replaces one stuck in the pool.

Nodes (geth, anvil, reth) accept a transaction at a nonce already in their pool only when both
`maxFeePerGas` and `maxPriorityFeePerGas` rise by at least 10 % (geth's default price bump);
12.5 % is what a block's base fee can rise by at most, so a bump of 12.5 % both passes every
node's replacement rule and keeps pace with one full block of base-fee growth.
"""

from __future__ import annotations

from dataclasses import dataclass

BUMP_NUMERATOR, BUMP_DENOMINATOR = 9, 8  # x 1.125


@dataclass(frozen=True, slots=True)
class Fees:
    max_fee_per_gas: int  # wei
    max_priority_fee_per_gas: int  # wei


def _bumped(wei: int) -> int:
    """At least 12.5 % more, rounded up, and at least one wei more (a zero tip still rises)."""
    return max(-(-wei * BUMP_NUMERATOR // BUMP_DENOMINATOR), wei + 1)


@dataclass(frozen=True, slots=True)
class FeePolicy:
    priority_fee_wei: int  # the tip offered at first
    max_fee_cap_wei: int  # never offer more than this per gas, bump or not

    def initial(self, base_fee_wei: int) -> Fees:
        """Twice the next block's base fee plus the tip (survives six full blocks of base-fee
        growth), within the cap."""
        tip = min(self.priority_fee_wei, self.max_fee_cap_wei)
        return Fees(max_fee_per_gas=min(2 * base_fee_wei + tip, self.max_fee_cap_wei),
                    max_priority_fee_per_gas=tip)

    def replacement(self, sent: Fees, base_fee_wei: int) -> Fees | None:
        """Fees for a transaction that replaces `sent` at the same nonce: both fields at least
        12.5 % up, and the cap at least twice today's base fee plus the new tip (what a fresh
        transaction would offer, within the fee cap). None when the cap leaves no room for a
        bump a node would accept (the old one keeps waiting)."""
        tip = max(_bumped(sent.max_priority_fee_per_gas),
                  min(self.priority_fee_wei, self.max_fee_cap_wei))
        max_fee = max(_bumped(sent.max_fee_per_gas),
                      min(2 * base_fee_wei + tip, self.max_fee_cap_wei))
        if max_fee > self.max_fee_cap_wei:
            return None
        return Fees(max_fee_per_gas=max_fee, max_priority_fee_per_gas=tip)
