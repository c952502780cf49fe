"""Rows written straight to the DB for tests that are not about how they got there: registered
nodes, and funded jobs whose escrow is not what the test checks."""

from __future__ import annotations

import itertools

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db.placement import Reservation, commit_reservations
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import NodeSpec, TaskNeeds, Tier

PROVIDER = "0x" + "a" * 40
CUSTOMER = "0x" + "c" * 40
TOKEN = 10**18
_job_numbers = itertools.count(1)


def node_spec(node_id: str, **overrides: object) -> NodeSpec:
    fields: dict[str, object] = {
        "node_id": node_id, "provider": PROVIDER, "gpu_model": "RTX4090", "vram_gb": 24,
        "compute_capability": 8.9, "region": "eu", "price_per_gpu_hour": 100, "slots": 2,
        "tier": Tier.STANDARD}
    fields.update(overrides)
    return NodeSpec(**fields)  # type: ignore[arg-type]


def make_nodes(factory: sessionmaker[Session], count: int, *, slots: int = 2,
               prefix: str = "node", now: float = 0.0, **overrides: object) -> list[str]:
    """`count` registered nodes `{prefix}-{i}` of `node_spec` with `overrides`; their ids."""
    ids = [f"{prefix}-{i}" for i in range(count)]
    with factory.begin() as session:
        for node_id in ids:
            node_db.register_node(session, spec=node_spec(node_id, slots=slots, **overrides),
                               now=now)
    return ids


def make_job(factory: sessionmaker[Session], tasks: int = 1, *, value: int | None = None,
             needs: TaskNeeds | None = None, now: float = 0.0, deadline: float = 1e12,
             customer: str = CUSTOMER, job_id: str | None = None) -> str:
    """A funded job of `tasks` tasks; its id. Each task pays `value` (by default what `needs`
    says); the escrow holds what the tasks pay, or one token when they pay nothing."""
    needs = needs or TaskNeeds(value=value or 0)
    per_task = needs.value if value is None else value
    job_id = job_id or "0x" + f"{next(_job_numbers):064x}"
    with factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id=job_id, customer=customer, spec={"kind": "command"}, spec_hash="0x" + "0" * 64,
            amount=per_task * tasks or TOKEN, deadline=deadline, needs=needs,
            payloads=tuple({"frame": i} for i in range(tasks))), now=now, status=JobStatus.FUNDED)
    return job_id


def lease_to(factory: sessionmaker[Session], node_id: str, *, now: float = 0.0) -> int:
    """A one-task job reserved for `node_id` in its slot 0 (a lease the node holds, as a
    placement leaves it); the task's id. For tests about what a leaseholder may do."""
    job_id = make_job(factory, now=now)
    with factory.begin() as session:
        (task,) = job_db.job_tasks(session, job_id=job_id)
        commit_reservations(session, reservations=[
            Reservation(task.id, job_id, node_id, 0, task.status)], now=now, ttl_s=3600.0)
        return task.id
