"""Periodic work (failure sweep, lease expiry, escrow sync, nonce GC) run exactly once per
tick across all orchestrator processes, and per-process work (following the PLS observation
log) run in every one.

Each leader-only tick claims a named leader lease in the DB and does its work in the SAME
transaction: on PostgreSQL a competing process blocks on the lease row until the
winner commits and then finds the lease held; on SQLite writers are serialised.
If the work fails, the lease renewal rolls back with it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import leaders as leader_db

log = logging.getLogger("orchestrator.periodic")

# A work function may return a callable to run once its transaction has committed (the
# outbox sender broadcasts there: only what is durably recorded may reach the chain).
Work = Callable[[Session, float], object]


@dataclass(frozen=True, slots=True)
class PeriodicJob:
    name: str
    interval_s: float
    work: Work
    leader_only: bool = True  # False: every process runs it, in a transaction of its own


class LeaderRunner:
    def __init__(self, factory: sessionmaker[Session], *, holder: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.factory = factory
        self.holder = holder or uuid.uuid4().hex
        self.clock = clock

    def run_if_leader(self, name: str, *, ttl_s: float, work: Work) -> bool:
        """Run `work` if this process holds (or takes) the `name` lease; True if it ran."""
        with self.factory.begin() as session:
            now = self.clock()
            if not leader_db.try_lead(session, name=name, holder=self.holder, now=now, ttl_s=ttl_s):
                return False
            after_commit = work(session, now)
        if callable(after_commit):
            after_commit()
        return True

    def start(self, jobs: list[PeriodicJob]) -> BackgroundScheduler:
        scheduler = BackgroundScheduler(daemon=True)
        for job in jobs:
            scheduler.add_job(self._tick, "interval", seconds=job.interval_s, args=[job],
                              id=job.name, max_instances=1, coalesce=True)
        scheduler.start()
        return scheduler

    def run_here(self, work: Work) -> None:
        """Run `work` in this process, whoever leads."""
        with self.factory.begin() as session:
            work(session, self.clock())

    def _tick(self, job: PeriodicJob) -> None:
        try:
            if not job.leader_only:
                self.run_here(job.work)
                return
            # The lease outlives one interval so the leader keeps it from tick to tick.
            self.run_if_leader(job.name, ttl_s=job.interval_s * 3, work=job.work)
        except Exception:
            log.exception("periodic job %s failed", job.name)
