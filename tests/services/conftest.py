"""An orchestrator app wired for Predictive Latency Staking tests: virtual clock, a small PoPW
kernel (the handshake logic is the same at any size and round count), a fixed free-stake map
unless a test is about the chain."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from orchestrator.chain.anvil import revert_to, snapshot
from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings
from orchestrator.domain.pls_engine import PlsConfig
from orchestrator.domain.popw import DEFAULT_GPU_CLASSES, GpuClass, PopwConfig
from orchestrator.main import create_app
from orchestrator.telemetry.metrics import MeshMetrics
from protocol.client import Wallet
from tests.clients import LiveNode, VirtualClock, join, make_wallet
from tests.services.pls_harness import ADMIN_KEY, FixedStake

AppMaker = Callable[..., TestClient]


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def mesh(session_chain: MeshChain) -> Iterator[MeshChain]:
    """The session deployment inside an evm snapshot. Not named `chain`: ape's pytest plugin
    owns that fixture name and wins over `tests/chain_fixtures.py`."""
    snapshot_id = snapshot(session_chain.w3)
    yield session_chain
    revert_to(session_chain.w3, snapshot_id)
    session_chain.resync_nonces()


@pytest.fixture
def metrics() -> MeshMetrics:
    return MeshMetrics()


@pytest.fixture
def stake() -> FixedStake:
    return FixedStake()


@pytest.fixture
def pls_config() -> PlsConfig:
    # Classes 50x slower than nominal: 60 rounds for an rtx4090, so each solve is quick.
    slow_classes = {name: GpuClass(name, gpu.rounds_per_s / 50, gpu.render_speed)
                    for name, gpu in DEFAULT_GPU_CLASSES.items()}
    return PlsConfig(popw=PopwConfig(size=32, ping_rounds=5, gpu_classes=slow_classes))


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    # node_stake 0: these tests are not about the registration gate (test_api_bad_input is)
    return Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                    json_logs=False, admin_key=SecretStr(ADMIN_KEY), node_stake=0)


@pytest.fixture
def make_app(settings: Settings, clock: VirtualClock, stake: FixedStake,
             pls_config: PlsConfig) -> Iterator[AppMaker]:
    """Start an app (several may share one DB: a restart, or a second replica)."""
    clients: list[TestClient] = []

    def build(**overrides: object) -> TestClient:
        kwargs: dict[str, object] = {"clock": clock, "stake_reader": stake,
                                     "pls_config": pls_config}
        kwargs.update(overrides)
        client = TestClient(create_app(settings, **kwargs))  # type: ignore[arg-type]
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_app: AppMaker) -> TestClient:
    return make_app()


@pytest.fixture
def agent(client: TestClient, settings: Settings, clock: VirtualClock
          ) -> Callable[..., LiveNode]:
    def build(node_id: str, *, wallet: Wallet | None = None, **overrides: object) -> LiveNode:
        wallet = wallet or make_wallet(client, clock, chain_id=settings.chain_id,
                                       orchestrator_id=settings.orchestrator_id)
        return join(wallet, node_id, **overrides)
    return build
