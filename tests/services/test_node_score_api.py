"""GET /v1/nodes/{id}/score: the RS placement uses for a task duration, with its factors and
the tier work may use now (what `mesh up` and operators show per node)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from orchestrator.domain.types import Tier
from tests.clients import LiveNode, VirtualClock
from tests.services.pls_harness import gpu_sample
from tests.services.test_placement_gates import pls_of
from tests.services.test_popw_api import answer_body, challenge_for, ping, send_answer, solve

THERMAL_SLOWDOWN = 0x20


def test_score_is_the_books_rs_for_the_asked_duration_and_drops_for_a_hot_gpu(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock) -> None:
    hot, cool = agent("gpu-hot"), agent("gpu-cool")
    clock.advance(600)
    hot.post("/v1/nodes/gpu-hot/telemetry/gpu", {"samples": [
        gpu_sample(clock() - i, temperature_c=89.0, throttle=THERMAL_SLOWDOWN, clock_mhz=1200.0)
        for i in range(5)]})
    cool.post("/v1/nodes/gpu-cool/telemetry/gpu",
              {"samples": [gpu_sample(clock() - i) for i in range(5)]})

    scores = {node: client.get(f"/v1/nodes/{node}/score", params={"duration_s": 120}).json()
              for node in ("gpu-hot", "gpu-cool")}

    book = pls_of(client).state.book
    for node, score in scores.items():
        assert score["rs"] == book.score(node, clock(), 120)
        assert (score["duration_s"], score["tier"]) == (120, Tier.STANDARD)
    assert scores["gpu-hot"]["rs"] < scores["gpu-cool"]["rs"]


def test_score_shows_high_tier_only_after_a_passed_handshake(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    assert client.get("/v1/nodes/gpu-1/score").json()["tier"] == Tier.STANDARD
    challenge = challenge_for(node)
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)  # the kernel's nominal time on the claimed class
    verdict = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert verdict.json()["tier"] == Tier.HIGH

    assert client.get("/v1/nodes/gpu-1/score").json()["tier"] == Tier.HIGH


def test_score_of_an_unknown_node_or_a_bad_duration_is_refused(
        agent: Callable[..., LiveNode], client: TestClient) -> None:
    agent("gpu-1")
    unknown = client.get("/v1/nodes/gpu-nobody/score")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "node_not_found")
    assert client.get("/v1/nodes/gpu-1/score", params={"duration_s": 0}).status_code == 422
