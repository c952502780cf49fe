"""Shared DB fixtures: every DB test runs on SQLite and on PostgreSQL.

PostgreSQL is skipped only when MESH_TEST_POSTGRES_URL is unset AND no server
answers on the default URL; in CI the variable is set, so an unreachable server
fails loudly instead of silently shrinking the suite. Each test session works in
its own throwaway PostgreSQL database so parallel runs never see each other's rows.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy import Engine, create_engine, delete
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench.pgcluster import ClusterError, PostgresCluster, server_bindir
from orchestrator.db.models import Base
from orchestrator.db.session import (
    create_scratch_database,
    drop_database,
    make_engine,
    make_session_factory,
    upgrade_to_head,
)

# Chain fixtures (anvil, deployment, funded role accounts) for tests/chain and every package
# that checks the service against a real chain. Imported, not listed in `pytest_plugins`:
# ape's pytest plugin has fixtures of the same names (`chain`, ...), and only conftest
# fixtures take precedence over a plugin's.
from tests import builders
from tests.chain_fixtures import (  # noqa: F401
    admin,
    anvil,
    arbiter,
    chain,
    customer,
    deployment,
    grid,
    orchestrator,
    other_provider,
    provider,
    session_chain,
    slasher,
    stranger,
)

NodeMaker = Callable[..., list[str]]
JobMaker = Callable[..., str]

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

# Hypothesis profiles. "ci", the default: derandomized (examples drawn from a fixed seed), so
# CI and every local run test the same inputs and a failure reproduces. "fuzz" (`make fuzz`,
# MESH_HYPOTHESIS_PROFILE=fuzz): random inputs, FUZZ_SCALE times the examples of each test.
HYPOTHESIS_PROFILE = os.environ.get("MESH_HYPOTHESIS_PROFILE", "ci")
FUZZ_SCALE = 20
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("fuzz", derandomize=False, max_examples=100 * FUZZ_SCALE,
                          deadline=None, print_blob=True)
settings.load_profile(HYPOTHESIS_PROFILE)


def examples(ci: int) -> int:
    """A property's example count: `ci` in CI, FUZZ_SCALE times as many under `make fuzz`."""
    return ci * FUZZ_SCALE if HYPOTHESIS_PROFILE == "fuzz" else ci


def _postgres_base_url() -> str | None:
    configured = os.environ.get("MESH_TEST_POSTGRES_URL")
    url = configured or DEFAULT_POSTGRES_URL
    try:
        probe = create_engine(url, connect_args={"connect_timeout": 3})
        with probe.connect():
            pass
        probe.dispose()
    except Exception as exc:
        if configured:
            raise RuntimeError(f"MESH_TEST_POSTGRES_URL is set but unreachable: {exc}") from exc
        return None
    return url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh database created for this test session and dropped after it."""
    base = _postgres_base_url()
    if base is None:
        pytest.skip("no PostgreSQL server (set MESH_TEST_POSTGRES_URL to require one)")
    name = f"mesh_test_{uuid.uuid4().hex[:12]}"
    url = create_scratch_database(base, name)
    try:
        yield url
    finally:
        drop_database(base, name)


@pytest.fixture
def postgres_server_programs() -> None:
    """Skip where PostgreSQL's server programs (initdb, pg_ctl) are missing, unless this
    machine is meant to test PostgreSQL (MESH_TEST_POSTGRES_URL set): then fail."""
    try:
        server_bindir()
    except ClusterError as missing:
        if os.environ.get("MESH_TEST_POSTGRES_URL"):
            raise
        pytest.skip(str(missing))


@pytest.fixture
def private_postgres(postgres_server_programs: None) -> Iterator[PostgresCluster]:
    """A PostgreSQL server of this test's own, which it may stop, crash and start."""
    with PostgresCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("db") / "mesh.db"
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def _migrated(request: pytest.FixtureRequest) -> dict[str, Engine]:
    return {}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, _migrated: dict[str, Engine]) -> Iterator[str]:
    """A migrated, empty database of each backend; rows are wiped after every test."""
    backend: str = request.param
    url: str = request.getfixturevalue(f"{backend}_url" if backend == "sqlite" else "postgres_url")
    engine = _migrated.get(url)
    if engine is None:
        engine = make_engine(url)
        upgrade_to_head(engine)
        _migrated[url] = engine
    yield url
    with engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(delete(table))


@pytest.fixture
def engine(db_url: str, _migrated: dict[str, Engine]) -> Engine:
    return _migrated[db_url]


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def make_nodes(factory: sessionmaker[Session]) -> NodeMaker:
    """`builders.make_nodes` on this test's database."""
    return functools.partial(builders.make_nodes, factory)


@pytest.fixture
def make_job(factory: sessionmaker[Session]) -> JobMaker:
    """`builders.make_job` on this test's database."""
    return functools.partial(builders.make_job, factory)


@pytest.fixture(scope="session")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample animation (`mesh.sample_scene`), built once per session with bpy in a child
    process."""
    path = tmp_path_factory.mktemp("scene") / "scene.blend"
    subprocess.run([sys.executable, "-m", "mesh.sample_scene", str(path)],
                   check=True, capture_output=True, timeout=120)
    return path
