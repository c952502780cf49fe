"""PLS ingest: registrations and sessions, failure-sweep verdicts, heartbeats, probes, GPU
samples, uploads, checkpoint costs and task outcomes, persisted and logged for every
replica's engine (`pls_log`)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from orchestrator.db import jobs as job_db
from orchestrator.db import leases as lease_db
from orchestrator.db import nodes as node_db
from orchestrator.db import pls as store
from orchestrator.db.models import Node
from orchestrator.domain.pls_engine import PlsEngine
from orchestrator.domain.pls_observations import (
    Abandoned,
    AttemptEnded,
    CheckpointCost,
    Departed,
    GpuReport,
    Heartbeats,
    LoneHeld,
    Observation,
    Probe,
    SessionEnded,
    SessionStarted,
    StartFailed,
    Upload,
)
from orchestrator.domain.reliability import GpuSample, TaskOutcome
from orchestrator.services.pls_log import PlsLog, known
from orchestrator.services.pls_state import GPU_FIELDS, PlsState


@dataclass(frozen=True, slots=True)
class SweepFacts:
    """What a failure sweep found, for the staking side."""

    dead: Sequence[tuple[str, bool]]  # (node id, abrupt: neither draining nor a shared silence)
    abandoned: Sequence[tuple[str, int]]  # (node id, task id) running on a node that died
    returned: Sequence[str]
    held: Sequence[str] = ()  # of dead: leases kept through a silence its peers share
    failed_starts: Sequence[tuple[str, int]] = ()  # (node id, task id): reservations lapsed


def lapsed_lone_holds(session: Session, engine: PlsEngine, now: float) -> list[Observation]:
    """The lone holds the grace ran out on, as abandonments dated at their DEAD verdict, with
    their collateral locks ended (the failure sweep and the staking decision both report
    them; the engine counts each task once)."""
    lapsed: list[Observation] = []
    for node_id, hold in engine.lone_holds_due(now):
        task_id = int(hold.task_id)
        store.end_lock(session, task_id=task_id, node_id=node_id, at=now, finished=False)
        lapsed.append(Abandoned(node_id, task_id, hold.collateral, hold.raw_rs, hold.at,
                                hold.value, hold.rework_share))
    return lapsed


class PlsIngest:
    """What the nodes and the failure sweep tell PLS, written to `log` for `state`'s engine."""

    def __init__(self, state: PlsState, log: PlsLog) -> None:
        self.state = state
        self.log = log

    def lease_holds(self, node_ids: Sequence[str], now: float) -> dict[str, float]:
        """Nodes the detector just called DEAD, all at once: how long to keep each one's leases.
        Their departures are recorded first, so a silence shared within this sweep counts (the
        leader's sweep asks mid-transaction, so they go to its engine at once; `after_sweep`
        logs them for the other replicas, and applying them again changes nothing)."""
        with self.state.lock:
            self.state.engine.apply(Departed(tuple(node_ids), now))
            holds = self.state.engine.lease_holds(node_ids, now)
        return {node_id: seconds for node_id, seconds in holds.items() if seconds > 0.0}

    def sweep_holds(self, node_ids: Sequence[str], now: float) -> dict[str, float]:
        """What the failure sweep keeps: `lease_holds` for a shared silence and the lone grace
        (`LeaseHold.lone_grace_s`) for every other node; `after_sweep` logs the lone holds."""
        state = self.state
        holds = self.lease_holds(node_ids, now)
        grace = state.engine.config.lease_hold.lone_grace_s
        with state.lock:
            state.lone_silent = frozenset(n for n in node_ids
                                          if grace > 0.0 and n not in holds
                                          and state.engine.knows(n))
        return holds | dict.fromkeys(state.lone_silent, grace)

    def node_registered(self, session: Session, *, node: Node, now: float) -> None:
        """A node (re)registered: it is online from now on."""
        observations: list[Observation] = [known(node)]
        if store.open_session(session, node_id=node.id, at=now):
            observations.append(SessionStarted(node.id, now))
        self.log.observe(session, *observations)

    def process_restarted(self, session: Session, *, node: Node, now: float) -> None:
        """The node logged in with a new session key: its agent process was replaced. If the
        failure detector never called the old one DEAD (it came back within the detector's
        threshold), the open session is still the old process's: the old process left without
        a drain, so that session ends abruptly now and the new process's starts, as a DEAD
        verdict and a return would have recorded it. The session the new process's
        registration opened (after a DEAD verdict) started at that registration, the node's
        latest sign of life, and is left alone."""
        if node.last_heartbeat_at is None:
            return
        if store.close_session(session, node_id=node.id, at=now, abrupt=True,
                               started_before=node.last_heartbeat_at):
            store.open_session(session, node_id=node.id, at=now)
            self.log.observe(session, Departed((node.id,), now),
                             SessionEnded(node.id, now, True), SessionStarted(node.id, now))

    def session_bound(self, session: Session, *, node: Node, session_key: str) -> None:
        """The node's wallet-signed login named its process's ephemeral session key."""
        node_db.bind_session_key(session, node=node, session_key=session_key)
        self.log.observe(session, known(node))  # binds the key in the engine as a rebuild does

    def after_sweep(self, session: Session, *, facts: SweepFacts, now: float) -> None:
        """Departures end sessions (abrupt = DEAD, a lone silence too; censored = drained, or a
        silence shared with peers), running tasks on a dead node are reported as abandoned with
        the collateral locked for them and the work lost (their attempts end unfinished, in
        task order; a drained node's are never slashed), a lone silent node's tasks are logged
        as held for the lone grace (`PlsStaking.decide` reports the lapsed ones), returns start
        a new session, reservations never started are failed starts (`StartFailed`); then
        overdue probes count as lost. What the DB records decides what is
        logged (a session is ended or opened only once, whichever replica's engine is ahead)."""
        state = self.state
        with state.lock:
            lone, state.lone_silent = state.lone_silent, frozenset()
            observations = lapsed_lone_holds(session, state.engine, now)
        held = set(facts.held)
        departed = [node_id for node_id, abrupt in facts.dead if abrupt or node_id in held]
        if departed:
            observations.append(Departed(tuple(departed), now))
        drained: set[str] = set()
        for node_id, abrupt in facts.dead:
            abrupt = abrupt or node_id in lone  # a lone silence is the node's own departure
            if node_id in lone:
                observations += self._lone_held(session, node_id, now)
            elif not abrupt and node_id not in held:
                drained.add(node_id)
            if store.close_session(session, node_id=node_id, at=now, abrupt=abrupt):
                observations.append(SessionEnded(node_id, now, abrupt))
        for node_id, task_id in sorted(facts.abandoned, key=lambda pair: pair[1]):
            lock = store.end_lock(session, task_id=task_id, node_id=node_id, at=now,
                                  finished=False)
            if lock is not None:
                value, rework = self._damage(session, task_id, node_id)
                observations.append(Abandoned(node_id, task_id, lock.amount, lock.raw_rs, now,
                                              value, rework, node_id in drained))
        for node_id in facts.returned:
            if store.open_session(session, node_id=node_id, at=now):
                observations.append(SessionStarted(node_id, now))
        for node_id, task_id in sorted(facts.failed_starts, key=lambda pair: pair[1]):
            observations.append(self._start_failed(session, node_id, task_id, now))
        self.log.observe(session, *observations)
        self._expire_probes(session, now)

    @staticmethod
    def _start_failed(session: Session, node_id: str, task_id: int, now: float) -> StartFailed:
        """A reservation the node never started: stored as an abandonment on its record and its
        collateral lock ended unfinished (the provider's stake no longer backs it; a rebuild
        replays both), then logged (`StartFailed`)."""
        store.add_outcome(session, node_id=node_id, task_id=task_id,
                          outcome=TaskOutcome.ABANDONED.value, at=now)
        lock = store.end_lock(session, task_id=task_id, node_id=node_id, at=now, finished=False)
        return StartFailed(node_id, task_id, None if lock is None else lock.raw_rs,
                           0 if lock is None else lock.amount, now)

    @staticmethod
    def _damage(session: Session, task_id: int, node_id: str) -> tuple[int | None, float | None]:
        """(task value, share of it redone) of the attempt just moved off `node_id`."""
        task = job_db.get_task(session, task_id=task_id)
        lost = [e for e in lease_db.recovery_events(session, task_id=task_id)
                if e.from_node == node_id]
        if task is None or not lost:
            return None, None
        return job_db.needs_from_json(task.needs).value, lost[-1].rework

    @staticmethod
    def _lone_held(session: Session, node_id: str, now: float) -> list[Observation]:
        """Each started task of a lone silent node, as the abandonment it becomes if the node
        is not back within the grace (a silent node reports no progress: its work lost now
        is its work lost then)."""
        held: list[Observation] = []
        for lease in lease_db.live_leases(session, node_id=node_id):
            lock = store.latest_lock(session, task_id=lease.task_id, node_id=node_id)
            task = job_db.get_task(session, task_id=lease.task_id)
            if lease.state == "active" and lock is not None and task is not None:
                held.append(LoneHeld(node_id, lease.task_id, lock.amount, lock.raw_rs, now,
                                     job_db.needs_from_json(task.needs).value,
                                     max(task.progress - task.checkpoint_progress, 0.0)))
        return held

    def on_heartbeats(self, session: Session, beats: Mapping[str, float]) -> None:
        """Heartbeats and their gaps (called from the write-behind flush, in its transaction);
        a gap is measured from the last beat the log brought, whichever replica received it."""
        state = self.state
        rows: list[tuple[str, str, float, float]] = []
        with state.lock:
            for node_id, at in beats.items():
                last = state.last_beat.get(node_id)
                if last is not None and at - last >= state.config.gap_persist_s:
                    rows.append((node_id, "hb_gap_s", at, at - last))
        store.add_samples(session, rows=rows)
        self.log.observe(session, Heartbeats(tuple(sorted(beats.items()))))

    # ----- telemetry -------------------------------------------------------------------
    def record_gpu(self, session: Session, *, node_id: str, samples: Sequence[GpuSample],
                   now: float, extras: Sequence[Mapping[str, float]] = ()) -> None:
        """Agent-reported samples: self-reported, so the book lets them only lower RS.
        `extras`: per sample, the NVML facts RS does not read (ECC, PCIe replays, energy...),
        stored as `nvml.<field>` telemetry where the device reported them."""
        max_age_s = self.state.config.max_sample_age_s
        for sample in samples:
            if not now - max_age_s <= sample.at <= now + 5.0:
                raise ValueError(f"sample time {sample.at} is not within the last "
                                 f"{max_age_s:.0f} s")
        store.add_samples(session, rows=[(node_id, f"gpu.{name}", s.at, float(getattr(s, name)))
                                         for s in samples for name in GPU_FIELDS])
        store.add_samples(session, rows=[(node_id, f"nvml.{name}", s.at, value)
                                         for s, extra in zip(samples, extras, strict=False)
                                         for name, value in sorted(extra.items())])
        self.log.observe(session, GpuReport(node_id, tuple(sorted(samples, key=lambda s: s.at))))

    def record_upload(self, session: Session, *, node_id: str, mbps: float, now: float) -> None:
        """Upload throughput the orchestrator measured while the node sent a blob."""
        if not mbps > 0:
            raise ValueError("a measured upload moves > 0 Mbit/s")
        store.add_samples(session, rows=[(node_id, "upload_mbps", now, mbps)])
        self.log.observe(session, Upload(node_id, now, mbps))

    def issue_probe(self, session: Session, *, node_id: str, clock: Callable[[], float]
                    ) -> tuple[bytes, float]:
        """A ping nonce and when it leaves; its RTT is what the orchestrator measures until the
        echo (which any replica may receive: the pending probe is in the DB). The probe is
        timed from `clock()` read after this transaction's first write (the expiry of the
        node's overdue probes), so the orchestrator's own wait for its database (another
        writer holding the lock, which a loaded orchestrator measured at up to 2.8 s of a
        2.9 s round trip) is not counted against the node's link."""
        nonce = secrets.token_bytes(16)
        self._expire_probes(session, clock(), [node_id])
        sent = clock()
        store.add_probe(session, node_id=node_id, nonce=nonce, sent_at=sent)
        return nonce, sent

    def echo_probe(self, session: Session, *, node_id: str, nonce: bytes, now: float) -> float:
        """The node echoed a probe: record the RTT; a stale or unknown nonce is refused."""
        self._expire_probes(session, now, [node_id])
        sent = store.take_probe(session, node_id=node_id, nonce=nonce)
        if sent is None:
            raise KeyError("unknown or expired probe")
        rtt_ms = max(now - sent, 0.0) * 1000.0
        store.add_samples(session, rows=[(node_id, "rtt_ms", sent, rtt_ms)])
        self.log.observe(session, Probe(node_id, sent, rtt_ms))
        return rtt_ms

    def _expire_probes(self, session: Session, now: float,
                       node_ids: Sequence[str] | None = None) -> None:
        """Probes unanswered past the timeout (of `node_ids`, or every node) are lost."""
        state = self.state
        expired = store.take_expired_probes(
            session, sent_before=now - state.config.probe_timeout_s, node_ids=node_ids)
        with state.lock:
            lost = [(node_id, sent) for node_id, sent in expired if state.engine.knows(node_id)]
        store.add_samples(session, rows=[(node_id, "probe_lost", sent, 1.0)
                                         for node_id, sent in lost])
        self.log.observe(session, *(Probe(node_id, sent, None) for node_id, sent in lost))

    def observe_checkpoint_cost(self, session: Session, *, node_id: str, seconds: float,
                                now: float) -> None:
        """A checkpoint's measured cost (Young/Daly's C for this node)."""
        if not seconds > 0:
            raise ValueError("a measured checkpoint takes > 0 seconds")
        store.add_samples(session, rows=[(node_id, "checkpoint_s", now, seconds)])
        self.log.observe(session, CheckpointCost(node_id, seconds))

    def task_outcome(self, session: Session, *, node_id: str, task_id: int,
                     outcome: TaskOutcome, now: float, evidence: bytes | None = None) -> None:
        """A task's attempt on this node ended: its outcome counts toward the node's record
        and, with the raw RS it was placed at, teaches the recalibrator; a failed
        verification goes to the staking policy with the collateral locked for the task
        (and `evidence`, the digest of the stored verification evidence, when known)."""
        store.add_outcome(session, node_id=node_id, task_id=task_id, outcome=outcome.value,
                          at=now)
        finished = outcome is TaskOutcome.COMPLETED
        lock = store.end_lock(session, task_id=task_id, node_id=node_id, at=now,
                              finished=finished)
        self.log.observe(session, AttemptEnded(node_id, task_id, outcome.value,
                                               None if lock is None else lock.raw_rs,
                                               0 if lock is None else lock.amount, now,
                                               None if evidence is None else evidence.hex()))
