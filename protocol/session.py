"""A node's logged-in conversation with an orchestrator: one wallet-signed login gives a session
token (HMAC, cheap to check), which every later request of the node carries. The agent and the
tests talk to the service through this same class."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from protocol.client import Wallet, expect


class NodeSession:
    """Node `node_id` of the provider whose wallet is `wallet`. `session_key` is the address of
    the key this process signs its proofs of progress with (`domain.continuity`), registered at
    each login; None for a node that shows none. Safe to share between threads."""

    def __init__(self, wallet: Wallet, node_id: str, *, session_key: str | None = None) -> None:
        self.wallet = wallet
        self.node_id = node_id
        self.session_key = session_key
        self.token = ""
        self._lock = threading.Lock()

    @property
    def auth(self) -> dict[str, str]:
        """The header that names this session."""
        with self._lock:
            return {"authorization": f"Bearer {self.token}"}

    def login(self) -> str:
        """A fresh session token (signed with the wallet); ApiCallError if refused."""
        body: dict[str, Any] = {"node_id": self.node_id}
        if self.session_key is not None:
            body["session_key"] = self.session_key
        token = str(expect(self.wallet.send("POST", "/v1/auth/login", body))["token"])
        with self._lock:
            self.token = token
        return token

    def send(self, method: str, path: str, *, json: Any = None, content: bytes | None = None,
             http: httpx.Client | None = None) -> httpx.Response:
        """One request under the current token, answered as it is (`http`: another client of
        the same service, such as a heartbeat thread's own)."""
        return (http or self.wallet.http).request(method, path, json=json, content=content,
                                                  headers=self.auth)

    def request(self, method: str, path: str, *, json: Any = None,
                content: bytes | None = None, http: httpx.Client | None = None,
                ok: tuple[int, ...] = (200,)) -> httpx.Response:
        """A request that must be answered with one of `ok`; logs in again once if the token
        was refused (it expired, or a restarted orchestrator forgot it); ApiCallError
        otherwise."""
        for attempt in (0, 1):
            response = self.send(method, path, json=json, content=content, http=http)
            if response.status_code == 401 and attempt == 0:
                self.login()
                continue
            if response.status_code not in ok:
                expect(response)  # raises with the service's code
            return response
        raise AssertionError("unreachable")
