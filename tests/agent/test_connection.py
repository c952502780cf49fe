"""The agent's downloads: a blob is used only if its bytes hash to its name, whether it just
arrived (a damaged store or proxy on the way) or sat in the cache (a damaged disk); else an
honest provider would render the wrong input and be slashed for it. The network is the one
thing replaced here: `serve` answers the blob downloads with the bytes given."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

from agent.config import AgentConfig
from agent.connection import Connection
from orchestrator.api.auth import verify_request
from orchestrator.domain.continuity import ChunkMark
from protocol.client import ApiCallError

SCENE = b"the customer's scene"
SHA = hashlib.sha256(SCENE).hexdigest()


@pytest.fixture
def connection(tmp_path: Path) -> Connection:
    config = AgentConfig(orchestrator="http://127.0.0.1:9", node_id="gpu-1",
                         state_dir=tmp_path / "state")
    return Connection(config, Account.create())


def serve(connection: Connection, body: bytes) -> list[str]:
    """Answer every request of the connection with `body`; returns the paths asked for."""
    asked: list[str] = []

    def request(method: str, path: str, **_: Any) -> httpx.Response:
        asked.append(path)
        return httpx.Response(200, content=body)

    connection.session.request = request  # type: ignore[method-assign]
    return asked


def test_a_download_whose_bytes_do_not_hash_to_its_name_is_refused_and_not_cached(
        connection: Connection) -> None:
    serve(connection, SCENE + b" (damaged)")
    with pytest.raises(ApiCallError, match="other content"):
        connection.fetch(SHA, ".blend")
    assert list(connection.cache.iterdir()) == []


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # a flipped bit
    lambda data: data[: len(data) // 2],  # a truncated copy
])
def test_a_damaged_cached_copy_is_fetched_again_and_an_intact_one_is_reused(
        connection: Connection, damage: Callable[[bytes], bytes]) -> None:
    asked = serve(connection, SCENE)
    cached = connection.fetch(SHA, ".blend")
    assert (cached.read_bytes(), len(asked)) == (SCENE, 1)
    assert connection.fetch(SHA, ".blend") == cached and len(asked) == 1  # intact: reused
    cached.write_bytes(damage(SCENE))
    assert connection.fetch(SHA, ".blend").read_bytes() == SCENE
    assert asked == [f"/v1/blobs/{SHA}"] * 2


# ----- the conversation, against an orchestrator played at the transport -------------------

CHAIN, ORCHESTRATOR_ID = 4242, "studio-grid"


class Orchestrator:
    """Plays the service at the HTTP transport: logins are checked with the service's own
    signature verification (for this grid's chain and id) and answered with a token; every
    other request gets the next scripted answer (an exception is raised as the network's)."""

    def __init__(self) -> None:
        self.logins: list[dict[str, Any]] = []
        self.requests: list[httpx.Request] = []
        self.script: list[httpx.Response | Exception] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/auth/login":
            verify_request(request.headers, method=request.method, path=request.url.path,
                           body=request.content, now=time.time(), chain_id=CHAIN,
                           orchestrator_id=ORCHESTRATOR_ID, max_age_s=600)
            self.logins.append(json.loads(request.content))
            return httpx.Response(200, json={"token": f"token-{len(self.logins)}"})
        self.requests.append(request)
        answer = self.script.pop(0) if self.script else httpx.Response(200, json={})
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def orchestrator() -> Orchestrator:
    return Orchestrator()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff's sleeps, taken without waiting."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def connected(tmp_path: Path, orchestrator: Orchestrator, **config: Any) -> Connection:
    connection = Connection(AgentConfig(
        orchestrator="http://grid.test", node_id="gpu-7", state_dir=tmp_path / "new" / "state",
        chain_id=CHAIN, orchestrator_id=ORCHESTRATOR_ID, **config), Account.create())
    connection.wallet.http = httpx.Client(base_url="http://grid.test",
                                          transport=httpx.MockTransport(orchestrator))
    return connection


def test_the_login_names_this_node_and_the_key_its_proofs_are_signed_with(
        tmp_path: Path, orchestrator: Orchestrator) -> None:
    connection = connected(tmp_path, orchestrator)
    connection.session.login()
    marks = [ChunkMark(bytes.fromhex(SHA), 1_000.5)]

    proof = connection.prove_progress(7, marks)

    (login,) = orchestrator.logins  # signed for this grid's chain and id (verified above)
    assert login["node_id"] == "gpu-7"
    assert proof.signer() == login["session_key"]
    assert (proof.node_id, proof.task_id, proof.chunks) == ("gpu-7", "7", tuple(marks))
    assert abs(proof.resumed_at - time.time()) < 60
    restarted = connected(tmp_path, orchestrator)
    restarted.session.login()
    assert orchestrator.logins[1]["session_key"] != login["session_key"]  # a new process


def test_a_call_sends_what_it_is_given_and_answers_json_or_none(
        tmp_path: Path, orchestrator: Orchestrator) -> None:
    connection = connected(tmp_path, orchestrator)
    connection.session.login()
    orchestrator.script = [httpx.Response(200, json={"task_id": 3}), httpx.Response(200)]

    assert connection.call("pull", "POST", "/v1/nodes/gpu-7/lease", json={"slots": 1}) == {
        "task_id": 3}
    assert connection.call("beat", "POST", "/v1/nodes/gpu-7/heartbeat") is None

    first, second = orchestrator.requests
    assert (first.method, first.url.path, json.loads(first.content)) == (
        "POST", "/v1/nodes/gpu-7/lease", {"slots": 1})
    assert first.headers["authorization"] == "Bearer token-1"
    assert (second.method, second.url.path) == ("POST", "/v1/nodes/gpu-7/heartbeat")


@pytest.mark.parametrize("jitter", ["low", "high"])
def test_network_and_server_errors_are_retried_with_a_doubling_capped_jittered_wait(
        tmp_path: Path, orchestrator: Orchestrator, sleeps: list[float], jitter: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(random, "uniform", lambda a, b: a if jitter == "low" else b)
    connection = connected(tmp_path, orchestrator, max_backoff_s=1.0)
    orchestrator.script = [httpx.ConnectError("cable"), httpx.Response(500),
                           httpx.Response(503), httpx.ReadTimeout("slow"),
                           httpx.Response(200, json={"ok": True})]

    with caplog.at_level(logging.WARNING, logger="mesh.agent"):
        assert connection.call("pull", "POST", "/v1/nodes/gpu-7/lease") == {"ok": True}

    factor = 0.8 if jitter == "low" else 1.2
    assert sleeps == pytest.approx([d * factor for d in (0.25, 0.5, 1.0, 1.0)])
    assert len(orchestrator.requests) == 5
    assert [r.getMessage() for r in caplog.records] == [
        f"pull: {problem}; retrying in {delay:.1f} s" for problem, delay in
        [("ConnectError", 0.25), ("HTTP 500", 0.5), ("HTTP 503", 1.0), ("ReadTimeout", 1.0)]]


def test_a_refusal_is_raised_at_once(tmp_path: Path, orchestrator: Orchestrator,
                                     sleeps: list[float]) -> None:
    connection = connected(tmp_path, orchestrator)
    orchestrator.script = [httpx.Response(409, json={"error": {
        "code": "lease_not_held", "message": "the lease is not yours"}})]

    with pytest.raises(ApiCallError) as refused:
        connection.call("complete", "POST", "/v1/tasks/3/complete", json={})

    assert refused.value.status == 409 and sleeps == [] and len(orchestrator.requests) == 1


def test_an_upload_sends_the_files_bytes_under_their_hash_or_refuses_a_changed_file(
        tmp_path: Path, orchestrator: Orchestrator, sleeps: list[float],
        caplog: pytest.LogCaptureFixture) -> None:
    connection = connected(tmp_path, orchestrator)
    frame = tmp_path / "frame.exr"
    frame.write_bytes(SCENE)
    orchestrator.script = [httpx.Response(502), httpx.Response(200)]

    with caplog.at_level(logging.WARNING, logger="mesh.agent"):
        connection.upload(frame, SHA)

    put = orchestrator.requests[-1]
    assert (put.method, put.url.path, put.content) == ("PUT", f"/v1/blobs/{SHA}", SCENE)
    assert caplog.records[0].getMessage().startswith(f"upload {SHA[:12]}: HTTP 502")
    frame.write_bytes(SCENE + b" re-rendered")
    with pytest.raises(ValueError, match=f"{frame} changed on disk"):
        connection.upload(frame, SHA)
    assert len(orchestrator.requests) == 2  # nothing sent for the changed file


def test_a_download_is_cached_under_its_name_and_survives_a_restart(
        tmp_path: Path, orchestrator: Orchestrator, sleeps: list[float],
        caplog: pytest.LogCaptureFixture) -> None:
    connection = connected(tmp_path, orchestrator)
    orchestrator.script = [httpx.Response(503), httpx.Response(200, content=SCENE)]

    with caplog.at_level(logging.WARNING, logger="mesh.agent"):
        cached = connection.fetch(SHA)

    assert cached.name == SHA and cached.read_bytes() == SCENE
    assert [(r.method, r.url.path) for r in orchestrator.requests] == [
        ("GET", f"/v1/blobs/{SHA}")] * 2
    assert caplog.records[0].getMessage().startswith(f"download {SHA[:12]}: HTTP 503")
    assert sorted(p.name for p in connection.cache.iterdir()) == [SHA]
    restarted = connected(tmp_path, orchestrator)  # the same state folder
    assert restarted.fetch(SHA) == cached and len(orchestrator.requests) == 2
