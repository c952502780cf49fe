"""Helpers for the PLS service tests: a signing provider wallet, a logged-in node, a chain
stand-in for tests that are not about the chain (a fixed free-stake map), job builders."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import crud
from orchestrator.domain.chain_views import ProviderStake
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import TaskNeeds
from tests.orchestrator.apiclient import VirtualClock, Wallet

ADMIN_KEY = "pls-admin-key"
ADMIN = {"x-admin-key": ADMIN_KEY}
TOKEN = 10**18
_nonces = itertools.count(1)
_jobs = itertools.count(1)


class FixedStake:
    """Free stake per provider, as the chain would report it (tests not about the chain)."""

    def __init__(self, free: Mapping[str, int] | None = None) -> None:
        self.free: dict[str, int] = dict(free or {})
        self.reads = 0

    def provider_stake(self, provider: str) -> ProviderStake:
        self.reads += 1
        free = self.free.get(provider, 0)
        return ProviderStake(provider=provider, bonded=free, locked=0, unbonding=0, tier=1)


@dataclass
class Agent:
    """A registered, logged-in node and its provider wallet."""

    node_id: str
    wallet: Wallet
    token: str
    client: TestClient

    def post(self, path: str, payload: object = None) -> Response:
        return self.client.post(path, json=payload,
                                headers={"authorization": f"Bearer {self.token}"})

    def login(self) -> None:
        """A fresh session token (they live 15 minutes)."""
        login = self.wallet.send("POST", "/v1/auth/login", {"node_id": self.node_id})
        assert login.status_code == 200, login.text
        self.token = login.json()["token"]

    def beat(self) -> None:
        assert self.post(f"/v1/nodes/{self.node_id}/heartbeat").status_code == 200

    def upload(self, data: bytes) -> str:
        """Store a blob (a checkpoint or a result) under the node's session; its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        put = self.client.put(f"/v1/blobs/{sha}", content=data,
                              headers={"authorization": f"Bearer {self.token}"})
        assert put.status_code == 200, put.text
        return sha

    def probe(self, *, rtt_s: float = 0.0, clock: VirtualClock | None = None) -> float:
        """One ping-pong round the orchestrator times (the clock moves `rtt_s` in between)."""
        sent = self.post(f"/v1/nodes/{self.node_id}/probe")
        assert sent.status_code == 200, sent.text
        nonce = sent.json()["nonce"]
        if clock is not None:
            clock.advance(rtt_s)
        echo = self.post(f"/v1/nodes/{self.node_id}/probe/echo", {"nonce": nonce})
        assert echo.status_code == 200, echo.text
        return float(echo.json()["rtt_ms"])


def gpu_sample(at: float, *, temperature_c: float = 60.0, throttle: int = 0,
               clock_mhz: float = 2500.0) -> dict[str, float | int]:
    return {"at": at, "temperature_c": temperature_c, "sm_clock_mhz": clock_mhz,
            "max_sm_clock_mhz": 2500.0, "throttle_reasons": throttle, "utilization_pct": 95.0,
            "memory_used_mb": 8000.0, "memory_total_mb": 24000.0, "power_w": 300.0,
            "power_limit_w": 450.0}


def make_job(factory: sessionmaker[Session], *, tasks: int = 1, value: int = TOKEN,
             needs: TaskNeeds | None = None, now: float = 0.0, customer: str = "0x" + "c" * 40,
             job_id: str | None = None) -> str:
    """A funded job written straight to the DB (its escrow is not what these tests check)."""
    job_id = job_id or "0x" + f"{next(_jobs) + 0x9000:064x}"
    with factory.begin() as session:
        crud.create_job(session, job_id=job_id, customer=customer, spec={"kind": "command"},
                        spec_hash="0x" + "0" * 64, amount=value * tasks, deadline=1e12,
                        needs=needs or TaskNeeds(value=value),
                        task_payloads=[{"shard": i} for i in range(tasks)], now=now,
                        status=JobStatus.FUNDED)
    return job_id
