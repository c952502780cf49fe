"""The signed client every program uses, against the real service: what it signs is taken,
what the service refuses comes back as one error that carries the service's code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from eth_account import Account
from fastapi.testclient import TestClient
from pydantic import SecretStr

from orchestrator.config import Settings
from orchestrator.main import create_app
from protocol.client import ApiCallError, Wallet, expect, sha256_file
from protocol.session import NodeSession
from tests.builders import lease_to
from tests.clients import VirtualClock, registration


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def settings(db_url: str, tmp_path: Path, secret: str) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                    json_logs=False, session_secret=SecretStr(secret), node_stake=0)


@pytest.fixture
def service(db_url: str, tmp_path: Path, clock: VirtualClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings(db_url, tmp_path, "a" * 32), clock=clock)) as client:
        yield client


def wallet(client: httpx.Client, clock: VirtualClock, key: bytes | None = None) -> Wallet:
    return Wallet(client, key or bytes(Account.create().key), chain_id=31337,
                  orchestrator_id="depin-mesh-orchestrator", clock=clock)


def test_what_the_wallet_signs_is_taken_once(service: TestClient, clock: VirtualClock) -> None:
    provider = wallet(service, clock)
    assert expect(provider.send("POST", "/v1/nodes", registration("gpu-1")))["node_id"] == "gpu-1"
    # registering again is idempotent, and it spends nonce 5
    expect(provider.send("POST", "/v1/nodes", registration("gpu-1"), nonce=5))
    with pytest.raises(ApiCallError) as refused:
        expect(provider.send("POST", "/v1/nodes", registration("gpu-1"), nonce=5))
    assert (refused.value.status, refused.value.code) == (401, "nonce_replayed")


def test_signatures_expire_by_the_wallets_clock(service: TestClient,
                                                clock: VirtualClock) -> None:
    provider = wallet(service, clock)
    stale = provider.signed_headers("POST", "/v1/nodes", b"{}")
    clock.advance(61)  # past the 60 s a signature lives
    answer = service.post("/v1/nodes", content=b"{}",
                          headers={**stale, "content-type": "application/json"})
    assert answer.json()["error"]["code"] == "signature_expired"


def test_a_refusal_is_one_error_with_the_service_code(service: TestClient,
                                                      clock: VirtualClock) -> None:
    with pytest.raises(ApiCallError) as missing:
        expect(wallet(service, clock).send("GET", "/v1/jobs/0x" + "0" * 64))
    assert (missing.value.status, missing.value.code) == (404, "job_not_found")
    assert str(missing.value) == f"no job 0x{'0' * 64} (job_not_found)"  # its words, no JSON
    proxy = httpx.Response(502, text="<html>Bad Gateway</html>",  # not the service's body
                           request=httpx.Request("GET", "http://mesh/v1/jobs/0x12"))
    with pytest.raises(ApiCallError) as bare:
        expect(proxy)
    assert str(bare.value) == "GET /v1/jobs/0x12 -> 502: <html>Bad Gateway</html>"


def test_the_key_never_shows(clock: VirtualClock) -> None:
    key = bytes.fromhex("33" * 32)
    client = Wallet.connect("http://127.0.0.1:9", key, chain_id=1, orchestrator_id="o")
    assert repr(client) == f"Wallet({Account.from_key(key).address})"
    client.close()


def test_uploads_are_named_by_their_content(service: TestClient, clock: VirtualClock,
                                            tmp_path: Path) -> None:
    provider = wallet(service, clock)
    expect(provider.send("POST", "/v1/nodes", registration("gpu-1")))
    node = NodeSession(provider, "gpu-1")
    node.login()
    lease_to(service.app.state.ctx.factory, "gpu-1", now=clock())  # type: ignore[attr-defined]
    path = tmp_path / "chunk"
    path.write_bytes(b"rendered pixels")
    sha = sha256_file(path)
    assert node.request("PUT", f"/v1/blobs/{sha}", content=path.read_bytes()).status_code == 200
    bad = node.send("PUT", f"/v1/blobs/{'0' * 64}", content=b"other bytes")
    assert bad.status_code == 422


def test_a_session_logs_in_again_when_the_service_forgot_its_token(
        db_url: str, tmp_path: Path, service: TestClient, clock: VirtualClock) -> None:
    """A restarted orchestrator with another session secret refuses the old token once; the
    session signs a new login and the request goes through."""
    provider = wallet(service, clock)
    expect(provider.send("POST", "/v1/nodes", registration("gpu-1")))
    node = NodeSession(provider, "gpu-1")
    first = node.login()
    with TestClient(create_app(settings(db_url, tmp_path, "b" * 32), clock=clock)) as restarted:
        provider.http = restarted
        assert node.send("POST", "/v1/nodes/gpu-1/heartbeat").status_code == 401
        assert node.request("POST", "/v1/nodes/gpu-1/heartbeat").status_code == 200
        assert node.token != first
        with pytest.raises(ApiCallError) as foreign:
            node.request("POST", "/v1/nodes/gpu-2/heartbeat")
        assert foreign.value.status in {403, 404}
