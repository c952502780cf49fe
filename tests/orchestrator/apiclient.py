"""A signing test client: the same request signing an agent or customer performs."""

from __future__ import annotations

import itertools
import json
from typing import Any

from eth_account import Account
from fastapi.testclient import TestClient
from httpx import Response

from orchestrator.api.auth import sign_request

_nonces = itertools.count(1)


class VirtualClock:
    """Test time that moves only when told to."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def registration(node_id: str, **overrides: object) -> dict[str, object]:
    """A node registration body with sensible defaults."""
    body: dict[str, object] = {"node_id": node_id, "gpu_model": "RTX4090", "vram_gb": 24,
                               "compute_capability": 8.9, "region": "eu",
                               "price_per_gpu_hour": 100, "slots": 1}
    body.update(overrides)
    return body


class Wallet:
    """Signs requests exactly as an agent or customer does (EIP-712, fresh nonce each time)."""

    def __init__(self, client: TestClient, clock: VirtualClock, *, chain_id: int,
                 orchestrator_id: str, account: Any = None) -> None:
        self.account = account or Account.create()
        self.client = client
        self.chain_id = chain_id
        self.orchestrator_id = orchestrator_id
        self.clock = clock

    @property
    def address(self) -> str:
        return str(self.account.address)

    def headers(self, method: str, path: str, body: bytes, **overrides: Any) -> dict[str, str]:
        params: dict[str, Any] = {
            "nonce": next(_nonces), "expiry": int(self.clock()) + 60,
            "chain_id": self.chain_id, "orchestrator_id": self.orchestrator_id}
        params.update(overrides)
        return sign_request(self.account.key, method=method, path=path, body=body, **params)

    def send(self, method: str, path: str, payload: Any = None, *,
             extra_headers: dict[str, str] | None = None, **overrides: Any) -> Response:
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = self.headers(method, path, body, **overrides)
        headers["content-type"] = "application/json"
        headers.update(extra_headers or {})
        return self.client.request(method, path, content=body, headers=headers)
