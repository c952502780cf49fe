"""The PLS observation log: how every replica's engine learns the same things in the same
order.

A use case writes its observations (`domain.pls_observations`) to the log in the caller's
transaction; the ids are taken as that transaction commits, gapless and in commit order
(`db.pls.log_observations`). No replica applies an observation when it receives it: each
applies the log past its cursor, in id order, exactly once (the cursor moves with every row
applied), right after its own commits (so a caller reads its own writes) and every
`pls_follow_interval_s` (what other replicas wrote). The leader's staking decisions read the
engine after catching up; the tiers they set are logged like any observation.

The log is pruned below the slowest replica heard from in the last `LIVE_REPLICA_S`; a
replica that finds its next row pruned away rebuilds from the tables and follows from there.
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from orchestrator.db import pls as store
from orchestrator.db.models import Node
from orchestrator.domain.pls_engine import LoneHold, PlsEngine
from orchestrator.domain.pls_observations import (
    Abandoned,
    AttemptEnded,
    CheckpointCost,
    Departed,
    GpuReport,
    Handshake,
    Heartbeats,
    LoneHeld,
    NodeKnown,
    Observation,
    Probe,
    SessionEnded,
    SessionStarted,
    TierDecided,
    Upload,
    decode,
    encode,
)
from orchestrator.domain.reliability import ProbeSample, TaskOutcome, UploadSample
from orchestrator.domain.types import Tier
from orchestrator.services.pls_state import PlsState

log = logging.getLogger("orchestrator.pls")

READ_BATCH = 2_000  # log rows read per query
LIVE_REPLICA_S = 60.0  # a replica whose cursor is older than this no longer holds back pruning
FORGET_REPLICA_S = 86_400.0  # cursors of replicas gone this long are deleted


def known(node: Node) -> NodeKnown:
    return NodeKnown(node.id, node.provider, node.region, node.registered_at, node.tier,
                     node.session_key)


class PlsLog:
    """The observation log of `state`'s engine: the other parts write their observations to
    it (`observe`), and it applies every committed one, this replica's and the others', in
    the log's order (`catch_up`)."""

    def __init__(self, state: PlsState) -> None:
        self.state = state

    def observe(self, session: Session, *observations: Observation) -> None:
        """Log these for every replica's engine, this one's included, once `session` commits."""
        store.log_observations(session, rows=[encode(o) for o in observations],
                               committed=self._committed)

    def _committed(self, engine: Engine) -> None:
        try:
            self.catch_up(engine)
        except Exception:  # the follow job catches up later; the commit itself stands
            log.exception("catching up with the PLS observation log failed")

    def catch_up(self, source: Session | Engine) -> int:
        """Apply every committed log row past the cursor, in order; how many. Rows are read
        outside the engine lock (a read may wait for a connection), applied under it."""
        state = self.state
        applied = 0
        while not state.stale:
            rows = store.observations_after(source, after=state.cursor, limit=READ_BATCH)
            with state.lock:
                fresh = [row for row in rows if row[0] > state.cursor]  # another thread's
                if fresh and fresh[0][0] != state.cursor + 1:
                    log.warning("PLS log pruned past this replica (at %d, next %d): rebuilding",
                                state.cursor, fresh[0][0])
                    state.stale = True
                    break
                for row_id, kind, body in fresh:
                    self._apply(decode(kind, body))
                    state.cursor = row_id
                applied += len(fresh)
            if len(rows) < READ_BATCH:
                break
        return applied

    @staticmethod
    def prune(session: Session, *, now: float) -> int:
        """Delete the log rows every live replica has applied (the leader's job)."""
        return store.prune_observations(session, live_since=now - LIVE_REPLICA_S,
                                        forget_before=now - FORGET_REPLICA_S)

    def _apply(self, observation: Observation) -> None:
        """Feed one observation to the engine, exactly as its use case describes it."""
        state = self.state
        engine = state.engine
        if isinstance(observation, NodeKnown):
            state.know(observation)
            return
        if isinstance(observation, Departed):
            engine.departed(observation.node_ids, observation.at)
            return
        if isinstance(observation, Heartbeats):
            for node_id, at in observation.beats:
                if engine.knows(node_id):
                    last = state.last_beat.get(node_id)
                    state.last_beat[node_id] = at if last is None else max(at, last)
                    engine.heartbeat(node_id, at)
            return
        if isinstance(observation, Handshake):
            state.verdicts[observation.verdict.node_id] = observation.verdict
            if engine.knows(observation.verdict.node_id):
                engine.handshake(observation.verdict)
            return
        node_id = observation.node_id
        if not engine.knows(node_id):
            return
        if isinstance(observation, SessionStarted):
            if not engine.online(node_id, observation.at):
                engine.session_started(node_id, observation.at)
        elif isinstance(observation, SessionEnded):
            if engine.online(node_id, observation.at):
                engine.session_ended(node_id, observation.at, observation.abrupt)
        elif isinstance(observation, Abandoned):
            engine.abandoned(node_id, str(observation.task_id), observation.collateral,
                             observation.raw_rs, observation.at, value=observation.value,
                             rework_share=observation.rework_share,
                             announced=observation.announced)
        elif isinstance(observation, LoneHeld):
            engine.hold_lone(node_id, LoneHold(
                str(observation.task_id), observation.collateral, observation.raw_rs,
                observation.at, observation.value, observation.rework_share))
        elif isinstance(observation, Probe):
            state.record_probe(node_id, ProbeSample(observation.sent, observation.rtt_ms))
        elif isinstance(observation, GpuReport):
            for sample in observation.samples:
                engine.gpu(node_id, sample)
        elif isinstance(observation, Upload):
            engine.upload(node_id, UploadSample(observation.at, observation.mbps))
        elif isinstance(observation, CheckpointCost):
            engine.checkpoint_measured(node_id, observation.seconds)
        elif isinstance(observation, AttemptEnded):
            self._attempt_ended(engine, observation)
        elif isinstance(observation, TierDecided):
            engine.staking.adopt_tier(node_id, Tier(observation.tier), observation.at)

    @staticmethod
    def _attempt_ended(engine: PlsEngine, ended: AttemptEnded) -> None:
        """A completed attempt counts toward the record and teaches the recalibrator; a failed
        verification goes to the staking policy with the collateral locked for the task."""
        outcome = TaskOutcome(ended.outcome)
        if outcome is TaskOutcome.COMPLETED:
            engine.completed(ended.node_id, ended.raw_rs)
        elif outcome is TaskOutcome.FAILED_VERIFICATION:
            engine.verification_failed(
                ended.node_id, str(ended.task_id), ended.collateral, ended.raw_rs, ended.at,
                evidence=None if ended.evidence is None else bytes.fromhex(ended.evidence))
        else:
            engine.outcome(ended.node_id, outcome)
            engine.attempt_ended(ended.raw_rs, False)
