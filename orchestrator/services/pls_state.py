"""The state every Predictive Latency Staking use case shares: one `PlsEngine`, the lock
that guards it (routes run in a thread pool), providers' free stake (cached) as the indexed
events show it for ranking and as a chain call shows it for the decision, and what only
a live service observes (pending probe nonces, last heartbeats, the handshakes' recent RTTs
and verdicts).

Every input is written to the DB in the caller's transaction, with an observation for the
shared log (`pls_log`); the engine learns it only from the log, once committed, in the log's
order, on this replica and on every other. A restarted orchestrator rebuilds the same engine
from the DB (`pls_replay`) and follows the log from there.

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
from orchestrator.domain.popw import ChallengeBook, PopwVerdict
from orchestrator.domain.reliability import GpuSample, ReliabilityBook
from orchestrator.telemetry.metrics import MeshMetrics

GPU_FIELDS = tuple(f.name for f in fields(GpuSample) if f.name != "at")


class StakeReader(Protocol):
    """The chain's view of a provider's stake (`MeshChain` satisfies it)."""

    def provider_stake(self, provider: str) -> ProviderStake: ...


class StakeUnavailable(Exception):
    """The chain could not be read; placement fails closed."""


class StakeCache:
    """Free stake per provider, read through the SDK and reused for `ttl_s`, less the
    collateral of its open assignments: those in the DB at the read (`open_reader`; the chain
    holds only the provider's standing reservation) and those this process made since, so one
    batch cannot overspend a provider. Reservation raises this process queued count until they
    lapse (a re-read may come before the outbox sent them)."""

    def __init__(self, reader: Callable[[], StakeReader], ttl_s: float,
                 open_reader: Callable[[str], int] | None = None) -> None:
        self._reader = reader
        self._ttl_s = ttl_s
        self._open_reader = open_reader
        self._cached: dict[str, tuple[float, ProviderStake, int]] = {}
        self._assigned: dict[str, int] = defaultdict(int)
        self._raised: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def stake(self, provider: str, now: float) -> ProviderStake:
        return self._read(provider, now)[0]

    def _read(self, provider: str, now: float) -> tuple[ProviderStake, int]:
        with self._lock:
            hit = self._cached.get(provider)
            if hit is not None and now - hit[0] < self._ttl_s:
                return hit[1], hit[2] + self._assigned.get(provider, 0)
        try:
            stake = self._reader().provider_stake(provider)
            open_collateral = self._open_reader(provider) if self._open_reader else 0
        except Exception as exc:
            raise StakeUnavailable(f"cannot read the stake of {provider}: {exc}") from None
        with self._lock:
            self._cached[provider] = (now, stake, open_collateral)
            self._assigned.pop(provider, None)
        return stake, open_collateral

    def free(self, provider: str, now: float) -> int:
        stake, open_collateral = self._read(provider, now)
        return stake.free - open_collateral

    def open_collateral(self, provider: str, now: float) -> int:
        return self._read(provider, now)[1]

    def reservation(self, provider: str, now: float) -> tuple[int, int]:
        """The provider's reservation (amount, until) as it will be once the raises this
        process queued land: the chain's, raised by them (the contract keeps the larger amount
        and the later lapse, so a raise counts until its lapse whether mined yet or not)."""
        stake = self.stake(provider, now)
        amount, until = stake.reserved, stake.reserved_until
        with self._lock:
            queued = self._raised.get(provider)
            if queued is not None and queued[1] > now:
                amount, until = max(amount, queued[0]), max(until, queued[1])
        return amount, until

    def assign(self, provider: str, amount: int) -> None:
        with self._lock:
            self._assigned[provider] += amount

    def raised(self, provider: str, amount: int, until: int) -> None:
        with self._lock:
            amount_before, until_before = self._raised.get(provider, (0, 0))
            self._raised[provider] = (max(amount, amount_before), max(until, until_before))


class PlsState:
    """The engine and the service-only observations around it (see the module docstring):
    the one object every part of `services.pls.PlsService` receives in its constructor, and
    the one place their locks and shared dicts live. What guards what:

    - `lock` (reentrant: routes run in a thread pool) guards `engine`, `verdicts`,
      `recent_rtts`, `last_beat`, `cursor`, `stale` and `lone_silent`;
    - `popw_lock` serialises the judging of handshake answers (`PlsHandshake.judge_answer`),
      so each nonce is used once, and `issue_lock` keeps adding challenges to `challenges`
      apart from pruning them (`PlsHandshake.prune_challenges` takes both);
    - `stake` and `listing` lock themselves (`StakeCache`).
    """

    def __init__(self, config: PlsConfig, *, stake_reader: Callable[[], StakeReader],
                 metrics: MeshMetrics, open_collateral: Callable[[str], int] | None = None,
                 listing_reader: Callable[[], StakeReader] | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.engine = PlsEngine(config)  # fed by the log (`PlsLog`) and a rebuild (`PlsReplay`)
        self.challenges = ChallengeBook(config.popw)  # issued PoPW challenges (`PlsHandshake`)
        # `stake` decides (a chain call at the moment a collateral is committed); `listing`
        # ranks candidates without a call per provider. A lagging index can only make the
        # ranking stale: the decision still refuses what the chain does not cover.
        self.stake = StakeCache(stake_reader, config.stake_ttl_s, open_collateral)
        self.listing = (StakeCache(listing_reader, config.stake_ttl_s, open_collateral)
                        if listing_reader is not None else self.stake)
        self.replica = uuid.uuid4().hex  # this process's name in `pls_log_cursors`
        self.lock = threading.RLock()
        self.popw_lock = threading.Lock()  # judging: single use of each nonce
        self.issue_lock = threading.Lock()  # adding challenges apart from pruning them
        # Written as the log applies observations (`PlsLog`) and by a rebuild (`PlsReplay`):
        self.verdicts: dict[str, PopwVerdict] = {}  # each node's latest handshake verdict
        self.recent_rtts: dict[str, deque[tuple[float, float | None]]] = defaultdict(
            lambda: deque(maxlen=4 * config.popw.ping_rounds))  # (sent, RTT ms | None: lost)
        self.last_beat: dict[str, float] = {}  # each node's latest heartbeat the log brought
        self.cursor = 0  # the last observation log id applied to the engine
        self.stale = False  # the log was pruned past the cursor: rebuild from the tables
        # The nodes the running failure sweep holds by the lone grace (`PlsIngest.sweep_holds`
        # sets them, its `after_sweep` takes them).
        self.lone_silent: frozenset[str] = frozenset()

    @property
    def book(self) -> ReliabilityBook:
        return self.engine.book

    def reset(self, cursor: int) -> None:
        """A fresh engine that has applied the log up to `cursor` (a rebuild fills it)."""
        self.engine = PlsEngine(self.config)
        self.verdicts.clear()
        self.recent_rtts.clear()
        self.last_beat.clear()
        self.cursor, self.stale = cursor, False
