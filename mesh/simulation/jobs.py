"""The customer side: a stream of render jobs of mixed lengths and priorities, each split into
frame-range tasks, with deadlines. Work is in reference GPU-seconds (an RTX 3090 on Cycles)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mesh.simulation.models import TOKEN
from orchestrator.domain.types import Priority

VALUE_PER_REF_GPU_HOUR = TOKEN  # what a customer pays per reference GPU-hour of work


@dataclass(frozen=True, slots=True)
class JobKind:
    share: float
    tasks: tuple[int, int]  # inclusive range of frame-range tasks per job
    task_minutes: tuple[float, float]  # range of reference GPU-minutes per task
    deadline_slack: float  # deadline = arrival + slack x (longest task) + queueing allowance


JOB_KINDS: dict[str, JobKind] = {
    "preview": JobKind(0.60, (4, 20), (5.0, 20.0), 4.0),
    "shot": JobKind(0.30, (10, 40), (30.0, 90.0), 3.0),
    "feature": JobKind(0.10, (20, 60), (120.0, 240.0), 2.5),
}
PRIORITY_SHARES: dict[Priority, float] = {
    Priority.HIGH: 0.15, Priority.NORMAL: 0.60, Priority.LOW: 0.25}
VRAM_NEEDS: dict[int, float] = {8: 0.70, 12: 0.20, 20: 0.10}
QUEUE_ALLOWANCE_S = 1800.0


@dataclass(frozen=True, slots=True)
class Job:
    job_id: int
    kind: str
    arrival_s: float
    deadline_s: float
    priority: Priority
    min_vram_gb: int
    task_work_s: tuple[float, ...]  # reference GPU-seconds per task

    @property
    def work_s(self) -> float:
        return sum(self.task_work_s)


def generate_jobs(rng: np.random.Generator, count: int, horizon_s: float) -> list[Job]:
    """`count` jobs arriving as a Poisson stream over the first 85 % of the horizon, so the
    last arrivals still have time to finish inside the simulated days."""
    kinds = list(JOB_KINDS)
    kind_p = np.asarray([JOB_KINDS[k].share for k in kinds])
    priorities = list(PRIORITY_SHARES)
    priority_p = np.asarray([PRIORITY_SHARES[p] for p in priorities])
    vrams = list(VRAM_NEEDS)
    vram_p = np.asarray([VRAM_NEEDS[v] for v in vrams])
    arrivals = np.sort(rng.uniform(0.0, 0.85 * horizon_s, count))
    jobs: list[Job] = []
    for job_id, arrival in enumerate(arrivals):
        kind_name = kinds[int(rng.choice(len(kinds), p=kind_p))]
        kind = JOB_KINDS[kind_name]
        n_tasks = int(rng.integers(kind.tasks[0], kind.tasks[1] + 1))
        work = rng.uniform(kind.task_minutes[0], kind.task_minutes[1], n_tasks) * 60.0
        deadline = float(arrival) + kind.deadline_slack * float(work.max()) + QUEUE_ALLOWANCE_S
        jobs.append(Job(
            job_id=job_id,
            kind=kind_name,
            arrival_s=float(arrival),
            deadline_s=deadline,
            priority=priorities[int(rng.choice(len(priorities), p=priority_p))],
            min_vram_gb=vrams[int(rng.choice(len(vrams), p=vram_p))],
            task_work_s=tuple(float(w) for w in work),
        ))
    return jobs
