"""`mesh bench scaleout`: replicas sharing the load and the leader jobs, through real
processes. Two or more `mesh orchestrator serve` processes on one fresh PostgreSQL database
and one anvil deployment (`replicas.serve_replicas`), a population of simulated nodes, each
request of theirs to a random live replica, command jobs a customer escrowed on chain
totalling `jobs * tasks_per_job` tasks, and the first replica (the first to take the leader
leases) SIGKILLed once half the tasks are done, then started again.

The service runs as deployed, with the PLS gate on (`pls=False` for the chain-less core's
plain matching): every node's provider wallet is funded and bonds `STAKE` on chain before it
registers (registration asks for stake), each placement is ranked and priced by PLS, its
collateral reserved and committed on chain through the outbox, and the staking decisions
(RS observation, slashing, demotion) run as a leader job; the history checker then also
verifies that no honest node was slashed.

A simulated node speaks the agent's protocol (`agent.presence`, `agent.worker`): it
registers and logs in (signed), heartbeats every second from a thread of its own with a GPU
sample every 5th beat and a timed probe every 10th, re-runs the checks it is leased, and for
each task it is leased reports the start, uploads its result and completes it. It does not
start a process for the job's command: it writes what the command writes (a file `result`
reading `shard N`), packed as a tar, so the run measures the replicas, not process start-up.
A refused connection is retried at another replica, as a load balancer in front of them does.

What is measured, and from what:
- double leases, lost tasks, double or missing payments: the history checker over the DB
  and the chain once every job settled (`history_check.check`).
- leader overlap: `LeaderSampler` reads `leader_locks` every 20 ms. A lease seen passing to
  another holder while its previous holder's last-seen expiry was still ahead means two
  holders at once (a live holder renews every period, a third of the lease, so a takeover of
  a live holder shows as one). `sender_holders_overlapping` is that count for the outbox
  sender's lease, the one transaction sender.
- takeover: the holders that never renewed after the kill were the killed replica's; the
  seconds from the kill until each of their leases had another holder.
- scores from both replicas: once the work is done, one node sends a GPU sample to each
  replica in turn and the other must show the writer's answer (`replicas.propagation_lag`).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import secrets
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import keccak
from sqlalchemy.orm import Session, sessionmaker

from mesh.bench import history_check
from mesh.bench.replicas import (
    DEFAULT_POSTGRES_URL,
    ReportingNode,
    gpu_samples,
    propagation_lag,
    scratch_database,
    serve_replicas,
)
from mesh.localgrid import PAYMENT, STAKE, GridError, wait_for
from orchestrator.api.schemas import JobSpec
from orchestrator.chain.anvil import Anvil, dev_account, set_balance
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import connect
from orchestrator.config import Settings
from orchestrator.db import history
from orchestrator.db.session import make_engine, make_session_factory
from orchestrator.domain.ids import JobId, hex0x
from orchestrator.services.outbox.sender import LEASE_NAME as SENDER_LEASE
from protocol.client import ApiCallError, Wallet, expect

CUSTOMER = dev_account(4)
SAMPLE_S = 0.02  # the leader sampler's period
BEAT_S = 1.0
POLL_S = 0.2  # a node without work asks again after this
FAILOVER_S = 120.0  # a request no replica answers for this long fails the node
SCRIPT = ("import os, pathlib; pathlib.Path(os.environ['MESH_OUT'], 'result')"
          ".write_text('shard ' + os.environ['MESH_SHARD'])")
# Every leader job at most a few seconds apart, so each lease the killed replica held lapses
# (three periods) within the run; short epochs, so epoch commits are sent too.
ENV = {"MESH_SESSION_TTL_S": "86400",
       "MESH_LEASE_TTL_S": "30", "MESH_OUTBOX_INTERVAL_S": "0.5",
       "MESH_PLS_DECIDE_INTERVAL_S": "2", "MESH_PLS_EPOCH_S": "20",
       "MESH_NONCE_GC_INTERVAL_S": "3", "MESH_PLS_LOG_PRUNE_INTERVAL_S": "3",
       "MESH_UPLOAD_GC_INTERVAL_S": "3",
       "MESH_CHAIN_FINALITY_TAG": "none", "MESH_CHAIN_REORG_MARGIN": "0",
       "MESH_CHAIN_INDEX_INTERVAL_S": "1", "MESH_REGISTRATIONS_PER_HOUR": "1000"}


def result_tar(payload: dict[str, Any]) -> bytes:
    """What the job's command leaves under $MESH_OUT, as a reproducible tar (a re-run by
    another node gives the same bytes)."""
    data = f"shard {payload.get('shard', 0)}".encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("result")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Tally:
    """Counts the nodes' threads share."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, key: str, by: int = 1) -> None:
        with self._lock:
            self.counts[key] += by


class SimNode:
    """A node registered at one replica, then sending each request to a random one."""

    def __init__(self, urls: list[str], node_id: str, rng: random.Random, tally: Tally,
                 provider: LocalAccount) -> None:
        self.rng = rng
        self.tally = tally
        self.node = ReportingNode(rng.choice(urls), node_id, account=provider)
        self.path = f"/v1/nodes/{node_id}"
        self.clients = [httpx.Client(base_url=url, timeout=30.0) for url in urls]

    def request(self, method: str, path: str, *, json: Any = None, content: bytes | None = None,
                ok: tuple[int, ...] = (200,)) -> httpx.Response:
        """At a random replica; a refused connection or a 5xx is tried at the others, and
        all of them again until one answers."""
        deadline = time.monotonic() + FAILOVER_S
        while True:
            for index in self.rng.sample(range(len(self.clients)), len(self.clients)):
                try:
                    response = self.clients[index].request(method, path, json=json,
                                                           content=content,
                                                           headers=self.node.auth)
                except httpx.TransportError:
                    self.tally.add("failovers")
                    continue
                if response.status_code >= 500:
                    self.tally.add("failovers")
                    continue
                self.tally.add(f"requests_replica_{index}")
                if response.status_code not in ok:
                    expect(response)  # raises with the service's code
                return response
            if time.monotonic() > deadline:
                raise GridError(f"{self.path}: no replica answered {method} {path} "
                                f"for {FAILOVER_S:.0f} s")
            time.sleep(0.2)

    def beat(self, stop: threading.Event) -> None:
        """The agent's heartbeat thread: heartbeats, a GPU sample every 5th, a probe every
        10th; a failure is left to the failure detector."""
        beats = 0
        while not stop.wait(BEAT_S):
            beats += 1
            try:
                self.request("POST", f"{self.path}/heartbeat")
                self.tally.add("heartbeats")
                if beats % 5 == 0:
                    self.request("POST", f"{self.path}/telemetry/gpu", json=gpu_samples(
                        [self.rng.uniform(80.0, 84.0)]))  # warm: a thermal factor below 1
                    self.tally.add("gpu_samples")
                if beats % 10 == 0:
                    nonce = self.request("POST", f"{self.path}/probe").json()["nonce"]
                    self.request("POST", f"{self.path}/probe/echo", json={"nonce": nonce})
            except ApiCallError as exc:
                self.tally.add(f"heartbeat_refused_{exc.status}_{exc.code}")
            except (GridError, httpx.TransportError):
                self.tally.add("heartbeat_unanswered")

    def work(self, stop: threading.Event) -> None:
        """The agent's work loop: a check when one waits, else the next lease."""
        while not stop.is_set():
            check = self.request("POST", f"{self.path}/checks/lease", ok=(200, 204))
            if check.status_code == 200:
                self.recheck(check.json())
                continue
            lease = self.request("POST", f"{self.path}/lease", ok=(200, 204))
            if lease.status_code == 204:
                stop.wait(POLL_S)
                continue
            self.run_task(lease.json())

    def upload(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.request("PUT", f"/v1/blobs/{sha}", content=data)
        return sha

    def run_task(self, lease: dict[str, Any]) -> None:
        task = int(lease["task_id"])
        try:
            self.request("POST", f"/v1/tasks/{task}/progress",
                         json={"progress": float(lease.get("resume_progress") or 0.0)})
            sha = self.upload(result_tar(lease["payload"]))
            self.request("POST", f"/v1/tasks/{task}/complete", json={"result_sha256": sha})
            self.tally.add("tasks_completed")
        except ApiCallError as exc:  # moved meanwhile (a lapse), or done by a retried call
            if exc.status not in (404, 409):
                raise
            self.tally.add("results_refused")

    def recheck(self, check: dict[str, Any]) -> None:
        sha = self.upload(result_tar(check["payload"]))
        try:
            self.request("POST", f"/v1/checks/{int(check['check_id'])}/result",
                         json={"result_sha256": sha})
            self.tally.add("checks_done")
        except ApiCallError as exc:
            if exc.status not in (404, 409):
                raise
            self.tally.add("checks_refused")

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.node.close()


@dataclass(frozen=True, slots=True)
class Takeover:
    name: str
    old: str
    new: str
    seen_at: float
    old_expires_at: float  # the previous holder's last-seen expiry

    @property
    def overlapping(self) -> bool:
        return self.seen_at < self.old_expires_at


class LeaderSampler:
    """`leader_locks` read every SAMPLE_S on a thread of its own: each change of holder, and
    when each holder last renewed."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory
        self.current: dict[str, tuple[str, float]] = {}
        self.takeovers: list[Takeover] = []
        self.renewed: dict[str, float] = {}  # holder -> when one of its expiries last moved
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-sampler", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> LeaderSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with self.factory() as session:
                rows = history.leader_locks(session)
            now = time.time()
            with self._lock:
                self.samples += 1
                for name, holder, expires_at in rows:
                    seen = self.current.get(name)
                    if seen is not None and seen[0] != holder:
                        self.takeovers.append(Takeover(name, seen[0], holder, now, seen[1]))
                    if seen != (holder, expires_at):
                        self.renewed[holder] = now
                    self.current[name] = (holder, expires_at)

    def held(self) -> dict[str, str]:
        with self._lock:
            return {name: holder for name, (holder, _) in self.current.items()}

    def taken_over(self, held: dict[str, str], since: float) -> dict[str, float] | None:
        """Seconds from `since` until each lease that a holder silent since then held had
        another holder; None while one has not."""
        with self._lock:
            silent = {h for h in held.values() if self.renewed.get(h, 0.0) <= since}
            found: dict[str, float] = {}
            for name, holder in held.items():
                if holder not in silent:
                    continue
                after = [t.seen_at for t in self.takeovers
                         if t.name == name and t.old == holder and t.seen_at > since]
                if not after:
                    return None
                found[name] = round(min(after) - since, 2)
            return found


def submit_jobs(urls: list[str], chain: MeshChain, *, jobs: int, tasks_per_job: int,
                rng: random.Random) -> list[str]:
    """Escrow each job on chain, then submit it (signed) to a random replica."""
    customers = [Wallet.connect(url, bytes(CUSTOMER.key), chain_id=chain.deployment.chain_id,
                                orchestrator_id=Settings().orchestrator_id)
                 for url in urls]
    job_ids: list[str] = []
    try:
        for _ in range(jobs):
            deadline = int(time.time()) + 6 * 3600
            spec = {"workload": {"kind": "command", "command": ["{python}", "-c", SCRIPT],
                                 "count": tasks_per_job}, "deadline": deadline}
            job_id = keccak(text=f"scale-out job {secrets.token_hex(8)}")
            chain.account(CUSTOMER).create_job(job_id, PAYMENT, deadline,
                                               JobSpec.model_validate(spec).canonical_hash())
            expect(rng.choice(customers).send(
                "POST", "/v1/jobs", {"job_id": JobId.of(job_id), "spec": spec},
                headers={"idempotency-key": secrets.token_hex(8)}))
            job_ids.append(JobId.of(job_id))
    finally:
        for customer in customers:
            customer.close()
    return job_ids


def staked_provider(chain: MeshChain) -> LocalAccount:
    """A fresh provider wallet with gas money and `STAKE` bonded, as `mesh provider stake`
    leaves it."""
    provider = Account.create()
    set_balance(chain.w3, provider.address, 10**20)
    chain.account(dev_account(0)).mint(provider.address, STAKE)
    chain.account(provider).stake(STAKE)
    return provider


def job_counts(urls: list[str], job_ids: list[str]) -> tuple[Counter[str], Counter[str]]:
    """(jobs by status, tasks by status) as some live replica answers."""
    for url in urls:
        try:
            with httpx.Client(base_url=url, timeout=30.0) as http:
                jobs: Counter[str] = Counter()
                tasks: Counter[str] = Counter()
                for job_id in job_ids:
                    answer = expect(http.get(f"/v1/jobs/{job_id}"))
                    jobs[answer["status"]] += 1
                    tasks.update(answer["tasks"])
                return jobs, tasks
        except (httpx.TransportError, ApiCallError):
            continue
    raise GridError("no replica answers")


def both_replicas_score(node: SimNode, timeout_s: float) -> dict[str, float]:
    """A sample at each replica in turn; ms until the other replica's score shows it."""
    first, second = node.clients[0], node.clients[1]
    return {"lag_first_to_second_ms": round(1000.0 * propagation_lag(
                node.node, second, 88.0, timeout_s, via=first), 1),
            "lag_second_to_first_ms": round(1000.0 * propagation_lag(
                node.node, first, 87.5, timeout_s, via=second), 1)}


def failed(result: dict[str, Any]) -> bool:
    """A violation of the history checker, two leader holders at once, a chain action the
    chain refused, or a kill that tested no takeover (the killed replica held no leader
    lease)."""
    return (any(result["violations"].values()) or result["leader_runs_overlapping"] > 0
            or bool(result["outbox_failures"]) or not result["killed_replica_leases"])


def run(*, postgres_url: str | None = None, replicas: int = 2, nodes: int = 40, jobs: int = 20,
        tasks_per_job: int = 500, kill_at: float = 0.5, restart: bool = True, seed: int = 1,
        pls: bool = True, settle_timeout_s: float = 1800.0) -> dict[str, Any]:
    if replicas < 2:
        raise ValueError("scale-out needs at least two replicas")
    base = postgres_url or os.environ.get("MESH_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL
    rng = random.Random(seed)
    began = time.perf_counter()
    tally = Tally()
    with Anvil() as anvil, tempfile.TemporaryDirectory() as tmp, \
            scratch_database(base) as url:
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        chain = MeshChain(w3, deployment)
        chain.account(dev_account(0)).mint(CUSTOMER.address, jobs * PAYMENT)
        providers = [staked_provider(chain) for _ in range(nodes)]
        scratch = Path(tmp)
        deployment.save(scratch / "data")
        env = {**ENV, "MESH_PLS_PLACEMENT": str(pls).lower(), "MESH_RPC_URL": anvil.rpc_url,
               "MESH_CHAIN_ID": str(deployment.chain_id),
               "MESH_ORCHESTRATOR_KEY": hex0x(dev_account(1).key),
               "MESH_SLASHER_KEY": hex0x(dev_account(2).key)}
        engine = make_engine(url)
        factory = make_session_factory(engine)
        sampler = LeaderSampler(factory)
        with serve_replicas(url, scratch, replicas, env) as processes:
            started_s = time.perf_counter() - began
            sampler.start()
            urls = [process.base_url for process in processes]
            sims = [SimNode(urls, f"scale-{i:04d}", random.Random(seed * 100_003 + i), tally,
                            provider) for i, provider in enumerate(providers)]
            stop = threading.Event()
            failures: list[BaseException] = []

            def guarded(work: Callable[[threading.Event], None]) -> Callable[[], None]:
                def body() -> None:
                    try:
                        work(stop)
                    except BaseException as exc:  # a node that gave up: the run fails
                        failures.append(exc)
                        stop.set()
                return body

            threads = [threading.Thread(target=guarded(part), daemon=True)
                       for sim in sims for part in (sim.beat, sim.work)]
            try:
                for thread in threads:
                    thread.start()
                work_began = time.perf_counter()
                job_ids = submit_jobs(urls, chain, jobs=jobs, tasks_per_job=tasks_per_job,
                                      rng=rng)
                total = jobs * tasks_per_job
                done = {"done", "verified"}

                def finished(share: float) -> bool:
                    if failures:
                        raise GridError(f"a node failed: {failures[0]!r}")
                    tasks = job_counts(urls, job_ids)[1]
                    return sum(tasks[s] for s in done) >= share * total

                wait_for(f"{kill_at:.0%} of the tasks done", lambda: finished(kill_at),
                         timeout_s=settle_timeout_s)
                held = sampler.held()
                victim = processes[0]
                victim.kill()
                killed_at = time.time()
                taken = wait_for("the killed replica's leader leases taken over",
                                 lambda: sampler.taken_over(held, killed_at), timeout_s=120.0)
                restart_s = None
                if restart:
                    again_began = time.perf_counter()
                    processes[0] = victim.again().__enter__()
                    restart_s = round(time.perf_counter() - again_began, 1)
                wait_for("every task done", lambda: finished(1.0), timeout_s=settle_timeout_s)
                work_s = time.perf_counter() - work_began

                def settled() -> bool:
                    if failures:
                        raise GridError(f"a node failed: {failures[0]!r}")
                    return job_counts(urls, job_ids)[0]["settled"] == jobs

                # The nodes serve on: a job settles once the re-checks they run have passed.
                wait_for("every job settled", settled, timeout_s=settle_timeout_s)
                settled_s = time.perf_counter() - work_began
                stop.set()
                for thread in threads:
                    thread.join(timeout=FAILOVER_S)
                if failures:
                    raise GridError(f"a node failed: {failures[0]!r}")
                scores = both_replicas_score(sims[0], timeout_s=30.0)
            finally:
                stop.set()
                sampler.stop()
                for sim in sims:
                    sim.close()
        report = history_check.check(factory, chain)
        with factory() as session:
            outbox = history.outbox_statuses(session)
            outbox_failures = history.outbox_failures(session)
        engine.dispose()
    leader_overlaps = [t for t in sampler.takeovers if t.overlapping]
    placements = report.counts["leases"]
    return {
        "replicas": replicas,
        "backend": "postgresql",
        "pls_placement": pls,
        "nodes": nodes,
        "jobs": jobs,
        "tasks": report.counts["tasks"],
        "placements": placements,
        "double_leases": report.violations["double_lease"],
        "lost_tasks": report.violations["task_lost"],
        "leader_runs_overlapping": len(leader_overlaps),
        "sender_holders_overlapping": sum(t.name == SENDER_LEASE for t in leader_overlaps),
        "leader_takeovers": len(sampler.takeovers),
        "leader_samples": sampler.samples,
        "killed_replica_leases": sorted(taken),
        "killed_replica_taken_over_s": max(taken.values()) if taken else None,
        "taken_over_s": taken,
        "restart_s": restart_s,
        "score_from_both_replicas": scores,
        "outbox": outbox,
        "outbox_failures": outbox_failures,
        "requests": {k: v for k, v in sorted(tally.counts.items())},
        "violations": report.violations,
        "violation_details": report.details[:20],
        "history": report.counts,
        "startup_s": round(started_s, 1),
        "work_s": round(work_s, 1),
        "settled_s": round(settled_s, 1),
        "placements_per_s": round(placements / work_s, 1),
        "wall_s": round(time.perf_counter() - began, 1),
    }
