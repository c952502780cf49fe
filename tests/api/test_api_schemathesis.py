"""Schemathesis against the live schema: every operation, with valid and invalid data, sent
unsigned, wallet-signed, with a node's session token and with the admin key. Every check
schemathesis has must pass (those judging generated credentials on the unauthenticated
sends), no answer is a 5xx, and a refused request (a 4xx) leaves the
database as it was. CI runs a bounded number of cases per operation; `make fuzz` 20 times
more, on random seeds."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Err, Ok
from schemathesis.specs.openapi import checks as openapi_checks
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings
from orchestrator.db.models import Base
from orchestrator.main import create_app
from protocol.client import Wallet
from tests.api.conftest import ADMIN_KEY
from tests.api.signed_fuzz import send_case
from tests.clients import LiveNode, VirtualClock
from tests.conftest import JobMaker, examples

EXAMPLES = examples(6)  # per operation and generation mode; 120 under `make fuzz`
AUTH_MODES = ("none", "signed", "token", "admin")
# Tables a refused request may still write: the nonce of a signed request that passed
# validation is spent even when the service then refuses it (a replay of it stays refused).
MAY_CHANGE_ON_REFUSAL = frozenset({"used_nonces"})
# Checks that judge credentials the case generated itself: with credentials this test adds
# (a real signature, token or admin key), a case schemathesis meant to be refused for a bad or
# missing credential is rightly accepted. They run on the unauthenticated sends.
GENERATED_AUTH_CHECKS = (openapi_checks.ignored_auth, openapi_checks.negative_data_rejection)
# Operations whose requests have rules across fields that JSON Schema cannot state: a job's
# frame range in order, tasks = frames x tiles within the limit, chunk_samples with samples;
# a blob's content hashing to the sha256 in its path; a quote's job spec, as a job's. A
# schema-valid request may still be refused there, so "positive data accepted" does not apply.
CROSS_FIELD_RULES = frozenset({("POST", "/v1/jobs"), ("POST", "/v1/quotes"),
                               ("PUT", "/v1/blobs/{sha256}")})


def database_digest(factory: sessionmaker[Session]) -> str:
    """A hash of every row of every table but MAY_CHANGE_ON_REFUSAL."""
    digest = hashlib.sha256()
    with factory() as session:
        for name, table in sorted(Base.metadata.tables.items()):
            if name in MAY_CHANGE_ON_REFUSAL:
                continue
            digest.update(name.encode())
            for row in sorted(repr(tuple(r)) for r in session.execute(select(table))):
                digest.update(row.encode())
    return digest.hexdigest()


@pytest.fixture
def client(settings: Settings, clock: VirtualClock, chain: MeshChain) -> Iterator[TestClient]:
    """The app with its escrow reads on a real chain (anvil), so a schema-valid job is judged
    against the escrow (402 without one) instead of waiting for a chain."""
    with TestClient(create_app(settings, escrow_reader=chain, clock=clock)) as test_client:
        yield test_client


def credentials(auth: str, wallet: Wallet, node: LiveNode
                ) -> Callable[[str, str, bytes], dict[str, str]]:
    """The headers of one of AUTH_MODES, for `send_case`."""

    def headers(method: str, path: str, body: bytes) -> dict[str, str]:
        if auth == "signed":
            return wallet.signed_headers(method, path, body)
        if auth == "token":
            return node.auth
        return {"x-admin-key": ADMIN_KEY} if auth == "admin" else {}

    return headers


def test_every_operation_passes_every_check_and_refusals_change_nothing(
        client: TestClient, live_node: Callable[..., LiveNode], make_job: JobMaker,
        new_wallet: Callable[[], Wallet], factory: sessionmaker[Session]) -> None:
    node = live_node("gpu-1", slots=2)
    make_job(2)
    wallet = new_wallet()
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    results = list(schema.get_all_operations())
    broken = [result.err() for result in results if isinstance(result, Err)]
    assert not broken, f"the served schema does not load: {broken}"
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) >= 30
    failures = [failure for operation in operations
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
                if (failure := run_operation(operation, mode, client, wallet, node, factory))]
    assert not failures, "\n\n".join(failures)


def run_operation(operation: Any, mode: GenerationMode, client: TestClient, wallet: Wallet,
                  node: LiveNode, factory: sessionmaker[Session]) -> str | None:
    """Fuzz one operation in one generation mode; its first failure, or None."""
    excluded: list[Any] = []
    if (operation.method.upper(), operation.path) in CROSS_FIELD_RULES:
        excluded.append(openapi_checks.positive_data_acceptance)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[phase for phase in Phase if phase is not Phase.shrink])  # CI-bounded
    @given(operation.as_strategy(generation_mode=mode), st.sampled_from(AUTH_MODES))
    def probe(case: Any, auth: str) -> None:
        before = database_digest(factory)
        response = send_case(client, case.as_transport_kwargs(base_url="http://testserver"),
                             credentials(auth, wallet, node))
        where = f"{case.method} {case.formatted_path} [{auth}, {mode.value}]"
        assert response.status_code < 500, f"{where}: {response.text[:300]}"
        if 400 <= response.status_code < 500:
            assert "code" in response.json()["error"], where
            assert database_digest(factory) == before, \
                f"{where}: refused with {response.status_code} but changed the DB"
        case.validate_response(response, excluded_checks=excluded + (
            [] if auth == "none" else list(GENERATED_AUTH_CHECKS)))

    try:
        probe()
    except Unsatisfiable:  # no invalid value exists (no parameters, free strings)
        return None
    except AssertionError as failure:
        return str(failure)[:600]
    except BaseException as failure:  # schemathesis' check failures (groups of them too)
        if isinstance(failure, KeyboardInterrupt | SystemExit):
            raise
        return (f"{operation.method.upper()} {operation.path}: {type(failure).__name__}: "
                f"{str(failure)[:600]}")
    return None
