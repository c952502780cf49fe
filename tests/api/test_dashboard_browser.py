"""The dashboard in headless Chromium (Debian's, driven by Playwright): a real orchestrator
under uvicorn on loopback with three nodes, a finished job with PNG and EXR frames and one
running; the page loads nothing from elsewhere, shows the nodes and the finished job's
thumbnails, refreshes itself, and leaves a screenshot in `.mesh/artifacts/`."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from orchestrator.api.routes.docs import SWAGGER_UI
from orchestrator.config import Settings
from orchestrator.main import create_app
from tests.api.conftest import ADMIN_KEY
from tests.api.dashboard_grid import NODES, seed
from tests.browser import browse, needs_chromium, screenshot
from tests.clients import VirtualClock
from tests.services.pls_harness import FixedStake

pytestmark = needs_chromium


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[FastAPI, str, FixedStake]]:
    """The app under uvicorn on a free loopback port, on the wall clock."""
    stake = FixedStake()
    app = create_app(settings, stake_reader=stake)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield app, f"http://127.0.0.1:{sock.getsockname()[1]}", stake
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the page, not the backend
def test_dashboard_in_chromium_shows_nodes_and_a_finished_job_with_thumbnails(
        served: tuple[FastAPI, str, FixedStake], tmp_path: Path) -> None:
    app, base, stake = served
    # the setup goes through the same app in process; the browser through uvicorn
    seeded = seed(TestClient(app), stake, VirtualClock(time.time()), tmp_path)
    with browse(base) as visit:
        page = visit.page
        page.goto(f"{base}/dashboard")
        for node_id in NODES:
            page.wait_for_selector(f"tr[data-node='{node_id}']")
        assert page.locator("#nodes tbody tr").count() == len(NODES)
        job = page.locator(f".job[data-job='{seeded.finished_job}']")
        assert job.get_attribute("data-status") == "settling"
        assert job.locator(".frame").count() == 3  # frames 1-3; frame 2 in two tiles
        assert job.locator("img").count() == 0  # public view: no images of the results
        page.fill("#admin-key", ADMIN_KEY)
        page.click("#admin-form button")
        # functions, not strings: the page's CSP forbids eval, and a string predicate is one
        page.wait_for_function(
            """job => { const imgs = document.querySelectorAll(`.job[data-job='${job}'] img`);
                        return imgs.length === 4
                          && [...imgs].every(i => i.complete && i.naturalWidth > 0); }""",
            arg=seeded.finished_job, timeout=15_000)
        first = float(page.get_attribute("body", "data-generated-at") or 0)
        page.wait_for_function("first => Number(document.body.dataset.generatedAt) > first",
                               arg=first, timeout=6_000)  # it refreshed by itself
        assert time.time() - float(page.get_attribute("body", "data-generated-at") or 0) < 5
        assert page.locator("#settlements tbody tr").count() == 1
        figures = {text.split("\n")[0]: text.split("\n")[1]
                   for text in page.locator("#service .figure").all_inner_texts()}
        # the seeded tasks started: quantiles of their recorded waits, in seconds
        assert figures["time to assignment (p50)"].endswith(" s")
        assert figures["time to assignment (p99)"].endswith(" s")
        shot = screenshot(page, "dashboard.png")
    print(f"dashboard screenshot: {shot}")
    assert not visit.outside, f"the page fetched from elsewhere: {visit.outside}"
    assert not visit.errors, f"script errors: {visit.errors}"


@pytest.mark.skipif(not SWAGGER_UI.is_dir(), reason="swagger-ui-dist not installed (make setup)")
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_docs_render_swagger_ui_offline(served: tuple[FastAPI, str, FixedStake]) -> None:
    """Every request the page makes goes to this service, and the operations are drawn."""
    _, base, _ = served
    with browse(base, allowed=("data:",)) as visit:
        visit.page.goto(f"{base}/docs")
        visit.page.wait_for_selector(".opblock", timeout=15_000)
        operations = visit.page.locator(".opblock").count()
    assert operations >= 30
    assert not visit.outside, f"/docs fetched from elsewhere: {visit.outside}"
