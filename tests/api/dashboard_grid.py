"""A small grid seen through the API, for the dashboard tests: three nodes of three providers
(stake on the chain's word, `FixedStake`), one finished job whose frames are real PNG and EXR
images (one frame in two tiles) and one job still running."""

from __future__ import annotations

import hashlib
import io
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from PIL import Image

from orchestrator.api.deps import AppContext
from orchestrator.db import jobs as job_db
from orchestrator.domain.jobs import NewJob
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.domain.types import TaskNeeds
from protocol.images import write_exr
from tests.api.conftest import ADMIN_KEY
from tests.builders import CUSTOMER
from tests.clients import LiveNode, VirtualClock, join, make_wallet
from tests.services.pls_harness import FixedStake

ADMIN = {"x-admin-key": ADMIN_KEY}
NODES = ("gpu-amber", "gpu-basalt", "gpu-cobalt")
STAKE = 750 * 10**18
_jobs = itertools.count(0xDA5)


@dataclass
class Seeded:
    nodes: list[LiveNode]
    finished_job: str
    running_job: str
    results: list[str]  # sha256 of every result of the finished job


def frame_png(frame: int, width: int = 96, height: int = 54) -> bytes:
    """A gradient whose hue depends on the frame: thumbnails of different frames differ."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 255 // width), (y * 255 // height),
                    np.full_like(x, (frame * 70) % 256)], axis=2).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(out, format="PNG")
    return out.getvalue()


def tile_exr(tmp: Path, width: int = 96, height: int = 27) -> bytes:
    pixels = np.zeros((height, width, 4), np.float32)
    pixels[..., 0] = np.linspace(0.0, 1.0, width)[None, :]
    pixels[..., 2] = 0.5
    pixels[..., 3] = 1.0
    return write_exr(tmp / "tile.exr", pixels).read_bytes()


def _job(ctx: AppContext, payloads: list[dict[str, object]], now: float) -> str:
    job_id = "0x" + f"{next(_jobs):064x}"
    with ctx.factory.begin() as session:
        job_db.create_job(session, NewJob(
            job_id=job_id, customer=CUSTOMER, spec={"kind": "blender"}, spec_hash="0x" + "0" * 64,
            amount=3 * 10**18, deadline=now + 86_400, needs=TaskNeeds(), payloads=tuple(payloads)),
            now=now, status=JobStatus.FUNDED)
    return job_id


def _upload(node: LiveNode, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    response = node.client.put(f"/v1/blobs/{digest}", content=data, headers=node.auth)
    assert response.status_code == 200, response.text
    return digest


def seed(client: TestClient, stake: FixedStake, clock: VirtualClock, tmp: Path) -> Seeded:
    """Register and log in the nodes, run the finished job through leases and uploads, accept
    it (its settlement is queued), and start the running one."""
    ctx: AppContext = client.app.state.ctx  # type: ignore[attr-defined]
    nodes = []
    for node_id in NODES:
        wallet = make_wallet(client, clock, chain_id=ctx.settings.chain_id,
                             orchestrator_id=ctx.settings.orchestrator_id)
        stake.free[wallet.address] = STAKE
        nodes.append(join(wallet, node_id))
    for node in nodes:
        assert node.post(f"/v1/nodes/{node.node_id}/heartbeat").status_code == 200
    blender = {"kind": "blender", "samples": 4}
    finished = _job(ctx, [{**blender, "frame": 1, "format": "png"},
                          {**blender, "frame": 2, "tile": 0, "tiles": 2, "format": "exr"},
                          {**blender, "frame": 2, "tile": 1, "tiles": 2, "format": "png"},
                          {**blender, "frame": 3, "format": "png"}], clock())
    results = []
    for epoch, node in enumerate(itertools.islice(itertools.cycle(nodes), 4)):
        with ctx.factory.begin() as session:  # an epoch's scores committed per task: RS history
            ctx.pls.staking.close_epoch(session, epoch=epoch, now=clock())
        lease = node.post(f"/v1/nodes/{node.node_id}/lease")
        assert lease.status_code == 200, lease.text
        task = lease.json()
        assert node.post(f"/v1/tasks/{task['task_id']}/progress",
                         {"progress": 0.5}).status_code == 200
        payload = task["payload"]
        data = (tile_exr(tmp) if payload.get("format") == "exr"
                else frame_png(int(payload["frame"]),
                               height=27 if payload.get("tiles", 1) > 1 else 54))
        digest = _upload(node, data)
        done = node.post(f"/v1/tasks/{task['task_id']}/complete", {"result_sha256": digest})
        assert done.status_code == 200, done.text
        results.append(digest)
    accepted = client.post(f"/v1/admin/jobs/{finished}/accept", headers=ADMIN)
    assert accepted.status_code == 200, accepted.text
    running = _job(ctx, [{**blender, "frame": f, "format": "png"} for f in range(1, 5)], clock())
    lease = nodes[0].post(f"/v1/nodes/{nodes[0].node_id}/lease").json()
    assert nodes[0].post(f"/v1/tasks/{lease['task_id']}/progress",
                         {"progress": 0.25}).status_code == 200
    ctx.heartbeats.flush()
    return Seeded(nodes, finished, running, results)
