"""While the database is down every request that needs it is refused with 503
`database_unavailable` and a Retry-After, never a 500, and nothing it did before is lost: the
same requests succeed once the server is back (a real PostgreSQL server, crashed and started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from mesh.bench.pgcluster import PostgresCluster
from orchestrator.config import Settings
from orchestrator.main import create_app
from tests.clients import VirtualClock, make_wallet, registration

pytestmark = pytest.mark.postgres

ADMIN = {"x-admin-key": "outage-admin-key"}


def test_requests_in_a_database_outage_are_refused_as_retryable_and_lose_nothing(
        private_postgres: PostgresCluster, tmp_path: Path) -> None:
    settings = Settings(database_url=private_postgres.url, data_dir=tmp_path,
                        periodic_enabled=False, json_logs=False,
                        admin_key=SecretStr(ADMIN["x-admin-key"]), pls_placement=False)
    clock = VirtualClock()
    with TestClient(create_app(settings, clock=clock)) as client:
        wallet = make_wallet(client, clock, chain_id=settings.chain_id,
                        orchestrator_id=settings.orchestrator_id)
        assert wallet.send("POST", "/v1/nodes", registration("before")).status_code == 200

        private_postgres.stop()
        signed = wallet.send("POST", "/v1/nodes", registration("during"))
        read = client.get("/v1/nodes", headers=ADMIN)
        for refused in (signed, read):
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "database_unavailable"
            assert refused.headers["retry-after"] == "1"

        private_postgres.start()
        assert wallet.send("POST", "/v1/nodes", registration("during")).status_code == 200
        listing = client.get("/v1/nodes", headers=ADMIN)
        assert listing.status_code == 200, listing.text
        assert {node["node_id"] for node in listing.json()} == {"before", "during"}
