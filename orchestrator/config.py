"""Typed settings, read from `MESH_*` environment variables (and `.env`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.domain.verification import SamplingPolicy

DEV_CHAIN_IDS = frozenset({31337, 1337})  # anvil and hardhat, ganache


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
    node_stake: int = Field(
        10**18, ge=0, description="Bonded stake (token units) a provider needs per registered "
        "node before another node counts: registering a new node needs this times its nodes "
        "plus one. Applies with pls_placement on (there is no stake without the chain).")
    registrations_per_hour: int = Field(
        60, ge=1, description="Node registrations (new or updated) one wallet may sign per "
        "hour and replica; more are 429 with Retry-After.")
    max_blob_bytes: int = Field(
        256 * 1024 * 1024, description="Largest checkpoint/result upload accepted (else 413).")
    upload_ttl_s: float = Field(
        1800.0, gt=0, description="An upload that no job, checkpoint, result or report names "
        "within this is forgotten, and its blob deleted once nothing names it.")
    wallet_upload_quota_bytes: int = Field(
        4 * 1024**3, ge=0, description="Bytes of uploads a wallet may hold that no job names "
        "yet (else 429 upload_quota with Retry-After).")
    upload_capacity_bytes: int = Field(
        32 * 1024**3, ge=0, description="Bytes of unclaimed uploads of everyone together (else "
        "429 upload_capacity).")
    node_upload_bytes_per_hour: int = Field(
        32 * 1024**3, ge=0, description="Bytes one node may upload per hour (else 429 "
        "upload_rate).")
    node_upload_grace_s: float = Field(
        3600.0, ge=0, description="A node may upload this long after its last lease ended (the "
        "chunks it rendered through a network cut); without a lease or re-check, 403.")
    upload_gc_interval_s: float = Field(
        60.0, gt=0, description="Period of the job forgetting expired unclaimed uploads and "
        "deleting the blobs nothing names (leader only).")
    heartbeat_flush_s: float = Field(
        0.1, description="Write-behind interval for batched heartbeat writes.")
    periodic_enabled: bool = Field(
        True, description="Run periodic sweeps (lease expiry, failure detection) in this process.")
    sweep_interval_s: float = Field(1.0, description="Period of the failure/lease sweep.")
    placement_interval_s: float = Field(
        1.0, gt=0, description="Period of the placement pass (it also runs when an idle node "
        "pulls): the longest a task waits for a pass once a node is free. One replica places "
        "at a time; another takes over within three periods of its death.")
    nonce_gc_interval_s: float = Field(
        60.0, gt=0, description="Period of the job forgetting expired request nonces (leader "
        "only; a replica taking it over waits three periods).")
    pls_log_prune_interval_s: float = Field(
        30.0, gt=0, description="Period of the job deleting PLS observation log rows every "
        "replica has applied (leader only; a replica taking it over waits three periods).")
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
    pls_lone_grace_s: float = Field(
        300.0, ge=0, description="A node called DEAD whose peers are not silent too keeps its "
        "leases this long after the verdict, then they are revoked: most lone cuts last under a "
        "minute and a node back in time renders on, and a restarted agent (a new process for "
        "the same node) takes its held tasks back from their last checkpoint. A lapsed hold is "
        "an abandonment dated at the DEAD verdict, which a proof of progress can still "
        "withdraw. 0 revokes at the verdict; the churn simulator measures the default.")
    pls_stake_ttl_s: float = Field(
        15.0, ge=0, description="How long a provider's free stake read from chain is reused.")
    pls_reservation_s: float = Field(
        7 * 24 * 3600.0, gt=0, description="A provider's standing collateral reservation "
        "lasts this long from a raise (extended when half is gone); a provider leaving the "
        "grid can unbond once it lapses.")
    outbox_interval_s: float = Field(
        1.0, description="Period of the chain outbox sender (needs orchestrator_key).")
    outbox_confirmations: int = Field(
        0, description="Blocks mined on top of a transaction before its outbox row counts "
        "as confirmed (0 on anvil; more where blocks can reorg).")
    chain_reorg_margin: int = Field(
        12, ge=0, description="Blocks below the head before an indexed contract event counts "
        "as final (handlers run on it once); newer events are provisional and are rolled back "
        "and re-read if their block is replaced. Where the chain offers the finality tag "
        "below and it is stricter, it decides. Unset on a local dev chain (chain id 31337 or "
        "1337: one node, no reorgs, no blocks while idle): 0.")
    chain_finality_tag: str = Field(
        "finalized", pattern="^(finalized|safe|none)$", description="Block tag the indexer "
        "takes as final where the chain offers it and it lies below head - margin: "
        "`finalized`, `safe`, or `none` (the margin alone). Unset on a local dev chain: "
        "`none`.")

    @model_validator(mode="after")
    def _dev_chain_final_at_once(self) -> Settings:
        """A local dev chain's events are final as soon as they are mined: a single node
        never reorgs, and an idle one mines no block that would bury them (anvil's
        `finalized` lags 64 blocks). A margin or tag that was set stays."""
        if self.chain_id in DEV_CHAIN_IDS:
            if "chain_reorg_margin" not in self.model_fields_set:
                self.chain_reorg_margin = 0
            if "chain_finality_tag" not in self.model_fields_set:
                self.chain_finality_tag = "none"
        return self
    chain_index_interval_s: float = Field(
        2.0, gt=0, description="Period of the chain event indexer (leader only).")
    chain_index_max_chunk: int = Field(
        2_000, ge=1, description="Most blocks one eth_getLogs asks for; the indexer shrinks "
        "the range when the node refuses it as too large or times out, and grows it back.")
    outbox_settle_batch: int = Field(
        50, description="Most jobs settled by one settleBatch transaction.")
    outbox_replace_after_s: float = Field(
        60.0, gt=0, description="A sent transaction not mined this long after it was signed "
        "is replaced at its nonce with both EIP-1559 fees raised by at least 12.5 %.")
    outbox_priority_fee_gwei: float = Field(
        1.0, ge=0, description="Priority fee (tip) a new outbox transaction offers, in gwei.")
    outbox_max_fee_gwei: float = Field(
        500.0, gt=0, description="Cap on maxFeePerGas, in gwei: no first offer or fee bump "
        "goes above it (a transaction stuck at the cap waits for the base fee to fall).")
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

    orchestrator_url: str = Field(
        "http://127.0.0.1:8400", description="Where `mesh` commands reach the orchestrator "
        "(the `mesh orchestrator serve` address).")
    wallet_dir: Path = Field(
        Path("~/.mesh/wallets"), description="Where `mesh wallet` keeps eth-account keystores "
        "(one `<name>.json` each, mode 0600).")
    wallet: str | None = Field(
        None, description="The wallet a `mesh dispute` or `mesh arbiter` command signs with "
        "when it is given no `--wallet` (a name in wallet_dir or a keystore file).")

    @property
    def stake_per_new_node(self) -> int:
        """What registering a node asks of its provider's stake, per node (0: nothing, when
        placement does not use the chain)."""
        return self.node_stake if self.pls_placement else 0

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'mesh.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
