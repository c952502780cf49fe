"""EIP-1559 fee offers: a replacement is accepted by nodes only if BOTH fees rise >= 12.5 %
(geth requires 10 %), and no offer ever passes the cap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.fees import FeePolicy, Fees
from tests.conftest import examples

GWEI = 10**9
wei = st.integers(min_value=0, max_value=10**6 * GWEI)


def test_first_offer_is_twice_the_base_fee_plus_the_tip_within_the_cap() -> None:
    policy = FeePolicy(priority_fee_wei=GWEI, max_fee_cap_wei=50 * GWEI)
    assert policy.initial(7 * GWEI) == Fees(15 * GWEI, GWEI)
    assert policy.initial(40 * GWEI) == Fees(50 * GWEI, GWEI)  # capped


def test_a_bump_rounds_up_and_moves_even_a_zero_tip() -> None:
    policy = FeePolicy(priority_fee_wei=0, max_fee_cap_wei=10**30)
    assert policy.replacement(Fees(9, 0), base_fee_wei=0) == Fees(11, 1)  # 9 x 1.125 = 10.1
    assert policy.replacement(Fees(8 * GWEI, 0), base_fee_wei=0) == Fees(9 * GWEI, 1)


def test_a_bump_follows_a_base_fee_that_rose_past_it() -> None:
    policy = FeePolicy(priority_fee_wei=GWEI, max_fee_cap_wei=10**30)
    assert policy.replacement(Fees(3 * GWEI, GWEI), base_fee_wei=10 * GWEI) == Fees(
        20 * GWEI + GWEI * 9 // 8, GWEI * 9 // 8)  # 2 x base fee + the bumped tip


@settings(max_examples=examples(200))
@given(max_fee=wei, tip=wei, base_fee=wei, cap=wei)
def test_replacement_raises_both_fees_by_an_eighth_or_gives_up_at_the_cap(
        max_fee: int, tip: int, base_fee: int, cap: int) -> None:
    sent = Fees(max_fee_per_gas=max(max_fee, tip), max_priority_fee_per_gas=tip)
    policy = FeePolicy(priority_fee_wei=GWEI, max_fee_cap_wei=cap)
    bumped = policy.replacement(sent, base_fee)
    least = max(-(-sent.max_fee_per_gas * 9 // 8), sent.max_fee_per_gas + 1)
    if bumped is None:
        assert least > cap  # only the cap stops a bump
        return
    assert bumped.max_fee_per_gas * 8 >= sent.max_fee_per_gas * 9
    assert bumped.max_priority_fee_per_gas * 8 >= sent.max_priority_fee_per_gas * 9
    assert bumped.max_fee_per_gas > sent.max_fee_per_gas
    assert bumped.max_priority_fee_per_gas > sent.max_priority_fee_per_gas
    assert bumped.max_priority_fee_per_gas <= bumped.max_fee_per_gas <= cap

