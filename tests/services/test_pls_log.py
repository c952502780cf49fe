"""Replicas share one PLS book through the observation log: every replica applies the log in
its order, exactly once, its own writes included; the log is pruned only below what live
replicas applied, and a replica left behind rebuilds. Two services on one database stand for
two replicas here (each has its own engine and cursor); the last test runs two real
orchestrator processes on one PostgreSQL database."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench.replicas import ReportingNode, score, scratch_database, serve_replicas, wait_for
from orchestrator.db import nodes as node_db
from orchestrator.db import pls as store
from orchestrator.db.session import make_engine, make_session_factory
from orchestrator.domain.pls_engine import PlsConfig, PlsEngine
from orchestrator.domain.reliability import GpuSample, ProbeSample, TaskOutcome, UploadSample
from orchestrator.domain.types import NodeSpec, Tier
from orchestrator.services.pls import PlsService
from orchestrator.telemetry.metrics import MeshMetrics
from tests.services.pls_harness import FixedStake

START = 1_700_000_000.0
HORIZONS = (600.0, 3600.0, 4 * 3600.0)


def service() -> PlsService:
    return PlsService(PlsConfig(), stake_reader=FixedStake, metrics=MeshMetrics())


def spec(node_id: str) -> NodeSpec:
    return NodeSpec(node_id=node_id, provider="0x" + "b" * 40, gpu_model="RTX4090", vram_gb=24,
                    compute_capability=8.9, region="eu", price_per_gpu_hour=100, slots=1,
                    tier=Tier.STANDARD)


def sample(at: float, temperature_c: float) -> GpuSample:
    return GpuSample(at=at, temperature_c=temperature_c, sm_clock_mhz=1500.0,
                     max_sm_clock_mhz=2500.0, throttle_reasons=0x20, utilization_pct=95.0,
                     memory_used_mb=8000.0, memory_total_mb=24000.0, power_w=300.0,
                     power_limit_w=450.0)


def scores(engine: PlsEngine, now: float) -> dict[tuple[str, float], float]:
    return {(n, t): engine.book.score(n, now, t) for n in engine.node_ids() for t in HORIZONS}


def feed(factory: sessionmaker[Session], replicas: list[PlsService], single: PlsEngine) -> float:
    """Registrations, probes, GPU samples, uploads, heartbeats and outcomes, each sent to one
    of `replicas` in turn, and the same to `single` in the same order; the time at the end."""
    now = START
    for i in range(6):
        node_id = f"n-{i}"
        with factory.begin() as session:
            node = node_db.register_node(session, spec=spec(node_id), now=now)
            replicas[i % len(replicas)].ingest.node_registered(session, node=node, now=now)
        single.register(node_id, spec(node_id).provider, region="eu", network="eu", at=now,
                        tier=Tier.STANDARD)
        single.session_started(node_id, now)
    for step in range(20):
        now = START + 60.0 * (step + 1)
        for i in range(6):
            node_id, replica = f"n-{i}", replicas[(i + step) % len(replicas)]
            rtt_s = 0.01 + 0.002 * ((i * 7 + step * 3) % 11)
            gpu = [sample(now - 1.0, 70.0 + i + step % 5)]
            with factory.begin() as session:
                nonce, _ = replica.ingest.issue_probe(session, node_id=node_id,
                                                      clock=lambda sent=now: sent)
                replica.ingest.echo_probe(session, node_id=node_id, nonce=nonce, now=now + rtt_s)
                replica.ingest.record_gpu(session, node_id=node_id, samples=gpu, now=now)
                replica.ingest.record_upload(session, node_id=node_id, mbps=50.0 + i, now=now)
                replica.ingest.on_heartbeats(session, {node_id: now})
            single.probe(node_id, ProbeSample(now, max(now + rtt_s - now, 0.0) * 1000.0))
            single.gpu(node_id, gpu[0])
            single.upload(node_id, UploadSample(now, 50.0 + i))
            single.heartbeat(node_id, now)
            if step % 4 == i % 4:
                outcome = TaskOutcome.COMPLETED if i % 3 else TaskOutcome.FAILED_VERIFICATION
                with factory.begin() as session:
                    replica.ingest.task_outcome(session, node_id=node_id, task_id=100 * step + i,
                                                outcome=outcome, now=now)
                if outcome is TaskOutcome.COMPLETED:
                    single.completed(node_id, None)
                else:
                    single.verification_failed(node_id, str(100 * step + i), 0, None, now)
    return now


def test_two_replicas_apply_every_observation_once_in_one_order(
        factory: sessionmaker[Session]) -> None:
    first, second, single = service(), service(), PlsEngine(PlsConfig())
    end = feed(factory, [first, second], single)
    for replica in (first, second):
        with factory.begin() as session:
            replica.replay.follow(session, now=end)
    expected = scores(single, end + 30.0)
    assert scores(first.state.engine, end + 30.0) == expected
    assert scores(second.state.engine, end + 30.0) == expected
    for node_id in single.node_ids():
        assert (first.state.engine.staking.tier(node_id)
                == second.state.engine.staking.tier(node_id) == single.staking.tier(node_id))
    assert any(single.staking.tier(n) is Tier.BACKGROUND for n in single.node_ids())


def test_without_the_follow_a_replica_misses_what_the_other_received(
        factory: sessionmaker[Session]) -> None:
    """The comparison above has teeth: a replica that only applies after its own commits
    lags until it catches up, and then agrees."""
    first, second, single = service(), service(), PlsEngine(PlsConfig())
    end = feed(factory, [first, second], single)
    with factory.begin() as session:  # first catches up as it commits
        first.ingest.task_outcome(session, node_id="n-1", task_id=999, now=end + 1.0,
                                  outcome=TaskOutcome.FAILED_VERIFICATION)
    single.verification_failed("n-1", "999", 0, None, end + 1.0)
    assert scores(first.state.engine, end + 30.0) == scores(single, end + 30.0)
    assert scores(second.state.engine, end + 30.0) != scores(single, end + 30.0)
    with factory() as session:
        second.log.catch_up(session)
    assert scores(second.state.engine, end + 30.0) == scores(single, end + 30.0)


def test_a_probe_is_echoed_through_either_replica_and_counted_lost_once(
        factory: sessionmaker[Session]) -> None:
    """Behind a balancer a probe's echo may reach the other replica: the pending probe is in
    the DB, so that replica times it, and a probe nobody echoed is lost once, not per replica."""
    first, second = registered_replica(factory)[0], service()
    sent = START + 1.0
    with factory.begin() as session:
        echoed, _ = first.ingest.issue_probe(session, node_id="n-0", clock=lambda: sent)
        first.ingest.issue_probe(session, node_id="n-0", clock=lambda: sent)  # never echoed
    with factory.begin() as session:
        second.replay.follow(session, now=sent)
        rtt = second.ingest.echo_probe(session, node_id="n-0", nonce=echoed, now=sent + 0.025)
    assert abs(rtt - 25.0) < 0.01
    with factory.begin() as session, pytest.raises(KeyError):  # echoed already
        first.ingest.echo_probe(session, node_id="n-0", nonce=echoed, now=sent + 0.03)
    later = sent + PlsConfig().probe_timeout_s + 1.0
    for replica in (first, second):  # each issues a fresh probe and expires what is overdue
        with factory.begin() as session:
            replica.ingest.issue_probe(session, node_id="n-0", clock=lambda: later)
    for replica in (first, second):
        with factory.begin() as session:
            replica.replay.follow(session, now=later)
        summary = replica.state.book.summary("n-0", later)
        assert (summary.probes, summary.probes_lost) == (2, 1)


def registered_replica(factory: sessionmaker[Session]) -> tuple[PlsService, int]:
    """A replica that registered node n-0, and the log's head after it."""
    replica = service()
    with factory.begin() as session:
        node = node_db.register_node(session, spec=spec("n-0"), now=START)
        replica.ingest.node_registered(session, node=node, now=START)
    with factory() as session:
        return replica, store.log_head(session)


def test_a_rolled_back_observation_reaches_no_engine(factory: sessionmaker[Session]) -> None:
    replica, before = registered_replica(factory)
    with pytest.raises(RuntimeError), factory.begin() as session:
        replica.ingest.record_upload(session, node_id="n-0", mbps=1.0, now=START + 1.0)
        raise RuntimeError("the route failed after the use case")
    with factory.begin() as session:
        replica.ingest.record_upload(session, node_id="n-0", mbps=80.0, now=START + 2.0)
    witness = PlsEngine(PlsConfig())
    witness.register("n-0", spec("n-0").provider, region="eu", network="eu", at=START,
                     tier=Tier.STANDARD)
    witness.session_started("n-0", START)
    witness.upload("n-0", UploadSample(START + 2.0, 80.0))
    assert scores(replica.state.engine, START + 10.0) == scores(witness, START + 10.0)
    with factory() as session:
        assert store.log_head(session) == before + 1  # the head moved with the commit only


def test_observations_in_savepoints_wait_for_the_commit_and_a_failed_one_drops_only_its_own(
        factory: sessionmaker[Session]) -> None:
    """As the chain indexer runs its handlers: each in a savepoint, one that fails rolls its
    savepoint back and the pass commits the rest; the engine applies what was committed, at
    the commit, not when a savepoint is released."""
    replica, before = registered_replica(factory)
    with factory.begin() as session:
        with session.begin_nested():
            replica.ingest.record_upload(session, node_id="n-0", mbps=80.0, now=START + 2.0)
        with pytest.raises(RuntimeError), session.begin_nested():
            replica.ingest.record_upload(session, node_id="n-0", mbps=1.0, now=START + 3.0)
            raise RuntimeError("a handler failed")
        with session.begin_nested(), session.begin_nested():
            replica.ingest.record_upload(session, node_id="n-0", mbps=60.0, now=START + 4.0)
    witness = PlsEngine(PlsConfig())
    witness.register("n-0", spec("n-0").provider, region="eu", network="eu", at=START,
                     tier=Tier.STANDARD)
    witness.session_started("n-0", START)
    witness.upload("n-0", UploadSample(START + 2.0, 80.0))
    witness.upload("n-0", UploadSample(START + 4.0, 60.0))
    assert scores(replica.state.engine, START + 10.0) == scores(witness, START + 10.0)
    with factory() as session:
        assert store.log_head(session) == before + 2
        assert replica.log.catch_up(session) == 0  # both were applied as the pass committed


def test_pruning_keeps_what_live_replicas_need_and_a_replica_left_behind_rebuilds(
        factory: sessionmaker[Session]) -> None:
    first, second, single = service(), service(), PlsEngine(PlsConfig())
    end = feed(factory, [first, second], single)
    with factory.begin() as session:
        second.replay.follow(session, now=end)  # second has applied everything, first not yet
    with factory.begin() as session:
        first.replay.follow(session, now=end - 1000.0)  # saved long ago: first looks gone
    with factory() as session:
        head = store.log_head(session)
    with factory.begin() as session:
        first.log.prune(session, now=end)
    with factory() as session:
        assert store.log_size(session) == 0  # every replica heard from lately applied all
    laggard = service()  # started before the prune, never caught up
    with factory.begin() as session:
        second.ingest.on_heartbeats(session, {"n-2": end + 5.0})
    with factory.begin() as session:
        laggard.replay.follow(session, now=end + 10.0)  # finds row 1 gone
    assert laggard.state.engine.node_ids() == []
    with factory.begin() as session:
        laggard.replay.follow(session, now=end + 10.0)  # rebuilds from the tables, at the head
    assert laggard.state.engine.node_ids() == single.node_ids()
    with factory.begin() as session:
        second.log.prune(session, now=end + 10.0)
    with factory() as session:
        assert store.log_head(session) == head + 1
        assert store.log_size(session) == 1  # second's saved cursor is not past it yet
    with factory.begin() as session:
        second.replay.follow(session, now=end + 11.0)
    with factory.begin() as session:
        second.log.prune(session, now=end + 11.0)
    with factory() as session:
        assert store.log_size(session) == 0


@pytest.mark.postgres
def test_two_orchestrator_processes_on_one_postgres_share_their_scores(
        postgres_url: str, tmp_path: Path) -> None:
    """Nodes report to one replica or the other; within seconds both replicas' scores show
    every observation, and they equal those of one engine fed the whole log from its first
    row (a third replica, in this process, that saw nothing else)."""
    with scratch_database(postgres_url) as url:
        engine = make_engine(url)
        factory = make_session_factory(engine)
        witness = service()
        with factory.begin() as session:  # its cursor at 0 holds back pruning
            witness.replay.follow(session, now=time.time())
        with serve_replicas(url, tmp_path) as replicas:
            with factory.begin() as session:
                witness.replay.follow(session, now=time.time())
            nodes = [ReportingNode(replica.base_url, f"{name}-{i}")
                     for replica, name in zip(replicas, ("first", "second"), strict=True)
                     for i in range(3)]
            readers = [httpx.Client(base_url=replica.base_url) for replica in replicas]
            try:
                for k, node in enumerate(nodes):
                    node.beat()
                    node.probe()
                    node.probe()
                    node.gpu([80.5 + 0.7 * k, 81.0 + 0.6 * k], throttled=k % 2 == 1)
                lags = []
                for node in nodes:
                    own = score(node.http, node.node_id)
                    assert own is not None and own["thermal"] < 1.0
                    lags += [wait_for(reader, node.node_id, "thermal", own["thermal"],
                                      timeout_s=5.0) for reader in readers]
                with factory.begin() as session:
                    witness.replay.follow(session, now=time.time())
                views = {node.node_id: [timed_score(reader, node.node_id) for reader in readers]
                         for node in nodes}
                with factory.begin() as session:  # nothing happened meanwhile
                    assert witness.replay.follow(session, now=time.time()) == 0
            finally:
                for client in [*readers, *(node.http for node in nodes)]:
                    client.close()
        engine.dispose()
    assert max(lags) < 5.0
    assert len({view["thermal"] for node_views in views.values()
                for _, view, _ in node_views}) == len(nodes)  # each node its own factor
    for node_id, node_views in views.items():
        for asked, view, answered in node_views:
            # the witness's score at the instants the replica was asked and had answered
            # brackets the replica's (survival only grows with uptime, the rest is fixed)
            early, late = (witness.placement.components(node_id, t, 3600.0)
                           for t in (asked, answered))
            assert early is not None and late is not None
            assert view["thermal"] == early.thermal == late.thermal
            assert view["pass_rate"] == early.pass_rate == late.pass_rate
            assert view["stability"] == early.stability == late.stability
            assert early.pooled <= view["survival"] <= late.pooled
            assert early.calibrated <= view["rs"] <= late.calibrated


def timed_score(reader: httpx.Client, node_id: str) -> tuple[float, dict[str, float], float]:
    """(time asked, the node's score, time answered)."""
    asked = time.time()
    view = score(reader, node_id)
    assert view is not None
    return asked, view, time.time()
