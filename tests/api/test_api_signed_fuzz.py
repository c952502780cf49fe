"""Schemathesis behind the signatures: every operation of the live schema, each case sent with
the credentials its operation needs (`tests/api/signed_fuzz.py`: a provider's node with its
session, a funded customer whose escrowed jobs are submitted, live leases, the admin key; one
case in ten as a wrong identity, counted apart) and steered to name things that exist. Two
parts: per-operation generation (valid and invalid data) and a stateful run that chains
operations along the links schemathesis infers (a lease's task id into a progress report, a
job's id into its results). No answer may be a 5xx or differ from the schema; at least 40 of
the 47 operations must reach the logic (the definition is signed_fuzz's docstring). The test
prints its report: per operation the requests, those that reached the logic, the 401/403s and
5xx. CI's budget is about a minute per database; `make fuzz` runs 20 times the cases."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.core.transport import Response
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings
from orchestrator.main import create_app
from tests.api.signed_fuzz import Grid, Report, build_grid, fire
from tests.clients import VirtualClock
from tests.conftest import examples

pytestmark = pytest.mark.anvil
EXAMPLES = examples(8)  # per operation and generation mode; 160 under `make fuzz`
SCENARIOS = examples(25)  # stateful scenarios; 500 under `make fuzz`
STEPS = 10  # calls per scenario at most
REACHED_AT_LEAST = 40
NO_SHRINK = [phase for phase in Phase if phase is not Phase.shrink]  # a failure is reported


@pytest.fixture
def client(settings: Settings, clock: VirtualClock, chain: MeshChain) -> Iterator[TestClient]:
    """The app reading escrows and disputes from a real chain (anvil)."""
    with TestClient(create_app(settings, escrow_reader=chain, clock=clock)) as test_client:
        yield test_client


@pytest.fixture
def grid(client: TestClient, settings: Settings, clock: VirtualClock, chain: MeshChain,
         factory: sessionmaker[Session]) -> Grid:
    return build_grid(client, settings, clock, chain, factory)


def test_signed_fuzz_reaches_the_logic_with_no_server_error_or_schema_mismatch(
        grid: Grid, capsys: pytest.CaptureFixture[str]) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", grid.client.app)
    operations = [result.ok() for result in schema.get_all_operations()
                  if isinstance(result, Ok)]
    started = time.monotonic()
    per_operation = Report()
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz_operation(operation, mode, grid, per_operation)
    generated = time.monotonic()
    stateful = Report()
    fuzz_stateful(schema, grid, stateful)
    finished = time.monotonic()
    with capsys.disabled():
        print("\n" + per_operation.render("signed fuzz, per operation", generated - started))
        print(stateful.render("signed fuzz, stateful", finished - generated))
    assert len(operations) == 47
    failures = per_operation.failures + stateful.failures
    assert not failures, "\n".join(failures[:20])
    assert len(per_operation.reached()) >= REACHED_AT_LEAST, sorted(
        set(per_operation.operations) - set(per_operation.reached()))


def fuzz_operation(operation: Any, mode: GenerationMode, grid: Grid, report: Report) -> None:
    """EXAMPLES cases of one operation in one generation mode."""
    pools = grid.pools()

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              phases=NO_SHRINK)
    # a Random seeded by Hypothesis (repeatable), not one whose draws it shapes: those lean to
    # 0.0, which would send most cases as the wrong identity
    @given(operation.as_strategy(generation_mode=mode), st.randoms(use_true_random=True))
    def probe(case: Any, rng: random.Random) -> None:
        fire(grid, case, pools, rng, report)

    with contextlib.suppress(Unsatisfiable):  # no invalid value exists (no parameters...)
        probe()


def fuzz_stateful(schema: Any, grid: Grid, report: Report) -> None:
    """SCENARIOS chains of up to STEPS calls along the inferred links."""

    class Signed(schema.as_state_machine()):  # type: ignore[misc]
        def call(self, case: Any, **kwargs: Any) -> Response:
            # Hypothesis seeds `random` for each scenario: a run is repeatable
            rng = random.Random(random.getrandbits(64))
            return Response.from_any(fire(grid, case, grid.pools(), rng, report))

        def validate_response(self, response: Response, case: Any,
                              additional_checks: Any = None, **kwargs: Any) -> None:
            """`fire` judged it already."""

    Signed.run(settings=settings(max_examples=SCENARIOS, stateful_step_count=STEPS,
                                 deadline=None, suppress_health_check=list(HealthCheck),
                                 phases=NO_SHRINK))
