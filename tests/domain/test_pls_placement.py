"""PLS placement: expected-cost ranking, stake cover, seeded exploration."""

from __future__ import annotations

import time

import numpy as np
import pytest

from orchestrator.domain.collateral import CollateralPolicy
from orchestrator.domain.matching import Candidate, rank
from orchestrator.domain.pls import CostModel, PlsPolicy
from orchestrator.domain.reliability import PopulationPrior, ReliabilityBook
from orchestrator.domain.types import NodeSpec, TaskNeeds

HOUR = 3600.0
NOW = 1e7
PRIOR = PopulationPrior.from_weibull(shape=0.4, scale_s=3 * HOUR, strength=2.0)
TOKEN = 10**18


def spec(node_id: str, price: int, vram: int = 24) -> NodeSpec:
    provider = "0x" + node_id.encode().hex().rjust(40, "0")  # one provider per node
    return NodeSpec(node_id, provider, "rtx4090", vram, 8.9, "eu", price, 1)


def book_of(histories: dict[str, tuple[float, int, float]]) -> ReliabilityBook:
    """node -> (session length, number of abrupt sessions, current uptime)."""
    book = ReliabilityBook(PRIOR)
    for node, (length, count, uptime) in histories.items():
        t = 0.0
        for _ in range(count):
            book.session_started(node, t)
            t += length
            book.session_ended(node, t, abrupt=True)
        book.session_started(node, NOW - uptime)
    return book


FLAKY_CHEAP = spec("flaky", price=TOKEN // 10)
STABLE_DEAR = spec("stable", price=TOKEN // 5)
BOOK = book_of({"flaky": (1800.0, 20, 600.0), "stable": (3 * 86_400.0, 20, 86_400.0)})
RICH = {FLAKY_CHEAP.provider: 10**24, STABLE_DEAR.provider: 10**24}
PAIR = [Candidate(FLAKY_CHEAP, 1), Candidate(STABLE_DEAR, 1)]


def policy(book: ReliabilityBook = BOOK, explore_share: float = 0.0, seed: int = 0) -> PlsPolicy:
    return PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                     CostModel(rework_fraction=1.0, rescheduling_cost=TOKEN // 100),
                     explore_share=explore_share, seed=seed)


def test_long_task_goes_to_the_node_with_high_conditional_survival() -> None:
    long_task = TaskNeeds(expected_duration_s=8 * HOUR, value=5 * TOKEN)
    ranked = policy().rank(PAIR, long_task, NOW, RICH)
    assert [p.candidate.spec.node_id for p in ranked] == ["stable", "flaky"]
    assert ranked[0].p_fail < ranked[1].p_fail


def test_short_task_goes_to_the_cheaper_node() -> None:
    short_task = TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100)
    ranked = policy().rank(PAIR, short_task, NOW, RICH)
    assert ranked[0].candidate.spec.node_id == "flaky"


def test_node_without_enough_free_stake_is_not_placed() -> None:
    needs = TaskNeeds(expected_duration_s=HOUR, value=5 * TOKEN)
    full = policy().rank(PAIR, needs, NOW, RICH)
    stable = next(p for p in full if p.candidate.spec.node_id == "stable")
    assert stable.collateral == CollateralPolicy(floor=0, cap=10**24).required(
        needs.value, stable.p_fail, needs.expected_duration_s)
    short_of_stake = {**RICH, STABLE_DEAR.provider: stable.collateral - 1}
    ranked = policy().rank(PAIR, needs, NOW, short_of_stake)
    assert [p.candidate.spec.node_id for p in ranked] == ["flaky"]
    exactly_enough = {**RICH, STABLE_DEAR.provider: stable.collateral}
    assert len(policy().rank(PAIR, needs, NOW, exactly_enough)) == 2


def test_offline_ineligible_and_full_nodes_are_skipped() -> None:
    book = book_of({"on": (HOUR, 2, HOUR), "off": (HOUR, 2, HOUR), "small": (HOUR, 2, HOUR),
                    "busy": (HOUR, 2, HOUR)})
    book.session_ended("off", NOW - 10, abrupt=True)
    candidates = [Candidate(spec("on", 1), 1), Candidate(spec("off", 1), 1),
                  Candidate(spec("small", 1, vram=4), 1), Candidate(spec("busy", 1), 0)]
    stake = {c.spec.provider: 10**24 for c in candidates}
    ranked = policy(book).rank(candidates, TaskNeeds(min_vram_gb=16), NOW, stake)
    assert [p.candidate.spec.node_id for p in ranked] == ["on"]


def exploring_book(newcomers: int = 5) -> ReliabilityBook:
    histories = {f"vet{i}": (2 * 86_400.0, 10, 86_400.0) for i in range(5)}
    histories |= {f"new{i}": (HOUR, 0, 600.0) for i in range(newcomers)}
    return book_of(histories)


def short_task_firsts(seed: int, tasks: int = 400, duration: float = 60.0) -> list[bool]:
    book = exploring_book()
    pls = policy(book, explore_share=0.2, seed=seed)
    rows = np.arange(len(book))
    prices = np.array([TOKEN // 100] * 5 + [TOKEN] * 5, dtype=np.float64)  # newcomers dear
    stake = np.full(len(book), 1e24)
    needs = TaskNeeds(expected_duration_s=duration, value=TOKEN // 100)
    return [pls.rank_rows(rows, prices, stake, needs, NOW).explored for _ in range(tasks)]


def test_exploration_is_deterministic_given_the_seed() -> None:
    assert short_task_firsts(seed=7) == short_task_firsts(seed=7)
    assert short_task_firsts(seed=7) != short_task_firsts(seed=8)


def test_a_share_of_short_tasks_explores_new_nodes() -> None:
    explored = short_task_firsts(seed=3)
    assert 0.12 < sum(explored) / len(explored) < 0.28


def test_long_tasks_never_explore() -> None:
    assert not any(short_task_firsts(seed=3, tasks=50, duration=4 * HOUR))


def test_explored_placement_puts_a_newcomer_first() -> None:
    book = exploring_book()
    pls = policy(book, explore_share=1.0, seed=1)
    rows = np.arange(len(book))
    prices = np.array([TOKEN // 100] * 5 + [TOKEN] * 5, dtype=np.float64)
    ranked = pls.rank_rows(rows, prices, np.full(len(book), 1e24),
                           TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100), NOW)
    assert ranked.explored and ranked.rows[0] >= 5
    assert sorted(ranked.rows.tolist()) == list(range(10))


def test_score_fn_plugs_into_matching_rank_with_the_same_order() -> None:
    needs = TaskNeeds(expected_duration_s=8 * HOUR, value=5 * TOKEN)
    by_matching = rank(PAIR, needs, policy().score_fn(NOW))
    by_pls = policy().rank(PAIR, needs, NOW, RICH)
    assert [c.spec.node_id for c in by_matching] == [p.candidate.spec.node_id for p in by_pls]


def test_bad_exploration_share_is_refused() -> None:
    with pytest.raises(ValueError):
        PlsPolicy(BOOK, explore_share=1.5)


def test_ranking_ten_thousand_nodes_stays_cheap() -> None:
    rng = np.random.default_rng(5)
    book = ReliabilityBook(PRIOR)
    for i in range(10_000):
        book.session_started(f"n{i}", NOW - float(rng.exponential(HOUR)))
    pls = policy(book, explore_share=0.1, seed=2)
    rows = np.arange(10_000)
    prices = rng.integers(1, 100, 10_000).astype(np.float64) * 1e15
    stake = np.full(10_000, 1e24)
    needs = TaskNeeds(expected_duration_s=300.0, value=TOKEN)
    started = time.perf_counter()
    for _ in range(50):
        pls.rank_rows(rows, prices, stake, needs, NOW)
    per_placement = (time.perf_counter() - started) / 50
    assert per_placement < 0.05  # measured ~1-3 ms; a simulated week needs well under 50 ms


def test_rank_rows_drops_rows_whose_stake_is_short() -> None:
    pls = policy()
    rows = np.array([BOOK.index_of("flaky"), BOOK.index_of("stable")])
    prices = np.array([TOKEN / 10, TOKEN / 5])
    needs = TaskNeeds(expected_duration_s=HOUR, value=5 * TOKEN)
    full = pls.rank_rows(rows, prices, np.array([1e24, 1e24]), needs, NOW)
    stable_collateral = full.collateral[full.rows.tolist().index(rows[1])]
    short = pls.rank_rows(rows, prices, np.array([1e24, stable_collateral / 2]), needs, NOW)
    assert short.rows.tolist() == [rows[0]]


def test_faster_gpu_is_asked_to_survive_a_shorter_time() -> None:
    book = book_of({"a": (HOUR, 5, HOUR), "b": (HOUR, 5, HOUR)})  # identical histories
    rows = np.array([book.index_of("a"), book.index_of("b")])
    needs = TaskNeeds(expected_duration_s=4 * HOUR, value=TOKEN)
    ranked = policy(book).rank_rows(rows, np.array([1e17, 1e17]), np.array([1e24, 1e24]),
                                    needs, NOW, wall_durations_s=np.array([4 * HOUR, HOUR]))
    assert ranked.rows.tolist() == [rows[1], rows[0]]  # "b" finishes in a quarter the time
    assert ranked.rs[0] > ranked.rs[1]
    assert ranked.raw_rs.tolist() == ranked.rs.tolist()  # no recalibrator set


def test_latency_share_sends_long_tasks_to_the_faster_of_equally_reliable_nodes() -> None:
    """Same history and same price per reference hour, one GPU four times faster. Without a
    latency price the longer exposure alone decides; with it, the gap grows with the task."""
    book = book_of({"slow": (3 * 86_400.0, 5, 86_400.0), "fast": (3 * 86_400.0, 5, 86_400.0)})
    rows = np.array([book.index_of("slow"), book.index_of("fast")])
    stake = np.array([1e24, 1e24])
    latency = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                        CostModel(rework_fraction=1.0, rescheduling_cost=TOKEN // 100,
                                  latency_share_per_hour=0.1), explore_share=0.0)

    def cost_gap(policy: PlsPolicy, work_s: float) -> float:
        needs = TaskNeeds(expected_duration_s=work_s, value=round(work_s / HOUR * TOKEN))
        ranked = policy.rank_rows(rows, np.array([5e17, 5e17]), stake, needs, NOW,
                                  wall_durations_s=np.array([work_s, work_s / 4]))
        assert ranked.rows.tolist() == [rows[1], rows[0]]
        return float(ranked.expected_cost[1] - ranked.expected_cost[0]) / needs.value

    plain = policy(book)
    assert cost_gap(latency, 4 * HOUR) == pytest.approx(cost_gap(plain, 4 * HOUR) + 0.1 * 3,
                                                        rel=1e-3)  # 3 h later x 0.1
    assert cost_gap(latency, 600.0) < 0.1 * cost_gap(latency, 4 * HOUR)


def test_negative_latency_share_is_refused() -> None:
    with pytest.raises(ValueError):
        CostModel(latency_share_per_hour=-0.1)
