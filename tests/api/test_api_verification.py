"""The verification flow over the API, with small hand-made pixel files (the end-to-end tests
with real renders through agents are in tests/agent/test_verification.py): commit, challenge,
re-checks leased to other providers, tie-breaks, evidence, redo, and jobs that settle on
their own."""

from __future__ import annotations

import hashlib
import io
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import pls as pls_store
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.merkle import verify
from orchestrator.domain.pixel_comparison import RenderEnv
from orchestrator.domain.types import TaskNeeds, Tier
from orchestrator.domain.verification import Leaf, window_rows
from orchestrator.services.verification import CheckResult, ChunkRef
from protocol.images import write_exr
from tests.api.conftest import ADMIN_KEY
from tests.builders import CUSTOMER
from tests.clients import LiveNode, VirtualClock
from tests.races import race

ADMIN = {"x-admin-key": ADMIN_KEY}
HEIGHT, WIDTH = 8, 6
ENV = {"blender": "5.0.1 test", "kernel": "avx2"}
Node = Callable[..., LiveNode]
# The cheapest node (the others ask 100): the placement pass gives the work to it, not to
# whichever node pulls first.
CHEAPEST: dict[str, object] = {"price_per_gpu_hour": 50}
JOB_NUMBERS = itertools.count(10_000)


def upload(node: LiveNode, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    assert node.client.put(f"/v1/blobs/{digest}", content=data,
                           headers=node.auth).status_code == 200
    return digest


def exr_bytes(pixels: np.ndarray, tmp: Path) -> bytes:
    path = write_exr(tmp / f"x-{hashlib.sha256(pixels.tobytes()).hexdigest()[:8]}.exr", pixels)
    return path.read_bytes()


def png_bytes(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


class Scene:
    """The 'render' of a frame: two sample chunks and their 8-bit frame."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.chunks = {(0, 4): rng.random((HEIGHT, WIDTH, 4), dtype=np.float32),
                       (4, 4): rng.random((HEIGHT, WIDTH, 4), dtype=np.float32)}
        self.frame = (np.mean(list(self.chunks.values()), axis=0) * 255).astype(np.uint8)

    def darkened(self) -> Scene:
        other = Scene(0)
        other.chunks = {k: v * np.float32(0.9) for k, v in self.chunks.items()}
        other.frame = (self.frame * 0.9).astype(np.uint8)
        return other

    def window(self, window: int, windows: int) -> Scene:
        top, bottom = window_rows(window, windows, HEIGHT)
        part = Scene(0)
        part.chunks = {k: v[top:bottom] for k, v in self.chunks.items()}
        part.frame = self.frame[top:bottom]
        return part

    def send(self, node: LiveNode, tmp: Path) -> tuple[list[dict[str, Any]], str]:
        chunks = [{"offset": o, "length": n, "sha256": upload(node, exr_bytes(px, tmp))}
                  for (o, n), px in sorted(self.chunks.items())]
        return chunks, upload(node, png_bytes(self.frame))


@pytest.fixture
def render_job(factory: sessionmaker[Session], client: TestClient) -> Callable[[], str]:
    def build() -> str:
        blend = hashlib.sha256(b"scene").hexdigest()
        with factory.begin() as session:
            blob_db.add_blob(session, sha256=blend, size=5, now=0.0)
            job_id = "0x" + f"{next(JOB_NUMBERS):064x}"
            task = {"kind": "blender", "blend_sha256": blend, "frame": 1, "samples": 8,
                    "chunk_samples": 4, "resolution": [WIDTH, HEIGHT]}
            job_db.create_job(session, NewJob(
                job_id=job_id, customer=CUSTOMER, spec={"kind": "blender"},
                spec_hash="0x" + "0" * 64, amount=10**18, deadline=1e12, needs=TaskNeeds(),
                payloads=(task,)), now=0.0, status=JobStatus.FUNDED)
        return job_id
    return build


def deliver(node: LiveNode, scene: Scene, tmp: Path) -> int:
    lease = node.post(f"/v1/nodes/{node.node_id}/lease").json()
    task_id = lease["task_id"]
    assert node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.1}).status_code == 200
    chunks, frame = scene.send(node, tmp)
    done = node.post(f"/v1/tasks/{task_id}/complete",
                     {"result_sha256": frame, "render": {**ENV, "chunks": chunks}})
    assert done.status_code == 200, done.text
    return int(task_id)


def lease_check(node: LiveNode) -> dict[str, Any] | None:
    lease = node.post(f"/v1/nodes/{node.node_id}/checks/lease")
    return None if lease.status_code == 204 else dict(lease.json())


def window_of(check: dict[str, Any], truth: Scene) -> Scene:
    payload = check["payload"]  # a whole-frame task: the window is strip `tile` of `tiles`
    return truth.window(payload["tile"], payload["tiles"])


def run_check(node: LiveNode, truth: Scene, tmp: Path, env: dict[str, str] = ENV
              ) -> dict[str, Any] | None:
    """Pull one check and answer it with `truth`'s pixels of the window."""
    check = lease_check(node)
    if check is None:
        return None
    chunks, frame = window_of(check, truth).send(node, tmp)
    answer = node.post(f"/v1/checks/{check['check_id']}/result",
                       {"chunks": chunks, "frame_sha256": frame, "render": env})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def admin(client: TestClient, path: str) -> Any:
    response = client.get(f"/v1/admin{path}", headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()


def test_honest_result_is_checked_window_by_window_and_the_job_settles_on_its_own(
        live_node: Node, render_job: Callable[[], str], client: TestClient,
        tmp_path: Path) -> None:
    worker, checker = live_node("worker", **CHEAPEST), live_node("checker")
    job_id = render_job()
    scene = Scene(1)
    task_id = deliver(worker, scene, tmp_path)
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "verifying"
    assert worker.post("/v1/nodes/worker/checks/lease").status_code == 204  # never its own
    answers = []
    while (answer := run_check(checker, scene, tmp_path)) is not None:
        answers.append(answer)
    assert len(answers) == 4  # a new provider: every window (8 rows -> 4 windows) checked
    assert all(a["status"] == "matched" for a in answers)
    assert all(c["exact"] for a in answers for c in a["comparison"].values())
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "settling"
    outbox = admin(client, "/outbox")
    assert [(a["kind"], a["payload"]["providers"]) for a in outbox] == [
        ("settle", [worker.wallet.address])]
    record = admin(client, f"/tasks/{task_id}/verification")
    assert [r["status"] for r in record] == ["passed"]


def test_tampered_result_fails_after_a_tiebreak_with_evidence_and_is_redone_elsewhere(
        live_node: Node, render_job: Callable[[], str], client: TestClient,
        factory: sessionmaker[Session], tmp_path: Path) -> None:
    cheat, first, second = live_node("cheat"), live_node("first"), live_node("second")
    job_id = render_job()
    truth = Scene(2)
    task_id = deliver(cheat, truth.darkened(), tmp_path)
    answer = run_check(first, truth, tmp_path)
    assert answer is not None and answer["status"] == "mismatched"
    while any([run_check(second, truth, tmp_path), run_check(first, truth, tmp_path)]):
        pass
    record = admin(client, f"/tasks/{task_id}/verification")
    assert record[0]["status"] == "failed"
    evidence = record[0]["evidence"][0]["evidence"]
    root = bytes.fromhex(evidence["root"][2:])
    for entry in evidence["proofs"]:
        proof = [bytes.fromhex(p[2:]) for p in entry["proof"]]
        assert verify(proof, root, Leaf.from_json(entry["leaf"]).hash)
    assert sorted(c["node_id"] for c in evidence["checks"]) == ["first", "second"]
    assert evidence["recipe"]["payload"]["samples"] == 8
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "running" and job["tasks"] == {"retry": 1}
    assert cheat.post("/v1/nodes/cheat/lease").status_code == 204  # demoted: not again
    assert admin(client, "/verification")["by_node"]["cheat"] == {"failed": 1}
    with factory.begin() as session:  # even once its tier is back, the task is not its again
        pls_store.set_node_tier(session, node_id="cheat", tier=int(Tier.STANDARD))
        assert job_db.needs_from_json(job_db.get_task(session, task_id=task_id).needs
                                    ).excluded_providers == {cheat.wallet.address}
    assert cheat.post("/v1/nodes/cheat/lease").status_code == 204
    assert first.post("/v1/nodes/first/lease").json()["task_id"] == task_id


def test_lying_checker_is_overturned_by_the_tiebreak_and_the_honest_node_passes(
        live_node: Node, render_job: Callable[[], str], client: TestClient,
        tmp_path: Path) -> None:
    honest, liar, third = live_node("honest"), live_node("liar"), live_node("third")
    job_id = render_job()
    truth = Scene(3)
    task_id = deliver(honest, truth, tmp_path)
    answer = run_check(liar, truth.darkened(), tmp_path)
    assert answer is not None and answer["status"] == "mismatched"
    while run_check(third, truth, tmp_path) is not None:
        pass
    counts = admin(client, "/verification")
    assert counts["overturned"] == 1
    assert counts["by_node"]["honest"] == {"passed": 1}  # no false rejection
    assert admin(client, f"/tasks/{task_id}/verification")[0]["status"] == "passed"
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "settling"
    render_job()  # another result to check: the demoted liar gets none of it, third does
    deliver(honest, Scene(10), tmp_path)
    assert liar.post("/v1/nodes/liar/checks/lease").status_code == 204
    assert lease_check(third) is not None


def test_two_checks_of_one_result_decided_at_once_never_pass_a_failed_result(
        live_node: Node, render_job: Callable[[], str], client: TestClient,
        factory: sessionmaker[Session], tmp_path: Path) -> None:
    """The tie-break that fails a result and another window's last check arrive together:
    the later one sees the failure (its check void) instead of passing the result over it."""
    cheat, first, second = live_node("cheat"), live_node("first"), live_node("second")
    job_id = render_job()
    truth = Scene(6)
    task_id = deliver(cheat, truth.darkened(), tmp_path)
    assert (answer := run_check(first, truth, tmp_path)) and answer["status"] == "mismatched"
    held = lease_check(first)  # first passes every other window but the last, kept leased
    while (following := lease_check(first)) is not None:
        assert held is not None
        chunks, frame = window_of(held, truth.darkened()).send(first, tmp_path)
        assert first.post(f"/v1/checks/{held['check_id']}/result", {
            "chunks": chunks, "frame_sha256": frame, "render": ENV}).json()["status"] == "matched"
        held = following
    assert held is not None
    tiebreak = lease_check(second)
    assert tiebreak is not None and tiebreak["role"] == "tiebreak"
    verifier = client.app.state.ctx.verifier  # type: ignore[attr-defined]

    def submit(node: LiveNode, check: dict[str, Any], scene: Scene) -> Callable[[Session], None]:
        chunks, frame = window_of(check, scene).send(node, tmp_path)
        result = CheckResult(tuple(ChunkRef(c["offset"], c["length"], c["sha256"])
                                   for c in chunks), frame, None, RenderEnv.from_json(ENV), 1.0)
        return lambda session: verifier.submit_check(
            session, check_id=check["check_id"], node_id=node.node_id, result=result,
            now=client.app.state.ctx.now()) and None  # type: ignore[attr-defined]

    race(factory, submit(second, tiebreak, truth), submit(first, held, truth.darkened()))
    record = admin(client, f"/tasks/{task_id}/verification")
    assert [r["status"] for r in record] == ["failed"]
    assert client.get(f"/v1/jobs/{job_id}").json()["tasks"] == {"retry": 1}
    assert all(a["kind"] != "settle" for a in admin(client, "/outbox"))


def test_cross_kernel_check_uses_the_tolerance_and_operator_accept_is_a_logged_override(
        live_node: Node, render_job: Callable[[], str], client: TestClient,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    worker, checker = live_node("worker", **CHEAPEST), live_node("checker")
    job_id = render_job()
    truth = Scene(4)
    deliver(worker, truth, tmp_path)
    nudged = Scene(4)
    nudged.chunks = {k: v + np.float32(1e-6) for k, v in truth.chunks.items()}
    answer = run_check(checker, nudged, tmp_path, env={**ENV, "kernel": "sse42"})
    assert answer is not None and answer["status"] == "matched"
    assert not any(c["exact"] for c in answer["comparison"].values())
    with caplog.at_level("WARNING", logger="orchestrator.audit"):
        accepted = client.post(f"/v1/admin/jobs/{job_id}/accept", headers=ADMIN)
    assert accepted.json()["status"] == "settling"
    assert f"operator override: job {job_id} accepted by admin (1 undecided" in caplog.text
    assert admin(client, "/verification")["commitments"] == {"overridden": 1}
    assert run_check(checker, truth, tmp_path) is None  # the rest of its checks were voided


def test_a_result_from_another_blender_build_is_not_compared_but_rechecked_elsewhere(
        live_node: Node, render_job: Callable[[], str], tmp_path: Path) -> None:
    worker, old, current = live_node("worker", **CHEAPEST), live_node("old"), live_node("current")
    render_job()
    truth = Scene(5)
    deliver(worker, truth, tmp_path)
    answer = run_check(old, truth, tmp_path, env={"blender": "4.2.0 other", "kernel": "avx2"})
    assert answer is not None and answer["status"] == "open"
    again = run_check(current, truth, tmp_path)
    assert again is not None and again["status"] == "matched"


@pytest.fixture
def command_job(factory: sessionmaker[Session]) -> Callable[..., str]:
    def build(*, deterministic: bool) -> str:
        job_id = "0x" + f"{next(JOB_NUMBERS):064x}"
        with factory.begin() as session:
            task = {"kind": "command", "command": ["x"], "outputs": ["result"], "shard": 0,
                    "shards": 1, "deterministic": deterministic, "redundancy": {"k": 2, "n": 3}}
            job_db.create_job(session, NewJob(
                job_id=job_id, customer=CUSTOMER, spec={"kind": "command"},
                spec_hash="0x" + "0" * 64, amount=10**18, deadline=1e12, needs=TaskNeeds(),
                payloads=(task,)), now=0.0, status=JobStatus.FUNDED)
        return job_id
    return build


def finish_command(node: LiveNode, data: bytes) -> int:
    task_id = node.post(f"/v1/nodes/{node.node_id}/lease").json()["task_id"]
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.1})
    assert node.post(f"/v1/tasks/{task_id}/complete",
                     {"result_sha256": upload(node, data)}).status_code == 200
    return int(task_id)


def rerun(node: LiveNode, data: bytes) -> dict[str, Any] | None:
    lease = node.post(f"/v1/nodes/{node.node_id}/checks/lease")
    if lease.status_code == 204:
        return None
    answer = node.post(f"/v1/checks/{lease.json()['check_id']}/result",
                       {"result_sha256": upload(node, data)})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_deterministic_command_is_rechecked_by_its_bytes(
        live_node: Node, command_job: Callable[..., str], client: TestClient) -> None:
    worker, checker = live_node("worker", **CHEAPEST), live_node("checker")
    job_id = command_job(deterministic=True)
    finish_command(worker, b"42\n")
    answer = rerun(checker, b"42\n")
    assert answer is not None and answer["status"] == "matched"
    assert answer["comparison"]["result"]["detail"] == "same bytes"
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "settling"


def test_nondeterministic_command_passes_when_k_of_n_runs_agree(
        live_node: Node, command_job: Callable[..., str], client: TestClient) -> None:
    worker, second, third = live_node("worker", **CHEAPEST), live_node("second"), live_node("third")
    job_id = command_job(deterministic=False)
    finish_command(worker, b"sample 17\n")
    assert rerun(second, b"sample 99\n") is not None  # runs may differ: no verdict yet
    assert rerun(second, b"sample 17\n") is None  # one run per provider
    assert rerun(third, b"sample 17\n") is not None  # 2 of 3 agree with the node
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "settling"
    counts = admin(client, "/verification")
    assert counts["by_node"]["worker"] == {"passed": 1}


def test_nondeterministic_command_fails_the_dissenter_when_the_others_agree(
        live_node: Node, command_job: Callable[..., str], client: TestClient) -> None:
    worker, second, third = live_node("worker", **CHEAPEST), live_node("second"), live_node("third")
    job_id = command_job(deterministic=False)
    task_id = finish_command(worker, b"made up\n")
    rerun(second, b"real 5\n")
    rerun(third, b"real 5\n")
    record = admin(client, f"/tasks/{task_id}/verification")
    assert record[0]["status"] == "failed" and record[0]["evidence"]
    assert client.get(f"/v1/jobs/{job_id}").json()["tasks"] == {"retry": 1}


def answer_check(node: LiveNode, check: dict[str, Any], scene: Scene, tmp: Path) -> str:
    """Answer a held check with `scene`'s pixels of its window; returns the check's status."""
    chunks, frame = window_of(check, scene).send(node, tmp)
    answer = node.post(f"/v1/checks/{check['check_id']}/result",
                       {"chunks": chunks, "frame_sha256": frame, "render": ENV})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


def test_a_result_waits_for_every_leased_check_and_a_late_mismatch_still_opens_a_tiebreak(
        live_node: Node, render_job: Callable[[], str], client: TestClient,
        tmp_path: Path) -> None:
    """Every other window matched, one still leased: nothing passes or settles until it
    answers, and when it answers with a mismatch the result goes to a tie-break."""
    worker = live_node("worker", **CHEAPEST)
    checker, third = live_node("checker"), live_node("third")
    job_id = render_job()
    truth = Scene(7)
    task_id = deliver(worker, truth, tmp_path)
    held = lease_check(checker)
    assert held is not None
    others = 0
    while (check := lease_check(checker)) is not None:
        assert answer_check(checker, check, truth, tmp_path) == "matched"
        others += 1
    assert others >= 1  # two or more windows were drawn
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "verifying"
    assert [r["status"] for r in admin(client, f"/tasks/{task_id}/verification")] == [
        "checking"]
    assert all(a["kind"] != "settle" for a in admin(client, "/outbox"))
    assert answer_check(checker, held, truth.darkened(), tmp_path) == "mismatched"
    tiebreak = lease_check(third)
    assert tiebreak is not None and tiebreak["role"] == "tiebreak"
    assert [r["status"] for r in admin(client, f"/tasks/{task_id}/verification")] == [
        "disputed"]


def test_a_node_below_standard_gets_no_recheck_that_a_standard_node_of_a_third_provider_gets(
        live_node: Node, render_job: Callable[[], str], factory: sessionmaker[Session],
        tmp_path: Path) -> None:
    worker, low, third = live_node("worker", **CHEAPEST), live_node("low"), live_node("third")
    render_job()
    truth = Scene(8)
    deliver(worker, truth, tmp_path)
    with factory.begin() as session:
        pls_store.set_node_tier(session, node_id="low", tier=int(Tier.BACKGROUND))
    assert lease_check(low) is None
    taken = lease_check(third)
    assert taken is not None  # the same check the demoted node was refused
    with factory.begin() as session:  # otherwise eligible: back at STANDARD it gets one
        pls_store.set_node_tier(session, node_id="low", tier=int(Tier.STANDARD))
    assert lease_check(low) is not None


def test_a_checker_reads_a_checks_inputs_only_while_its_lease_on_the_check_is_live(
        live_node: Node, render_job: Callable[[], str], client: TestClient,
        clock: VirtualClock, tmp_path: Path) -> None:
    worker, checker, idle = live_node("worker", **CHEAPEST), live_node("checker"), live_node("idle")
    render_job()
    deliver(worker, Scene(9), tmp_path)
    scene = hashlib.sha256(b"scene").hexdigest()
    store = client.app.state.ctx.blobs  # type: ignore[attr-defined]
    store.path_of(scene).parent.mkdir(parents=True, exist_ok=True)
    store.path_of(scene).write_bytes(b"scene")
    assert checker.client.get(f"/v1/blobs/{scene}", headers=checker.auth).status_code == 403
    check = lease_check(checker)
    assert check is not None
    read = checker.client.get(f"/v1/blobs/{scene}", headers=checker.auth)
    assert read.status_code == 200 and read.content == b"scene"
    assert idle.client.get(f"/v1/blobs/{scene}", headers=idle.auth).status_code == 403
    clock.advance(client.app.state.ctx.verifier.check_ttl_s + 1)  # type: ignore[attr-defined]
    assert checker.client.get(f"/v1/blobs/{scene}", headers=checker.auth).status_code == 403
