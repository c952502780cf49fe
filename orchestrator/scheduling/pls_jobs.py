"""Periodic Predictive Latency Staking work, each run under its leader lock: staking decisions
(RS observations, slashes, demotions) and epoch score commitments; plus the hand-off from a
failure sweep to the staking side."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from orchestrator.db.work import SweepResult
from orchestrator.telemetry.pls_service import PlsService, SweepFacts

log = logging.getLogger("orchestrator.pls")


def sweep_facts(result: SweepResult) -> SweepFacts:
    """A drained node left cleanly and a held one went silent with its peers (`LeaseHold`):
    neither session ends in a departure of the node's own."""
    own = set(result.dead_nodes) - result.draining_dead - set(result.held)
    return SweepFacts(dead=[(node_id, node_id in own) for node_id in result.dead_nodes],
                      abandoned=result.abandoned, returned=result.returned)


def after_sweep(pls: PlsService, session: Session, result: SweepResult, now: float) -> None:
    pls.after_sweep(session, facts=sweep_facts(result), now=now)


def decide(pls: PlsService, session: Session, now: float) -> None:
    result = pls.decide(session, now=now)
    for slash in result.slashes:
        log.warning("slash decided: node %s reason %s amount %d (%s)", slash.node_id,
                    slash.reason.name, slash.amount, slash.detail)
    for node_id, tier in result.tiers:
        log.info("node %s tier -> %s", node_id, tier.name)


def close_last_epoch(pls: PlsService, session: Session, now: float) -> None:
    """Close the epoch that ended most recently (idempotent: a closed epoch is skipped)."""
    epoch = pls.epoch_of(now) - 1
    if epoch < 0:
        return
    root = pls.close_epoch(session, epoch=epoch, now=now)
    if root is not None:
        log.info("epoch %d closed, root 0x%s queued", epoch, root.hex())
