"""The service's settings (`orchestrator/config.py`) where one depends on another."""

from __future__ import annotations

from orchestrator.config import Settings


def test_a_local_dev_chain_is_final_at_once_unless_told_otherwise() -> None:
    assert (Settings(chain_id=31337).chain_reorg_margin,
            Settings(chain_id=31337).chain_finality_tag) == (0, "none")
    assert (Settings(chain_id=1).chain_reorg_margin,
            Settings(chain_id=1).chain_finality_tag) == (12, "finalized")
    assert Settings(chain_id=31337, chain_reorg_margin=3).chain_reorg_margin == 3
    assert Settings(chain_id=1337, chain_finality_tag="safe").chain_finality_tag == "safe"
