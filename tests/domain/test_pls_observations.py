"""The PLS observation codec: every kind survives a trip through JSON, field for field."""

from __future__ import annotations

import json

import pytest

from orchestrator.domain.pls_observations import (
    Abandoned,
    AttemptEnded,
    CheckpointCost,
    Departed,
    GpuReport,
    Handshake,
    Heartbeats,
    LoneHeld,
    NodeKnown,
    Observation,
    Probe,
    SessionEnded,
    SessionStarted,
    TierDecided,
    Upload,
    decode,
    encode,
)
from orchestrator.domain.popw import PopwReason, PopwVerdict
from orchestrator.domain.reliability import GpuSample
from orchestrator.domain.types import Tier

SAMPLE = GpuSample(at=12.5, temperature_c=71.0, sm_clock_mhz=2520.0, max_sm_clock_mhz=2640.0,
                   throttle_reasons=4, utilization_pct=98.0, memory_used_mb=20_000.0,
                   memory_total_mb=24_564.0, power_w=410.0, power_limit_w=450.0)

# One of each kind, with the name the log stores it under (an independent list: the log's
# rows written by earlier versions carry these names).
EXAMPLES: list[tuple[str, Observation]] = [
    ("node", NodeKnown("n1", "0x" + "ab" * 20, "eu-west", 10.0, int(Tier.STANDARD), "0xkey")),
    ("node", NodeKnown("n2", "0x" + "cd" * 20, "us-east", 11.0, int(Tier.HIGH), None)),
    ("session_started", SessionStarted("n1", 20.0)),
    ("session_ended", SessionEnded("n1", 30.0, abrupt=True)),
    ("departed", Departed(("n1", "n2"), 40.0)),
    ("abandoned", Abandoned("n1", 7, 10**21, 0.93, 50.0, value=10**18, rework_share=0.25,
                            announced=True)),
    ("abandoned", Abandoned("n1", 8, 0, None, 51.0)),
    ("lone_held", LoneHeld("n1", 9, 10**18, 0.5, 52.0, 10**17, 0.1)),
    ("heartbeats", Heartbeats((("n1", 60.0), ("n2", 61.5)))),
    ("probe", Probe("n1", 70.0, 12.5)),
    ("probe", Probe("n2", 71.0, None)),
    ("gpu", GpuReport("n1", (SAMPLE, SAMPLE))),
    ("upload", Upload("n1", 80.0, 250.0)),
    ("checkpoint_cost", CheckpointCost("n1", 4.5)),
    ("attempt_ended", AttemptEnded("n1", 7, "completed", 0.9, 10**18, 90.0)),
    ("attempt_ended", AttemptEnded("n1", 8, "failed_verification", None, 0, 91.0, "ab" * 32)),
    ("handshake", Handshake(PopwVerdict("n1", False, Tier.BACKGROUND, 100.0, 200.0,
                                        (PopwReason.LATE, PopwReason.THERMAL)))),
    ("handshake", Handshake(PopwVerdict("n2", True, Tier.HIGH, 100.0, 900.0, (), "rtx4090"))),
    ("tier", TierDecided("n1", int(Tier.BACKGROUND), 110.0)),
]


@pytest.mark.parametrize(("kind", "observation"), EXAMPLES)
def test_every_observation_survives_a_trip_through_json(kind: str,
                                                        observation: Observation) -> None:
    stored_kind, body = encode(observation)
    assert stored_kind == kind
    decoded = decode(stored_kind, json.loads(json.dumps(body)))
    assert decoded == observation
    assert type(decoded) is type(observation)
    for name in ("node_ids", "beats", "samples"):  # tuples, as the frozen types declare
        if hasattr(decoded, name):
            assert isinstance(getattr(decoded, name), tuple)
    if isinstance(decoded, Heartbeats):
        assert all(isinstance(beat, tuple) for beat in decoded.beats)
    if isinstance(decoded, Handshake):
        assert isinstance(decoded.verdict.reasons, tuple)
        assert type(decoded.verdict.tier) is Tier
        assert all(type(r) is PopwReason for r in decoded.verdict.reasons)


def test_every_kind_has_an_example() -> None:
    assert {kind for kind, _ in EXAMPLES} == {
        "node", "session_started", "session_ended", "departed", "abandoned", "lone_held",
        "heartbeats", "probe", "gpu", "upload", "checkpoint_cost", "attempt_ended",
        "handshake", "tier"}


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^unknown PLS observation kind 'nope'$"):
        decode("nope", {})


def test_a_handshake_logged_before_verdicts_named_their_class_still_decodes() -> None:
    kind, body = encode(Handshake(PopwVerdict("n2", True, Tier.HIGH, 100.0, 900.0, ())))
    del body["verdict"]["gpu_class"]
    decoded = decode(kind, body)
    assert isinstance(decoded, Handshake) and decoded.verdict.gpu_class is None
