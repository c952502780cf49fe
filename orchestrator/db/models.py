"""SQLAlchemy 2.0 typed models. The schema itself changes only through Alembic migrations.

Times are float unix seconds (the same clock the pure domain takes as a
parameter), so SQLite and PostgreSQL compare them identically. Token amounts
are exact integers stored as decimal text: wei overflow BIGINT and SQLite's
NUMERIC would round them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


class TokenAmount(TypeDecorator[int]):
    """An exact non-negative integer of token units, kept as text."""

    impl = String(80)
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: Dialect) -> str | None:
        return None if value is None else str(int(value))

    def process_result_value(self, value: str | None, dialect: Dialect) -> int | None:
        return None if value is None else int(value)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Provider(Base):
    __tablename__ = "providers"

    address: Mapped[str] = mapped_column(String(42), primary_key=True)  # checksummed wallet
    created_at: Mapped[float] = mapped_column(Float)


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider: Mapped[str] = mapped_column(ForeignKey("providers.address"), index=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    vram_gb: Mapped[int] = mapped_column(Integer)
    compute_capability: Mapped[float] = mapped_column(Float)
    region: Mapped[str] = mapped_column(String(32))
    price_per_gpu_hour: Mapped[int] = mapped_column(TokenAmount)
    slots: Mapped[int] = mapped_column(Integer)  # GPU slots 0..slots-1: one live lease each
    tier: Mapped[int] = mapped_column(Integer, default=1)
    health: Mapped[str] = mapped_column(String(16), default="alive")  # lifecycle's NodeHealth
    draining: Mapped[bool] = mapped_column(Boolean, default=False)  # NodeDrain.DRAINING
    registered_at: Mapped[float] = mapped_column(Float)
    last_heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The ephemeral key the node's agent process named in its latest login (wallet-signed):
    # only that process can later prove it rendered on through a network cut.
    session_key: Mapped[str | None] = mapped_column(String(42), nullable=True)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(66), primary_key=True)  # 0x + bytes32 escrow job id
    customer: Mapped[str] = mapped_column(String(42), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(66))
    amount: Mapped[int] = mapped_column(TokenAmount)
    deadline: Mapped[float] = mapped_column(Float)
    priority: Mapped[str] = mapped_column(String(8))
    merkle_root: Mapped[str | None] = mapped_column(String(66), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class Task(Base):
    __tablename__ = "tasks"
    __table_args__ = (
        UniqueConstraint("job_id", "index", name="uq_tasks_job_index"),
        Index("ix_tasks_status_id", "status", "id"),
        Index("ix_tasks_status_latest_start_id", "status", "latest_start", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)  # frame number or tile index within the job
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)  # what the agent runs
    needs: Mapped[dict[str, Any]] = mapped_column(JSON)  # TaskNeeds, serialised
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # The queue's order (`matching.latest_start`): the job's deadline less the task's
    # expected duration; least laxity is placed first.
    latest_start: Mapped[float] = mapped_column(Float)
    node_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)  # fraction done, 0..1
    checkpoint_progress: Mapped[float] = mapped_column(Float, default=0.0)  # durable fraction
    checkpoint_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    result_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class Lease(Base):
    """A task on one GPU slot. While `released_at` is NULL the lease is live, and the two
    partial unique indexes make the database refuse a second live lease on the same slot
    or for the same task, whatever any orchestrator process believes."""

    __tablename__ = "leases"
    __table_args__ = (
        Index("uq_leases_live_slot", "node_id", "slot", unique=True,
              sqlite_where=text("released_at IS NULL"),
              postgresql_where=text("released_at IS NULL")),
        Index("uq_leases_live_task", "task_id", unique=True,
              sqlite_where=text("released_at IS NULL"),
              postgresql_where=text("released_at IS NULL")),
        Index("ix_leases_expires", "expires_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id"))
    slot: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # lifecycle.LeaseState
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    released_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    release_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)


class Checkpoint(Base):
    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    node_id: Mapped[str] = mapped_column(String(64))
    sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"))
    progress: Mapped[float] = mapped_column(Float)
    is_result: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class Blob(Base):
    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)


class BlobUpload(Base):
    """One principal's upload of a blob: it sent the bytes, so it possesses them. `uploader`
    is `wallet:<address>` (a customer) or `node:<node id>` (a node's session). Only what a
    principal uploaded may it name as a job input, checkpoint, checkpoint part, result or
    report chunk; naming it claims the upload (`expires_at` NULL, kept). An unclaimed upload
    counts against its uploader's quota until `expires_at`, then the upload GC forgets it, and
    deletes the blob once no upload of it is left and nothing names it."""

    __tablename__ = "blob_uploads"
    __table_args__ = (
        UniqueConstraint("sha256", "uploader", name="uq_blob_uploads_sha256_uploader"),
        Index("ix_blob_uploads_uploader_expires", "uploader", "expires_at"),
        Index("ix_blob_uploads_expires", "expires_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    uploader: Mapped[str] = mapped_column(String(80))
    size: Mapped[int] = mapped_column(BigInteger)  # reserved before the body, then the body's
    uploaded_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # NULL: claimed


class CheckpointPart(Base):
    """A blob a checkpoint manifest names (a sample chunk), recorded when the checkpoint was:
    the node resuming the task may read it. Each part was the recording node's own upload or a
    part of an earlier checkpoint of the same task; a manifest read later is never trusted."""

    __tablename__ = "checkpoint_parts"

    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id"), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)


class TelemetrySample(Base):
    __tablename__ = "telemetry_samples"
    __table_args__ = (Index("ix_telemetry_node_metric_at", "node_id", "metric", "at"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(64))
    metric: Mapped[str] = mapped_column(String(32))
    at: Mapped[float] = mapped_column(Float)
    value: Mapped[float] = mapped_column(Float)


class StatusHistory(Base):
    __tablename__ = "status_history"
    __table_args__ = (Index("ix_status_history_entity", "entity", "entity_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    entity: Mapped[str] = mapped_column(String(8))  # job | task | node
    entity_id: Mapped[str] = mapped_column(String(66))
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_status: Mapped[str] = mapped_column(String(16))
    at: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text)


class OutboxAction(Base):
    """A chain action written in the same transaction as the state change that causes it;
    one sender drains it, and the idempotency key keeps it exactly-once."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(32))  # a `domain.chain_actions` action's kind
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)  # written by chain_actions.encode
    status: Mapped[str] = mapped_column(String(16), default="pending",
                                        index=True)  # lifecycle.OutboxStatus
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    tx_hash: Mapped[str | None] = mapped_column(String(66), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # Signed bytes (hex) of the newest version persisted BEFORE broadcast, so a crash resends
    # the same transaction; a batch keeps them on its first row only. Kept once confirmed, so
    # a transaction a reorg removed can be sent again as it was.
    raw_tx: Mapped[str | None] = mapped_column(Text, nullable=True)
    nonce: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    next_attempt_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # backoff
    note: Mapped[str | None] = mapped_column(Text, nullable=True)  # decoded error / why confirmed
    # the mined transaction's gas (shared by a batch's rows); None unless our tx confirmed it
    gas_used: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class ChainNonce(Base):
    """The next nonce of one signing key: the outbox sender owns it (it does not trust a load-
    balanced node's pending count between passes) and resyncs it from the chain after errors."""

    __tablename__ = "chain_nonces"

    address: Mapped[str] = mapped_column(String(42), primary_key=True)
    next_nonce: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[float] = mapped_column(Float)


class OutboxTransaction(Base):
    """Every signed version of an outbox transaction: a stuck one is replaced at the same nonce
    with higher fees, and any version sent may be the one mined, so all are kept."""

    __tablename__ = "outbox_transactions"
    __table_args__ = (Index("ix_outbox_transactions_sender_nonce", "sender", "nonce"),)

    tx_hash: Mapped[str] = mapped_column(String(66), primary_key=True)
    sender: Mapped[str] = mapped_column(String(42))
    nonce: Mapped[int] = mapped_column(BigInteger)
    max_fee_per_gas: Mapped[int] = mapped_column(TokenAmount)  # wei
    max_priority_fee_per_gas: Mapped[int] = mapped_column(TokenAmount)  # wei
    signed_at: Mapped[float] = mapped_column(Float)


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"

    principal: Mapped[str] = mapped_column(String(42), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(66))
    job_id: Mapped[str] = mapped_column(String(66))
    created_at: Mapped[float] = mapped_column(Float)


class UsedNonce(Base):
    """Signed-request nonces already seen; kept until the request would have expired anyway."""

    __tablename__ = "used_nonces"

    address: Mapped[str] = mapped_column(String(42), primary_key=True)
    nonce: Mapped[str] = mapped_column(String(80), primary_key=True)
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class LeaderLock(Base):
    """One row per periodic job; the holder with an unexpired row runs it."""

    __tablename__ = "leader_locks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[float] = mapped_column(Float)


class RecoveryEvent(Base):
    """A task moved off a dead or draining node: how long it took and how much work was lost."""

    __tablename__ = "recovery_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    from_node: Mapped[str] = mapped_column(String(64))
    cause: Mapped[str] = mapped_column(String(16))  # dead | drain | lapsed
    lost_at: Mapped[float] = mapped_column(Float)
    rework: Mapped[float] = mapped_column(Float)  # fraction of the task redone
    resumed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    resumed_on: Mapped[str | None] = mapped_column(String(64), nullable=True)


# ---------------------------------------------------------------- Predictive Latency Staking
# Enough to rebuild the service's ReliabilityBook and StakingPolicy after a restart, and to
# prove every slash and score against the epoch roots committed on chain.


class NodeSession(Base):
    """One online interval of a node: `abrupt` = the failure detector called it dead (not a
    graceful drain, nor a silence its peers shared); an open session has `ended_at` NULL."""

    __tablename__ = "node_sessions"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(64), index=True)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    abrupt: Mapped[bool | None] = mapped_column(Boolean, nullable=True)


class TaskOutcomeRecord(Base):
    __tablename__ = "task_outcomes"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(64), index=True)
    task_id: Mapped[int] = mapped_column(BigInteger)
    outcome: Mapped[str] = mapped_column(String(32))  # reliability.TaskOutcome
    at: Mapped[float] = mapped_column(Float)


class PopwChallengeRecord(Base):
    """An issued PoPW challenge; `consumed_at` makes its nonce single-use across restarts
    and replicas."""

    __tablename__ = "popw_challenges"

    nonce: Mapped[str] = mapped_column(String(66), primary_key=True)  # 0x + 32 bytes
    node_id: Mapped[str] = mapped_column(String(64), index=True)
    gpu_class: Mapped[str] = mapped_column(String(32))
    issued_at: Mapped[float] = mapped_column(Float)
    deadline: Mapped[float] = mapped_column(Float)
    consumed_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class PendingProbe(Base):
    """A probe sent and not yet echoed. In the DB, not in one replica's memory: behind a
    balancer the echo may reach any replica, and exactly one records a probe lost."""

    __tablename__ = "pending_probes"

    nonce: Mapped[str] = mapped_column(String(32), primary_key=True)  # 16 bytes, hex
    node_id: Mapped[str] = mapped_column(String(64), index=True)
    sent_at: Mapped[float] = mapped_column(Float, index=True)


class PopwVerdictRecord(Base):
    __tablename__ = "popw_verdicts"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(64), index=True)
    nonce: Mapped[str] = mapped_column(String(66))
    passed: Mapped[bool] = mapped_column(Boolean)
    tier: Mapped[int] = mapped_column(Integer)
    decided_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    reasons: Mapped[list[Any]] = mapped_column(JSON)


class CollateralLock(Base):
    """Collateral locked (through the outbox) for one placement of one task."""

    __tablename__ = "collateral_locks"
    __table_args__ = (UniqueConstraint("task_id", "attempt", name="uq_collateral_task_attempt"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[int] = mapped_column(BigInteger, index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[str] = mapped_column(String(66))
    node_id: Mapped[str] = mapped_column(String(64))
    provider: Mapped[str] = mapped_column(String(42))
    amount: Mapped[int] = mapped_column(TokenAmount)
    created_at: Mapped[float] = mapped_column(Float)
    # The raw RS (before recalibration) the placement was made at, and how the attempt ended:
    # replayed into the engine's recalibrator on restart.
    raw_rs: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished: Mapped[bool | None] = mapped_column(Boolean, nullable=True)


class SlashRecord(Base):
    """A slash the staking policy decided; LOW_SCORE ones are tied to the epoch whose root
    carries the sub-threshold score (anyone then proves it on chain)."""

    __tablename__ = "pls_slashes"

    slash_id: Mapped[str] = mapped_column(String(66), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(64), index=True)
    provider: Mapped[str] = mapped_column(String(42))
    reason: Mapped[int] = mapped_column(Integer)  # slashing.SlashReason
    amount: Mapped[int] = mapped_column(TokenAmount)
    evidence: Mapped[str] = mapped_column(String(66))
    task_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    decided_at: Mapped[float] = mapped_column(Float)
    epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    detail: Mapped[str] = mapped_column(Text)
    reversed_by: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # dispute id
    # Set by the indexer from the final `Slashed` / `SlashReleased` events (None: not yet).
    chain_slash_id: Mapped[int | None] = mapped_column(TokenAmount, nullable=True)
    chain_tx: Mapped[str | None] = mapped_column(String(66), nullable=True)
    released_tx: Mapped[str | None] = mapped_column(String(66), nullable=True)


class ProgressWithdrawal(Base):
    """A pending abandonment its node's process withdrew on reconnect, by showing (signed with
    the session key of its login) chunks it rendered for the task through the silence
    (`domain.continuity`): that departure is never slashed, and these chunks never withdraw
    another."""

    __tablename__ = "progress_withdrawals"

    task_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    node_id: Mapped[str] = mapped_column(String(64), index=True)
    session_key: Mapped[str] = mapped_column(String(42))
    departed_at: Mapped[float] = mapped_column(Float)  # the DEAD verdict the proof answered
    withdrawn_at: Mapped[float] = mapped_column(Float)
    chunks: Mapped[list[Any]] = mapped_column(JSON)  # the sha256 hex digests credited


class ScoreEpoch(Base):
    __tablename__ = "score_epochs"

    epoch: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    root: Mapped[str] = mapped_column(String(66))
    closed_at: Mapped[float] = mapped_column(Float)
    # Set by the indexer from the final `EpochCommitted` event (None: not final on chain).
    committed_tx: Mapped[str | None] = mapped_column(String(66), nullable=True)
    committed_block: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class ScoreLeaf(Base):
    """One provider's committed (score, telemetry digest) in an epoch; proofs are rebuilt
    from the epoch's leaves."""

    __tablename__ = "score_leaves"

    epoch: Mapped[int] = mapped_column(ForeignKey("score_epochs.epoch"), primary_key=True)
    provider: Mapped[str] = mapped_column(String(42), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(64))
    score_bps: Mapped[int] = mapped_column(Integer)
    telemetry_digest: Mapped[str] = mapped_column(String(66))


# ---------------------------------------------------------------- the PLS observation log
# Every replica feeds its PLS engine from this log, in id order (`services.pls_log`).


class PlsObservationRecord(Base):
    """One `domain.pls_observations.Observation`. Ids are handed out by `pls_log_head` as the
    writing transaction commits: gapless and in commit order, so a reader that has applied up
    to id N has seen everything committed before N+1."""

    __tablename__ = "pls_observations"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(32))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)


class PlsLogHead(Base):
    """The last observation id handed out (one row). Writers update it last in their
    transaction, so they take the log's ids one transaction at a time, in commit order."""

    __tablename__ = "pls_log_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    last_id: Mapped[int] = mapped_column(BigInteger)


class PlsLogCursor(Base):
    """How far one replica has applied the log; pruning keeps what a live replica needs."""

    __tablename__ = "pls_log_cursors"

    replica: Mapped[str] = mapped_column(String(64), primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger)
    seen_at: Mapped[float] = mapped_column(Float)


class VerificationCommitment(Base):
    """What one task attempt's result commits to (Merkle root over its pixel-window leaves),
    recorded before its challenge is drawn, and the verdict on it."""

    __tablename__ = "verification_commitments"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    job_id: Mapped[str] = mapped_column(String(66), index=True)
    node_id: Mapped[str] = mapped_column(String(64))
    provider: Mapped[str] = mapped_column(String(42), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    result_sha256: Mapped[str] = mapped_column(String(64))
    root: Mapped[str] = mapped_column(String(66))
    leaves: Mapped[list[Any]] = mapped_column(JSON)  # Leaf.as_json() each
    windows: Mapped[int] = mapped_column(Integer)
    env: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # RenderEnv
    chunks: Mapped[list[Any]] = mapped_column(JSON)  # [{offset, length, sha256}] the node sent
    policy: Mapped[str] = mapped_column(String(32))
    rate: Mapped[float] = mapped_column(Float)  # per-window check probability it was drawn at
    seed: Mapped[str] = mapped_column(String(66))  # HMAC(secret, root, task, attempt)
    status: Mapped[str] = mapped_column(String(16), index=True)
    detail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    decided_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class VerificationCheck(Base):
    """One re-check: a window of a committed result re-rendered on another node."""

    __tablename__ = "verification_checks"
    __table_args__ = (Index("ix_verification_checks_status_id", "status", "id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    commitment_id: Mapped[int] = mapped_column(ForeignKey("verification_commitments.id"),
                                               index=True)
    window: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))  # "check" or "tiebreak"
    recipe: Mapped[dict[str, Any]] = mapped_column(JSON)  # what the checker renders
    status: Mapped[str] = mapped_column(String(16))
    checker_node: Mapped[str | None] = mapped_column(String(64), nullable=True)
    checker_provider: Mapped[str | None] = mapped_column(String(42), nullable=True)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    comparison: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    render_s: Mapped[float] = mapped_column(Float, default=0.0)  # checker's render seconds
    created_at: Mapped[float] = mapped_column(Float)
    done_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class VerificationEvidence(Base):
    """Everything a dispute needs to reproduce a failed verification; `digest` (keccak of the
    canonical JSON) is the evidence hash the slash carries on chain."""

    __tablename__ = "verification_evidence"

    digest: Mapped[str] = mapped_column(String(66), primary_key=True)
    commitment_id: Mapped[int] = mapped_column(ForeignKey("verification_commitments.id"),
                                               index=True)
    node_id: Mapped[str] = mapped_column(String(64))
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)


class VerificationRecord(Base):
    """A provider's pooled verification record (adaptive replication's streak)."""

    __tablename__ = "verification_records"

    provider: Mapped[str] = mapped_column(String(42), primary_key=True)
    consecutive_valid: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[float] = mapped_column(Float)


# ---------------------------------------------------------------- disputes, as the chain rules them


class DisputeRow(Base):
    """One on-chain dispute as its events told us (`services.disputes`): what it froze, the
    ruling, and where the money went. Slash disputes keep the slash's provider, evidence and
    prior tier (read from the chain when it opened) to find and undo our slash record."""

    __tablename__ = "disputes"

    dispute_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(16))  # "settlement" | "slash"
    subject: Mapped[str] = mapped_column(String(66))  # 0x + bytes32: job id or slash id
    job_id: Mapped[str | None] = mapped_column(String(66), nullable=True, index=True)
    slash_id: Mapped[int | None] = mapped_column(TokenAmount, nullable=True)  # on-chain id
    opener: Mapped[str] = mapped_column(String(42))
    respondent: Mapped[str] = mapped_column(String(42))
    bond: Mapped[int] = mapped_column(TokenAmount)
    frozen_amount: Mapped[int] = mapped_column(TokenAmount)
    evidence: Mapped[str] = mapped_column(String(66))
    ruling_deadline: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16), index=True)  # lifecycle.DisputeState
    opened_tx: Mapped[str] = mapped_column(String(66))
    opened_at: Mapped[float] = mapped_column(Float)
    slashed_provider: Mapped[str | None] = mapped_column(String(42), nullable=True)
    slash_evidence: Mapped[str | None] = mapped_column(String(66), nullable=True)
    slash_reason: Mapped[int | None] = mapped_column(Integer, nullable=True)
    prior_tier: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ruled_tx: Mapped[str | None] = mapped_column(String(66), nullable=True)
    ruled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ruling_slash_id: Mapped[int | None] = mapped_column(TokenAmount, nullable=True)
    ruling_evidence: Mapped[str | None] = mapped_column(String(66), nullable=True)
    outcome: Mapped[str] = mapped_column(Text, default="")  # where the frozen money went


# ---------------------------------------------------------------- chain event index
# Every event of the mesh contracts, read through a cursor and kept reorg-safe: hashes of the
# indexed heights show when a block was replaced, and the events of replaced blocks are kept
# as `dropped` so a re-included transaction is recognised rather than applied twice.


class ChainCursor(Base):
    """How far the indexer has read one chain (one row per deployment)."""

    __tablename__ = "chain_cursors"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    next_block: Mapped[int] = mapped_column(BigInteger)  # first height not read yet
    final_block: Mapped[int] = mapped_column(BigInteger)  # highest height treated as final
    chunk: Mapped[int] = mapped_column(Integer)  # eth_getLogs range to ask for next
    reorgs: Mapped[int] = mapped_column(Integer, default=0)  # rollbacks seen, for operators
    deepest_reorg: Mapped[int] = mapped_column(Integer, default=0)  # in blocks
    updated_at: Mapped[float] = mapped_column(Float)


class ChainBlock(Base):
    """The hash of an indexed height: of every block near the head and every block that held
    one of our events; a different hash there later means a reorg."""

    __tablename__ = "chain_blocks"

    cursor: Mapped[str] = mapped_column(String(64), primary_key=True)
    number: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    hash: Mapped[str] = mapped_column(String(66))


class ChainEventRecord(Base):
    """One decoded contract event (`domain.chain_events.ChainEvent`) and where it stands
    (`lifecycle.ChainEventStatus`); `applied` once the subscribed handlers ran on it."""

    __tablename__ = "chain_events"
    __table_args__ = (UniqueConstraint("cursor", "tx_hash", "tx_position"),
                      Index("ix_chain_events_cursor_status_block", "cursor", "status",
                            "block_number", "log_index"))

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    cursor: Mapped[str] = mapped_column(String(64))
    contract: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(64))
    args: Mapped[dict[str, Any]] = mapped_column(JSON)  # domain.chain_events.args_to_json
    block_number: Mapped[int] = mapped_column(BigInteger)
    block_hash: Mapped[str] = mapped_column(String(66))
    log_index: Mapped[int] = mapped_column(Integer)
    tx_hash: Mapped[str] = mapped_column(String(66), index=True)
    tx_position: Mapped[int] = mapped_column(Integer)  # among the tx's mesh logs: stable when
    # the same transaction lands in another block
    status: Mapped[str] = mapped_column(String(16))
    applied: Mapped[bool] = mapped_column(Boolean, default=False)
    seen_at: Mapped[float] = mapped_column(Float)


class ChainEventSubject(Base):
    """Whom or what an event concerns (`domain.chain_events.subjects`), for read models."""

    __tablename__ = "chain_event_subjects"

    event_id: Mapped[int] = mapped_column(ForeignKey("chain_events.id", ondelete="CASCADE"),
                                          primary_key=True)
    subject: Mapped[str] = mapped_column(String(96), primary_key=True, index=True)
