"""The service's side of wallet-signed requests (what a request must carry to be taken; the
message itself is `protocol.signing`'s) and HMAC session tokens.

ECDSA recovery costs milliseconds, so a node logs in once with a signature and then sends
heartbeats with an HMAC session token (microseconds to check).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass

from eth_account import Account
from eth_utils import is_hex_address, to_checksum_address

from orchestrator.api.errors import ApiError
from protocol.signing import (
    HEADER_ADDRESS,
    HEADER_CHAIN,
    HEADER_EXPIRY,
    HEADER_NONCE,
    HEADER_SIGNATURE,
    signable_request,
)

MAX_NONCE = 2**256 - 1
SECP256K1_HALF_N = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0


@dataclass(frozen=True, slots=True)
class SignedRequest:
    address: str  # checksummed signer
    nonce: int
    expiry: int


def _unauthorized(code: str, message: str) -> ApiError:
    return ApiError(401, code, message)


def verify_request(headers: Mapping[str, str], *, method: str, path: str, body: bytes,
                   now: float, chain_id: int, orchestrator_id: str,
                   max_age_s: float) -> SignedRequest:
    """Check a signed request's headers; raises ApiError(401) with a precise code.
    The caller still has to burn the nonce (replay protection needs the DB)."""
    names = (HEADER_ADDRESS, HEADER_SIGNATURE, HEADER_NONCE, HEADER_EXPIRY, HEADER_CHAIN)
    missing = [name for name in names if not headers.get(name)]
    if missing:
        raise _unauthorized("signature_missing", f"missing headers: {', '.join(missing)}")
    try:
        claimed_chain = int(headers[HEADER_CHAIN])
        nonce = int(headers[HEADER_NONCE])
        expiry = int(headers[HEADER_EXPIRY])
        signature = bytes.fromhex(headers[HEADER_SIGNATURE].removeprefix("0x"))
    except ValueError:
        raise _unauthorized("signature_malformed", "nonce, expiry, chain id or signature "
                            "is not a number / hex") from None
    address = headers[HEADER_ADDRESS]
    if not is_hex_address(address) or len(signature) != 65 or not 0 <= nonce <= MAX_NONCE:
        raise _unauthorized("signature_malformed", "bad address, signature length or nonce")
    if int.from_bytes(signature[32:64], "big") > SECP256K1_HALF_N:
        # (r, n - s) verifies too: accepting it would give each request a second signature
        raise _unauthorized("signature_high_s", "high-s signature: sign with a low s (EIP-2)")
    if claimed_chain != chain_id:
        raise _unauthorized("wrong_chain", f"signed for chain {claimed_chain}, this is {chain_id}")
    if expiry < now:
        raise _unauthorized("signature_expired", "the request expired")
    if expiry > now + max_age_s:
        raise _unauthorized("expiry_too_far", f"expiry may be at most {max_age_s:.0f}s ahead")
    try:
        signable = signable_request(method=method, path=path, body=body, nonce=nonce,
                                    expiry=expiry, chain_id=chain_id,
                                    orchestrator_id=orchestrator_id)
        signer = Account.recover_message(signable, signature=signature)
    except Exception:  # any malformed signature (bad v, s out of range) is simply invalid
        raise _unauthorized("signature_invalid", "the signature does not verify") from None
    if signer != to_checksum_address(address):
        raise _unauthorized("signature_mismatch", "the signature is not from x-mesh-address "
                            f"(this orchestrator's id is {orchestrator_id!r}: a client "
                            "signing for another, MESH_ORCHESTRATOR_ID, fails here; a changed "
                            "path or body fails too)")
    return SignedRequest(address=signer, nonce=nonce, expiry=expiry)


@dataclass(frozen=True, slots=True)
class SessionClaims:
    address: str
    node_id: str
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(secret: bytes, claims: SessionClaims) -> str:
    payload = json.dumps({"a": claims.address, "n": claims.node_id, "e": claims.expires_at},
                         separators=(",", ":")).encode()
    mac = hmac.new(secret, payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(mac)}"


def check_token(secret: bytes, token: str, *, now: float) -> SessionClaims:
    try:
        payload_text, mac_text = token.split(".", 1)
        payload, mac = _unb64(payload_text), _unb64(mac_text)
    except ValueError:
        raise _unauthorized("token_malformed", "not a session token") from None
    if not hmac.compare_digest(hmac.new(secret, payload, hashlib.sha256).digest(), mac):
        raise _unauthorized("token_invalid", "the session token does not verify")
    data = json.loads(payload)
    claims = SessionClaims(address=data["a"], node_id=data["n"], expires_at=float(data["e"]))
    if claims.expires_at < now:
        raise _unauthorized("token_expired", "the session token expired; log in again")
    return claims
