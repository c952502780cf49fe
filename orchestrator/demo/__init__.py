"""`mesh demo`: a local grid on anvil + SQLite running one render job end to end.

Nothing is faked: the contracts are deployed on a throwaway anvil, the orchestrator runs as
a real `mesh orchestrator serve` process on a fresh SQLite data dir, and every actor talks to
it over HTTP with wallet-signed requests. Two provider nodes stake, register, report
telemetry and probes (one passes a PoPW handshake); a customer escrows and submits a render
job; the nodes work their leases; one node crashes mid-task and the failure detector moves
its task, from its checkpoint, to the other node; the operator accepts the job, the service's
outbox settles it on chain; then everyone collects and every balance is checked.
The provider nodes are scripted clients (see `actors.ScriptedNode`), not yet the agent.
"""

from __future__ import annotations

import hashlib
import io
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
from eth_account.signers.local import LocalAccount
from eth_utils import keccak
from PIL import Image
from rich.console import Console
from rich.table import Table

from orchestrator.api.schemas import JobSpec
from orchestrator.chain.anvil import Anvil, dev_account, increase_time
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.errors import ChainError
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import Receipt, connect
from orchestrator.demo.actors import DemoError, ScriptedNode, Wallet, expect
from orchestrator.domain.chain_views import EscrowStatus
from orchestrator.domain.types import Tier
from orchestrator.processes import OrchestratorProcess, ServiceError

TOKEN = 10**18
FUNDING = 1_000 * TOKEN
STAKE = 500 * TOKEN
PAYMENT = 10 * TOKEN
FRAMES = 3
CHECKPOINT_AT = 0.5  # progress at which a node checkpoints its frame
CRASH_AT = 0.7  # progress at which the doomed node goes silent
TASK_DURATION_S = 60.0  # expected render time of one frame: the T of each node's RS
DEMO_GPU_CLASS = "cpu"  # PoPW kernel class a CPU can pass in time: there is no GPU here
ORCHESTRATOR_ID = "depin-mesh-demo"  # signed requests are bound to it (EIP-712 salt)
WAIT_S = 90.0  # longest wait for the service to act on its own (death, settlement)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Check:
    what: str
    expected: str
    actual: str

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


def _tokens(units: int) -> str:
    return f"{Decimal(units) / TOKEN:,f} MESH"


class _Log:
    """The compact demo log: one line per step, chain transactions with hash and gas."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.total_gas = 0

    def section(self, title: str) -> None:
        self.console.rule(f"[bold]{title}")

    def step(self, text: str) -> None:
        self.console.print(f"[green]✓[/] {text}")

    def tx(self, step: str, actor: str, receipt: Receipt) -> None:
        self.chain_step(step, actor, receipt.gas_used, receipt.tx_hash)

    def chain_step(self, step: str, actor: str, gas: int, tx_hash: str) -> None:
        self.total_gas += gas
        self.console.print(f"[green]✓[/] [yellow]tx[/] {step:<34} {actor:<17} gas {gas:>7,}  "
                           f"{tx_hash}")


def _wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = WAIT_S,
              every_s: float = 0.5) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(every_s)
    raise DemoError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _frame_bytes(blend: str, frame: int, part: str) -> bytes:
    """A small deterministic stand-in for a rendered frame (no Blender in the scripted node):
    a 32x24 PNG whose pixels follow from the scene, frame and part, so the orchestrator's
    verification can decode and commit it like a real frame."""
    seed = hashlib.sha256(f"scripted render of {blend} frame {frame}: {part}".encode()).digest()
    pixels = np.frombuffer(seed * 72, dtype=np.uint8)[:32 * 24 * 3].reshape(24, 32, 3)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue()


def _service_env(data_dir: Path, rpc_url: str, chain_id: int, admin_key: str) -> dict[str, str]:
    """Everything the service reads, as MESH_* variables (see `orchestrator.config.Settings`).
    The periodic sweep is slowed so that the operator's sweep is the one that shows the
    failure detector's verdict; the outbox sender runs every second."""
    return {"MESH_DATA_DIR": str(data_dir), "MESH_RPC_URL": rpc_url,
            "MESH_CHAIN_ID": str(chain_id), "MESH_ORCHESTRATOR_ID": ORCHESTRATOR_ID,
            "MESH_ORCHESTRATOR_KEY": "0x" + dev_account(1).key.hex(),
            "MESH_SLASHER_KEY": "0x" + dev_account(2).key.hex(),
            "MESH_ADMIN_KEY": admin_key, "MESH_SWEEP_INTERVAL_S": "3600",
            "MESH_OUTBOX_INTERVAL_S": "1", "MESH_JSON_LOGS": "false"}


@dataclass(frozen=True, slots=True)
class _SubmittedJob:
    job_id: bytes
    blend_sha256: str

    @property
    def hex_id(self) -> str:
        return "0x" + self.job_id.hex()


class _Grid:
    """One run of the demo against a live chain and a live orchestrator: each phase is a
    method, in the order `play` calls them."""

    def __init__(self, chain: MeshChain, base_url: str, admin_key: str, log: _Log) -> None:
        self.chain = chain
        self.log = log
        self.base_url = base_url
        self.operator = httpx.Client(base_url=base_url, timeout=30.0,
                                     headers={"x-admin-key": admin_key})
        self.customer_key = dev_account(4)
        self.customer = chain.account(self.customer_key)
        self.providers = {"survivor": chain.account(dev_account(5)),
                          "doomed": chain.account(dev_account(6))}
        self._wallets: list[Wallet] = []
        self.survivor = ScriptedNode("gpu-eu-1", self.wallet(dev_account(5)))
        self.doomed = ScriptedNode("gpu-eu-2", self.wallet(dev_account(6)))
        self.delivered = {"survivor": 0, "doomed": 0}  # frames each provider completed

    def wallet(self, account: LocalAccount) -> Wallet:
        wallet = Wallet(self.base_url, bytes(account.key), str(account.address),
                        chain_id=self.chain.deployment.chain_id, orchestrator_id=ORCHESTRATOR_ID)
        self._wallets.append(wallet)
        return wallet

    def close(self) -> None:
        for node in (self.survivor, self.doomed):
            node.go_silent()
        for wallet in self._wallets:
            wallet.close()
        self.operator.close()

    def play(self) -> list[Check]:
        self.fund_and_stake()
        self.join_the_grid()
        job = self.submit_job()
        self.work_with_a_crash(job)
        settled_status = self.settle(job)
        return self.collect_and_check(job, settled_status)

    def fund_and_stake(self) -> None:
        self.log.section("chain: funds and stake")
        admin = self.chain.account(dev_account(0))
        for who, account in (("customer", self.customer), *self.providers.items()):
            self.log.tx(f"mint test tokens to the {who}", "admin",
                        admin.mint(account.address, FUNDING))
        for name, account in self.providers.items():
            self.log.tx("stake (bond)", f"provider {name}", account.stake(STAKE))

    def join_the_grid(self) -> None:
        log = self.log
        log.section("providers join the grid (scripted nodes, not yet the agent)")
        for node in (self.survivor, self.doomed):
            node.register(gpu_model="RTX4090", vram_gb=24, region="eu", price_per_gpu_hour=100)
            node.start_heartbeats()
            accepted = node.report_gpu(5)
            rtts = sorted(node.answer_probes(5))
            log.step(f"{node.node_id}: registered (signed by {node.wallet.address}), logged in, "
                     f"heartbeating every 0.5 s, {accepted} GPU samples, {len(rtts)} probes "
                     f"(median RTT {rtts[len(rtts) // 2]:.1f} ms)")
        challenge, verdict = self.survivor.handshake(DEMO_GPU_CLASS)
        if not verdict["passed"]:
            raise DemoError(f"PoPW handshake failed: {verdict['reasons']}")
        log.step(f"{self.survivor.node_id}: PoPW handshake passed, tier "
                 f"{Tier(verdict['tier']).name} (small demo kernel: class '{DEMO_GPU_CLASS}', "
                 f"{challenge['size']}x{challenge['size']} matrix, {challenge['rounds']} rounds, "
                 f"{challenge['spot_checks']} spot checks, {challenge['ping_rounds']} timed "
                 "ping rounds)")
        for node in (self.survivor, self.doomed):
            log.step(f"{node.node_id}: {self.reading(node)}")

    def reading(self, node: ScriptedNode) -> str:
        score = expect(self.operator.get(f"/v1/nodes/{node.node_id}/score",
                                         params={"duration_s": TASK_DURATION_S}))
        return (f"RS {score['rs']:.3f} over T={score['duration_s']:.0f}s (survival "
                f"{score['survival']:.3f}, latency {score['stability']:.3f}, thermal "
                f"{score['thermal']:.3f}), tier {Tier(score['tier']).name}")

    def submit_job(self) -> _SubmittedJob:
        self.log.section("customer escrows and submits a render job")
        blend = keccak(text="demo scene.blend").hex()  # stands for the .blend file's sha256
        deadline = int(time.time()) + 3600
        spec = {"workload": {"kind": "blender", "blend_sha256": blend,
                             "frames": {"start": 1, "end": FRAMES}, "tiles": 1},
                "needs": {"min_vram_gb": 16, "priority": "normal",
                          "expected_duration_s": TASK_DURATION_S},
                "deadline": deadline}
        spec_hash = JobSpec.model_validate(spec).canonical_hash()
        job = _SubmittedJob(keccak(text=f"demo render job {deadline}"), blend)
        self.log.tx("escrow the job (createJob)", "customer",
                    self.customer.create_job(job.job_id, PAYMENT, deadline, spec_hash))
        submitted = expect(self.wallet(self.customer_key).send(
            "POST", "/v1/jobs", {"job_id": job.hex_id, "spec": spec},
            headers={"idempotency-key": "demo-job-0001"}))
        self.log.step(f"job {job.hex_id[:18]}… submitted (signed, Idempotency-Key): "
                      f"{submitted['status']}, tasks {submitted['tasks']}; escrow of "
                      f"{_tokens(PAYMENT)} and spec hash 0x{spec_hash.hex()[:16]}… checked "
                      "on chain")
        return job

    def render(self, node: ScriptedNode, lease: dict[str, Any], job: _SubmittedJob) -> None:
        frame = int(lease["payload"]["frame"])
        if not lease["resume_from_sha256"]:
            node.progress(lease["task_id"], 0.2)
            node.checkpoint(lease["task_id"],
                            _frame_bytes(job.blend_sha256, frame, "tiles 1-2 of 4"), CHECKPOINT_AT)
        node.progress(lease["task_id"], 0.9)
        result, status = node.complete(lease["task_id"],
                                       _frame_bytes(job.blend_sha256, frame, "all tiles"))
        self.log.step(f"{node.node_id}: task {lease['task_id']} (frame {frame}) {status}, "
                      f"result sha256 {result[:16]}…")

    def work_with_a_crash(self, job: _SubmittedJob) -> None:
        log, survivor, doomed = self.log, self.survivor, self.doomed
        log.section("nodes work their leases; one crashes mid-task")
        for node, name in ((doomed, "doomed"), (survivor, "survivor")):
            lease = _need(node.pull_lease(), f"a lease for {node.node_id}")
            log.step(f"{node.node_id}: lease {lease['lease_id']} -> task {lease['task_id']} "
                     f"(frame {lease['payload']['frame']}), checkpoint every "
                     f"{lease['checkpoint_interval_s']:.0f} s")
            self.render(node, lease, job)
            self.delivered[name] += 1

        doomed_lease = _need(doomed.pull_lease(), f"a second lease for {doomed.node_id}")
        task_id = doomed_lease["task_id"]
        frame = int(doomed_lease["payload"]["frame"])
        doomed.progress(task_id, 0.3)
        saved = doomed.checkpoint(task_id, _frame_bytes(job.blend_sha256, frame,
                                                        "tiles 1-2 of 4"), CHECKPOINT_AT)
        doomed.progress(task_id, CRASH_AT)
        doomed.go_silent()
        silent_at = time.monotonic()
        log.step(f"{doomed.node_id}: lease {doomed_lease['lease_id']} -> task {task_id} "
                 f"(frame {frame}), checkpoint {saved[:16]}… at {CHECKPOINT_AT:.0%}, progress "
                 f"{CRASH_AT:.0%}, then [bold red]CRASH[/]: its heartbeats stop")

        def swept_dead() -> list[str] | None:
            return expect(self.operator.post("/v1/admin/sweep"))["dead_nodes"] or None

        dead = _wait_for("the failure detector to declare the node dead", swept_dead)
        if dead != [doomed.node_id]:
            raise DemoError(f"expected only {doomed.node_id} dead, the sweep says {dead}")
        log.step(f"operator sweep: the failure detector declares {dead} dead "
                 f"{time.monotonic() - silent_at:.1f} s after its last heartbeat (phi accrual; "
                 "never within 30 s of a node joining) and revokes its lease")
        moved = _need(survivor.pull_lease(), "the revoked task for the survivor")
        if (moved["task_id"], moved["resume_from_sha256"], moved["resume_progress"]) != (
                task_id, saved, CHECKPOINT_AT):
            raise DemoError(f"expected task {task_id} to resume from {saved}, got {moved}")
        log.step(f"{survivor.node_id}: lease {moved['lease_id']} -> task {task_id} resumes "
                 f"from checkpoint {saved[:16]}… at {moved['resume_progress']:.0%} (rework "
                 f"{CRASH_AT - CHECKPOINT_AT:.0%} of a frame, not {CRASH_AT:.0%})")
        late = doomed.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.8})
        if late.status_code != 409:
            raise DemoError(f"the dead node's late report was not refused: {late.text}")
        log.step(f"{doomed.node_id}: its late report is refused "
                 f"({late.json()['error']['code']})")
        self.render(survivor, moved, job)
        self.delivered["survivor"] += 1

    def settle(self, job: _SubmittedJob) -> str:
        """Accept the job and wait for the service's outbox to settle it; returns the
        service's job status once it and the chain agree."""
        log = self.log
        log.section("settlement through the service's chain outbox")
        verified = expect(self.operator.get(f"/v1/jobs/{job.hex_id}"))
        log.step(f"job {verified['status']}: tasks {verified['tasks']}, merkle root "
                 f"{str(verified['merkle_root'])[:18]}…")
        accepted = expect(self.operator.post(f"/v1/admin/jobs/{job.hex_id}/accept"))
        log.step(f"operator accepts the job (a logged override: the scripted nodes serve no "
                 f"verification re-renders; real agents do): {accepted['status']}")

        def settled() -> str | None:
            status = str(expect(self.operator.get(f"/v1/jobs/{job.hex_id}"))["status"])
            return status if status == "settled" else None

        status = _wait_for("the job to settle", settled)
        outbox = sorted(expect(self.operator.get("/v1/admin/outbox")), key=lambda a: a["id"])
        for action in outbox:
            if action["status"] != "confirmed":  # every queued action must have landed
                raise DemoError(f"outbox {action['idempotency_key']} is {action['status']}: "
                                f"{action['note']}")
            gas = self.chain.gas_used(action["tx_hash"])
            log.chain_step(f"outbox {action['kind']} ({action['idempotency_key'][:16]})",
                           "orchestrator", gas, action["tx_hash"])
        escrowed = self.chain.escrowed_job(job.job_id)
        log.step(f"GET /v1/jobs says {status}; the chain says "
                 f"{escrowed.status.name if escrowed else 'nothing'}")
        for name, account in self.providers.items():
            stake = self.chain.provider_stake(account.address)
            log.step(f"provider {name}: bonded {_tokens(stake.bonded)}, locked "
                     f"{_tokens(stake.locked)}")
        return status

    def collect_and_check(self, job: _SubmittedJob, settled_status: str) -> list[Check]:
        chain, log = self.chain, self.log
        log.section("dispute window, claims and withdrawals")
        unbonding = {name: account.request_unbond(STAKE)
                     for name, account in self.providers.items()}
        for name, (_, receipt) in unbonding.items():
            log.tx("request unbond of the whole stake", f"provider {name}", receipt)
        wait = max(chain.settlement_dispute_window() + chain.payout_period(),
                   chain.unbonding_period()) + 1
        increase_time(chain.w3, wait)
        log.step(f"time travel {wait:,} s past the dispute window and unbonding period")
        claimed: dict[str, int] = {}
        for name, account in self.providers.items():
            claimed[name], receipt = account.claim()
            log.tx("claim the payout", f"provider {name}", receipt)
        refund, receipt = self.customer.claim_refund(job.job_id)
        log.tx("claim the refund", "customer", receipt)
        for name, account in self.providers.items():
            log.tx("withdraw the unbonded stake", f"provider {name}",
                   account.withdraw(unbonding[name][0]))

        payout = {name: PAYMENT * count // FRAMES for name, count in self.delivered.items()}
        expected_refund = PAYMENT - sum(payout.values())  # integer rounding of per-frame pay
        escrowed = chain.escrowed_job(job.job_id)

        def tokens(what: str, expected: int, actual: int) -> Check:
            return Check(what, _tokens(expected), _tokens(actual))

        return [
            *(tokens(f"{name} payout ({self.delivered[name]}/{FRAMES} frames)", payout[name],
                     claimed[name]) for name in self.providers),
            *(tokens(f"{name} tokens", FUNDING + payout[name],
                     chain.token_balance(account.address))
              for name, account in self.providers.items()),
            tokens("customer refund", expected_refund, refund),
            tokens("customer tokens", FUNDING - PAYMENT + expected_refund,
                   chain.token_balance(self.customer.address)),
            tokens("left in JobEscrow", 0, chain.token_balance(chain.job_escrow.address)),
            tokens("left in StakeManager", 0, chain.token_balance(chain.stake_manager.address)),
            Check("job on chain", EscrowStatus.SETTLED.name,
                  escrowed.status.name if escrowed else "missing"),
            Check("job in the service", "settled", settled_status),
        ]


def _need(value: T | None, what: str) -> T:
    if value is None:
        raise DemoError(f"expected {what}, the service had none")
    return value


def run() -> None:
    """Play the demo; exit non-zero if any step fails or any balance is off."""
    # One line per step even when piped (a log file, the test), whatever the terminal width.
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 140)
    log = _Log(console)
    admin_key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="mesh-demo-") as tmp, Anvil() as anvil:
        data_dir = Path(tmp)
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        deployment.save(data_dir)
        console.print(f"[bold]anvil[/] {anvil.rpc_url}; token {deployment.token}, StakeManager "
                      f"{deployment.stake_manager}, JobEscrow {deployment.job_escrow}; "
                      f"data dir {data_dir} (SQLite)")
        service = OrchestratorProcess(
            _service_env(data_dir, anvil.rpc_url, anvil.chain_id, admin_key),
            data_dir / "orchestrator.log")
        try:
            with service:
                console.print(f"[bold]orchestrator[/] `mesh orchestrator serve` at "
                              f"{service.base_url} (healthy)")
                grid = _Grid(MeshChain(w3, deployment), service.base_url, admin_key, log)
                try:
                    checks = grid.play()
                finally:
                    grid.close()
        except (ChainError, DemoError, ServiceError, httpx.HTTPError) as exc:
            console.print(f"[bold red]✗ a step failed:[/] {exc}")
            console.print(f"[dim]orchestrator log (last lines):\n{service.log_tail()}[/]")
            raise SystemExit(1) from exc

    report(console, checks, total_gas=log.total_gas)


def report(console: Console, checks: list[Check], *, total_gas: int) -> None:
    """Print every check; exit 1 unless all of them hold."""
    results = Table(title=f"balances and states (total gas {total_gas:,})")
    for column in ("check", "expected", "actual", ""):
        results.add_column(column)
    for check in checks:
        results.add_row(check.what, check.expected, check.actual,
                        "[green]ok[/]" if check.ok else "[bold red]WRONG[/]")
    console.print(results)
    if not all(check.ok for check in checks):
        console.print("[bold red]demo failed: balances are off[/]")
        raise SystemExit(1)
    console.print("[bold green]demo passed[/]")
