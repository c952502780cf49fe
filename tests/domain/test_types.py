"""`domain.types.show_tokens`: token units as a person reads them."""

from __future__ import annotations

import pytest

from orchestrator.domain.types import show_tokens


@pytest.mark.parametrize(("units", "shown"), [
    (10**18, "1"), (15 * 10**17, "1.5"), (1, "0.000000000000000001"), (0, "0"),
    (12_345 * 10**18, "12345"), (10**18 + 10**15, "1.001")])
def test_whole_tokens_with_only_the_decimals_they_need(units: int, shown: str) -> None:
    assert show_tokens(units) == shown
