"""Builders for orchestrator tests: funded jobs and registered nodes written straight to the DB
(tests that are not about the chain skip the escrow check)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.config import Settings
from orchestrator.db import crud
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import NodeSpec, TaskNeeds, Tier
from orchestrator.main import create_app
from tests.orchestrator.apiclient import VirtualClock, Wallet, registration

PROVIDER = "0x" + "a" * 40
CUSTOMER = "0x" + "c" * 40
ADMIN_KEY = "test-admin-key"
_job_numbers = itertools.count(1)

NodeMaker = Callable[..., list[str]]
JobMaker = Callable[..., str]


def spec(node_id: str, **overrides: object) -> NodeSpec:
    fields: dict[str, object] = {
        "node_id": node_id, "provider": PROVIDER, "gpu_model": "RTX4090", "vram_gb": 24,
        "compute_capability": 8.9, "region": "eu", "price_per_gpu_hour": 100, "slots": 2,
        "tier": Tier.STANDARD}
    fields.update(overrides)
    return NodeSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def make_nodes(factory: sessionmaker[Session]) -> NodeMaker:
    def build(count: int, *, slots: int = 2, prefix: str = "node", now: float = 0.0,
              **overrides: object) -> list[str]:
        ids = [f"{prefix}-{i}" for i in range(count)]
        with factory.begin() as session:
            for node_id in ids:
                crud.register_node(session, spec=spec(node_id, slots=slots, **overrides), now=now)
        return ids
    return build


@pytest.fixture
def make_job(factory: sessionmaker[Session]) -> JobMaker:
    def build(tasks: int, *, needs: TaskNeeds | None = None, now: float = 0.0,
              deadline: float = 1e12) -> str:
        job_id = "0x" + f"{next(_job_numbers):064x}"
        with factory.begin() as session:
            crud.create_job(session, job_id=job_id, customer=CUSTOMER, spec={"kind": "command"},
                            spec_hash="0x" + "0" * 64, amount=10**18, deadline=deadline,
                            needs=needs or TaskNeeds(),
                            task_payloads=[{"frame": i} for i in range(tasks)], now=now,
                            status=JobStatus.FUNDED)
        return job_id
    return build


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    # pls_placement off: these tests are about the core; tests/services covers the gates
    return Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                    json_logs=False, admin_key=SecretStr(ADMIN_KEY),
                    max_blob_bytes=1024 * 1024, pls_placement=False)


@pytest.fixture
def client(settings: Settings, clock: VirtualClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings, clock=clock)) as test_client:
        yield test_client


@pytest.fixture
def new_wallet(client: TestClient, settings: Settings, clock: VirtualClock
               ) -> Callable[[], Wallet]:
    return lambda: Wallet(client, chain_id=settings.chain_id,
                          orchestrator_id=settings.orchestrator_id, clock=clock)


@dataclass
class LiveNode:
    """A registered, logged-in node and its provider wallet."""

    node_id: str
    wallet: Wallet
    token: str
    client: TestClient

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def post(self, path: str, payload: object = None) -> Response:
        return self.client.post(path, json=payload, headers=self.auth)


@pytest.fixture
def live_node(client: TestClient, new_wallet: Callable[[], Wallet]) -> Callable[..., LiveNode]:
    def build(node_id: str, **overrides: object) -> LiveNode:
        wallet = new_wallet()
        assert wallet.send("POST", "/v1/nodes", registration(node_id, **overrides)).status_code \
            == 200
        login = wallet.send("POST", "/v1/auth/login", {"node_id": node_id})
        assert login.status_code == 200, login.text
        return LiveNode(node_id, wallet, login.json()["token"], client)
    return build
