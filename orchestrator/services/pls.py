"""The service's one Predictive Latency Staking engine behind its use cases: ingest,
handshake, placement gates, staking and epochs, continuity across a network cut, restart.
`PlsService` builds one part per use case over one `PlsState` (the engine, its locks, the
stake caches), each part given the state and, where it writes observations, the log
(`PlsLog`) in its constructor. The pure `domain.pls_engine` does all judging; the parts
route events to it, persist them, and turn its decisions into outbox actions."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.domain.pls_engine import PlsConfig
from orchestrator.services.pls_continuity import PlsContinuity
from orchestrator.services.pls_handshake import PlsHandshake
from orchestrator.services.pls_ingest import PlsIngest, SweepFacts
from orchestrator.services.pls_log import PlsLog
from orchestrator.services.pls_placement import PlsPlacement
from orchestrator.services.pls_replay import PlsReplay
from orchestrator.services.pls_staking import PlsStaking
from orchestrator.services.pls_state import PlsState, StakeReader
from orchestrator.telemetry.metrics import MeshMetrics

__all__ = ["PlsService", "SweepFacts"]


class PlsService:
    """What routes, the placer and the periodic jobs call (`AppContext.pls`): one part per
    concern, all over the same `state`."""

    def __init__(self, config: PlsConfig, *, stake_reader: Callable[[], StakeReader],
                 metrics: MeshMetrics, open_collateral: Callable[[str], int] | None = None,
                 listing_reader: Callable[[], StakeReader] | None = None) -> None:
        self.state = PlsState(config, stake_reader=stake_reader, metrics=metrics,
                              open_collateral=open_collateral, listing_reader=listing_reader)
        # the observation log every replica's engine follows (catch-up, pruning)
        self.log = PlsLog(self.state)
        # registrations, sessions, sweeps, heartbeats, probes, telemetry, task outcomes
        self.ingest = PlsIngest(self.state, self.log)
        # PoPW challenges issued and judged
        self.handshake = PlsHandshake(self.state, self.log)
        # the `PlacementGate` of the placer and the lease pull, checkpoint intervals
        self.placement = PlsPlacement(self.state)
        # slash and tier decisions, epochs and their score proofs
        self.staking = PlsStaking(self.state, self.log)
        # proofs of progress after a network cut
        self.continuity = PlsContinuity(self.state, self.log)
        # the engine rebuilt from the tables at start, the log followed from there
        self.replay = PlsReplay(self.state, self.log)
