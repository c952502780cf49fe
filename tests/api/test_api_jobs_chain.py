"""Job submission against a real escrow on anvil: accepted only when customer, amount and
spec hash on chain match the signed submission."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from eth_utils import keccak
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.api.schemas import JobSpec
from orchestrator.chain.anvil import Anvil, dev_account
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from orchestrator.config import Settings
from orchestrator.db import jobs as job_db
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import TaskNeeds
from orchestrator.main import create_app
from orchestrator.services import settlement
from orchestrator.services.blobs import collect_expired
from protocol.client import Wallet
from tests.clients import VirtualClock, join, make_wallet

pytestmark = pytest.mark.anvil
PAYMENT = 5 * 10**18
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def mesh_chain() -> Iterator[MeshChain]:
    with Anvil() as anvil:
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        chain = MeshChain(w3, deployment)
        chain.account(dev_account(0)).mint(dev_account(4).address, 100 * PAYMENT)
        yield chain


@pytest.fixture
def chain_client(settings: Settings, clock: VirtualClock, mesh_chain: MeshChain
                 ) -> Iterator[TestClient]:
    with TestClient(create_app(settings, escrow_reader=mesh_chain, clock=clock)) as client:
        yield client


SCENE = b"a scene the customer uploads before it submits"
SCENE_SHA = hashlib.sha256(SCENE).hexdigest()


def spec(frames: int = 3) -> dict[str, Any]:
    return {"workload": {"kind": "blender", "blend_sha256": SCENE_SHA,
                         "frames": {"start": 1, "end": frames}, "tiles": 1},
            "needs": {"min_vram_gb": 8, "gpu_models": None, "regions": None,
                      "max_price_per_gpu_hour": None, "priority": "normal",
                      "expected_duration_s": 60.0},
            "deadline": 2_000_000_000}


def escrow(chain: MeshChain, job_spec: dict[str, Any]) -> str:
    job_id = keccak(text=f"test job {next(_ids)}")
    chain.account(dev_account(4)).create_job(job_id, PAYMENT, 2_000_000_000,
                                             JobSpec.model_validate(job_spec).canonical_hash())
    return "0x" + job_id.hex()


def customer(client: TestClient, settings: Settings, clock: VirtualClock,
             index: int = 4) -> Wallet:
    """The customer's wallet, which has uploaded the scene the specs name."""
    wallet = make_wallet(client, clock, chain_id=settings.chain_id,
                         orchestrator_id=settings.orchestrator_id, account=dev_account(index))
    wallet.upload(SCENE_SHA, SCENE)
    return wallet


def test_submit_withMatchingEscrow_createsAFundedJobWithOneTaskPerFrame(
        chain_client: TestClient, mesh_chain: MeshChain, settings: Settings,
        clock: VirtualClock) -> None:
    job_spec = spec(frames=3)
    job_id = escrow(mesh_chain, job_spec)
    wallet = customer(chain_client, settings, clock)
    body = {"job_id": job_id, "spec": job_spec}
    response = wallet.send("POST", "/v1/jobs", body, headers={"idempotency-key": "key-0001"})
    assert response.status_code == 200, response.text
    job = response.json()
    assert (job["status"], job["amount"], job["tasks"]) == ("funded", PAYMENT, {"pending": 3})
    again = wallet.send("POST", "/v1/jobs", body, headers={"idempotency-key": "key-0001"})
    assert again.json() == job  # the same answer, not a second job
    other = dict(body, spec=spec(frames=2))
    reused = wallet.send("POST", "/v1/jobs", other, headers={"idempotency-key": "key-0001"})
    assert reused.json()["error"]["code"] == "idempotency_key_reused"


def test_submit_flags_a_job_no_registered_node_can_take(
        chain_client: TestClient, mesh_chain: MeshChain, settings: Settings,
        clock: VirtualClock) -> None:
    """Restricted to a provider with no nodes, the job would wait forever: the answer to
    submit says so (and that cancelling refunds it at once); an open job is not flagged
    while a node that fits is registered."""
    join(make_wallet(chain_client, clock, chain_id=settings.chain_id,
                     orchestrator_id=settings.orchestrator_id), "node-elsewhere")
    wallet = customer(chain_client, settings, clock)
    lonely = dev_account(7).address
    restricted = dict(spec(frames=1), needs=dict(spec()["needs"], providers=[lonely]))
    answers = []
    for job_spec, key in ((restricted, "flag-0001"), (spec(frames=1), "flag-0002")):
        response = wallet.send("POST", "/v1/jobs", {"job_id": escrow(mesh_chain, job_spec),
                                                    "spec": job_spec},
                               headers={"idempotency-key": key})
        assert response.status_code == 200, response.text
        answers.append(response.json())
    flagged, open_job = answers
    assert flagged["warning"] == (f"no registered node among providers {lonely} can take this "
                                  "job: it waits until one registers; `mesh job cancel` "
                                  "refunds its escrow at once")
    assert open_job["warning"] is None
    assert wallet.send("GET", f"/v1/jobs/{flagged['job_id']}").json()["warning"] == (
        flagged["warning"])


def test_a_customer_lists_its_own_jobs_newest_first_and_no_one_elses(
        chain_client: TestClient, mesh_chain: MeshChain, settings: Settings,
        clock: VirtualClock) -> None:
    wallet = customer(chain_client, settings, clock)
    submitted = []
    for n in range(3):
        job_spec = spec(frames=n + 1)
        job_id = escrow(mesh_chain, job_spec)
        assert wallet.send("POST", "/v1/jobs", {"job_id": job_id, "spec": job_spec},
                           headers={"idempotency-key": f"list-{job_id[2:18]}"}
                           ).status_code == 200
        submitted.append(job_id)
        clock.advance(1)
    mine = wallet.send("GET", "/v1/jobs")
    assert mine.status_code == 200, mine.text
    listed = [job["job_id"] for job in mine.json()]
    assert listed[:3] == submitted[::-1]
    assert {job["customer"] for job in mine.json()} == {wallet.address}
    other = make_wallet(chain_client, clock, chain_id=settings.chain_id,
                        orchestrator_id=settings.orchestrator_id, account=dev_account(7))
    assert not {j["job_id"] for j in other.send("GET", "/v1/jobs").json()} & set(submitted)
    assert chain_client.get("/v1/jobs").status_code == 401  # signed only


def test_submit_withoutEscrow_isRefused(chain_client: TestClient, settings: Settings,
                                        clock: VirtualClock) -> None:
    response = customer(chain_client, settings, clock).send(
        "POST", "/v1/jobs", {"job_id": "0x" + "ee" * 32, "spec": spec()},
        headers={"idempotency-key": "key-0002"})
    assert (response.status_code, response.json()["error"]["code"]) == (402, "escrow_missing")


def test_submit_withAnotherSpec_thanEscrowed_isRefused(
        chain_client: TestClient, mesh_chain: MeshChain, settings: Settings,
        clock: VirtualClock) -> None:
    job_id = escrow(mesh_chain, spec(frames=3))
    response = customer(chain_client, settings, clock).send(
        "POST", "/v1/jobs", {"job_id": job_id, "spec": spec(frames=300)},
        headers={"idempotency-key": "key-0003"})
    assert response.json()["error"]["code"] == "spec_hash_mismatch"
    assert chain_client.get(f"/v1/jobs/{job_id}").status_code == 404


def test_submit_bySomeoneElse_thanTheEscrowCustomer_isForbidden(
        chain_client: TestClient, mesh_chain: MeshChain, settings: Settings,
        clock: VirtualClock) -> None:
    job_spec = spec()
    job_id = escrow(mesh_chain, job_spec)
    response = customer(chain_client, settings, clock, index=7).send(
        "POST", "/v1/jobs", {"job_id": job_id, "spec": job_spec},
        headers={"idempotency-key": "key-0004"})
    assert (response.status_code, response.json()["error"]["code"]) == (
        403, "escrow_customer_mismatch")


def test_a_job_names_as_input_only_what_its_customer_uploaded_and_keeps_it(
        chain_client: TestClient, mesh_chain: MeshChain, settings: Settings,
        clock: VirtualClock) -> None:
    customer(chain_client, settings, clock, index=7)  # another wallet stored the scene
    job_spec = spec()
    job_id = escrow(mesh_chain, job_spec)
    wallet = make_wallet(chain_client, clock, chain_id=settings.chain_id,
                         orchestrator_id=settings.orchestrator_id, account=dev_account(4))
    body = {"job_id": job_id, "spec": job_spec}
    refused = wallet.send("POST", "/v1/jobs", body, headers={"idempotency-key": "key-0005"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "input_not_uploaded")
    wallet.upload(SCENE_SHA, SCENE)
    accepted = wallet.send("POST", "/v1/jobs", body, headers={"idempotency-key": "key-0005"})
    assert accepted.status_code == 200, accepted.text
    ctx = chain_client.app.state.ctx  # type: ignore[attr-defined]
    clock.advance(settings.upload_ttl_s + 1)
    with ctx.factory.begin() as session:  # the other wallet's upload expires; the job's stays
        assert collect_expired(session, store=ctx.blobs, now=ctx.now()) == []
    assert ctx.blobs.exists(SCENE_SHA)


def test_settlement_seen_on_chain_settles_the_job_and_is_measured(
        mesh_chain: MeshChain, factory: sessionmaker[Session], settings: Settings) -> None:
    job_spec = spec()
    job_id = escrow(mesh_chain, job_spec)
    with factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id=job_id, customer=dev_account(4).address, spec=job_spec,
            spec_hash="0x" + "0" * 64, amount=PAYMENT, deadline=2e9, needs=TaskNeeds(),
            payloads=({"frame": 1},)), now=100.0, status=JobStatus.SETTLING)
    with factory.begin() as session:
        pending = settlement.sync_settlements(session, read_escrow=mesh_chain.escrowed_job,
                                              now=110.0)
    assert pending.settled == [] and pending.diverged == []
    mesh_chain.account(dev_account(1)).settle(bytes.fromhex(job_id[2:]),
                                              [dev_account(5).address], [PAYMENT // 2],
                                              b"\x01" * 32)
    with factory.begin() as session:
        synced = settlement.sync_settlements(session, read_escrow=mesh_chain.escrowed_job,
                                             now=130.0)
    assert synced.settled == [(job_id, 30.0)]
    with factory() as session:
        job = job_db.get_job(session, job_id=job_id)
        assert job is not None and job.status == "settled"
