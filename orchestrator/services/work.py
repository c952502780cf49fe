"""Work and sweeps: a verified job accepted (its settlement queued, each task's attempt a
completed outcome for PLS), the failure/lease sweep handed on to PLS, and the escrow sync of
settling jobs, each with its metrics and logs. Routes and the leader's periodic jobs share
them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from orchestrator.db import crud, work
from orchestrator.db.models import Job, Lease, Node, Task
from orchestrator.domain.chain_views import EscrowedJob
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_ingest import SweepFacts
from orchestrator.telemetry.metrics import MeshMetrics

log = logging.getLogger("orchestrator")


@dataclass(frozen=True, slots=True)
class Grant:
    """A lease a node pulled, its task, and the checkpoint interval PLS sets for it."""

    lease: Lease
    task: Task
    checkpoint_interval_s: float
    fresh: bool  # placed by this pull (not an earlier reservation handed out again)


def pull_lease(session: Session, *, node: Node, pls: PlsService, pls_placement: bool,
               reservation_ttl_s: float, now: float) -> Grant | None:
    """The node's next lease (placed through the PLS gate when `pls_placement`), or None."""
    lease = work.pull_lease(session, node=node, now=now, reservation_ttl_s=reservation_ttl_s,
                            gate=pls if pls_placement else None)
    if lease is None:
        return None
    task = crud.get_task(session, task_id=lease.task_id)
    if task is None:
        raise RuntimeError(f"lease {lease.id} names a task that does not exist")
    interval = pls.checkpoint_interval_s(node.id, now,
                                         crud.needs_from_json(task.needs).expected_duration_s)
    return Grant(lease, task, interval, fresh=lease.created_at == now)


def accept_job(session: Session, *, job: Job, pls: PlsService, now: float) -> None:
    """Verified: queue the settlement (exactly once) and tell PLS every placed task finished."""
    work.accept_job(session, job=job, now=now)
    for task in crud.job_tasks(session, job_id=job.id):
        if task.node_id is not None:
            pls.task_outcome(session, node_id=task.node_id, task_id=task.id,
                             outcome=TaskOutcome.COMPLETED, now=now)


def sweep_facts(result: work.SweepResult) -> SweepFacts:
    """A drained node left cleanly and a held one went silent with its peers (`LeaseHold`):
    neither session ends in a departure of the node's own."""
    own = set(result.dead_nodes) - result.draining_dead - set(result.held)
    return SweepFacts(dead=[(node_id, node_id in own) for node_id in result.dead_nodes],
                      abandoned=result.abandoned, returned=result.returned, held=result.held)


def sweep(session: Session, *, detector: PhiAccrualDetector, pls: PlsService,
          metrics: MeshMetrics, now: float) -> work.SweepResult:
    """Expire lapsed leases, call silent nodes dead (keeping the leases of a shared silence),
    and tell PLS what happened."""
    result = work.sweep(session, detector=detector, now=now, lease_holds=pls.lease_holds)
    pls.after_sweep(session, facts=sweep_facts(result), now=now)
    metrics.node_failures.inc(len(result.dead_nodes))
    metrics.retries.labels("lapsed").inc(result.expired_leases)
    metrics.retries.labels("dead").inc(result.revoked)
    if result.dead_nodes:
        log.warning("nodes declared dead: %s (%d tasks moved)", result.dead_nodes,
                    result.revoked)
    return result


def sync_escrow(session: Session, *, read_escrow: Callable[[bytes], EscrowedJob | None],
                metrics: MeshMetrics, now: float) -> work.SettlementSync:
    """Confirm the settlements the chain shows; flag jobs whose chain state diverges."""
    result = work.sync_settlements(session, read_escrow=read_escrow, now=now)
    for _, lag in result.settled:
        metrics.settlement_lag.observe(lag)
    metrics.divergence.inc(len(result.diverged))
    if result.diverged:
        log.error("chain state diverges from ours for jobs %s", result.diverged)
    return result
