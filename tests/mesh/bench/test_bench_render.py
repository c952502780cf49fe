"""`mesh bench render` at toy scale: the documented keys, identical pixels, rework of at most
one chunk, a stage breakdown (the full-scale numbers come from `mesh bench render --json`);
and the breakdown read from a service's record of times."""

from __future__ import annotations

import pytest

from mesh.bench import render
from orchestrator.db.history import JobTimes
from orchestrator.db.models import Checkpoint, Lease, StatusHistory, Task, VerificationCheck

JOB = "0x" + "ab" * 32


def moves(entity: str, entity_id: str, *steps: tuple[str, float]) -> list[StatusHistory]:
    return [StatusHistory(entity=entity, entity_id=entity_id, to_status=status, at=at)
            for status, at in steps]


def test_stage_times_split_each_task_between_ready_and_done_from_the_records() -> None:
    tasks = [Task(id=1, job_id=JOB, created_at=0.0), Task(id=2, job_id=JOB, created_at=0.0)]
    leases = [Lease(task_id=1, node_id="n1", created_at=1.0, release_reason="completed"),
              Lease(task_id=2, node_id="n2", created_at=1.0, release_reason="lease lapsed"),
              Lease(task_id=2, node_id="n1", created_at=8.0, release_reason="completed")]
    points = [Checkpoint(task_id=1, created_at=at, is_result=False) for at in (4.0, 6.5)]
    points += [Checkpoint(task_id=2, created_at=at, is_result=False) for at in (9.1, 10.1)]
    points += [Checkpoint(task_id=1, created_at=7.0, is_result=True)]
    check = VerificationCheck(id=7, checker_node="n1", done_at=7.8)
    history = [*moves("job", JOB, ("funded", 0.0), ("settling", 12.0)),
               *moves("task", "1", ("reserved", 1.0), ("running", 1.5), ("done", 7.0),
                      ("verified", 9.0)),
               *moves("task", "2", ("reserved", 1.0), ("running", 1.2), ("retry", 3.0),
                      ("reserved", 8.0), ("running", 8.1), ("done", 10.2)),
               *moves("check", "7", ("leased", 7.3))]
    times = JobTimes(tasks=tasks, moves=history, leases=leases, checkpoints=points,
                     checks=[check])

    found = render.stage_times(times, {("n1", 1): [2.0, 2.2], ("n1", 2): [0.9, 0.95],
                                       ("n2", 2): [1.7]})  # n2 lost its lease of task 2

    assert found["tasks"] == 2 and found["render_s"] == pytest.approx(6.05)
    assert found["stages_s"] == pytest.approx({
        "placement": 1.0 + 5.0,  # task 2 waited from its retry at 3.0, not its creation
        "pull_to_start": 0.5 + 0.1,
        "start_and_checkpoints": (6.5 - 1.5 - 4.2) + (10.1 - 8.1 - 1.85),
        "delivery": 0.5 + 0.1,
        "between_tasks": 1.0 - 0.5,  # n1 idle 7.0 -> 8.0, but half of it on a re-check
        "rechecks": 0.5,
        "verification": 2.0,  # task 2 not verified yet: nothing counted
    })
    assert (found["submitted_to_first_lease_s"], found["last_done_to_settlement_s"]) == (
        pytest.approx(1.0), pytest.approx(1.8))


def test_chunk_seconds_are_those_of_each_tasks_last_lease_on_each_node() -> None:
    logs = {"n1": 'lease 3: task 5 {"kind": "blender"}\ntask 5: chunk 0+16 rendered in 9.000 s\n'
                  "task 5: lease lost (lease_not_held); frame abandoned\n"
                  'lease 4: task 5 {"kind": "blender"}\ntask 5: chunk 0+16 rendered in 1.250 s\n'
                  "task 5: checkpoint 1/4 abc\ntask 5: chunk 16+16 rendered in 1.500 s\n",
            "n2": 'lease 9: task 6 {}\ntask 6: chunk 0+16 rendered in 2.000 s'}
    assert render.chunk_seconds(logs) == {("n1", 5): [1.25, 1.5], ("n2", 6): [2.0]}


@pytest.mark.anvil
@pytest.mark.slow
def test_bench_render_gridFramesEqualDirectOnes_andAKillCostsAtMostOneChunk() -> None:
    result = render.run(frames=2, samples=48, chunk_samples=12, resolution=(48, 36))

    assert {"frames", "direct_s", "grid_s", "grid_overhead", "pixels_identical",
            "max_rework_s_after_kill", "chunk_s"} <= set(result)
    assert result["frames"] == 2 and result["pixels_identical"] is True
    assert result["direct_s"] > 0 and result["grid_s"] > 0
    assert set(result["stages_s"]) == set(render.STAGES) and result["tasks"] == 2
    assert result["render_s"] > 0
    kept = result["chunks_resumed_from_checkpoint"]
    assert kept >= 2 and result["chunks_redone_after_kill"] == result["chunks"] - kept
