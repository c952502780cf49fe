"""The node's signed conversation with the orchestrator: the wallet, the logged-in session
(`protocol.session.NodeSession`) naming this process's ephemeral session key, calls retried
through network and server errors, and blobs uploaded and fetched by content hash.

The session key lives only in this process's memory: a restart makes a new one, which is the
orchestrator's proof that a reconnect after a network cut is the same process
(`orchestrator.domain.continuity`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
from eth_account.signers.local import LocalAccount

from agent.config import AgentConfig
from orchestrator.domain.continuity import ChunkMark, ProgressProof, session_address, sign_progress
from protocol.client import ApiCallError, Wallet, sha256_file
from protocol.session import NodeSession

log = logging.getLogger("mesh.agent")
T = TypeVar("T")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Connection:
    """Node `config.node_id` of the provider `account`, talking to `config.orchestrator`;
    fetched blobs are cached under `state_dir/blobs`."""

    def __init__(self, config: AgentConfig, account: LocalAccount) -> None:
        self.config = config
        self.wallet = Wallet.connect(config.orchestrator, bytes(account.key),
                                     chain_id=config.chain_id,
                                     orchestrator_id=config.orchestrator_id)
        self._session_key = os.urandom(32)  # never written anywhere: a restart makes a new one
        self.session = NodeSession(self.wallet, config.node_id,
                                   session_key=session_address(self._session_key))
        self.cache = config.state_dir / "blobs"
        self.cache.mkdir(parents=True, exist_ok=True)

    def retry(self, what: str, call: Callable[[], T]) -> T:
        """`call` until it does not fail on the network or with a 5xx; backoff with jitter."""
        delay = 0.25
        while True:
            try:
                return call()
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}"
            except ApiCallError as exc:
                if exc.status < 500:
                    raise
                problem = f"HTTP {exc.status}"
            log.warning("%s: %s; retrying in %.1f s", what, problem, delay)
            time.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.config.max_backoff_s)

    def call(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        """A session request, retried; its JSON answer (None when empty)."""
        response = self.retry(what, lambda: self.session.request(method, path, **kwargs))
        return response.json() if response.content else None

    def prove_progress(self, task_id: int, marks: Sequence[ChunkMark]) -> ProgressProof:
        """The chunks of `task_id`, signed now with this process's session key."""
        return sign_progress(self._session_key, self.config.node_id, str(task_id), marks,
                             time.time())

    def upload(self, path: Path, sha256: str) -> None:
        data = path.read_bytes()
        if sha256_bytes(data) != sha256:
            raise ValueError(f"{path} changed on disk")
        self.call(f"upload {sha256[:12]}", "PUT", f"/v1/blobs/{sha256}", content=data)

    def fetch(self, sha256: str, suffix: str = "") -> Path:
        """A blob in the local cache, downloaded and hash-checked if missing."""
        target = self.cache / f"{sha256}{suffix}"
        if target.is_file() and sha256_file(target) == sha256:
            return target
        response = self.retry(f"download {sha256[:12]}",
                              lambda: self.session.request("GET", f"/v1/blobs/{sha256}"))
        if sha256_bytes(response.content) != sha256:
            raise ApiCallError(f"blob {sha256} arrived with other content")
        partial = target.with_suffix(target.suffix + ".partial")
        partial.write_bytes(response.content)
        os.replace(partial, target)
        return target

    def close(self) -> None:
        self.wallet.close()
