"""PLS handshake: PoPW challenges issued and judged (single use of each nonce across restarts
and replicas), verdicts stored and given to the staking policy."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Sequence

from sqlalchemy.orm import Session

from orchestrator.db import pls as store
from orchestrator.domain.pls_observations import Handshake
from orchestrator.domain.popw import Challenge, PopwAnswer, PopwFacts, PopwReason, PopwVerdict
from orchestrator.domain.reliability import GpuSample
from orchestrator.domain.types import Tier
from orchestrator.services.pls_log import PlsLog
from orchestrator.services.pls_state import PlsState

# Verdicts that never consumed the nonce: anyone can send them, so they are not the node's.
NOT_THE_NODES = frozenset({PopwReason.UNKNOWN_CHALLENGE, PopwReason.REPLAYED, PopwReason.FORGED,
                           PopwReason.WRONG_NODE})
CHALLENGE_RETENTION_S = 86_400.0  # issued challenges are forgotten this long past their deadline


class PlsHandshake:
    """PoPW challenges over `state`'s challenge book, verdicts written to `log`."""

    def __init__(self, state: PlsState, log: PlsLog) -> None:
        self.state = state
        self.log = log

    def issue_challenge(self, session: Session, *, node_id: str, gpu_class: str,
                        now: float) -> Challenge:
        # Not under `popw_lock`: `issue` computes nothing and only adds its own fresh nonce
        # (`issue_lock` only keeps it apart from `prune_challenges`).
        state = self.state
        with state.issue_lock:
            challenge = state.challenges.issue(node_id, gpu_class, secrets.token_bytes(32), now)
        store.add_challenge(session, nonce=challenge.nonce, node_id=node_id,
                            gpu_class=gpu_class, issued_at=now, deadline=challenge.deadline)
        return challenge

    def judge_answer(self, session: Session, *, node_id: str, nonce: bytes, answer: PopwAnswer,
                     signature_valid: bool, gpu_under_load: Sequence[GpuSample],
                     now: float) -> PopwVerdict:
        """Judge one answer against the challenge in the DB (single use across restarts and
        replicas); a verdict that consumed the nonce is stored and logged for the policy."""
        state = self.state
        record = store.get_challenge(session, nonce=nonce)
        if record is not None and record.consumed_at is not None:
            return self._refused(node_id, PopwReason.REPLAYED, now)
        if record is not None:
            # issued by another replica or before a restart: rebuild it as issued (`issue`
            # refuses a nonce it already holds)
            with contextlib.suppress(ValueError), state.issue_lock:
                state.challenges.issue(record.node_id, record.gpu_class, nonce, record.issued_at)
        with state.popw_lock:
            rtts = self._handshake_rtts(node_id, since=record.issued_at if record else now)
            verdict = state.challenges.judge(PopwFacts(
                nonce, node_id, answer, now, signature_valid, rtts, tuple(gpu_under_load)), now)
        if set(verdict.reasons) & NOT_THE_NODES:
            state.metrics.handshakes.labels("failed", verdict.reasons[0].value).inc()
            return verdict
        if not store.consume_challenge(session, nonce=nonce, at=now):
            return self._refused(node_id, PopwReason.REPLAYED, now)
        store.add_verdict(session, node_id=node_id, nonce=nonce, passed=verdict.passed,
                          tier=int(verdict.tier), decided_at=verdict.decided_at,
                          expires_at=verdict.expires_at,
                          reasons=[r.value for r in verdict.reasons])
        self.log.observe(session, Handshake(verdict))
        state.metrics.handshakes.labels(
            "passed" if verdict.passed else "failed",
            verdict.reasons[0].value if verdict.reasons else "none").inc()
        return verdict

    def _refused(self, node_id: str, reason: PopwReason, now: float) -> PopwVerdict:
        self.state.metrics.handshakes.labels("failed", reason.value).inc()
        return PopwVerdict(node_id, False, Tier.BACKGROUND, now, now, (reason,))

    def _handshake_rtts(self, node_id: str, since: float) -> list[float | None]:
        """The orchestrator-timed probes of this node since the challenge, newest
        `ping_rounds` of them; rounds never echoed count as lost."""
        state = self.state
        wanted = state.config.popw.ping_rounds
        with state.lock:
            measured = [rtt for at, rtt in state.recent_rtts.get(node_id, ()) if at >= since]
        measured = measured[-wanted:]
        return measured + [None] * (wanted - len(measured))

    def prune_challenges(self, now: float) -> int:
        """Forget challenges long past their deadline (periodic), so they do not pile up in
        memory; the DB still refuses their replay."""
        with self.state.popw_lock, self.state.issue_lock:
            return self.state.challenges.prune(now, CHALLENGE_RETENTION_S)
