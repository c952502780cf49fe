"""A task that would run late on the best free node waits for a faster busy one (ski rental),
in the placement pass: the GPU class a node's PoPW handshake proved is the speed placement
plans with, and the wait never exceeds the lateness the faster node would save."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.domain.types import TaskNeeds
from orchestrator.scheduling.placer import Placer
from tests.builders import TOKEN, make_job
from tests.clients import LiveNode, VirtualClock
from tests.services.pls_harness import FixedStake
from tests.services.test_placement_gates import pls_of
from tests.services.test_popw_api import answer_body, challenge_for, ping, send_answer, solve

HOUR = 3600.0
SLOW_WALL = HOUR / 0.55  # an hour of reference work on an RTX 3060
LATENESS = SLOW_WALL - HOUR  # past the job's critical path (the task itself)


def proves(node: LiveNode, gpu_class: str, clock: VirtualClock) -> None:
    challenge = challenge_for(node, gpu_class)
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    answered = send_answer(node.wallet, node.node_id,
                           answer_body(challenge, solve(challenge), clock))
    assert answered.status_code == 200 and answered.json()["passed"], answered.text


def grid(agent: Callable[..., LiveNode], stake: FixedStake, clock: VirtualClock
         ) -> tuple[LiveNode, LiveNode]:
    fast = agent("gpu-fast", price_per_gpu_hour=100)
    slow = agent("gpu-slow", price_per_gpu_hour=100)
    for node, gpu_class in ((fast, "rtx4090"), (slow, "rtx3060")):
        stake.free[node.wallet.address] = 10 * TOKEN
        proves(node, gpu_class, clock)
    return fast, slow


def test_the_placer_holds_a_late_task_for_the_busy_fast_node_no_longer_than_it_saves(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    grid(agent, stake, clock)
    pls = pls_of(client)
    assert (pls.state.engine.speed("gpu-fast"), pls.state.engine.speed("gpu-slow")) == (1.8, 0.55)
    placer = Placer(factory, gate=pls.placement, clock=clock)
    make_job(factory, needs=TaskNeeds(expected_duration_s=60.0, value=TOKEN), now=clock())
    first = placer.place_all()
    assert [r.node_id for r in first.placed] == ["gpu-fast"]  # busy from now on
    queued = clock()
    make_job(factory, needs=TaskNeeds(expected_duration_s=HOUR, value=TOKEN), now=queued)

    placer.reload()
    held = placer.place_all()
    assert (held.placed, held.held_back) == ([], 1)
    clock.advance(LATENESS - 60.0)  # still less than the fast node would save
    placer.reload()
    assert placer.place_all().held_back == 1
    clock.advance(61.0)  # the wait has cost what it could save: start on the slow node
    placer.reload()
    late = placer.place_all()
    assert ([r.node_id for r in late.placed], late.held_back) == (["gpu-slow"], 0)


def test_a_task_on_time_on_the_slow_node_is_not_held_back(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    grid(agent, stake, clock)
    placer = Placer(factory, gate=pls_of(client).placement, clock=clock)
    make_job(factory, needs=TaskNeeds(expected_duration_s=60.0, value=TOKEN), now=clock())
    assert [r.node_id for r in placer.place_all().placed] == ["gpu-fast"]
    # Its job's longest task is three reference hours: two hours on the slow card are slack.
    make_job(factory, needs=TaskNeeds(expected_duration_s=HOUR, value=TOKEN,
                                      critical_path_s=3 * HOUR), now=clock())
    placer.reload()
    assert [r.node_id for r in placer.place_all().placed] == ["gpu-slow"]


def test_a_late_task_the_slow_node_pulls_is_reserved_on_the_idle_fast_node(
        agent: Callable[..., LiveNode], stake: FixedStake, factory: sessionmaker[Session],
        client: TestClient, clock: VirtualClock) -> None:
    """The pull runs the placement pass, which ranks every idle node: the 4090 gets the
    task the 3060 pulled for, and picks it up on its own pull."""
    fast, slow = grid(agent, stake, clock)
    make_job(factory, needs=TaskNeeds(expected_duration_s=HOUR, value=TOKEN), now=clock())
    assert slow.post("/v1/nodes/gpu-slow/lease").status_code == 204
    lease = fast.post("/v1/nodes/gpu-fast/lease")
    assert lease.status_code == 200, lease.text


def test_a_restarted_service_plans_with_the_speeds_its_handshakes_proved(
        agent: Callable[..., LiveNode], stake: FixedStake, make_app: Callable[..., TestClient],
        client: TestClient, clock: VirtualClock) -> None:
    grid(agent, stake, clock)
    restarted = pls_of(make_app())
    assert (restarted.state.engine.speed("gpu-fast"), restarted.state.engine.speed("gpu-slow")) == (
        1.8, 0.55)
