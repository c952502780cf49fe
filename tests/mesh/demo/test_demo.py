"""`mesh up --demo` end to end (real agents on anvil + the orchestrator) and its dashboard in
Chromium, its Ctrl-C path, and the report of its balance checks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from rich.console import Console

from mesh.demo.checks import Check, report
from mesh.demo.steps import FRAMES, RESOLUTION
from tests.browser import CHROMIUM, browse, screenshot

# What the demo prints once it has checked each step against the service or the chain.
MARKERS = ("orchestrator `mesh orchestrator serve` at", "agents registered (wallet-signed)",
           "escrow the job (createJob)", "KILL churn-3", "resumes from checkpoint",
           "comes back (simulated churn)", "lazy-4's result failed", "slash lazy-4",
           "demoted to BACKGROUND", "dispute slash", "evidence bundle reads failed_verification",
           "dismissed, reflected by the service", "settle the job (outbox)",
           "the chain says SETTLED", "downloaded", "claim the payout",
           "withdraw the unbonded stake",
           "contact sheet", "demo passed")


def leftovers(root: Path, session: int) -> list[str]:
    """Processes of the demo still alive: in its session, or working under `root` (the
    sandboxed renders run in sessions of their own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            sid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[4])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if sid == session or str(root) in cmdline or cwd.startswith(str(root)):
            found.append(f"{entry.name}: {cmdline[:160]}")
    return found


def read_until(process: subprocess.Popen[str], marker: str, timeout_s: float) -> str:
    """What the process printed up to and with the line holding `marker` (or until it
    ended, or the time ran out)."""
    assert process.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout_s
    while marker not in seen and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen += line
    return seen


@pytest.mark.anvil
@pytest.mark.slow
def test_upDemo_realAgentsRenderAKillAndACheaterAndSettle_writesItsOutputsAndExitsZero(
        tmp_path: Path) -> None:
    """The demo, then (`--stay`) its grid left serving: the dashboard in Chromium shows the
    demo's nodes, its settled job with a thumbnail per frame, the settlement, the slash and
    the dispute."""
    out = tmp_path / "demo"
    demo = subprocess.Popen([sys.executable, "-m", "mesh.cli", "up", "--demo", "--stay",
                             "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output = read_until(demo, "Ctrl-C stops everything", timeout_s=900)
        served = re.search(r"dashboard at (http://127\.0\.0\.1:\d+)/dashboard \(admin key "
                           r"(\S+)\)", output.split("the grid stays up")[-1])
        assert served, output[-6000:]
        summary = json.loads((out / "summary.json").read_text())
        board = httpx.get(f"{served.group(1)}/v1/dashboard", timeout=10).json()
        assert [(d["dispute_id"], d["kind"], d["status"]) for d in board["disputes"]] == [
            (summary["dispute"]["dispute_id"], "slash", "dismissed")]
        assert "lazy-4" in {c["node_id"] for c in board["contested"]}
        if Path(CHROMIUM).is_file():
            look_at_the_dashboard(served.group(1), served.group(2), summary)
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()

    assert demo.returncode == 0, (output + rest)[-6000:]
    assert "stopped" in rest
    assert [m for m in MARKERS if m not in output] == [], output[-6000:]
    assert "WRONG" not in output
    assert summary["jobs_settled"] == 1 and summary["frames_rendered"] == FRAMES
    assert summary["resumes"] >= 1 and summary["slashes"] >= 1
    assert summary["slashes_by_reason"].get("failed_verification", 0) >= 1
    assert summary["verification_failures_caught"] >= 1
    assert summary["settlement_tx"].startswith("0x") and len(summary["settlement_tx"]) == 66
    assert summary["gas_per_job"] > 21_000 and summary["wall_s"] > 0
    assert summary["checks_passed"] is True
    assert summary["nodes"]["lazy-4"]["tier"] == "BACKGROUND"
    assert summary["dispute"]["ruling"] == "dismissed"
    assert summary["dispute"]["opened_to_reflected_s"] > 0
    frames = sorted((out / "frames").glob("*.png"))
    assert len(frames) == FRAMES
    assert all(Image.open(f).size == RESOLUTION for f in frames)
    with Image.open(out / "contact_sheet.png") as sheet:
        assert sheet.width >= RESOLUTION[0] * 4
    with Image.open(out / "rs_over_time.png") as plot:
        assert plot.size[0] > 400
    assert leftovers(tmp_path, demo.pid) == []


def look_at_the_dashboard(base: str, admin_key: str, summary: dict[str, Any]) -> None:
    job_id = summary["job_id"]
    with browse(base) as visit:
        page = visit.page
        page.goto(f"{base}/dashboard")
        for node in summary["nodes"]:
            page.wait_for_selector(f"tr[data-node='{node}']")
        lazy = page.locator("tr[data-node='lazy-4']")
        assert "background" in lazy.inner_text()
        job = page.locator(f".job[data-job='{job_id}']")
        assert job.get_attribute("data-status") == "settled"
        assert job.locator(".frame").count() == FRAMES
        page.fill("#admin-key", admin_key)
        page.click("#admin-form button")
        page.wait_for_function(
            """([job, frames]) => {
                 const imgs = document.querySelectorAll(`.job[data-job='${job}'] img`);
                 return imgs.length === frames
                   && [...imgs].every(i => i.complete && i.naturalWidth > 0); }""",
            arg=[job_id, FRAMES], timeout=15_000)
        settlement = page.locator("#settlements tbody tr").filter(
            has=page.locator(f"td[title='{summary['settlement_tx']}']"))
        assert "confirmed" in settlement.inner_text()
        slashes = page.locator("#slashes tbody").inner_text()
        assert "lazy-4" in slashes and "failed_verification" in slashes
        dispute = page.locator(f"tr[data-dispute='{summary['dispute']['dispute_id']}']")
        assert "dismissed" in dispute.inner_text()
        shot = screenshot(page, "dashboard-demo.png")
    print(f"dashboard screenshot: {shot}")
    assert not visit.outside, f"the page fetched from elsewhere: {visit.outside}"
    assert not visit.errors, f"script errors: {visit.errors}"


@pytest.mark.anvil
@pytest.mark.slow
def test_upDemo_onCtrlC_stopsEveryProcessItStarted(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    demo = subprocess.Popen([sys.executable, "-m", "mesh.cli", "up", "--demo", "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        seen = read_until(demo, "agents registered", timeout_s=300)
        assert "agents registered" in seen, seen[-3000:]
        time.sleep(3)  # the renders under way
        demo.send_signal(signal.SIGINT)  # what Ctrl-C sends the foreground process
        rest, _ = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 130, (seen + rest)[-3000:]
    assert "interrupted" in rest
    assert leftovers(tmp_path, demo.pid) == []


@pytest.mark.anvil
@pytest.mark.slow
def test_up_leavesAGridServing_refusesASecondGridThere_thenSigtermStopsItAll(
        tmp_path: Path) -> None:
    up = subprocess.Popen([sys.executable, "-m", "mesh.cli", "up", "--providers", "1",
                           "--out", str(tmp_path / "up")], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        seen = read_until(up, "agents ", timeout_s=300)
        url = re.search(r"orchestrator (http://127\.0\.0\.1:\d+)", seen)
        assert url, seen[-3000:]
        assert httpx.get(f"{url.group(1)}/healthz", timeout=10).status_code == 200
        deadline = time.monotonic() + 120  # the agent registers with the service
        while time.monotonic() < deadline and "logged in" not in (
                tmp_path / "up" / "node-1" / "agent.log").read_text():
            time.sleep(0.5)
        assert "logged in" in (tmp_path / "up" / "node-1" / "agent.log").read_text()
        wallet = (tmp_path / "up" / "node-1" / "key.json").read_bytes()
        second = subprocess.run([sys.executable, "-m", "mesh.cli", "up", "--providers", "1",
                                 "--out", str(tmp_path / "up")], capture_output=True,
                                text=True, timeout=60)  # started again by mistake
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.strip() == (
            f"mesh up: a grid is already running in {tmp_path / 'up'} (pid {up.pid}); stop it "
            "first (Ctrl-C where it runs) or give this one another --out")
        assert (tmp_path / "up" / "node-1" / "key.json").read_bytes() == wallet
        assert httpx.get(f"{url.group(1)}/healthz", timeout=10).status_code == 200
        env_file = re.search(r"`set -a; \. (\S+); set \+a`", seen)
        assert env_file, seen[-3000:]
        user = {k: v for k, v in (line.split("=", 1) for line in
                                  Path(env_file.group(1)).read_text().splitlines())}
        password = str(Path(user["MESH_WALLET_DIR"]) / "password")
        for command in (["job", "list", "--wallet", "customer"],
                        ["arbiter", "list"]):  # the arbiter's wallet is MESH_WALLET's
            done = subprocess.run(  # only what mesh up left: no option naming the grid
                [sys.executable, "-m", "mesh.cli", *command,
                 "--password-file", password, "--json"], capture_output=True, text=True,
                env={"PATH": os.environ["PATH"], **user}, cwd=tmp_path, timeout=120)
            assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr
        up.send_signal(signal.SIGTERM)  # as `timeout`, systemd or a container runtime stop it
        rest, _ = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0 and "stopped" in rest, rest[-3000:]
    assert leftovers(tmp_path, up.pid) == []


def test_report_withAWrongBalance_printsWrongAndExitsOne() -> None:
    console = Console(record=True, width=120)
    checks = [Check("customer tokens", "990 MESH", "990 MESH"),
              Check("steady-1 payout", "6 MESH", "5 MESH")]

    with pytest.raises(SystemExit) as exited:
        report(console, checks, total_gas=1)

    assert exited.value.code == 1
    text = console.export_text()
    assert "WRONG" in text and "demo failed" in text and "demo passed" not in text


def test_report_withAllChecksRight_passes() -> None:
    console = Console(record=True, width=120)

    report(console, [Check("left in JobEscrow", "0 MESH", "0 MESH")], total_gas=1)

    assert "demo passed" in console.export_text()
