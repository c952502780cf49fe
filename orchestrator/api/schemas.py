"""Request and response bodies. Every field is bounded: lengths, ranges, list sizes."""

from __future__ import annotations

import json
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from eth_utils import keccak
from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.domain.types import Priority
from protocol.packs import MAX_ASSET_PATH, MAX_ASSETS, asset_path_problem

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")]
Region = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._:-]+$")]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Bytes32Hex = Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{64}$")]
Address = Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{40}$")]
TokenUnits = Annotated[int, Field(ge=0, lt=2**256)]
# The largest integers the API takes: every one below 2^53 is still exact as a float, so JSON
# parsers, float fields and the fuzzers agree on the bound (past 2^63 it also fits BIGINT: a
# larger key is a 422, never an overflow in the DB layer, which once also reset the
# connection). Ids and counters never come near it (2^53 mJ is 285 years at 1 kW).
SAFE_INT = 2**53
RowKey = Annotated[int, Field(ge=1, lt=SAFE_INT)]
NAME_PATTERN, SHA256_PATTERN = r"^[A-Za-z0-9._:-]+$", r"^[0-9a-f]{64}$"
# Path parameters, constrained as the OpenAPI document states them (a mismatch is a 422).
NodeIdPath = Annotated[str, Path(min_length=1, max_length=64, pattern=NAME_PATTERN)]
Sha256Path = Annotated[str, Path(pattern=SHA256_PATTERN, description="lowercase hex sha256")]
JobIdPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{64}$",
                                description="the escrow's bytes32 job id, 0x + 64 hex")]
AddressPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$",
                                  description="a provider's wallet address")]
RowId = Annotated[int, Path(ge=0, lt=SAFE_INT)]  # a task, check or other row id
# A PoPW GPU class name (`popw.DEFAULT_GPU_CLASSES`: cpu, rtx4090, h100...).
GpuClassName = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[a-z0-9][a-z0-9_-]*$")]
MAX_TASKS_PER_JOB = 10_000
MAX_JOB_BYTES = 512 * 1024  # a submission's body: a spec with a pack of MAX_ASSETS paths fits


class Strict(BaseModel):
    """A request body: no field the schema does not name, and each value of the JSON type the
    schema states. An integer may come as 24 or 24.0 (JSON Schema's integer: a number without
    a fraction), never as "24" or true; a number never as a string; a boolean only as true or
    false."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _json_types(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                key = field.alias or name
                if key in data and _wrong_json_type(field.annotation, data[key]):
                    raise ValueError(f"{key}: {json.dumps(data[key])[:40]} is not of the type "
                                     "the schema states")
        return data


def _wrong_json_type(annotation: Any, value: Any) -> bool:
    """Whether `value` (as parsed from JSON) is not of the JSON type `annotation` states: a
    string or boolean for a number, anything but a boolean for a boolean, in lists too."""
    if value is None:
        return False
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _wrong_json_type(args[0], value)
    if origin in (Union, UnionType):
        return all(_wrong_json_type(arg, value) for arg in args if arg is not NoneType)
    if annotation is bool:
        return not isinstance(value, bool)
    if annotation in (int, float):
        return isinstance(value, str | bool)
    if origin in (list, tuple) and isinstance(value, list):
        kinds = args[:1] * len(value) if origin is list or args[-1:] == (...,) else args
        return any(_wrong_json_type(kind, item) for kind, item in zip(kinds, value,
                                                                        strict=False))
    return False


class NodeRegistration(Strict):
    node_id: Name
    gpu_model: Name
    vram_gb: int = Field(ge=0, le=4096)  # 0: a CPU-only node (no GPU memory to claim)
    compute_capability: float = Field(ge=0, le=100)
    region: Region  # as long as the column that keeps it
    price_per_gpu_hour: TokenUnits
    slots: int = Field(ge=1, le=64)


TierWord = Literal["background", "standard", "high"]  # `Tier` by name


class NodeOut(BaseModel):
    node_id: str
    provider: str
    slots: int
    health: str
    draining: bool


class NodeListingOut(BaseModel):
    node_id: str
    provider: str
    gpu_model: str
    vram_gb: int
    region: str
    price_per_gpu_hour: int
    slots: int
    tier: TierWord  # the tier the node may take work at now, by name (as the CLI, the dashboard)
    health: str
    draining: bool
    last_heartbeat_at: float | None
    rs: float | None  # Reliability Score over an hour's task; None before any observation


class LoginRequest(Strict):
    node_id: Name
    # The address of the agent process's ephemeral session key; the wallet's signature over
    # this body binds it to the login (see `domain.continuity`).
    session_key: Address | None = None


class LoginOut(BaseModel):
    token: str
    expires_at: float


class HeartbeatOut(BaseModel):
    ok: bool


class FrameRange(Strict):
    start: int = Field(ge=0, le=1_000_000)
    end: int = Field(ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _ordered(self) -> FrameRange:
        if self.end < self.start:
            raise ValueError("end before start")
        if self.end - self.start + 1 > MAX_TASKS_PER_JOB:
            raise ValueError(f"at most {MAX_TASKS_PER_JOB} frames per job")
        return self


class BlenderWorkload(Strict):
    kind: Literal["blender"]
    blend_sha256: Sha256Hex
    frames: FrameRange
    tiles: int = Field(1, ge=1, le=64)  # tiles per frame; one task per tile
    samples: int | None = Field(None, ge=1, le=1 << 16)  # None: the file's own
    chunk_samples: int | None = Field(None, ge=1, le=1 << 16)  # checkpoint unit inside a frame
    format: Literal["png", "exr"] = "png"
    resolution: tuple[Annotated[int, Field(ge=4, le=16384)],
                      Annotated[int, Field(ge=4, le=16384)]] | None = None  # None: the file's
    # The scene's other files (protocol.packs): path relative to the .blend's folder -> sha256
    assets: dict[Annotated[str, Field(max_length=MAX_ASSET_PATH)], Sha256Hex] | None = Field(
        None, min_length=1, max_length=MAX_ASSETS)

    @property
    def task_count(self) -> int:
        """One task per tile of every frame."""
        return (self.frames.end - self.frames.start + 1) * self.tiles

    @model_validator(mode="after")
    def _assets_inside(self) -> BlenderWorkload:
        for name in self.assets or {}:
            problem = asset_path_problem(name)
            if problem is not None:
                raise ValueError(f"asset {name!r}: {problem} (under the .blend's folder)")
        return self

    @model_validator(mode="after")
    def _bounded(self) -> BlenderWorkload:
        if self.chunk_samples is not None and self.samples is None:
            raise ValueError("chunk_samples needs samples")
        tasks = self.task_count
        if tasks > MAX_TASKS_PER_JOB:
            raise ValueError(f"{tasks} tasks (frames x tiles): at most {MAX_TASKS_PER_JOB} "
                             "per job; split the job or use fewer tiles")
        return self


class RedundancyIn(Strict):
    """k-of-n for non-deterministic commands: n runs on distinct providers, k must agree."""

    k: int = Field(2, ge=1, le=9)
    n: int = Field(3, ge=1, le=9)

    @model_validator(mode="after")
    def _majority(self) -> RedundancyIn:
        if self.k > self.n or 2 * self.k <= self.n:
            raise ValueError("k-of-n needs k <= n and a strict majority (2k > n)")
        return self


class CommandWorkload(Strict):
    kind: Literal["command"]
    # False: runs may differ (e.g. seeded by time); verified by k-of-n agreement, not re-runs
    deterministic: bool = True
    redundancy: RedundancyIn = Field(default_factory=RedundancyIn)
    command: list[Annotated[str, Field(max_length=256)]] = Field(min_length=1, max_length=32)
    input_sha256: Sha256Hex | None = None
    count: int = Field(1, ge=1, le=MAX_TASKS_PER_JOB)  # independent shards, one task each
    # files the command writes under $MESH_OUT; the task's result is a tar of exactly these
    outputs: list[Annotated[str, Field(max_length=128,
                                       pattern=r"^[A-Za-z0-9_.-][A-Za-z0-9_./-]*$")]] = Field(
        default_factory=lambda: ["result"], min_length=1, max_length=32)

    @property
    def task_count(self) -> int:
        """One task per shard."""
        return self.count

    @model_validator(mode="after")
    def _outputs_inside(self) -> CommandWorkload:
        for name in self.outputs:
            if any(part in ("", ".", "..") for part in name.split("/")):
                raise ValueError(f"output {name!r}: a relative path without '.', '..' or "
                                 "empty parts (it names a file under $MESH_OUT)")
        return self


class JobNeeds(Strict):
    min_vram_gb: int = Field(0, ge=0, le=4096)
    gpu_models: list[Name] | None = Field(None, max_length=32)
    regions: list[Region] | None = Field(None, max_length=32)
    # Only these providers' nodes may run (or re-check) the job's tasks: sensitive scenes.
    providers: list[Address] | None = Field(None, min_length=1, max_length=64)
    max_price_per_gpu_hour: TokenUnits | None = None
    priority: Priority = Priority.NORMAL
    expected_duration_s: float = Field(60.0, gt=0, le=7 * 86400)


class JobSpec(Strict):
    workload: BlenderWorkload | CommandWorkload = Field(discriminator="kind")
    needs: JobNeeds = JobNeeds()
    deadline: int = Field(ge=0, lt=2**40)  # unix seconds

    def canonical_hash(self) -> bytes:
        """keccak of the canonical JSON: the `specHash` the customer escrows on chain."""
        return spec_hash(self.model_dump(mode="json"))


def spec_hash(spec: dict[str, Any]) -> bytes:
    return keccak(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())


class JobSubmission(Strict):
    job_id: Bytes32Hex
    spec: JobSpec


class QuoteIn(Strict):
    spec: JobSpec  # as it would be escrowed (its blend_sha256 and assets are not read)
    amount: TokenUnits = Field(gt=0)  # the budget it would escrow: each task's value


class QuoteOut(BaseModel):
    """What a job would cost and when it would finish, on the grid as it is (token units;
    `services.quotes`). The forecast's fields are None when no node would take it now."""

    tasks: int
    eligible_nodes: int  # alive nodes taking work that fit the job's needs
    nodes: int  # nodes the forecast places its tasks on
    price_min: int | None = None  # every task at the cheapest of them (price per GPU-hour x time)
    price_expected: int | None = None  # each task at the node it would go to
    price_max: int | None = None  # every task at the dearest of them
    completion_s: float | None = None  # expected seconds from now until the last task is done
    p_deadline: float  # the chance every task is done by the spec's deadline
    collateral_min: int | None = None  # a provider locks per task, over those nodes
    collateral_max: int | None = None
    collateral_total: int | None = None  # over all the job's tasks
    warning: str | None = None  # why no node would take it


class JobOut(BaseModel):
    job_id: str
    status: str
    customer: str
    amount: int
    tasks: dict[str, int]
    merkle_root: str | None
    reason: str | None = None  # why it stopped, when it failed, was cancelled or expired
    warning: str | None = None  # why a funded job may never start (no node can take it)


class LeaseOut(BaseModel):
    lease_id: int
    task_id: int
    job_id: str
    slot: int
    expires_at: float
    payload: dict[str, Any]
    resume_from_sha256: str | None
    resume_progress: float
    checkpoint_interval_s: float  # adaptive (Young/Daly from the node's predicted MTBF)


class ProgressIn(Strict):
    progress: float = Field(ge=0, le=1)


class CheckpointIn(Strict):
    sha256: Sha256Hex
    progress: float = Field(ge=0, le=1)
    cost_s: float | None = Field(None, gt=0, le=3600)  # measured time to write it (interval)


class RenderEnvIn(Strict):
    """What a render ran on: the checker is picked (and the comparison rule chosen) by it."""

    blender: str = Field(min_length=1, max_length=128)  # version and build hash
    kernel: str = Field(min_length=1, max_length=32)  # Cycles CPU kernel (avx2, sse42) or device


class ChunkIn(Strict):
    offset: int = Field(ge=0, lt=1 << 16)  # its samples in the frame's chunk plan
    length: int = Field(ge=1, le=1 << 16)
    sha256: Sha256Hex


MAX_RENDER_CHUNKS = 4096  # sample chunks of one render (a result or a re-check)
# A body of MAX_RENDER_CHUNKS chunks fits, so the schema's own limit answers (422), not 413.
MAX_RENDER_BYTES = MAX_RENDER_CHUNKS * 256 + 4096


class RenderIn(RenderEnvIn):
    chunks: list[ChunkIn] = Field(default_factory=list, max_length=MAX_RENDER_CHUNKS)


MAX_SHOWN_CHUNKS = 1024
# A body of MAX_SHOWN_CHUNKS chunks fits, so the schema's own limit answers (422), not 413.
MAX_SHOWN_PROGRESS_BYTES = MAX_SHOWN_CHUNKS * 256 + 4096


class ShownChunkIn(Strict):
    sha256: Sha256Hex  # an uploaded chunk of the task's frame
    rendered_at: float = Field(ge=0, lt=2**40)  # unix seconds, when the process finished it
    offset: int = Field(ge=0, lt=1 << 16)  # its samples in the frame's chunk plan
    length: int = Field(ge=1, le=1 << 16)


class ProgressShownIn(Strict):
    """The chunks a node's process rendered for `task_id` while the orchestrator could not hear
    it, signed with the session key its login named (`domain.continuity.progress_digest` over
    node, task, chunk hashes and times, and `resumed_at`)."""

    task_id: RowKey
    chunks: list[ShownChunkIn] = Field(min_length=1, max_length=MAX_SHOWN_CHUNKS)
    resumed_at: float = Field(ge=0, lt=2**40)
    signature: Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{130}$")]


class ProgressShownOut(BaseModel):
    verdict: str  # withdrawn | not_pending (nothing was waiting to be slashed)
    chunks_credited: int


class CompleteIn(Strict):
    result_sha256: Sha256Hex
    render: RenderIn | None = None  # render tasks: the build, kernel and chunk files


class FailIn(Strict):
    reason: Literal["start_failed", "drain", "error"]
    message: str = Field("", max_length=1000)


class TaskOut(BaseModel):
    task_id: int
    status: str
    progress: float


class BlobOut(BaseModel):
    sha256: str
    size: int


MAX_LACKING_QUERY = 512  # hashes one question names (a pack asks in batches)


class LackingIn(Strict):
    sha256s: list[Sha256Hex] = Field(min_length=1, max_length=MAX_LACKING_QUERY)


class LackingOut(BaseModel):
    lacking: list[str]  # of the hashes asked, those the signing wallet has still to upload


class ResultOut(BaseModel):
    task_id: int
    name: str  # a file name for it: frame-0001.png, frame-0001-tile-02.png, shard-0003.tar
    sha256: str
    size: int
    frame: int | None
    tile: int | None
    tiles: int | None


class ResultsOut(BaseModel):
    job_id: str
    status: str
    complete: bool  # every task has a result
    results: list[ResultOut]


class SweepOut(BaseModel):
    expired_leases: int
    dead_nodes: list[str]
    held_nodes: list[str] = []  # of dead_nodes: a shared silence, leases kept for a while


class OutboxOut(BaseModel):
    id: int
    kind: str
    idempotency_key: str
    status: str  # pending | sent | confirmed | failed
    payload: dict[str, Any]
    attempts: int
    tx_hash: str | None
    note: str | None  # why it failed, or how it was found already done


# ---------------------------------------------------------------- Predictive Latency Staking

Hex32 = Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{64}$")]
MAX_GPU_SAMPLES = 120
MAX_POPW_ANSWER_CHARS = 1 << 17  # the body limit (64 KiB by default) binds first


class GpuSampleIn(Strict):
    """One pynvml reading (mirrors `domain.reliability.GpuSample`). Self-reported: RS lets it
    only lower a score, so the bounds are about sanity, not trust."""

    at: float = Field(ge=0, lt=2**40)  # unix seconds; refused if older than 10 min
    temperature_c: float = Field(ge=-50, le=150)
    sm_clock_mhz: float = Field(ge=0, le=10_000)
    max_sm_clock_mhz: float = Field(gt=0, le=10_000)
    throttle_reasons: int = Field(ge=0, lt=2**32)  # NVML clocks-throttle-reason bitmask
    utilization_pct: float = Field(ge=0, le=100)
    memory_used_mb: float = Field(ge=0, le=4_194_304)
    memory_total_mb: float = Field(ge=0, le=4_194_304)
    power_w: float = Field(ge=0, le=10_000)
    power_limit_w: float = Field(ge=0, le=10_000)
    # NVML facts RS does not read (yet): kept as telemetry when the device reports them, None
    # (or absent) where it does not; never a made-up 0.
    mem_clock_mhz: float | None = Field(None, ge=0, le=50_000)
    memory_free_mb: float | None = Field(None, ge=0, le=4_194_304)
    energy_mj: float | None = Field(None, ge=0, lt=SAFE_INT)  # since the driver loaded
    ecc_uncorrected: int | None = Field(None, ge=0, lt=SAFE_INT)  # volatile uncorrected errors
    xid_last: int | None = Field(None, ge=0, lt=2**32)
    pcie_replays: int | None = Field(None, ge=0, lt=SAFE_INT)


NVML_EXTRAS = ("mem_clock_mhz", "memory_free_mb", "energy_mj", "ecc_uncorrected", "xid_last",
               "pcie_replays")


class GpuSamplesIn(Strict):
    samples: list[GpuSampleIn] = Field(min_length=1, max_length=MAX_GPU_SAMPLES)


class AcceptedOut(BaseModel):
    accepted: int


class ProbeOut(BaseModel):
    nonce: str  # 0x + 16 bytes: echo it back
    sent_at: float


class ProbeEchoIn(Strict):
    nonce: Annotated[str, Field(pattern=r"^0x[0-9a-fA-F]{32}$")]


class ProbeEchoOut(BaseModel):
    rtt_ms: float


class ChallengeIn(Strict):
    gpu_class: GpuClassName  # the GPU class the node claims


class ChallengeOut(BaseModel):
    nonce: str
    gpu_class: str
    size: int
    rounds: int
    spot_checks: int  # (round, row) cells the answer opens
    ping_rounds: int  # probes to answer (POST .../probe, then echo) before the answer
    issued_at: float
    deadline: float


class AnswerIn(Strict):
    nonce: Hex32
    # base64 of `popw.solve(challenge).to_bytes()`: ~2 KB per spot check (size 256)
    answer: Annotated[str, Field(min_length=4, max_length=MAX_POPW_ANSWER_CHARS,
                                 pattern=r"^[A-Za-z0-9+/]+={0,2}$")]
    gpu_under_load: list[GpuSampleIn] = Field(default_factory=list, max_length=MAX_GPU_SAMPLES)


class VerdictOut(BaseModel):
    node_id: str
    passed: bool
    tier: int
    decided_at: float
    expires_at: float
    reasons: list[str]


class NodeScoreOut(BaseModel):
    node_id: str
    duration_s: float  # the task duration T the RS is conditioned on
    rs: float  # P(finishes a task of duration T and passes verification), as placement uses it
    survival: float
    pass_rate: float
    stability: float
    thermal: float
    tier: int  # the tier work may use now (policy tier, HIGH only with a fresh handshake)


class ScoreProofOut(BaseModel):
    epoch: int
    root: str
    provider: str
    score_bps: int
    telemetry_digest: str
    proof: list[str]


class VerificationFailedIn(Strict):
    node_id: Name


class CheckLeaseOut(BaseModel):
    check_id: int
    role: str  # "check" or "tiebreak"
    window: int
    expires_at: float
    payload: dict[str, Any]  # a task payload, restricted to the window


class CheckResultIn(Strict):
    chunks: list[ChunkIn] = Field(default_factory=list, max_length=MAX_RENDER_CHUNKS)
    frame_sha256: Sha256Hex | None = None
    result_sha256: Sha256Hex | None = None  # a non-render result
    render: RenderEnvIn | None = None
    render_s: float = Field(0.0, ge=0, le=7 * 86400)


class CheckOut(BaseModel):
    check_id: int
    status: str
    comparison: dict[str, Any] | None


class CommitmentOut(BaseModel):
    commitment_id: int
    task_id: int
    node_id: str
    status: str
    detail: str
    root: str
    rate: float
    windows: int
    checks: list[CheckOut]
    evidence: list[dict[str, Any]]  # {"digest", "evidence"} for a failed result


class VerificationOut(BaseModel):
    commitments: dict[str, int]  # by status
    checks: dict[str, int]  # by status
    overturned: int  # mismatches a tie-break decided for the node (a rejection avoided)
    check_render_s: float
    by_node: dict[str, dict[str, int]]  # node -> its results by verdict
