"""When the agent's loop runs re-checks of other providers' results before its own leases."""

from __future__ import annotations

from agent.daemon import CheckPacing
from tests.clients import VirtualClock


def test_a_recheck_goes_first_only_once_the_pace_since_the_last_ask_has_passed() -> None:
    clock = VirtualClock()
    pacing = CheckPacing(60.0, clock)
    assert not pacing.due()  # a fresh agent pulls its lease first
    clock.advance(59.0)
    assert not pacing.due()
    clock.advance(1.0)
    assert pacing.due()
    pacing.asked()  # it asked (a check first, or a pull that found no lease and then a check)
    assert not pacing.due()
    clock.advance(60.0)
    assert pacing.due()
