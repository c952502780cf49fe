"""Same process across a network cut: a node back from a DEAD verdict shows the chunks its
process rendered for the task it lost, signed with the session key of its login.

What the orchestrator can check itself comes first: the task's lease on this node was revoked
at that verdict (the node held it), each chunk fits the frame's chunk plan, its bytes are
stored here and were first stored after the verdict (the chunks known at the verdict were all
uploaded before it, so a chunk first seen later is new content), and it claims no render time
after its bytes arrived. The engine then judges the signature and the silence
(`StakingPolicy.progress_shown`): the pending abandonment is dropped before it can mature into
a slash. A withdrawal is persisted: the departure's session counts as censored on replay, and
its chunks can never withdraw another abandonment, across restarts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from orchestrator.db import blobs as blob_db
from orchestrator.db import jobs as job_db
from orchestrator.db import pls as store
from orchestrator.db.models import Node
from orchestrator.domain.checkpointing import plan_chunks
from orchestrator.domain.continuity import ChunkMark, ProgressProof
from orchestrator.domain.slashing import ProgressVerdict
from orchestrator.services.pls_ingest import lapsed_lone_holds
from orchestrator.services.pls_log import PlsLog
from orchestrator.services.pls_state import PlsState


@dataclass(frozen=True, slots=True)
class ShownChunk:
    sha256: str  # hex
    rendered_at: float
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class ProgressOutcome:
    verdict: ProgressVerdict
    credited: int  # chunks that withdrew the abandonment (0 unless WITHDRAWN)


def chunk_plan(payload: Mapping[str, Any]) -> set[tuple[int, int]]:
    """(offset, length) of every sample chunk of the task's frame, as the agent renders and
    checkpoints them; none for a task without chunks."""
    samples, chunk = payload.get("samples"), payload.get("chunk_samples")
    if payload.get("kind") != "blender" or not samples or not chunk:
        return set()
    return set(plan_chunks(int(samples), int(chunk)))


class PlsContinuity:
    """Proofs of progress judged by `state`'s engine, abandonments they find lapsed written
    to `log`."""

    def __init__(self, state: PlsState, log: PlsLog) -> None:
        self.state = state
        self.log = log

    def show_progress(self, session: Session, *, node: Node, task_id: int,
                      chunks: Sequence[ShownChunk], resumed_at: float, signature: bytes,
                      now: float) -> ProgressOutcome:
        """Judge a reconnecting node's proof of progress (see the module docstring). Lone
        holds the grace ran out on are reported first: a proof that comes before the next
        sweep or staking pass finds its abandonment pending, dated at the DEAD verdict."""
        state = self.state
        with state.lock:
            lapsed = lapsed_lone_holds(session, state.engine, now)
        if lapsed:
            self.log.observe(session, *lapsed)
            self.log.catch_up(session)
        lease = store.revoked_lease(session, task_id=task_id, node_id=node.id)
        task = job_db.get_task(session, task_id=task_id)
        if lease is None or lease.released_at is None or task is None:
            return ProgressOutcome(ProgressVerdict.NOT_PENDING, 0)
        with state.lock:  # dated at the DEAD verdict, not at a lone hold's lapse
            pending_since = state.engine.staking.pending_since(str(task_id))
        departed_at = lease.released_at if pending_since is None else pending_since
        proof = ProgressProof(node.id, str(task_id), tuple(
            ChunkMark(bytes.fromhex(c.sha256), c.rendered_at) for c in chunks), resumed_at,
            signature)
        plan = chunk_plan(task.payload)
        new: list[bytes] = []
        for chunk in chunks:
            blob = blob_db.get_blob(session, sha256=chunk.sha256)
            if (blob is not None and blob.created_at > departed_at
                    and departed_at < chunk.rendered_at <= min(blob.created_at, now)
                    and (chunk.offset, chunk.length) in plan
                    and bytes.fromhex(chunk.sha256) not in new):
                new.append(bytes.fromhex(chunk.sha256))
        with state.lock:
            if not state.engine.knows(node.id):
                return ProgressOutcome(ProgressVerdict.NOT_PENDING, 0)
            verdict = state.engine.progress_shown(proof, new, now, departed_at)
        if verdict is not ProgressVerdict.WITHDRAWN:
            return ProgressOutcome(verdict, 0)
        signer = proof.signer()
        assert signer is not None  # WITHDRAWN means the session key signed it
        store.add_withdrawal(session, task_id=task_id, node_id=node.id, session_key=signer,
                             departed_at=departed_at, withdrawn_at=now, chunks=new)
        store.censor_session(session, node_id=node.id, ended_at=departed_at)
        state.metrics.slashes_withdrawn.inc()
        return ProgressOutcome(verdict, len(new))
