"""Telemetry into the one service-wide reliability book: agent GPU samples (bounded, only able
to lower RS), orchestrator-timed probes (a lost probe is loss), sessions from the failure
detector, upload throughput timed on blob uploads; and a restarted orchestrator rebuilds the
same book from the DB."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.config import Settings
from orchestrator.db import nodes as node_db
from orchestrator.db.models import NodeSession, TelemetrySample
from orchestrator.domain.pls_engine import PlsConfig
from orchestrator.domain.score_commitment import telemetry_digest
from orchestrator.domain.types import NodeSpec
from orchestrator.services.pls import PlsService
from orchestrator.telemetry.metrics import MeshMetrics
from tests.builders import lease_to
from tests.clients import LiveNode, VirtualClock, join, make_wallet
from tests.services.pls_harness import FixedStake, gpu_sample
from tests.services.test_placement_gates import pls_of
from tests.services.test_slashing_service import beat_rounds

THERMAL_SLOWDOWN = 0x20


def test_hot_throttled_gpu_samples_lower_rs_and_are_stored(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        factory: sessionmaker[Session]) -> None:
    hot, cool = agent("gpu-hot"), agent("gpu-cool")
    clock.advance(600)
    hot_samples = [gpu_sample(clock() - i, temperature_c=89.0, throttle=THERMAL_SLOWDOWN,
                              clock_mhz=1200.0) for i in range(5)]
    cool_samples = [gpu_sample(clock() - i) for i in range(5)]
    assert hot.post("/v1/nodes/gpu-hot/telemetry/gpu", {"samples": hot_samples}).json() == {
        "accepted": 5}
    cool.post("/v1/nodes/gpu-cool/telemetry/gpu", {"samples": cool_samples})
    book = pls_of(client).state.book
    assert book.score("gpu-hot", clock(), 3600) < book.score("gpu-cool", clock(), 3600)
    with factory() as session:
        stored = session.scalar(select(func.count()).select_from(TelemetrySample)
                                .where(TelemetrySample.node_id == "gpu-hot"))
    assert stored == 5 * 9  # one row per GpuSample field


def test_nvml_facts_rs_does_not_read_are_kept_where_the_device_reported_them(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        factory: sessionmaker[Session]) -> None:
    node, plain = agent("gpu-ecc"), agent("gpu-plain")
    clock.advance(600)
    with_facts = {**gpu_sample(clock()), "ecc_uncorrected": 3, "pcie_replays": 0,
                  "energy_mj": 1.5e9, "mem_clock_mhz": 10501.0, "memory_free_mb": 16000.0}
    assert node.post("/v1/nodes/gpu-ecc/telemetry/gpu", {"samples": [
        with_facts, {**gpu_sample(clock() - 1), "xid_last": None}]}).json() == {"accepted": 2}
    plain.post("/v1/nodes/gpu-plain/telemetry/gpu", {"samples": [gpu_sample(clock())]})
    scores = pls_of(client).state.book
    assert scores.score("gpu-ecc", clock(), 3600) == scores.score("gpu-plain", clock(), 3600)
    with factory() as session:
        kept = {(row.metric, row.value) for row in session.scalars(
            select(TelemetrySample).where(TelemetrySample.metric.startswith("nvml.")))}
    assert kept == {("nvml.ecc_uncorrected", 3.0), ("nvml.pcie_replays", 0.0),
                    ("nvml.energy_mj", 1.5e9), ("nvml.mem_clock_mhz", 10501.0),
                    ("nvml.memory_free_mb", 16000.0)}  # a None is not stored as a number
    refused = node.post("/v1/nodes/gpu-ecc/telemetry/gpu", {"samples": [
        {**gpu_sample(clock()), "ecc_uncorrected": -1}]})
    assert refused.status_code == 422


def test_out_of_bounds_or_stale_gpu_batch_is_refused_and_changes_nothing(
        agent: Callable[..., LiveNode], clock: VirtualClock,
        factory: sessionmaker[Session]) -> None:
    node = agent("gpu-1")
    too_hot = node.post("/v1/nodes/gpu-1/telemetry/gpu",
                        {"samples": [gpu_sample(clock(), temperature_c=500.0)]})
    assert (too_hot.status_code, too_hot.json()["error"]["code"]) == (422, "invalid_request")
    stale = node.post("/v1/nodes/gpu-1/telemetry/gpu",
                      {"samples": [gpu_sample(clock()), gpu_sample(clock() - 3600)]})
    assert (stale.status_code, stale.json()["error"]["code"]) == (422, "sample_out_of_range")
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(TelemetrySample)) == 0


def test_probe_rtt_is_timed_by_the_orchestrator_and_an_unanswered_probe_is_lost(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    assert abs(node.probe(rtt_s=0.025, clock=clock) - 25.0) < 0.01
    stale = node.post("/v1/nodes/gpu-1/probe").json()["nonce"]
    clock.advance(30)
    late = node.post("/v1/nodes/gpu-1/probe/echo", {"nonce": stale})
    assert (late.status_code, late.json()["error"]["code"]) == (404, "probe_unknown")
    summary = pls_of(client).state.book.summary("gpu-1", clock())
    assert (summary.probes, summary.probes_lost) == (2, 1)
    assert abs(summary.rtt_mean_us - 25_000) <= 1


def test_restarted_orchestrator_rebuilds_the_same_book_from_the_db(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        make_app: Callable[..., TestClient], factory: sessionmaker[Session]) -> None:
    flaky, steady = agent("gpu-flaky"), agent("gpu-steady")
    beat_rounds(client, clock, [flaky, steady], 30)
    assert beat_rounds(client, clock, [steady], 15) == ["gpu-flaky"]  # abrupt end
    beat_rounds(client, clock, [flaky, steady], 3)  # back: a new session
    for rtt in (0.010, 0.030, 0.020):
        steady.probe(rtt_s=rtt, clock=clock)
    flaky.post("/v1/nodes/gpu-flaky/probe")
    steady.post("/v1/nodes/gpu-steady/telemetry/gpu", {"samples": [
        gpu_sample(clock(), temperature_c=86.0, throttle=THERMAL_SLOWDOWN, clock_mhz=2000)]})
    beat_rounds(client, clock, [flaky, steady], 3)  # its sweeps find the unanswered probe lost
    assert pls_of(client).state.book.summary("gpu-flaky", clock()).probes_lost == 1
    now = clock()
    before = pls_of(client)
    restarted = pls_of(make_app())
    for node_id in ("gpu-flaky", "gpu-steady"):
        assert (restarted.state.book.score(node_id, now, 3600)
                == before.state.book.score(node_id, now, 3600))
        assert telemetry_digest(restarted.state.book.summary(node_id, now)) == telemetry_digest(
            before.state.book.summary(node_id, now))
    assert restarted.state.book.sessions_observed("gpu-flaky") == 1
    with factory() as session:
        sessions = list(session.scalars(select(NodeSession).where(
            NodeSession.node_id == "gpu-flaky").order_by(NodeSession.id)))
    assert [(s.abrupt, s.ended_at is None) for s in sessions] == [(True, False), (None, True)]


def test_a_large_blob_upload_is_timed_as_the_nodes_upload_throughput(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        factory: sessionmaker[Session], make_app: Callable[..., TestClient]) -> None:
    node = agent("gpu-up")
    lease_to(factory, "gpu-up", now=clock())  # a node uploads for a lease it holds
    body = bytes(range(256)) * (5 * 4096)  # 5 MiB
    headers = {"authorization": f"Bearer {node.token}"}
    small = b"tiny checkpoint"
    for data in (small, body):
        put = client.put(f"/v1/blobs/{hashlib.sha256(data).hexdigest()}", content=data,
                         headers=headers)
        assert put.status_code == 200, put.text
    with factory() as session:
        (mbps,) = session.scalars(select(TelemetrySample.value)
                                  .where(TelemetrySample.metric == "upload_mbps",
                                         TelemetrySample.node_id == "gpu-up"))
    assert mbps > 0  # one sample: the small body measures the round trip, not the uplink
    summary = pls_of(client).state.book.summary("gpu-up", clock())
    assert summary.upload_kbps == round(mbps * 1000)
    restarted = make_app()  # the sample is replayed into the restarted engine
    replayed = pls_of(restarted).state.book.summary("gpu-up", clock())
    assert replayed.upload_kbps == summary.upload_kbps


def test_a_probe_is_timed_from_when_it_leaves_not_through_the_orchestrators_wait_for_its_db(
        factory: sessionmaker[Session]) -> None:
    """Another writer holds the database for 0.8 s while a probe is issued (a loaded
    orchestrator measured up to 2.8 s of a 2.9 s round trip there): the probe is timed from
    after that wait, so a node echoing at once shows a round trip far below it, not the
    orchestrator's queue."""
    pls = PlsService(PlsConfig(), stake_reader=FixedStake, metrics=MeshMetrics())
    with factory.begin() as session:
        node = node_db.register_node(session, spec=NodeSpec(
            node_id="gpu-1", provider="0x" + "11" * 20, gpu_model="RTX4090", vram_gb=24,
            compute_capability=8.9, region="eu", price_per_gpu_hour=10**18, slots=1),
            now=time.time())
        pls.ingest.node_registered(session, node=node, now=time.time())
    holding = threading.Event()

    def hold_the_write_lock() -> None:
        with factory.begin() as other:
            if other.bind.dialect.name == "sqlite":
                other.execute(text("DELETE FROM pending_probes"))  # takes SQLite's write lock
            else:
                other.execute(text("LOCK TABLE pending_probes IN EXCLUSIVE MODE"))
            holding.set()
            time.sleep(0.8)

    writer = threading.Thread(target=hold_the_write_lock)
    writer.start()
    holding.wait(10)
    asked = time.time()
    with factory.begin() as session:
        nonce, sent = pls.ingest.issue_probe(session, node_id="gpu-1", clock=time.time)
    writer.join()
    assert sent - asked >= 0.5  # stamped after the wait
    with factory.begin() as session:
        rtt_ms = pls.ingest.echo_probe(session, node_id="gpu-1", nonce=nonce, now=time.time())
    assert rtt_ms < 400.0


class BusyClock(VirtualClock):
    """A busy orchestrator's time: once `tick` is set, every read comes `tick` s after the
    one before (the request waited that long between any two steps)."""

    tick = 0.0

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_an_echo_is_dated_when_it_arrives_not_when_a_busy_orchestrator_handles_it(
        make_app: Callable[..., TestClient], settings: Settings) -> None:
    """Each read of the clock comes 0.5 s after the one before: the probe is stamped as it
    leaves, the echo at its arrival (the first read a request makes), so the round trip is
    the one tick between them, whatever the service's own steps took after the echo came
    in (its worker thread, its dependencies, its database)."""
    clock = BusyClock()
    app = make_app(clock=clock)
    node = join(make_wallet(app, clock, chain_id=settings.chain_id,
                            orchestrator_id=settings.orchestrator_id), "gpu-1")
    clock.tick = 0.5
    nonce = node.post("/v1/nodes/gpu-1/probe").json()["nonce"]
    echo = node.post("/v1/nodes/gpu-1/probe/echo", {"nonce": nonce})
    assert echo.status_code == 200, echo.text
    assert echo.json()["rtt_ms"] == pytest.approx(500.0)
