"""Typed settings, read from `MESH_*` environment variables (and `.env`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.domain.verification import SamplingPolicy


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MESH_", env_file=".env", extra="ignore")

    data_dir: Path = Field(
        Path(".mesh"), description="Local state: SQLite file, blobs, deployments.")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default SQLite (WAL) under data_dir. "
        "PostgreSQL: postgresql+psycopg://user@host:5432/db")
    rpc_url: str = Field("http://127.0.0.1:8545", description="EVM JSON-RPC endpoint.")
    chain_id: int = Field(31337, description="Chain id signatures are bound to.")
    orchestrator_key: SecretStr | None = Field(
        None, description="Hex private key the orchestrator signs chain transactions with.")
    admin_key: SecretStr | None = Field(None, description="Bearer key for admin endpoints.")
    orchestrator_id: str = Field(
        "depin-mesh-orchestrator", description="Identity signed requests are bound to "
        "(its keccak is the EIP-712 domain salt), so a signature for another orchestrator "
        "is useless here.")
    session_secret: SecretStr | None = Field(
        None, description="HMAC key for session tokens; share it between replicas. "
        "Unset: a random key per process (tokens die with the process).")
    session_ttl_s: float = Field(900.0, description="Lifetime of a login session token.")
    signature_max_age_s: float = Field(
        300.0, description="Latest expiry a signed request may carry, from now.")
    lease_ttl_s: float = Field(60.0, description="A lease lapses this long after its last renewal.")
    reservation_ttl_s: float = Field(
        30.0, description="A reserved slot is freed if the node does not start in this time.")
    max_body_bytes: int = Field(65_536, description="Largest JSON body accepted (else 413).")
    max_popw_answer_bytes: int = Field(
        262_144, description="Largest PoPW answer body (it carries Merkle openings).")
    max_blob_bytes: int = Field(
        256 * 1024 * 1024, description="Largest checkpoint/result upload accepted (else 413).")
    heartbeat_flush_s: float = Field(
        0.1, description="Write-behind interval for batched heartbeat writes.")
    periodic_enabled: bool = Field(
        True, description="Run periodic sweeps (lease expiry, failure detection) in this process.")
    sweep_interval_s: float = Field(1.0, description="Period of the failure/lease sweep.")
    json_logs: bool = Field(True, description="Structured JSON log lines from the service.")
    pls_placement: bool = Field(
        True, description="Gate leases on PLS: RS floor, PoPW tier for high priority, free "
        "on-chain stake covering the risk-priced collateral (locked through the outbox). Off: "
        "the core's plain matching, for chain-less development only.")
    pls_min_rs: float = Field(
        0.5, ge=0, le=1, description="Lowest RS(node, task duration) a node may take work at.")
    pls_epoch_s: float = Field(3600.0, gt=0, description="Length of a score epoch.")
    pls_decide_interval_s: float = Field(
        300.0, gt=0, description="Period of the staking decision (RS observation, slashing, "
        "demotion) job.")
    pls_follow_interval_s: float = Field(
        0.5, gt=0, description="How often each replica applies what the others wrote to the "
        "PLS observation log (the most a score lags behind another replica's input).")
    pls_reconnect_grace_s: float = Field(
        1800.0, gt=0, description="A node back within this after a DEAD verdict was only "
        "partitioned: nobody pays for its moved task. Later, only a proof that its process "
        "rendered on through the silence (POST /v1/nodes/{id}/progress) spares the slash.")
    pls_outage_window_s: float = Field(
        300.0, gt=0, description="DEAD verdicts this close together in one region or network "
        "may be one upstream outage (nobody pays).")
    pls_decision_delay_s: float = Field(
        2400.0, gt=0, description="An abandonment matures into a slash this long after the "
        "DEAD verdict (at least the reconnect grace and the outage window).")
    pls_stake_ttl_s: float = Field(
        15.0, ge=0, description="How long a provider's free stake read from chain is reused.")
    outbox_interval_s: float = Field(
        1.0, description="Period of the chain outbox sender (needs orchestrator_key).")
    outbox_confirmations: int = Field(
        0, description="Blocks mined on top of a transaction before its outbox row counts "
        "as confirmed (0 on anvil; more where blocks can reorg).")
    outbox_settle_batch: int = Field(
        50, description="Most jobs settled by one settleBatch transaction.")
    verification_policy: str = Field(
        "adaptive", description="How often a result's pixel windows are re-rendered on another "
        "node: `adaptive` (BOINC-style, max(floor, 1/CV) per window), `adaptive-F%` or "
        "`fixed-N%` (docs/verification.md).")

    @field_validator("verification_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        SamplingPolicy.parse(value)  # ValueError: one line naming the policies there are
        return value

    verification_windows: int = Field(
        8, ge=1, le=64, description="Horizontal windows a frame (or tile) is cut into for "
        "commitments and re-checks.")
    verification_secret: SecretStr | None = Field(
        None, description="HMAC key the re-check challenges are drawn with; keep it (and "
        "share it between replicas) so a dispute can reproduce a draw. Unset: derived from "
        "session_secret.")
    slasher_key: SecretStr | None = Field(
        None, description="Hex private key holding SLASHER_ROLE, for `slash` outbox actions; "
        "unset: they are signed with orchestrator_key.")

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'mesh.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
