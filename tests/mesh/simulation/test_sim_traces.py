"""Trace and profile CSV validation, and generated traces against the published models."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from mesh.simulation.models import HOUR_S, load_availability_models
from mesh.simulation.traces import (
    TraceError,
    generate_sessions,
    parse_profiles_csv,
    parse_trace_csv,
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_parse_trace_reads_sessions_sorted_and_open_ended(tmp_path: Path) -> None:
    path = write(tmp_path, "node_id,online_at,offline_at\n"
                           "a,100,200\n"
                           "a,0,50\n"
                           "b,10,\n")
    trace = parse_trace_csv(path)
    assert [(s.online_at, s.offline_at) for s in trace["a"]] == [(0.0, 50.0), (100.0, 200.0)]
    assert trace["b"][0].offline_at == math.inf


@pytest.mark.parametrize(("body", "message"), [
    ("node,online_at,offline_at\na,0,1\n", "header must be"),
    ("node_id,online_at,offline_at\na,zero,1\n", ":2: online_at must be a number"),
    ("node_id,online_at,offline_at\na,0,1\nb,-5,3\n", ":3: times must not be negative"),
    ("node_id,online_at,offline_at\na,10,5\n", "is not after online_at"),
    ("node_id,online_at,offline_at\na,0\n", "expected 3 fields"),
    ("node_id,online_at,offline_at\n,0,5\n", "node_id is empty"),
    ("node_id,online_at,offline_at\na,0,100\na,50,150\n", "overlapping sessions"),
    ("node_id,online_at,offline_at\na,0,\na,50,60\n", "overlapping sessions"),
    ("node_id,online_at,offline_at\n", "no sessions"),
    ("node_id,online_at,offline_at\na,0,inf\n", "must be finite"),
])
def test_parse_trace_refuses_bad_input_with_line_and_reason(
        tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace_csv(write(tmp_path, body))


def test_parse_trace_accepts_back_to_back_sessions(tmp_path: Path) -> None:
    trace = parse_trace_csv(write(tmp_path, "node_id,online_at,offline_at\na,0,10\na,10,20\n"))
    assert len(trace["a"]) == 2


def test_parse_profiles_keeps_given_fields_and_refuses_unknown_gpu(tmp_path: Path) -> None:
    header = "node_id,gpu,vram_gb,rtt_ms,jitter_ms,loss,throttle_rate\n"
    good = write(tmp_path, header + "a,RTX 4090,24,35,3.5,0.001,0.1\n", "p.csv")
    profile = parse_profiles_csv(good, np.random.default_rng(0))["a"]
    assert (profile.gpu, profile.vram_gb, profile.rtt_ms, profile.loss) == ("RTX 4090", 24, 35.0,
                                                                            0.001)
    assert profile.speed > 1.0
    bad = write(tmp_path, header + "a,Voodoo 2,12,35,3.5,0.001,0.1\n", "bad.csv")
    with pytest.raises(TraceError, match="unknown gpu 'Voodoo 2'"):
        parse_profiles_csv(bad, np.random.default_rng(0))
    lossy = write(tmp_path, header + "a,RTX 4090,24,35,3.5,1.5,0.1\n", "lossy.csv")
    with pytest.raises(TraceError, match="loss must be in"):
        parse_profiles_csv(lossy, np.random.default_rng(0))


@pytest.mark.parametrize("cluster", ["seti-cluster-2", "seti-cluster-6"])
def test_generated_sessions_match_the_models_mean_on_time(cluster: str) -> None:
    model = load_availability_models()[cluster]
    horizon = 20_000 * model.availability.mean_hours() * HOUR_S
    sessions = generate_sessions(model, np.random.default_rng(7), horizon, warmup_s=0.0)
    closed = [s.offline_at - s.online_at for s in sessions[1:] if math.isfinite(s.offline_at)]
    mean_h = float(np.mean(closed)) / HOUR_S
    assert len(closed) > 5_000
    assert mean_h == pytest.approx(model.availability.mean_hours(), rel=0.1)


def test_generated_sessions_never_overlap_and_stay_inside_the_horizon() -> None:
    model = load_availability_models()["seti-cluster-6"]
    horizon = 7 * 24 * HOUR_S
    sessions = generate_sessions(model, np.random.default_rng(3), horizon)
    for before, after in itertools.pairwise(sessions):
        assert before.offline_at <= after.online_at
    assert all(0.0 <= s.online_at < horizon for s in sessions)


def test_availability_models_keep_their_source_citation() -> None:
    from importlib import resources

    text = resources.files("mesh.simulation").joinpath(
        "data/availability_models.json").read_text(encoding="utf-8")
    assert "Javadi" in text and "ComBoS" in text
    assert all(m.availability.params["shape"] < 1 for m in load_availability_models().values())


def test_high_churn_populations_have_many_short_sessions_per_host() -> None:
    """`mesh bench churn --population`: the high-churn ones see a host online about ten times
    a week, several times the SETI mix, and each host keeps its own pace."""
    from mesh.bench import churn

    weekly: dict[str, float] = {}
    for name in ("seti", "homes", "evenings-mix"):
        trace, _ = churn.build_inputs(None, None, 300, 7 * 86_400.0, churn._streams(5), name)
        weekly[name] = float(np.mean([len(sessions) for sessions in trace.values()]))
    assert weekly["seti"] < 6.0
    assert 8.0 < weekly["homes"] < 20.0 and 8.0 < weekly["evenings-mix"] < 20.0
    with pytest.raises(TraceError, match="unknown --population"):
        churn.build_inputs(None, None, 10, 86_400.0, churn._streams(5), "nowhere")
