"""`POST /v1/quotes` (issue 35) on a grid of nodes with known telemetry: the quote is the PLS
engine's prediction (its RS for the task's wall time, the collateral it prices, the nodes'
asking prices), a tight deadline quotes a lower chance than a loose one and a throttled node
lower than a cool one, and a job no registered node fits says so. Public: no signature."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.domain.types import TaskNeeds
from tests.builders import TOKEN
from tests.clients import LiveNode, VirtualClock
from tests.services.pls_harness import FixedStake, gpu_sample
from tests.services.test_placement_gates import pls_of
from tests.services.test_telemetry_in import THERMAL_SLOWDOWN

DURATION_S = 600.0
PRICE = 3 * TOKEN  # per GPU-hour


def spec(clock: VirtualClock, *, due_in_s: float, frames: int = 1, **needs: Any
         ) -> dict[str, Any]:
    return {"workload": {"kind": "blender", "blend_sha256": "ab" * 32,
                         "frames": {"start": 1, "end": frames}},
            "needs": {"expected_duration_s": DURATION_S, **needs},
            "deadline": int(clock() + due_in_s)}


def quoted(client: TestClient, body: dict[str, Any], amount: int = 2 * TOKEN) -> dict[str, Any]:
    answer = client.post("/v1/quotes", json={"spec": body, "amount": amount})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.fixture
def grid(agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
         stake: FixedStake) -> tuple[LiveNode, LiveNode]:
    """A cool node and a hot, throttled one of two providers, both with stake."""
    cool = agent("gpu-cool", price_per_gpu_hour=PRICE, slots=2)
    hot = agent("gpu-hot", price_per_gpu_hour=PRICE)
    clock.advance(600)
    cool.post("/v1/nodes/gpu-cool/telemetry/gpu",
              {"samples": [gpu_sample(clock() - i) for i in range(5)]})
    hot.post("/v1/nodes/gpu-hot/telemetry/gpu", {"samples": [
        gpu_sample(clock() - i, temperature_c=89.0, throttle=THERMAL_SLOWDOWN, clock_mhz=1200.0)
        for i in range(5)]})
    stake.free.update({cool.wallet.address: 100 * TOKEN, hot.wallet.address: 100 * TOKEN})
    return cool, hot


def test_the_quote_is_the_engines_prediction_and_orders_by_deadline_and_node(
        grid: tuple[LiveNode, LiveNode], client: TestClient, clock: VirtualClock) -> None:
    cool, hot = grid
    pls = pls_of(client)
    only_cool: dict[str, Any] = {"providers": [cool.wallet.address]}
    # one attempt fits before a deadline 1.5 task-times away, many before one 10 hours away
    tight = quoted(client, spec(clock, due_in_s=1.5 * DURATION_S, **only_cool))
    loose = quoted(client, spec(clock, due_in_s=36_000, **only_cool))
    rs = pls.state.book.score("gpu-cool", clock(), DURATION_S)
    assert 0.0 < rs < 1.0
    assert tight["p_deadline"] == pytest.approx(rs)
    assert tight["p_deadline"] < loose["p_deadline"]
    assert loose["p_deadline"] == pytest.approx(1.0 - (1.0 - rs) ** 60)
    assert tight["completion_s"] == pytest.approx(DURATION_S * (2.0 - rs))  # a re-run expected
    compute = PRICE * DURATION_S / 3600.0
    assert tight["price_min"] == tight["price_expected"] == tight["price_max"] == compute
    needs = TaskNeeds(expected_duration_s=DURATION_S, value=2 * TOKEN)
    assert tight["collateral_total"] == pls.state.engine.collateral(needs, 1.0 - rs)
    assert tight["warning"] is None and (tight["tasks"], tight["nodes"]) == (1, 1)

    throttled = quoted(client, spec(clock, due_in_s=1.5 * DURATION_S,
                                    providers=[hot.wallet.address]))
    assert throttled["p_deadline"] == pytest.approx(
        pls.state.book.score("gpu-hot", clock(), DURATION_S))
    assert throttled["p_deadline"] < tight["p_deadline"]
    assert throttled["collateral_total"] > tight["collateral_total"]  # risk-priced


def test_more_tasks_than_slots_wait_their_turn_and_the_deadline_says_so(
        grid: tuple[LiveNode, LiveNode], client: TestClient, clock: VirtualClock) -> None:
    cool, _ = grid
    # four frames on the cool node's two slots: two rounds, the second starting late
    body = spec(clock, due_in_s=1.5 * DURATION_S, frames=4, providers=[cool.wallet.address])
    four = quoted(client, body, amount=8 * TOKEN)
    assert four["tasks"] == 4 and four["nodes"] == 1
    assert four["p_deadline"] == 0.0  # the second round cannot finish by then
    assert four["completion_s"] > 2 * DURATION_S
    assert four["price_expected"] == 4 * PRICE * DURATION_S / 3600.0


def test_no_registered_node_fits_says_so(
        grid: tuple[LiveNode, LiveNode], client: TestClient, clock: VirtualClock) -> None:
    none = quoted(client, spec(clock, due_in_s=36_000, min_vram_gb=4096))
    assert none["warning"] == ("no registered node can take this job: escrowed, it would wait "
                               "until one registers")
    assert none["p_deadline"] == 0.0 and none["price_min"] is None
    assert none["eligible_nodes"] == 0


def test_a_quote_leaves_the_placement_draws_alone(
        grid: tuple[LiveNode, LiveNode], agent: Callable[..., LiveNode], client: TestClient,
        clock: VirtualClock, stake: FixedStake) -> None:
    """A quote ranks as placement does but draws no exploration: the seeded sequence of
    placements stays what it was (two steady nodes: placement would draw)."""
    stake.free[agent("gpu-cool-2", price_per_gpu_hour=PRICE).wallet.address] = 100 * TOKEN
    rng = pls_of(client).state.engine.placement._rng
    before = rng.bit_generator.state
    for _ in range(20):
        quoted(client, spec(clock, due_in_s=36_000))
    assert rng.bit_generator.state == before
