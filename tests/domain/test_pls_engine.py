"""The one PLS engine: what each observation changes, checked from the outside (registrations,
the daily prior refit, the recalibrator's feed, slashes and their evidence, readings)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.domain.checkpointing import CheckpointCost
from orchestrator.domain.collateral import CollateralPolicy
from orchestrator.domain.continuity import ChunkMark, session_address, sign_progress
from orchestrator.domain.matching import Candidate
from orchestrator.domain.pls import LeaseHold
from orchestrator.domain.pls_engine import NO_EVIDENCE, LoneHold, PlsConfig, PlsEngine, Reading
from orchestrator.domain.pls_observations import LoneHeld, StartFailed
from orchestrator.domain.popw import PopwVerdict
from orchestrator.domain.reliability import (
    GpuSample,
    ProbeSample,
    ReliabilityBook,
    TaskOutcome,
    UploadSample,
)
from orchestrator.domain.score_commitment import telemetry_digest
from orchestrator.domain.slashing import ProgressVerdict, SlashingConfig
from orchestrator.domain.types import NodeSpec, SlashReason, TaskNeeds, Tier

TOKEN = 10**18
HOUR = 3600.0
DAY = 86_400.0


def provider_of(node_id: str) -> str:
    return "0x" + node_id.encode().hex().rjust(40, "0")


def engine_with(*node_ids: str, config: PlsConfig | None = None, at: float = 0.0,
                network: str | None = None) -> PlsEngine:
    """Nodes registered at `at`, each in its own network unless `network` names a shared one."""
    engine = PlsEngine(config)
    for node_id in node_ids:
        engine.register(node_id, provider_of(node_id), region="eu",
                        network=network or f"AS-{node_id}", at=at, tier=Tier.STANDARD)
    return engine


def test_registering_is_idempotent_and_keeps_the_first_provider() -> None:
    engine = engine_with("b", "a")
    row = engine.register("a", provider_of("a"), region="eu", network="AS-a", at=5.0,
                          tier=Tier.STANDARD)
    assert engine.register("a", "0x" + "9" * 40, region="us", network="AS9", at=6.0,
                           tier=Tier.HIGH) == row  # a second registration is no new node
    assert engine.provider_of("a") == provider_of("a")
    assert engine.staking.tier("a") is Tier.STANDARD
    assert engine.node_ids() == ["a", "b"]
    assert engine.knows("a") and not engine.knows("c")
    with pytest.raises(KeyError):
        engine.provider_of("c")


def test_a_node_is_online_from_its_session_start_until_its_session_ends() -> None:
    engine = engine_with("a")
    assert not engine.online("a", 10.0)
    engine.session_started("a", 10.0)
    assert engine.online("a", 20.0)
    engine.session_ended("a", 30.0, abrupt=False)
    assert not engine.online("a", 40.0)


def _flaky_history(engine: PlsEngine, node_id: str, start: float, count: int) -> float:
    """`count` abrupt one-hour sessions from `start`; returns when the last one ended."""
    at = start
    for _ in range(count):
        engine.session_started(node_id, at)
        at += HOUR
        engine.session_ended(node_id, at, abrupt=True)
        at += 60.0
    return at


def test_the_prior_is_refitted_at_the_first_session_event_past_each_boundary() -> None:
    engine = engine_with("a", config=PlsConfig(prior_refit_s=DAY))
    end = _flaky_history(engine, "a", 1_000.0, 3)  # day 0: no boundary crossed yet
    assert end < DAY and engine.prior_refits == 0
    engine.session_started("a", DAY)  # exactly on the boundary: refit
    assert engine.prior_refits == 1
    engine.session_ended("a", 2 * DAY - 1.0, abrupt=True)  # day 1 still
    assert engine.prior_refits == 1
    engine.session_started("a", 4 * DAY + 10.0)  # days skipped: one refit, not three
    assert engine.prior_refits == 2
    engine.session_ended("a", 5 * DAY - 1.0, abrupt=True)
    assert engine.prior_refits == 2
    engine.session_started("a", 5 * DAY)
    assert engine.prior_refits == 3


def test_a_boundary_before_any_abrupt_departure_keeps_the_prior() -> None:
    engine = engine_with("a", config=PlsConfig(prior_refit_s=DAY))
    engine.session_started("a", 10.0)
    engine.session_ended("a", DAY + 10.0, abrupt=False)  # a drain teaches no departure rate
    prior = engine.book.prior
    assert engine.prior_refits == 0 and engine.book.prior == prior
    engine.session_started("a", 2 * DAY + 10.0)
    assert engine.prior_refits == 0


def test_the_first_event_of_a_day_arms_the_boundary_without_a_refit() -> None:
    """An engine started mid-day refits at the next midnight, not at its first event."""
    engine = engine_with("a", config=PlsConfig(prior_refit_s=DAY))
    _flaky_history(engine, "a", 3 * DAY + 100.0, 3)
    assert engine.prior_refits == 0
    engine.session_started("a", 4 * DAY - 1.0)
    assert engine.prior_refits == 0
    engine.session_ended("a", 4 * DAY, abrupt=True)
    assert engine.prior_refits == 1


def test_a_lone_departure_is_revoked_now_a_shared_one_is_held() -> None:
    hold = LeaseHold(window_s=30.0, min_nodes=2, min_share=0.0, hold_s=900.0)
    engine = engine_with("a", "b", "c", config=PlsConfig(lease_hold=hold), network="AS1")
    assert engine.departed(["a", "ghost"], 100.0) == {"a": 0.0}  # unknown nodes: no answer
    assert engine.departed(["b"], 110.0) == {"b": 900.0}  # a's silence 10 s before
    assert engine.departed(["c"], 200.0) == {"c": 0.0}  # 90 s later: a lone one again


def test_a_batch_of_verdicts_counts_its_own_shared_silence() -> None:
    hold = LeaseHold(window_s=30.0, min_nodes=2, min_share=0.0, hold_s=900.0)
    engine = engine_with("a", "b", config=PlsConfig(lease_hold=hold), network="AS1")
    assert engine.departed(["a", "b"], 100.0) == {"a": 900.0, "b": 900.0}


def test_only_attempts_placed_at_a_known_score_teach_the_recalibrator() -> None:
    engine = engine_with("a", config=PlsConfig(recalibrate_after=4, recalibrate_every=1))
    for _ in range(10):
        engine.attempt_ended(None, True)
        engine.attempt_ended(None, False)
    assert engine.recalibrator.fitted is None  # nothing was observed
    engine.completed("a", 0.9)
    engine.completed("a", 0.8)
    engine.attempt_ended(0.3, False)
    assert engine.recalibrator.fitted is None  # three outcomes, four needed
    engine.attempt_ended(0.2, False)
    assert engine.recalibrator.fitted is not None
    low, high = engine.recalibrator(np.array([0.2, 0.9]))
    assert low < 0.5 < high  # finished at high raw RS, failed at low


def test_a_completed_attempt_counts_as_finished_for_the_recalibrator() -> None:
    engine = engine_with("a", config=PlsConfig(recalibrate_after=2, recalibrate_every=1))
    engine.completed("a", 0.9)
    engine.completed("a", 0.8)
    assert engine.recalibrator.fitted is None  # all finished: nothing to fit yet
    row = np.array([engine.book.index_of("a")])
    assert [v.tolist() for v in engine.book.verified_many(row)] == [[2.0], [0.0]]  # two passes
    engine.abandoned("a", "t1", TOKEN, 0.1, at=10.0)  # an abandonment did not finish
    assert engine.recalibrator.fitted is not None
    assert engine.recalibrator(np.array([0.9]))[0] > engine.recalibrator(np.array([0.1]))[0]


def test_a_failed_start_counts_on_the_record_and_teaches_a_failure_but_slashes_nothing() -> None:
    engine = engine_with("a", config=PlsConfig(recalibrate_after=2, recalibrate_every=1))
    engine.completed("a", 0.9)
    engine.apply(StartFailed("a", 7, raw_rs=0.2, collateral=TOKEN, at=10.0))
    engine.apply(StartFailed("nobody", 8, raw_rs=0.2, collateral=TOKEN, at=10.0))  # unknown
    assert engine.book.summary("a", 20.0).tasks_failed == 1
    assert engine.recalibrator.fitted is not None  # one finished, one not: fitted
    assert engine.recalibrator(np.array([0.9]))[0] > engine.recalibrator(np.array([0.2]))[0]
    assert engine.decide({}, {}, 1e6).slashes == ()  # an abandonment would be, by now


def test_an_abandonment_is_slashed_after_the_delay_with_the_telemetry_of_its_verdict() -> None:
    engine = engine_with("a")
    engine.session_started("a", 0.0)
    engine.departed(["a"], 5_000.0)
    evidence = engine.digest("a", 5_000.0)
    engine.abandoned("a", "t1", 3 * TOKEN, 0.4, at=5_000.0)
    delay = engine.config.slashing.decision_delay_s
    assert engine.decide({}, {}, 5_000.0 + delay - 1).slashes == ()
    (slash,) = engine.decide({}, {}, 5_000.0 + delay).slashes
    assert (slash.reason, slash.node_id, slash.task_id, slash.amount, slash.evidence) == (
        SlashReason.ABANDONMENT, "a", "t1", 3 * TOKEN, evidence)
    assert len(evidence) == 32 and evidence != NO_EVIDENCE


@pytest.mark.parametrize("shared", ["none", "region", "network"])
def test_three_nodes_leaving_together_are_one_outage_only_where_they_share_a_link(
        shared: str) -> None:
    """The region and network each node registers with reach the slashing rules: three
    departures within the outage window are excused as one upstream cut when the three share
    a region or a network, and each is slashed when they share neither."""
    engine = PlsEngine()
    for index, node in enumerate(("a", "b", "c")):
        engine.register(node, provider_of(node),
                        region="eu" if shared == "region" else f"region-{index}",
                        network="AS1" if shared == "network" else f"AS-{index}",
                        at=0.0, tier=Tier.STANDARD)
        engine.session_started(node, 0.0)
    for offset, node in enumerate(("a", "b", "c")):
        engine.departed([node], 5_000.0 + offset)
        engine.abandoned(node, f"t-{node}", 3 * TOKEN, 0.4, at=5_000.0 + offset)
    slashes = engine.decide({}, {}, 5_000.0 + engine.config.slashing.decision_delay_s + 10).slashes
    assert sorted(slash.node_id for slash in slashes) == (
        ["a", "b", "c"] if shared == "none" else [])


def test_a_failed_verification_is_slashed_at_once_and_recorded_against_the_node() -> None:
    engine = engine_with("a", "b")
    for node in ("a", "b"):
        engine.session_started(node, 0.0)
    engine.verification_failed("a", "t1", 2 * TOKEN, 0.7, at=100.0)
    actions = engine.decide({}, {}, 101.0)
    (slash,) = actions.slashes
    assert (slash.reason, slash.task_id, slash.amount) == (
        SlashReason.FAILED_VERIFICATION, "t1", 2 * TOKEN)
    assert slash.evidence == engine.digest("a", 100.0)
    assert engine.staking.tier("a") is Tier.BACKGROUND
    # The book counts the failure: a's score falls below b's, whose history is the same.
    assert engine.book.score("a", 200.0, HOUR) < engine.book.score("b", 200.0, HOUR)


def test_outcomes_replayed_on_restart_reach_the_book_but_not_the_recalibrator() -> None:
    engine = engine_with("a", "b", config=PlsConfig(recalibrate_after=1, recalibrate_every=1))
    for node in ("a", "b"):
        engine.session_started(node, 0.0)
    before = engine.book.score("a", 10.0, HOUR)
    engine.outcome("a", TaskOutcome.FAILED_VERIFICATION)
    assert engine.book.score("a", 10.0, HOUR) < before
    assert engine.book.score("b", 10.0, HOUR) == before
    assert engine.recalibrator.fitted is None


def test_collateral_is_the_policy_amount_for_the_task_value_risk_and_duration() -> None:
    config = PlsConfig(collateral=CollateralPolicy(floor=0, cap=10**24))
    engine = PlsEngine(config)
    # 10 % base + 3 x 10 % risk = 40 % of the value; an instant task has no duration weight.
    needs = TaskNeeds(expected_duration_s=0.0, value=10 * TOKEN)
    assert engine.collateral(needs, 0.1) == 4 * TOKEN
    # One hour: (1 + 0.25 * log2(2)) = 1.25 times as much.
    hour = TaskNeeds(expected_duration_s=HOUR, value=10 * TOKEN)
    assert engine.collateral(hour, 0.1) == 5 * TOKEN


def test_checkpoint_interval_reads_the_mtbf_over_at_least_a_minute() -> None:
    engine = engine_with("a", "b")
    for node in ("a", "b"):
        _flaky_history(engine, node, 0.0, 5)
        engine.session_started(node, 6 * HOUR)
    now = 7 * HOUR
    assert engine.checkpoint_interval_s("a", now, 1.0) == engine.checkpoint_interval_s(
        "a", now, 60.0)
    assert engine.checkpoint_interval_s("a", now, 1.0) != engine.checkpoint_interval_s(
        "a", now, 120.0)


def test_a_node_whose_checkpoints_are_slow_checkpoints_less_often() -> None:
    engine = engine_with("a", "b")
    for node in ("a", "b"):
        _flaky_history(engine, node, 0.0, 5)
        engine.session_started(node, 6 * HOUR)
    for _ in range(5):
        engine.checkpoint_measured("a", 1.0)
        engine.checkpoint_measured("b", 100.0)
    now = 7 * HOUR
    fast, slow = (engine.checkpoint_interval_s(n, now, HOUR) for n in ("a", "b"))
    assert slow > fast > 0
    # Young: the interval grows with the square root of the checkpoint cost.
    cost_a, cost_b = CheckpointCost(), CheckpointCost()  # the same measurements, timed alike
    for _ in range(5):
        cost_a.observe(1.0)
        cost_b.observe(100.0)
    assert slow / fast == pytest.approx((cost_b.value / cost_a.value) ** 0.5, rel=1e-6)


def test_readings_carry_a_digest_only_where_one_may_back_a_slash() -> None:
    engine = engine_with("good", "bad", config=PlsConfig(slashing=SlashingConfig(
        demote_below=0.5)))
    engine.session_started("good", 0.0)
    _flaky_history(engine, "bad", 0.0, 30)
    engine.session_started("bad", 31 * HOUR)
    now = 31 * HOUR + 60.0
    full = engine.readings(["good", "bad"], now)
    assert full["good"].rs >= 0.5 > full["bad"].rs
    assert full["good"].digest == engine.digest("good", now)
    assert full["bad"].digest == engine.digest("bad", now)
    assert full["good"].digest != full["bad"].digest
    lean = engine.readings(["good", "bad"], now, all_digests=False)
    assert lean["good"].digest == NO_EVIDENCE and lean["good"].rs == full["good"].rs
    assert lean["bad"].digest == full["bad"].digest
    assert engine.readings([], now) == {}


def test_a_reading_exactly_at_the_demotion_threshold_backs_no_slash() -> None:
    engine = engine_with("a")
    engine.session_started("a", 0.0)
    rs = engine.readings(["a"], 60.0)["a"].rs
    exact = PlsConfig(slashing=SlashingConfig(demote_below=rs, promote_above=max(rs, 0.7),
                                              high_above=max(rs, 0.9)))
    engine = engine_with("a", config=exact)
    engine.session_started("a", 0.0)
    assert engine.readings(["a"], 60.0, all_digests=False)["a"].digest == NO_EVIDENCE


def test_sustained_low_readings_slash_a_share_of_the_bonded_stake() -> None:
    config = PlsConfig(slashing=SlashingConfig(low_score_window_s=2 * HOUR,
                                               min_low_observations=3))
    engine = engine_with("a", config=config)
    bonded = {provider_of("a"): 100 * TOKEN}
    delay = config.slashing.decision_delay_s
    evidence = b"\x07" * 32
    slashes = []
    for step in range(4):  # readings of 0.1 at 0, 1, 2 and 3 hours
        at = step * HOUR
        actions = engine.decide({"a": Reading(0.1, evidence)}, bonded, at + delay)
        slashes += actions.slashes
    (slash,) = slashes
    assert slash.reason is SlashReason.LOW_SCORE
    assert slash.amount == 10 * TOKEN  # 10 % of the bonded stake
    assert slash.evidence == evidence


def test_ranking_candidates_leaves_out_nodes_the_engine_does_not_know() -> None:
    engine = engine_with("a", config=PlsConfig(min_rs=0.0))
    engine.session_started("a", 0.0)
    specs = [NodeSpec(n, provider_of(n), "rtx4090", 24, 8.9, "eu", TOKEN // 10, 1)
             for n in ("a", "stranger")]
    needs = TaskNeeds(expected_duration_s=60.0, value=TOKEN)
    stake = {provider_of(n): 10**24 for n in ("a", "stranger")}
    ranked = engine.rank_candidates([Candidate(s, 1) for s in specs], needs, 60.0, stake)
    assert [p.candidate.spec.node_id for p in ranked] == ["a"]


def test_telemetry_reaches_the_named_nodes_record() -> None:
    """What the engine is told about a node shows in that node's summary exactly as in a
    book told the same directly, and in no other node's."""
    engine = engine_with("a", "b")
    book = ReliabilityBook()
    for node in ("a", "b"):
        engine.session_started(node, 0.0)
        book.session_started(node, 0.0)
    hot = GpuSample(at=50.0, temperature_c=91.0, sm_clock_mhz=900.0, max_sm_clock_mhz=2500.0,
                    throttle_reasons=0x40, utilization_pct=99.0, memory_used_mb=1000.0,
                    memory_total_mb=24_000.0, power_w=300.0, power_limit_w=450.0)
    for at, rtt in ((10.0, 30.0), (20.0, None), (30.0, 250.0)):
        engine.probe("a", ProbeSample(at, rtt))
        book.record_probe("a", ProbeSample(at, rtt))
    engine.gpu("a", hot)
    book.record_gpu("a", hot)
    engine.upload("a", UploadSample(40.0, 3.5))
    book.record_upload("a", UploadSample(40.0, 3.5))
    for at in (5.0, 15.0, 95.0):
        engine.heartbeat("a", at)
        book.record_heartbeat("a", at)
    now = 100.0
    assert engine.book.summary("a", now) == book.summary("a", now)
    assert engine.book.summary("a", now) != book.summary("b", now)
    assert engine.book.summary("b", now) == book.summary("b", now)
    assert engine.digest("a", now) == telemetry_digest(book.summary("a", now))
    assert engine.digest("a", now) != engine.digest("b", now)


def proved(engine: PlsEngine, node_id: str, gpu_class: str | None, *, passed: bool = True,
           at: float = 0.0) -> None:
    engine.handshake(PopwVerdict(node_id, passed, Tier.STANDARD if passed else Tier.BACKGROUND,
                                 at, at + 86_400.0, (), gpu_class))


def test_ranking_rows_takes_online_rows_best_first() -> None:
    engine = engine_with("a", "b", "c", config=PlsConfig(min_rs=0.0))
    for node in ("a", "b"):
        engine.session_started(node, 0.0)  # c never came online
    rows = np.array([engine.book.index_of(n) for n in ("a", "b", "c")], dtype=np.intp)
    needs = TaskNeeds(expected_duration_s=60.0, value=TOKEN)
    ranked = engine.rank(rows, np.array([2.0 * TOKEN, 1.0 * TOKEN, 1.0]), np.full(3, 1e24),
                         needs, 100.0)
    assert ranked.rows.tolist() == [rows[1], rows[0]]  # the cheaper of two equal nodes first
    assert ranked.positions.tolist() == [1, 0]


def test_the_speed_a_handshake_proved_is_what_placement_plans_with() -> None:
    engine = engine_with("a", "b")
    rows = np.array([0, 1], dtype=np.intp)
    assert engine.speeds(rows).tolist() == [1.0, 1.0]  # the reference card until proved
    proved(engine, "a", "rtx3060")
    proved(engine, "b", "a100")
    assert engine.speeds(rows).tolist() == [0.55, 2.2]
    assert engine.speed("b") == 2.2
    proved(engine, "b", "a100", passed=False)  # too slow for the class it claims now
    proved(engine, "a", "no-such-class")
    assert engine.speeds(rows).tolist() == [1.0, 1.0]


def test_a_node_that_would_run_the_task_for_hours_ranks_behind_a_dearer_fast_one() -> None:
    """The proved speeds reach the ranking: the same hour of reference work is 12 hours on a
    card 12 times slower, late past its critical path and more time online at risk, so the
    node asking a tenth less per GPU-hour (more per reference hour) goes second; unproved,
    both are planned as the reference card and the cheaper went first."""
    engine = engine_with("fast", "slow", config=PlsConfig(min_rs=0.0))
    for node in ("fast", "slow"):
        engine.session_started(node, 0.0)
    rows = np.array([engine.book.index_of(n) for n in ("fast", "slow")], dtype=np.intp)
    needs = TaskNeeds(expected_duration_s=3600.0, value=TOKEN)
    prices = np.array([1.0 * TOKEN, 0.9 * TOKEN])
    nominal = engine.rank(rows, prices, np.full(2, 1e24), needs, 100.0)
    proved(engine, "fast", "h100")
    proved(engine, "slow", "rtx3060")
    speeds = engine.rank(rows, prices, np.full(2, 1e24), needs, 100.0)
    assert nominal.rows.tolist() == [rows[1], rows[0]]
    assert speeds.rows.tolist() == [rows[0], rows[1]]
    assert speeds.rs[1] < nominal.rs[0]  # hours online are less likely than one
    specs = [NodeSpec(n, provider_of(n), "gpu", 24, 8.6, "eu", p, 1)
             for n, p in (("fast", TOKEN), ("slow", 9 * TOKEN // 10))]
    stake = {provider_of(n): 10**24 for n in ("fast", "slow")}
    by_candidates = engine.rank_candidates([Candidate(s, 1) for s in specs], needs, 100.0, stake)
    assert [p.candidate.spec.node_id for p in by_candidates] == ["fast", "slow"]
    assert [p.speed for p in by_candidates] == [3.0, 0.55]


def test_a_task_late_on_the_free_node_waits_for_a_faster_busy_one_no_longer_than_it_saves() -> None:
    """Ski rental: an hour of reference work on a card at half speed is two hours, an hour
    past the critical path; a node at speed 2 would save that hour, so the task waits at
    most an hour from when it was queued, and never so long that the slow node could not
    finish it by the deadline with its expected re-run (two hours, plus two more times the
    chance the attempt is lost). Nothing to wait for when the task is on time or nothing
    faster is busy."""
    engine = engine_with("a")
    needs = TaskNeeds(expected_duration_s=3600.0, value=TOKEN)
    far = 10 * 86_400.0

    def until(chosen: float, faster: float, deadline: float = far, p_fail: float = 0.0,
              of: PlsEngine = engine, task: TaskNeeds = needs) -> float:
        return of.wait_until(task, chosen, faster, queued_at=100.0, deadline=deadline,
                             p_fail=p_fail)

    assert until(0.5, 2.0) == 3700.0
    # a faster node that would itself be late saves only the difference
    assert until(0.5, 0.8) == 100.0 + 2700.0
    # the deadline: two hours on the slow node, and a quarter of them again for the risk
    assert until(0.5, 2.0, deadline=9600.0, p_fail=0.25) == 600.0
    assert until(0.5, 2.0, deadline=9600.0, p_fail=7.0) == 9600.0 - 4 * 3600.0  # at most 2x
    assert until(0.5, 0.5) == -np.inf
    assert until(1.0, 2.0) == -np.inf
    # slack: the job's critical path is three hours, so two hours are on time
    patient = TaskNeeds(expected_duration_s=3600.0, value=TOKEN, critical_path_s=3 * 3600.0)
    assert until(0.5, 2.0, task=patient) == -np.inf
    assert engine.runs_late(needs, 0.5) and not engine.runs_late(needs, 1.0)
    assert not engine.runs_late(patient, 0.5)
    off = engine_with("a", config=PlsConfig(wait_for_faster=False))
    assert until(0.5, 2.0, of=off) == -np.inf
    assert not off.runs_late(needs, 0.5)


GRACE = 300.0  # LeaseHold's lone grace in the tests below


def held(*node_ids: str) -> PlsEngine:
    return engine_with(*node_ids, config=PlsConfig(lease_hold=LeaseHold(lone_grace_s=GRACE)))


def test_lone_holds_fall_due_once_the_grace_has_passed_oldest_verdict_first() -> None:
    engine = held("a", "b", "c")
    engine.hold_lone("b", LoneHold("t5", TOKEN, 0.5, at=200.0))
    engine.hold_lone("a", LoneHold("t3", TOKEN, 0.5, at=200.0))
    engine.hold_lone("a", LoneHold("t0", TOKEN, 0.5, at=200.0))
    engine.hold_lone("a", LoneHold("t9", TOKEN, 0.5, at=100.0))
    assert engine.lone_held("a") and engine.lone_held("b") and not engine.lone_held("c")
    assert engine.lone_holds_due(399.0) == []  # t9's grace ends at 400
    assert [(n, h.task_id) for n, h in engine.lone_holds_due(400.0)] == [("a", "t9")]
    # Same verdict time: by node, then by task.
    assert [(n, h.task_id) for n, h in engine.lone_holds_due(500.0)] == [
        ("a", "t9"), ("a", "t0"), ("a", "t3"), ("b", "t5")]


def test_a_node_back_within_its_lone_grace_keeps_its_leases_one_back_late_does_not() -> None:
    engine = held("a", "b")
    for node in ("a", "b"):
        engine.hold_lone(node, LoneHold("t-old-" + node, TOKEN, 0.5, at=100.0))
        engine.hold_lone(node, LoneHold("t-new-" + node, TOKEN, 0.5, at=250.0))
    engine.session_started("a", 399.0)  # both holds still within the grace: nothing lapsed
    assert not engine.lone_held("a") and engine.lone_holds_due(10_000.0)[0][0] == "b"
    engine.session_started("b", 400.0)  # the older hold's grace ended exactly now
    assert [(n, h.task_id) for n, h in engine.lone_holds_due(400.0)] == [("b", "t-old-b")]
    assert [(n, h.task_id) for n, h in engine.lone_holds_due(10_000.0)] == [("b", "t-old-b")]


def test_reporting_a_held_abandonment_drops_that_hold_and_counts_once() -> None:
    engine = engine_with("a", "b", config=PlsConfig(
        lease_hold=LeaseHold(lone_grace_s=GRACE), recalibrate_after=3, recalibrate_every=1))
    engine.hold_lone("a", LoneHold("t1", TOKEN, 0.2, at=100.0))
    engine.hold_lone("a", LoneHold("t2", TOKEN, 0.2, at=100.0))
    engine.hold_lone("b", LoneHold("t3", TOKEN, 0.2, at=100.0))
    engine.completed("a", 0.9)  # the recalibrator's first outcome
    engine.abandoned("a", "t1", TOKEN, 0.2, at=100.0)  # its second
    assert [(n, h.task_id) for n, h in engine.lone_holds_due(1_000.0)] == [
        ("a", "t2"), ("b", "t3")]
    engine.abandoned("a", "t1", TOKEN, 0.2, at=100.0)  # the same lapse reported again
    assert engine.recalibrator.fitted is None  # still two outcomes, three needed
    engine.abandoned("a", "t2", TOKEN, 0.2, at=100.0)
    assert engine.recalibrator.fitted is not None  # the third
    assert not engine.lone_held("a") and engine.lone_held("b")


def test_an_abandonment_is_slashed_at_the_damage_done_capped_at_the_collateral() -> None:
    engine = engine_with("a")
    engine.session_started("a", 0.0)
    value, collateral = 10 * TOKEN, 20 * TOKEN
    # Damage: 10 % of the value for re-placing the task, plus the share of it redone.
    for task_id, kwargs in (("quarter", {"value": value, "rework_share": 0.25}),  # 35 %
                            ("over", {"value": value, "rework_share": 1.7}),  # read as 100 %
                            ("under", {"value": value, "rework_share": -0.5}),  # read as 0 %
                            ("no-share", {"value": value}),
                            ("no-value", {"rework_share": 0.5}),
                            ("drained", {"value": value, "rework_share": 0.5,
                                         "announced": True})):
        engine.abandoned("a", task_id, collateral, 0.4, at=1_000.0, **kwargs)
    actions = engine.decide({}, {}, 1_000.0 + engine.config.slashing.decision_delay_s)
    assert {s.task_id: s.amount for s in actions.slashes} == {
        "quarter": 35 * TOKEN // 10, "over": 11 * TOKEN, "under": TOKEN,
        "no-share": collateral, "no-value": collateral}


def _cut_with_a_pending_abandonment(key: bytes) -> PlsEngine:
    """a and b alike: two abrupt sessions, then a third that ends at 6 h, a cut while a held
    t1, a drain for b; both are back at 6 h 5 min."""
    engine = engine_with("a", "b")
    engine.staking.session_bound("a", session_address(key))
    for node in ("a", "b"):
        _flaky_history(engine, node, 0.0, 2)
        engine.session_started(node, 5 * HOUR)
    engine.session_ended("a", 6 * HOUR, abrupt=True)
    engine.session_ended("b", 6 * HOUR, abrupt=False)  # b drained instead
    engine.departed(["a"], 6 * HOUR)
    engine.abandoned("a", "t1", TOKEN, 0.4, at=6 * HOUR)
    for node in ("a", "b"):
        engine.session_started(node, 6 * HOUR + 300.0)
    return engine


def test_proof_of_progress_through_a_cut_also_clears_the_departure_from_the_record() -> None:
    key = b"\x05" * 32
    engine = _cut_with_a_pending_abandonment(key)
    now = 6 * HOUR + 600.0
    before = engine.book.score("a", now, HOUR)
    assert before < engine.book.score("b", now, HOUR)
    mark = ChunkMark(b"\x42" * 32, 6 * HOUR + 200.0)  # rendered after the verdict
    proof = sign_progress(key, "a", "t1", (mark,), now)
    assert engine.progress_shown(proof, [b"\x33" * 32], now, 6 * HOUR) is (
        ProgressVerdict.NO_PROGRESS)  # the chunk's content is not held: nothing changes
    assert engine.book.score("a", now, HOUR) == before
    assert engine.progress_shown(proof, [mark.sha256], now, 6 * HOUR) is (
        ProgressVerdict.WITHDRAWN)
    # The cut now counts as b's drain does: a's record is b's.
    assert engine.book.score("a", now, HOUR) == pytest.approx(
        engine.book.score("b", now, HOUR), rel=1e-9)
    assert engine.decide({}, {}, now + engine.config.slashing.decision_delay_s).slashes == ()


def test_a_failed_verification_teaches_the_recalibrator_a_failure_and_keeps_its_evidence(
        ) -> None:
    engine = engine_with("a", config=PlsConfig(recalibrate_after=2, recalibrate_every=1))
    engine.session_started("a", 0.0)
    engine.completed("a", 0.9)
    evidence = b"\x09" * 32
    engine.verification_failed("a", "t1", TOKEN, 0.2, at=100.0, evidence=evidence)
    assert engine.recalibrator.fitted is not None  # one finished, one not: fitted
    high, low = engine.recalibrator(np.array([0.9, 0.2]))
    assert high > low
    (slash,) = engine.decide({}, {}, 101.0).slashes
    assert slash.evidence == evidence


def test_a_replayed_completion_counts_as_a_pass() -> None:
    engine = engine_with("a")
    engine.outcome("a", TaskOutcome.COMPLETED)
    row = np.array([engine.book.index_of("a")])
    assert [v.tolist() for v in engine.book.verified_many(row)] == [[1.0], [0.0]]


def test_a_node_registers_at_the_tier_it_is_given() -> None:
    engine = PlsEngine()
    engine.register("a", provider_of("a"), region="eu", network="AS1", at=0.0, tier=Tier.HIGH)
    assert engine.staking.tier("a") is Tier.HIGH


def test_the_refit_boundary_is_the_next_one_after_the_arming_event_and_after_each_refit(
        ) -> None:
    engine = engine_with("a", config=PlsConfig(prior_refit_s=DAY))
    for day in range(3):  # abrupt departures the book knows before the engine saw an event
        engine.book.session_started("a", day * DAY)
        engine.book.session_ended("a", day * DAY + HOUR, abrupt=True)
    engine.session_started("a", 3 * DAY + 100.0)  # arms 4 DAY
    engine.session_ended("a", 3 * DAY + 200.0, abrupt=True)
    assert engine.prior_refits == 0
    engine.session_started("a", 4 * DAY + 5.0)
    assert engine.prior_refits == 1
    engine.session_ended("a", 5 * DAY + 5.0, abrupt=True)  # the next boundary, 5 DAY
    assert engine.prior_refits == 2



def test_placements_lock_the_collateral_of_the_configured_policy() -> None:
    policy = CollateralPolicy(floor=0, cap=10**24, base_bps=5_000)  # half the value at least
    engine = engine_with("a", config=PlsConfig(min_rs=0.0, collateral=policy))
    engine.session_started("a", 0.0)
    spec = NodeSpec("a", provider_of("a"), "rtx4090", 24, 8.9, "eu", TOKEN // 10, 1)
    needs = TaskNeeds(expected_duration_s=0.0, value=10 * TOKEN)
    (placement,) = engine.rank_candidates([Candidate(spec, 1)], needs, 60.0,
                                          {provider_of("a"): 10**24})
    # 50 % base + 3 x P(fail) of the value, rounded up to a thousandth of a token.
    assert placement.collateral == pytest.approx(10 * TOKEN * (0.5 + 3 * placement.p_fail),
                                                 abs=10**15)
    assert placement.collateral >= 5 * TOKEN


def test_a_lone_held_observation_holds_that_nodes_lease() -> None:
    engine = held("a", "b")

    engine.apply(LoneHeld("b", 5, TOKEN, 0.5, 200.0, None, None))

    assert engine.lone_held("b") and not engine.lone_held("a")
    assert [(n, h.task_id) for n, h in engine.lone_holds_due(200.0 + GRACE)] == [("b", "5")]
