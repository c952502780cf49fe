"""The agent's downloads: a blob is used only if its bytes hash to its name, whether it just
arrived (a damaged store or proxy on the way) or sat in the cache (a damaged disk); else an
honest provider would render the wrong input and be slashed for it. The network is the one
thing replaced here: `serve` answers the blob downloads with the bytes given."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

from agent.config import AgentConfig
from agent.connection import Connection
from protocol.client import ApiCallError

SCENE = b"the customer's scene"
SHA = hashlib.sha256(SCENE).hexdigest()


@pytest.fixture
def connection(tmp_path: Path) -> Connection:
    config = AgentConfig(orchestrator="http://127.0.0.1:9", node_id="gpu-1",
                         state_dir=tmp_path / "state")
    return Connection(config, Account.create())


def serve(connection: Connection, body: bytes) -> list[str]:
    """Answer every request of the connection with `body`; returns the paths asked for."""
    asked: list[str] = []

    def request(method: str, path: str, **_: Any) -> httpx.Response:
        asked.append(path)
        return httpx.Response(200, content=body)

    connection.session.request = request  # type: ignore[method-assign]
    return asked


def test_a_download_whose_bytes_do_not_hash_to_its_name_is_refused_and_not_cached(
        connection: Connection) -> None:
    serve(connection, SCENE + b" (damaged)")
    with pytest.raises(ApiCallError, match="other content"):
        connection.fetch(SHA, ".blend")
    assert list(connection.cache.iterdir()) == []


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # a flipped bit
    lambda data: data[: len(data) // 2],  # a truncated copy
])
def test_a_damaged_cached_copy_is_fetched_again_and_an_intact_one_is_reused(
        connection: Connection, damage: Callable[[bytes], bytes]) -> None:
    asked = serve(connection, SCENE)
    cached = connection.fetch(SHA, ".blend")
    assert (cached.read_bytes(), len(asked)) == (SCENE, 1)
    assert connection.fetch(SHA, ".blend") == cached and len(asked) == 1  # intact: reused
    cached.write_bytes(damage(SCENE))
    assert connection.fetch(SHA, ".blend").read_bytes() == SCENE
    assert asked == [f"/v1/blobs/{SHA}"] * 2
