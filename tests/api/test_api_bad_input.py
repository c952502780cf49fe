"""The bad-input defects an outside fuzz run found, each pinned: out-of-range integers, job
sizes and deadlines, headers on refusals, nonces spent by refused requests, open
registration, and malleable signatures. Each refusal is a 4xx with a stable code and changes
nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from eth_account import Account
from fastapi.testclient import TestClient
from pydantic import SecretStr, ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.api.schemas import MAX_RENDER_CHUNKS, MAX_TASKS_PER_JOB, JobSpec
from orchestrator.chain.anvil import dev_account
from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings
from orchestrator.db.models import Job, Node, UsedNonce
from orchestrator.main import create_app
from protocol.client import Wallet
from protocol.signing import HEADER_SIGNATURE
from tests.api.conftest import ADMIN_KEY
from tests.clients import LiveNode, VirtualClock, make_wallet, registration

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
ORCHESTRATOR_ID = Settings.model_fields["orchestrator_id"].default
TOO_BIG = 2**63  # one past a BIGINT
TOO_SMALL = -(2**63) - 1


def blender_spec(*, frames: int, tiles: int, deadline: int = 2_000_000_000) -> dict[str, object]:
    return {"workload": {"kind": "blender", "blend_sha256": "ab" * 32,
                         "frames": {"start": 1, "end": frames}, "tiles": tiles},
            "deadline": deadline}


def count(factory: sessionmaker[Session], model: type) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


@pytest.mark.parametrize("task_id", [TOO_BIG, TOO_SMALL])
@pytest.mark.parametrize("route,payload", [
    ("progress", {"progress": 0.5}),
    ("checkpoints", {"sha256": "ab" * 32, "progress": 0.5}),
    ("complete", {"result_sha256": "ab" * 32}),
    ("fail", {"reason": "error"}),
])
def test_a_task_id_outside_bigint_is_a_422_and_the_connection_keeps_serving(
        live_node: Callable[..., LiveNode], task_id: int, route: str,
        payload: dict[str, object]) -> None:
    node = live_node("gpu-1")
    response = node.post(f"/v1/tasks/{task_id}/{route}", payload)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert "task_id" in response.json()["error"]["message"]
    # the next request on the same client is served (the DB connection was not poisoned)
    assert node.post("/v1/nodes/gpu-1/heartbeat", {}).status_code == 200


@pytest.mark.parametrize("task_id", [TOO_BIG, TOO_SMALL])
def test_admin_verification_failed_refuses_ids_outside_bigint(client: TestClient,
                                                             task_id: int) -> None:
    response = client.post(f"/v1/admin/tasks/{task_id}/verification-failed",
                           json={"node_id": "gpu-1"}, headers={"x-admin-key": ADMIN_KEY})
    assert response.status_code == 422, response.text


@pytest.mark.parametrize("epoch", [TOO_BIG, -1])
def test_score_proof_epoch_outside_bigint_is_a_422(client: TestClient, epoch: int) -> None:
    response = client.get(f"/v1/nodes/0x{'a' * 40}/score-proof", params={"epoch": epoch})
    assert response.status_code == 422, response.text
    assert client.get("/healthz").status_code == 200


def test_the_task_limit_counts_tiles_not_frames() -> None:
    JobSpec.model_validate(blender_spec(frames=MAX_TASKS_PER_JOB // 64, tiles=64))
    with pytest.raises(ValidationError, match="tasks"):
        JobSpec.model_validate(blender_spec(frames=MAX_TASKS_PER_JOB // 64 + 1, tiles=64))
    with pytest.raises(ValidationError, match="tasks"):
        JobSpec.model_validate(blender_spec(frames=1_000, tiles=64))


def test_a_job_of_64000_tiles_is_refused_before_anything_is_stored(
        new_wallet: Callable[[], Wallet], factory: sessionmaker[Session]) -> None:
    response = new_wallet().send("POST", "/v1/jobs", {
        "job_id": "0x" + "1" * 64, "spec": blender_spec(frames=1_000, tiles=64)},
        headers={"idempotency-key": "key-00001"})
    assert response.status_code == 422, response.text
    assert "at most 10000 per job" in response.json()["error"]["message"]
    assert count(factory, Job) == 0


@pytest.mark.parametrize("deadline", [0, 1_700_000_000])  # the epoch, and the clock's now
def test_a_job_whose_deadline_has_passed_is_refused(
        new_wallet: Callable[[], Wallet], factory: sessionmaker[Session],
        deadline: int) -> None:
    response = new_wallet().send("POST", "/v1/jobs", {
        "job_id": "0x" + "2" * 64, "spec": blender_spec(frames=2, tiles=1, deadline=deadline)},
        headers={"idempotency-key": "key-00002"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "deadline_passed"
    assert count(factory, Job) == 0


def test_a_405_names_the_allowed_methods(client: TestClient) -> None:
    response = client.put("/v1/nodes", json={})
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"  # both routes on the path
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_malformed_json_has_its_own_code(new_wallet: Callable[[], Wallet]) -> None:
    wallet = new_wallet()
    body = b'{"node_id": "gpu-1",'
    headers = {**wallet.signed_headers("POST", "/v1/nodes", body),
               "content-type": "application/json"}
    response = wallet.http.post("/v1/nodes", content=body, headers=headers)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "malformed_json"


@pytest.mark.parametrize("invalid", [
    registration("gpu-1", slots=0),  # out of range
    {"node_id": "gpu-1"},  # fields missing
    registration("gpu-1", extra="x"),  # unknown field
])
def test_a_signed_request_refused_as_invalid_does_not_spend_its_nonce(
        new_wallet: Callable[[], Wallet], factory: sessionmaker[Session],
        invalid: dict[str, object]) -> None:
    wallet = new_wallet()
    refused = wallet.send("POST", "/v1/nodes", invalid, nonce=777)
    assert refused.status_code == 422, refused.text
    assert count(factory, UsedNonce) == 0 and count(factory, Node) == 0
    # the same nonce still serves a valid request, once
    assert wallet.send("POST", "/v1/nodes", registration("gpu-1"), nonce=777).status_code == 200
    replay = wallet.send("POST", "/v1/nodes", registration("gpu-1"), nonce=777)
    assert replay.status_code == 401
    assert replay.json()["error"]["code"] == "nonce_replayed"


def test_the_high_s_twin_of_a_signature_is_refused(new_wallet: Callable[[], Wallet],
                                                   factory: sessionmaker[Session]) -> None:
    wallet = new_wallet()
    body = json.dumps(registration("gpu-1")).encode()
    headers = {**wallet.signed_headers("POST", "/v1/nodes", body),
               "content-type": "application/json"}
    signature = bytes.fromhex(headers[HEADER_SIGNATURE][2:])
    r, s, v = signature[:32], int.from_bytes(signature[32:64], "big"), signature[64]
    twin = r + (SECP256K1_N - s).to_bytes(32, "big") + bytes([55 - v])  # 27 <-> 28
    response = wallet.http.post("/v1/nodes", content=body,
                                  headers={**headers, HEADER_SIGNATURE: "0x" + twin.hex()})
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "signature_high_s"
    assert count(factory, Node) == 0 and count(factory, UsedNonce) == 0
    # the original (low-s) signature is still good
    assert wallet.http.post("/v1/nodes", content=body, headers=headers).status_code == 200


@pytest.fixture
def rate_limited(db_url: str, tmp_path: Path, clock: VirtualClock) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                        json_logs=False, admin_key=SecretStr(ADMIN_KEY), pls_placement=False,
                        registrations_per_hour=3)
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client


def test_registrations_are_rate_limited_per_wallet(rate_limited: TestClient,
                                                   clock: VirtualClock) -> None:
    wallet = make_wallet(rate_limited, clock, chain_id=31337, orchestrator_id=ORCHESTRATOR_ID)
    other = make_wallet(rate_limited, clock, chain_id=31337, orchestrator_id=ORCHESTRATOR_ID)
    for index in range(3):
        assert wallet.send("POST", "/v1/nodes", registration(f"n-{index}")).status_code == 200
    refused = wallet.send("POST", "/v1/nodes", registration("n-3"))
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 0 < int(refused.headers["retry-after"]) <= 3600
    assert other.send("POST", "/v1/nodes", registration("m-0")).status_code == 200
    clock.advance(3600)
    assert wallet.send("POST", "/v1/nodes", registration("n-3")).status_code == 200


def test_replayed_or_invalid_registrations_spend_nothing_of_the_wallets_allowance(
        rate_limited: TestClient, clock: VirtualClock) -> None:
    wallet = make_wallet(rate_limited, clock, chain_id=31337, orchestrator_id=ORCHESTRATOR_ID)
    body = json.dumps(registration("n-0")).encode()
    captured = {**wallet.signed_headers("POST", "/v1/nodes", body),
                "content-type": "application/json"}
    assert wallet.http.post("/v1/nodes", content=body, headers=captured).status_code == 200
    for _ in range(60):  # an eavesdropper replays the captured registration
        replay = wallet.http.post("/v1/nodes", content=body, headers=captured)
        assert replay.status_code == 401, replay.text
    for index in range(5):  # and malformed ones (refused before the nonce is burnt)
        invalid = wallet.send("POST", "/v1/nodes", {"node_id": f"bad-{index}"})
        assert invalid.status_code == 422, invalid.text
    # the wallet's own registrations: two more fit the allowance of 3, the fourth does not
    for index in (1, 2):
        assert wallet.send("POST", "/v1/nodes", registration(f"n-{index}")).status_code == 200
    assert wallet.send("POST", "/v1/nodes", registration("n-3")).status_code == 429


@pytest.fixture
def staked_app(db_url: str, tmp_path: Path, clock: VirtualClock,
               chain: MeshChain) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                        json_logs=False, admin_key=SecretStr(ADMIN_KEY), pls_placement=True,
                        node_stake=10 * 10**18, pls_stake_ttl_s=0)
    with TestClient(create_app(settings, clock=clock, stake_reader=chain)) as client:
        yield client


def test_a_node_counts_only_once_its_provider_has_staked_for_it(
        staked_app: TestClient, clock: VirtualClock, chain: MeshChain,
        factory: sessionmaker[Session]) -> None:
    provider = dev_account(5)
    wallet = make_wallet(staked_app, clock, chain_id=31337, orchestrator_id=ORCHESTRATOR_ID,
                    account=Account.from_key(provider.key))
    refused = wallet.send("POST", "/v1/nodes", registration("gpu-1"))
    assert refused.status_code == 402, refused.text
    assert refused.json()["error"]["code"] == "stake_required"
    assert count(factory, Node) == 0
    chain.account(provider).stake(15 * 10**18)  # backs one node of 10, not two
    assert wallet.send("POST", "/v1/nodes", registration("gpu-1")).status_code == 200
    assert wallet.send("POST", "/v1/nodes", registration("gpu-1", slots=2)).status_code == 200
    second = wallet.send("POST", "/v1/nodes", registration("gpu-2"))
    assert second.status_code == 402
    assert count(factory, Node) == 1


@pytest.mark.parametrize("route", ["/v1/tasks/1/complete", "/v1/checks/1/result"])
def test_a_render_of_the_most_chunks_the_schema_allows_is_judged_not_refused_as_too_large(
        live_node: Callable[..., LiveNode], route: str) -> None:
    """The signed fuzz found a schema-valid body of 4,096 chunks (RenderIn's maximum) refused
    413 by the 64 kB JSON limit: these routes take a body that size, and one chunk more is
    the schema's own 422."""
    node = live_node("gpu-1")
    chunk = {"offset": 65_535, "length": 65_536, "sha256": "ab" * 32}
    render = {"blender": "b" * 128, "kernel": "k" * 32}

    def send(chunks: int) -> tuple[int, str]:
        body = ({"result_sha256": "ab" * 32, "render": {**render, "chunks": [chunk] * chunks}}
                if "tasks" in route else
                {"chunks": [chunk] * chunks, "frame_sha256": "ab" * 32, "render": render})
        response = node.post(route, body)
        return response.status_code, response.json()["error"]["code"]

    assert send(MAX_RENDER_CHUNKS) == (404, "task_not_found" if "tasks" in route
                                       else "check_not_found")
    assert send(MAX_RENDER_CHUNKS + 1) == (422, "invalid_request")


def test_a_region_longer_than_its_column_is_a_422_and_registers_nothing(
        new_wallet: Callable[[], Wallet], factory: sessionmaker[Session]) -> None:
    """The column holds 32 characters: on PostgreSQL a longer region the schema let through
    failed in the database (a 500)."""
    wallet = new_wallet()
    refused = wallet.send("POST", "/v1/nodes", registration("gpu-1", region="r" * 33))
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "invalid_request")
    assert count(factory, Node) == 0
    assert wallet.send("POST", "/v1/nodes", registration("gpu-1", region="r" * 32)
                       ).status_code == 200


@pytest.mark.parametrize("field,value", [("vram_gb", "24"), ("slots", "1"), ("slots", True),
                                         ("price_per_gpu_hour", "100"),
                                         ("compute_capability", "8.9"),
                                         ("compute_capability", False)])
def test_a_json_body_takes_numbers_of_its_own_type_only(
        new_wallet: Callable[[], Wallet], factory: sessionmaker[Session], field: str,
        value: object) -> None:
    """A number the schema types as an integer (or a number) is refused as a string or a
    boolean, as the schema says: "24" for an integer was accepted. An integer written 24.0 is
    one to JSON Schema (the fuzz sends such) and stays accepted."""
    wallet = new_wallet()
    refused = wallet.send("POST", "/v1/nodes", registration("gpu-1", **{field: value}))
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "invalid_request")
    assert count(factory, Node) == 0
    accepted = wallet.send("POST", "/v1/nodes", registration("gpu-1", vram_gb=24.0, slots=2.0))
    assert accepted.status_code == 200, accepted.text
