"""`outbox.queue_actions`: a batch of typed chain actions queued exactly once per key, in order,
in one read and one INSERT."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import outbox
from orchestrator.db.models import OutboxAction
from orchestrator.domain.chain_actions import ReserveCollateral, decode

PROVIDER = "0x" + "ab" * 20


def reserve(amount: int) -> ReserveCollateral:
    return ReserveCollateral(provider=PROVIDER, amount=amount, until=1_000)


def test_a_batch_is_queued_once_per_key_in_order_and_decodes_as_it_was_made(
        factory: sessionmaker[Session]) -> None:
    with factory.begin() as session:
        assert outbox.queue_action(session, action=reserve(1), idempotency_key="k1", now=1.0)
    with factory.begin() as session:
        queued = outbox.queue_actions(session, actions=[
            ("k1", reserve(10)), ("k2", reserve(2)), ("k3", reserve(3)), ("k2", reserve(20))],
            now=2.0)
    assert queued == ["k2", "k3"]  # k1 was queued before; k2's repeat counts once
    with factory() as session:
        rows = list(session.scalars(select(OutboxAction).order_by(OutboxAction.id)))
    assert [(r.idempotency_key, r.status, r.created_at) for r in rows] == [
        ("k1", "pending", 1.0), ("k2", "pending", 2.0), ("k3", "pending", 2.0)]
    assert [decode(r.kind, r.payload) for r in rows] == [reserve(1), reserve(2), reserve(3)]
