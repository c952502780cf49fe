"""Placement policies compared by the churn benchmark.

Each sees the same observed world (detector verdicts, probes, outcomes) through the same
hooks; only `oracle` may read ground truth, which is what makes it an upper bound. Every
policy picks among the same candidates: every idle node that passes `matching.eligible`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from mesh.simulation.world import NodeTimeline
from orchestrator.domain.types import NodeSpec, TaskNeeds

FIXED_CHECKPOINT_S = 600.0  # a typical grid's fixed interval (BOINC apps, render farms)
ORACLE_HEAD = 32  # the oracle sorts only this many fastest candidates unless none will do


@dataclass(frozen=True, slots=True)
class Choice:
    """The candidate picked and the completion probability the policy implied for it."""

    position: int  # index into the candidate sequence
    predicted: float | None  # P(task completes and verifies) the policy believed; None: none


@dataclass(frozen=True, slots=True)
class Wait:
    """Place nothing now; offer the task again at `until` (or at the next pass before it)."""

    until: float


@dataclass(frozen=True, slots=True)
class TaskView:
    """What a policy may know about the task it is placing."""

    task_key: int
    needs: TaskNeeds
    remaining_work_s: float  # reference GPU-seconds still to do
    queued_at: float  # since when it waits for a node (its arrival, or its requeue)
    deadline_s: float  # its job's deadline
    able: NDArray[np.bool_]  # per node: its spec may take the task (tier, VRAM), busy or idle


class Grid(Protocol):
    """What a policy's epoch may act on: the replay's node specs (`Simulation` is one)."""

    specs: list[NodeSpec]

    def slash(self, node: int, amount_tokens: float, false_slash: bool) -> None: ...

    def set_spec(self, node: int, spec: NodeSpec) -> None: ...


class Policy(Protocol):
    name: str

    def choose(self, task: TaskView, candidates: NDArray[np.intp], now: float
               ) -> Choice | Wait | None:
        """Pick one of `candidates` (node indices, all eligible and idle, in random order);
        None: none will do; `Wait`: none now, by choice, until then."""
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
    decides nothing per epoch, and revokes a lease at the detector's verdict."""

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

    def choose(self, task: TaskView, candidates: NDArray[np.intp], now: float
               ) -> Choice | None:
        return Choice(int(self._rng.integers(len(candidates))), None)

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

    def choose(self, task: TaskView, candidates: NDArray[np.intp], now: float
               ) -> Choice | None:
        shares = self.shares(candidates, now)
        best = int(np.argmax(shares * (0.8 + 0.2 * self._stake_weight[candidates])))
        return Choice(best, float(shares[best]))

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

    def choose(self, task: TaskView, candidates: NDArray[np.intp], now: float
               ) -> Choice | None:
        """The fastest honest candidate that finishes undisturbed (the first in the caller's
        order among equally fast ones): walk them fastest first and stop at the first. Most
        tasks find one among the fastest few, so those are sorted first."""
        speeds = -self._speeds[candidates]  # ascending: fastest first
        positions = np.arange(speeds.size)
        last_of_head = min(ORACLE_HEAD, speeds.size) - 1
        cut = np.partition(speeds, last_of_head)[last_of_head]
        for group in (positions[speeds <= cut], positions[speeds > cut]):
            for position in group[np.lexsort((group, speeds[group]))].tolist():
                node = int(candidates[position])
                if self._cheaters[node]:
                    continue
                finish = now + task.remaining_work_s / self._speeds[node]
                if finish <= self.undisturbed_until(node, now):
                    return Choice(position, 1.0)
        return None

    def checkpoint_interval(self, node: int, task: TaskView, cost_s: float, now: float) -> float:
        return math.inf

