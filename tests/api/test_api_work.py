from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import jobs as job_db
from orchestrator.db import leases as lease_db
from orchestrator.db import statuses as status_db
from orchestrator.domain.merkle import MerkleTree
from orchestrator.domain.types import TaskNeeds
from orchestrator.services.work import MAX_ATTEMPTS
from tests.api.conftest import ADMIN_KEY
from tests.clients import LiveNode, VirtualClock
from tests.conftest import JobMaker

ADMIN = {"x-admin-key": ADMIN_KEY}


def upload(node: LiveNode, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    response = node.client.put(f"/v1/blobs/{digest}", content=data, headers=node.auth)
    assert response.status_code == 200, response.text
    return digest


def test_the_audit_log_says_an_override_was_refused_and_not_that_it_was_accepted(
        make_job: JobMaker, client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    job_id = make_job(1)  # waiting for a node: nothing to accept yet
    with caplog.at_level("WARNING", logger="orchestrator.audit"):
        refused = client.post(f"/v1/admin/jobs/{job_id}/accept", headers=ADMIN)
    assert refused.status_code == 409, refused.text
    assert f"operator override refused: job {job_id} not accepted" in caplog.text
    assert "accepted by admin" not in caplog.text
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "funded"


def test_task_runs_end_to_end_and_the_job_queues_its_settlement_once(
        live_node: Callable[..., LiveNode], make_job: JobMaker, client: TestClient,
        factory: sessionmaker[Session]) -> None:
    node = live_node("gpu-1")
    job_id = make_job(1)
    lease = node.post("/v1/nodes/gpu-1/lease")
    assert lease.status_code == 200, lease.text
    task_id = lease.json()["task_id"]
    assert node.post("/v1/nodes/gpu-1/lease").json()["lease_id"] == lease.json()["lease_id"]
    assert node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.2}).json()["status"] \
        == "running"
    checkpoint = upload(node, b"half a frame")
    assert node.post(f"/v1/tasks/{task_id}/checkpoints",
                     {"sha256": checkpoint, "progress": 0.5}).status_code == 200
    result = upload(node, b"the frame")
    done = node.post(f"/v1/tasks/{task_id}/complete", {"result_sha256": result})
    assert done.json()["status"] == "done"
    job = client.get(f"/v1/jobs/{job_id}").json()
    expected_root = MerkleTree.build([bytes.fromhex(checkpoint), bytes.fromhex(result)]).root
    assert (job["status"], job["merkle_root"]) == ("verifying", "0x" + expected_root.hex())
    accepted = client.post(f"/v1/admin/jobs/{job_id}/accept", headers=ADMIN)
    assert accepted.json()["status"] == "settling"
    assert client.post(f"/v1/admin/jobs/{job_id}/accept", headers=ADMIN).status_code == 409
    outbox = client.get("/v1/admin/outbox", headers=ADMIN).json()
    assert [(a["kind"], a["idempotency_key"], a["status"]) for a in outbox] == [
        ("settle", f"settle:{job_id}", "pending")]
    assert client.get("/v1/admin/outbox?status=failed", headers=ADMIN).json() == []
    assert client.get("/v1/admin/outbox?status=bogus", headers=ADMIN).status_code == 422
    assert outbox[0]["payload"]["providers"] == [node.wallet.address]
    with factory() as session:
        history = status_db.status_history(session, entity="job", entity_id=job_id)
        assert [h.to_status for h in history] == ["funded", "scheduled", "running", "verifying",
                                                  "completed", "settling"]


def test_a_node_pulling_work_gets_the_task_with_the_least_laxity(
        live_node: Callable[..., LiveNode], make_job: JobMaker,
        factory: sessionmaker[Session]) -> None:
    node = live_node("gpu-1")
    make_job(3, needs=TaskNeeds(expected_duration_s=60), deadline=2 * 3600)  # older
    long_frame = make_job(1, needs=TaskNeeds(expected_duration_s=5 * 3600), deadline=6 * 3600)
    lease = node.post("/v1/nodes/gpu-1/lease")
    assert lease.status_code == 200, lease.text
    with factory() as session:
        task = job_db.get_task(session, task_id=lease.json()["task_id"])
        assert task is not None and task.job_id == long_frame


def test_lease_pull_with_no_work_answers_204(live_node: Callable[..., LiveNode]) -> None:
    assert live_node("gpu-1").post("/v1/nodes/gpu-1/lease").status_code == 204


def test_failed_start_releases_the_slot(
        live_node: Callable[..., LiveNode], make_job: JobMaker) -> None:
    node = live_node("gpu-1")  # one slot
    make_job(2)
    first = node.post("/v1/nodes/gpu-1/lease").json()
    assert node.post(f"/v1/tasks/{first['task_id']}/fail",
                     {"reason": "start_failed"}).json()["status"] == "retry"
    second = node.post("/v1/nodes/gpu-1/lease").json()
    assert second["lease_id"] != first["lease_id"]
    assert second["slot"] == first["slot"] == 0


def test_time_to_assignment_runs_from_the_task_ready_to_its_lease_started(
        live_node: Callable[..., LiveNode], make_job: JobMaker, client: TestClient,
        clock: VirtualClock) -> None:
    node = live_node("gpu-1")
    make_job(1, now=clock())
    clock.advance(3.0)
    task_id = node.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    clock.advance(2.0)  # reserved, not started: the wait goes on
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.0})
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.5})  # a renewal starts nothing
    clock.advance(30.0)
    node.post(f"/v1/tasks/{task_id}/fail", {"reason": "error"})  # back in the queue now
    clock.advance(1.0)
    assert node.post("/v1/nodes/gpu-1/lease").json()["task_id"] == task_id
    clock.advance(0.5)
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.0})
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in
               client.get("/metrics").text.splitlines() if line and not line.startswith("#")}
    assert samples["mesh_time_to_assignment_seconds_count"] == 2
    assert samples["mesh_time_to_assignment_seconds_sum"] == pytest.approx(5.0 + 1.5)
    assert samples["mesh_time_to_assignment_p50_seconds"] == pytest.approx(1.5)
    assert samples["mesh_time_to_assignment_p99_seconds"] == pytest.approx(5.0)
    service = client.get("/v1/dashboard").json()["service"]
    assert (service["time_to_assignment_p50_s"], service["time_to_assignment_p99_s"]) == (
        pytest.approx(1.5), pytest.approx(5.0))


def test_other_node_cannot_report_on_a_lease_it_does_not_hold(
        live_node: Callable[..., LiveNode], make_job: JobMaker) -> None:
    owner, intruder = live_node("gpu-1"), live_node("gpu-2")
    make_job(1)
    task_id = owner.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    response = intruder.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.5})
    assert (response.status_code, response.json()["error"]["code"]) == (409, "lease_not_held")


def test_refusals_keep_their_status_and_body_a_missing_task_404_a_bad_move_409(
        live_node: Callable[..., LiveNode], make_job: JobMaker) -> None:
    """The api maps each refusal's type to its status (`api/errors.py`); the layers below
    choose none."""
    node = live_node("gpu-1")
    make_job(1)
    missing = node.post("/v1/tasks/987654/progress", {"progress": 0.5})
    assert (missing.status_code, missing.json()) == (404, {"error": {
        "code": "task_not_found", "message": "no task 987654"}})
    task_id = node.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    early = node.post(f"/v1/tasks/{task_id}/checkpoints", {"sha256": "a" * 64, "progress": 0.1})
    assert (early.status_code, early.json()["error"]["code"]) == (409, "task_not_running")


def test_kill_and_resume_moves_the_task_from_its_last_checkpoint(
        live_node: Callable[..., LiveNode], make_job: JobMaker, client: TestClient,
        clock: VirtualClock, factory: sessionmaker[Session]) -> None:
    doomed = live_node("gpu-doomed")
    make_job(1)
    task_id = doomed.post("/v1/nodes/gpu-doomed/lease").json()["task_id"]
    doomed.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.1})
    checkpoint = upload(doomed, b"frames 1-5")
    doomed.post(f"/v1/tasks/{task_id}/checkpoints", {"sha256": checkpoint, "progress": 0.5})
    doomed.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.7})
    survivor = live_node("gpu-survivor")
    for _ in range(40):  # both beat every 5 s for a while; then the doomed node goes silent
        clock.advance(5)
        doomed.post("/v1/nodes/gpu-doomed/heartbeat")
        survivor.post("/v1/nodes/gpu-survivor/heartbeat")
        client.app.state.ctx.heartbeats.flush()  # type: ignore[attr-defined]
        client.post("/v1/admin/sweep", headers=ADMIN)
    died_at = clock()
    for _ in range(12):
        clock.advance(5)
        survivor.post("/v1/nodes/gpu-survivor/heartbeat")
        client.app.state.ctx.heartbeats.flush()  # type: ignore[attr-defined]
        swept = client.post("/v1/admin/sweep", headers=ADMIN).json()
        if swept["dead_nodes"]:
            break
    assert swept["dead_nodes"] == ["gpu-doomed"]
    pls = client.app.state.ctx.pls  # type: ignore[attr-defined]
    grace = pls.state.config.lease_hold.lone_grace_s
    if grace:  # MESH_PLS_LONE_GRACE_S: the lease is held that long first
        assert survivor.post("/v1/nodes/gpu-survivor/lease").status_code == 204
    for _ in range(int(grace // 5) + 2 if grace else 0):  # silent past the lone grace
        clock.advance(5)
        survivor.post("/v1/nodes/gpu-survivor/heartbeat")
        client.app.state.ctx.heartbeats.flush()  # type: ignore[attr-defined]
        client.post("/v1/admin/sweep", headers=ADMIN)
    lease = survivor.post("/v1/nodes/gpu-survivor/lease").json()
    assert (lease["task_id"], lease["resume_from_sha256"], lease["resume_progress"]) == (
        task_id, checkpoint, 0.5)
    clock.advance(1)
    survivor.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.5})
    with factory() as session:
        (event,) = lease_db.recovery_events(session, task_id=task_id)
        assert (event.from_node, event.resumed_on, event.cause) == (
            "gpu-doomed", "gpu-survivor", "dead")
        assert abs(event.rework - 0.2) < 1e-9
        assert event.resumed_at is not None and event.resumed_at > died_at
    metrics = client.get("/metrics").text
    assert "mesh_recovery_seconds_count 1.0" in metrics
    assert "mesh_node_failures_total 1.0" in metrics
    late = doomed.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.8})
    assert late.json()["error"]["code"] == "lease_not_held"


def test_suspect_node_keeps_its_lease_and_its_work(
        live_node: Callable[..., LiveNode], make_job: JobMaker, client: TestClient,
        clock: VirtualClock) -> None:
    node = live_node("gpu-1")
    make_job(1)
    task_id = node.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.3})
    for _ in range(20):
        clock.advance(5)
        node.post("/v1/nodes/gpu-1/heartbeat")
        client.app.state.ctx.heartbeats.flush()  # type: ignore[attr-defined]
        client.post("/v1/admin/sweep", headers=ADMIN)
    clock.advance(9)  # a hiccup: suspect, not dead
    assert client.post("/v1/admin/sweep", headers=ADMIN).json()["dead_nodes"] == []
    node.post("/v1/nodes/gpu-1/heartbeat")
    client.app.state.ctx.heartbeats.flush()  # type: ignore[attr-defined]
    assert node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.6}).json()["status"] \
        == "running"


def test_drain_takes_no_new_leases_and_moves_running_work_after_its_checkpoint(
        live_node: Callable[..., LiveNode], make_job: JobMaker,
        factory: sessionmaker[Session]) -> None:
    node = live_node("gpu-1", slots=2)
    make_job(3)
    running = node.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    node.post(f"/v1/tasks/{running}/progress", {"progress": 0.4})
    node.post("/v1/nodes/gpu-1/lease")  # a second, unstarted reservation
    drained = node.post("/v1/nodes/gpu-1/drain")
    assert drained.json()["draining"] is True
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204
    checkpoint = upload(node, b"partial")
    node.post(f"/v1/tasks/{running}/checkpoints", {"sha256": checkpoint, "progress": 0.4})
    assert node.post(f"/v1/tasks/{running}/fail", {"reason": "drain"}).json()["status"] == "retry"
    with factory() as session:
        (event,) = lease_db.recovery_events(session, task_id=running)
        assert (event.cause, event.rework) == ("drain", 0.0)
        assert lease_db.live_leases(session, node_id="gpu-1") == []


def test_blob_upload_refuses_wrong_hash_and_oversize(live_node: Callable[..., LiveNode],
                                                     make_job: JobMaker,
                                                     client: TestClient) -> None:
    node = live_node("gpu-1")
    make_job(1)
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 200  # a node uploads for a lease
    wrong = client.put("/v1/blobs/" + "0" * 64, content=b"data", headers=node.auth)
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (422, "blob_hash_mismatch")
    huge = b"x" * (1024 * 1024 + 1)
    big = client.put(f"/v1/blobs/{hashlib.sha256(huge).hexdigest()}", content=huge,
                     headers=node.auth)
    assert (big.status_code, big.json()["error"]["code"]) == (413, "blob_too_large")
    assert "mesh_upload_errors_total" in client.get("/metrics").text


def test_complete_needs_the_result_blob(live_node: Callable[..., LiveNode],
                                        make_job: JobMaker) -> None:
    node = live_node("gpu-1")
    make_job(1)
    task_id = node.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.5})
    response = node.post(f"/v1/tasks/{task_id}/complete", {"result_sha256": "a" * 64})
    assert (response.status_code, response.json()["error"]["code"]) == (404, "blob_missing")


def test_lease_pull_looks_past_tasks_this_node_cannot_run(
        live_node: Callable[..., LiveNode], make_job: JobMaker) -> None:
    node = live_node("gpu-1")
    make_job(250, needs=TaskNeeds(min_vram_gb=80))  # more than one page of unsuitable work
    runnable = make_job(1)
    lease = node.post("/v1/nodes/gpu-1/lease")
    assert lease.json()["job_id"] == runnable


def test_blob_downloads_onlyTheCheckpointAndItsChunks_ofATaskTheNodeHolds(
        live_node: Callable[..., LiveNode], make_job: JobMaker) -> None:
    first, second = live_node("gpu-1"), live_node("gpu-2")
    make_job(1)
    task_id = first.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    unrelated = upload(first, b"someone else's frame")
    assert second.client.get(f"/v1/blobs/{unrelated}", headers=second.auth).status_code == 403
    first.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.1})
    chunk = upload(first, b"samples 0-63")
    manifest = upload(first, json.dumps({"chunks": [{"sha256": chunk}]}).encode())
    assert first.post(f"/v1/tasks/{task_id}/checkpoints",
                      {"sha256": manifest, "progress": 0.5}).status_code == 200
    # The first node drains (as its agent does before it hands the task back), so the
    # placement pass moves the task to the other idle node.
    assert first.post("/v1/nodes/gpu-1/drain").status_code == 200
    assert first.post(f"/v1/tasks/{task_id}/fail", {"reason": "drain"}).status_code == 200

    moved = second.post("/v1/nodes/gpu-2/lease").json()
    assert (moved["task_id"], moved["resume_from_sha256"]) == (task_id, manifest)
    got = [second.client.get(f"/v1/blobs/{sha}", headers=second.auth)
           for sha in (manifest, chunk, unrelated)]

    assert [r.status_code for r in got] == [200, 200, 403]
    assert got[1].content == b"samples 0-63"
    assert got[2].json()["error"]["code"] == "blob_not_leased"
    # the node resuming carries the first node's chunk into its own checkpoints and result
    second.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.5})
    more = upload(second, b"samples 64-127")
    carried = upload(second, json.dumps({"chunks": [{"sha256": chunk},
                                                    {"sha256": more}]}).encode())
    recorded = second.post(f"/v1/tasks/{task_id}/checkpoints",
                           {"sha256": carried, "progress": 1.0})
    assert recorded.status_code == 200, recorded.text


def test_a_node_cannot_make_another_blob_readable_by_naming_it_in_a_manifest(
        live_node: Callable[..., LiveNode], make_job: JobMaker) -> None:
    """The review's attack: a node that holds any lease names a blob it never had (another
    customer's scene) in a checkpoint manifest, then reads it as its checkpoint's part."""
    owner, thief = live_node("gpu-owner"), live_node("gpu-thief")
    make_job(2)
    owner.post("/v1/nodes/gpu-owner/lease")
    secret = upload(owner, b"a restricted scene, 4K textures")
    task_id = thief.post("/v1/nodes/gpu-thief/lease").json()["task_id"]
    thief.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.1})
    assert thief.client.get(f"/v1/blobs/{secret}", headers=thief.auth).status_code == 403
    manifest = upload(thief, json.dumps({"chunks": [{"sha256": secret}]}).encode())
    named = thief.post(f"/v1/tasks/{task_id}/checkpoints", {"sha256": manifest, "progress": 0.5})
    assert (named.status_code, named.json()["error"]["code"]) == (422, "blob_not_uploaded")
    as_result = thief.post(f"/v1/tasks/{task_id}/complete", {"result_sha256": secret})
    assert (as_result.status_code, as_result.json()["error"]["code"]) == (
        422, "blob_not_uploaded")
    as_report = thief.post(f"/v1/tasks/{task_id}/complete", {
        "result_sha256": upload(thief, b"a frame"),
        "render": {"blender": "5.0.1", "kernel": "avx2",
                   "chunks": [{"offset": 0, "length": 64, "sha256": secret}]}})
    assert (as_report.status_code, as_report.json()["error"]["code"]) == (
        422, "blob_not_uploaded")
    got = thief.client.get(f"/v1/blobs/{secret}", headers=thief.auth)
    assert (got.status_code, got.json()["error"]["code"]) == (403, "blob_not_leased")


def test_a_task_at_its_retry_budget_fails_for_good_on_its_next_error_and_not_before(
        live_node: Callable[..., LiveNode], make_job: JobMaker, client: TestClient,
        clock: VirtualClock) -> None:
    node = live_node("gpu-1")
    job_id = make_job(1)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        lease = node.post("/v1/nodes/gpu-1/lease")
        assert lease.status_code == 200, (attempt, lease.text)
        task_id = lease.json()["task_id"]
        assert node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.1}).status_code == 200
        failed = node.post(f"/v1/tasks/{task_id}/fail", {
            "reason": "error", "message": "Blender: File format is not supported\n\x1b[31m"
        }).json()["status"]
        job = client.get(f"/v1/jobs/{job_id}").json()
        if attempt < MAX_ATTEMPTS:  # the attempt before the budget is spent is retried
            assert (failed, job["status"], job["reason"]) == ("retry", "running", None), attempt
        else:
            assert (failed, job["status"]) == ("failed", "failed")
        clock.advance(60)
    assert node.post("/v1/nodes/gpu-1/lease").status_code == 204
    # the customer sees why, in the node's words (one printable line, named as the node's)
    assert job["reason"] == (f"frame task 0 failed {MAX_ATTEMPTS} times; node gpu-1 reported: "
                             "Blender: File format is not supported [31m")
