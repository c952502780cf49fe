"""The history checker: after a run (`mesh bench chaos`, a restore, any test), read the DB,
the chain's events and its balances, and count every way money or work went wrong.

Kinds of violation (each counted; none is the only passing result):
- `paid_twice`: a job settled more than once on chain.
- `unpaid`: the service completed a job (completed/settling/settled) that the chain never settled.
- `paid_not_completed`: the chain settled a job the service never completed.
- `balance_mismatch`: the escrow's tokens differ from what it owes (funded jobs, refunds, and
  every account's claimable + pending), or the token's supply from the sum of its holders.
- `job_lost`: a job escrowed on chain that the service does not know.
- `task_lost`: a job without all of its spec's tasks, or a completed job with a task not done.
- `double_lease`: two leases on one GPU slot, or of one task, live at the same time.
- `honest_slashed`: a slash (decided in the DB or executed on chain) of a provider the run
  never faulted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from mesh.bench.reorg import canonical_events
from orchestrator.api.schemas import JobSpec
from orchestrator.chain.indexer import ChainIndexReader
from orchestrator.chain.sdk import MeshChain
from orchestrator.db import history
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.ids import JobId

KINDS = ("paid_twice", "unpaid", "paid_not_completed", "balance_mismatch", "job_lost",
         "task_lost", "double_lease", "honest_slashed")
COMPLETED = {"completed", "settling", "settled"}
TASK_DONE = {"done", "verified"}


@dataclass
class HistoryReport:
    counts: dict[str, int]
    violations: dict[str, int]
    details: list[str] = field(default_factory=list)  # one line per violation found

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def expected_tasks(spec: dict[str, Any]) -> int | None:
    """How many tasks the job's spec makes: shards of a command, frames x tiles of a render."""
    try:
        workload = JobSpec.model_validate(spec).workload
    except ValueError:
        return None  # a spec the service took in another shape: nothing to compare with
    return workload.task_count


def _settled_jobs(events: Iterable[ChainEvent]) -> Counter[str]:
    settled: Counter[str] = Counter()
    for event in events:
        if event.name == "JobSettled":
            settled[JobId.of(bytes(event.args["jobId"]))] += 1
        elif event.name == "JobsSettled":
            for job_id in event.args["jobIds"]:
                settled[JobId.of(bytes(job_id))] += 1
    return settled


def _overlaps(spans: list[tuple[float, float]]) -> int:
    """Pairs of [start, end) intervals, sorted by start, that overlap their predecessor."""
    found, latest_end = 0, float("-inf")
    for start, end in sorted(spans):
        if start < latest_end:
            found += 1
        latest_end = max(latest_end, end)
    return found


def check(factory: sessionmaker[Session], chain: MeshChain, *,
          faulted_providers: Collection[str] = ()) -> HistoryReport:
    """Everything above over the whole history; `faulted_providers` are those whose agents
    the run killed or cut off (an abandonment slash of them is the design, not a fault)."""
    faulted = {p.lower() for p in faulted_providers}
    violations: Counter[str] = Counter({kind: 0 for kind in KINDS})
    details: list[str] = []

    def bad(kind: str, line: str) -> None:
        violations[kind] += 1
        details.append(f"{kind}: {line}")

    reader = ChainIndexReader(chain, finality_tag="none")
    events = canonical_events(reader, int(chain.w3.eth.block_number))
    settled = _settled_jobs(events)
    created: dict[str, int] = {JobId.of(bytes(e.args["jobId"])): int(e.args["amount"])
               for e in events if e.name == "JobCreated"}
    with factory() as session:
        jobs = history.jobs(session)
        tasks = history.tasks(session)
        leases = history.leases(session)
        slashes = history.slashes(session)
        providers = set(history.node_providers(session).values())

    by_id = {job.id: job for job in jobs}
    for job_id, times in settled.items():
        if times > 1:
            bad("paid_twice", f"job {job_id} settled {times} times on chain")
        if job_id not in by_id or by_id[job_id].status not in COMPLETED:
            bad("paid_not_completed", f"job {job_id} settled on chain, "
                f"{by_id[job_id].status if job_id in by_id else 'unknown'} in the service")
    for job in jobs:
        if job.status in COMPLETED and settled[job.id] == 0:
            bad("unpaid", f"job {job.id} {job.status} in the service, never settled on chain")
    for job_id in created.keys() - by_id.keys():
        bad("job_lost", f"job {job_id} escrowed on chain, unknown to the service")

    tasks_of: dict[str, list[Any]] = {}
    for task in tasks:
        tasks_of.setdefault(task.job_id, []).append(task)
    for job in jobs:
        mine = tasks_of.get(job.id, [])
        want = expected_tasks(job.spec)
        if want is not None and len(mine) != want:
            bad("task_lost", f"job {job.id} has {len(mine)} of its {want} tasks")
        if job.status in COMPLETED:
            for task in mine:
                if task.status not in TASK_DONE:
                    bad("task_lost", f"job {job.id} {job.status} with task {task.id} "
                        f"{task.status}")

    by_slot: dict[tuple[str, int], list[tuple[float, float]]] = {}
    by_task: dict[int, list[tuple[float, float]]] = {}
    for lease in leases:
        span = (lease.created_at, lease.released_at if lease.released_at is not None
                else float("inf"))
        by_slot.setdefault((lease.node_id, lease.slot), []).append(span)
        by_task.setdefault(lease.task_id, []).append(span)
    for slot, spans in by_slot.items():
        for _ in range(_overlaps(spans)):
            bad("double_lease", f"GPU slot {slot[0]}/{slot[1]} leased twice at once")
    for task_id, spans in by_task.items():
        for _ in range(_overlaps(spans)):
            bad("double_lease", f"task {task_id} leased twice at once")

    chain_slashes = [e for e in events if e.name == "Slashed"]
    for record in slashes:
        if record.provider.lower() not in faulted and record.reversed_by is None:
            bad("honest_slashed", f"slash {record.slash_id} of honest provider "
                f"{record.provider} (node {record.node_id}): {record.detail}")
    decided = {record.provider.lower() for record in slashes}
    for event in chain_slashes:
        provider = str(event.args["provider"]).lower()
        if provider not in faulted and provider not in decided:
            bad("honest_slashed", f"on-chain slash {event.args['slashId']} of honest "
                f"provider {provider}")

    _check_balances(chain, jobs=created, accounts=providers | {
        str(e.args["customer"]) for e in events if e.name == "JobCreated"}, bad=bad)
    counts = {"jobs": len(jobs), "jobs_completed": sum(j.status in COMPLETED for j in jobs),
              "jobs_settled_on_chain": len(settled), "tasks": len(tasks), "leases": len(leases),
              "slashes": len(slashes), "chain_events": len(events)}
    return HistoryReport(counts=counts, violations=dict(violations), details=details)


def _check_balances(chain: MeshChain, *, jobs: dict[str, int], accounts: set[str],
                    bad: Any) -> None:
    """The escrow holds exactly what it owes: each funded job's amount, each settled job's
    refund, and each account's claimable and pending balance."""
    owed = 0
    for job_id, _ in jobs.items():
        escrowed = chain.escrowed_job(JobId(job_id).raw)
        if escrowed is None:
            continue
        if escrowed.status is EscrowStatus.FUNDED:
            owed += escrowed.amount
        elif escrowed.status is EscrowStatus.SETTLED:
            owed += chain.refund_owed(JobId(job_id).raw)
    for account in accounts:
        balance = chain.escrow_balance(account)
        owed += balance.claimable + balance.pending
    held = chain.token_balance(chain.deployment.job_escrow)
    if held != owed:
        bad("balance_mismatch", f"the escrow holds {held} tokens and owes {owed}")
