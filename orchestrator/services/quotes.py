"""A quote before paying: for a job spec and the grid as it is, what the job would cost, when
it is expected to finish, how likely by its deadline, and the collateral providers would lock
(`domain.quotes.forecast`), from the PLS engine's own ranking of the nodes that would take
its tasks (`PlsPlacement.rank`, without the exploration draw: a quote places nothing).

Every alive node that takes work offers all its slots (work running now is not waited out),
at the tier placement would use it at; each task is worth the amount over the task count, as
a submitted job's are (`jobs.submit`), which prices the collateral and the ranking."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from orchestrator.db.placement import load_slot_view
from orchestrator.domain.jobs import split_tasks
from orchestrator.domain.matching import Candidate, eligible
from orchestrator.domain.pls import compute_cost
from orchestrator.domain.quotes import Forecast, Offer, forecast
from orchestrator.domain.types import TaskNeeds
from orchestrator.services.jobs import no_node_for
from orchestrator.services.pls_placement import PlsPlacement


@dataclass(frozen=True, slots=True)
class Quote:
    tasks: int
    eligible_nodes: int  # alive nodes taking work that fit the needs
    forecast: Forecast | None  # None: the engine would place its tasks on no node now
    warning: str | None  # why no node would take it (`jobs.no_node_for`, or the engine's)


def quote(session: Session, *, workload: dict[str, Any], needs: TaskNeeds, amount: int,
          deadline: float, gate: PlsPlacement, now: float) -> Quote:
    """The quote of a job of `workload` and `needs` escrowing `amount`, due at `deadline`."""
    tasks = len(split_tasks(workload))
    needs = replace(needs, value=amount // tasks)
    specs = {spec.node_id: gate.effective_spec(spec, now)
             for spec in load_slot_view(session).nodes}
    candidates = [Candidate(spec, spec.slots) for spec in specs.values()]
    able = sum(eligible(c.spec, needs) for c in candidates)
    offers = [Offer(node_id=node_id, slots=specs[node_id].slots, rs=admission.rs,
                    wall_s=needs.expected_duration_s / admission.speed,
                    price=float(compute_cost(np.array([specs[node_id].price_per_gpu_hour
                                                       / admission.speed]), needs)[0]),
                    collateral=admission.collateral)
              for node_id, admission in gate.rank(candidates, needs, now, explore=False)]
    warning = no_node_for(session, needs)
    if warning is not None:
        warning += ": escrowed, it would wait until one registers"
    elif not offers:
        warning = (f"none of the {able} alive nodes that fit this job would take it now (too "
                   "unreliable for its duration, or their providers' free stake is short of "
                   "the collateral): escrowed, it would wait")
    return Quote(tasks=tasks, eligible_nodes=able,
                 forecast=forecast(offers, tasks, deadline - now), warning=warning)
