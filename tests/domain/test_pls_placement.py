"""PLS placement: expected-cost ranking, stake cover, seeded exploration."""

from __future__ import annotations

import time

import numpy as np
import pytest
from numpy.typing import NDArray

from orchestrator.domain.calibration import IsotonicCalibrator
from orchestrator.domain.collateral import CollateralPolicy
from orchestrator.domain.matching import Candidate, rank
from orchestrator.domain.pls import CostModel, LeaseHold, PlsPolicy, Probation
from orchestrator.domain.reliability import PopulationPrior, ReliabilityBook, TaskOutcome
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
    """The expected-cost terms alone: no latency price, no track-record weight."""
    return PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                     CostModel(rework_fraction=1.0, rescheduling_cost=TOKEN // 100,
                               latency_share_per_hour=0.0, record_share=0.0),
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


def test_latency_is_priced_only_past_the_jobs_critical_path() -> None:
    """Same history and price per reference hour; one GPU half as fast. A job's result waits
    for its longest task, so only hours past that are late."""
    book = book_of({"slow": (3 * 86_400.0, 5, 86_400.0), "ref": (3 * 86_400.0, 5, 86_400.0)})
    rows = np.array([book.index_of("slow"), book.index_of("ref")])
    work_s = 4 * HOUR

    def gap(share: float, critical_path_s: float) -> float:
        """(cost on the slow GPU - cost on the reference one) / task value."""
        cost = CostModel(rework_fraction=1.0, rescheduling_cost=TOKEN // 100,
                         latency_share_per_hour=share, record_share=0.0)
        pls = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24), cost, explore_share=0.0)
        needs = TaskNeeds(expected_duration_s=work_s, value=round(work_s / HOUR * TOKEN),
                          critical_path_s=critical_path_s)
        ranked = pls.rank_rows(rows, np.array([5e17, 5e17]), np.array([1e24, 1e24]), needs,
                               NOW, wall_durations_s=np.array([2 * work_s, work_s]))
        costs = dict(zip(ranked.rows.tolist(), ranked.expected_cost.tolist(), strict=True))
        return (costs[int(rows[0])] - costs[int(rows[1])]) / needs.value

    # The job's longest task: the slow GPU delivers it 4 h later, at 0.1 of its value per hour.
    assert gap(0.1, 0.0) == pytest.approx(gap(0.0, 0.0) + 0.1 * 4, rel=1e-3)
    # A 4 h task of a job whose longest task takes 10 h: its 8 h on the slow GPU delay nobody.
    assert gap(0.1, 10 * HOUR) == pytest.approx(gap(0.0, 10 * HOUR))


def test_track_record_ranks_a_long_lived_host_above_a_flaky_one_up_as_long() -> None:
    """Both up for 6 h now; one's past sessions lasted days, the other's half an hour."""
    book = book_of({"flaky": (1800.0, 20, 6 * HOUR), "steady": (3 * 86_400.0, 3, 6 * HOUR)})
    rows = np.array([book.index_of("flaky"), book.index_of("steady")])
    short = TaskNeeds(expected_duration_s=600.0, value=TOKEN // 6)
    cheap_flaky = np.array([1e17, 2e17])  # the flaky host asks half the price

    def first(record_share: float) -> int:
        cost = CostModel(latency_share_per_hour=0.0, record_share=record_share)
        pls = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24), cost, explore_share=0.0)
        ranked = pls.rank_rows(rows, cheap_flaky, np.array([1e24, 1e24]), short, NOW)
        return int(ranked.rows[0])

    record = book.record_survival_many(rows, NOW, 2 * HOUR)
    assert record[1] > record[0]
    assert first(0.0) == rows[0]  # RS alone: a short task is safe on either, price decides
    assert first(5.0) == rows[1]


def test_record_survival_counts_the_running_session() -> None:
    book = book_of({"new": (HOUR, 0, 60.0), "week_up": (HOUR, 0, 7 * 86_400.0)})
    rows = np.array([book.index_of("new"), book.index_of("week_up")])
    record = book.record_survival_many(rows, NOW, 4 * HOUR)
    assert 0.0 < record[0] < record[1] < 1.0


def test_long_tasks_need_a_verified_record_and_a_caught_node_comes_last() -> None:
    book = book_of({"new": (3 * 86_400.0, 3, 86_400.0), "proven": (3 * 86_400.0, 3, 86_400.0),
                    "cheat": (3 * 86_400.0, 3, 86_400.0)})
    for _ in range(5):
        book.record_task_outcome("proven", TaskOutcome.COMPLETED)
        book.record_task_outcome("cheat", TaskOutcome.COMPLETED)
    book.record_task_outcome("cheat", TaskOutcome.FAILED_VERIFICATION)
    rows = np.array([book.index_of(n) for n in ("new", "cheat", "proven")])
    prices = np.array([1e17, 1e17, 5e17])  # the unproven ones are cheaper
    stake = np.array([1e24, 1e24, 1e24])
    pls = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                    CostModel(latency_share_per_hour=0.0, record_share=0.0), explore_share=0.0)
    long_task = TaskNeeds(expected_duration_s=2 * HOUR, value=2 * TOKEN)
    assert pls.rank_rows(rows, prices, stake, long_task, NOW).rows.tolist() == [rows[2]]
    short = TaskNeeds(expected_duration_s=600.0, value=TOKEN // 6)
    assert set(pls.rank_rows(rows, prices, stake, short, NOW).rows.tolist()) == {rows[0], rows[2]}
    # A new grid where nobody has a record yet: long work still gets placed.
    assert pls.rank_rows(rows[:1], prices[:1], stake[:1], long_task, NOW).rows.tolist() == [
        rows[0]]
    # A node caught cheating: short work only when nobody else can take it, long work never.
    assert pls.rank_rows(rows[1:2], prices[1:2], stake[1:2], short, NOW).rows.tolist() == [
        rows[1]]
    assert pls.rank_rows(rows[1:2], prices[1:2], stake[1:2], long_task, NOW).rows.size == 0


def test_probation_weighs_a_failed_check_as_many_passes() -> None:
    probation = Probation(min_passes=3, fail_weight=20.0)
    passes, fails = np.array([2.0, 3.0, 19.0, 20.0]), np.array([0.0, 0.0, 1.0, 1.0])
    assert probation.trusted(passes, fails).tolist() == [False, True, False, True]
    record, clean = probation.ladder(passes, fails, long_task=True)
    assert (record == probation.trusted(passes, fails)).all()
    assert clean.tolist() == [True, True, False, False]
    uncaught, anyone = probation.ladder(passes, fails, long_task=False)
    assert uncaught.tolist() == [True, True, False, True] and anyone.all()


def test_lease_hold_only_for_silences_shared_by_peers() -> None:
    hold = LeaseHold(window_s=30.0, min_nodes=2, min_share=0.02, hold_s=1800.0)
    assert hold.hold_for([(1, 40), (1, 200)]) == 0.0  # alone in region and network
    assert hold.hold_for([(1, 40), (2, 50)]) == 1800.0  # two of one ISP at once
    assert hold.hold_for([(2, 500), (1, 500)]) == 0.0  # 2 of 500: coincidence is likely
    assert hold.hold_for([(10, 500), (1, 500)]) == 1800.0
    with pytest.raises(ValueError):
        LeaseHold(min_nodes=1)


def test_negative_latency_share_or_record_share_is_refused() -> None:
    with pytest.raises(ValueError):
        CostModel(latency_share_per_hour=-0.1)
    with pytest.raises(ValueError):
        CostModel(record_share=-1.0)


def test_equal_nodes_rank_emptier_first_then_by_id_with_their_own_numbers() -> None:
    book = book_of({name: (86_400.0, 2, HOUR) for name in ("b", "a", "c")})
    a, b, c = spec("a", price=TOKEN // 10), spec("b", price=TOKEN // 10), spec("c", TOKEN // 10)
    task = TaskNeeds(expected_duration_s=HOUR, value=TOKEN)
    stake = {a.provider: 10**24, b.provider: 10**24, c.provider: 10**24}
    ranked = policy(book).rank([Candidate(b, 1), Candidate(a, 1), Candidate(c, 3)], task, NOW,
                               stake)
    assert [p.candidate.spec.node_id for p in ranked] == ["c", "a", "b"]
    for placement in ranked:  # identical histories: identical numbers
        rs = book.score(placement.candidate.spec.node_id, NOW, HOUR)
        assert placement.rs == pytest.approx(rs, rel=1e-12)
        assert placement.p_fail == pytest.approx(1.0 - rs, rel=1e-12)
        assert placement.collateral == CollateralPolicy(floor=0, cap=10**24).required(
            TOKEN, placement.p_fail, HOUR)
        assert placement.expected_cost == pytest.approx(ranked[0].expected_cost)
        assert placement.explored is False


def test_a_provider_missing_from_the_stake_map_has_none() -> None:
    ranked = policy().rank(PAIR, TaskNeeds(expected_duration_s=HOUR, value=TOKEN), NOW,
                           {STABLE_DEAR.provider: 10**24})
    assert [p.candidate.spec.node_id for p in ranked] == ["stable"]


def test_only_the_first_placement_of_an_exploring_ranking_is_marked_explored() -> None:
    book = exploring_book()
    pls = policy(book, explore_share=1.0, seed=1)
    names = [f"vet{i}" for i in range(5)] + [f"new{i}" for i in range(5)]
    prices = [TOKEN // 100] * 5 + [TOKEN] * 5  # newcomers dear: only exploring puts one first
    candidates = [Candidate(spec(name, price), 1) for name, price in zip(names, prices,
                                                                           strict=True)]
    stake = {c.spec.provider: 10**24 for c in candidates}
    ranked = pls.rank(candidates, TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100), NOW,
                      stake)
    assert [p.explored for p in ranked] == [True] + [False] * 9
    assert ranked[0].candidate.spec.node_id.startswith("new")


def test_the_rs_floor_gives_way_only_when_the_free_nodes_are_short_of_steady_ones() -> None:
    """A grid of short-lived hosts: nobody clears the floor for a long task, so it goes to the
    cheapest risky node anyway, also when it is the only free node; once enough of the free
    candidates clear it, a risky node is refused and the steady one takes the task."""
    shaky = {"a": (1800.0, 20, 60.0), "b": (1200.0, 20, 60.0)}
    book = book_of(shaky)
    a, b = spec("a", price=TOKEN // 10), spec("b", price=TOKEN // 10)
    long_task = TaskNeeds(expected_duration_s=8 * HOUR, value=5 * TOKEN)
    floored = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24), min_rs=0.9)
    stake = {a.provider: 10**24, b.provider: 10**24}
    ranked = floored.rank([Candidate(a, 1), Candidate(b, 1)], long_task, NOW, stake)
    assert ranked and all(p.rs < 0.9 for p in ranked)  # placed anyway, risk priced
    assert floored.rank([Candidate(b, 1)], long_task, NOW, stake) != []  # the only free one
    assert ranked[0].collateral > floored.collateral.required(long_task.value, 0.0,
                                                              long_task.expected_duration_s)
    mixed = book_of({**shaky, "steady": (3 * 86_400.0, 20, 86_400.0)})
    steady = spec("steady", price=TOKEN // 5)
    stake[steady.provider] = 10**24
    floored = PlsPolicy(mixed, CollateralPolicy(floor=0, cap=10**24),
                        min_rs=float(mixed.score("steady", NOW, 8 * HOUR)) - 1e-9,
                        floor_share=0.25)
    ranked = floored.rank([Candidate(a, 1), Candidate(b, 1), Candidate(steady, 1)],
                          long_task, NOW, stake)
    assert [p.candidate.spec.node_id for p in ranked] == ["steady"]  # 1 of 3 clears it
    assert floored.rank([Candidate(a, 1)], long_task, NOW, stake) != []  # a alone is short


def test_lone_grace_is_apart_from_the_shared_silence_judgement() -> None:
    hold = LeaseHold(lone_grace_s=300.0)
    assert hold.hold_for([(1, 40), (1, 200)]) == 0.0  # a lone silence is still its own
    with pytest.raises(ValueError):
        LeaseHold(lone_grace_s=-1.0)


# ----- the expected cost, by hand --------------------------------------------------------------
# expected_cost = compute + P(fail) x (rework x compute + rescheduling + delay x value)
#                 + latency share x value x hours past the critical path
HAND_COST = CostModel(rework_fraction=0.5, rescheduling_cost=TOKEN // 10, delay_fraction=0.2,
                      latency_share_per_hour=0.6, record_share=0.0)


def hand_policy(book: ReliabilityBook = BOOK, **kwargs: object) -> PlsPolicy:
    return PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24), HAND_COST,
                     explore_share=0.0, **kwargs)  # type: ignore[arg-type]


def test_expected_cost_is_compute_plus_the_priced_risk_of_failure() -> None:
    needs = TaskNeeds(expected_duration_s=1800.0, value=5 * TOKEN)
    (placement,) = hand_policy().rank([Candidate(spec("stable", price=2 * TOKEN), 1)], needs,
                                      NOW, RICH)
    # compute: 2 tokens an hour for half an hour = 1; a failure costs 0.5 + 0.1 + 0.2 x 5.
    assert placement.expected_cost == pytest.approx(
        TOKEN * (1.0 + placement.p_fail * (0.5 + 0.1 + 1.0)), rel=1e-12)
    assert 0.0 < placement.p_fail < 1.0


def test_time_past_the_critical_path_is_priced_per_hour_of_value() -> None:
    pls = hand_policy()
    row = np.array([BOOK.index_of("stable")])
    price = np.array([2.0 * TOKEN])
    stake = np.array([1e24])
    needs = TaskNeeds(expected_duration_s=1800.0, value=5 * TOKEN, critical_path_s=3600.0)
    on_time = pls.rank_rows(row, price, stake, needs, NOW, wall_durations_s=np.array([3600.0]))
    late = pls.rank_rows(row, price, stake, needs, NOW, wall_durations_s=np.array([7200.0]))
    p_on_time, p_late = float(on_time.p_fail[0]), float(late.p_fail[0])
    assert on_time.expected_cost[0] == pytest.approx(TOKEN * (1.0 + p_on_time * 1.6), rel=1e-12)
    # One hour past the critical path: 0.6 of the value (5 tokens) more.
    assert late.expected_cost[0] == pytest.approx(TOKEN * (1.0 + p_late * 1.6 + 0.6 * 5),
                                                  rel=1e-12)
    # Without a critical path the task's own duration is the slack.
    own = TaskNeeds(expected_duration_s=1800.0, value=5 * TOKEN)
    slow = pls.rank_rows(row, price, stake, own, NOW, wall_durations_s=np.array([3600.0]))
    assert slow.expected_cost[0] == pytest.approx(
        TOKEN * (1.0 + float(slow.p_fail[0]) * 1.6 + 0.6 * 5 * 0.5), rel=1e-12)


def test_the_track_record_scales_the_cost_by_the_chance_a_fresh_session_ends_first() -> None:
    book = BOOK
    needs = TaskNeeds(expected_duration_s=HOUR, value=TOKEN)
    row = np.array([book.index_of("flaky")])
    price, stake = np.array([float(TOKEN)]), np.array([1e24])
    plain = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                      CostModel(record_share=0.0, latency_share_per_hour=0.0), explore_share=0.0)
    weighted = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                         CostModel(record_share=4.0, latency_share_per_hour=0.0),
                         explore_share=0.0)
    record = float(book.record_survival_many(row, NOW, HOUR)[0])
    assert 0.0 < record < 1.0
    base = float(plain.rank_rows(row, price, stake, needs, NOW).expected_cost[0])
    assert weighted.rank_rows(row, price, stake, needs, NOW).expected_cost[0] == pytest.approx(
        base * (1.0 + 4.0 * (1.0 - record)), rel=1e-12)


def test_the_score_fn_is_minus_the_expected_cost() -> None:
    needs = TaskNeeds(expected_duration_s=1800.0, value=5 * TOKEN)
    stable = spec("stable", price=2 * TOKEN)
    rs = BOOK.score("stable", NOW, 1800.0)
    assert hand_policy().score_fn(NOW)(stable, needs) == pytest.approx(
        -TOKEN * (1.0 + (1.0 - rs) * 1.6), rel=1e-12)


def test_a_node_exactly_at_the_rs_floor_is_a_candidate() -> None:
    """While another node clears the floor, the floor decides; a node exactly on it is in."""
    needs = TaskNeeds(expected_duration_s=HOUR, value=TOKEN)
    rs = BOOK.score("flaky", NOW, HOUR)
    assert BOOK.score("stable", NOW, HOUR) > rs + 1e-9
    at_floor = hand_policy(min_rs=rs).rank(PAIR, needs, NOW, RICH)
    assert "flaky" in [p.candidate.spec.node_id for p in at_floor]
    above = hand_policy(min_rs=rs + 1e-9).rank(PAIR, needs, NOW, RICH)
    assert [p.candidate.spec.node_id for p in above] == ["stable"]


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_the_edges_of_the_shares_are_allowed(share: float) -> None:
    PlsPolicy(BOOK, explore_share=share, min_rs=share)
    PlsPolicy(BOOK, floor_share=share)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"explore_share": -0.01}, r"explore_share must lie in \[0, 1\]"),
    ({"explore_share": 1.01}, r"explore_share must lie in \[0, 1\]"),
    ({"min_rs": -0.01}, r"min_rs must lie in \[0, 1\]"),
    ({"min_rs": 1.01}, r"min_rs must lie in \[0, 1\]"),
    ({"floor_share": -0.01}, r"floor_share must lie in \[0, 1\]"),
    ({"floor_share": 1.01}, r"floor_share must lie in \[0, 1\]"),
])
def test_shares_outside_zero_to_one_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        PlsPolicy(BOOK, **kwargs)  # type: ignore[arg-type]


def test_a_task_exactly_as_long_as_the_short_task_limit_still_explores() -> None:
    book = exploring_book()
    rows = np.arange(len(book))
    prices = np.array([TOKEN // 100] * 5 + [TOKEN] * 5, dtype=np.float64)
    stake = np.full(len(book), 1e24)
    for duration, explores in ((600.0, True), (600.5, False)):
        pls = policy(book, explore_share=1.0, seed=1)
        needs = TaskNeeds(expected_duration_s=duration, value=TOKEN // 100)
        assert pls.rank_rows(rows, prices, stake, needs, NOW).explored is explores


def test_a_node_with_as_many_sessions_as_the_limit_is_no_newcomer() -> None:
    """Newcomers are nodes with fewer than `new_node_sessions` sessions observed."""
    histories = {f"vet{i}": (2 * 86_400.0, 10, 86_400.0) for i in range(3)}
    histories |= {"three": (HOUR, 3, 600.0)}
    book = book_of(histories)
    rows = np.arange(len(book))
    prices = np.array([TOKEN // 100] * 3 + [TOKEN], dtype=np.float64)
    needs = TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100)
    assert book.sessions_observed("three") == 3
    for limit, explores in ((3, False), (4, True)):
        pls = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                        CostModel(latency_share_per_hour=0.0, record_share=0.0),
                        explore_share=1.0, new_node_sessions=limit, seed=1)
        ranked = pls.rank_rows(rows, prices, np.full(len(book), 1e24), needs, NOW)
        assert ranked.explored is explores
        assert bool(ranked.rows[0] == book.index_of("three")) is explores


def test_a_single_candidate_is_never_marked_explored() -> None:
    book = exploring_book(newcomers=1)
    row = np.array([book.index_of("new0")])
    ranked = policy(book, explore_share=1.0).rank_rows(
        row, np.array([float(TOKEN)]), np.array([1e24]),
        TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100), NOW)
    assert ranked.rows.tolist() == row.tolist() and ranked.explored is False


# ----- the RS floor's reading of the grid, and the stake filter's edges --------------------
SHAKY = {"a": (1800.0, 20, 60.0), "b": (1200.0, 20, 60.0)}  # short sessions, just back
STEADY = (3 * 86_400.0, 20, 86_400.0)  # sessions of days, up for one
def offline(book: ReliabilityBook, *nodes: str) -> ReliabilityBook:
    for node in nodes:
        book.session_ended(node, NOW - 10, abrupt=True)
    return book


def test_an_exact_share_of_steady_free_candidates_holds_the_floor() -> None:
    """One steady node of four free candidates: exactly a quarter clears RS 0.5. The steady
    node's provider has no stake, so the floor alone decides whether a shaky node may."""
    four = book_of({**SHAKY, "c": (1500.0, 20, 60.0), "steady": STEADY})
    long_task = TaskNeeds(expected_duration_s=8 * HOUR, value=TOKEN)
    candidates = [Candidate(spec(n, TOKEN // 10), 1) for n in ("a", "b", "c", "steady")]
    stake = {c.spec.provider: 10**24 for c in candidates[:3]}

    def placeable(share: float) -> list[str]:
        pls = PlsPolicy(four, CollateralPolicy(floor=0, cap=10**24), min_rs=0.5,
                        floor_share=share)
        return sorted(p.candidate.spec.node_id for p in pls.rank(candidates, long_task, NOW,
                                                                 stake))

    assert placeable(0.25) == []
    assert placeable(0.26) == ["a", "b", "c"]


def test_the_floor_share_is_read_over_the_online_free_candidates() -> None:
    """Grid: one steady node, three shaky ones and two offline (1 of 4 online clears RS 0.5,
    under half). The steady node's provider has no stake, so it cannot take the task: the
    floor decides whether a shaky node may."""
    book = offline(book_of({**SHAKY, "c": (1500.0, 20, 60.0), "steady": STEADY,
                            "o1": STEADY, "o2": STEADY}), "o1", "o2")
    pls = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24), min_rs=0.5, floor_share=0.5)
    long_task = TaskNeeds(expected_duration_s=8 * HOUR, value=TOKEN)
    a, steady, o1, o2 = (spec(n, TOKEN // 10) for n in ("a", "steady", "o1", "o2"))
    stake = {s.provider: 10**24 for s in (a, o1, o2)}  # none for the steady node
    assert [p.candidate.spec.node_id for p in pls.rank([Candidate(a, 1)], long_task, NOW,
                                                        stake)] == ["a"]  # free alone
    # Offered with the steady node: 1 of 2 online candidates clears it, so "a" waits...
    assert pls.rank([Candidate(a, 1), Candidate(steady, 1)], long_task, NOW, stake) == []
    # With two shaky ones beside it, 1 of 3 is under half: a shaky node takes the task.
    b = spec("b", TOKEN // 10)
    stake[b.provider] = 10**24
    ranked = pls.rank([Candidate(a, 1), Candidate(b, 1), Candidate(steady, 1)], long_task,
                      NOW, stake)
    assert {p.candidate.spec.node_id for p in ranked} == {"a", "b"}
    # ...and offline candidates do not count towards the share.
    assert pls.rank([Candidate(a, 1), Candidate(steady, 1), Candidate(o1, 1),
                     Candidate(o2, 1)], long_task, NOW, stake) == []


def test_a_recalibrated_score_never_places_an_offline_or_hopeless_node() -> None:
    """One recalibrator maps raw 0 (offline) to 0.3, another maps raw <= 0.5 to 0 (no
    chance): neither node is placed, and a placement carries its raw and recalibrated RS."""
    book = offline(book_of({"on": STEADY, "off": STEADY, "flaky": (600.0, 20, 60.0)}), "off")
    rows = np.array([book.index_of(n) for n in ("on", "off", "flaky")])
    raw = book.raw_score_many(rows, NOW, HOUR)
    assert raw[1] == 0.0 and 0.0 < raw[2] < 0.5 < raw[0]
    needs = TaskNeeds(expected_duration_s=HOUR, value=TOKEN)
    lifted = IsotonicCalibrator(np.array([0.0, 1.0]), np.array([0.3, 1.0]))
    hopeless = IsotonicCalibrator(np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.0, 1.0]))
    cases = ((lifted, 0.3 + 0.7 * raw[0], [rows[0], rows[2]]),  # "flaky" at 0.3 + 0.7 raw
             (hopeless, (raw[0] - 0.5) / 0.5, [rows[0]]))
    for calibrator, on_rs, placed in cases:
        book.set_recalibrator(calibrator)
        pls = policy(book)
        ranked = pls.rank_rows(rows, np.full(3, 1e17), np.full(3, 1e24), needs, NOW)
        assert ranked.rows.tolist() == placed
        assert ranked.raw_rs[0] == raw[0]
        assert ranked.rs[0] == pytest.approx(on_rs, rel=1e-12)
        names = ("on", "off", "flaky")
        placement = pls.rank([Candidate(spec(n, TOKEN // 10), 1) for n in names], needs,
                             NOW, {spec(n, 1).provider: 10**24 for n in names})[0]
        assert placement.candidate.spec.node_id == "on" and placement.raw_rs == raw[0]
        assert placement.rs == pytest.approx(on_rs, rel=1e-12)


def test_a_task_exactly_at_the_probation_limit_needs_no_record() -> None:
    book = book_of({"new": STEADY, "proven": STEADY})
    for _ in range(5):
        book.record_task_outcome("proven", TaskOutcome.COMPLETED)
    rows = np.array([book.index_of("new"), book.index_of("proven")])
    pls = policy(book)
    limit = pls.probation.max_task_s
    for duration, placed in ((limit, {rows[0], rows[1]}), (limit + 1.0, {rows[1]})):
        needs = TaskNeeds(expected_duration_s=duration, value=TOKEN)
        ranked = pls.rank_rows(rows, np.array([1e17, 5e17]), np.full(2, 1e24), needs, NOW)
        assert set(ranked.rows.tolist()) == placed


def test_a_stake_that_exactly_covers_a_large_collateral_is_enough() -> None:
    """10**24 + 1 token units is no float64: the stake filter must not round it away."""
    amount = 10**24 + 1
    book = book_of({"stable": STEADY})
    pls = PlsPolicy(book, CollateralPolicy(floor=amount, cap=amount),
                    CostModel(latency_share_per_hour=0.0, record_share=0.0), explore_share=0.0)
    node = spec("stable", TOKEN // 10)
    (placement,) = pls.rank([Candidate(node, 1)], TaskNeeds(expected_duration_s=HOUR,
                                                            value=TOKEN), NOW,
                            {node.provider: amount})
    assert placement.collateral == amount
    assert pls.rank([Candidate(node, 1)], TaskNeeds(expected_duration_s=HOUR, value=TOKEN),
                    NOW, {node.provider: amount - 1}) == []


def test_a_task_worth_nothing_can_go_to_a_provider_without_stake() -> None:
    """Its collateral is 0 (no floor), which a provider missing from the stake map covers."""
    node = spec("stable", TOKEN // 10)
    (placement,) = policy().rank([Candidate(node, 1)], TaskNeeds(expected_duration_s=HOUR,
                                                                 value=0), NOW, {})
    assert placement.candidate.spec.node_id == "stable" and placement.collateral == 0


def test_a_provider_without_stake_does_not_shut_out_the_next_rung() -> None:
    """Every task locks 1 token unit. The only node with a record has no stake, so the long
    task goes to the node without one (the next rung) rather than wait."""
    book = book_of({"new": STEADY, "proven": STEADY})
    for _ in range(5):
        book.record_task_outcome("proven", TaskOutcome.COMPLETED)
    pls = PlsPolicy(book, CollateralPolicy(floor=1, cap=1),
                    CostModel(latency_share_per_hour=0.0, record_share=0.0), explore_share=0.0)
    new, proven = spec("new", TOKEN // 10), spec("proven", TOKEN // 10)
    ranked = pls.rank([Candidate(new, 1), Candidate(proven, 1)],
                      TaskNeeds(expected_duration_s=2 * HOUR, value=TOKEN), NOW,
                      {new.provider: 1})
    assert [p.candidate.spec.node_id for p in ranked] == ["new"]


def test_by_default_there_is_no_rs_floor() -> None:
    """Beside a node the recalibrator calls certain (RS 1), the shakier ones stay
    candidates: a floor applies only when one is set."""
    book = book_of({"sure": STEADY, **SHAKY, "c": (1500.0, 20, 60.0)})
    rows = np.arange(len(book))
    raw = book.raw_score_many(rows, NOW, HOUR)
    book.set_recalibrator(IsotonicCalibrator(np.array([0.0, float(raw[0]), 1.0]),
                                             np.array([0.0, 1.0, 1.0])))
    rs = book.score_many(rows, NOW, HOUR)
    assert rs[0] == 1.0 and np.all(rs[1:] < 1.0)
    pls = PlsPolicy(book, CollateralPolicy(floor=0, cap=10**24),
                    CostModel(latency_share_per_hour=0.0, record_share=0.0), explore_share=0.0)
    ranked = pls.rank_rows(rows, np.full(4, 1e17), np.full(4, 1e24),
                           TaskNeeds(expected_duration_s=HOUR, value=TOKEN), NOW)
    assert sorted(ranked.rows.tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_a_track_record_weight_up_to_one_still_counts(share: float) -> None:
    needs = TaskNeeds(expected_duration_s=HOUR, value=TOKEN)
    row = np.array([BOOK.index_of("flaky")])
    price, stake = np.array([float(TOKEN)]), np.array([1e24])

    def cost(record_share: float) -> float:
        pls = PlsPolicy(BOOK, CollateralPolicy(floor=0, cap=10**24),
                        CostModel(record_share=record_share, latency_share_per_hour=0.0),
                        explore_share=0.0)
        return float(pls.rank_rows(row, price, stake, needs, NOW).expected_cost[0])

    record = float(BOOK.record_survival_many(row, NOW, HOUR)[0])
    assert cost(share) == pytest.approx(cost(0.0) * (1.0 + share * (1.0 - record)), rel=1e-12)


def test_ties_keep_the_callers_order_among_many_equal_nodes() -> None:
    """43 nodes of one history: three cheaper, forty dearer. Equal costs keep their order."""
    book = book_of({f"n{i:02}": STEADY for i in range(43)})
    rows = np.arange(43)
    prices = np.array([1e17] * 40 + [5e16] * 3)
    ranked = policy(book).rank_rows(rows, prices, np.full(43, 1e24),
                                    TaskNeeds(expected_duration_s=HOUR, value=TOKEN), NOW)
    assert ranked.rows.tolist() == [40, 41, 42, *range(40)]


def newcomer_pair(newcomer_price: float) -> tuple[ReliabilityBook, NDArray[np.float64]]:
    book = book_of({"vet": (2 * 86_400.0, 10, 86_400.0), "new": (HOUR, 0, 600.0)})
    return book, np.array([TOKEN / 100, newcomer_price])


def test_exploration_moves_a_newcomer_ranked_second_to_the_front() -> None:
    book, prices = newcomer_pair(float(TOKEN))
    needs = TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100)
    plain = policy(book).rank_rows(np.arange(2), prices, np.full(2, 1e24), needs, NOW)
    assert plain.rows.tolist() == [0, 1] and not plain.explored
    ranked = policy(book, explore_share=1.0).rank_rows(np.arange(2), prices, np.full(2, 1e24),
                                                       needs, NOW)
    assert ranked.rows.tolist() == [1, 0] and ranked.explored


def test_a_newcomer_already_ranked_first_is_not_marked_explored() -> None:
    book, _ = newcomer_pair(0.0)
    prices = np.array([float(TOKEN), 0.0])  # the newcomer is the cheapest by far anyway
    ranked = policy(book, explore_share=1.0).rank_rows(
        np.arange(2), prices, np.full(2, 1e24),
        TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100), NOW)
    assert ranked.rows.tolist() == [1, 0] and ranked.explored is False


def test_a_single_candidate_ranking_draws_nothing_from_the_exploration_generator() -> None:
    """The draws of the rankings with a choice are the same with or without lone pulls
    between them, so a run's exploration does not hang on how often nodes pull alone."""
    book = exploring_book()
    rows = np.arange(len(book))
    prices = np.array([TOKEN // 100] * 5 + [TOKEN] * 5, dtype=np.float64)
    stake = np.full(len(book), 1e24)
    needs = TaskNeeds(expected_duration_s=60.0, value=TOKEN // 100)

    def firsts(lone_pulls: bool) -> list[bool]:
        pls = policy(book, explore_share=0.5, seed=4)
        out = []
        for _ in range(40):
            if lone_pulls:
                pls.rank_rows(rows[5:6], prices[5:6], stake[5:6], needs, NOW)
            out.append(pls.rank_rows(rows, prices, stake, needs, NOW).explored)
        return out

    assert firsts(lone_pulls=True) == firsts(lone_pulls=False)
