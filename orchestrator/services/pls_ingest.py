"""PLS ingest: registrations and sessions, failure-sweep verdicts, heartbeats, probes, GPU
samples, uploads, checkpoint costs and task outcomes, persisted then fed to the engine."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from orchestrator.db import crud
from orchestrator.db import pls as store
from orchestrator.db.models import Node
from orchestrator.domain.reliability import GpuSample, ProbeSample, TaskOutcome, UploadSample
from orchestrator.services.pls_state import GPU_FIELDS, PlsState


@dataclass(frozen=True, slots=True)
class SweepFacts:
    """What a failure sweep found, for the staking side."""

    dead: Sequence[tuple[str, bool]]  # (node id, abrupt: neither draining nor a shared silence)
    abandoned: Sequence[tuple[str, int]]  # (node id, task id) running on a node that died
    returned: Sequence[str]


class PlsIngest(PlsState):
    def lease_holds(self, node_ids: Sequence[str], now: float) -> dict[str, float]:
        """Nodes the detector just called DEAD, all at once: how long to keep each one's leases.
        Their departures are recorded first, so a silence shared within this sweep counts."""
        with self._lock:
            holds = self.engine.departed(node_ids, now)
        return {node_id: seconds for node_id, seconds in holds.items() if seconds > 0.0}

    def node_registered(self, session: Session, *, node: Node, now: float) -> None:
        """A node (re)registered: it is online from now on."""
        with self._lock:
            self._know(node)
            if not self.engine.online(node.id, now):
                store.open_session(session, node_id=node.id, at=now)
                self.engine.session_started(node.id, now)

    def session_bound(self, session: Session, *, node: Node, session_key: str) -> None:
        """The node's wallet-signed login named its process's ephemeral session key."""
        crud.bind_session_key(session, node=node, session_key=session_key)
        with self._lock:
            self._know(node)  # binds the key in the engine as a rebuild does

    def after_sweep(self, session: Session, *, facts: SweepFacts, now: float) -> None:
        """Departures end sessions (abrupt = DEAD; censored = drained, or a silence shared with
        peers), running tasks on a dead node are reported as abandoned with the collateral
        locked for them (their attempts end unfinished, in task order), returns start a new
        session; then overdue probes count as lost."""
        with self._lock:
            for node_id, abrupt in facts.dead:
                if not self.engine.knows(node_id):
                    continue
                if self.engine.online(node_id, now):
                    store.close_session(session, node_id=node_id, at=now, abrupt=abrupt)
                    self.engine.session_ended(node_id, now, abrupt)
                if abrupt:
                    self.engine.departed([node_id], now)
            for node_id, task_id in sorted(facts.abandoned, key=lambda pair: pair[1]):
                lock = store.end_lock(session, task_id=task_id, node_id=node_id, at=now,
                                      finished=False)
                if self.engine.knows(node_id) and lock is not None:
                    self.engine.abandoned(node_id, str(task_id), lock.amount, lock.raw_rs, now)
            for node_id in facts.returned:
                if self.engine.knows(node_id) and not self.engine.online(node_id, now):
                    store.open_session(session, node_id=node_id, at=now)
                    self.engine.session_started(node_id, now)
            self._expire_probes(session, now, list(self._probes))

    def on_heartbeats(self, session: Session, beats: Mapping[str, float]) -> None:
        """Heartbeat gaps (called from the write-behind flush, in its transaction)."""
        rows: list[tuple[str, str, float, float]] = []
        with self._lock:
            for node_id, at in beats.items():
                if not self.engine.knows(node_id):
                    continue
                last = self._last_beat.get(node_id)
                if last is not None and at - last >= self.config.gap_persist_s:
                    rows.append((node_id, "hb_gap_s", at, at - last))
                self._last_beat[node_id] = at if last is None else max(at, last)
                self.engine.heartbeat(node_id, at)
        store.add_samples(session, rows=rows)

    # ----- telemetry -------------------------------------------------------------------
    def record_gpu(self, session: Session, *, node_id: str, samples: Sequence[GpuSample],
                   now: float) -> None:
        """Agent-reported samples: self-reported, so the book lets them only lower RS."""
        for sample in samples:
            if not now - self.config.max_sample_age_s <= sample.at <= now + 5.0:
                raise ValueError(f"sample time {sample.at} is not within the last "
                                 f"{self.config.max_sample_age_s:.0f} s")
        store.add_samples(session, rows=[(node_id, f"gpu.{name}", s.at, float(getattr(s, name)))
                                         for s in samples for name in GPU_FIELDS])
        with self._lock:
            if self.engine.knows(node_id):
                for sample in sorted(samples, key=lambda s: s.at):
                    self.engine.gpu(node_id, sample)

    def record_upload(self, session: Session, *, node_id: str, mbps: float, now: float) -> None:
        """Upload throughput the orchestrator measured while the node sent a blob."""
        if not mbps > 0:
            raise ValueError("a measured upload moves > 0 Mbit/s")
        store.add_samples(session, rows=[(node_id, "upload_mbps", now, mbps)])
        with self._lock:
            if self.engine.knows(node_id):
                self.engine.upload(node_id, UploadSample(now, mbps))

    def issue_probe(self, session: Session, *, node_id: str, now: float) -> bytes:
        """A ping nonce; its RTT is what the orchestrator measures until the echo."""
        nonce = secrets.token_bytes(16)
        with self._lock:
            self._expire_probes(session, now, [node_id])
            self._probes[node_id][nonce] = now
        return nonce

    def echo_probe(self, session: Session, *, node_id: str, nonce: bytes, now: float) -> float:
        """The node echoed a probe: record the RTT; a stale or unknown nonce is refused."""
        with self._lock:
            self._expire_probes(session, now, [node_id])
            sent = self._probes[node_id].pop(nonce, None)
            if sent is None:
                raise KeyError("unknown or expired probe")
            rtt_ms = max(now - sent, 0.0) * 1000.0
            self._record_probe(node_id, ProbeSample(sent, rtt_ms))
        store.add_samples(session, rows=[(node_id, "rtt_ms", sent, rtt_ms)])
        return rtt_ms

    def _record_probe(self, node_id: str, sample: ProbeSample) -> None:
        self.engine.probe(node_id, sample)
        self._recent_rtts[node_id].append((sample.at, sample.rtt_ms))

    def _expire_probes(self, session: Session, now: float, node_ids: Sequence[str]) -> None:
        rows: list[tuple[str, str, float, float]] = []
        for node_id in node_ids:
            pending = self._probes.get(node_id)
            if not pending or not self.engine.knows(node_id):
                continue
            for nonce, sent in list(pending.items()):
                if now - sent > self.config.probe_timeout_s:
                    del pending[nonce]
                    self._record_probe(node_id, ProbeSample(sent, None))
                    rows.append((node_id, "probe_lost", sent, 1.0))
        store.add_samples(session, rows=rows)

    def observe_checkpoint_cost(self, session: Session, *, node_id: str, seconds: float,
                                now: float) -> None:
        """A checkpoint's measured cost (Young/Daly's C for this node)."""
        if not seconds > 0:
            raise ValueError("a measured checkpoint takes > 0 seconds")
        store.add_samples(session, rows=[(node_id, "checkpoint_s", now, seconds)])
        with self._lock:
            if self.engine.knows(node_id):
                self.engine.checkpoint_measured(node_id, seconds)

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
        raw_rs = None if lock is None else lock.raw_rs
        with self._lock:
            if not self.engine.knows(node_id):
                return
            if outcome is TaskOutcome.COMPLETED:
                self.engine.completed(node_id, raw_rs)
            elif outcome is TaskOutcome.FAILED_VERIFICATION:
                self.engine.verification_failed(node_id, str(task_id),
                                                0 if lock is None else lock.amount, raw_rs, now,
                                                evidence=evidence)
            else:
                self.engine.outcome(node_id, outcome)
                self.engine.attempt_ended(raw_rs, False)
