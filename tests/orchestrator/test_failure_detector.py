from __future__ import annotations

import time

import pytest

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


def test_sweep_of_ten_thousand_nodes_is_fast() -> None:
    detector = PhiAccrualDetector(CFG)
    for beat in range(5):
        for i in range(10_000):
            detector.heartbeat(f"n{i}", float(beat))
    started = time.perf_counter()
    verdicts = detector.sweep(200.0)
    assert time.perf_counter() - started < 1.0
    assert len(verdicts) == 10_000 and set(verdicts.values()) == {NodeHealth.DEAD}
