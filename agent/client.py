"""The signed HTTP conversation with an orchestrator, shared by the agent, the customer CLI
and the demo: wallet-signed requests (EIP-712 over method, path, body hash, nonce, expiry; see
`orchestrator.api.auth`) and session-token requests after a node's login."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.api.auth import sign_request

SIGNATURE_LIFETIME_S = 60


class ApiCallError(RuntimeError):
    """The service answered something the caller does not expect."""

    def __init__(self, message: str, *, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def expect(response: httpx.Response, status: int = 200) -> Any:
    """The JSON answer of a request that must succeed with `status`."""
    if response.status_code != status:
        code = ""
        with contextlib.suppress(ValueError, KeyError, TypeError):
            code = str(response.json()["error"]["code"])
        raise ApiCallError(f"{response.request.method} {response.request.url.path} -> "
                           f"{response.status_code}: {response.text[:500]}",
                           status=response.status_code, code=code)
    return response.json() if response.content else None


class Wallet:
    """A key holder that signs its requests to one orchestrator (EIP-712, per request). The
    key stays in this object: it is never logged, printed or put in a URL."""

    def __init__(self, base_url: str, private_key: bytes, address: str, *, chain_id: int,
                 orchestrator_id: str, timeout_s: float = 30.0) -> None:
        self.address = address
        self._key = private_key
        self._chain_id = chain_id
        self._orchestrator_id = orchestrator_id
        self._nonces = itertools.count(time.time_ns())
        self.http = httpx.Client(base_url=base_url, timeout=timeout_s)

    def __repr__(self) -> str:
        return f"Wallet({self.address})"

    def signed_headers(self, method: str, path: str, body: bytes = b"") -> dict[str, str]:
        return sign_request(self._key, method=method, path=path, body=body,
                            nonce=next(self._nonces),
                            expiry=int(time.time()) + SIGNATURE_LIFETIME_S,
                            chain_id=self._chain_id, orchestrator_id=self._orchestrator_id)

    def send(self, method: str, path: str, payload: Any = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        body = b"" if payload is None else json.dumps(payload).encode()
        signed = self.signed_headers(method, path, body)
        signed["content-type"] = "application/json"
        return self.http.request(method, path, content=body, headers={**signed, **(headers or {})})

    def upload(self, sha256: str, data: bytes) -> Any:
        """PUT a blob signed by this wallet (the path names the content; the body is not
        signed, the store checks its hash)."""
        path = f"/v1/blobs/{sha256}"
        return expect(self.http.put(path, content=data, headers=self.signed_headers("PUT", path)))

    def close(self) -> None:
        self.http.close()


def sha256_file(path: Path) -> str:
    """The content address of a file (blobs, chunks and results are named by it)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
