"""A job's forecast from the PLS engine's ranking of the nodes that would take its tasks: what
it costs, when it is expected to finish, how likely by its deadline, and what collateral
providers lock.

The job's tasks are dealt as the placement pass deals them: each to the best-ranked slot free
at the time, every slot of a ranked node free from now. A task holds its slot for its expected
time there, its wall time and again with the chance the attempt is lost (`PlsEngine.
wait_until`'s expected re-run); the job is expected to finish when its last task does. A
task is on time when one of the attempts that fit between its start and the deadline
survives, each surviving with the node's RS over the task's wall time (so k attempts:
1 - (1 - RS)^k); the job is on time when all its tasks are, taken as independent.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Offer:
    """A node the engine ranked for the job's tasks (offers come best first)."""

    node_id: str
    slots: int
    rs: float  # RS(node, wall_s): the chance an attempt there finishes
    wall_s: float  # the task's wall time there (its reference seconds over the node's speed)
    price: float  # token units one task's work costs there (`pls.compute_cost`)
    collateral: int  # the provider locks this per task placed there


@dataclass(frozen=True, slots=True)
class Forecast:
    price_min: int  # every task at the cheapest node the schedule uses
    price_expected: int  # each task at the node the schedule gives it
    price_max: int  # every task at the dearest node the schedule uses
    completion_s: float  # expected time from now until the last task is done
    p_deadline: float  # the chance every task is done by the deadline
    collateral_min: int  # per task, over the nodes the schedule uses
    collateral_max: int
    collateral_total: int  # locked over the schedule: each task's at its node
    nodes: int  # how many nodes the schedule uses


def forecast(offers: Sequence[Offer], tasks: int, horizon_s: float) -> Forecast | None:
    """The forecast of `tasks` tasks due `horizon_s` from now over `offers` (best first);
    None when there is no offer."""
    if tasks < 1:
        raise ValueError("a job has at least one task")
    free = [(0.0, rank, slot) for rank, offer in enumerate(offers)
            for slot in range(offer.slots)]
    if not free:
        return None
    heapq.heapify(free)
    used: list[Offer] = []
    completion, p_on_time, price, collateral = 0.0, 1.0, 0.0, 0
    for _ in range(tasks):
        start, rank, slot = heapq.heappop(free)
        offer = offers[rank]
        p_fail = min(max(1.0 - offer.rs, 0.0), 1.0)
        attempts = math.floor((horizon_s - start) / offer.wall_s) if horizon_s > start else 0
        p_on_time *= 1.0 - p_fail ** attempts if attempts > 0 else 0.0
        end = start + offer.wall_s * (1.0 + p_fail)
        completion = max(completion, end)
        price += offer.price
        collateral += offer.collateral
        if offer not in used:
            used.append(offer)
        heapq.heappush(free, (end, rank, slot))
    return Forecast(
        price_min=math.ceil(tasks * min(o.price for o in used)), price_expected=math.ceil(price),
        price_max=math.ceil(tasks * max(o.price for o in used)), completion_s=completion,
        p_deadline=p_on_time, collateral_min=min(o.collateral for o in used),
        collateral_max=max(o.collateral for o in used), collateral_total=collateral,
        nodes=len(used))
