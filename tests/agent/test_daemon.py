"""The agent end to end: `mesh agent run` processes against the orchestrator under uvicorn on
loopback and the contracts on anvil; real Cycles renders in the sandbox, tiny (2 shared cores)."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agent.sandbox import Limits, Outcome, Sandbox
from agent.workloads.blender import WORKER, FrameTask, render
from mesh.customer import download
from mesh.localgrid import ORCHESTRATOR_ID, STAKE, Grid, wait_for
from orchestrator.chain.anvil import dev_account
from protocol import keystore
from protocol.client import Wallet

pytestmark = [pytest.mark.anvil, pytest.mark.slow]
QUICK_DECISIONS = {"MESH_PLS_RECONNECT_GRACE_S": "3", "MESH_PLS_OUTAGE_WINDOW_S": "30",
                   "MESH_PLS_DECISION_DELAY_S": "30", "MESH_PLS_DECIDE_INTERVAL_S": "1"}


def direct(scene: Path, tmp: Path, **task: object) -> np.ndarray:
    """The same frame rendered straight through bpy in one sandbox, no grid."""
    frame = FrameTask(blend=scene, threads=1, **task)  # type: ignore[arg-type]
    with Sandbox(limits=Limits(wall_s=300), read_only=[scene, WORKER.parent],
                 parent_dir=tmp) as box:
        rendered = render(frame, box)
        assert rendered.run.outcome is Outcome.OK and rendered.frame is not None
        return np.asarray(Image.open(rendered.frame))


def test_renderJob_splitAcrossThreeAgents_downloadsVerifiedFramesEqualToDirectRenders(
        grid: Grid, scene: Path, tmp_path: Path) -> None:
    grid.start()
    agents = [grid.agent(f"render-{i}").start() for i in range(3)]
    grid.wait_logged_in(agents)  # so that no early agent takes every frame
    job_id = grid.submit(scene, frames={"start": 1, "end": 4}, samples=8, chunk_samples=4,
                         resolution=[32, 24])

    wait_for("the job's four frames", lambda: grid.done(job_id), timeout_s=180)
    customer_key = tmp_path / "customer.json"
    (tmp_path / "pw").write_text("customer-pw")
    keystore.create(customer_key, "customer-pw", bytes(dev_account(4).key))
    out = tmp_path / "frames"
    downloaded = subprocess.run(
        [sys.executable, "-m", "mesh.cli", "job", "download", job_id, "--out", str(out),
         "--orchestrator", grid.url, "--keystore", str(customer_key), "--password-file",
         str(tmp_path / "pw"), "--chain-id", str(grid.chain.deployment.chain_id),
         "--orchestrator-id", ORCHESTRATOR_ID],
        capture_output=True, text=True, timeout=120, check=False)

    assert downloaded.returncode == 0, downloaded.stderr
    assert "4 files checked" in downloaded.stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"frame-{f:04d}.png" for f in (1, 2, 3, 4)]
    for frame in (1, 4):
        pixels = np.asarray(Image.open(out / f"frame-{frame:04d}.png"))
        assert np.array_equal(pixels, direct(scene, tmp_path, frame=frame, samples=8,
                                             chunk_samples=4, resolution=(32, 24)))
    stranger = Wallet.connect(grid.url, bytes(dev_account(7).key),
                              chain_id=grid.chain.deployment.chain_id,
                              orchestrator_id=ORCHESTRATOR_ID)
    refused = stranger.send("GET", f"/v1/jobs/{job_id}/results")
    stranger.close()
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "job_not_owned"
    workers = [a for a in agents if "acknowledged" in a.log()]
    assert len(workers) >= 2, [a.log()[-2000:] for a in agents]  # the job was shared
    for agent in agents:
        text = agent.log()
        assert "no NVIDIA GPU telemetry" in text and "reporting CPU facts only" in text
        assert text.count("no NVIDIA GPU telemetry") == 1  # said once, plainly
        assert "private key" not in text.lower()


def test_agentKilledMidFrame_frameResumesElsewhere_redoingAtMostOneChunk(
        grid: Grid, scene: Path, tmp_path: Path) -> None:
    grid.start()
    job_id = grid.submit(scene, frames={"start": 12, "end": 12}, samples=360, chunk_samples=60,
                         resolution=[48, 36])
    doomed = grid.agent("doomed").start()
    wait_for("two checkpoints on the doomed agent",
             lambda: "checkpoint 2/6" in doomed.log(), timeout_s=180)
    doomed.kill()
    checkpointed = len(re.findall(r"checkpoint \d/6", doomed.log()))
    rescuer = grid.agent("rescuer").start()

    wait_for("the frame", lambda: grid.done(job_id), timeout_s=240)
    log = rescuer.log()
    resumed = re.search(r"resumes with (\d+) of 6 chunks", log)
    assert resumed is not None, log[-3000:]
    kept = int(resumed.group(1))
    redone = len(re.findall(r"chunk \d+\+60 rendered", log))
    # the checkpoints its log shows, or one more that landed as the kill came
    assert checkpointed >= 2 and kept in (checkpointed, checkpointed + 1)
    assert redone == 6 - kept  # only what no checkpoint held: the chunk in flight, and after
    result = grid.results(job_id)["results"][0]
    assert grid.customer is not None
    download = tmp_path / "frame.png"
    response = grid.customer.send("GET", f"/v1/jobs/{job_id}/results/{result['sha256']}")
    download.write_bytes(response.content)
    assert np.array_equal(np.asarray(Image.open(download)),
                          direct(scene, tmp_path, frame=12, samples=360, chunk_samples=60,
                                 resolution=(48, 36)))


def test_agentKilledAndRestartedWithinTheLoneGrace_resumesItsHeldFrameUnslashed(
        grid: Grid, scene: Path, tmp_path: Path) -> None:
    """SIGKILL mid-frame (a crash), the DEAD verdict, the node's lease held for the default
    lone grace, then a new process for the same node: it takes the frame back from its last
    checkpoint, finishes it, and nobody is slashed (the reconnect grace is long gone)."""
    grid.start(**QUICK_DECISIONS, MESH_LEASE_TTL_S="60")  # the DEAD verdict comes first
    frame = {"frames": {"start": 6, "end": 6}, "samples": 2400, "chunk_samples": 80,
             "resolution": [48, 36]}  # 30 chunks
    job_id = grid.submit(scene, **frame)
    crasher = grid.agent("crasher").start()
    wait_for("two checkpoints", lambda: "checkpoint 2/30" in crasher.log(), timeout_s=180)
    crasher.kill()
    checkpointed = len(re.findall(r"checkpoint \d+/30", crasher.log()))
    service_log = grid.data_dir / "service.log"
    wait_for("the DEAD verdict", lambda: "nodes declared dead: ['crasher'] (0 tasks moved)"
             in service_log.read_text(), timeout_s=90)  # held, not moved
    dead_at = time.monotonic()
    time.sleep(float(QUICK_DECISIONS["MESH_PLS_RECONNECT_GRACE_S"]) + 1)
    before = len(crasher.log())

    crasher.start()  # a new process, a new session key, the same node

    wait_for("the frame", lambda: grid.done(job_id), timeout_s=240)
    log = crasher.log()[before:]
    resumed = re.search(r"resumes with (\d+) of 30 chunks", log)
    assert resumed is not None, log[-3000:]
    assert int(resumed.group(1)) in (checkpointed, checkpointed + 1)  # one may land at the kill
    assert re.search(r"node crasher restarted: tasks \[\d+\] offered again",
                     service_log.read_text())
    assert time.monotonic() - dead_at < 300  # the grace never lapsed: it was taken back
    time.sleep(max(dead_at + float(QUICK_DECISIONS["MESH_PLS_DECISION_DELAY_S"]) + 3
                   - time.monotonic(), 0))
    wait_for("the outbox to settle", lambda: all(
        a["status"] == "confirmed" for a in grid.outbox("slash") + grid.outbox("assign")),
        timeout_s=30)
    assert grid.outbox("assign") != [] and grid.outbox("slash") == []
    assert grid.chain.provider_stake(crasher.address).bonded == STAKE
    result = grid.results(job_id)["results"][0]
    assert grid.customer is not None
    download = tmp_path / "frame.png"
    download.write_bytes(grid.customer.send(
        "GET", f"/v1/jobs/{job_id}/results/{result['sha256']}").content)
    assert np.array_equal(np.asarray(Image.open(download)),
                          direct(scene, tmp_path, frame=6, samples=2400, chunk_samples=80,
                                 resolution=(48, 36)))


def test_restartedAgent_deliversTheResultItSpooledWhileTheServiceWasDown(
        grid: Grid, scene: Path) -> None:
    slow = {"MESH_LEASE_TTL_S": "300", "MESH_SWEEP_INTERVAL_S": "3600"}
    grid.start(**slow)
    job_id = grid.submit(scene, frames={"start": 3, "end": 3}, samples=480, chunk_samples=60,
                         resolution=[48, 36])
    agent = grid.agent("spooler").start()
    wait_for("a first checkpoint", lambda: "checkpoint 1/8" in agent.log(), timeout_s=180)
    grid.stop_service(kill=True)  # an outage: the rest of the frame renders on
    wait_for("the result in the spool", lambda: "kept in the spool" in agent.log(),
             timeout_s=180)
    agent.kill()
    spooled = re.search(r"result ([0-9a-f]{12}) kept in the spool", agent.log())
    assert spooled is not None
    assert list((agent.dir / "state" / "spool").glob("task-*.json"))

    grid.start(**slow)
    agent.start()

    wait_for("the frame", lambda: grid.done(job_id), timeout_s=120)
    after = agent.log().split("kept in the spool", 1)[1]
    assert f"delivering spooled result {spooled.group(1)}" in after
    assert f"result {spooled.group(1)} acknowledged" in after
    assert not re.search(r"lease \d+: task", after.split("acknowledged", 1)[0])  # no re-render
    assert grid.results(job_id)["results"][0]["sha256"].startswith(spooled.group(1))
    assert not list((agent.dir / "state" / "spool").glob("task-*.json"))


def test_taskOverItsMemoryLimit_failsWithThatReason_andTheAgentKeepsServing(
        grid: Grid, scene: Path) -> None:
    grid.start()
    job_id = grid.submit(scene, frames={"start": 1, "end": 1}, samples=4, chunk_samples=4,
                         resolution=[32, 24])
    agent = grid.agent("small", "--memory-mb", "400").start()

    wait_for("a memory-limit failure", lambda: "memory_limit" in agent.log(), timeout_s=120)
    wait_for("a second attempt", lambda: agent.log().count("memory_limit") >= 2, timeout_s=60)
    assert agent.process is not None and agent.process.poll() is None  # still serving
    assert grid.job(job_id)["tasks"] != {"done": 1}


def test_sigterm_drains_checkpointsHandsTheFrameBackAndExitsZero(
        grid: Grid, scene: Path) -> None:
    grid.start(**QUICK_DECISIONS)
    job_id = grid.submit(scene, frames={"start": 7, "end": 7}, samples=360, chunk_samples=60,
                         resolution=[48, 36])
    leaving = grid.agent("leaving").start()
    wait_for("a first checkpoint", lambda: "checkpoint 1/6" in leaving.log(), timeout_s=180)

    assert leaving.terminate() == 0
    log = leaving.log()
    assert "SIGTERM: draining" in log and "handed back (drain)" in log
    assert "drained: the orchestrator was told" in log
    handed = len(re.findall(r"checkpoint \d/6", log))
    assert handed < 6  # it left mid-frame, after checkpointing what it had

    taker = grid.agent("taker").start()
    wait_for("the frame", lambda: grid.done(job_id), timeout_s=240)
    resumed = re.search(r"resumes with (\d+) of 6 chunks", taker.log())
    assert resumed is not None and int(resumed.group(1)) == handed  # logged before it exited
    # a drained departure is never an abandonment: past the decision, collateral was assigned
    # on chain for the frame and nothing is slashed
    wait_for("the drained node's DEAD verdict", lambda: "nodes declared dead: ['leaving']"
             in (grid.data_dir / "service.log").read_text(), timeout_s=60)
    time.sleep(float(QUICK_DECISIONS["MESH_PLS_DECISION_DELAY_S"]) + 3)
    assert len(grid.outbox("assign")) >= 2 and grid.outbox("slash") == []


def test_tiledFrame_downloadedAndAssembled_equalsTheDirectFullFrame(
        grid: Grid, scene: Path, tmp_path: Path) -> None:
    grid.start()
    job_id = grid.submit(scene, frames={"start": 9, "end": 9}, tiles=3, samples=8,
                         chunk_samples=8, resolution=[32, 25])
    tiler = grid.agent("tiler", "--popw-class", "cpu").start()
    wait_for("three tiles", lambda: grid.done(job_id), timeout_s=180)
    # the handshake ran (a loaded 2-core machine may be too slow for the class: then it says
    # so and serves normal-priority work all the same)
    assert re.search(r"PoPW handshake: (passed=True|failed \(popw_too_slow)", tiler.log())
    assert grid.customer is not None

    done = download(grid.customer, job_id, tmp_path / "out", show_progress=False)

    assert [p.name for p in done.files] == [f"frame-0009-tile-0{t}.png" for t in range(3)]
    assert [p.name for p in done.frames] == ["frame-0009.png"]
    assert np.array_equal(np.asarray(Image.open(done.frames[0])),
                          direct(scene, tmp_path, frame=9, samples=8, chunk_samples=8,
                                 resolution=(32, 25)))


def test_commandJob_runsSandboxed_resultIsATarOfItsDeclaredOutputs(
        grid: Grid, tmp_path: Path) -> None:
    grid.start()
    data = tmp_path / "input.txt"
    data.write_text("hello grid")
    script = ("import os, pathlib; out = pathlib.Path(os.environ['MESH_OUT']); "
              "text = pathlib.Path(os.environ['MESH_INPUT']).read_text(); "
              "(out / 'upper.txt').write_text(text.upper() + os.environ['MESH_SHARD']); "
              "(out / 'env.txt').write_text(' '.join(sorted(os.environ)))")
    job_id = grid.submit_workload({"kind": "command", "command": ["{python}", "-c", script],
                                   "input_sha256": grid.upload(data), "count": 2,
                                   "outputs": ["upper.txt", "env.txt"]})
    grid.agent("runner").start()
    wait_for("both shards", lambda: grid.done(job_id), timeout_s=120)
    assert grid.customer is not None

    done = download(grid.customer, job_id, tmp_path / "out", show_progress=False)

    assert [p.name for p in done.files] == ["shard-0000.tar", "shard-0001.tar"]
    for shard, path in enumerate(done.files):
        with tarfile.open(path) as tar:
            assert sorted(tar.getnames()) == ["env.txt", "upper.txt"]
            upper = tar.extractfile("upper.txt")
            env = tar.extractfile("env.txt")
            assert upper is not None and env is not None
            assert upper.read().decode() == f"HELLO GRID{shard}"
            assert "MESH_AGENT_PASSWORD" not in env.read().decode()


def test_agent_withAWrongPassword_saysSoInOneLineAndExits2(tmp_path: Path) -> None:
    keystore.create(tmp_path / "key.json", "right")
    (tmp_path / "pw").write_text("wrong")
    done = subprocess.run(
        [sys.executable, "-m", "mesh.cli", "agent", "run", "--orchestrator",
         "http://127.0.0.1:9", "--keystore", str(tmp_path / "key.json"), "--password-file",
         str(tmp_path / "pw")], capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"mesh agent run: wrong password for {tmp_path / 'key.json'}"]
