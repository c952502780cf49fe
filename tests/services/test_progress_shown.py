"""POST /v1/nodes/{id}/progress: a node back from a DEAD verdict past the reconnect grace shows
the chunks its process rendered through the silence, signed with its login's session key. New
uploaded chunks withdraw the abandonment (no slash, the session counts as censored, exactly
once, across a restart); a new process's key, or nothing new, leaves the slash standing."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.config import Settings
from orchestrator.db import jobs as job_db
from orchestrator.db.models import Lease, ProgressWithdrawal, SlashRecord
from orchestrator.domain.continuity import ChunkMark, session_address, sign_progress
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.pls import LeaseHold
from orchestrator.domain.pls_engine import PlsConfig
from orchestrator.domain.types import TaskNeeds
from tests.builders import TOKEN
from tests.clients import LiveNode, VirtualClock
from tests.services.pls_harness import FixedStake
from tests.services.test_placement_gates import pls_of
from tests.services.test_session_key_login import login
from tests.services.test_slashing_service import (
    beat_rounds,
    decide_after_delay,
    ended_sessions,
    slash_actions,
)

FRAME = {"kind": "blender", "blend_sha256": "b" * 64, "frame": 1, "tile": 0, "tiles": 1,
         "samples": 12, "chunk_samples": 4, "format": "png"}


@pytest.fixture(params=[0.0, 30.0], ids=["revoked_at_the_verdict", "lone_grace_30s"])
def lone_grace_s(request: pytest.FixtureRequest) -> float:
    """Every proof is judged both ways a lost lease ends: revoked at the DEAD verdict, and
    held through a lone grace that lapses, well inside the lease's renewal window."""
    return float(request.param)


@pytest.fixture
def settings(settings: Settings, lone_grace_s: float) -> Settings:
    return settings.model_copy(update={"pls_lone_grace_s": lone_grace_s, "lease_ttl_s": 600.0})


@pytest.fixture
def pls_config(pls_config: PlsConfig, lone_grace_s: float) -> PlsConfig:
    """The app takes its PLS knobs from here, not from `settings`."""
    return replace(pls_config, lease_hold=LeaseHold(lone_grace_s=lone_grace_s))


def cut_holding_a_frame(agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
                        factory: sessionmaker[Session], clock: VirtualClock
                        ) -> tuple[LiveNode, bytes, int, str, float]:
    """gpu-cut logs in with a session key, renders chunk 0 of a frame (uploaded), and goes
    silent until the detector calls it DEAD. Returns the node, its session key, the task,
    the chunk known at the verdict, and the verdict's time."""
    node, survivor = agent("gpu-cut", region="us"), agent("gpu-ok", region="eu")
    key = os.urandom(32)
    assert login(node, session_address(key)) == 200
    stake.free[node.wallet.address] = 10 * TOKEN
    with factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id="0x" + "f1" * 32, customer="0x" + "c" * 40, spec={"kind": "blender"},
            spec_hash="0x" + "0" * 64, amount=TOKEN, deadline=1e12, needs=TaskNeeds(value=TOKEN),
            payloads=(FRAME,)), now=clock(), status=JobStatus.FUNDED)
    lease = node.post("/v1/nodes/gpu-cut/lease")
    assert lease.status_code == 200, lease.text
    task_id = int(lease.json()["task_id"])
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.0})
    known = node.upload(b"chunk 0+4 of frame 1")
    beat_rounds(client, clock, [node, survivor], 30)
    assert beat_rounds(client, clock, [survivor], 15) == ["gpu-cut"]
    pls = pls_of(client)
    # a lone silence: the lease is held for the lone grace, then lapses (without a grace it
    # is revoked at the verdict)
    beat_rounds(client, clock, [survivor], int(pls.state.config.lease_hold.lone_grace_s // 5) + 2)
    with factory() as session:
        revoked = session.scalars(select(Lease).where(Lease.task_id == task_id)).one()
    ended = "lease lapsed" if pls.state.config.lease_hold.lone_grace_s else "node dead"
    assert revoked.released_at is not None and revoked.release_reason == ended
    departed = pls.state.engine.staking.pending_since(str(task_id))  # the DEAD verdict
    assert departed is not None and departed <= revoked.released_at
    # held for the grace after the verdict, not for what was left of the renewal window
    assert revoked.released_at - departed <= pls.state.config.lease_hold.lone_grace_s + 5
    clock.advance(pls.state.config.slashing.reconnect_grace_s + 60)
    node.login()  # its token outlived
    survivor.login()
    beat_rounds(client, clock, [node, survivor], 2)  # back, past the reconnect grace
    return node, key, task_id, known, departed


def show(node: LiveNode, key: bytes, task_id: int, chunks: list[tuple[str, float, int]],
         now: float) -> tuple[int, dict[str, object]]:
    marks = [ChunkMark(bytes.fromhex(sha), at) for sha, at, _ in chunks]
    proof = sign_progress(key, node.node_id, str(task_id), marks, now)
    response = node.post(f"/v1/nodes/{node.node_id}/progress", {
        "task_id": task_id, "resumed_at": now, "signature": "0x" + proof.signature.hex(),
        "chunks": [{"sha256": sha, "rendered_at": at, "offset": offset, "length": 4}
                   for sha, at, offset in chunks]})
    return response.status_code, response.json()


@pytest.mark.parametrize("placed_again", [False, True], ids=["idle", "placed_again"])
def test_chunks_rendered_through_the_cut_withdraw_the_slash_once_and_for_good(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock,
        make_app: Callable[..., TestClient], placed_again: bool) -> None:
    """`placed_again`: back from the cut, the node is handed the same task again (a new
    lease) before its proof arrives; the proof still answers the abandonment its silence
    left."""
    node, key, task_id, known, departed = cut_holding_a_frame(agent, client, stake, factory,
                                                              clock)
    if placed_again:
        lease = node.post("/v1/nodes/gpu-cut/lease")
        assert lease.status_code == 200 and int(lease.json()["task_id"]) == task_id, lease.text
    fresh = node.upload(b"chunk 4+4 of frame 1, rendered offline")

    status, body = show(node, key, task_id, [(known, departed - 5, 0), (fresh, departed + 3, 4)],
                        clock())

    assert status == 200 and body == {"verdict": "withdrawn", "chunks_credited": 1}
    decide_after_delay(client, factory, clock)
    assert slash_actions(factory) == []
    with factory() as session:
        assert list(session.scalars(select(SlashRecord))) == []
        (withdrawal,) = session.scalars(select(ProgressWithdrawal))
    assert (withdrawal.task_id, withdrawal.node_id, withdrawal.chunks) == (task_id, "gpu-cut",
                                                                         [fresh])
    assert withdrawal.session_key == session_address(key) and withdrawal.departed_at == departed
    assert ended_sessions(factory)["gpu-cut"] is False  # censored: not a departure
    assert "mesh_slashes_withdrawn_total 1.0" in client.get("/metrics").text
    node.login()  # the decision delay outlived the token
    again = show(node, key, task_id, [(fresh, departed + 3, 4)], clock())
    assert again == (200, {"verdict": "not_pending", "chunks_credited": 0})
    restarted = pls_of(make_app()).state.engine.staking  # the withdrawal is replayed from the DB
    restarted.task_abandoned("gpu-cut", str(task_id), TOKEN, clock(), b"\x01" * 32)
    assert restarted.decide(clock() + 10**5, {}).slashes == ()  # settled: once per task


def test_a_new_process_cannot_show_the_old_ones_progress(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    node, _, task_id, _, departed = cut_holding_a_frame(agent, client, stake, factory, clock)
    restarted_key = os.urandom(32)
    assert login(node, session_address(restarted_key)) == 200
    fresh = node.upload(b"chunk 4+4 of frame 1, rendered offline")

    status, body = show(node, restarted_key, task_id, [(fresh, departed + 3, 4)], clock())

    assert status == 403 and body["error"]["code"] == "progress_wrong_session"  # type: ignore[index]
    decide_after_delay(client, factory, clock)
    (action,) = slash_actions(factory)
    assert action.payload["provider"] == node.wallet.address
    assert ended_sessions(factory)["gpu-cut"] is True


def test_an_idle_node_has_nothing_new_to_show_and_is_slashed(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    """Each proof carries one chunk that must not count, so each refusal pins one rule."""
    node, key, task_id, known, departed = cut_holding_a_frame(agent, client, stake, factory,
                                                              clock)
    outside_plan = node.upload(b"samples 5..9: no chunk of this frame")
    fresh = node.upload(b"chunk 4+4 of frame 1, rendered offline")
    uploaded_at = clock()
    never_sent = hashlib.sha256(b"chunk 8+4 of frame 1, claimed, never uploaded").hexdigest()
    clock.advance(30)
    now = clock()
    for claim in [(known, departed + 3, 0),  # the chunk it had before the cut, dated after it
                  (outside_plan, departed + 4, 5),  # a chunk off the frame's plan
                  (fresh, departed - 1, 4),  # rendered before the verdict: not through the cut
                  (fresh, now + 60, 4),  # dated after the proof was made
                  (fresh, uploaded_at + 5, 4),  # dated after its own upload
                  (never_sent, departed + 3, 8)]:  # a claim without content
        status, body = show(node, key, task_id, [claim], now)
        assert status == 409 and body["error"]["code"] == "progress_none", claim  # type: ignore[index]
    decide_after_delay(client, factory, clock)
    assert len(slash_actions(factory)) == 1


def test_a_proof_for_a_task_the_node_did_not_lose_is_not_pending(
        agent: Callable[..., LiveNode], client: TestClient, stake: FixedStake,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    node, key, task_id, _, departed = cut_holding_a_frame(agent, client, stake, factory, clock)
    fresh = node.upload(b"chunk 4+4 of frame 1, rendered offline")

    assert show(node, key, task_id + 1, [(fresh, departed + 3, 4)], clock()) == (
        200, {"verdict": "not_pending", "chunks_credited": 0})
    forged = node.post("/v1/nodes/gpu-cut/progress", {
        "task_id": task_id, "resumed_at": clock(), "signature": "0x" + "00" * 65,
        "chunks": [{"sha256": fresh, "rendered_at": departed + 3, "offset": 4, "length": 4}]})
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "progress_forged"
