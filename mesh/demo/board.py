"""The demo's live view: a progress bar per job, a table of the nodes (profile, RS, tier,
stake, state) and what the demo is waiting for, refreshed from the service and the chain once
a second. Without a terminal (a log, a test) it prints a status line every few seconds instead,
so a wait is never silent. It also keeps each node's RS over time for the plot."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table

from mesh.localgrid import ADMIN_KEY, AgentProcess, Grid
from orchestrator.chain.sdk import MeshChain
from orchestrator.domain.types import Tier
from protocol.client import expect

TOKEN = 10**18
TASK_DURATION_S = 60.0  # the T each node's RS is conditioned on: about a demo frame and more
STATUS_EVERY_S = 5.0  # the status line's period when there is no live terminal
ACTIVITY = re.compile(r"lease \d+: task (\d+)|check (\d+) \(|task (\d+): result \S+ acknowledged"
                      r"|task (\d+): checkpoint (\d+/\d+)")


def tokens(units: int) -> str:
    return f"{Decimal(units) / TOKEN:,.2f}"


@dataclass
class Node:
    """One agent of the demo and what was last read about it."""

    agent: AgentProcess
    profile: str  # "steady", or a simulated behaviour, said as such
    kind: str  # steady, churn or lazy
    rs: float | None = None
    tier: int | None = None
    bonded: int = 0
    locked: int = 0
    history: list[tuple[float, float]] = field(default_factory=list)  # (s since start, RS)

    @property
    def name(self) -> str:
        return self.agent.name

    def state(self) -> str:
        process = self.agent.process
        if process is None:
            return "starting"
        if process.poll() is not None:
            return "[red]offline (killed)[/]"
        if self.tier == Tier.BACKGROUND:
            return "[yellow]demoted: background work only[/]"
        matches = list(ACTIVITY.finditer(self.agent.log()[-4000:]))
        if not matches:
            return "idle" if "logged in" in self.agent.log() else "joining"
        leased, check, acked, task, step = matches[-1].groups()
        if leased:
            return f"rendering task {leased}"
        if task:
            return f"rendering task {task} (checkpoint {step})"
        if check:
            return f"re-rendering check {check}"
        return f"idle (task {acked} delivered)"


class Board:
    def __init__(self, grid: Grid, chain: MeshChain, console: Console) -> None:
        self.grid = grid
        self.chain = chain
        self.console = console
        self.live_terminal = console.is_terminal
        self.nodes: list[Node] = []
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                                 console=console)
        self.jobs: dict[str, TaskID] = {}
        self.job_status: dict[str, str] = {}  # as last read
        self.verification: dict[str, Any] = {"by_node": {}, "overturned": 0}
        self.waiting = "starting"
        self.waiting_since = time.monotonic()
        self.began = time.monotonic()
        self._last_status = 0.0
        self._http = httpx.Client(timeout=10.0, headers={"x-admin-key": ADMIN_KEY})

    def close(self) -> None:
        self._http.close()

    def add_job(self, job_id: str, label: str, tasks: int) -> None:
        self.jobs[job_id] = self.progress.add_task(label, total=tasks, detail="submitted")

    def wait(self, what: str) -> None:
        self.waiting, self.waiting_since = what, time.monotonic()

    def poll(self) -> None:
        """Read the jobs, the verification counts, each node's score and stake."""
        now = time.monotonic() - self.began
        for job_id, bar in self.jobs.items():
            job = self.grid.job(job_id)
            self.job_status[job_id] = str(job["status"])
            counts = job["tasks"]
            finished = counts.get("done", 0) + counts.get("verified", 0)
            detail = f"{job['status']}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            self.progress.update(bar, completed=finished, detail=detail)
        base = self.grid.url
        self.verification = expect(self._http.get(f"{base}/v1/admin/verification"))
        for node in self.nodes:
            answer = self._http.get(f"{base}/v1/nodes/{node.name}/score",
                                    params={"duration_s": TASK_DURATION_S})
            if answer.status_code == 200:
                score = answer.json()
                node.rs, node.tier = float(score["rs"]), int(score["tier"])
                node.history.append((now, node.rs))
            stake = self.chain.provider_stake(node.agent.address)
            node.bonded, node.locked = stake.bonded, stake.locked
        if not self.live_terminal and time.monotonic() - self._last_status >= STATUS_EVERY_S:
            self._last_status = time.monotonic()
            self.console.print(f"[dim]… {self.status()}[/]")

    def status(self) -> str:
        waited = time.monotonic() - self.waiting_since
        jobs = "; ".join(f"{self.progress.tasks[bar].description} "
                         f"{self.progress.tasks[bar].completed:.0f}/"
                         f"{self.progress.tasks[bar].total:.0f} frames, "
                         f"{self.progress.tasks[bar].fields['detail']}"
                         for bar in self.jobs.values())
        checked = self.verification.get("by_node", {})
        passed = sum(v.get("passed", 0) for v in checked.values())
        failed = sum(v.get("failed", 0) for v in checked.values())
        return (f"waiting for {self.waiting} ({waited:.0f} s) | {jobs or 'no job yet'} | "
                f"verification: {passed} passed, {failed} failed")

    def table(self) -> Table:
        table = Table(title="nodes (RS over T = 60 s; stake in MESH, on chain)",
                      title_justify="left")
        for column in ("node", "profile", "RS", "tier", "bonded", "locked", "checks", "state"):
            table.add_column(column)
        for node in self.nodes:
            checks = self.verification.get("by_node", {}).get(node.name, {})
            table.add_row(node.name, node.profile,
                          "-" if node.rs is None else f"{node.rs:.3f}",
                          "-" if node.tier is None else Tier(node.tier).name,
                          tokens(node.bonded), tokens(node.locked),
                          ", ".join(f"{n} {s}" for s, n in sorted(checks.items())) or "-",
                          node.state())
        return table

    def __rich__(self) -> Group:
        return Group(self.progress, self.table(), f"[cyan]{self.status()}[/]")
