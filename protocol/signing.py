"""Wallet-signed requests (EIP-712): what a client signs and sends, and what the service
recovers.

A signed request binds method, path, a hash of the exact body bytes, a nonce and an expiry to
one chain id and one orchestrator (the domain's salt), so a signature cannot be replayed on
another route, with another body, on another chain or against another orchestrator. The
service's checks (header shapes, expiry window, low s, the nonce burnt once) are its own:
`orchestrator.api.auth`.
"""

from __future__ import annotations

from typing import Any

from eth_account import Account
from eth_account.messages import SignableMessage, encode_typed_data
from eth_utils import keccak

REQUEST_TYPES = {
    "MeshRequest": [
        {"name": "method", "type": "string"},
        {"name": "path", "type": "string"},
        {"name": "bodyHash", "type": "bytes32"},
        {"name": "nonce", "type": "uint256"},
        {"name": "expiry", "type": "uint256"},
    ]
}
HEADER_ADDRESS = "x-mesh-address"
HEADER_SIGNATURE = "x-mesh-signature"
HEADER_NONCE = "x-mesh-nonce"
HEADER_EXPIRY = "x-mesh-expiry"
HEADER_CHAIN = "x-mesh-chain-id"


def eip712_domain(*, chain_id: int, orchestrator_id: str) -> dict[str, Any]:
    return {"name": "DePIN Mesh", "version": "1", "chainId": chain_id,
            "salt": keccak(text=orchestrator_id)}


def signable_request(*, method: str, path: str, body: bytes, nonce: int, expiry: int,
                     chain_id: int, orchestrator_id: str) -> SignableMessage:
    """The EIP-712 message a request's signature is over."""
    return encode_typed_data(
        domain_data=eip712_domain(chain_id=chain_id, orchestrator_id=orchestrator_id),
        message_types=REQUEST_TYPES,
        message_data={"method": method.upper(), "path": path, "bodyHash": keccak(body),
                      "nonce": nonce, "expiry": expiry})


def sign_request(private_key: str | bytes, *, method: str, path: str, body: bytes, nonce: int,
                 expiry: int, chain_id: int, orchestrator_id: str) -> dict[str, str]:
    """The headers a client sends (agents, customers and tests use this same function)."""
    account = Account.from_key(private_key)
    signable = signable_request(method=method, path=path, body=body, nonce=nonce,
                                expiry=expiry, chain_id=chain_id,
                                orchestrator_id=orchestrator_id)
    signature = account.sign_message(signable).signature
    return {HEADER_ADDRESS: account.address, HEADER_SIGNATURE: "0x" + bytes(signature).hex(),
            HEADER_NONCE: str(nonce), HEADER_EXPIRY: str(expiry), HEADER_CHAIN: str(chain_id)}
