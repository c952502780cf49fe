"""The service's one Predictive Latency Staking engine behind its use cases: ingest,
handshake, placement gates, staking and epochs, continuity across a network cut, restart.
`PlsService` is all of them over one `PlsState` (the engine, its lock, the stake cache); the
pure `domain.pls_engine` does all judging, these modules route events to it, persist them,
and turn its decisions into outbox actions."""

from __future__ import annotations

from orchestrator.services.pls_continuity import PlsContinuity
from orchestrator.services.pls_handshake import PlsHandshake
from orchestrator.services.pls_ingest import SweepFacts
from orchestrator.services.pls_placement import PlsPlacement
from orchestrator.services.pls_rebuild import PlsRebuild
from orchestrator.services.pls_staking import PlsStaking

__all__ = ["PlsService", "SweepFacts"]


class PlsService(PlsRebuild, PlsHandshake, PlsPlacement, PlsStaking, PlsContinuity):
    """What routes, the placer and the periodic jobs call (`AppContext.pls`)."""
