"""The demo's scenario, one phase a step: real agents render the sample animation on a local
grid, end to end.

Nothing is scripted: every step waits for the grid (`mesh.localgrid`: anvil, the orchestrator
as a `mesh orchestrator serve` process, N `mesh agent run` processes, each with its own
keystore, funded and staked on chain) to do what it promises, and checks it against the
service or the chain. Two behaviours are simulated and labelled so: `churn` (the demo SIGKILLs
that agent, Blender and all, after its first checkpoint of a frame, and starts it again once
the frame has resumed elsewhere) and `lazy` (the real agent with `mesh.bench.cheaters`' lazy
renderer: a quarter of the samples, relabelled as the whole plan). Verification catches the
lazy node, the service slashes its collateral on chain and demotes it, the lazy provider
disputes the slash and the arbiter, having read its evidence bundle, dismisses it, the job
settles on its own, the customer downloads the frames, and after the dispute windows everyone
collects: every balance is checked against what the service settled and slashed
(`mesh.demo.checks`).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from eth_utils import keccak
from rich.console import Console
from rich.live import Live

from mesh.customer import download
from mesh.demo.board import Board, Node, tokens
from mesh.demo.checks import Check
from mesh.localgrid import PAYMENT, STAKE, Grid
from orchestrator.chain.anvil import dev_account, increase_time, mine
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.chain.tx import Receipt
from orchestrator.domain.chain_views import EscrowStatus, SlashStatus
from orchestrator.domain.ids import JobId
from orchestrator.domain.types import SlashReason, Tier
from protocol import keystore
from protocol.client import expect

TOKEN = 10**18
FINALITY_BLOCKS = 65  # anvil's `finalized` block trails its head by 64 (the indexer waits)
FUNDING = 1_000 * TOKEN  # minted to the customer and the arbiter
FRAMES = 6
RESOLUTION = (96, 72)
RENDER: dict[str, Any] = {"samples": 32, "chunk_samples": 8,  # 4 chunks a frame
                          "resolution": list(RESOLUTION)}
PROFILES = {"steady": "steady", "churn": "simulated churn: killed mid-frame, comes back",
            "lazy": "simulated cheater: renders 1/4 of the samples"}
STEP_TIMEOUT_S = 240.0
T = TypeVar("T")


class DemoError(RuntimeError):
    """A step of the demo did not happen as the grid promises."""


def _mesh(units: int) -> str:
    return f"{Decimal(units) / TOKEN:,f} MESH"


class Demo:
    """One run: each phase a method, in the order `play` calls them."""

    def __init__(self, grid: Grid, chain: MeshChain, console: Console, providers: int,
                 out: Path) -> None:
        self.grid, self.chain, self.console, self.out = grid, chain, console, out
        self.board = Board(grid, chain, console)
        self.events: list[tuple[float, str]] = []  # (s since start, what) for the RS plot
        self.total_gas = 0
        self.gas_by_job: dict[str, int] = {}
        self.dispute: dict[str, Any] = {}  # the lazy node's dispute of its slash, as ruled
        names = ["steady"] * (providers - 2) + ["churn", "lazy"]
        self.kinds = {f"{kind}-{i}": kind for i, kind in enumerate(names, 1)}

    # ----- output ----------------------------------------------------------------------------
    def step(self, text: str, *, event: str | None = None) -> None:
        at = time.monotonic() - self.board.began
        self.console.print(f"[dim]{at:6.1f}s[/] [green]✓[/] {text}")
        if event:
            self.events.append((at, event))

    def tx(self, what: str, actor: str, receipt: Receipt) -> None:
        self.chain_step(what, actor, receipt.gas_used, receipt.tx_hash)

    def chain_step(self, what: str, actor: str, gas: int, tx_hash: str) -> None:
        self.total_gas += gas
        self.step(f"[yellow]tx[/] {what:<36} {actor:<12} gas {gas:>8,}  {tx_hash}")

    def until(self, what: str, probe: Callable[[], T | None],
              timeout_s: float = STEP_TIMEOUT_S) -> T:
        """Poll `probe` once a second, refreshing the board meanwhile (never a silent wait)."""
        self.board.wait(what)
        deadline = time.monotonic() + timeout_s
        while True:
            self.board.poll()
            found = probe()
            if found is not None:
                return found
            failed = [job for job, status in self.board.job_status.items() if status == "failed"]
            if failed:
                raise DemoError(f"job {failed[0]} failed: see the agents' logs")
            time.sleep(1.0)
            if time.monotonic() > deadline:
                raise DemoError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            for node in self.board.nodes:
                if node.agent.process is not None and node.agent.process.poll() not in (
                        None, -9) and node.kind != "churn":
                    raise DemoError(f"agent {node.name} exited with "
                                    f"{node.agent.process.returncode}: {node.agent.log()[-800:]}")

    # ----- the run ---------------------------------------------------------------------------
    def play(self) -> tuple[list[Check], dict[str, Any]]:
        scene = self.grid.root / "scene.blend"  # built with bpy meanwhile
        build_log = self.grid.root / "scene.log"
        with build_log.open("wb") as log:
            build = subprocess.Popen([sys.executable, "-m", "mesh.sample_scene",
                                      str(scene)], stdout=log, stderr=subprocess.STDOUT)
        self.fund()
        with Live(self.board, console=self.console, refresh_per_second=2):
            self.start_agents()
            self.until("the sample scene's build", lambda: build.poll())
            if build.returncode != 0:
                raise DemoError(f"building the sample scene failed: "
                                f"{build_log.read_text(errors='replace')[-800:]}")
            job = self.submit(scene)
            self.kill_mid_frame_and_resume()
            self.catch_the_lazy_node()
            self.dispute_the_slash()
            settle = self.settle(job)
        if not self.console.is_terminal:  # Live leaves its last frame's final line open there
            self.console.line()
        frames = self.download(job)
        checks = self.collect_and_check(job, settle)
        return checks, self.summary(job, settle, frames)

    def fund(self) -> None:
        self.console.rule("[bold]chain: funds and stake")
        admin = self.chain.account(dev_account(0))
        for who, key in (("customer", dev_account(4)), ("arbiter", dev_account(3))):
            self.tx(f"mint {_mesh(FUNDING)} to the {who}", "admin",
                    admin.mint(key.address, FUNDING))
        for name, kind in self.kinds.items():
            launcher = ([sys.executable, "-m", "mesh.bench.cheating_agent", "lazy"]
                        if kind == "lazy" else None)
            agent = self.grid.agent(name, launcher=launcher)  # mints and stakes (own wallet)
            self.board.nodes.append(Node(agent, PROFILES[kind], kind))
            self.step(f"{name}: wallet {agent.address} (keystore {agent.keystore}), "
                      f"{_mesh(STAKE)} minted and bonded on chain; profile: {PROFILES[kind]}")

    def start_agents(self) -> None:
        self.console.rule("[bold]providers join: `mesh agent run`, one render thread each")
        agents = [node.agent.start() for node in self.board.nodes]
        self.until("the agents to register and log in",
                   lambda: all("logged in" in a.log() for a in agents) or None)
        self.step(f"{len(agents)} agents registered (wallet-signed) and logged in; heartbeats "
                  "every 0.5 s", event="agents joined")

    def submit(self, scene: Path) -> str:
        self.console.rule("[bold]the customer escrows and submits the sample animation")
        job = self.grid.submit(scene, frames={"start": 1, "end": FRAMES}, **RENDER)
        escrow = self.grid.escrows[job]
        self.tx("escrow the job (createJob)", "customer", escrow)
        self.gas_by_job[job] = escrow.gas_used
        width, height = RESOLUTION
        self.step(f"job {job[:18]}… submitted (signed): {FRAMES} frames of "
                  f"{scene.name} ({scene.stat().st_size:,} bytes, uploaded by hash) at "
                  f"{width}x{height}, {RENDER['samples']} samples in chunks of "
                  f"{RENDER['chunk_samples']}", event="job submitted")
        self.board.add_job(job, f"job {job[:10]}…", FRAMES)
        return job

    def node(self, kind: str) -> Node:
        return next(n for n in self.board.nodes if n.kind == kind)

    def kill_mid_frame_and_resume(self) -> None:
        churn = self.node("churn")
        checkpoint = re.compile(r"task (\d+): checkpoint 1/")
        found: list[str] = []
        stop = threading.Event()

        def kill_at_first_checkpoint() -> None:
            """Its own thread: the board's poll takes seconds on a busy machine, a chunk less."""
            while not stop.wait(0.02):
                match = checkpoint.search(churn.agent.log())
                if match:
                    churn.agent.kill()
                    found.append(match.group(1))
                    return

        killer = threading.Thread(target=kill_at_first_checkpoint, daemon=True)
        killer.start()
        try:
            task = self.until(f"{churn.name} to checkpoint a frame",
                              lambda: found[0] if found else None)
        finally:
            stop.set()
            killer.join()
        last = re.findall(rf"task {task}: checkpoint (\d+/\d+) (\w+)", churn.agent.log())[-1]
        self.step(f"[bold red]KILL[/] {churn.name} (SIGKILL, its Blender worker too) "
                  f"mid-frame: task {task} after checkpoint {last[0]} ({last[1]})",
                  event=f"{churn.name} killed")
        resumed = re.compile(rf"task {task}: resumes with (\d+) of (\d+) chunks from "
                             r"checkpoint (\w+)")

        def elsewhere() -> tuple[Node, re.Match[str]] | None:
            for node in self.board.nodes:
                match = resumed.search(node.agent.log()) if node is not churn else None
                if match:
                    return node, match
            return None

        rescuer, match = self.until(f"task {task} to resume on another node", elsewhere)
        self.step(f"{rescuer.name}: task {task} resumes from checkpoint {match.group(3)} with "
                  f"{match.group(1)} of {match.group(2)} chunks done, not from scratch",
                  event="frame resumed")
        churn.agent.start()
        self.step(f"{churn.name} comes back (simulated churn): a new process, a new session")

    def catch_the_lazy_node(self) -> None:
        lazy = self.node("lazy")

        def failed() -> int | None:
            count = self.board.verification["by_node"].get(lazy.name, {}).get("failed", 0)
            return int(count) or None

        self.until(f"verification to re-render {lazy.name}'s windows", failed)
        self.step(f"verification: {lazy.name}'s result [bold red]failed[/]: windows re-rendered "
                  "by two other providers match each other, not it (evidence stored)",
                  event="lazy caught")

        def slashed() -> dict[str, Any] | None:
            return next((a for a in self.grid.outbox("slash")
                         if a["payload"]["provider"] == lazy.agent.address
                         and a["status"] == "confirmed"), None)

        slash = self.until(f"the slash of {lazy.name} on chain", slashed)
        self.chain_step(f"slash {lazy.name}: {SlashReason(slash['payload']['reason']).name}",
                        "slasher", self.chain.gas_used(slash["tx_hash"]), slash["tx_hash"])
        self.events.append((time.monotonic() - self.board.began, "slashed"))
        self.until(f"{lazy.name} to be demoted", lambda: lazy.tier == Tier.BACKGROUND or None)
        self.step(f"{lazy.name} demoted to {Tier.BACKGROUND.name} (background work only); "
                  f"bonded now {tokens(lazy.bonded)} MESH", event="demoted")

    def dispute_the_slash(self) -> None:
        """The lazy node's provider disputes its slash with its own wallet; the arbiter reads
        the slash's evidence bundle from the service and, the re-rendered windows being
        against it, dismisses the dispute from its own wallet; the service indexes both."""
        lazy = self.node("lazy")
        slash = next(s for s in self.slashes() if s.provider == lazy.agent.address
                     and s.reason is SlashReason.FAILED_VERIFICATION)
        bond = self.chain.dispute_bond()
        self.tx(f"mint the dispute bond ({_mesh(bond)}) to {lazy.name}", "admin",
                self.chain.account(dev_account(0)).mint(lazy.agent.address, bond))
        began = time.monotonic()
        dispute_id, opened = self.providers()[lazy.name].open_slash_dispute(
            slash.slash_id, keccak(text=f"{lazy.name}: my frames were rendered in full"))
        self.tx(f"dispute slash {slash.slash_id} (the bond is posted)", lazy.name, opened)
        arbiter = self.grid.wallet(3)
        try:
            def ruling_of(status: str) -> dict[str, Any] | None:
                mine(self.chain.w3, FINALITY_BLOCKS)  # final for the indexer
                listed = expect(arbiter.send("GET", "/v1/disputes"))
                return next((d for d in listed if d["dispute_id"] == dispute_id
                             and d["status"] == status), None)

            self.until(f"the service to index dispute {dispute_id}", lambda: ruling_of("open"))
            bundle = expect(arbiter.send("GET", f"/v1/slashes/{slash.slash_id}/evidence"))
            self.step(f"arbiter: slash {slash.slash_id}'s evidence bundle reads "
                      f"{bundle['reason']}, {len(bundle['records'])} decision record(s)")
            ruled = self.chain.account(dev_account(3)).resolve_dispute(dispute_id,
                                                                     granted=False)
            self.tx(f"dismiss dispute {dispute_id}: the slash stands", "arbiter", ruled)
            self.until("the service to reflect the ruling", lambda: ruling_of("dismissed"))
        finally:
            arbiter.close()
        self.dispute = {"dispute_id": dispute_id, "ruling": "dismissed", "bond": bond,
                        "bond_to": slash.beneficiary,
                        "opened_to_reflected_s": round(time.monotonic() - began, 1)}
        self.step(f"dispute {dispute_id} dismissed, reflected by the service "
                  f"{self.dispute['opened_to_reflected_s']} s after it was opened",
                  event="dispute ruled")

    def settle(self, job: str) -> dict[str, Any]:
        def settled() -> dict[str, Any] | None:
            if self.grid.job(job)["status"] != "settled":
                return None
            return next((a for a in self.grid.outbox("settle")
                         if a["payload"]["job_id"] == job and a["status"] == "confirmed"), None)

        action = self.until("every frame verified and the job settled on chain", settled)
        # the assignment roots that committed its collateral (one root may serve other jobs)
        for tx_hash in {a["tx_hash"] for a in self.grid.outbox("assign")
                        if a["payload"]["job_id"] == job and a["tx_hash"]}:
            self.gas_by_job[job] += self.chain.gas_used(tx_hash)
        gas = self.chain.gas_used(action["tx_hash"])
        self.gas_by_job[job] += gas
        self.chain_step("settle the job (outbox)", "orchestrator", gas, action["tx_hash"])
        escrowed = self.chain.escrowed_job(JobId(job).raw)
        self.step(f"job settled: the service says settled, the chain says "
                  f"{escrowed.status.name if escrowed else 'nothing'}", event="settled")
        return action

    def download(self, job: str) -> list[Path]:
        assert self.grid.customer is not None
        done = download(self.grid.customer, job, self.out / "frames", show_progress=False)
        frames = sorted(p for p in done.files if p.suffix == ".png")
        self.step(f"the customer downloaded {len(done.files)} results, every sha256 checked, "
                  f"to {self.out / 'frames'}")
        return frames

    # ----- money -----------------------------------------------------------------------------
    def providers(self) -> dict[str, MeshAccount]:
        return {n.name: self.chain.account(keystore.load(n.agent.keystore,
                                                         n.agent.password.read_text()))
                for n in self.board.nodes}

    def slashes(self) -> list[Any]:
        found, slash_id = [], 1
        while (record := self.chain.slash_of(slash_id)) is not None:
            found.append(record)
            slash_id += 1
        return found

    def collect_and_check(self, job: str, settle: dict[str, Any]) -> list[Check]:
        chain = self.chain
        self.console.rule("[bold]dispute windows, claims and withdrawals")
        job_id = JobId(job).raw
        accounts = self.providers()
        customer = chain.account(dev_account(4))
        before = {name: chain.token_balance(a.address) for name, a in accounts.items()}
        slashes = self.slashes()
        now = int(chain.w3.eth.get_block("latest")["timestamp"])
        # leaving the grid: the standing reservations that backed the work lapse by themselves
        wait = max([chain.settlement_dispute_window() + chain.payout_period(),
                    *(s.releasable_at - now for s in slashes),
                    *(chain.provider_stake(a.address).reserved_until - now
                      for a in accounts.values())]) + 1
        increase_time(chain.w3, wait)
        self.step(f"time travel {wait:,} s past the dispute windows and the reservations")
        still_locked = [a.address for a in accounts.values() if chain.locked_for(job_id,
                                                                               a.address)]
        if still_locked:
            self.tx("release the rest of the job's collateral", "customer",
                    customer.release_collateral(job_id, still_locked))
        for record in slashes:
            if record.status is SlashStatus.PENDING:
                self.tx(f"release slash {record.slash_id} to its beneficiary", "customer",
                        customer.release_slash(record.slash_id))
        claimed: dict[str, int] = {}
        unbonding: dict[str, int] = {}
        for name, account in accounts.items():
            if chain.escrow_balance(account.address).claimable:
                claimed[name], receipt = account.claim()
                self.tx("claim the payout", name, receipt)
            stake = chain.provider_stake(account.address)
            if stake.free:
                unbonding[name], receipt = account.request_unbond(stake.free)
                self.tx("request unbond of the whole stake", name, receipt)
        increase_time(chain.w3, chain.unbonding_period() + 1)
        self.step(f"time travel {chain.unbonding_period() + 1:,} s past the unbonding period")
        for name, lock_id in unbonding.items():
            self.tx("withdraw the unbonded stake", name, accounts[name].withdraw(lock_id))
        refund = 0
        if chain.refund_owed(job_id):  # nothing left when every frame was paid for
            refund, receipt = customer.claim_refund(job_id)
            self.tx("claim the refund", "customer", receipt)

        payout = dict(zip(settle["payload"]["providers"],
                          (int(p) for p in settle["payload"]["payouts"]), strict=True))
        slashed = {name: sum(s.amount for s in slashes if s.provider == a.address)
                   for name, a in accounts.items()}
        to_customer = sum(s.amount for s in slashes if s.beneficiary == customer.address)
        if self.dispute.get("bond_to") == customer.address:  # a dismissed dispute's bond
            to_customer += self.dispute["bond"]
        lazy = self.node("lazy")

        def tokens_check(what: str, expected: int, actual: int) -> Check:
            return Check(what, _mesh(expected), _mesh(actual))

        escrowed = chain.escrowed_job(job_id)
        return [
            *(tokens_check(f"{name} payout claimed (as settled)", payout.get(a.address, 0),
                           claimed.get(name, 0)) for name, a in accounts.items()),
            *(tokens_check(f"{name} tokens (stake back less slashes)",
                           before[name] + payout.get(a.address, 0) + STAKE - slashed[name],
                           chain.token_balance(a.address)) for name, a in accounts.items()),
            Check(f"{lazy.name} slashed for a failed verification", "yes",
                  "yes" if any(s.provider == lazy.agent.address
                               and s.reason is SlashReason.FAILED_VERIFICATION
                               for s in slashes) else "no"),
            tokens_check(f"{lazy.name} paid", 0, payout.get(lazy.agent.address, 0)),
            tokens_check("customer refund", PAYMENT - sum(payout.values()), refund),
            tokens_check("customer tokens", FUNDING - PAYMENT + refund + to_customer,
                         chain.token_balance(customer.address)),
            tokens_check("left in JobEscrow", 0, chain.token_balance(chain.job_escrow.address)),
            tokens_check("left in StakeManager", 0,
                         chain.token_balance(chain.stake_manager.address)),
            tokens_check("left in Disputes", 0, chain.token_balance(chain.disputes.address)),
            Check("job on chain", EscrowStatus.SETTLED.name,
                  escrowed.status.name if escrowed else "missing"),
            Check("job in the service", "settled", self.grid.job(job)["status"]),
        ]

    def summary(self, job: str, settle: dict[str, Any], frames: list[Path]) -> dict[str, Any]:
        logs = [n.agent.log() for n in self.board.nodes]
        by_node = self.board.verification["by_node"]
        slashes = self.slashes()
        return {
            "jobs_settled": sum(1 for j in self.board.jobs
                                if self.grid.job(j)["status"] == "settled"),
            "frames_rendered": len(frames),
            "resumes": sum(len(re.findall(r"resumes with \d+ of", log)) for log in logs),
            "slashes": len(slashes),
            "slashes_by_reason": {r.name.lower(): sum(1 for s in slashes if s.reason is r)
                                  for r in SlashReason if any(s.reason is r for s in slashes)},
            "verification_failures_caught": sum(v.get("failed", 0) for v in by_node.values()),
            "verification_passed": sum(v.get("passed", 0) for v in by_node.values()),
            "settlement_tx": settle["tx_hash"],
            "dispute": {key: value for key, value in self.dispute.items()
                        if key in ("dispute_id", "ruling", "opened_to_reflected_s")},
            "gas_per_job": self.gas_by_job[job],
            "gas_total": self.total_gas,
            "job_id": job,
            "render": {"frames": FRAMES, **RENDER},
            "nodes": {n.name: {"profile": n.profile, "address": n.agent.address,
                               "final_rs": n.rs, "tier": None if n.tier is None
                               else Tier(n.tier).name, "verification": by_node.get(n.name, {})}
                      for n in self.board.nodes},
        }
