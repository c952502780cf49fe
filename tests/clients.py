"""The tests' side of the API: a virtual clock, registration bodies, and `protocol`'s signing
client and node session (the very ones an agent or customer uses) on a test client."""

from __future__ import annotations

import hashlib

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount

from protocol.client import Wallet
from protocol.session import NodeSession


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


def make_wallet(client: httpx.Client, clock: VirtualClock, *, chain_id: int,
                orchestrator_id: str, account: LocalAccount | None = None) -> Wallet:
    """`protocol`'s signing client (the one agents and customers use) on the app's test client
    and virtual clock, for `account` or a fresh key."""
    account = account or Account.create()
    return Wallet(client, bytes(account.key), chain_id=chain_id,
                  orchestrator_id=orchestrator_id, clock=clock)


class LiveNode(NodeSession):
    """A registered, logged-in node: `protocol`'s session (the agent's own) with the shortcuts
    tests use. Requests go through its wallet's client."""

    @property
    def client(self) -> httpx.Client:
        return self.wallet.http

    def post(self, path: str, payload: object = None) -> httpx.Response:
        return self.send("POST", path, json=payload)

    def beat(self) -> None:
        assert self.post(f"/v1/nodes/{self.node_id}/heartbeat").status_code == 200

    def upload(self, data: bytes) -> str:
        """Store a blob (a checkpoint or a result) under the node's session; its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        put = self.send("PUT", f"/v1/blobs/{sha}", content=data)
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


def join(wallet: Wallet, node_id: str, **overrides: object) -> LiveNode:
    """Register `node_id` for `wallet`'s provider (`registration` with `overrides`) and log it
    in, as an agent does when it starts."""
    registered = wallet.send("POST", "/v1/nodes", registration(node_id, **overrides))
    assert registered.status_code == 200, registered.text
    node = LiveNode(wallet, node_id)
    node.login()
    return node
