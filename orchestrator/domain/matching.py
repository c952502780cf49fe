"""Which nodes may run a task (`eligible`), in what order to try them (`rank`), and which
waiting task goes first (`latest_start`).

The score is pluggable (`ScoreFn`, higher is better) so Predictive Latency
Staking can replace `cheapest_first` without touching the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from orchestrator.domain.types import NodeSpec, Priority, TaskNeeds, Tier

ScoreFn = Callable[[NodeSpec, TaskNeeds], float]

MIN_TIER_FOR_PRIORITY: dict[Priority, Tier] = {
    Priority.LOW: Tier.BACKGROUND,  # demoted nodes may still take background work
    Priority.NORMAL: Tier.STANDARD,
    Priority.HIGH: Tier.HIGH,  # needs a fresh PoPW handshake
}


def eligible(node: NodeSpec, needs: TaskNeeds) -> bool:
    """Hard constraints only: a node that fails one can never run the task."""
    if node.vram_gb < needs.min_vram_gb:
        return False
    if needs.gpu_models is not None and node.gpu_model not in needs.gpu_models:
        return False
    if needs.regions is not None and node.region not in needs.regions:
        return False
    if needs.providers is not None and node.provider not in needs.providers:
        return False
    if node.provider in needs.excluded_providers:
        return False
    if needs.max_price_per_gpu_hour is not None and (
        node.price_per_gpu_hour > needs.max_price_per_gpu_hour
    ):
        return False
    return node.tier >= MIN_TIER_FOR_PRIORITY[needs.priority]


def cheapest_first(node: NodeSpec, needs: TaskNeeds) -> float:
    """Default score until PLS plugs in: the customer pays less on a cheaper node."""
    return -float(node.price_per_gpu_hour)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node as the scheduler sees it right now: its spec and how many slots are free."""

    spec: NodeSpec
    free_slots: int


def rank(
    candidates: Iterable[Candidate], needs: TaskNeeds, score: ScoreFn = cheapest_first
) -> list[Candidate]:
    """Eligible candidates with a free slot, best first; ties go to the emptier node
    (spreads load), then to the node id so the order is deterministic."""
    usable = [c for c in candidates if c.free_slots > 0 and eligible(c.spec, needs)]
    usable.sort(key=lambda c: (-score(c.spec, needs), -c.free_slots, c.spec.node_id))
    return usable


def latest_start(deadline: float, expected_duration_s: float) -> float:
    """When a task must start at the latest to finish by its job's deadline on a reference
    GPU: the queue serves the smallest first (least laxity first, ties by age), so a long
    frame of a job due tomorrow goes ahead of a short one due in two hours only once it has
    less slack. On a grid short of capacity this keeps the long jobs' deadlines without
    starving the short ones; serving by arrival, or every high-priority job first, left whole
    feature jobs hours late (docs/churn.md). Priority is not an order: it asks for nodes with
    a fresh PoPW handshake (`eligible`)."""
    return deadline - expected_duration_s
