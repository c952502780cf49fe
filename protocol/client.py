"""The signed HTTP conversation with an orchestrator, shared by the agent, the `mesh` tools and
the tests: wallet-signed requests (EIP-712 over method, path, body hash, nonce, expiry:
`protocol.signing`) and the errors a caller sees when the service answers otherwise."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account

from protocol.signing import sign_request

SIGNATURE_LIFETIME_S = 60


class ApiCallError(RuntimeError):
    """The service answered something the caller does not expect."""

    def __init__(self, message: str, *, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def expect(response: httpx.Response, status: int = 200) -> Any:
    """The JSON answer of a request that must succeed with `status`. Otherwise ApiCallError:
    the service's own words and code when it answered with its error body ("the escrow is
    not funded (escrow_missing)"), else the request, the status and the start of the body."""
    if response.status_code != status:
        code = message = ""
        with contextlib.suppress(ValueError, KeyError, TypeError):
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        said = (f"{message} ({code})" if message else
                f"{response.request.method} {response.request.url.path} -> "
                f"{response.status_code}: {response.text[:500]}")
        raise ApiCallError(said, status=response.status_code, code=code)
    return response.json() if response.content else None


class Wallet:
    """A key holder that signs its requests to one orchestrator (EIP-712, per request). The
    key stays in this object: it is never logged, printed or put in a URL. `http` is any httpx
    client (`connect` opens one to a URL; tests pass the app's test client) and `clock` the
    time signatures expire by."""

    def __init__(self, http: httpx.Client, private_key: bytes, *, chain_id: int,
                 orchestrator_id: str, clock: Callable[[], float] = time.time) -> None:
        self.address = str(Account.from_key(private_key).address)
        self.http = http
        self._key = private_key
        self._chain_id = chain_id
        self._orchestrator_id = orchestrator_id
        self._clock = clock
        self._nonces = itertools.count(time.time_ns())

    @classmethod
    def connect(cls, base_url: str, private_key: bytes, *, chain_id: int, orchestrator_id: str,
                timeout_s: float = 30.0) -> Wallet:
        return cls(httpx.Client(base_url=base_url, timeout=timeout_s), private_key,
                   chain_id=chain_id, orchestrator_id=orchestrator_id)

    def __repr__(self) -> str:
        return f"Wallet({self.address})"

    def signed_headers(self, method: str, path: str, body: bytes = b"", *,
                       nonce: int | None = None, expiry: int | None = None,
                       chain_id: int | None = None,
                       orchestrator_id: str | None = None) -> dict[str, str]:
        """The signature headers of one request. The keywords replace what this wallet would
        sign (a caller testing the service's refusals signs a stale expiry or another chain)."""
        return sign_request(
            self._key, method=method, path=path, body=body,
            nonce=next(self._nonces) if nonce is None else nonce,
            expiry=int(self._clock()) + SIGNATURE_LIFETIME_S if expiry is None else expiry,
            chain_id=self._chain_id if chain_id is None else chain_id,
            orchestrator_id=self._orchestrator_id if orchestrator_id is None
            else orchestrator_id)

    def send(self, method: str, path: str, payload: Any = None,
             headers: dict[str, str] | None = None, **signature: Any) -> httpx.Response:
        """`payload` as JSON, signed; `headers` go on top (an idempotency key), `signature`
        to `signed_headers`."""
        body = b"" if payload is None else json.dumps(payload).encode()
        signed = self.signed_headers(method, path, body, **signature)
        signed["content-type"] = "application/json"
        return self.http.request(method, path, content=body, headers={**signed, **(headers or {})})

    def upload(self, sha256: str, data: bytes) -> Any:
        """PUT a blob signed by this wallet (the path names the content; the body is not
        signed, the store checks its hash)."""
        path = f"/v1/blobs/{sha256}"
        return expect(self.http.put(path, content=data, headers=self.signed_headers("PUT", path)))

    def close(self) -> None:
        self.http.close()


def quote(http: httpx.Client, spec: dict[str, Any], amount: int) -> dict[str, Any]:
    """The orchestrator's quote of a job spec escrowing `amount` token units, before anything
    is paid (public: `POST /v1/quotes`): price range, expected completion, the chance of
    meeting the deadline, the collateral providers lock."""
    return dict(expect(http.post("/v1/quotes", json={"spec": spec, "amount": amount})))


def sha256_file(path: Path) -> str:
    """The content address of a file (blobs, chunks and results are named by it)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
