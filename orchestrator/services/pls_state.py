"""The state every Predictive Latency Staking use case shares: one `PlsEngine`, the lock
that guards it (routes run in a thread pool), the chain's free stake (cached), and what only
a live service observes (pending probe nonces, last heartbeats, the handshakes' recent RTTs
and verdicts).

Every input is written to the DB in the caller's transaction, with an observation for the
shared log (`pls_log`); the engine learns it only from the log, once committed, in the log's
order, on this replica and on every other. A restarted orchestrator rebuilds the same engine
from the DB (`pls_rebuild`) and follows the log from there.

Telemetry metrics stored in `telemetry_samples`: `rtt_ms` (a probe the orchestrator timed),
`probe_lost` (a probe not echoed within `probe_timeout_s`), `hb_gap_s` (a heartbeat gap of at
least `gap_persist_s`; shorter ones only live in memory), `upload_mbps` (a blob upload the
orchestrator timed), `checkpoint_s` (a checkpoint's measured cost, as the agent reported it),
`gpu.<field>` (one row per field of an agent-reported `GpuSample`, grouped back by node and
time), `nvml.<field>` (NVML facts RS does not read, where the device reported them: memory
clock, free memory, energy, uncorrected ECC errors, last XID, PCIe replays).
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import fields
from typing import Protocol

from orchestrator.domain.chain_views import ProviderStake
from orchestrator.domain.pls_engine import PlsConfig, PlsEngine
from orchestrator.domain.pls_observations import NodeKnown
from orchestrator.domain.popw import ChallengeBook, PopwVerdict
from orchestrator.domain.reliability import GpuSample, ReliabilityBook
from orchestrator.domain.types import Tier
from orchestrator.telemetry.metrics import MeshMetrics

GPU_FIELDS = tuple(f.name for f in fields(GpuSample) if f.name != "at")


class StakeReader(Protocol):
    """The chain's view of a provider's stake (`MeshChain` satisfies it)."""

    def provider_stake(self, provider: str) -> ProviderStake: ...


class StakeUnavailable(Exception):
    """The chain could not be read; placement fails closed."""


class StakeCache:
    """Free stake per provider, read through the SDK and reused for `ttl_s`; collateral this
    process locked since the read is subtracted, so one batch cannot overspend a provider."""

    def __init__(self, reader: Callable[[], StakeReader], ttl_s: float) -> None:
        self._reader = reader
        self._ttl_s = ttl_s
        self._cached: dict[str, tuple[float, ProviderStake]] = {}
        self._reserved: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def stake(self, provider: str, now: float) -> ProviderStake:
        with self._lock:
            hit = self._cached.get(provider)
            if hit is not None and now - hit[0] < self._ttl_s:
                return hit[1]
        try:
            stake = self._reader().provider_stake(provider)
        except Exception as exc:
            raise StakeUnavailable(f"cannot read the stake of {provider}: {exc}") from None
        with self._lock:
            self._cached[provider] = (now, stake)
            self._reserved.pop(provider, None)
        return stake

    def free(self, provider: str, now: float) -> int:
        stake = self.stake(provider, now)
        with self._lock:
            return stake.free - self._reserved.get(provider, 0)

    def reserve(self, provider: str, amount: int) -> None:
        with self._lock:
            self._reserved[provider] += amount


class PlsState:
    """The engine and the service-only observations around it (see the module docstring)."""

    def __init__(self, config: PlsConfig, *, stake_reader: Callable[[], StakeReader],
                 metrics: MeshMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self.engine = PlsEngine(config)
        self.challenges = ChallengeBook(config.popw)
        self.stake = StakeCache(stake_reader, config.stake_ttl_s)
        self.replica = uuid.uuid4().hex  # this process's name in `pls_log_cursors`
        self._lock = threading.RLock()
        self._popw_lock = threading.Lock()  # judging: single use of each nonce
        self._issue_lock = threading.Lock()  # adding challenges apart from pruning them
        self._verdicts: dict[str, PopwVerdict] = {}
        self._probes: dict[str, dict[bytes, float]] = defaultdict(dict)  # node -> nonce -> sent
        self._recent_rtts: dict[str, deque[tuple[float, float | None]]] = defaultdict(
            lambda: deque(maxlen=4 * config.popw.ping_rounds))
        self._last_beat: dict[str, float] = {}
        self._cursor = 0  # the last observation log id applied to the engine
        self._stale = False  # the log was pruned past the cursor: rebuild from the tables

    @property
    def book(self) -> ReliabilityBook:
        return self.engine.book

    def _reset(self, cursor: int) -> None:
        """A fresh engine that has applied the log up to `cursor` (a rebuild fills it)."""
        self.engine = PlsEngine(self.config)
        self._verdicts.clear()
        self._recent_rtts.clear()
        self._last_beat.clear()
        self._cursor, self._stale = cursor, False

    def _know(self, node: NodeKnown) -> None:
        """Register a node with the engine (its region is also its network group)."""
        self.engine.register(node.node_id, node.provider, region=node.region,
                             network=node.region, at=node.registered_at, tier=Tier(node.tier))
        if node.session_key is not None:
            self.engine.staking.session_bound(node.node_id, node.session_key)
