"""An orchestrator app for the API tests (virtual clock, small blob limit, PLS placement off:
tests/services covers the gates), signing wallets and logged-in nodes on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from orchestrator.config import Settings
from orchestrator.main import create_app
from protocol.client import Wallet
from tests.clients import LiveNode, VirtualClock, join, make_wallet

ADMIN_KEY = "test-admin-key"


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    # pls_placement off: these tests are about the core; tests/services covers the gates
    return Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                    json_logs=False, admin_key=SecretStr(ADMIN_KEY),
                    max_blob_bytes=1024 * 1024, pls_placement=False)


@pytest.fixture
def client(settings: Settings, clock: VirtualClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings, clock=clock)) as test_client:
        yield test_client


@pytest.fixture
def new_wallet(client: TestClient, settings: Settings, clock: VirtualClock
               ) -> Callable[[], Wallet]:
    return lambda: make_wallet(client, clock, chain_id=settings.chain_id,
                               orchestrator_id=settings.orchestrator_id)


@pytest.fixture
def live_node(new_wallet: Callable[[], Wallet]) -> Callable[..., LiveNode]:
    return lambda node_id, **overrides: join(new_wallet(), node_id, **overrides)
