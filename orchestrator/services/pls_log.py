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
from orchestrator.domain.pls_observations import (
    Handshake,
    Heartbeats,
    NodeKnown,
    Observation,
    Probe,
    decode,
    encode,
)
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
                    self.apply(decode(kind, body))
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

    def apply(self, observation: Observation) -> None:
        """Feed one observation to the engine (`PlsEngine.apply`, the simulator's door too),
        then keep what only a live service holds beside it: each node's last heartbeat, its
        latest handshake verdict and its recent probe RTTs (the handshakes' ping rounds).
        The caller holds the engine lock."""
        state = self.state
        engine = state.engine
        engine.apply(observation)
        if isinstance(observation, Heartbeats):
            for node_id, at in observation.beats:
                if engine.knows(node_id):
                    last = state.last_beat.get(node_id)
                    state.last_beat[node_id] = at if last is None else max(at, last)
        elif isinstance(observation, Handshake):
            state.verdicts[observation.verdict.node_id] = observation.verdict
        elif isinstance(observation, Probe) and engine.knows(observation.node_id):
            state.recent_rtts[observation.node_id].append((observation.sent, observation.rtt_ms))
