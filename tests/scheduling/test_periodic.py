from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.scheduling.periodic import LeaderRunner, PeriodicJob


def test_two_runners_at_the_same_tick_run_the_work_exactly_once(
        factory: sessionmaker[Session]) -> None:
    runs: Counter[float] = Counter()
    now = [0.0]
    runners = [LeaderRunner(factory, holder=name, clock=lambda: now[0]) for name in "ab"]

    def work(_: Session, at: float) -> None:
        runs[at] += 1

    for tick in range(10):
        now[0] = float(tick)
        threads = [threading.Thread(target=r.run_if_leader, args=("sweep",),
                                    kwargs={"ttl_s": 3.0, "work": work}) for r in runners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert runs == {float(t): 1 for t in range(10)}


def test_standby_takes_over_when_the_leader_stops_renewing(
        factory: sessionmaker[Session]) -> None:
    now = [0.0]
    leader, standby = (LeaderRunner(factory, holder=h, clock=lambda: now[0]) for h in "ab")
    assert leader.run_if_leader("sweep", ttl_s=3.0, work=lambda s, t: None)
    now[0] = 2.0
    assert not standby.run_if_leader("sweep", ttl_s=3.0, work=lambda s, t: None)
    now[0] = 3.5
    assert standby.run_if_leader("sweep", ttl_s=3.0, work=lambda s, t: None)
    assert not leader.run_if_leader("sweep", ttl_s=3.0, work=lambda s, t: None)


def test_failed_work_does_not_count_as_a_run_and_keeps_no_lease(
        factory: sessionmaker[Session]) -> None:
    runner, other = LeaderRunner(factory, holder="a"), LeaderRunner(factory, holder="b")

    def explode(_: Session, __: float) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        runner.run_if_leader("sweep", ttl_s=60, work=explode)
    assert other.run_if_leader("sweep", ttl_s=60, work=lambda s, t: None)


def test_scheduled_jobs_in_two_runners_fire_on_one_holder_only(
        factory: sessionmaker[Session]) -> None:
    fired: list[str] = []
    lock = threading.Lock()

    def job_for(holder: str) -> PeriodicJob:
        def work(_: Session, __: float) -> None:
            with lock:
                fired.append(holder)
        return PeriodicJob("tick", 0.2, work)

    schedulers = [LeaderRunner(factory, holder=h).start([job_for(h)]) for h in "ab"]
    time.sleep(1.3)
    for scheduler in schedulers:
        scheduler.shutdown(wait=True)
    assert len(set(fired)) == 1
    assert 3 <= len(fired) <= 7
