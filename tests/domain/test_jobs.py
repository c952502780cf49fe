"""A job's workload becomes its tasks, each what one node runs, and the job's inputs and queue
place follow from it; worked by hand, not by the code's own formula."""

from __future__ import annotations

import pytest

from orchestrator.domain.jobs import NewJob, handed_payload, input_blobs, pack_of, split_tasks
from orchestrator.domain.types import TaskNeeds

BLEND = "b" * 64


def test_a_render_is_one_task_per_tile_of_each_frame_in_order() -> None:
    workload = {"kind": "blender", "blend_sha256": BLEND, "frames": {"start": 3, "end": 4},
                "tiles": 2, "samples": 64, "chunk_samples": 16, "resolution": [320, 240],
                "format": "exr"}
    tasks = split_tasks(workload)
    assert [(t["frame"], t["tile"]) for t in tasks] == [(3, 0), (3, 1), (4, 0), (4, 1)]
    assert tasks[1] == {"kind": "blender", "blend_sha256": BLEND, "frame": 3, "tile": 1,
                        "tiles": 2, "format": "exr", "samples": 64, "chunk_samples": 16,
                        "resolution": [320, 240]}


def test_a_render_takes_the_defaults_it_does_not_name() -> None:
    (task,) = split_tasks({"kind": "blender", "blend_sha256": BLEND,
                           "frames": {"start": 7, "end": 7}})
    assert task == {"kind": "blender", "blend_sha256": BLEND, "frame": 7, "tile": 0,
                    "tiles": 1, "format": "png", "samples": None, "chunk_samples": None,
                    "resolution": None}


def test_a_command_is_one_task_per_shard_with_its_redundancy() -> None:
    tasks = split_tasks({"kind": "command", "command": ["render", "{shard}"], "count": 3,
                         "input_sha256": "c" * 64, "outputs": ["a.png"],
                         "deterministic": False, "redundancy": {"k": 3, "n": 5}})
    assert [t["shard"] for t in tasks] == [0, 1, 2]
    assert tasks[2] == {"kind": "command", "command": ["render", "{shard}"],
                        "input_sha256": "c" * 64, "shard": 2, "outputs": ["a.png"],
                        "shards": 3, "deterministic": False, "redundancy": {"k": 3, "n": 5}}


def test_a_command_takes_the_defaults_it_does_not_name() -> None:
    (task,) = split_tasks({"kind": "command", "command": ["true"], "count": 1})
    assert task == {"kind": "command", "command": ["true"], "input_sha256": None, "shard": 0,
                    "outputs": ["result"], "shards": 1, "deterministic": True,
                    "redundancy": {"k": 2, "n": 3}}


def test_an_unknown_workload_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown workload kind 'shader'"):
        split_tasks({"kind": "shader"})


def test_a_jobs_tasks_queue_by_the_latest_time_they_can_start() -> None:
    job = NewJob(job_id="0x" + "1" * 64, customer="0x" + "c" * 40, spec={}, spec_hash="0x",
                 amount=1, deadline=10_000.0, needs=TaskNeeds(expected_duration_s=600.0),
                 payloads=({"frame": 1},))
    assert job.latest_start == 9_400.0


def test_a_tasks_inputs_are_the_scene_or_the_commands_input_and_nothing_else() -> None:
    (render,) = split_tasks({"kind": "blender", "blend_sha256": BLEND,
                             "frames": {"start": 1, "end": 1}})
    assert input_blobs(render) == {BLEND}
    assert input_blobs({"kind": "command", "argv": ["true"], "input_sha256": "c" * 64}) == {
        "c" * 64}
    assert input_blobs({"kind": "command", "argv": ["true"], "input_sha256": None}) == set()
    assert input_blobs({"kind": "command", "argv": ["true"], "result_sha256": "d" * 64}) == set()


def test_a_packed_jobs_tasks_are_handed_its_pack_which_stays_out_of_their_rows() -> None:
    pack = {"tex/rel.png": "1" * 64, "lib/lib.blend": "2" * 64}
    spec = {"workload": {"kind": "blender", "blend_sha256": BLEND,
                         "frames": {"start": 1, "end": 2}, "assets": pack}}
    tasks = split_tasks(spec["workload"])
    assert all("assets" not in task for task in tasks)
    assert pack_of(spec) == pack
    assert handed_payload(tasks[0], spec) == {**tasks[0], "assets": pack}
    unpacked = {"workload": {**spec["workload"], "assets": None}}
    assert pack_of(unpacked) == {} and handed_payload(tasks[0], unpacked) == tasks[0]
    assert pack_of({"kind": "command"}) == {}
