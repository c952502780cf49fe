"""The dashboard's read of the service (services/dashboard.py), through GET /v1/dashboard:
what a person needs to act on is in the row, not only in the service's log."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db.models import OutboxAction, SlashRecord
from orchestrator.domain.types import SlashReason
from orchestrator.services.pls_staking import SLASH_KEY

REFUSED = "StakeManagerInsufficientStake(provider=0x00000000000000000000000000000000000000aa)"


def test_aSlashTheChainRefused_showsWhy(factory: sessionmaker[Session],
                                        client: TestClient) -> None:
    """Before: `failed —`, with the contract's reason only in the outbox row."""
    with factory.begin() as session:
        session.add(SlashRecord(slash_id="0x" + "11" * 32, node_id="gpu-1",
                                provider="0x" + "aa" * 20, reason=int(SlashReason.ABANDONMENT),
                                amount=10**18, evidence="0x" + "22" * 32, task_id=None,
                                decided_at=1.0, epoch=None, detail="departed holding task 7"))
        session.add(OutboxAction(idempotency_key=SLASH_KEY + "0x" + "11" * 32, kind="slash",
                                 payload={}, status="failed", attempts=1, created_at=1.0,
                                 updated_at=2.0, note=REFUSED))
    (shown,) = client.get("/v1/dashboard").json()["slashes"]
    assert (shown["chain_status"], shown["tx_hash"], shown["chain_note"]) == (
        "failed", None, REFUSED)
