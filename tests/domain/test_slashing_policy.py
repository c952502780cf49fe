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
    assert policy.decide(100.0 + CONFIG.decision_delay_s / 2, BONDED).slashes == ()
    decided_at = 100.0 + CONFIG.decision_delay_s + 1
    slashes = policy.decide(decided_at, BONDED).slashes
    assert len(slashes) == 1
    slash = slashes[0]
    assert slash == SlashDecision("n3", provider(3), SlashReason.ABANDONMENT, 5 * 10**17,
                                  EVIDENCE, decided_at, decided_at + 3 * 86_400.0, "task-7",
                                  "departed holding the task")
    assert len(slash.slash_id) == 32
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
        with pytest.raises(ValueError, match=r"window_s must lie in \(0, outage_window_s\]"):
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
