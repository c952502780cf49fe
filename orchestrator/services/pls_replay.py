"""PLS restart: replay the DB into a fresh engine, so a restarted orchestrator scores, ranks
and recalibrates as the one before it did, then follow the observation log from the point
the replay read (`follow`, every replica's periodic job)."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy.orm import Session

from orchestrator.db import pls as store
from orchestrator.domain.pls_observations import (
    CheckpointCost,
    GpuReport,
    Handshake,
    Heartbeats,
    Probe,
    SessionEnded,
    SessionStarted,
    Upload,
)
from orchestrator.domain.popw import PopwReason, PopwVerdict
from orchestrator.domain.reliability import GpuSample, TaskOutcome
from orchestrator.domain.types import Tier
from orchestrator.services.pls_log import PlsLog, known
from orchestrator.services.pls_state import GPU_FIELDS, PlsState


class PlsReplay:
    """Rebuilds `state`'s engine from the tables, then follows `log` from there."""

    def __init__(self, state: PlsState, log: PlsLog) -> None:
        self.state = state
        self.log = log

    def rebuild(self, session: Session, *, now: float) -> None:
        """Replace the engine with one replayed from the tables, in this order: nodes (tier as
        stored); every session start and end in time order (so the daily prior refits happen
        where they happened); the last day of telemetry; every measured checkpoint cost; task
        outcomes; every ended attempt with the raw RS it was placed at, in the order they
        ended (the recalibrator); each node's latest handshake; and the abandonments withdrawn
        by a proof of progress. Each goes in as the observation it was logged as, through the
        log's `apply` (the aggregates the tables keep apart excepted). `session` must not have
        begun: it reads the tables and the log's head in one snapshot, so the log rows past
        that head are exactly what the replay has not seen."""
        state = self.state
        store.consistent_reads(session)
        with state.lock:
            state.reset(cursor=store.log_head(session))
            engine = state.engine
            apply = self.log.apply  # the log's door: the engine's guards and the service's dicts
            for node in store.all_nodes(session):
                apply(known(node))
            # (at, 0 end / 1 start / 2 end at its own start, id, node, abrupt): at one instant
            # a session ends before the next starts, and one ended no later than it started
            # (a replica's clock behind) ends after its own start, as the log applied it.
            events: list[tuple[float, int, int, str, bool]] = []
            for row in store.all_sessions(session):
                events.append((row.started_at, 1, row.id, row.node_id, False))
                if row.ended_at is not None:
                    events.append((max(row.ended_at, row.started_at),
                                   0 if row.ended_at > row.started_at else 2, row.id,
                                   row.node_id, bool(row.abrupt)))
            for at, kind, _, node_id, abrupt in sorted(events):
                apply(SessionStarted(node_id, at) if kind == 1
                      else SessionEnded(node_id, at, abrupt))
            gpu: dict[tuple[str, float], dict[str, float]] = defaultdict(dict)
            since = now - state.book.config.long_window_s
            for sample in store.samples_since(session, since=since):
                node_id = sample.node_id
                if sample.metric == "rtt_ms":
                    apply(Probe(node_id, sample.at, sample.value))
                elif sample.metric == "probe_lost":
                    apply(Probe(node_id, sample.at, None))
                elif sample.metric == "hb_gap_s":
                    # the engine only: after a rebuild, the first beat the log brings starts
                    # the next gap (a stored gap's end is no beat the service saw last)
                    engine.apply(Heartbeats(((node_id, sample.at - sample.value),)))
                    engine.apply(Heartbeats(((node_id, sample.at),)))
                elif sample.metric == "upload_mbps":
                    apply(Upload(node_id, sample.at, sample.value))
                elif sample.metric.startswith("gpu."):
                    gpu[(node_id, sample.at)][sample.metric[4:]] = sample.value
            for (node_id, at), values in sorted(gpu.items(), key=lambda item: item[0][1]):
                if set(values) == set(GPU_FIELDS):
                    values["throttle_reasons"] = int(values["throttle_reasons"])
                    apply(GpuReport(node_id, (GpuSample(at=at, **values),)))  # type: ignore[arg-type]
            for sample in store.samples_since(session, since=0.0, metrics=["checkpoint_s"]):
                apply(CheckpointCost(sample.node_id, sample.value))
            # The record and the recalibrator are stored apart (outcomes; ended collateral
            # locks with the raw RS they were placed at), so they are restored apart: these
            # rebuild aggregates, they are no new observations (no slash is decided again).
            for outcome in store.all_outcomes(session):
                if engine.knows(outcome.node_id):
                    engine.outcome(outcome.node_id, TaskOutcome(outcome.outcome))
            for raw_rs, finished in store.ended_attempts(session):
                engine.attempt_ended(raw_rs, finished)
            for withdrawal in store.all_withdrawals(session):
                engine.staking.withdrawal_replayed(
                    str(withdrawal.task_id), [bytes.fromhex(c) for c in withdrawal.chunks])
            for record, gpu_class in store.latest_verdicts(session):
                apply(Handshake(PopwVerdict(record.node_id, record.passed, Tier(record.tier),
                                            record.decided_at, record.expires_at,
                                            tuple(PopwReason(r) for r in record.reasons),
                                            gpu_class if record.passed else None)))

    def follow(self, session: Session, *, now: float) -> int:
        """The periodic catch-up every replica runs (a rebuild instead, when the log was
        pruned past this replica), then its cursor saved for pruning; rows applied."""
        if self.state.stale:
            self.rebuild(session, now=now)
            applied = 0
        else:
            applied = self.log.catch_up(session)
        store.save_cursor(session, replica=self.state.replica, position=self.state.cursor,
                          now=now)
        return applied
