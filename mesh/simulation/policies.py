"""Placement policies compared by the churn benchmark.

Each sees the same observed world (detector verdicts, probes, outcomes) through the same
hooks; only `oracle` may read ground truth, which is what makes it an upper bound. Every
policy ranks the same candidates, every idle node that passes `matching.eligible`, and the
simulator places through the service's rule over that ranking
(`orchestrator.scheduling.free_slots.FreeSlots`): the first node of the ranking with a free
slot, under PLS also with its stake covering the collateral and no faster node worth the
wait (the policy's `gate`). A baseline has no gate: its ranking alone decides.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, overload

import numpy as np
from numpy.typing import NDArray

from mesh.simulation.world import NodeTimeline
from orchestrator.domain.types import NodeSpec, TaskNeeds
from orchestrator.scheduling.free_slots import Ranking, SlotGate
from orchestrator.services.pls_placement import Admission

FIXED_CHECKPOINT_S = 600.0  # a typical grid's fixed interval (BOINC apps, render farms)
ORACLE_HEAD = 32  # the oracle sorts only this many fastest candidates unless none will do


@dataclass(frozen=True, slots=True)
class TaskView:
    """What a policy may know about the task it is placing."""

    task_key: int
    needs: TaskNeeds
    remaining_work_s: float  # reference GPU-seconds still to do
    queued_at: float  # since when it waits for a node (its arrival, or its requeue)
    deadline_s: float  # its job's deadline
    able: NDArray[np.bool_]  # per node: its spec may take the task (tier, VRAM), busy or idle
    in_view: NDArray[np.bool_]  # per node: the placement pass may use it (up, no failed start)

    def deadline(self, needs: TaskNeeds) -> float:
        """Its job's deadline (`pls_placement.QueuedTask`)."""
        return self.deadline_s


class HoldingGate(SlotGate, Protocol):
    """A policy's gate; after `held_back` said yes, `held_until` is when that wait ends."""

    held_until: float


class LazyAdmissions(Sequence[Admission]):
    """The admissions of a ranking, each made when the placement rule looks at it (it seldom
    walks past the first few of thousands): `admission(i)` makes the i-th."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def admission(self, index: int) -> Admission: ...

    @overload
    def __getitem__(self, index: int) -> Admission: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Admission]: ...

    def __getitem__(self, index: int | slice) -> Admission | Sequence[Admission]:
        if isinstance(index, slice):
            return [self.admission(i) for i in range(*index.indices(len(self)))]
        return self.admission(index)


class Believed(LazyAdmissions):
    """A baseline's admissions: only the completion probability it implied for each node of
    its ranking (for calibration), no collateral."""

    def __init__(self, probabilities: NDArray[np.float64]) -> None:
        self._probabilities = probabilities

    def __len__(self) -> int:
        return int(self._probabilities.size)

    def admission(self, index: int) -> Admission:
        return Admission(float(self._probabilities[index]), 0)


class Grid(Protocol):
    """What a policy's epoch may act on: the replay's node specs (`Simulation` is one)."""

    specs: list[NodeSpec]

    def slash(self, node: int, amount_tokens: float, false_slash: bool) -> None: ...

    def set_spec(self, node: int, spec: NodeSpec) -> None: ...


class Policy(Protocol):
    name: str
    gate: HoldingGate | None  # the checks the rule makes on the ranking; None: none

    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        """`candidates` (node indices, all eligible and idle, ascending: the order of their
        node ids, the service's tie order) that will do for the task's kind of need, best
        first. Each admission's `rs` is the completion probability the policy believed
        (None admissions: none)."""
        ...

    def checkpoint_interval(self, node: int, task: TaskView, cost_s: float, now: float) -> float:
        """Compute seconds between checkpoints for this placement."""
        ...

    def lease_hold_s(self, node: int, now: float) -> float:
        """The detector just called `node` (running a task) dead: seconds to keep its lease
        before revoking it; 0 revokes now, as every baseline does."""
        ...

    def node_up(self, node: int, now: float) -> None: ...

    def node_down(self, node: int, now: float) -> None: ...

    def epoch(self, sim: Grid, now: float) -> None:
        """Once per epoch: periodic scoring, slashing decisions, tier revisions."""
        ...


class Unobservant:
    """The hooks a policy that keeps no state of its own leaves empty: it observes nothing,
    decides nothing per epoch, and revokes a lease at the detector's verdict. It has no
    gate: its ranking alone decides."""

    gate: HoldingGate | None = None

    def lease_hold_s(self, node: int, now: float) -> float:
        return 0.0

    def node_up(self, node: int, now: float) -> None:
        return None

    def node_down(self, node: int, now: float) -> None:
        return None

    def epoch(self, sim: Grid, now: float) -> None:
        return None


class RandomPolicy(Unobservant):
    """Any matching node, uniformly: what a grid without reliability data does."""

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        return Ranking(self._rng.permutation(candidates).tolist(), task.needs)

    def checkpoint_interval(self, node: int, task: TaskView, cost_s: float, now: float) -> float:
        return FIXED_CHECKPOINT_S


class UptimePolicy(Unobservant):
    """What uptime-based staking rewards: the largest observed uptime share, then stake.

    The share is measured from the detector's verdicts since the node was first seen, the
    same signal a staking contract's uptime oracle would report. Its implied completion
    probability (for calibration) is the share itself."""

    name = "uptime"

    def __init__(self, stakes: Sequence[int]) -> None:
        n = len(stakes)
        stake = np.asarray(stakes, dtype=float)
        # Stake breaks near-ties and rewards bonding, saturating so that whales do not win
        # against a node that is actually up more.
        self._stake_weight = stake / (stake + float(np.median(stake)))
        self._first_seen = np.full(n, math.nan)
        self._up_since = np.full(n, math.nan)
        self._up_total = np.zeros(n)

    def shares(self, nodes: np.ndarray, now: float) -> np.ndarray:
        first = self._first_seen[nodes]
        running = self._up_since[nodes]
        up = self._up_total[nodes] + np.where(np.isnan(running), 0.0, now - running)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(now > first, up / (now - first), 0.0)
        return np.clip(np.nan_to_num(share, nan=0.0), 0.0, 1.0)

    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        shares = self.shares(candidates, now)
        order = np.argsort(-(shares * (0.8 + 0.2 * self._stake_weight[candidates])),
                           kind="stable")
        return Ranking(candidates[order].tolist(), task.needs, Believed(shares[order]))

    def checkpoint_interval(self, node: int, task: TaskView, cost_s: float, now: float) -> float:
        return FIXED_CHECKPOINT_S

    def node_up(self, node: int, now: float) -> None:
        if math.isnan(self._first_seen[node]):
            self._first_seen[node] = now
        self._up_since[node] = now

    def node_down(self, node: int, now: float) -> None:
        if not math.isnan(self._up_since[node]):
            self._up_total[node] += now - self._up_since[node]
            self._up_since[node] = math.nan


class OraclePolicy(Unobservant):
    """Knows every future departure, partition verdict and bad result: an upper bound.

    It places a task on the fastest candidate that will finish it undisturbed, and never
    checkpoints except once, just before a departure it knows is coming."""

    name = "oracle"

    def __init__(self, timelines: Sequence[NodeTimeline], speeds: Sequence[float],
                 cheaters: Sequence[bool]) -> None:
        self._timelines = timelines
        self._speeds = np.asarray(speeds, dtype=np.float64)
        self._cheaters = cheaters

    def undisturbed_until(self, node: int, now: float) -> float:
        timeline = self._timelines[node]
        alive = timeline.alive_interval(now)
        if alive is None or timeline.partition_at(now) is not None:
            return now  # gone, or cut off right now: a lease could not even start
        partition = timeline.next_revoking_partition(now, alive[1])
        return alive[1] if partition is None else partition.start

    def rank(self, task: TaskView, candidates: NDArray[np.intp], now: float) -> Ranking[int]:
        """The honest candidates that finish undisturbed, fastest first (the caller's order
        among equally fast ones): those among the `ORACLE_HEAD` fastest, else the first such
        one of the rest (most tasks find theirs among the fastest few, which are sorted
        first)."""
        nodes: list[int] = []
        if candidates.size:
            speeds = -self._speeds[candidates]  # ascending: fastest first
            positions = np.arange(speeds.size)
            last_of_head = min(ORACLE_HEAD, speeds.size) - 1
            cut = np.partition(speeds, last_of_head)[last_of_head]
            for rest, group in enumerate((positions[speeds <= cut], positions[speeds > cut])):
                for node in candidates[group[np.lexsort((group, speeds[group]))]].tolist():
                    finish = now + task.remaining_work_s / self._speeds[node]
                    if not self._cheaters[node] and finish <= self.undisturbed_until(node, now):
                        nodes.append(node)
                        if rest:
                            break  # past the head: the first will do
                if nodes:
                    break
        return Ranking(nodes, task.needs, Believed(np.ones(len(nodes))))

    def checkpoint_interval(self, node: int, task: TaskView, cost_s: float, now: float) -> float:
        return math.inf

