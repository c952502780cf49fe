"""`mesh bench reorg` on a short seeded run that includes a reorg deeper than the margin:
nothing lost, duplicated or paid twice, and every dropped orchestrator transaction found."""

from __future__ import annotations

import pytest

from mesh.bench import reorg

pytestmark = pytest.mark.anvil


def test_a_short_reorg_run_loses_repeats_and_double_pays_nothing() -> None:
    result = reorg.run(seed=3, rounds=4, margin=3, deep_every=2)
    assert result["reorgs"] == 4 and result["deep_reorgs"] == 2
    assert result["max_depth"] > 3 and result["final_events_dropped"] > 0
    assert result["events_on_chain"] > 0
    assert (result["events_lost"], result["events_duplicated"], result["double_payments"]) == (
        0, 0, 0)
    assert result["dropped_detected"] == result["orchestrator_txs_dropped"] > 0
    assert result["detected_but_on_chain"] == 0
