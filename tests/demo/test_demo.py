"""`mesh up --demo` end to end (real agents on anvil + the orchestrator), its Ctrl-C path, and
the report of its balance checks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image
from rich.console import Console

from orchestrator.demo import FRAMES, RESOLUTION, Check, report

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


@pytest.mark.anvil
@pytest.mark.slow
def test_upDemo_realAgentsRenderAKillAndACheaterAndSettle_writesItsOutputsAndExitsZero(
        tmp_path: Path) -> None:
    out = tmp_path / "demo"
    demo = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "up", "--demo", "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = demo.communicate(timeout=900)
    finally:
        if demo.poll() is None:
            demo.kill()

    assert demo.returncode == 0, output[-6000:]
    assert [m for m in MARKERS if m not in output] == [], output[-6000:]
    assert "WRONG" not in output
    summary = json.loads((out / "summary.json").read_text())
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


@pytest.mark.anvil
@pytest.mark.slow
def test_upDemo_onCtrlC_stopsEveryProcessItStarted(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    demo = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "up", "--demo", "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        assert demo.stdout is not None
        seen = ""
        deadline = time.monotonic() + 300
        while "agents registered" not in seen and time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                break
            seen += line
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
def test_up_leavesAGridServingUntilCtrlC_thenStopsItAll(tmp_path: Path) -> None:
    up = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "up", "--providers", "1",
                           "--out", str(tmp_path / "up")], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert up.stdout is not None
        seen = ""
        while "agents " not in seen:
            line = up.stdout.readline()
            if not line:
                break
            seen += line
        url = re.search(r"orchestrator (http://127\.0\.0\.1:\d+)", seen)
        assert url, seen[-3000:]
        assert httpx.get(f"{url.group(1)}/healthz", timeout=10).status_code == 200
        deadline = time.monotonic() + 120  # the agent registers with the service
        while time.monotonic() < deadline and "logged in" not in (
                tmp_path / "up" / "node-1" / "agent.log").read_text():
            time.sleep(0.5)
        assert "logged in" in (tmp_path / "up" / "node-1" / "agent.log").read_text()
        up.send_signal(signal.SIGINT)
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
