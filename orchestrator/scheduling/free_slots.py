"""The decisions of one placement pass, in memory: the free GPU slots per node, one ranking
per kind of need (walked with a cursor past nodes found full), and the rule that hands a
waiting task its slot. No DB access: the service's `scheduling.placer.Placer` loads the slot
view and commits what this decides; the churn simulator (`mesh.simulation.engine`) places
through the same rule over its own world.

The rule, for each waiting task in the queue's order: walk the ranking of the task's kind
of need, best first; skip a node with no free slot left (a full node at the cursor moves the
cursor: it is full for every later task of that kind in this pass); under a gate (PLS), skip
a node whose provider's stake no longer `covers` the placement's collateral, and stop with
"held" when the gate keeps the task waiting for a faster node (`held_back`); take the first
slot that is left."""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from orchestrator.domain.types import TaskNeeds
from orchestrator.services.pls_placement import Admission, QueuedTask

Node = TypeVar("Node", bound=Hashable)


class SlotGate(Protocol):
    """What the rule asks of a gate once a ranking is made (`PlacementGate` has it)."""

    def covers(self, provider: str, amount: int, now: float) -> bool:
        """The provider's free stake still covers `amount`."""
        ...

    def held_back(self, needs: TaskNeeds, admission: Admission, task: QueuedTask,
                  now: float) -> bool:
        """The task should wait for a faster node than the admitted one."""
        ...


@dataclass(slots=True)
class Ranking(Generic[Node]):
    """The nodes a kind of need may go to, best first, each with its admission under a gate
    (None: no admission, plain matching); `cursor`: the first node not yet found full."""

    nodes: Sequence[Node]
    needs: TaskNeeds
    admissions: Sequence[Admission] | None = None
    cursor: int = 0


Taken = tuple[Node, int, Admission | None]  # node, slot, the admission it was taken at


class FreeSlots(Generic[Node]):
    """One pass's free slots and rankings. `rank(kind, now)` ranks the nodes for a kind of
    need (called once per kind per pass, on its first task); `provider_of` names a node's
    provider for the gate's stake check."""

    def __init__(self, free: MutableMapping[Node, list[int]],
                 rank: Callable[[Hashable, float], Ranking[Node]], *,
                 gate: SlotGate | None = None,
                 provider_of: Callable[[Node], str] | None = None) -> None:
        """`free`: each node's free slot numbers, the next one taken last; `gate` with
        `provider_of`: the PLS checks (None: the ranking's first free node)."""
        if gate is not None and provider_of is None:
            raise ValueError("a gate needs provider_of")
        self.free = free
        self._rank = rank
        self.gate = gate
        self._provider_of = provider_of
        self._rankings: dict[Hashable, Ranking[Node]] = {}

    def take(self, task: QueuedTask, kind: Hashable, now: float
             ) -> Taken[Node] | Literal["held"] | None:
        """The slot the task takes (it is no longer free), "held" when the gate keeps the
        task waiting for a faster node, or None when no free node of its ranking will do.
        `kind`: its kind of need; tasks of one kind share a ranking within the pass."""
        ranking = self._rankings.get(kind)
        if ranking is None:
            ranking = self._rankings[kind] = self._rank(kind, now)
        nodes, admissions, gate = ranking.nodes, ranking.admissions, self.gate
        position = ranking.cursor
        while position < len(nodes):
            node = nodes[position]
            free = self.free[node]
            if not free:
                if position == ranking.cursor:
                    ranking.cursor += 1  # full for every later task of this kind too
                position += 1
                continue
            admission = None if admissions is None else admissions[position]
            if gate is None or admission is None:
                return node, free.pop(), admission
            assert self._provider_of is not None
            if gate.covers(self._provider_of(node), admission.collateral, now):
                if gate.held_back(ranking.needs, admission, task, now):
                    return "held"
                return node, free.pop(), admission
            position += 1  # this pass used the provider's stake; the next node may fit
        return None
