"""The engine's accounting on hand-built worlds, and whole runs: determinism, the oracle bound,
and the `mesh bench churn --json` command end to end."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from typer.testing import CliRunner

from mesh.bench import churn
from mesh.cli import app
from mesh.simulation import world as world_module
from mesh.simulation.engine import (
    POLL_S,
    RESERVATION_TTL_S,
    Attempt,
    PolicyResult,
    Simulation,
    TaskState,
)
from mesh.simulation.jobs import Job
from mesh.simulation.models import TOKEN, NodeProfile
from mesh.simulation.policies import (
    FIXED_CHECKPOINT_S,
    ORACLE_HEAD,
    OraclePolicy,
    TaskView,
    Unobservant,
)
from mesh.simulation.traces import Session, TraceError
from mesh.simulation.world import Partition, World
from orchestrator.domain.types import NodeSpec, Priority, TaskNeeds, Tier
from orchestrator.scheduling.free_slots import Ranking
from orchestrator.services.pls_placement import Admission, QueuedTask


def profile(node_id: str, *, upload_mbps: float = 40.0) -> NodeProfile:
    """A reference GPU on a clean link: no partitions, no throttling, honest."""
    return NodeProfile(node_id=node_id, gpu="RTX 3090", vram_gb=24, speed=1.0, rtt_ms=30.0,
                       jitter_ms=2.0, loss=0.0, throttle_rate=0.0, upload_mbps=upload_mbps,
                       region="eu-west", network="eu-west/isp0", partition_rate_per_day=0.0,
                       cheater=False, stake=50 * TOKEN, price_per_gpu_hour=TOKEN // 2)


def spec(p: NodeProfile) -> NodeSpec:
    return NodeSpec(p.node_id, "0x" + "11" * 20, p.gpu, p.vram_gb, 8.6, p.region,
                    p.price_per_gpu_hour, 1, Tier.STANDARD)


class Prefer(Unobservant):
    """Test policy: always the named node when it is a candidate, else the first one; it keeps
    a silent node's lease for `hold_s`."""

    name = "prefer"

    def __init__(self, node: int, hold_s: float = 0.0) -> None:
        self.node = node
        self.hold_s = hold_s

    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        nodes = candidates.tolist()
        return Ranking([self.node] if self.node in nodes else nodes[:1], task.needs)

    def checkpoint_interval(self, node: int, task: TaskView, cost_s: float, now: float) -> float:
        return FIXED_CHECKPOINT_S

    def lease_hold_s(self, node: int, now: float) -> float:
        return self.hold_s


@pytest.fixture
def quiet_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background blips or outages: only what the test's trace says happens."""
    monkeypatch.setattr(world_module, "MISSED_HEARTBEAT_PER_DAY", 0.0)
    monkeypatch.setattr(world_module, "NETWORK_OUTAGES_PER_DAY", 0.0)
    monkeypatch.setattr(world_module, "REGION_OUTAGES_PER_DAY", 0.0)


def one_job(work_s: float) -> Job:
    return Job(job_id=0, kind="shot", arrival_s=60.0, deadline_s=60.0 + 10 * work_s,
               priority=Priority.NORMAL, min_vram_gb=8, task_work_s=(work_s,))


@pytest.mark.usefixtures("quiet_world")
def test_departure_loses_only_the_work_since_the_last_checkpoint() -> None:
    profiles = [profile("flaky"), profile("steady")]
    trace = {"flaky": [Session(0.0, 3_000.0)], "steady": [Session(0.0, math.inf)]}
    world = World(trace, {p.node_id: p for p in profiles}, 86_400.0, np.random.default_rng(0))
    sim = Simulation(world, profiles, [spec(p) for p in profiles], [one_job(6_000.0)],
                     Prefer(0), np.random.default_rng(0))
    result = sim.run()

    stall, lag = 2.0, 40.0 * 8.0 / 40.0  # snapshot; then 40 MB over 40 Mbit/s in background
    up = world.timelines["flaky"].up_at[0]
    started = up + math.ceil((60.0 - up) / POLL_S) * POLL_S  # the agent's next pull
    assert 60.0 < started <= 60.0 + POLL_S
    period = FIXED_CHECKPOINT_S + stall
    stalls = math.floor((3_000.0 - started) / period)
    durable = math.floor((3_000.0 - started - lag) / period)
    saved = durable * FIXED_CHECKPOINT_S
    assert result.reassignments == 1
    assert result.waste_lost_s == pytest.approx(3_000.0 - started - saved - stalls * stall)
    assert result.useful_s == pytest.approx(6_000.0)
    assert 0 in result.job_done_at
    # Paid per task delivered (`services.settlement.queue_settlement`): the node that left gets
    # nothing for its checkpoints; the one that delivers is paid for the whole task.
    assert result.earnings[0] == 0.0
    assert result.earnings[1] == pytest.approx(6_000.0 / 3600.0 * 0.5)


class Spy(Prefer):
    """Takes the first candidate (no node is named) and remembers what it was offered."""

    def __init__(self) -> None:
        super().__init__(node=-1)
        self.offered: list[set[int]] = []

    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        self.offered.append(set(candidates.tolist()))
        return super().rank(task, candidates, now)


class HoldBack(Prefer):
    """A gate that holds every task but `take` back until `until`, remembering when it was
    asked about which task."""

    def __init__(self, until: float, take: int = -1) -> None:
        super().__init__(node=-1)
        self.until = until
        self.take = take
        self.offers: list[tuple[float, int]] = []
        self.gate = self
        self.held_until = until

    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        nodes = super().rank(task, candidates, now).nodes
        return Ranking(nodes, task.needs, [Admission(1.0, 0)] * len(nodes))

    def covers(self, provider: str, amount: int, now: float) -> bool:
        return True

    def held_back(self, needs: TaskNeeds, admission: Admission, task: QueuedTask,
                  now: float) -> bool:
        assert isinstance(task, TaskView)
        self.offers.append((now, task.task_key))
        return now < self.until and task.task_key != self.take


@pytest.mark.usefixtures("quiet_world")
def test_a_task_held_back_is_offered_again_when_its_wait_ends() -> None:
    """Nothing else happens in this world after the job arrives: only the wake the policy
    asked for brings the task back, and it starts then."""
    profiles = [profile("only")]
    world = World({"only": [Session(0.0, math.inf)]}, {"only": profiles[0]}, 86_400.0,
                  np.random.default_rng(0))
    policy = HoldBack(until=1_000.0)
    sim = Simulation(world, profiles, [spec(p) for p in profiles], [one_job(600.0)], policy,
                     np.random.default_rng(0))
    result = sim.run()
    assert policy.offers == [(60.0, 0), (1_000.0, 0)]
    assert result.job_done_at[0] > 1_000.0 + 600.0


@pytest.mark.usefixtures("quiet_world")
def test_tasks_held_back_do_not_end_a_pass_before_the_queue_behind_them() -> None:
    """More tasks are held back than a pass tolerates failures in a row: the task behind
    them is still offered the idle node in the same pass."""
    profiles = [profile("only")]
    world = World({"only": [Session(0.0, math.inf)]}, {"only": profiles[0]}, 86_400.0,
                  np.random.default_rng(0))
    tasks = 40
    job = dataclasses.replace(one_job(600.0), task_work_s=(600.0,) * tasks)
    policy = HoldBack(until=50_000.0, take=tasks - 1)
    Simulation(world, profiles, [spec(p) for p in profiles], [job], policy,
               np.random.default_rng(0)).run()
    assert (60.0, tasks - 1) in policy.offers
    first_pass = [key for at, key in policy.offers if at == 60.0]
    assert first_pass[-1] == tasks - 1 and len(first_pass) == tasks


@pytest.mark.usefixtures("quiet_world")
def test_every_idle_eligible_node_is_a_candidate() -> None:
    """As the service's placement pass ranks every idle node: no sampling that could hide the
    best one."""
    profiles = [profile(f"n{i:03d}") for i in range(150)]
    small = dataclasses.replace(profiles[0], node_id="small", gpu="RTX 3060", vram_gb=4)
    profiles.append(small)
    trace = {p.node_id: [Session(0.0, math.inf)] for p in profiles}
    world = World(trace, {p.node_id: p for p in profiles}, 86_400.0, np.random.default_rng(0))
    spy = Spy()
    Simulation(world, profiles, [spec(p) for p in profiles], [one_job(600.0)], spy,
               np.random.default_rng(0)).run()
    assert spy.offered[0] == set(range(150))  # all but the node short of VRAM


def cut_off_at_the_pickup(end: float) -> tuple[Simulation, PolicyResult]:
    """Two nodes up all day; the preferred one's link is cut from 59.5 s to `end`, too short
    for the detector to call it, so the pass at the job's arrival (60 s) reserves it."""
    profiles = [profile("cut"), profile("steady")]
    trace = {p.node_id: [Session(0.0, math.inf)] for p in profiles}
    world = World(trace, {p.node_id: p for p in profiles}, 86_400.0, np.random.default_rng(0))
    timeline = world.timelines["cut"]
    timeline.partitions = [Partition(59.5, end, None)]
    timeline.index()
    sim = Simulation(world, profiles, [spec(p) for p in profiles], [one_job(600.0)],
                     Prefer(0), np.random.default_rng(0))
    return sim, sim.run()


@pytest.mark.usefixtures("quiet_world")
def test_a_reservation_not_started_in_time_is_a_failed_start_and_goes_elsewhere() -> None:
    """The service's timing: the cut-off node's agent cannot pull its reservation, which
    lapses after the service's reservation time to live; that is a failed start, the node
    gets no placement until heard from, and the next pass places the task on the other node,
    whose agent picks it up on its next pull."""
    sim, result = cut_off_at_the_pickup(60.0 + 2 * RESERVATION_TTL_S)
    assert result.failed_starts == 1
    (attempt,) = sim.attempts.values()
    assert attempt.node == 1
    assert 60.0 + RESERVATION_TTL_S < attempt.start <= 60.0 + RESERVATION_TTL_S + POLL_S
    assert 0 in result.job_done_at


@pytest.mark.usefixtures("quiet_world")
def test_a_reservation_is_picked_up_once_the_link_is_back_within_its_time_to_live() -> None:
    sim, result = cut_off_at_the_pickup(75.0)
    assert result.failed_starts == 0
    (attempt,) = sim.attempts.values()
    assert (attempt.node, attempt.start) == (0, 75.0)


@pytest.mark.usefixtures("quiet_world")
def test_a_restart_too_short_to_heartbeat_is_one_silence_to_the_detector() -> None:
    """The process is back two seconds after it left and dies again half a second later,
    before its first heartbeat: the detector hears nothing from 1,000 s to 5,000 s and calls
    the node dead once in between (it once took the restart as a reconnection and then never
    saw the node leave, so a lease placed on it stayed for hours)."""
    node = profile("blink")
    trace = {"blink": [Session(0.0, 1_000.0), Session(1_002.0, 1_002.5),
                       Session(5_000.0, math.inf)]}
    timeline = World(trace, {"blink": node}, 86_400.0, np.random.default_rng(0)).timelines["blink"]
    (down,) = timeline.down_at
    assert 1_000.0 < down < 1_100.0
    assert len(timeline.up_at) == 2 and 5_000.0 <= timeline.up_at[1] < 5_010.0


@pytest.mark.usefixtures("quiet_world")
def test_oracle_takes_the_fastest_honest_node_that_finishes_undisturbed() -> None:
    """Faster nodes that would leave first, or cheat, are passed over, even past the sorted
    head; among equally fast ones the first offered wins."""
    fast = [dataclasses.replace(profile(f"fast{i}"), speed=3.0) for i in range(ORACLE_HEAD + 1)]
    cheater = dataclasses.replace(profile("cheater"), speed=2.5, cheater=True)
    twins = [dataclasses.replace(profile(f"twin{i}"), speed=2.0) for i in range(2)]
    profiles = [*fast, cheater, *twins, profile("slow")]
    stayer = ORACLE_HEAD  # the one fast node that stays; the others leave at 1,000 s
    trace = {p.node_id: [Session(0.0, 1_000.0 if p in fast[:stayer] else math.inf)]
             for p in profiles}
    world = World(trace, {p.node_id: p for p in profiles}, 86_400.0, np.random.default_rng(0))
    oracle = OraclePolicy([world.timelines[p.node_id] for p in profiles],
                          [p.effective_speed for p in profiles], [p.cheater for p in profiles])
    task = TaskView(0, TaskNeeds(min_vram_gb=8, expected_duration_s=3_600.0), 3_600.0, 0.0,
                    86_400.0, np.ones(len(profiles), dtype=bool),
                    np.ones(len(profiles), dtype=bool))
    cheat, twin0, twin1, slow = range(stayer + 1, stayer + 5)

    def chosen(offered: list[int]) -> int:
        ranking = oracle.rank(task, np.array(offered, dtype=np.intp), 60.0)
        assert ranking.nodes
        return ranking.nodes[0]

    leaving = list(range(stayer))
    assert chosen([slow, twin1, *leaving, cheat, twin0, stayer]) == stayer  # tied, offered last
    assert chosen([slow, twin1, *leaving, cheat, twin0]) == twin1
    assert chosen([slow, *leaving, cheat]) == slow


def observe_one_gap(node_id: str, gap_s: float, seed: int) -> World:
    """A node online all day whose heartbeats are cut once, at 5,000 s, for `gap_s`."""
    trace = {node_id: [Session(0.0, math.inf)]}
    world = World(trace, {node_id: profile(node_id)}, 86_400.0, np.random.default_rng(0))
    world.detector.forget(node_id)
    timeline = world.timelines[node_id]
    timeline.up_at.clear()
    timeline.down_at.clear()
    timeline.partitions.clear()
    world._observe(node_id, world.profiles[node_id], timeline, [(5_000.0, 5_000.0 + gap_s)],
                   np.random.default_rng(seed))
    timeline.index()
    return world


@pytest.mark.usefixtures("quiet_world")
@pytest.mark.parametrize("seed", range(8))  # each seed puts the heartbeat timer elsewhere
def test_one_missed_heartbeat_is_never_a_departure(seed: int) -> None:
    timeline = observe_one_gap("blip", 5.0, seed).timelines["blip"]
    assert timeline.down_at == []
    assert timeline.partitions[0].dead_at is None


@pytest.mark.usefixtures("quiet_world")
def test_long_partition_is_a_departure_and_the_node_is_seen_back() -> None:
    timeline = observe_one_gap("cut", 300.0, 1).timelines["cut"]
    cut = timeline.partitions[0]
    assert cut.dead_at is not None and 5_000.0 < cut.dead_at < 5_060.0
    assert timeline.down_at == [cut.dead_at]
    assert len(timeline.up_at) == 2 and timeline.up_at[1] >= 5_300.0  # first sight, then back


def test_attempt_progress_counts_finished_checkpoints_only() -> None:
    task = TaskState(0, one_job(10_000.0), 10_000.0, None)  # type: ignore[arg-type]
    attempt = Attempt(task=task, node=0, start=100.0, speed=2.0, interval_s=600.0, cost_s=10.0,
                      durable_lag_s=30.0, compute_s=5_000.0, upload_s=5.0, resends=0,
                      predicted=None, attempt_id=0)
    saved, overhead, consumed = attempt.progress(100.0 + 2 * 610.0 + 300.0)
    assert saved == pytest.approx(2 * 600.0 * 2.0)
    assert overhead == pytest.approx(2 * 10.0 * 2.0)
    assert consumed == pytest.approx((2 * 610.0 + 300.0) * 2.0)
    # A departure 20 s after the second snapshot: its upload has not landed yet.
    saved, overhead, _ = attempt.progress(100.0 + 2 * 610.0 + 20.0)
    assert saved == pytest.approx(1 * 600.0 * 2.0)
    assert overhead == pytest.approx(2 * 10.0 * 2.0)
    assert attempt.checkpoints == 8  # ceil(5000 / 600) - 1: no checkpoint right at the end


def small_run(seed: int, **overrides: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"nodes": 120, "days": 1.5, "jobs": 60, "seed": seed}
    options.update(overrides)
    return churn.run(**options)


def without_wall(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k != "wall_s"}


def test_same_seed_gives_identical_report_apart_from_wall_time() -> None:
    first, second = small_run(5), small_run(5)
    assert json.dumps(without_wall(first), sort_keys=True) == json.dumps(
        without_wall(second), sort_keys=True)
    assert without_wall(small_run(6)) != without_wall(first)


@pytest.mark.parametrize("seed", [1, 2])
def test_oracle_goodput_is_at_least_every_other_policy(seed: int) -> None:
    policies = small_run(seed)["policies"]
    oracle = policies["oracle"]["goodput"]
    for name in ("random", "uptime", "pls"):
        assert oracle >= policies[name]["goodput"], name
    assert set(policies) == {"random", "uptime", "pls", "oracle"}


REPORT_KEYS = {"useful_gpu_s", "wasted_gpu_s", "waste_ratio", "jobs_completed", "jobs_on_time",
               "p50_completion_s", "p99_completion_s", "reassignments", "slashes",
               "false_slash_rate", "stable_vs_flaky_earnings_ratio", "brier", "ece",
               "net_earnings_per_gpu_hour", "waste_vs_oracle"}


def test_mesh_bench_churn_json_end_to_end_with_trace_profiles_and_plots(tmp_path: Path
                                                                       ) -> None:
    trace = tmp_path / "trace.csv"
    profiles = tmp_path / "profiles.csv"
    rows = ["node_id,online_at,offline_at"]
    gpus = ["node_id,gpu,vram_gb,rtt_ms,jitter_ms,loss,throttle_rate"]
    for i in range(30):
        rows.append(f"n{i},0,{20_000 + 3_000 * i}")
        rows.append(f"n{i},{30_000 + 3_000 * i},")
        gpus.append(f"n{i},{'RTX 4090' if i % 2 else 'RTX 3060'},{24 if i % 2 else 12},"
                    f"40,{5 + i},0.001,0.1")
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    profiles.write_text("\n".join(gpus) + "\n", encoding="utf-8")
    plots = tmp_path / "plots"
    outcome = CliRunner().invoke(app, ["bench", "churn", "--json", "--trace", str(trace),
                                       "--profiles", str(profiles), "--days", "1",
                                       "--jobs", "20", "--seed", "3", "--plots", str(plots)])
    assert outcome.exit_code == 0, outcome.output
    report = json.loads(outcome.output)
    assert report["nodes"] == 30 and report["seed"] == 3 and report["days"] == 1.0
    for name in ("random", "uptime", "pls", "oracle"):
        assert set(report["policies"][name]) >= REPORT_KEYS
    assert report["policies"]["oracle"]["waste_vs_oracle"] == 1.0
    assert set(report["policies"]["pls"]["net_earnings_per_gpu_hour"]) == {
        "stable", "middle", "flaky"}
    assert report["policies"]["random"]["brier"] is None
    assert report["policies"]["pls"]["brier"] is not None
    assert sorted(p.name for p in plots.glob("*.png")) == [
        "calibration.png", "completion_cdf.png", "waste.png"]


def test_mesh_bench_churn_refuses_a_trace_node_without_a_profile(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("node_id,online_at,offline_at\na,0,\nb,0,\n", encoding="utf-8")
    profiles = tmp_path / "profiles.csv"
    profiles.write_text("node_id,gpu,vram_gb,rtt_ms,jitter_ms,loss,throttle_rate\n"
                        "a,RTX 3090,24,30,2,0,0\n", encoding="utf-8")
    with pytest.raises(TraceError, match="no profile for 1 trace node"):
        churn.run(trace=trace, profiles=profiles, days=1, jobs=5)


def test_mesh_bench_churn_reports_a_bad_trace_clearly(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("node_id,online_at,offline_at\na,5,2\n", encoding="utf-8")
    outcome = CliRunner().invoke(app, ["bench", "churn", "--json", "--trace", str(trace)])
    assert outcome.exit_code == 2
    assert "is not after online_at" in outcome.output
    assert "Traceback" not in outcome.output
