"""`mesh bench chaos`: the whole local stack (anvil, `mesh orchestrator serve` on SQLite or
PostgreSQL, `mesh agent run` processes) under a seeded schedule of faults, then the history checker.

Each round the orchestrator is SIGKILLed at one of these points, then restarted on the same
port and database: at a random moment (`timer`: wherever it is, scheduling, heartbeats,
verification), or at an exact step of its JSON-RPC traffic to the chain, seen by a proxy in
front of anvil (`mesh.cutproxy`) that kills it before passing the bytes on:
`before_send` (a signed transaction committed, not yet broadcast), `after_send` (the node took
it, the process never heard), `after_receipt` (a mined receipt read, not yet recorded). A step
that does not come within a few seconds falls back to the timer. Rounds add side faults, drawn
up front with a chance each and every kind at least once (`schedule`): an agent kill (SIGKILL of
the `churn` node and its workloads; it comes back later as a new process), an RPC outage (the
proxy stops listening for a while), a slow RPC (every request delayed), a network partition of
an honest agent (each talks to the service through its own `CutProxy` on loopback, cut for a few
seconds, well inside the reconnect grace: it must come back and must not be slashed), and a
chain reorg within the indexer's margin, timed to follow a service transaction's mining
(`anvil_reorg`: the service's transactions in the replaced blocks are dropped, for its outbox
to send again; everyone else's are put back, as a mempool would). With `postgres`, the
service runs on a private PostgreSQL server (`bench.pgcluster`) instead of SQLite, and a
PostgreSQL restart joins the side faults (the server crashed with `immediate`, every
connection cut, recovered from its WAL). A miner thread adds an empty block every second, so
that events become final under the margin with nothing else to mine them.

Jobs are command workloads (a few shards of a tiny Python script), submitted between kills.
When the rounds are over the faults stop and every job must settle; then the checker reads the
DB and the chain (`mesh.bench.history_check`)."""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections import Counter
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any

import httpx

from mesh.bench import history_check
from mesh.bench.pgcluster import PostgresCluster
from mesh.cutproxy import CutProxy
from mesh.localgrid import PAYMENT, AgentProcess, Grid, GridError, wait_for
from mesh.processes import ServiceError
from orchestrator.chain.anvil import Anvil, block_transactions, dev_account, mine, reorg
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from orchestrator.db.session import make_engine, make_session_factory

SEND, RECEIPT = b"eth_sendRawTransaction", b"eth_getTransactionReceipt"
KILL_POINTS = ("timer", "before_send", "after_send", "after_receipt")
STEP_WAIT_S = 6.0  # an RPC step that has not come by then: killed where it stands
STARTUP_S = 240.0  # a service process imports for 20-50 s on a busy 2-core box
SETTLE_S = 600.0  # after the faults: every job settles within this
REORG_MARGIN = 3  # blocks; a reorg replaces at most this many
MINE_S = 1.0  # the miner's empty block interval
PARTITION_S = (2.0, 12.0)  # an agent's cut, well inside the reconnect grace below
# The PLS delays shortened so that an abandonment can mature into a slash within a run (the
# checker's `honest_slashed` can fail): a partitioned node back within 30 s must not pay.
ENV = {"MESH_OUTBOX_INTERVAL_S": "0.3", "MESH_PLS_DECIDE_INTERVAL_S": "1",
       "MESH_CHAIN_FINALITY_TAG": "none", "MESH_CHAIN_REORG_MARGIN": str(REORG_MARGIN),
       "MESH_CHAIN_INDEX_INTERVAL_S": "1", "MESH_PLS_RECONNECT_GRACE_S": "30",
       "MESH_PLS_OUTAGE_WINDOW_S": "30", "MESH_PLS_DECISION_DELAY_S": "40"}
# side fault -> its chance in a round
SIDE_FAULTS = {"agent_kill": 0.25, "rpc_outage": 0.2, "rpc_slowdown": 0.2, "partition": 0.25,
               "chain_reorg": 0.25}
POSTGRES_FAULTS = {"postgres_restart": 0.25}  # with `postgres`
SCRIPT = ("import os, pathlib; pathlib.Path(os.environ['MESH_OUT'], 'result')"
          ".write_text('shard ' + os.environ['MESH_SHARD'])")


def _hits(point: str, request: bytes, response: bytes | None) -> bool:
    if point == "before_send":
        return SEND in request and response is None
    if point == "after_send":
        return SEND in request and response is not None
    if point == "after_receipt":
        return RECEIPT in request and response is not None and b'"status":"0x1"' in response
    return False


def schedule(rng: random.Random, rounds: int, kinds: dict[str, float] = SIDE_FAULTS
             ) -> list[list[str]]:
    """Each round's side faults: each kind with its chance, and every kind at least once
    (in a random round) so that a short run meets them all."""
    plan = [[kind for kind, chance in kinds.items() if rng.random() < chance]
            for _ in range(rounds)]
    for kind in kinds:
        if rounds and not any(kind in faults for faults in plan):
            plan[rng.randrange(rounds)].append(kind)
    return plan


class Chaos:
    def __init__(self, grid: Grid, proxy: CutProxy, rng: random.Random, shards: int,
                 database: PostgresCluster | None = None) -> None:
        self.grid, self.proxy, self.rng, self.shards = grid, proxy, rng, shards
        self.database = database  # a private PostgreSQL server (None: SQLite)
        self.env = ENV if database is None else {**ENV, "MESH_DATABASE_URL": database.url}
        self.restarting = threading.Lock()  # one database restart at a time
        self.faults: Counter[str] = Counter()
        self.kill_points: Counter[str] = Counter()
        self.jobs: list[str] = []
        self.restarts_s: list[float] = []
        self.links: list[CutProxy] = []  # one per honest agent, between it and the service
        self.cut_links: set[int] = set()  # indexes of the links cut now
        self.service_keys = {dev_account(1).address, dev_account(2).address}
        self.mining = threading.Lock()  # held by a reorg: no block mined under it
        self.reorg_floor = 0  # no reorg reaches below this height (the setup's blocks)
        self.reorg_depths: Counter[int] = Counter()
        self.reorg_dropped = 0  # the service's transactions a reorg took off the chain
        self.reorgs_that_dropped = 0  # reorgs that took at least one of them

    def kill_service(self) -> str:
        """Arm one kill point, wait for it (or the timer), SIGKILL the service."""
        point = self.rng.choice(KILL_POINTS)
        delay = self.rng.uniform(0.2, STEP_WAIT_S)
        killed = threading.Event()
        lock = threading.Lock()

        def kill(where: str) -> None:
            with lock:
                if killed.is_set():
                    return
                self.grid.stop_service(kill=True)
                self.kill_points[where] += 1
                killed.set()

        def tap(request: bytes, response: bytes | None) -> bool:
            if killed.is_set():
                return False  # the process is dead: none of its traffic gets through
            if _hits(point, request, response):
                kill(point)
                return False
            return True

        if point != "timer":
            self.proxy.tap = tap
        if not killed.wait(delay if point == "timer" else STEP_WAIT_S):
            kill("timer" if point == "timer" else f"{point}_timeout")
        self.proxy.tap = None
        self.faults["orchestrator_kill"] += 1
        return point

    def restart_service(self) -> None:
        began = time.monotonic()
        for _ in range(3):  # a start killed by a fault of the RPC side: start it again
            try:
                if self.grid.customer is not None:
                    self.grid.customer.close()
                self.grid.start(**self.env)
                break
            except ServiceError:
                self.grid.stop_service(kill=True)
        else:
            raise GridError("the orchestrator did not come back after three starts")
        self.restarts_s.append(time.monotonic() - began)

    def side_fault(self, kind: str, churn: AgentProcess) -> None:
        """One of the round's side faults, next to the orchestrator kill (counted when it
        took place: a partition with every agent cut already, or a reorg with no block above
        the setup's yet, does not)."""
        took_place = True
        if kind == "agent_kill":
            churn.kill()
        elif kind == "rpc_outage":
            self.proxy.cut()
            threading.Timer(self.rng.uniform(0.5, 4.0), self._restore).start()
        elif kind == "rpc_slowdown":
            self.proxy.delay_s = self.rng.uniform(0.05, 0.5)
            threading.Timer(self.rng.uniform(2.0, 10.0), self._fast).start()
        elif kind == "partition":
            took_place = self.partition()
        elif kind == "chain_reorg":
            took_place = self.reorg_chain()
        elif kind == "postgres_restart":  # while the service works: before its kill, or after
            threading.Timer(self.rng.uniform(0.0, 2 * STEP_WAIT_S), self.restart_database).start()
        self.faults[kind] += took_place

    def partition(self) -> bool:
        """Cut one honest agent, not cut already, off the service for a few seconds."""
        whole = [n for n in range(len(self.links)) if n not in self.cut_links]
        if not whole:
            return False
        link = self.rng.choice(whole)
        self.links[link].cut()
        self.cut_links.add(link)
        threading.Timer(self.rng.uniform(*PARTITION_S), self._heal, args=(link,)).start()
        return True

    def _heal(self, link: int) -> None:
        with suppress(OSError):
            self.links[link].restore()
        self.cut_links.discard(link)

    def heal_all(self) -> None:
        for link in list(self.cut_links):
            self._heal(link)

    def reorg_chain(self) -> bool:
        """Replace the newest 1..REORG_MARGIN blocks (deep enough to reach the service's
        latest transaction when that lies within the margin): its transactions there are
        dropped, everyone else's put back at the same offsets. It waits (STEP_WAIT_S at most)
        for a service transaction to be mined within the margin, so that most reorgs take one
        off the chain instead of meeting empty blocks."""
        w3 = self.grid.chain.w3
        deadline = time.monotonic() + STEP_WAIT_S
        while not self._ours(self._within_margin()[1]) and time.monotonic() < deadline:
            time.sleep(0.1)
        with self.mining:
            head, blocks = self._within_margin()
            if not blocks:
                return False
            lowest = min(blocks)
            ours = self._ours(blocks)
            self.reorgs_that_dropped += bool(ours)
            depth = max(self.rng.randint(1, head - lowest + 1), head - ours[0] + 1 if ours else 0)
            fork = head - depth
            kept = [(raw, n - fork - 1) for n in range(fork + 1, head + 1)
                    for sender, raw in blocks[n] if sender not in self.service_keys]
            self.reorg_dropped += sum(sender in self.service_keys for n in range(fork + 1, head + 1)
                                      for sender, _ in blocks[n])
            reorg(w3, depth, kept)
        self.grid.chain.resync_nonces()
        self.reorg_depths[depth] += 1
        return True

    def _within_margin(self) -> tuple[int, dict[int, list[tuple[str, bytes]]]]:
        """The head and the transactions of each block a reorg may replace (above the
        setup's)."""
        w3 = self.grid.chain.w3
        head = int(w3.eth.block_number)
        lowest = max(head - REORG_MARGIN + 1, self.reorg_floor + 1)
        return head, {n: block_transactions(w3, n) for n in range(lowest, head + 1)}

    def _ours(self, blocks: dict[int, list[tuple[str, bytes]]]) -> list[int]:
        """The blocks, lowest first, that hold a service transaction."""
        return [n for n, txs in blocks.items()
                if any(sender in self.service_keys for sender, _ in txs)]

    def mine_until(self, stop: threading.Event, rpc_url: str) -> None:
        """An empty block every MINE_S (not under a reorg): the chain moves on by itself."""
        w3 = connect(rpc_url)
        while not stop.wait(MINE_S):
            with self.mining, suppress(Exception):  # anvil busy or stopping: next beat
                mine(w3)

    def restart_database(self) -> None:
        assert self.database is not None
        with self.restarting:
            self.database.restart()

    def _restore(self) -> None:
        with suppress(OSError):
            self.proxy.restore()

    def _fast(self) -> None:
        self.proxy.delay_s = 0.0

    def submit(self) -> None:
        """Escrow and submit one job, while the service is up (before the round's kill)."""
        job_id = self.grid.submit_workload(
            {"kind": "command", "command": ["{python}", "-c", SCRIPT], "count": self.shards})
        self.jobs.append(job_id)

    def settled(self) -> bool:
        try:
            return all(self.grid.job(job)["status"] == "settled" for job in self.jobs)
        except (httpx.HTTPError, RuntimeError):
            return False


def run(*, seed: int = 1, kills: int = 200, jobs: int = 20, agents: int = 3, shards: int = 2,
        postgres: bool = False, root: Path | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    began = time.perf_counter()
    with (Anvil() as anvil, tempfile.TemporaryDirectory() as tmp,
          PostgresCluster() if postgres else nullcontext() as database):
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        chain = MeshChain(w3, deployment)
        chain.account(dev_account(0)).mint(dev_account(4).address, (jobs + 1) * PAYMENT)
        proxy = CutProxy(int(anvil.rpc_url.rsplit(":", 1)[1])).restore()
        grid = Grid(chain, root or Path(tmp), rpc_url=proxy.url)
        chaos = Chaos(grid, proxy, rng, shards, database)
        stop_mining = threading.Event()
        miner = threading.Thread(target=chaos.mine_until, args=(stop_mining, anvil.rpc_url),
                                 daemon=True)
        try:
            grid.start(**chaos.env)
            assert grid.port is not None
            chaos.links = [CutProxy(grid.port).restore() for _ in range(agents - 1)]
            honest = [grid.agent(f"honest-{n}").start(orchestrator=link.url)
                      for n, link in enumerate(chaos.links)]
            churn = grid.agent("churn").start()
            grid.wait_logged_in([*honest, churn])
            chaos.reorg_floor = int(w3.eth.block_number)
            miner.start()
            submit_at = {round(n * kills / jobs) for n in range(jobs)} if jobs else set()
            kinds = SIDE_FAULTS if database is None else {**SIDE_FAULTS, **POSTGRES_FAULTS}
            for round_, side_faults in enumerate(schedule(rng, kills, kinds)):
                if round_ in submit_at or len(chaos.jobs) < sum(r <= round_ for r in submit_at):
                    chaos.submit()
                for kind in side_faults:
                    chaos.side_fault(kind, churn)
                chaos.kill_service()
                if churn.process is not None and churn.process.poll() is not None \
                        and rng.random() < 0.5:
                    churn.start()  # back as a new process, a new session
                chaos.restart_service()
            proxy.delay_s = 0.0
            chaos._restore()
            chaos.heal_all()
            if churn.process is None or churn.process.poll() is not None:
                churn.start()
            while len(chaos.jobs) < jobs:
                chaos.submit()
            if database is not None:  # ride through one more, with no kill to follow it
                chaos.restart_database()
                chaos.faults["postgres_restart"] += 1
            settle_began = time.monotonic()
            unfinished = 0
            try:
                wait_for("every job to settle", chaos.settled, timeout_s=SETTLE_S)
            except GridError:
                unfinished = sum(grid.job(job)["status"] != "settled" for job in chaos.jobs)
            settle_s = time.monotonic() - settle_began
        finally:
            grid.close()
            stop_mining.set()
            proxy.tap = None
            proxy.cut()
            for link in chaos.links:
                link.cut()
        engine = make_engine(f"sqlite:///{grid.data_dir / 'mesh.db'}" if database is None
                             else database.url)
        report = history_check.check(make_session_factory(engine), chain,
                                     faulted_providers={churn.address})
        engine.dispose()
    return {
        "seed": seed,
        "database": "postgresql" if postgres else "sqlite",
        "faults_injected": sum(chaos.faults.values()),
        "orchestrator_kills": chaos.faults["orchestrator_kill"],
        "jobs": len(chaos.jobs),
        "jobs_unfinished": unfinished,
        "violations": report.violations,
        "faults": dict(chaos.faults),
        "kill_points": dict(chaos.kill_points),
        "reorg_depths": dict(sorted(chaos.reorg_depths.items())),
        "reorg_service_txs_dropped": chaos.reorg_dropped,
        "reorgs_that_dropped_service_txs": chaos.reorgs_that_dropped,
        "history": report.counts,
        "violation_details": report.details[:20],
        "restart_s_mean": round(sum(chaos.restarts_s) / max(len(chaos.restarts_s), 1), 1),
        "settle_after_faults_s": round(settle_s, 1),
        "wall_s": round(time.perf_counter() - began, 1),
    }
