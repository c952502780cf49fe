"""Slashing, demotion, promotion: no false slashes, hysteresis, reasons and evidence."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.popw import PopwVerdict
from orchestrator.domain.slashing import (
    SlashDecision,
    SlashingConfig,
    SlashReason,
    StakingPolicy,
    TierChange,
)
from orchestrator.domain.types import NodeHealth, Tier
from tests.conftest import examples

HOUR = 3600.0
CONFIG = SlashingConfig()
EVIDENCE = b"\x11" * 32
BONDED = {f"0x{i:040x}": 10**21 for i in range(200)}


def provider(i: int) -> str:
    return f"0x{i:040x}"


def policy_with(nodes: int, region: str = "eu", network: str = "AS1") -> StakingPolicy:
    policy = StakingPolicy(CONFIG)
    for i in range(nodes):
        policy.register(f"n{i}", provider(i), region, network, now=0.0)
    return policy


def decide_after_delay(policy: StakingPolicy, at: float) -> list[SlashReason]:
    actions = policy.decide(at + CONFIG.decision_delay_s + 1, BONDED)
    return [s.reason for s in actions.slashes]


def test_single_missed_heartbeat_never_slashes() -> None:
    detector = PhiAccrualDetector()
    policy = policy_with(1)
    for beat in range(200):
        if beat != 100:  # one heartbeat lost on the way
            detector.heartbeat("n0", beat * 5.0)
        for tick in range(5):
            now = beat * 5.0 + tick
            if detector.health("n0", now) is NodeHealth.DEAD:
                policy.node_departed("n0", now)
                policy.task_abandoned("n0", "task", 10**18, now, EVIDENCE)
    assert detector.health("n0", 995.0) is NodeHealth.ALIVE
    assert decide_after_delay(policy, 1000.0) == []


def test_short_partition_never_slashes() -> None:
    policy = policy_with(10)
    policy.node_departed("n0", 100.0)
    policy.task_abandoned("n0", "task", 10**18, 100.0, EVIDENCE)
    policy.node_returned("n0", 100.0 + CONFIG.reconnect_grace_s / 2)
    assert decide_after_delay(policy, 100.0) == []


def test_node_that_left_during_a_partition_and_stayed_away_past_the_grace_is_slashed() -> None:
    # Churn seed 3: heartbeats stopped a few seconds before the node's session ended, so the
    # DEAD verdict fell inside that cut; the node came back hours later. A real abandonment.
    policy = policy_with(10)
    policy.node_departed("n0", 121_106.0)
    policy.task_abandoned("n0", "task", 10**18, 121_106.0, EVIDENCE)
    policy.node_returned("n0", 121_106.0 + CONFIG.reconnect_grace_s + 60.0)
    assert decide_after_delay(policy, 121_106.0 + CONFIG.reconnect_grace_s) == [
        SlashReason.ABANDONMENT]


def test_real_departure_slashes_the_tasks_collateral_once_with_evidence() -> None:
    policy = policy_with(10)
    policy.node_departed("n3", 100.0)
    policy.task_abandoned("n3", "task-7", 5 * 10**17, 100.0, EVIDENCE)
    policy.task_abandoned("n3", "task-7", 5 * 10**17, 101.0, EVIDENCE)  # reported twice
    assert policy.pending_since("task-7") == 100.0  # the first report's DEAD verdict
    assert policy.pending_since("task-8") is None
    assert policy.decide(100.0 + CONFIG.decision_delay_s / 2, BONDED).slashes == ()
    decided_at = 100.0 + CONFIG.decision_delay_s + 1
    slashes = policy.decide(decided_at, BONDED).slashes
    assert len(slashes) == 1
    slash = slashes[0]
    assert slash == SlashDecision("n3", provider(3), SlashReason.ABANDONMENT, 5 * 10**17,
                                  EVIDENCE, decided_at, decided_at + 3 * 86_400.0, "task-7",
                                  "departed holding the task")
    assert len(slash.slash_id) == 32
    assert policy.pending_since("task-7") is None  # decided: nothing pending any more
    assert policy.decide(decided_at + HOUR, BONDED).slashes == ()


@settings(max_examples=examples(40), deadline=None)
@given(group_size=st.integers(5, 60), share=st.floats(0.2, 1.0),
       offsets=st.lists(st.floats(0.0, CONFIG.outage_window_s), min_size=60, max_size=60),
       start=st.floats(0.0, 1e6))
def test_correlated_outage_never_slashes(group_size: int, share: float, offsets: list[float],
                                         start: float) -> None:
    policy = policy_with(group_size, region="us-east", network="AS7")
    policy.register("elsewhere", provider(199), "ap-south", "AS9", now=0.0)
    down = max(3, math.ceil(share * group_size))  # at least the policy's outage threshold
    if down > group_size:
        return
    times = sorted(start + offsets[i] for i in range(down))
    # A lone departure in another region at the same time is a real abandonment.
    policy.node_departed("elsewhere", times[0])
    policy.task_abandoned("elsewhere", "t-else", 10**18, times[0], EVIDENCE)
    slashes: list[SlashDecision] = []
    for i, at in enumerate(times):
        policy.node_departed(f"n{i}", at)
        policy.task_abandoned(f"n{i}", f"t{i}", 10**18, at, EVIDENCE)
        policy.observe_score(f"n{i}", 0.0, at, EVIDENCE)
        slashes += policy.decide(at, BONDED).slashes  # the service decides every tick
    slashes += policy.decide(times[-1] + CONFIG.decision_delay_s + 1, BONDED).slashes
    assert [(s.node_id, s.reason) for s in slashes] == [("elsewhere", SlashReason.ABANDONMENT)]


def test_outage_shared_by_a_network_across_regions_never_slashes() -> None:
    policy = StakingPolicy(CONFIG)
    for i in range(20):
        policy.register(f"n{i}", provider(i), f"region-{i}", "AS-shared", now=0.0)
    for i in range(5):
        policy.node_departed(f"n{i}", 500.0 + i)
        policy.task_abandoned(f"n{i}", f"t{i}", 10**18, 500.0 + i, EVIDENCE)
    assert decide_after_delay(policy, 505.0) == []


def feed_scores(policy: StakingPolicy, node: str, scores: list[float], start: float = 0.0,
                step: float = HOUR) -> tuple[float, list[TierChange], list[SlashReason]]:
    changes: list[TierChange] = []
    reasons: list[SlashReason] = []
    at = start
    for rs in scores:
        policy.observe_score(node, rs, at, EVIDENCE)
        actions = policy.decide(at, BONDED)
        changes += actions.tier_changes
        reasons += [s.reason for s in actions.slashes]
        at += step
    return at, changes, reasons


def test_sustained_low_score_demotes_and_slashes_a_share_of_stake() -> None:
    policy = policy_with(1)
    _, changes, reasons = feed_scores(policy, "n0", [0.3] * 10)
    assert reasons == [SlashReason.LOW_SCORE]
    # Readings hourly from 0 mature 40 min later: at 7 h the streak 0..6 h spans the window.
    assert changes == [TierChange("n0", Tier.STANDARD, Tier.BACKGROUND, 7 * HOUR,
                                  "sustained low RS")]
    assert policy.tier("n0") is Tier.BACKGROUND


def test_low_score_slash_amount_is_the_configured_share() -> None:
    policy = policy_with(1)
    for hour in range(8):
        policy.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    slashes = policy.decide(9 * HOUR, BONDED).slashes
    assert slashes == (SlashDecision(
        "n0", provider(0), SlashReason.LOW_SCORE, 10**20, EVIDENCE, 9 * HOUR,
        9 * HOUR + 3 * 86_400.0, None, "RS < 0.5 for 25200 s"),)  # 10 % of 10**21; 0..7 h


def test_a_low_score_streak_needs_the_minimum_number_of_observations() -> None:
    policy = policy_with(1)
    assert CONFIG.min_low_observations == 3 and CONFIG.low_score_window_s == 6 * HOUR
    for at in (0.0, 6 * HOUR):  # spans the whole window, but only two readings
        policy.observe_score("n0", 0.2, at, EVIDENCE)
    assert decide_after_delay(policy, 6 * HOUR) == []
    policy.observe_score("n0", 0.2, 6.5 * HOUR, EVIDENCE)  # the third
    assert decide_after_delay(policy, 6.5 * HOUR) == [SlashReason.LOW_SCORE]


@pytest.mark.parametrize(("last_reading_h", "slashed"), [(6.0, True), (5.9, False)])
def test_a_low_score_streak_must_span_the_whole_window(last_reading_h: float,
                                                        slashed: bool) -> None:
    policy = policy_with(1)
    for at in (0.0, 3 * HOUR, last_reading_h * HOUR):
        policy.observe_score("n0", 0.2, at, EVIDENCE)
    assert decide_after_delay(policy, 7 * HOUR) == ([SlashReason.LOW_SCORE] if slashed else [])


def test_brief_low_score_dip_does_not_slash() -> None:
    policy = policy_with(1)
    _, changes, reasons = feed_scores(policy, "n0", [0.9, 0.3, 0.3, 0.3, 0.9] * 6)
    assert reasons == [] and changes == []


def test_low_scores_while_away_do_not_count() -> None:
    policy = policy_with(1)
    policy.node_departed("n0", 0.0)
    for hour in range(10):
        policy.observe_score("n0", 0.0, hour * HOUR, EVIDENCE)
    assert decide_after_delay(policy, 10 * HOUR) == []


def test_failed_verification_slashes_and_demotes_at_once() -> None:
    policy = policy_with(1)
    policy.task_abandoned("n0", "t1", 7 * 10**17, 40.0, EVIDENCE)  # the wrong result wins
    policy.verification_failed("n0", "t1", 7 * 10**17, 50.0, EVIDENCE)
    policy.verification_failed("n0", "t1", 7 * 10**17, 60.0, EVIDENCE)  # reported twice
    actions = policy.decide(51.0, BONDED)
    assert actions.slashes == (SlashDecision(
        "n0", provider(0), SlashReason.FAILED_VERIFICATION, 7 * 10**17, EVIDENCE, 50.0,
        50.0 + 3 * 86_400.0, "t1", "result failed verification"),)
    assert actions.tier_changes == (
        TierChange("n0", Tier.STANDARD, Tier.BACKGROUND, 50.0, "failed verification"),)
    assert decide_after_delay(policy, 60.0) == []  # nor slashed again as an abandonment


def test_a_task_failed_on_two_nodes_slashes_each_node_once() -> None:
    policy = policy_with(2)
    policy.verification_failed("n0", "t1", 10**18, 50.0, EVIDENCE)
    policy.verification_failed("n1", "t1", 10**18, 55.0, EVIDENCE)  # the redo cheated too
    policy.verification_failed("n1", "t1", 10**18, 56.0, EVIDENCE)  # reported twice
    slashes = policy.decide(60.0, BONDED).slashes
    assert [(s.node_id, s.task_id, s.decided_at) for s in slashes] == [
        ("n0", "t1", 50.0), ("n1", "t1", 55.0)]


def verdict(node: str, tier: Tier, at: float, valid_s: float = 10 * 86_400.0) -> PopwVerdict:
    return PopwVerdict(node, True, tier, at, at + valid_s, ())


def test_promotion_needs_sustained_good_score_and_a_fresh_handshake() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=0.0, tier=Tier.BACKGROUND)
    end, changes, _ = feed_scores(policy, "n0", [0.95] * 30)
    assert changes == [] and policy.tier("n0") is Tier.BACKGROUND  # no handshake yet
    policy.handshake(verdict("n0", Tier.HIGH, end))
    end, changes, _ = feed_scores(policy, "n0", [0.95] * 40, start=end)
    assert [c.new for c in changes] == [Tier.STANDARD, Tier.HIGH]
    assert {c.detail for c in changes} == {"sustained good RS and fresh handshake"}
    assert changes[1].at - changes[0].at >= CONFIG.min_dwell_s


def test_high_tier_lapses_when_its_handshake_expires() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=0.0, tier=Tier.HIGH)
    policy.handshake(verdict("n0", Tier.HIGH, 0.0, valid_s=2 * HOUR))
    _, changes, _ = feed_scores(policy, "n0", [0.99] * 4)
    assert [(c.old, c.new, c.detail) for c in changes] == [
        (Tier.HIGH, Tier.STANDARD, "HIGH handshake expired")]


def test_failed_handshake_never_demotes_by_itself() -> None:
    policy = policy_with(1)
    policy.handshake(PopwVerdict("n0", False, Tier.BACKGROUND, 0.0, 86_400.0, ()))
    _, changes, reasons = feed_scores(policy, "n0", [0.8] * 10)
    assert changes == [] and reasons == []


def test_score_wobbling_across_thresholds_does_not_flap() -> None:
    policy = policy_with(1)
    policy.handshake(verdict("n0", Tier.STANDARD, 0.0, valid_s=30 * 86_400.0))
    _, changes, reasons = feed_scores(policy, "n0", [0.45, 0.75] * 100)
    assert changes == [] and reasons == []


# Promotion windows shorter than the dwell time, so that the dwell is what holds a tier back
# (under the defaults the 12 h promotion window always outlasts the 6 h dwell).
DWELL_CONFIG = SlashingConfig(promote_window_s=2 * HOUR, min_dwell_s=10 * HOUR)


def test_promotion_waits_out_the_dwell_time_since_the_last_tier_change() -> None:
    policy = StakingPolicy(DWELL_CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=0.0, tier=Tier.BACKGROUND)
    policy.handshake(verdict("n0", Tier.HIGH, 0.0))
    _, changes, _ = feed_scores(policy, "n0", [0.95] * 30)
    # Good RS from t=0 fills the 2 h window by ~3 h, yet each step waits 10 h: BACKGROUND
    # (registered at 0) -> STANDARD at 10 h -> HIGH at 20 h.
    assert [(c.old, c.new, c.at) for c in changes] == [
        (Tier.BACKGROUND, Tier.STANDARD, 10 * HOUR), (Tier.STANDARD, Tier.HIGH, 20 * HOUR)]


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=24, max_size=24 * 7))
def test_promotions_are_never_closer_than_the_dwell_time(scores: list[float]) -> None:
    policy = StakingPolicy(DWELL_CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=0.0)
    policy.handshake(verdict("n0", Tier.STANDARD, 0.0, valid_s=30 * 86_400.0))
    _, changes, _ = feed_scores(policy, "n0", scores)
    previous_change = 0.0  # registration
    for change in changes:
        if change.new > change.old:
            assert change.at - previous_change >= DWELL_CONFIG.min_dwell_s
        previous_change = change.at


def test_upheld_dispute_restores_the_tier_once() -> None:
    policy = policy_with(1)
    policy.verification_failed("n0", "t1", 10**18, 50.0, EVIDENCE)
    slash = policy.decide(51.0, BONDED).slashes[0]
    assert policy.tier("n0") is Tier.BACKGROUND
    change = policy.dispute_upheld(slash, now=HOUR)
    assert change == TierChange("n0", Tier.BACKGROUND, Tier.STANDARD, HOUR,
                                "slash overturned on dispute")
    assert policy.tier("n0") is Tier.STANDARD
    assert policy.dispute_upheld(slash, now=2 * HOUR) is None



def test_standard_handshake_never_promotes_to_high() -> None:
    policy = policy_with(1)
    policy.handshake(verdict("n0", Tier.STANDARD, 0.0))
    _, changes, _ = feed_scores(policy, "n0", [0.99] * 48)
    assert changes == [] and policy.tier("n0") is Tier.STANDARD


def test_epoch_commits_a_sub_threshold_score_only_for_a_decided_low_score_slash() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("dipping", provider(1), "eu", "AS1", now=0.0)
    policy.register("sinking", provider(2), "eu", "AS1", now=0.0)
    policy.register("healthy", provider(3), "eu", "AS1", now=0.0)
    for hour in range(8):
        policy.observe_score("sinking", 0.2, hour * HOUR, EVIDENCE)
    slashes = policy.decide(9 * HOUR, BONDED).slashes
    assert [s.node_id for s in slashes] == ["sinking"]
    readings = {"dipping": (0.1, b"\x01" * 32), "sinking": (0.2, b"\x02" * 32),
                "healthy": (0.93, b"\x03" * 32)}
    entries = {e.provider: e for e in policy.epoch_entries(readings, slashes)}
    threshold_bps = 5_000  # StakeManager's default scoreThresholdBps
    assert entries[provider(1)].score_bps == threshold_bps  # a dip a finder cannot slash
    assert entries[provider(2)].score_bps == 2_000
    assert entries[provider(2)].telemetry_digest == b"\x02" * 32
    assert entries[provider(3)].score_bps == 9_300


def test_provider_leaf_is_its_lowest_node() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("a", provider(1), "eu", "AS1", now=0.0)
    policy.register("b", provider(1), "eu", "AS1", now=0.0)
    entries = policy.epoch_entries({"a": (0.9, b"\x0a" * 32), "b": (0.7, b"\x0b" * 32)}, [])
    assert [(e.score_bps, e.telemetry_digest) for e in entries] == [(7_000, b"\x0b" * 32)]


def test_background_node_is_not_slashed_again_for_low_score() -> None:
    policy = policy_with(1)
    _, changes, reasons = feed_scores(policy, "n0", [0.3] * 48)
    assert reasons == [SlashReason.LOW_SCORE]  # once, with the demotion
    assert [c.new for c in changes] == [Tier.BACKGROUND]


def test_departures_near_counts_each_group_within_the_window() -> None:
    policy = policy_with(10)
    policy.register("far", provider(99), "us", "AS2", now=0.0)
    for node, at in (("n0", 100.0), ("n1", 110.0), ("n2", 200.0), ("far", 111.0)):
        policy.node_departed(node, at)
    # n1's silence: n0 and n1 within 30 s in region "eu" and network AS1 (10 registered each).
    assert policy.departures_near("n1", 111.0, 30.0) == [(2, 10), (2, 10)]
    assert policy.departures_near("far", 111.0, 30.0) == [(1, 1), (1, 1)]
    assert policy.departures_near("n2", 200.0, 30.0) == [(1, 10), (1, 10)]
    with pytest.raises(ValueError):
        policy.departures_near("n2", 200.0, CONFIG.outage_window_s + 1.0)


def test_departures_near_counts_the_window_inclusively_and_refuses_a_bad_window() -> None:
    policy = policy_with(10)
    policy.register("far", provider(99), "us", "AS2", now=0.0)
    for node, at in (("n0", 100.0), ("n1", 130.0)):
        policy.node_departed(node, at)
    assert policy.departures_near("n1", 130.0, 30.0) == [(2, 10), (2, 10)]  # 100 is in
    assert policy.departures_near("far", 130.0, 30.0) == [(0, 1), (0, 1)]  # nobody there
    assert policy.departures_near("n1", 130.0, 0.5) == [(1, 10), (1, 10)]  # under a second
    assert policy.departures_near("n1", 130.0, CONFIG.outage_window_s) == [(2, 10), (2, 10)]
    for bad in (0.0, CONFIG.outage_window_s + 1.0):
        with pytest.raises(ValueError, match=r"^window_s must lie in \(0, outage_window_s\]$"):
            policy.departures_near("n1", 130.0, bad)


def test_a_slashed_provider_commits_just_under_the_threshold_and_ties_keep_the_first() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("a", provider(1), "eu", "AS1", now=0.0)
    policy.register("b", provider(1), "eu", "AS1", now=0.0)
    for hour in range(8):
        policy.observe_score("a", 0.45, hour * HOUR, EVIDENCE)
    slashes = policy.decide(9 * HOUR, BONDED).slashes
    # "a" was slashed: committed at 4,999, just under 5,000, whatever it reads now.
    entries = policy.epoch_entries({"a": (0.9, b"\x0a" * 32)}, slashes)
    assert [(e.score_bps, e.telemetry_digest) for e in entries] == [(4_999, b"\x0a" * 32)]
    tie = policy.epoch_entries({"a": (0.8, b"\x0a" * 32), "b": (0.8, b"\x0b" * 32)}, [])
    assert [(e.score_bps, e.telemetry_digest) for e in tie] == [(8_000, b"\x0a" * 32)]


def test_readings_decided_on_before_they_mature_still_count_later() -> None:
    policy = policy_with(1)
    for hour in range(8):
        policy.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    assert policy.decide(1.0, BONDED).slashes == ()  # nothing has matured yet
    assert [s.reason for s in policy.decide(9 * HOUR, BONDED).slashes] == [
        SlashReason.LOW_SCORE]  # no new event in between: the node stayed under watch


def test_a_score_of_exactly_promote_above_for_exactly_the_window_promotes() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=-100 * HOUR, tier=Tier.BACKGROUND)
    policy.handshake(verdict("n0", Tier.STANDARD, 0.0))
    _, changes, _ = feed_scores(policy, "n0", [CONFIG.promote_above] * 20)
    # Good from the reading at 0 h; the 12 h window is full at 12 h.
    assert [(c.new, c.at) for c in changes] == [(Tier.STANDARD, 12 * HOUR)]


def test_an_abrupt_departure_is_slashed_at_the_damage_done_never_past_the_collateral() -> None:
    policy = policy_with(10)
    value = 10**18
    damage = CONFIG.abandonment_damage(value, 0.25)  # a quarter redone, plus the base share
    assert damage == value * (CONFIG.abandonment_base_bps + 2_500) // 10_000
    policy.node_departed("n0", 100.0)
    policy.task_abandoned("n0", "cheap", 10**18, 100.0, EVIDENCE, damage=damage)
    policy.node_departed("n1", 100.0 + CONFIG.outage_window_s + 1)  # not one outage
    policy.task_abandoned("n1", "dear", damage // 2, 100.0 + CONFIG.outage_window_s + 1,
                          EVIDENCE, damage=damage)
    slashes = policy.decide(10_000.0, BONDED).slashes
    assert {(s.task_id, s.amount) for s in slashes} == {("cheap", damage), ("dear", damage // 2)}


def test_an_announced_departure_is_never_slashed() -> None:
    policy = policy_with(10)
    policy.node_departed("n0", 100.0)
    policy.task_abandoned("n0", "drained", 10**18, 100.0, EVIDENCE, announced=True)
    policy.task_abandoned("n0", "drained", 10**18, 200.0, EVIDENCE)  # reported again: settled
    assert decide_after_delay(policy, 200.0) == []


def test_abandonment_damage_refuses_a_share_outside_zero_to_one() -> None:
    with pytest.raises(ValueError, match="rework_share"):
        CONFIG.abandonment_damage(10**18, 1.5)


def test_high_tier_is_kept_while_the_node_is_away_and_judged_on_its_return() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=0.0, tier=Tier.HIGH)
    policy.handshake(verdict("n0", Tier.HIGH, 0.0, valid_s=2 * HOUR))
    policy.node_departed("n0", HOUR)
    assert policy.decide(5 * HOUR, BONDED).tier_changes == ()  # expired while away
    policy.node_returned("n0", 6 * HOUR)
    policy.handshake(verdict("n0", Tier.HIGH, 6 * HOUR))  # handshakes again on return
    _, changes, _ = feed_scores(policy, "n0", [0.6] * 4, start=6 * HOUR)
    assert changes == [] and policy.tier("n0") is Tier.HIGH
    returned_stale = StakingPolicy(CONFIG)
    returned_stale.register("n1", provider(1), "eu", "AS1", now=0.0, tier=Tier.HIGH)
    returned_stale.handshake(verdict("n1", Tier.HIGH, 0.0, valid_s=2 * HOUR))
    returned_stale.node_departed("n1", HOUR)
    returned_stale.node_returned("n1", 6 * HOUR)  # back without a fresh handshake
    _, changes, _ = feed_scores(returned_stale, "n1", [0.99] * 2, start=6 * HOUR)
    assert [(c.old, c.new) for c in changes] == [(Tier.HIGH, Tier.STANDARD)]


def test_an_outage_counts_the_share_of_the_nodes_that_were_online() -> None:
    """50 nodes in one network, 40 of them long gone (a volunteer grid at 20 % uptime): the 4
    online ones going silent together are an outage, though 4 is under 20 % of 50."""
    policy = policy_with(50)
    for i in range(10, 50):
        policy.node_departed(f"n{i}", 600.0 * i)  # left one by one, minutes apart
    start = 10 * HOUR
    for i in range(4):
        policy.node_departed(f"n{i}", start + 20.0 * i)
        policy.task_abandoned(f"n{i}", f"t{i}", 10**18, start + 20.0 * i, EVIDENCE)
    assert decide_after_delay(policy, start + 60.0) == []


def test_a_task_slashed_for_its_result_is_not_slashed_again_as_abandoned() -> None:
    """The node failed verification on t1, then left: t1 is settled, one slash in all."""
    policy = policy_with(10)
    policy.verification_failed("n0", "t1", 10**18, 50.0, EVIDENCE)
    assert [s.reason for s in policy.decide(51.0, BONDED).slashes] == [
        SlashReason.FAILED_VERIFICATION]
    policy.node_departed("n0", 100.0)
    policy.task_abandoned("n0", "t1", 10**18, 100.0, EVIDENCE)
    assert policy.pending_since("t1") is None
    assert decide_after_delay(policy, 100.0) == []


@pytest.mark.parametrize(("left_h", "back_h"), [(6.0, None), (6.0, 7.0), (4.0, 6.0)])
def test_a_reading_dated_at_either_end_of_an_absence_counts_as_taken_away(
        left_h: float, back_h: float | None) -> None:
    """Low readings at 0, 3 and 6 h would span the 6 h window; the one at 6 h falls on the
    DEAD verdict (node still away, or back at 7 h) or on the return, so it is ignored."""
    policy = policy_with(10)
    for hour in (0.0, 3.0):
        policy.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    if left_h == 6.0:
        policy.observe_score("n0", 0.2, 6 * HOUR, EVIDENCE)  # taken before the verdict came
    policy.node_departed("n0", left_h * HOUR)
    if back_h is not None:
        policy.node_returned("n0", back_h * HOUR)
    if left_h == 4.0:
        policy.observe_score("n0", 0.2, 6 * HOUR, EVIDENCE)  # dated at the return
    assert decide_after_delay(policy, 8 * HOUR) == []
    control = policy_with(10)  # the same readings with the node online throughout
    for hour in (0.0, 3.0, 6.0):
        control.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    assert decide_after_delay(control, 8 * HOUR) == [SlashReason.LOW_SCORE]


def test_a_reading_matures_exactly_the_decision_delay_after_it_was_taken() -> None:
    policy = policy_with(1)
    for hour in (0.0, 3.0, 6.0):
        policy.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    assert policy.decide(6 * HOUR + CONFIG.decision_delay_s - 1, BONDED).slashes == ()
    slashes = policy.decide(6 * HOUR + CONFIG.decision_delay_s, BONDED).slashes
    assert [s.reason for s in slashes] == [SlashReason.LOW_SCORE]


def test_a_score_exactly_at_the_demotion_threshold_is_not_low() -> None:
    policy = policy_with(1)
    _, changes, reasons = feed_scores(policy, "n0", [CONFIG.demote_below] * 24)
    assert reasons == [] and changes == []


def test_an_ignored_reading_does_not_hold_back_the_readings_after_it() -> None:
    """The reading at 0 h falls on a DEAD verdict; the node is back at 0.5 h and reads low at
    1, 4 and 7 h. One decision after they all matured slashes."""
    policy = policy_with(10)
    policy.observe_score("n0", 0.2, 0.0, EVIDENCE)
    policy.node_departed("n0", 0.0)
    policy.node_returned("n0", 0.5 * HOUR)
    for hour in (1.0, 4.0, 7.0):
        policy.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    assert decide_after_delay(policy, 7 * HOUR) == [SlashReason.LOW_SCORE]


def test_a_high_node_without_new_readings_still_loses_high_when_its_handshake_lapses() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=0.0, tier=Tier.HIGH)
    policy.handshake(verdict("n0", Tier.HIGH, 0.0, valid_s=2 * HOUR))
    assert policy.decide(HOUR, BONDED).tier_changes == ()
    assert policy.decide(3 * HOUR, BONDED).tier_changes == (
        TierChange("n0", Tier.HIGH, Tier.STANDARD, 3 * HOUR, "HIGH handshake expired"),)


def test_a_promotion_in_reach_comes_without_another_reading() -> None:
    """Good readings (0.8: not HIGH material) for 5 h, then none: the promotion window counts
    from the first, so the 12 h mark promotes on the decisions alone."""
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=-100 * HOUR, tier=Tier.BACKGROUND)
    policy.handshake(verdict("n0", Tier.STANDARD, 0.0))
    _, changes, _ = feed_scores(policy, "n0", [0.8] * 6)
    assert changes == []
    promoted = [c for hour in range(6, 14)
                for c in policy.decide(hour * HOUR, BONDED).tier_changes]
    assert [(c.old, c.new, c.at) for c in promoted] == [
        (Tier.BACKGROUND, Tier.STANDARD, 12 * HOUR)]


def standard_node_with(handshake: PopwVerdict) -> StakingPolicy:
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=-100 * HOUR)  # dwell long past
    policy.handshake(handshake)
    return policy


def test_a_score_of_exactly_high_above_for_the_window_promotes_to_high() -> None:
    policy = standard_node_with(verdict("n0", Tier.HIGH, 0.0))
    _, changes, _ = feed_scores(policy, "n0", [CONFIG.high_above] * 20)
    assert [(c.new, c.at) for c in changes] == [(Tier.HIGH, 12 * HOUR)]


def test_a_score_good_but_under_high_above_never_promotes_to_high() -> None:
    policy = standard_node_with(verdict("n0", Tier.HIGH, 0.0))
    _, changes, _ = feed_scores(policy, "n0", [0.8] * 30)
    assert changes == [] and policy.tier("n0") is Tier.STANDARD


def test_a_lapsed_handshake_promotes_nobody() -> None:
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=-100 * HOUR, tier=Tier.BACKGROUND)
    policy.handshake(verdict("n0", Tier.HIGH, 0.0, valid_s=HOUR))
    _, changes, _ = feed_scores(policy, "n0", [0.95] * 30)
    assert changes == [] and policy.tier("n0") is Tier.BACKGROUND


def test_the_promotion_window_counts_from_the_first_good_reading() -> None:
    """Good from 20 h on (low before): the 12 h window is full at 32 h, not sooner."""
    policy = StakingPolicy(CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=-100 * HOUR, tier=Tier.BACKGROUND)
    policy.handshake(verdict("n0", Tier.STANDARD, 0.0))
    end, changes, _ = feed_scores(policy, "n0", [0.6] * 20)
    assert end == 20 * HOUR and changes == []
    _, changes, _ = feed_scores(policy, "n0", [0.8] * 20, start=end)
    assert [(c.new, c.at) for c in changes] == [(Tier.STANDARD, 32 * HOUR)]


@pytest.mark.parametrize(("dated_after_s", "away_s", "slashed"), [
    (0.0, CONFIG.reconnect_grace_s / 2, False),  # a short cut, ten hours in
    (0.0, CONFIG.reconnect_grace_s, False),  # back exactly at the end of the grace
    (CONFIG.reconnect_grace_s, 60.0, False),  # abandonment dated a grace after the cut
    (CONFIG.reconnect_grace_s + 1.0, 60.0, True),  # ...or later: another matter
    (0.0, CONFIG.reconnect_grace_s + 1.0, True),
])
def test_a_partition_is_a_cut_shorter_than_the_grace_near_the_abandonment(
        dated_after_s: float, away_s: float, slashed: bool) -> None:
    policy = policy_with(10)
    left = 10 * HOUR
    policy.node_departed("n0", left)
    policy.task_abandoned("n0", "task", 10**18, left + dated_after_s, EVIDENCE)
    policy.node_returned("n0", left + away_s)
    assert decide_after_delay(policy, left + dated_after_s) == (
        [SlashReason.ABANDONMENT] if slashed else [])


def test_a_rolling_outage_excuses_its_first_departures_too() -> None:
    """16 of 20 nodes leave 100 s apart over 25 minutes, each holding a task: one outage
    from the first departure to the last, so nobody pays, the first included."""
    policy = policy_with(20)
    for i in range(16):
        at = 1_000.0 + 100.0 * i
        policy.node_departed(f"n{i}", at)
        policy.task_abandoned(f"n{i}", f"t{i}", 10**18, at, EVIDENCE)
    assert decide_after_delay(policy, 2_500.0) == []


def test_a_reading_outside_zero_to_one_or_without_a_digest_is_refused() -> None:
    policy = policy_with(1)
    with pytest.raises(ValueError, match=r"^RS 1.01 outside \[0, 1\]$"):
        policy.observe_score("n0", 1.01, 0.0, EVIDENCE)
    with pytest.raises(ValueError, match=r"^evidence must be a 32-byte digest$"):
        policy.observe_score("n0", 0.5, 0.0, EVIDENCE[:31])
    policy.observe_score("n0", 1.0, 0.0, EVIDENCE)  # the edge is a reading


def test_negative_collateral_or_damage_is_refused_and_zero_is_allowed() -> None:
    policy = policy_with(1)
    message = r"^collateral and damage must be >= 0$"
    with pytest.raises(ValueError, match=message):
        policy.task_abandoned("n0", "t1", -1, 0.0, EVIDENCE)
    with pytest.raises(ValueError, match=message):
        policy.task_abandoned("n0", "t2", 10**18, 0.0, EVIDENCE, damage=-1)
    policy.task_abandoned("n0", "t3", 0, 0.0, EVIDENCE, damage=0)
    assert policy.pending_since("t3") == 0.0


def test_abandonments_mature_on_their_own_dates_whatever_the_order_reported() -> None:
    """A lone grace held t-late's lease, so it was reported first yet dated later."""
    policy = policy_with(10)
    policy.node_departed("n0", 100.0)
    policy.node_departed("n1", 5_000.0)
    policy.task_abandoned("n1", "t-late", 10**18, 5_000.0, EVIDENCE)
    policy.task_abandoned("n0", "t-early", 10**18, 100.0, EVIDENCE)
    slashes = policy.decide(100.0 + CONFIG.decision_delay_s + 1, BONDED).slashes
    assert [s.task_id for s in slashes] == ["t-early"]


def test_an_excused_abandonment_does_not_hold_back_the_next_one() -> None:
    policy = policy_with(10)
    policy.node_departed("n0", 100.0)  # a short cut: excused
    policy.task_abandoned("n0", "t-cut", 10**18, 100.0, EVIDENCE)
    policy.node_returned("n0", 160.0)
    policy.node_departed("n1", 900.0)  # gone for good
    policy.task_abandoned("n1", "t-gone", 10**18, 900.0, EVIDENCE)
    slashes = policy.decide(900.0 + CONFIG.decision_delay_s + 1, BONDED).slashes
    assert [s.task_id for s in slashes] == ["t-gone"]


def test_a_decided_abandonment_reported_again_is_not_slashed_twice() -> None:
    policy = policy_with(10)
    policy.node_departed("n0", 100.0)
    policy.task_abandoned("n0", "t1", 10**18, 100.0, EVIDENCE)
    assert decide_after_delay(policy, 100.0) == [SlashReason.ABANDONMENT]
    policy.task_abandoned("n0", "t1", 10**18, 200.0, EVIDENCE)
    assert policy.pending_since("t1") is None
    assert decide_after_delay(policy, 200.0) == []


@pytest.mark.parametrize(("bonded", "share_bps", "amount"), [
    ({provider(0): 12_345}, 1_000, 1_234),  # rounded down to a whole token unit
    ({}, 1_000, 0),  # a provider with no bond on record
    ({}, 10_000, 0),
])
def test_a_low_score_slash_is_a_whole_share_of_the_bond(bonded: dict[str, int],
                                                        share_bps: int, amount: int) -> None:
    policy = StakingPolicy(SlashingConfig(low_score_share_bps=share_bps))
    policy.register("n0", provider(0), "eu", "AS1", now=0.0)
    for hour in (0.0, 3.0, 6.0):
        policy.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    (slash,) = policy.decide(7 * HOUR, bonded).slashes
    assert slash.amount == amount and isinstance(slash.amount, int)
    assert policy.tier("n0") is Tier.BACKGROUND


def departures_slashed(size: int, long_gone: int, together: list[float]) -> int:
    """Slashes among `together` departures (seconds from 10 h) in one group of `size` nodes,
    `long_gone` of which left hours before."""
    policy = policy_with(size)
    for i in range(long_gone):
        policy.node_departed(f"n{size - 1 - i}", 600.0 * i)
    start = 10 * HOUR
    for i, offset in enumerate(together):
        policy.node_departed(f"n{i}", start + offset)
        policy.task_abandoned(f"n{i}", f"t{i}", 10**18, start + offset, EVIDENCE)
    return len(decide_after_delay(policy, start + max(together)))


def test_the_outage_share_counts_exactly_the_nodes_present() -> None:
    # 3 of 16 at once: under 20 % (3.2 needed), so each pays.
    assert departures_slashed(16, 0, [0.0, 10.0, 20.0]) == 3
    # 20 in all, 4 long gone: 16 were there to go silent, 3 is under 20 %: each pays.
    assert departures_slashed(20, 4, [0.0, 10.0, 20.0]) == 3
    # 5 long gone: 15 were there, and 3 is exactly 20 % of them: an outage.
    assert departures_slashed(20, 5, [0.0, 10.0, 20.0]) == 0
    # Departures exactly one outage window apart are still one outage.
    assert departures_slashed(10, 0, [0.0, CONFIG.outage_window_s / 2,
                                      CONFIG.outage_window_s]) == 0


@pytest.mark.parametrize("outage_from", [
    6 * HOUR + CONFIG.outage_window_s,  # the reading exactly a margin before its start
    6 * HOUR + 250.0,  # within the margin of its first departure, not of its second
    6 * HOUR - 120.0 - CONFIG.outage_window_s,  # exactly a margin after its end
])
def test_readings_near_an_outage_are_excused_within_its_margin(outage_from: float) -> None:
    """Low readings at 0, 3 and 6 h; three other nodes of its network leave at `outage_from`
    + 0, 100 and 120 s (an outage). The 6 h reading is excused, so the streak falls short."""
    policy = policy_with(10)
    for hour in (0.0, 3.0, 6.0):
        policy.observe_score("n9", 0.2, hour * HOUR, EVIDENCE)
    for i, offset in enumerate((0.0, 100.0, 120.0)):
        policy.node_departed(f"n{i}", outage_from + offset)
    assert decide_after_delay(policy, 6 * HOUR) == []


def test_an_adopted_tier_starts_its_dwell_time_where_it_was_decided() -> None:
    """Another replica promoted the node to STANDARD at 10 h: HIGH comes 10 h later (the
    dwell), though the 2 h window of good readings from 10 h is full at 12 h."""
    policy = StakingPolicy(DWELL_CONFIG)
    policy.register("n0", provider(0), "eu", "AS1", now=-100 * HOUR, tier=Tier.BACKGROUND)
    policy.handshake(verdict("n0", Tier.HIGH, 0.0))
    policy.adopt_tier("n0", Tier.STANDARD, 10 * HOUR)
    assert policy.tier("n0") is Tier.STANDARD
    _, changes, _ = feed_scores(policy, "n0", [0.95] * 20, start=10 * HOUR)
    assert [(c.old, c.new, c.at) for c in changes] == [(Tier.STANDARD, Tier.HIGH, 20 * HOUR)]


def test_an_upheld_dispute_of_a_low_score_slash_restores_the_tier() -> None:
    policy = policy_with(1)
    for hour in (0.0, 3.0, 6.0):
        policy.observe_score("n0", 0.2, hour * HOUR, EVIDENCE)
    (slash,) = policy.decide(7 * HOUR, BONDED).slashes
    assert policy.tier("n0") is Tier.BACKGROUND
    change = policy.dispute_upheld(slash, 8 * HOUR)
    assert change == TierChange("n0", Tier.BACKGROUND, Tier.STANDARD, 8 * HOUR,
                                "slash overturned on dispute")


def test_a_duplicate_or_unknown_node_is_refused_by_name() -> None:
    policy = policy_with(1)
    with pytest.raises(ValueError, match=r"^node 'n0' already registered$"):
        policy.register("n0", provider(0), "eu", "AS1", now=0.0)
    with pytest.raises(KeyError, match=r"^\"unknown node 'zz'\"$"):
        policy.tier("zz")


def departures_after_returns(size: int, long_gone: int, returned: int) -> int:
    """Slashes among 3 departures within 20 s in one group of `size` nodes: `long_gone` left
    hours before for good, `returned` left and came back."""
    policy = policy_with(size)
    for i in range(long_gone):
        policy.node_departed(f"n{size - 1 - i}", 600.0 * i)
    for i in range(returned):
        node = f"n{size - 1 - long_gone - i}"
        policy.node_departed(node, HOUR + 600.0 * i)
        policy.node_returned(node, HOUR + 600.0 * i + 60.0)
    start = 10 * HOUR
    for i in range(3):
        policy.node_departed(f"n{i}", start + 10.0 * i)
        policy.task_abandoned(f"n{i}", f"t{i}", 10**18, start + 10.0 * i, EVIDENCE)
    return len(decide_after_delay(policy, start + 20.0))


def test_a_node_back_counts_as_present_again_for_the_outage_share() -> None:
    # 16 nodes, 5 of them away for a while and back: all 16 present, 3 is under 20 %.
    assert departures_after_returns(16, 0, 5) == 3
    # 20 nodes, 5 gone for good, 1 away and back: 15 present, 3 is exactly 20 %.
    assert departures_after_returns(20, 5, 1) == 0
