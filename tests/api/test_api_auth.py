from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from eth_account import Account
from eth_utils import keccak
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.api.auth import (
    MAX_NONCE,
    SessionClaims,
    SignedRequest,
    check_token,
    issue_token,
    verify_request,
)
from orchestrator.api.errors import ApiError
from orchestrator.config import Settings
from orchestrator.db import nonces as nonce_db
from protocol.client import Wallet
from protocol.signing import sign_request
from tests.clients import LiveNode, VirtualClock, registration


def test_register_node_withValidSignature_ownsTheNode(new_wallet: Callable[[], Wallet]) -> None:
    wallet = new_wallet()
    response = wallet.send("POST", "/v1/nodes", registration("gpu-1"))
    assert response.status_code == 200, response.text
    assert response.json()["provider"] == wallet.address


def test_replayed_request_isRefused(new_wallet: Callable[[], Wallet],
                                    client: TestClient) -> None:
    wallet = new_wallet()
    body = b'{"node_id":"gpu-1","gpu_model":"A","vram_gb":8,"compute_capability":8,' \
           b'"region":"eu","price_per_gpu_hour":1,"slots":1}'
    headers = wallet.signed_headers("POST", "/v1/nodes", body) | {
        "content-type": "application/json"}
    assert client.post("/v1/nodes", content=body, headers=headers).status_code == 200
    again = client.post("/v1/nodes", content=body, headers=headers)
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "nonce_replayed"


def test_replay_after_the_nonce_cleanup_isStillRefused(
        new_wallet: Callable[[], Wallet], client: TestClient, clock: VirtualClock,
        factory: sessionmaker[Session]) -> None:
    body = json.dumps(registration("gpu-1")).encode()
    headers = new_wallet().signed_headers("POST", "/v1/nodes", body) | {
        "content-type": "application/json"}  # expires 60 s from now
    assert client.post("/v1/nodes", content=body, headers=headers).status_code == 200
    for elapsed in (30, 30):  # half-way, then exactly at the expiry: still a valid request
        clock.advance(elapsed)
        with factory.begin() as session:  # the nonce-gc periodic job
            nonce_db.forget_expired_nonces(session, now=clock())
        again = client.post("/v1/nodes", content=body, headers=headers)
        assert (again.status_code, again.json()["error"]["code"]) == (401, "nonce_replayed")


def test_expired_signature_isRefused(new_wallet: Callable[[], Wallet],
                                     clock: VirtualClock) -> None:
    response = new_wallet().send("POST", "/v1/nodes", registration("gpu-1"),
                                 expiry=int(clock()) - 1)
    assert (response.status_code, response.json()["error"]["code"]) == (401, "signature_expired")


def test_far_future_expiry_isRefused(new_wallet: Callable[[], Wallet],
                                     clock: VirtualClock) -> None:
    response = new_wallet().send("POST", "/v1/nodes", registration("gpu-1"),
                                 expiry=int(clock()) + 10**6)
    assert response.json()["error"]["code"] == "expiry_too_far"


def test_wrong_chain_id_isRefused(new_wallet: Callable[[], Wallet]) -> None:
    response = new_wallet().send("POST", "/v1/nodes", registration("gpu-1"), chain_id=1)
    assert (response.status_code, response.json()["error"]["code"]) == (401, "wrong_chain")


def test_signature_for_another_orchestrator_isRefused(new_wallet: Callable[[], Wallet]) -> None:
    response = new_wallet().send("POST", "/v1/nodes", registration("gpu-1"),
                                 orchestrator_id="someone-else")
    assert response.json()["error"]["code"] == "signature_mismatch"


def test_forged_signature_forAnotherAddress_isRefused(new_wallet: Callable[[], Wallet],
                                                      client: TestClient) -> None:
    victim, forger = new_wallet(), new_wallet()
    body = b"{}"
    headers = forger.signed_headers("POST", "/v1/nodes", body)
    headers["x-mesh-address"] = victim.address
    response = client.post("/v1/nodes", content=body, headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (401, "signature_mismatch")


def test_signature_over_another_body_isRefused(new_wallet: Callable[[], Wallet],
                                               client: TestClient) -> None:
    wallet = new_wallet()
    headers = wallet.signed_headers("POST", "/v1/nodes", b'{"node_id":"a"}')
    response = client.post("/v1/nodes", content=b'{"node_id":"b"}', headers=headers)
    assert response.json()["error"]["code"] == "signature_mismatch"


def test_missing_signature_isRefused(client: TestClient) -> None:
    response = client.post("/v1/nodes", json=registration("gpu-1"))
    assert (response.status_code, response.json()["error"]["code"]) == (401, "signature_missing")


def test_registering_another_providers_node_isForbidden(
        live_node: Callable[..., LiveNode], new_wallet: Callable[[], Wallet]) -> None:
    live_node("gpu-1")
    response = new_wallet().send("POST", "/v1/nodes", registration("gpu-1"))
    assert (response.status_code, response.json()["error"]["code"]) == (403, "node_not_owned")


def test_login_for_another_providers_node_isForbidden(
        live_node: Callable[..., LiveNode], new_wallet: Callable[[], Wallet]) -> None:
    live_node("gpu-1")
    response = new_wallet().send("POST", "/v1/auth/login", {"node_id": "gpu-1"})
    assert response.status_code == 403


def test_heartbeat_withSessionToken_isAccepted(live_node: Callable[..., LiveNode]) -> None:
    node = live_node("gpu-1")
    assert node.post("/v1/nodes/gpu-1/heartbeat").json() == {"ok": True}


def test_heartbeat_withTamperedOrForeignToken_isRefused(
        live_node: Callable[..., LiveNode], client: TestClient) -> None:
    node = live_node("gpu-1")
    live_node("gpu-2")
    tampered = node.token[:-2] + ("AA" if not node.token.endswith("AA") else "BB")
    bad = client.post("/v1/nodes/gpu-1/heartbeat", headers={"authorization": f"Bearer {tampered}"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (401, "token_invalid")
    foreign = client.post("/v1/nodes/gpu-2/heartbeat", headers=node.auth)
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (403, "token_wrong_node")
    assert client.post("/v1/nodes/gpu-1/heartbeat").status_code == 401


def test_session_token_expires(live_node: Callable[..., LiveNode], clock: VirtualClock) -> None:
    node = live_node("gpu-1")
    clock.advance(10_000)
    response = node.post("/v1/nodes/gpu-1/heartbeat")
    assert (response.status_code, response.json()["error"]["code"]) == (401, "token_expired")


def test_oversized_body_isRefusedBeforeParsing(client: TestClient) -> None:
    response = client.post("/v1/nodes", content=b"x" * 70_000,
                           headers={"content-type": "application/json"})
    assert (response.status_code, response.json()["error"]["code"]) == (413, "body_too_large")


def test_popw_answer_route_has_its_own_larger_body_limit(client: TestClient) -> None:
    """A PoPW answer carries Merkle openings: 70 kB passes the size gate there (and is then
    refused for what it is), but the same body on another route is still 413."""
    body = b"x" * 70_000
    headers = {"content-type": "application/json"}
    answer = client.post("/v1/nodes/gpu-1/popw/answer", content=body, headers=headers)
    assert answer.status_code != 413
    over = client.post("/v1/nodes/gpu-1/popw/answer", content=b"x" * 300_000, headers=headers)
    assert (over.status_code, over.json()["error"]["code"]) == (413, "body_too_large")
    elsewhere = client.post("/v1/nodes/gpu-1/heartbeat", content=body, headers=headers)
    assert (elsewhere.status_code, elsewhere.json()["error"]["code"]) == (413, "body_too_large")


def test_admin_routes_needTheAdminKey(client: TestClient) -> None:
    assert client.post("/v1/admin/sweep").status_code == 403
    wrong = client.post("/v1/admin/sweep", headers={"x-admin-key": "nope"})
    assert wrong.json()["error"]["code"] == "admin_key_invalid"
    assert client.post("/v1/admin/sweep", headers={"x-admin-key": "test-admin-key"}
                       ).status_code == 200


def test_healthz_and_metrics_answer(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert "mesh_placements_total" in client.get("/metrics").text


# ---------------------------------------------------------------- the checks themselves

KEY = "0x" + "42" * 32
CHAIN, ORCH, NOW = 31337, "orch-1", 1_700_000_000.0


def signed(*, nonce: int = 7, expiry: int = int(NOW) + 60, body: bytes = b"{}",
           path: str = "/v1/nodes", **overrides: str) -> dict[str, str]:
    headers = sign_request(KEY, method="post", path=path, body=body, nonce=nonce,
                           expiry=expiry, chain_id=CHAIN, orchestrator_id=ORCH)
    headers.update(overrides)
    return headers


def verify(headers: dict[str, str], *, body: bytes = b"{}", now: float = NOW,
           max_age_s: float = 300.0) -> SignedRequest:
    return verify_request(headers, method="POST", path="/v1/nodes", body=body, now=now,
                          chain_id=CHAIN, orchestrator_id=ORCH, max_age_s=max_age_s)


def refused(headers: dict[str, str], **kwargs: object) -> tuple[int, str, str]:
    with pytest.raises(ApiError) as caught:
        verify(headers, **kwargs)  # type: ignore[arg-type]
    return caught.value.status, caught.value.code, caught.value.message


def test_a_signed_request_verifies_to_its_signer_nonce_and_expiry() -> None:
    address = Account.from_key(KEY).address
    assert verify(signed(nonce=0)) == SignedRequest(address, 0, int(NOW) + 60)
    assert verify(signed(nonce=MAX_NONCE)).nonce == MAX_NONCE
    assert verify(signed(expiry=int(NOW))).expiry == int(NOW)  # expiring now: still valid
    assert verify(signed(expiry=int(NOW) + 300)).expiry == int(NOW) + 300  # at the limit
    lower = signed(**{"x-mesh-address": address.lower()})
    assert verify(lower).address == address  # any case of the same address


def test_each_bad_header_gets_its_own_code_and_message() -> None:
    assert refused({}) == (401, "signature_missing", "missing headers: x-mesh-address, "
                           "x-mesh-signature, x-mesh-nonce, x-mesh-expiry, x-mesh-chain-id")
    partial = {k: v for k, v in signed().items() if k != "x-mesh-nonce"}
    assert refused(partial)[2] == "missing headers: x-mesh-nonce"
    assert refused(signed(**{"x-mesh-nonce": "seven"}))[1] == "signature_malformed"
    assert refused(signed(**{"x-mesh-signature": "0xzz"}))[1] == "signature_malformed"
    assert refused(signed(**{"x-mesh-address": "0x1234"}))[2] == (
        "bad address, signature length or nonce")
    short = signed()["x-mesh-signature"][:-2]
    assert refused(signed(**{"x-mesh-signature": short}))[1] == "signature_malformed"
    assert refused(signed(**{"x-mesh-nonce": str(MAX_NONCE + 1)}))[1] == "signature_malformed"
    assert refused(signed(**{"x-mesh-nonce": "-1"}))[1] == "signature_malformed"
    assert refused(signed(**{"x-mesh-chain-id": "1"})) == (
        401, "wrong_chain", f"signed for chain 1, this is {CHAIN}")
    assert refused(signed(expiry=int(NOW) - 1)) == (401, "signature_expired",
                                                   "the request expired")
    assert refused(signed(expiry=int(NOW) + 301)) == (
        401, "expiry_too_far", "expiry may be at most 300s ahead")
    assert refused(signed(), body=b"{ }")[1] == "signature_mismatch"  # another body
    assert refused(signed(**{"x-mesh-signature": "0x" + "00" * 65}))[1] == "signature_invalid"


def test_session_tokens_verify_until_they_expire() -> None:
    secret = b"s" * 32
    claims = SessionClaims(address="0xabc", node_id="gpu-1", expires_at=NOW + 10)
    token = issue_token(secret, claims)
    assert check_token(secret, token, now=NOW + 10) == claims  # valid through its expiry
    with pytest.raises(ApiError) as caught:
        check_token(secret, token, now=NOW + 10.5)
    assert (caught.value.code, caught.value.message) == (
        "token_expired", "the session token expired; log in again")
    with pytest.raises(ApiError) as caught:
        check_token(b"t" * 32, token, now=NOW)
    assert caught.value.code == "token_invalid"
    with pytest.raises(ApiError) as caught:
        check_token(secret, "no-dot-here", now=NOW)
    assert (caught.value.code, caught.value.message) == ("token_malformed",
                                                         "not a session token")
    payload, mac = token.split(".")
    with pytest.raises(ApiError) as caught:
        check_token(secret, f"{payload}.{mac[:-2]}", now=NOW)
    assert caught.value.code in {"token_invalid", "token_malformed"}


# ---------------------------------------------------------------- the wire formats, by hand
# A client in another language builds these from the EIP-712 and token rules alone; the
# expectations below are built the same way, not with the module's own helpers.
def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def eip712_digest_by_hand(*, method: str, path: str, body: bytes, nonce: int, expiry: int,
                          chain_id: int, orchestrator_id: str) -> bytes:
    domain_type = keccak(text="EIP712Domain(string name,string version,uint256 chainId,"
                              "bytes32 salt)")
    domain = keccak(domain_type + keccak(text="DePIN Mesh") + keccak(text="1")
                    + _word(chain_id) + keccak(text=orchestrator_id))
    request_type = keccak(text="MeshRequest(string method,string path,bytes32 bodyHash,"
                               "uint256 nonce,uint256 expiry)")
    message = keccak(request_type + keccak(text=method) + keccak(text=path) + keccak(body)
                     + _word(nonce) + _word(expiry))
    return keccak(b"\x19\x01" + domain + message)


def test_a_request_signed_by_the_eip712_rules_alone_verifies() -> None:
    expiry = int(NOW) + 60
    digest = eip712_digest_by_hand(method="POST", path="/v1/nodes", body=b"{}", nonce=7,
                                   expiry=expiry, chain_id=CHAIN, orchestrator_id=ORCH)
    signature = Account.unsafe_sign_hash(digest, KEY).signature
    address = Account.from_key(KEY).address
    headers = {"x-mesh-address": address, "x-mesh-signature": "0x" + bytes(signature).hex(),
               "x-mesh-nonce": "7", "x-mesh-expiry": str(expiry), "x-mesh-chain-id": str(CHAIN)}
    assert verify(headers) == SignedRequest(address, 7, expiry)
    # sign_request makes the same signature (RFC 6979: deterministic), method upper-cased.
    assert signed(nonce=7, expiry=expiry) == headers


def test_every_refusal_is_a_401_with_a_message_that_says_what_is_wrong() -> None:
    assert refused(signed(**{"x-mesh-expiry": "soon"})) == (
        401, "signature_malformed",
        "nonce, expiry, chain id or signature is not a number / hex")
    assert refused(signed(**{"x-mesh-chain-id": "x"}))[1] == "signature_malformed"
    assert refused(signed(**{"x-mesh-signature": "0x" + "00" * 65})) == (
        401, "signature_invalid", "the signature does not verify")
    assert refused(signed(), body=b"[]") == (
        401, "signature_mismatch", f"the signature is not from x-mesh-address (this "
        f"orchestrator's id is {ORCH!r}: a client signing for another, MESH_ORCHESTRATOR_ID, "
        "fails here; a changed path or body fails too)")
    other = "0x" + "43" * 32
    foreign = sign_request(other, method="post", path="/v1/nodes", body=b"{}", nonce=7,
                           expiry=int(NOW) + 60, chain_id=CHAIN, orchestrator_id=ORCH)
    assert refused(signed(**{"x-mesh-signature": foreign["x-mesh-signature"]}))[1] == (
        "signature_mismatch")
    assert refused(signed(), max_age_s=59.4)[2] == "expiry may be at most 59s ahead"
    empty = signed(**{"x-mesh-chain-id": ""})
    assert refused(empty)[2] == "missing headers: x-mesh-chain-id"


def test_a_signature_binds_the_route_and_the_method() -> None:
    for path, method in (("/v1/nodes/other", "POST"), ("/v1/nodes", "PUT")):
        with pytest.raises(ApiError) as caught:
            verify_request(signed(), method=method, path=path, body=b"{}", now=NOW,
                           chain_id=CHAIN, orchestrator_id=ORCH, max_age_s=300.0)
        assert caught.value.code == "signature_mismatch"


def test_a_session_token_is_base64url_json_and_its_hmac() -> None:
    secret = b"k" * 32
    claims = SessionClaims(address="0xabc", node_id="gpu-1", expires_at=NOW + 10)
    token = issue_token(secret, claims)
    payload_text, mac_text = token.split(".")
    assert "=" not in token  # unpadded, so it travels in a header as it is

    def unb64(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    payload = unb64(payload_text)
    assert payload == b'{"a":"0xabc","n":"gpu-1","e":1700000010.0}'
    assert unb64(mac_text) == hmac.new(secret, payload, hashlib.sha256).digest()
    # A token made by hand with the same rules is accepted, claims and all.
    hand = b'{"a":"0xdef","n":"gpu-2","e":1700000100}'
    hand_token = (base64.urlsafe_b64encode(hand).rstrip(b"=").decode() + "." + base64
                  .urlsafe_b64encode(hmac.new(secret, hand, hashlib.sha256).digest())
                  .rstrip(b"=").decode())
    assert check_token(secret, hand_token, now=NOW) == SessionClaims("0xdef", "gpu-2",
                                                                     NOW + 100)
    with pytest.raises(ApiError) as caught:
        check_token(secret, hand_token, now=NOW + 101)
    assert (caught.value.status, caught.value.code) == (401, "token_expired")
    with pytest.raises(ApiError) as caught:
        check_token(b"other" * 8, hand_token, now=NOW)
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        401, "token_invalid", "the session token does not verify")


# secp256k1's group order (SEC 2, 2.4.1); EIP-2 takes s above n / 2 as the malleable twin
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def test_the_high_s_twin_of_a_good_signature_is_refused_with_its_own_code() -> None:
    headers = signed()
    signature = bytes.fromhex(headers["x-mesh-signature"].removeprefix("0x"))
    r, s, v = signature[:32], int.from_bytes(signature[32:64], "big"), signature[64]
    assert s <= SECP256K1_N // 2 and verify(headers).nonce == 7  # the signer's own: low s
    twin = r + (SECP256K1_N - s).to_bytes(32, "big") + bytes([55 - v])  # v 27 <-> 28
    assert refused(signed() | {"x-mesh-signature": "0x" + twin.hex()}) == (
        401, "signature_high_s", "high-s signature: sign with a low s (EIP-2)")


def test_an_s_of_exactly_half_the_group_order_is_still_low() -> None:
    r = bytes.fromhex(signed()["x-mesh-signature"].removeprefix("0x"))[:32]
    half = SECP256K1_N // 2  # 0x7fff...5d576e7357a4501ddfe92f46681b20a0
    at_half = r + half.to_bytes(32, "big") + b"\x1b"
    # past the s check, it recovers to some other key than the one in x-mesh-address
    assert refused(signed() | {"x-mesh-signature": "0x" + at_half.hex()})[1] == (
        "signature_mismatch")
    above = r + (half + 1).to_bytes(32, "big") + b"\x1b"
    assert refused(signed() | {"x-mesh-signature": "0x" + above.hex()})[1] == "signature_high_s"


def _token_by_hand(secret: bytes, payload: bytes) -> tuple[str, str]:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    return b64(payload), b64(hmac.new(secret, payload, hashlib.sha256).digest())


def test_a_token_is_its_payload_up_to_the_first_dot_and_its_mac_after_it() -> None:
    secret = b"k" * 32
    # 42 bytes: base64url in whole 4-character groups, so a dot can split it cleanly
    payload_text, mac_text = _token_by_hand(
        secret, b'{"a":"0xdef","n":"gpu-222","e":1700000100}')
    token = f"{payload_text}.{mac_text}"
    assert check_token(secret, token, now=NOW) == SessionClaims("0xdef", "gpu-222", NOW + 100)
    # a dot spliced into the payload ends it there: what follows is no MAC of the whole
    spliced = f"{payload_text[:4]}.{payload_text[4:]}.{mac_text}"
    with pytest.raises(ApiError) as caught:
        check_token(secret, spliced, now=NOW)
    assert caught.value.status == 401
    assert caught.value.code in {"token_malformed", "token_invalid"}
    # whatever follows the first dot is the MAC: a good token with more appended is a MAC
    # that does not verify (counted as token_invalid), not an unreadable token
    with pytest.raises(ApiError) as caught:
        check_token(secret, token + ".x", now=NOW)
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        401, "token_invalid", "the session token does not verify")


def test_a_chunked_body_over_the_limit_is_refused_before_more_than_the_limit_is_read(
        client: TestClient, settings: Settings) -> None:
    """No Content-Length (Transfer-Encoding: chunked): the limit is applied while reading,
    so the sender's stream is abandoned one chunk past the limit, not read to its end."""
    chunk, sent = 4096, 0

    async def endless_json() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"node_id": "'
        for _ in range(256):  # 1 MiB in all
            sent += chunk
            yield b"x" * chunk

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mesh") as http:
            return await http.post("/v1/nodes", content=endless_json(),
                                   headers={"content-type": "application/json"})

    response = asyncio.run(post())
    assert (response.status_code, response.json()["error"]["code"]) == (413, "body_too_large")
    assert "content-length" not in response.request.headers
    assert sent <= settings.max_body_bytes + chunk
