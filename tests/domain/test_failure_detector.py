from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from orchestrator.domain.failure_detector import DetectorConfig, PhiAccrualDetector
from orchestrator.domain.types import NodeHealth

CFG = DetectorConfig(grace_s=10.0)


def steady(detector: PhiAccrualDetector, node_id: str, until: float, every: float = 1.0) -> float:
    now = 0.0
    while now <= until:
        detector.heartbeat(node_id, now)
        now += every
    return now - every


def test_regular_node_is_alive_between_heartbeats() -> None:
    detector = PhiAccrualDetector(CFG)
    last = steady(detector, "n", 60)
    assert detector.health("n", last + 1.0) is NodeHealth.ALIVE


def test_phi_grows_with_silence_and_passes_suspect_before_dead() -> None:
    detector = PhiAccrualDetector(CFG)
    last = steady(detector, "n", 60)
    phis = [detector.phi("n", last + gap) for gap in (1, 3, 4, 5, 10)]
    assert phis == sorted(phis) and phis[-1] > phis[0]
    verdicts = [detector.health("n", last + gap) for gap in range(1, 30)]
    first_suspect = verdicts.index(NodeHealth.SUSPECT)
    first_dead = verdicts.index(NodeHealth.DEAD)
    assert first_suspect < first_dead


def test_jittery_node_gets_more_slack_than_a_regular_one() -> None:
    regular, jittery = PhiAccrualDetector(CFG), PhiAccrualDetector(CFG)
    steady(regular, "n", 100)
    now = 0.0
    for i in range(100):
        jittery.heartbeat("n", now)
        now += 0.2 if i % 2 else 1.8  # same mean (1 s), wide spread
    last = now - 0.2
    assert jittery.phi("n", last + 4.0) < regular.phi("n", 100.0 + 4.0)


def test_grace_period_keeps_a_new_node_from_being_called_dead() -> None:
    detector = PhiAccrualDetector(DetectorConfig(grace_s=60.0))
    detector.heartbeat("n", 0.0)
    assert detector.health("n", 30.0) is NodeHealth.SUSPECT
    assert detector.health("n", 61.0) is NodeHealth.DEAD


def test_node_back_from_the_dead_is_alive_with_a_fresh_history() -> None:
    detector = PhiAccrualDetector(CFG)
    last = steady(detector, "n", 60)
    assert detector.health("n", last + 100) is NodeHealth.DEAD
    detector.heartbeat("n", last + 100)
    detector.heartbeat("n", last + 101)
    assert detector.health("n", last + 101.5) is NodeHealth.ALIVE


def test_node_back_from_the_dead_is_judged_exactly_like_a_newcomer() -> None:
    """The outage is no inter-arrival time and the old history is gone: a detector that
    only ever saw the heartbeats since the return gives the same phi and verdicts."""
    detector, newcomer = PhiAccrualDetector(CFG), PhiAccrualDetector(CFG)
    last = steady(detector, "n", 60)
    back = last + 100
    assert detector.health("n", back) is NodeHealth.DEAD
    for at in (back, back + 1, back + 2):
        detector.heartbeat("n", at)
        newcomer.heartbeat("n", at)
    for gap in (0.5, 2.0, 3.0, 4.0, 6.0, 20.0):
        assert detector.phi("n", back + 2 + gap) == pytest.approx(newcomer.phi("n", back + 2 + gap))
        assert detector.health("n", back + 2 + gap) is newcomer.health("n", back + 2 + gap)


def test_node_back_from_the_dead_gets_a_fresh_grace_period() -> None:
    detector = PhiAccrualDetector(CFG)  # grace 10 s
    last = steady(detector, "n", 60)
    back = last + 100
    detector.heartbeat("n", back)
    detector.heartbeat("n", back + 1)  # one 1 s interval: phi is far past dead 8 s later
    assert detector.phi("n", back + 9.5) >= CFG.dead_phi
    assert detector.health("n", back + 9.5) is NodeHealth.SUSPECT  # inside the new grace
    assert detector.health("n", back + CFG.grace_s) is NodeHealth.DEAD


def test_draining_node_takes_no_new_work_but_stays_alive() -> None:
    detector = PhiAccrualDetector(CFG)
    steady(detector, "n", 10)
    detector.drain("n")
    assert detector.health("n", 10.5) is NodeHealth.ALIVE
    assert not detector.accepts_work("n", 10.5)
    detector.undrain("n")
    assert detector.accepts_work("n", 10.5)


def test_unknown_node_is_an_error_naming_it() -> None:
    with pytest.raises(KeyError, match="ghost"):
        PhiAccrualDetector().phi("ghost", 0.0)
    with pytest.raises(KeyError, match="ghost"):
        PhiAccrualDetector().health("ghost", 0.0)


def test_forgotten_node_leaves_no_history_or_drain_behind() -> None:
    detector = PhiAccrualDetector(CFG)
    steady(detector, "n", 10)
    steady(detector, "other", 10)
    detector.drain("n")
    assert "n" in detector and len(detector) == 2 and detector.is_draining("n")
    assert not detector.is_draining("other")
    detector.forget("n")
    assert "n" not in detector and "other" in detector and len(detector) == 1
    assert not detector.is_draining("n")
    assert not detector.accepts_work("n", 10.5)  # unknown: no work, and no error
    detector.heartbeat("n", 100.0)  # a new node with the same id starts from scratch
    newcomer = PhiAccrualDetector(CFG)
    newcomer.heartbeat("n", 100.0)
    assert detector.phi("n", 109.0) == newcomer.phi("n", 109.0)
    assert detector.accepts_work("n", 100.5)


def test_sweep_judges_every_one_of_ten_thousand_nodes() -> None:
    """The sweep's speed is a benchmark's business; here, that it judges every node."""
    detector = PhiAccrualDetector(CFG)
    for beat in range(5):
        for i in range(10_000):
            detector.heartbeat(f"n{i}", float(beat))
    verdicts = detector.sweep(200.0)
    assert len(verdicts) == 10_000 and set(verdicts.values()) == {NodeHealth.DEAD}


# ----- phi against hand-computed values ------------------------------------------------------
# phi = -log10 P(Z > (now - last - acceptable_pause - mean) / std) for the node's intervals;
# the reference tail is scipy's, an implementation independent of the detector's own.
def reference_phi(elapsed_since_last: float, mean: float, std: float,
                  pause: float = 2.0) -> float:
    x = (elapsed_since_last - pause - mean) / std
    return max(-float(norm.logsf(x)) / math.log(10.0), 0.0)


def beats(detector: PhiAccrualDetector, times: list[float], node_id: str = "n") -> None:
    for at in times:
        detector.heartbeat(node_id, at)


def test_phi_of_a_regular_node_uses_the_spread_floor() -> None:
    detector = PhiAccrualDetector(CFG)
    beats(detector, [float(t) for t in range(11)])  # ten 1 s intervals: spread 0, floored 0.5
    assert detector.phi("n", 10 + 4.5) == pytest.approx(2.869_68, abs=1e-4)  # P(Z > 3)
    assert detector.phi("n", 10 + 2.5) == pytest.approx(0.075_03, abs=1e-4)  # P(Z > -1)
    for gap in (0.5, 2.0, 3.0, 4.0, 4.4):
        assert detector.phi("n", 10 + gap) == pytest.approx(reference_phi(gap, 1.0, 0.5),
                                                            rel=1e-9, abs=1e-12)


def test_phi_far_in_the_tail_follows_the_normal_tail() -> None:
    detector = PhiAccrualDetector(CFG)
    beats(detector, [float(t) for t in range(11)])
    for x in (5.0, 6.0, 8.0, 12.0, 40.0):  # the asymptotic branch: within 1/x^2 of the truth
        gap = 2.0 + 1.0 + 0.5 * x
        assert detector.phi("n", 10 + gap) == pytest.approx(reference_phi(gap, 1.0, 0.5),
                                                            abs=0.02)
    assert detector.phi("n", 10 + 2.0 + 1.0 + 0.5 * 6.0) == pytest.approx(9.006, abs=0.02)


def test_phi_reads_the_mean_and_spread_of_a_jittery_node() -> None:
    detector = PhiAccrualDetector(CFG)
    beats(detector, [0.0, 1.0, 4.0, 5.0, 8.0, 9.0, 12.0])  # intervals 1, 3, ...: mean 2, std 1
    assert detector.phi("n", 12 + 6.0) == pytest.approx(1.642_96, abs=1e-4)  # P(Z > 2)
    for gap in (1.0, 3.0, 4.5, 7.0):
        assert detector.phi("n", 12 + gap) == pytest.approx(reference_phi(gap, 2.0, 1.0),
                                                            rel=1e-9, abs=1e-12)


def test_a_node_without_intervals_is_judged_by_the_assumed_first_interval() -> None:
    detector = PhiAccrualDetector(CFG)  # first interval 5 s, spread a quarter of it
    detector.heartbeat("n", 100.0)
    assert detector.phi("n", 100.0 + 2.0 + 5.0 + 2.5) == pytest.approx(1.642_96, abs=1e-4)
    assert detector.phi("n", 100.0 + 1.0) == pytest.approx(reference_phi(1.0, 5.0, 1.25),
                                                           rel=1e-6)


def test_only_the_latest_window_of_intervals_counts() -> None:
    short, long = (PhiAccrualDetector(DetectorConfig(grace_s=10.0, window=w)) for w in (3, 4))
    times = [0.0, 10.0, 11.0, 12.0, 13.0]  # a 10 s gap, then three 1 s intervals
    beats(short, times)
    beats(long, times)
    # Window 3: the gap has fallen out: mean 1, spread floored to 0.5.
    assert short.phi("n", 13 + 4.5) == pytest.approx(reference_phi(4.5, 1.0, 0.5), rel=1e-9)
    # Window 4 keeps it: mean 3.25, std sqrt(103 / 4 - 3.25^2).
    std = math.sqrt(103 / 4 - 3.25**2)
    assert long.phi("n", 13 + 4.5) == pytest.approx(reference_phi(4.5, 3.25, std), rel=1e-9)
    for at in (14.0, 15.0, 16.0):  # the window keeps sliding
        short.heartbeat("n", at)
    assert short.phi("n", 16 + 4.5) == pytest.approx(reference_phi(4.5, 1.0, 0.5), rel=1e-9)


def test_duplicate_and_reordered_heartbeats_change_nothing() -> None:
    detector, clean = PhiAccrualDetector(CFG), PhiAccrualDetector(CFG)
    beats(detector, [0.0, 1.0, 1.0, 2.0, 1.5, 3.0])
    beats(clean, [0.0, 1.0, 2.0, 3.0])
    for gap in (1.0, 3.0, 4.0):
        assert detector.phi("n", 3 + gap) == clean.phi("n", 3 + gap)


def test_health_changes_exactly_at_the_thresholds() -> None:
    probe = PhiAccrualDetector(CFG)
    beats(probe, [float(t) for t in range(11)])
    at_suspect, at_dead = probe.phi("n", 14.0), probe.phi("n", 16.0)
    config = DetectorConfig(suspect_phi=at_suspect, dead_phi=at_dead, grace_s=0.0)
    detector = PhiAccrualDetector(config)
    beats(detector, [float(t) for t in range(11)])
    assert detector.health("n", 13.99) is NodeHealth.ALIVE
    assert detector.health("n", 14.0) is NodeHealth.SUSPECT  # at the threshold
    assert detector.health("n", 15.99) is NodeHealth.SUSPECT
    assert detector.health("n", 16.0) is NodeHealth.DEAD
    assert not detector.accepts_work("n", 14.0)  # a suspect takes no new work
    assert detector.accepts_work("n", 13.99)


def test_a_sweep_reports_the_suspect_and_the_dead_but_not_the_alive() -> None:
    detector = PhiAccrualDetector(CFG)
    steady(detector, "alive", 40)
    steady(detector, "quiet", 35)
    steady(detector, "gone", 20)
    assert detector.sweep(40.5) == {"quiet": NodeHealth.SUSPECT, "gone": NodeHealth.DEAD}


def test_forgetting_a_node_never_seen_is_no_error() -> None:
    detector = PhiAccrualDetector(CFG)
    detector.forget("ghost")
    assert len(detector) == 0 and "ghost" not in detector


def test_a_heartbeat_exactly_at_the_dead_threshold_starts_a_fresh_session() -> None:
    probe = PhiAccrualDetector(CFG)
    beats(probe, [float(t) for t in range(11)])
    detector = PhiAccrualDetector(DetectorConfig(grace_s=10.0, dead_phi=probe.phi("n", 20.0)))
    beats(detector, [float(t) for t in range(11)])
    detector.heartbeat("n", 20.0)  # phi is exactly dead_phi: back from the dead
    newcomer = PhiAccrualDetector(detector.config)
    newcomer.heartbeat("n", 20.0)
    assert detector.phi("n", 27.0) == newcomer.phi("n", 27.0)
