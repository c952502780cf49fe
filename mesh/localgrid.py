"""A local grid of real processes, for `mesh bench render` and the agent tests: the
orchestrator as a `mesh orchestrator serve` process on loopback against an anvil deployment,
agents as `mesh agent run` processes (own keystore, state dir and log each, each provider
funded and staked on chain), and a customer who escrows on chain, uploads the .blend and submits
the job, all signed. Placement runs through the PLS gates as in production: each lease locks
risk-priced collateral, which the service's outbox sends to the chain with the orchestrator's
key, and a slash goes there with the slasher's."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
from eth_utils import keccak, to_checksum_address

from mesh.customer import submit_job
from mesh.processes import OrchestratorProcess, kill_tree
from orchestrator.api.schemas import JobSpec
from orchestrator.chain.anvil import Anvil, dev_account, set_balance
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import Receipt, connect
from orchestrator.config import Settings
from orchestrator.domain.ids import JobId, hex0x
from orchestrator.processes import stop_process
from protocol import keystore
from protocol.client import Wallet, expect

ORCHESTRATOR_ID = "depin-mesh-local-grid"
ADMIN_KEY = "test-admin"
STAKE = 1_000 * 10**18  # each agent's provider bonds this (collateral is a share of a task)
PAYMENT = 10**18  # what the customer escrows for a job
LOCAL_SCRYPT_N = 2**12  # keystores of a throwaway chain: opened by every agent at once
T = TypeVar("T")


class GridError(RuntimeError):
    """Something the grid waited for did not happen."""


class FolderInUse(GridError):
    """Another grid holds the folder: starting here would wipe its database and wallets."""


WALLET_FILES = frozenset({"key.json", "password"})  # an agent's keystore and its password
LOCK_FILE = "grid.lock"


@contextlib.contextmanager
def grid_folder(out: Path) -> Iterator[Path]:
    """Hold `out` for one grid's life (an exclusive lock the OS drops when this process ends,
    killed or not). While another grid holds it, raise `FolderInUse` and touch nothing.
    Otherwise the previous run's state there (its chain's database, logs, frames) is cleared,
    and its agents' wallets are kept, for the next grid's agents to use again."""
    out.mkdir(parents=True, exist_ok=True)
    lock = (out / LOCK_FILE).open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise FolderInUse(f"a grid is already running in {out} (pid {holder}); stop it first "
                          "(Ctrl-C where it runs) or give this one another --out") from None
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        for path in sorted(out.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                with contextlib.suppress(OSError):  # a folder still holding a wallet stays
                    path.rmdir()
            elif path.name not in WALLET_FILES and path != out / LOCK_FILE:
                path.unlink()
        yield out
    finally:
        lock.close()


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 120.0) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found is not None and found is not False:
            return found
        time.sleep(0.2)
    raise GridError(f"timed out after {timeout_s:.0f}s waiting for {what}")


class Grid:
    def __init__(self, chain: MeshChain, root: Path, *, rpc_url: str) -> None:
        self.chain = chain
        self.root = root
        self.rpc_url = rpc_url
        self.data_dir = root / "orchestrator"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        chain.deployment.save(self.data_dir)
        self.env = {"MESH_DATA_DIR": str(self.data_dir), "MESH_RPC_URL": rpc_url,
                    "MESH_CHAIN_ID": str(chain.deployment.chain_id),
            "MESH_ORCHESTRATOR_ID": ORCHESTRATOR_ID,
            "MESH_ORCHESTRATOR_KEY": hex0x(dev_account(1).key),
            "MESH_SLASHER_KEY": hex0x(dev_account(2).key),
            "MESH_SESSION_SECRET": secrets.token_hex(16), "MESH_LEASE_TTL_S": "4",
            "MESH_SWEEP_INTERVAL_S": "0.5", "MESH_JSON_LOGS": "false",
            "MESH_ADMIN_KEY": ADMIN_KEY}
        self.service: OrchestratorProcess | None = None
        self.port: int | None = None
        self.customer: Wallet | None = None
        self.agents: list[AgentProcess] = []
        self.escrows: dict[str, Receipt] = {}  # job id -> the customer's createJob receipt

    def start(self, **env: str) -> Grid:
        self.service = OrchestratorProcess({**self.env, **env}, self.data_dir / "service.log",
                                           port=self.port)
        self.service.__enter__()
        self.port = self.service.port
        self.customer = self.wallet(4)
        return self

    def wallet(self, dev_index: int) -> Wallet:
        """A signing client of the service for dev account `dev_index` (4 the customer, 3 the
        arbiter); the caller closes it."""
        account = dev_account(dev_index)
        return Wallet.connect(self.url, bytes(account.key),
                              chain_id=self.chain.deployment.chain_id,
                              orchestrator_id=ORCHESTRATOR_ID)

    def stop_service(self, *, kill: bool = False) -> None:
        if self.service is not None:
            if kill:
                self.service.kill()
            else:
                self.service.stop()

    @property
    def url(self) -> str:
        assert self.service is not None
        return self.service.base_url

    @property
    def database_url(self) -> str:
        """The service's database, where its settings put it (SQLite in its data dir)."""
        return Settings(data_dir=self.data_dir).sqlalchemy_url

    def client_env(self) -> Path:
        """What the `mesh` commands need to reach this grid, where they look: `mesh.env`
        (MESH_* settings, for `set -a; . mesh.env`) and a wallet dir holding the customer's
        (dev account 4) and the arbiter's (dev account 3) keystores, both locked with the
        password in `wallets/password`; MESH_WALLET names the arbiter's, the wallet dispute
        and arbiter commands sign with by default (docs/arbiters.md). Returns the env file's
        path."""
        wallets = self.root / "wallets"
        wallets.mkdir(exist_ok=True)
        password = wallets / "password"
        password.write_text(secrets.token_hex(8))
        for name, index in (("customer", 4), ("arbiter", 3)):
            (wallets / f"{name}.json").unlink(missing_ok=True)
            keystore.create(wallets / f"{name}.json", password.read_text(),
                            bytes(dev_account(index).key), scrypt_n=LOCAL_SCRYPT_N)
        settings = {"MESH_RPC_URL": self.rpc_url,
                    "MESH_CHAIN_ID": str(self.chain.deployment.chain_id),
                    "MESH_DATA_DIR": str(self.data_dir.resolve()),
                    "MESH_ORCHESTRATOR_URL": self.url, "MESH_ORCHESTRATOR_ID": ORCHESTRATOR_ID,
                    "MESH_WALLET_DIR": str(wallets.resolve()), "MESH_WALLET": "arbiter"}
        path = self.root / "mesh.env"
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path

    def own_pids(self) -> set[int]:
        """The processes the grid started itself (the service, the agents)."""
        pids = {agent.process.pid for agent in self.agents if agent.process is not None}
        if self.service is not None and self.service.pid is not None:
            pids.add(self.service.pid)
        return pids

    def close(self) -> None:
        for agent in self.agents:
            agent.kill()
        if self.customer is not None:
            self.customer.close()
        self.stop_service()

    def done(self, job_id: str) -> bool:
        """Every task of the job has its result (verified already, or not yet)."""
        results = self.results(job_id)
        tasks = self.job(job_id)["tasks"]
        return bool(results["complete"]) and set(tasks) <= {"done", "verified"} and sum(
            tasks.values()) == len(results["results"])

    def submit(self, blend: Path, **workload: Any) -> str:
        """Upload the .blend (signed) and submit a render job of it; returns the job id."""
        return self.submit_workload({"kind": "blender", "blend_sha256": self.upload(blend),
                                     **workload})

    def upload(self, path: Path) -> str:
        assert self.customer is not None
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        self.customer.upload(digest, data)
        return digest

    def submit_workload(self, workload: dict[str, Any], needs: dict[str, Any] | None = None
                        ) -> str:
        """Escrow on chain, then submit the job (signed, with an idempotency key)."""
        assert self.customer is not None
        deadline = int(time.time()) + 3600
        spec = {"workload": workload, "deadline": deadline, **({"needs": needs} if needs else {})}
        spec_hash = JobSpec.model_validate(spec).canonical_hash()
        job_id = keccak(text=f"agent test job {secrets.token_hex(8)}")
        self.escrows[JobId.of(job_id)] = self.chain.account(dev_account(4)).create_job(
            job_id, PAYMENT, deadline, spec_hash)
        submit_job(self.customer, {"job_id": JobId.of(job_id), "spec": spec})
        return JobId.of(job_id)

    def job(self, job_id: str) -> dict[str, Any]:
        assert self.customer is not None
        return dict(expect(self.customer.http.get(f"/v1/jobs/{job_id}")))

    def results(self, job_id: str) -> dict[str, Any]:
        assert self.customer is not None
        return dict(expect(self.customer.send("GET", f"/v1/jobs/{job_id}/results")))

    def outbox(self, kind: str) -> list[dict[str, Any]]:
        """The service's chain actions of one kind (lock, slash, settle, ...), newest first."""
        assert self.service is not None
        answer = expect(httpx.get(f"{self.url}/v1/admin/outbox", params={"limit": 1000},
                                  headers={"x-admin-key": ADMIN_KEY}, timeout=10.0))
        return [action for action in answer if action["kind"] == kind]

    def wait_logged_in(self, agents: list[AgentProcess]) -> None:
        wait_for("the agents to log in", lambda: all("logged in" in a.log() for a in agents))

    def agent(self, name: str, *extra: str, threads: int = 1,
              launcher: list[str] | None = None) -> AgentProcess:
        """`launcher` replaces `python -m mesh.cli` (e.g. a test agent that cheats)."""
        agent = AgentProcess(self, name, ["--threads", str(threads), *extra], launcher=launcher)
        if self.chain.provider_stake(agent.address).bonded < STAKE:
            self.fund(agent)
        self.agents.append(agent)
        return agent

    def fund(self, agent: AgentProcess) -> None:
        """Gas money and tokens for the agent's provider (a faucet's job), then its bond
        through `mesh provider stake` with its own keystore, as its operator would."""
        from mesh.commands import provider

        set_balance(self.chain.w3, agent.address, 10**20)
        self.chain.account(dev_account(0)).mint(agent.address, STAKE)
        with contextlib.redirect_stdout(io.StringIO()):  # its one-line report
            provider.stake(str(STAKE // 10**18), str(agent.keystore),
                           password_file=agent.password, rpc_url=self.rpc_url,
                           data_dir=self.data_dir, as_json=True)


@contextlib.contextmanager
def local_grid(root: Path, **service_env: str) -> Iterator[Grid]:
    """anvil on a free loopback port with the contracts deployed (dev accounts: 0 admin,
    1 orchestrator, 2 slasher, 3 arbiter, 4 customer), the orchestrator started on SQLite
    under `root`; everything stopped on the way out."""
    with Anvil() as anvil:
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        grid = Grid(MeshChain(w3, deployment), root, rpc_url=anvil.rpc_url)
        try:
            yield grid.start(**service_env)
        finally:
            grid.close()


class AgentProcess:
    """`mesh agent run` with its own keystore and state dir; its log in a file."""

    def __init__(self, grid: Grid, name: str, extra: list[str],
                 launcher: list[str] | None = None) -> None:
        self.grid = grid
        self.launcher = launcher or [sys.executable, "-m", "mesh.cli"]
        self.name = name
        self.dir = grid.root / name
        self.dir.mkdir(exist_ok=True)
        self.keystore = self.dir / "key.json"
        self.password = self.dir / "password"
        if not self.keystore.exists():
            self.password.write_text(secrets.token_hex(8))
            keystore.create(self.keystore, self.password.read_text(),
                            scrypt_n=LOCAL_SCRYPT_N)
        self.address = to_checksum_address(json.loads(self.keystore.read_text())["address"])
        self.extra = extra
        self.log_path = self.dir / "agent.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, orchestrator: str | None = None) -> AgentProcess:
        """Run the agent against the grid's service, or the `orchestrator` URL given (a proxy
        in front of it, say)."""
        argv = [*self.launcher, "agent", "run", "--orchestrator",
                orchestrator or self.grid.url, "--keystore", str(self.keystore), "--password-file",
                str(self.password), "--node-id", self.name, "--state-dir",
                str(self.dir / "state"), "--heartbeat-s", "0.5",
                "--poll-s", "0.3", "--chain-id", str(self.grid.chain.deployment.chain_id),
                "--orchestrator-id", ORCHESTRATOR_ID, *self.extra]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL, its sandboxed renders with it: no drain, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            kill_tree(self.process.pid)
            self.process.wait()

    def terminate(self, timeout_s: float = 60) -> int:
        assert self.process is not None
        stop_process(self.process, timeout_s=timeout_s)
        return int(self.process.returncode)
