"""The dashboard's JSON read and thumbnails: what is public, what needs the admin key, and that
the figures are those of `/metrics`."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.config import Settings
from orchestrator.db import jobs as job_db
from orchestrator.db import statuses as status_db
from orchestrator.domain.lifecycle import JobStatus
from orchestrator.main import create_app
from tests.api.dashboard_grid import ADMIN, NODES, STAKE, Seeded, seed
from tests.clients import VirtualClock
from tests.conftest import JobMaker
from tests.services.pls_harness import FixedStake


@pytest.fixture
def stake() -> FixedStake:
    return FixedStake()


@pytest.fixture
def dash(settings: Settings, clock: VirtualClock, stake: FixedStake
         ) -> Iterator[TestClient]:
    with TestClient(create_app(settings, clock=clock, stake_reader=stake)) as client:
        yield client


@pytest.fixture
def seeded(dash: TestClient, stake: FixedStake, clock: VirtualClock, tmp_path: Path) -> Seeded:
    return seed(dash, stake, clock, tmp_path)


def test_public_read_shows_nodes_jobs_and_settlements_but_no_thumbnails(
        dash: TestClient, seeded: Seeded, clock: VirtualClock, make_job: JobMaker,
        factory: sessionmaker[Session]) -> None:
    clock.advance(600)
    body = dash.get("/v1/dashboard").json()
    assert body["admin"] is False
    nodes = {n["node_id"]: n for n in body["nodes"]}
    assert sorted(nodes) == sorted(NODES)
    amber = nodes["gpu-amber"]
    assert (amber["tier"], amber["health"], amber["stake_bonded"]) == ("standard", "alive",
                                                                        str(STAKE))
    assert 0 < amber["rs"] <= 1 and amber["rs_history"][-1] == amber["rs"]
    assert len(amber["rs_history"]) == 4 + 1  # the four committed epochs, then the live RS
    assert amber["uptime_1d"] == pytest.approx(1.0)  # online since it registered
    jobs = {j["job_id"]: j for j in body["jobs"]}
    finished = jobs[seeded.finished_job]
    assert (finished["status"], finished["tasks_done"], finished["progress"]) == ("settling", 4,
                                                                                   1.0)
    assert [(f["frame"], len(f["tiles"])) for f in finished["frames"]] == [(1, 1), (2, 2), (3, 1)]
    tiles = [t for f in finished["frames"] for t in f["tiles"]]
    assert all(t["has_result"] and t["thumbnail"] is None for t in tiles)
    running = jobs[seeded.running_job]
    assert running["status"] == "running" and running["progress"] == pytest.approx(0.25 / 4)
    # 600 s for 1/16 of the work: 15/16 left at that pace
    assert running["eta_s"] == pytest.approx(600 * 15, rel=1e-3)
    assert finished["reason"] is None and running["reason"] is None
    stopped = make_job(1)
    with factory.begin() as session:  # as a task that failed for good fails its job
        job = job_db.get_job(session, job_id=stopped)
        assert job is not None
        for step in (JobStatus.SCHEDULED, JobStatus.RUNNING):
            status_db.set_job_status(session, job=job, target=step, now=clock(), reason="")
        status_db.set_job_status(session, job=job, target=JobStatus.FAILED, now=clock(),
                                 reason="frame task 0 failed 5 times; node gpu-amber "
                                        "reported: Missing DNA block")
    failed = {j["job_id"]: j for j in dash.get("/v1/dashboard").json()["jobs"]}[stopped]
    assert (failed["status"], failed["reason"]) == (
        "failed", "frame task 0 failed 5 times; node gpu-amber reported: Missing DNA block")
    [settlement] = body["settlements"]
    assert (settlement["job_id"], settlement["status"], settlement["paid"]) == (
        seeded.finished_job, "pending", str(3 * 10**18))
    assert (settlement["tx_hash"], settlement["gas_used"]) == (None, None)  # not sent yet
    # queued, not confirmed on chain: the providers' earnings are still pending
    assert sum(int(n["pending_earnings"]) for n in nodes.values()) == 3 * 10**18
    assert all(n["earned"] == "0" for n in nodes.values())


def test_service_figures_are_the_ones_on_metrics(dash: TestClient, seeded: Seeded) -> None:
    service = dash.get("/v1/dashboard").json()["service"]
    metrics = dash.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in
               metrics.text.splitlines() if line and not line.startswith("#")}
    # The finished job's 4 tasks, then the running job's pass: one task on each of the 3 idle
    # nodes (the first pulls its own; the others hold reservations for their next pull).
    assert service["placements"] == samples["mesh_placements_total"] == 7
    assert service["assignments"] == samples["mesh_time_to_assignment_seconds_count"]
    assert service["rerun_share"] == samples["mesh_task_rerun_share"] == 0.0
    assert service["time_to_assignment_p50_s"] == samples["mesh_time_to_assignment_p50_seconds"]
    assert service["time_to_assignment_p99_s"] == samples["mesh_time_to_assignment_p99_seconds"]
    assert service["node_failures_per_hour"] == samples["mesh_node_failures_per_hour"] == 0.0


def test_thumbnails_need_the_admin_key_and_are_small_pngs_of_png_and_exr_results(
        dash: TestClient, seeded: Seeded) -> None:
    assert dash.get("/v1/dashboard", headers={"x-admin-key": "wrong"}).status_code == 403
    body = dash.get("/v1/dashboard", headers=ADMIN).json()
    assert body["admin"] is True
    [finished] = [j for j in body["jobs"] if j["job_id"] == seeded.finished_job]
    urls = [t["thumbnail"] for f in finished["frames"] for t in f["tiles"]]
    assert all(urls)
    assert dash.get(urls[0]).status_code == 403  # no key
    for url in urls:
        response = dash.get(url, headers=ADMIN)
        assert (response.status_code, response.headers["content-type"]) == (200, "image/png")
        image = Image.open(io.BytesIO(response.content))
        assert image.format == "PNG" and max(image.size) <= 160
    exr = Image.open(io.BytesIO(dash.get(urls[1], headers=ADMIN).content)).convert("RGB")
    red = exr.getchannel("R")
    assert red.getpixel((0, 0)) < red.getpixel((exr.width - 1, 0))  # type: ignore[operator]


def test_thumbnail_of_anything_but_a_result_is_refused(dash: TestClient, seeded: Seeded) -> None:
    missing = dash.get(f"/v1/dashboard/thumbnails/{'0' * 64}.png", headers=ADMIN)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "result_not_found")
    bad = dash.get("/v1/dashboard/thumbnails/NOT-A-HASH.png", headers=ADMIN)
    assert bad.status_code == 422


def test_the_page_and_its_script_are_served_locally_under_a_strict_policy(
        dash: TestClient) -> None:
    page = dash.get("/dashboard")
    assert page.status_code == 200 and "/dashboard/dashboard.js" in page.text
    assert "http" not in page.text.replace('href="/metrics"', "")  # nothing from elsewhere
    assert "default-src 'self'" in page.headers["content-security-policy"]
    script = dash.get("/dashboard/dashboard.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in script.text.replace("never\n// innerHTML", "")
