"""A signed request is the EIP-712 signature of exactly what the request says: a client in any
language that follows the rules alone makes the same headers, and changing any field of the
request, the chain or the orchestrator changes who the signature recovers to."""

from __future__ import annotations

import pytest
from eth_account import Account
from eth_utils import keccak

from protocol.signing import sign_request, signable_request

KEY = "0x" + "42" * 32
ADDRESS = Account.from_key(KEY).address
REQUEST = {"method": "POST", "path": "/v1/nodes", "body": b"{}", "nonce": 7,
           "expiry": 1_700_000_060, "chain_id": 31337, "orchestrator_id": "orch-1"}


def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def digest_by_hand(*, method: str, path: str, body: bytes, nonce: int, expiry: int,
                   chain_id: int, orchestrator_id: str) -> bytes:
    """EIP-712 over the documented types, built from the standard alone."""
    domain_type = keccak(text="EIP712Domain(string name,string version,uint256 chainId,"
                              "bytes32 salt)")
    domain = keccak(domain_type + keccak(text="DePIN Mesh") + keccak(text="1")
                    + _word(chain_id) + keccak(text=orchestrator_id))
    request_type = keccak(text="MeshRequest(string method,string path,bytes32 bodyHash,"
                               "uint256 nonce,uint256 expiry)")
    message = keccak(request_type + keccak(text=method) + keccak(text=path) + keccak(body)
                     + _word(nonce) + _word(expiry))
    return keccak(b"\x19\x01" + domain + message)


def test_the_headers_are_the_signature_a_client_makes_from_the_standard_alone() -> None:
    signature = Account.unsafe_sign_hash(digest_by_hand(**REQUEST), KEY).signature
    assert sign_request(KEY, **REQUEST) == {
        "x-mesh-address": ADDRESS, "x-mesh-signature": "0x" + bytes(signature).hex(),
        "x-mesh-nonce": "7", "x-mesh-expiry": "1700000060", "x-mesh-chain-id": "31337"}


def test_the_method_is_signed_upper_case() -> None:
    assert sign_request(KEY, **{**REQUEST, "method": "post"}) == sign_request(KEY, **REQUEST)


@pytest.mark.parametrize(("field", "other"), [
    ("method", "PUT"), ("path", "/v1/nodes/x"), ("body", b"{ }"), ("nonce", 8),
    ("expiry", 1_700_000_061), ("chain_id", 1), ("orchestrator_id", "orch-2")])
def test_every_field_is_bound(field: str, other: object) -> None:
    """The signature over the request recovers to its signer only for that very request."""
    signature = bytes.fromhex(sign_request(KEY, **REQUEST)["x-mesh-signature"][2:])
    assert Account.recover_message(signable_request(**REQUEST), signature=signature) == ADDRESS
    changed = signable_request(**{**REQUEST, field: other})  # type: ignore[arg-type]
    assert Account.recover_message(changed, signature=signature) != ADDRESS
