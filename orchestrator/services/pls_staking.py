"""PLS staking and epochs: every online node's RS observed, the staking policy's slashes and
tier changes queued as outbox actions, and each epoch's score root committed; plus the
periodic jobs that run them under the leader lock."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from orchestrator.db import nodes as node_db
from orchestrator.db import outbox
from orchestrator.db import pls as store
from orchestrator.db.models import SlashRecord
from orchestrator.domain.chain_actions import (
    CommitEpoch,
    ProveAssignment,
    SetTier,
    SlashCollateral,
)
from orchestrator.domain.ids import hex0x, unhex
from orchestrator.domain.merkle import placement_id
from orchestrator.domain.pls_observations import TierDecided
from orchestrator.domain.score_commitment import EpochEntry, commit_epoch
from orchestrator.domain.slashing import SlashDecision
from orchestrator.domain.types import SlashReason, Tier
from orchestrator.services.pls_ingest import lapsed_lone_holds
from orchestrator.services.pls_log import PlsLog
from orchestrator.services.pls_state import PlsState, StakeUnavailable

log = logging.getLogger("orchestrator.pls")

SLASH_KEY = "slash:"  # + the decision's id: the idempotency key of its `slash` outbox row


@dataclass(frozen=True, slots=True)
class DecideResult:
    slashes: tuple[SlashDecision, ...]
    tiers: tuple[tuple[str, Tier], ...]


@dataclass(frozen=True, slots=True)
class ScoreProof:
    epoch: int
    root: bytes
    provider: str
    score_bps: int
    telemetry_digest: bytes
    proof: list[bytes]


class PlsStaking:
    """The staking policy over `state`'s engine, its decisions written to `log` and queued."""

    def __init__(self, state: PlsState, log: PlsLog) -> None:
        self.state = state
        self.log = log

    def _online(self, now: float) -> list[str]:
        engine = self.state.engine
        return [n for n in engine.node_ids() if engine.online(n, now)]

    def decide(self, session: Session, *, now: float) -> DecideResult:
        """Observe every online node's RS, let the policy decide, and queue the results:
        `slash` (collateral of an abandoned or wrongly verified task) and `tier` actions.
        A LOW_SCORE slash is only recorded: its score goes into the next epoch root, and
        anyone proves it on chain with `slashForScore`. Leader-only (the policy's windows
        live in this engine): it first applies the whole log, and logs the tiers it sets so
        every replica gates placements on them."""
        state = self.state
        with state.lock:
            lapsed = lapsed_lone_holds(session, state.engine, now)
        self.log.observe(session, *lapsed)
        self.log.catch_up(session)
        with state.lock:
            readings = state.engine.readings(self._online(now), now)
            providers = {state.engine.provider_of(n) for n in readings}
        for reading in readings.values():
            state.metrics.reliability_score.observe(reading.rs)
        bonded: dict[str, int] = {}
        for provider in sorted(providers):
            try:
                bonded[provider] = state.stake.stake(provider, now).bonded
            except StakeUnavailable:
                bonded[provider] = 0  # the record only; slashForScore computes its own amount
        with state.lock:
            actions = state.engine.decide(readings, bonded, now)
        for decision in actions.slashes:
            self._queue_slash(session, decision, now)
        tiers: list[tuple[str, Tier]] = []
        for change in actions.tier_changes:
            holder = store.set_node_tier(session, node_id=change.node_id, tier=int(change.new))
            if holder is None:
                continue
            outbox.queue_action(
                session, now=now,
                idempotency_key=f"tier:{change.node_id}:{round(change.at * 1000)}:{change.new}",
                action=SetTier(provider=holder, tier=int(change.new), node_id=change.node_id,
                               detail=change.detail))
            self.log.observe(session, TierDecided(change.node_id, int(change.new), change.at))
            tiers.append((change.node_id, change.new))
        return DecideResult(actions.slashes, tuple(tiers))

    def slash_overturned(self, session: Session, *, record: SlashRecord, key: str,
                         chain_prior: Tier, now: float) -> Tier | None:
        """A dispute reversed the slash `record` carried out: the node gets back the tier the
        slash took, as the policy's own moves are (stored, logged for every replica's engine,
        queued for the chain once per `key`). The policy remembers the tier it demoted from;
        after a rebuild that forgot it, the chain's record of the tier before the slash
        stands in. A node that has climbed since keeps its tier. Returns the tier restored."""
        decision = SlashDecision(
            record.node_id, record.provider, SlashReason(record.reason), record.amount,
            unhex(record.evidence), record.decided_at, record.decided_at,
            None if record.task_id is None else str(record.task_id), record.detail)
        with self.state.lock:
            engine = self.state.engine
            change = (engine.staking.dispute_upheld(decision, now)
                      if engine.knows(record.node_id) else None)
        target = chain_prior if change is None else change.new
        node = node_db.get_node(session, node_id=record.node_id)
        if node is None or node.tier >= target:
            return None
        store.set_node_tier(session, node_id=record.node_id, tier=int(target))
        outbox.queue_action(session, now=now, idempotency_key=f"tier:{key}:{record.node_id}",
                            action=SetTier(provider=node.provider, tier=int(target),
                                           node_id=record.node_id,
                                           detail=f"slash overturned ({key})"))
        self.log.observe(session, TierDecided(record.node_id, int(target), now))
        return target

    def adopt_chain_tier(self, session: Session, *, provider: str, tier: Tier,
                         now: float) -> list[str]:
        """The chain moved `provider` to `tier` by itself (`pls_chain.on_tier_changed`): each
        of its nodes takes it, stored and logged so every replica's engine adopts it, with
        nothing queued (the chain already holds it). Returns the nodes that moved."""
        moved = []
        for node in store.nodes_of_provider(session, provider=provider):
            if node.tier != int(tier):
                store.set_node_tier(session, node_id=node.id, tier=int(tier))
                self.log.observe(session, TierDecided(node.id, int(tier), now))
                moved.append(node.id)
        return moved

    def _queue_slash(self, session: Session, decision: SlashDecision, now: float) -> None:
        """Store the decision and queue its `slash` action, once per task, node and reason:
        the ids of abandonment slashes carry their decision time, so a new leader whose policy
        heard of an abandonment its predecessor already decided must not slash it again."""
        task_id = None if decision.task_id is None else int(decision.task_id)
        if task_id is not None and store.task_slashed(session, task_id=task_id,
                                                      node_id=decision.node_id,
                                                      reason=int(decision.reason)):
            return
        stored = store.add_slash(
            session, slash_id=decision.slash_id, node_id=decision.node_id,
            provider=decision.provider, reason=int(decision.reason), amount=decision.amount,
            evidence=decision.evidence, task_id=task_id, decided_at=decision.decided_at,
            detail=decision.detail)
        if not stored:
            return
        self.state.metrics.slashes.labels(decision.reason.name.lower()).inc()
        if decision.reason is SlashReason.LOW_SCORE or task_id is None:
            return
        lock = store.latest_lock(session, task_id=task_id, node_id=decision.node_id)
        if lock is None or min(decision.amount, lock.amount) == 0:
            return
        job = unhex(lock.job_id)
        placement = placement_id(lock.task_id, lock.attempt)
        # The placement goes on chain first (a no-op when proven before), then its slash. Its
        # key names the job and the placement (a task attempt: one provider), 93 characters at
        # most, inside the outbox's 128.
        outbox.queue_action(
            session, idempotency_key=f"prove:{lock.job_id}:{placement}",
            now=now, action=ProveAssignment(job_id=job, provider=decision.provider,
                                             placement=placement))
        outbox.queue_action(
            session, idempotency_key=SLASH_KEY + hex0x(decision.slash_id), now=now,
            action=SlashCollateral(job_id=job, provider=decision.provider, placement=placement,
                                   amount=min(decision.amount, lock.amount),
                                   reason=int(decision.reason), evidence=decision.evidence))

    def epoch_of(self, now: float) -> int:
        return int(now // self.state.config.epoch_s)

    def close_epoch(self, session: Session, *, epoch: int, now: float) -> bytes | None:
        """Commit `epoch`: one leaf per provider (lowest node, floored at the threshold unless
        the policy slashed it for a low score), stored with its root, and `commit` queued.
        None when it is already closed or no node is online."""
        if store.get_epoch(session, epoch=epoch) is not None:
            return None
        self.log.catch_up(session)
        low = store.unassigned_low_score_slashes(session, reason=int(SlashReason.LOW_SCORE))
        decisions = [SlashDecision(r.node_id, r.provider, SlashReason(r.reason), r.amount,
                                   unhex(r.evidence), r.decided_at, r.decided_at, None,
                                   r.detail) for r in low]
        with self.state.lock:
            engine = self.state.engine
            readings = engine.readings(self._online(now), now)
            if not readings:
                return None
            entries = engine.staking.epoch_entries(
                {n: (r.rs, r.digest) for n, r in readings.items()}, decisions)
            node_of = {(engine.provider_of(n), r.digest): n for n, r in readings.items()}
        commitment = commit_epoch(entries)
        store.add_epoch(session, epoch=epoch, root=commitment.root, closed_at=now, leaves=[
            store.LeafRow(e.provider, node_of[(e.provider, e.telemetry_digest)], e.score_bps,
                          e.telemetry_digest) for e in entries])
        store.assign_epoch(session, records=low, epoch=epoch)
        outbox.queue_action(session, idempotency_key=f"commit:{epoch}", now=now,
                            action=CommitEpoch(epoch=epoch, root=commitment.root))
        return commitment.root

    @staticmethod
    def score_proof(session: Session, *, provider: str, epoch: int) -> ScoreProof | None:
        """The committed leaf of `provider` in `epoch` and its Merkle proof."""
        stored = store.get_epoch(session, epoch=epoch)
        if stored is None:
            return None
        leaves = store.epoch_leaves(session, epoch=epoch)
        mine = next((leaf for leaf in leaves if leaf.provider == provider), None)
        if mine is None:
            return None
        commitment = commit_epoch([EpochEntry(leaf.provider, leaf.score_bps,
                                              leaf.telemetry_digest) for leaf in leaves])
        proof = commitment.tree.proof(commitment.leaf_of[provider])
        return ScoreProof(epoch, commitment.root, provider, mine.score_bps,
                          mine.telemetry_digest, proof)

    # ----- periodic jobs (each run under its leader lock) ---------------------------------
    def run_decide(self, session: Session, *, now: float) -> DecideResult:
        """`decide`, logged."""
        result = self.decide(session, now=now)
        for slash in result.slashes:
            log.warning("slash decided: node %s reason %s amount %d (%s)", slash.node_id,
                        slash.reason.name, slash.amount, slash.detail)
        for node_id, tier in result.tiers:
            log.info("node %s tier -> %s", node_id, tier.name)
        return result

    def close_last_epoch(self, session: Session, *, now: float) -> bytes | None:
        """Close the epoch that ended most recently (idempotent: a closed epoch is skipped)."""
        epoch = self.epoch_of(now) - 1
        if epoch < 0:
            return None
        root = self.close_epoch(session, epoch=epoch, now=now)
        if root is not None:
            log.info("epoch %d closed, root 0x%s queued", epoch, root.hex())
        return root
