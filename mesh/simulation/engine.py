"""Discrete-event engine: one virtual clock, one heapq of events, one seeded generator per
policy. Drives the real domain code: `matching.eligible` filters candidates, the task state
machine (`lifecycle.task_transition`) checks every move, the service's placement rule
(`scheduling.free_slots.FreeSlots`) takes slots over the policy's ranking, and the policy
decides checkpoint intervals. No per-second ticking: a running task costs two events (start,
end) and its checkpoints are counted arithmetically when it ends or is lost.

The service's timing is paid: a placement is a reservation the node's agent picks up on its
next pull (an idle agent pulls every `POLL_S`, the agent's own interval; the pull of a node
that just went idle runs the pass, so it picks up at once); a reservation not started within
the service's `RESERVATION_TTL_S` is released as a failed start and the node gets no
placement until heard from again; a node called dead loses its reservation."""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from agent.config import AgentConfig
from mesh.simulation.jobs import VALUE_PER_REF_GPU_HOUR, Job
from mesh.simulation.models import TOKEN, NodeProfile
from mesh.simulation.policies import Policy, TaskView
from mesh.simulation.world import NodeTimeline, Partition, World
from orchestrator.config import Settings
from orchestrator.domain.lifecycle import TaskStatus, task_transition
from orchestrator.domain.matching import eligible, latest_start
from orchestrator.domain.types import NodeSpec, Priority, TaskNeeds
from orchestrator.scheduling.free_slots import FreeSlots, Ranking
from orchestrator.services.pls_placement import Admission

CHECKPOINT_MB = 40.0  # finished tiles and render state uploaded per checkpoint
RESULT_MB = 60.0  # rendered frames uploaded at the end
CHECKPOINT_SNAPSHOT_S = 2.0  # GPU paused while the state is written out; the upload then
# runs in the background and the checkpoint is durable (resumable elsewhere) once it lands
BAD_RESULT_RATE = 0.3  # share of a cheater's results that are wrong
SPOT_CHECK_CATCH_RATE = 0.9  # chance the sampled tiles expose a wrong result
MAX_FAILED_TRIES_PER_PASS = 32  # a pass stops after this many unplaceable tasks in a row
EPOCH_S = 3600.0  # scores observed, slashes decided and tiers revised once per epoch
(_POLL,) = [f.default for f in dataclasses.fields(AgentConfig) if f.name == "poll_s"]
assert isinstance(_POLL, float)
POLL_S = _POLL  # an idle agent pulls for work this often (`AgentConfig.poll_s`)
RESERVATION_TTL_S = float(Settings.model_fields["reservation_ttl_s"].default)


class Ev(IntEnum):
    JOB_ARRIVAL = 0
    NODE_DOWN = 1
    NODE_UP = 2
    ATTEMPT_END = 3
    NODE_REACHABLE = 4
    EPOCH = 5
    SCHEDULE = 6
    LEASE_EXPIRY = 7
    WAKE = 8  # a task the policy chose to hold back may be placed now
    PICKUP = 9  # a node's agent pulls its reservation
    START_LAPSE = 10  # a reservation not started within its time to live is released


@dataclass(slots=True)
class TaskState:
    key: int
    job: Job
    work_s: float
    needs: TaskNeeds
    status: TaskStatus = TaskStatus.PENDING
    saved_s: float = 0.0  # reference GPU-seconds safely checkpointed
    attempts: int = 0
    queued_at: float = 0.0  # when it last joined the queue


@dataclass(slots=True)
class Reservation:
    """A slot the placement pass reserved for a task, until the node's agent starts it."""

    task: TaskState
    node: int
    view: TaskView  # the task as it was placed
    admission: Admission | None  # what the placement was admitted at (None: no belief)
    at: float
    ident: int


@dataclass(slots=True)
class Attempt:
    task: TaskState
    node: int
    start: float
    speed: float
    interval_s: float  # compute seconds between checkpoints
    cost_s: float  # GPU seconds stalled per checkpoint
    durable_lag_s: float  # from a snapshot until its upload has landed
    compute_s: float  # compute seconds needed for the remaining work
    upload_s: float  # result upload, counted once more per re-send
    resends: int
    predicted: float | None
    attempt_id: int
    closed: bool = False
    held_since: float | None = None  # the node went silent and the policy kept its lease
    lost_s: float = 0.0  # reference work lost since the last checkpoint, once the lease is lost
    excused_until: float = -math.inf  # partitions starting by then were ridden out (held)

    def revoking_partition(self, timeline: NodeTimeline, until: float) -> Partition | None:
        """The first partition the detector called a departure that this attempt did not
        ride out under a held lease."""
        return timeline.next_revoking_partition(max(self.start, self.excused_until), until)

    def progress(self, stop: float) -> tuple[float, float, float]:
        """(reference work durably checkpointed, checkpoint stalls, reference work consumed)
        if the node stops computing at `stop`."""
        elapsed = min(max(stop - self.start, 0.0), self.duration_s)
        consumed = elapsed * self.speed
        if math.isinf(self.interval_s):
            # Only the oracle: one checkpoint, timed to land right before the departure.
            compute = max(min(elapsed - self.cost_s - self.durable_lag_s, self.compute_s), 0.0)
            return compute * self.speed, min(self.cost_s, elapsed) * self.speed, consumed
        period = self.interval_s + self.cost_s
        stalls = min(math.floor(elapsed / period), self.checkpoints)
        durable = min(math.floor(max(elapsed - self.durable_lag_s, 0.0) / period),
                      self.checkpoints)
        saved = min(durable * self.interval_s, self.compute_s) * self.speed
        return saved, stalls * self.cost_s * self.speed, consumed

    @property
    def checkpoints(self) -> int:
        if math.isinf(self.interval_s):
            return 0
        return max(math.ceil(self.compute_s / self.interval_s) - 1, 0)

    @property
    def duration_s(self) -> float:
        return (self.compute_s + self.checkpoints * self.cost_s
                + self.upload_s * (1 + self.resends))


@dataclass(slots=True)
class PolicyResult:
    """Raw tallies of one policy's run; `metrics.summarise` turns them into the report."""

    name: str
    useful_s: float = 0.0
    wasted_s: float = 0.0
    waste_lost_s: float = 0.0  # work since the last checkpoint, node really departed
    waste_revoked_s: float = 0.0  # same, lease revoked over a partition the detector called dead
    waste_checkpoint_s: float = 0.0
    waste_resend_s: float = 0.0
    waste_verification_s: float = 0.0
    reassignments: int = 0
    failed_starts: int = 0
    undetected_bad_results: int = 0
    predictions: list[float] = field(default_factory=list)
    outcomes: list[int] = field(default_factory=list)
    job_done_at: dict[int, float] = field(default_factory=dict)
    earnings: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slashed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slash_count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    false_slash_nodes: set[int] = field(default_factory=set)


class IdlePool:
    """Idle, accepted nodes with O(1) insert and remove."""

    def __init__(self, size: int) -> None:
        self._items = np.zeros(size, dtype=np.int64)
        self._where = np.full(size, -1, dtype=np.int64)
        self._size = 0

    def add(self, node: int) -> None:
        if self._where[node] < 0:
            self._where[node] = self._size
            self._items[self._size] = node
            self._size += 1

    def remove(self, node: int) -> None:
        at = int(self._where[node])
        if at < 0:
            return
        self._size -= 1
        last = int(self._items[self._size])
        self._items[at] = last
        self._where[last] = at
        self._where[node] = -1

    def nodes(self) -> np.ndarray:
        """The idle nodes: a view, valid until the pool next changes."""
        return self._items[: self._size]

    def __contains__(self, node: int) -> bool:
        return bool(self._where[node] >= 0)

    def __len__(self) -> int:
        return self._size


class PassSlots(dict[int, list[int]]):
    """One placement pass's free slots over the idle pool, made for a node when the rule
    first looks at it: an idle node has its one slot free, any other none."""

    def __init__(self, pool: IdlePool) -> None:
        super().__init__()
        self._pool = pool

    def __missing__(self, node: int) -> list[int]:
        free = [0] if node in self._pool else []
        self[node] = free
        return free


class PlacementObserver:
    """Hooks for what a real orchestrator observes about placements (PLS feeds on them)."""

    def reserved(self, sim: Simulation, reservation: Reservation) -> None:
        """The pass reserved a slot (the service locks the collateral then)."""
        return None

    def released(self, sim: Simulation, reservation: Reservation) -> None:
        """A reservation ended unstarted (its start lapsed, or its node was called dead)."""
        return None

    def completed(self, sim: Simulation, attempt: Attempt) -> None:
        return None

    def attempt_lost(self, sim: Simulation, attempt: Attempt, blameless: bool) -> None:
        return None

    def verification_failed(self, sim: Simulation, attempt: Attempt) -> None:
        return None


class Simulation:
    """One policy's replay of the shared world and job stream."""

    def __init__(self, world: World, profiles: Sequence[NodeProfile], specs: Sequence[NodeSpec],
                 jobs: Sequence[Job], policy: Policy, rng: np.random.Generator,
                 observers: Sequence[PlacementObserver] = (), lone_grace_s: float = 0.0
                 ) -> None:
        """`lone_grace_s`: how long a lease is kept when the detector calls its node dead and
        the policy would revoke at once (`LeaseHold.lone_grace_s`, the service's sweep)."""
        self.world = world
        self.lone_grace_s = lone_grace_s
        self.profiles = profiles
        self.specs = list(specs)
        self.jobs = jobs
        self.policy = policy
        self.rng = rng
        self.observers = observers
        self.timelines = [world.timelines[p.node_id] for p in profiles]
        n = len(profiles)
        self.pool = IdlePool(n)
        self.accepted = np.zeros(n, dtype=bool)
        self.blocked = np.zeros(n, dtype=bool)  # a lease start failed: wait until reachable
        self.running: list[Attempt | None] = [None] * n
        self.reservations: list[Reservation | None] = [None] * n
        self._live: dict[int, Reservation] = {}  # by ident: reserved, not started
        self._reservations_made = 0
        self.idle_since = np.zeros(n)  # when each idle node's agent began pulling
        # the task the pass is placing, and its idle eligible nodes
        self._placing: tuple[TaskView, np.ndarray] | None = None
        self.pending: list[tuple[float, int]] = []
        self.tasks: dict[int, TaskState] = {}
        self.job_tasks_left: dict[int, int] = {}
        self.events: list[tuple[float, int, int, int]] = []
        self.attempts: dict[int, Attempt] = {}
        self._seq = 0
        self._schedule_queued = False
        self._wake_at = math.inf  # the earliest wake a policy's `Wait` asked for
        self.now = 0.0
        # matching.eligible depends only on the node spec and the task's (VRAM, priority), so
        # its verdicts are kept per such class and recomputed for a node when its tier changes.
        self._eligible: dict[tuple[int, Priority], np.ndarray] = {}
        self.result = PolicyResult(policy.name, earnings=np.zeros(n), slashed=np.zeros(n),
                                   slash_count=np.zeros(n, dtype=np.int64))

    # ----- event plumbing --------------------------------------------------------------
    def push(self, at: float, kind: Ev, ref: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, int(kind), self._seq, ref))

    def request_schedule(self) -> None:
        if not self._schedule_queued:
            self._schedule_queued = True
            self.push(self.now, Ev.SCHEDULE, 0)

    def run(self) -> PolicyResult:
        horizon = self.world.horizon_s
        for job in self.jobs:
            self.push(job.arrival_s, Ev.JOB_ARRIVAL, job.job_id)
        for node, timeline in enumerate(self.timelines):
            for t in timeline.up_at:
                self.push(t, Ev.NODE_UP, node)
            for t in timeline.down_at:
                self.push(t, Ev.NODE_DOWN, node)
        jobs_by_id = {job.job_id: job for job in self.jobs}
        epoch = EPOCH_S
        while epoch < horizon:
            self.push(epoch, Ev.EPOCH, 0)
            epoch += EPOCH_S
        while self.events:
            at, kind, _, ref = heapq.heappop(self.events)
            if at >= horizon:
                break
            self.now = at
            if kind == Ev.JOB_ARRIVAL:
                self._job_arrived(jobs_by_id[ref])
            elif kind == Ev.NODE_UP:
                self._node_up(ref)
            elif kind == Ev.NODE_DOWN:
                self._node_down(ref)
            elif kind == Ev.ATTEMPT_END:
                self._attempt_end(ref)
            elif kind == Ev.EPOCH:
                self.policy.epoch(self, at)
            elif kind == Ev.NODE_REACHABLE:
                self.blocked[ref] = False
                self._release(ref)
            elif kind == Ev.LEASE_EXPIRY:
                self._lease_expired(ref)
            elif kind == Ev.WAKE:
                if at >= self._wake_at:
                    self._wake_at = math.inf
                self.request_schedule()
            elif kind == Ev.PICKUP:
                self._pickup(ref)
            elif kind == Ev.START_LAPSE:
                self._start_lapsed(ref)
            else:
                self._schedule_queued = False
                self.placement_pass()
        return self.result

    # ----- handlers -------------------------------------------------------------------
    def _job_arrived(self, job: Job) -> None:
        self.job_tasks_left[job.job_id] = len(job.task_work_s)
        for work in job.task_work_s:
            key = len(self.tasks)
            needs = TaskNeeds(
                min_vram_gb=job.min_vram_gb, priority=job.priority, expected_duration_s=work,
                value=round(work / 3600.0 * VALUE_PER_REF_GPU_HOUR),
                critical_path_s=max(job.task_work_s))
            self.tasks[key] = TaskState(key, job, work, needs, queued_at=self.now)
            heapq.heappush(self.pending, self._queued(self.tasks[key]))
        self.request_schedule()

    def _node_up(self, node: int) -> None:
        if self.accepted[node]:
            return
        self.accepted[node] = True
        self.blocked[node] = False
        self.policy.node_up(node, self.now)
        attempt = self.running[node]
        if attempt is not None and attempt.held_since is not None:
            self._reconnected(attempt)
        self._release(node)

    def _reconnected(self, attempt: Attempt) -> None:
        """A node whose lease was held is heard from again: the same process resumes its
        lease (its checkpoints upload now); a restarted one reports the lease lost."""
        timeline = self.timelines[attempt.node]
        if timeline.alive_interval(attempt.start) != timeline.alive_interval(self.now):
            self._lose(attempt)
            return
        attempt.held_since = None
        attempt.excused_until = self.now
        if attempt.start + attempt.duration_s <= self.now:
            self._attempt_end(attempt.attempt_id)  # it finished while cut off

    def _lease_expired(self, attempt_id: int) -> None:
        attempt = self.attempts[attempt_id]
        if not attempt.closed and attempt.held_since is not None:
            self._lose(attempt)

    def _node_down(self, node: int) -> None:
        if not self.accepted[node]:
            return
        self.accepted[node] = False
        self.pool.remove(node)
        self.policy.node_down(node, self.now)
        reservation = self.reservations[node]
        if reservation is not None:  # the service revokes a dead node's leases
            self._unreserve(reservation, "node dead")
        attempt = self.running[node]
        if attempt is None or attempt.held_since is not None:
            return
        hold = self.policy.lease_hold_s(node, self.now) or self.lone_grace_s
        if hold > 0.0:
            attempt.held_since = self.now
            self.push(self.now + hold, Ev.LEASE_EXPIRY, attempt.attempt_id)
        else:
            self._lose(attempt)

    def _lose(self, attempt: Attempt) -> None:
        """The orchestrator learned the node is gone: keep the checkpoints, requeue the rest."""
        timeline = self.timelines[attempt.node]
        alive = timeline.alive_interval(attempt.start)
        process_end = alive[1] if alive is not None else attempt.start
        partition = attempt.revoking_partition(timeline, process_end)
        if partition is not None and partition.start <= self.now:
            # Revoked while partitioned: checkpoints stop at the partition, yet the node
            # computes on until it reconnects and hears of the revocation.
            saved, overhead, _ = attempt.progress(partition.start)
            _, _, consumed = attempt.progress(min(partition.end, process_end))
            # Partitions are clipped to the session, so one that lasts to the process end
            # was the node leaving, not a cut it would have come back from.
            departed = partition.end >= process_end
        else:
            saved, overhead, consumed = attempt.progress(min(process_end, self.now))
            departed = True
        # Nobody's fault: a partition misread as departure, or a whole region going dark.
        blameless = not departed or self.world.region_dark(
            self.profiles[attempt.node].region, process_end)
        r = self.result
        r.waste_checkpoint_s += overhead
        lost = max(consumed - saved - overhead, 0.0)
        if departed:
            r.waste_lost_s += lost
        else:
            r.waste_revoked_s += lost
        r.wasted_s += max(consumed - saved, 0.0)
        r.useful_s += saved
        attempt.lost_s = max(consumed - saved, 0.0)
        r.reassignments += 1
        self._record_prediction(attempt, 0)
        task = attempt.task
        task.saved_s += saved
        self._close(attempt, TaskStatus.RETRY, "node lost: resume from last checkpoint")
        for observer in self.observers:
            observer.attempt_lost(self, attempt, blameless)
        self._requeue(task)

    def _attempt_end(self, attempt_id: int) -> None:
        attempt = self.attempts.get(attempt_id)
        if attempt is None or attempt.closed or attempt.held_since is not None:
            return  # a held lease ends when its node reconnects (`_reconnected`)
        timeline = self.timelines[attempt.node]
        end = attempt.start + attempt.duration_s
        alive = timeline.alive_interval(attempt.start)
        if alive is None or alive[1] < end or attempt.revoking_partition(
                timeline, end) is not None:
            return  # the node died or is cut off first; its NODE_DOWN closes the attempt
        partition = timeline.partition_at(self.now)
        if partition is not None:
            self.push(partition.end, Ev.ATTEMPT_END, attempt_id)  # delivered on reconnect
            return
        task = attempt.task
        remaining = task.work_s - task.saved_s
        consumed = attempt.duration_s * attempt.speed
        overhead = attempt.checkpoints * attempt.cost_s * attempt.speed
        resend = attempt.resends * attempt.upload_s * attempt.speed
        r = self.result
        profile = self.profiles[attempt.node]
        bad = profile.cheater and self.rng.random() < BAD_RESULT_RATE
        caught = bad and self.rng.random() < SPOT_CHECK_CATCH_RATE
        upload = attempt.upload_s * attempt.speed
        task_transition(TaskStatus.RUNNING, TaskStatus.DONE, at=self.now, reason="uploaded")
        if caught:
            r.waste_verification_s += consumed - upload
            r.wasted_s += consumed - upload
            self._record_prediction(attempt, 0)
            self._close(attempt, TaskStatus.RETRY, "failed verification",
                        from_status=TaskStatus.DONE)
            for observer in self.observers:
                observer.verification_failed(self, attempt)
            self._requeue(task)
            self._release(attempt.node)
            return
        if bad:
            r.undetected_bad_results += 1
        r.useful_s += remaining
        r.waste_checkpoint_s += overhead
        r.waste_resend_s += resend
        r.wasted_s += overhead + resend
        self._pay(attempt, task.work_s)
        self._record_prediction(attempt, 1)
        task.saved_s = task.work_s
        self._close(attempt, TaskStatus.VERIFIED, "verified", from_status=TaskStatus.DONE)
        for observer in self.observers:
            observer.completed(self, attempt)
        job_id = task.job.job_id
        self.job_tasks_left[job_id] -= 1
        if self.job_tasks_left[job_id] == 0:
            r.job_done_at[job_id] = self.now
        self._release(attempt.node)

    # ----- helpers --------------------------------------------------------------------
    def _pay(self, attempt: Attempt, reference_work_s: float) -> None:
        """Providers are paid by tasks delivered, as the orchestrator settles a job
        (`services.settlement.queue_settlement`): whoever delivers the verified result is paid
        for the whole task, at its asking price; a node that left mid-task is paid nothing for
        it (its checkpoints went to whoever resumed)."""
        price = self.profiles[attempt.node].price_per_gpu_hour / TOKEN
        self.result.earnings[attempt.node] += price * reference_work_s / attempt.speed / 3600.0

    def slash(self, node: int, amount_tokens: float, false_slash: bool) -> None:
        self.result.slash_count[node] += 1
        self.result.slashed[node] += amount_tokens
        if false_slash:
            self.result.false_slash_nodes.add(node)

    def _record_prediction(self, attempt: Attempt, outcome: int) -> None:
        if attempt.predicted is not None:
            self.result.predictions.append(attempt.predicted)
            self.result.outcomes.append(outcome)

    def _close(self, attempt: Attempt, target: TaskStatus, reason: str,
               from_status: TaskStatus = TaskStatus.RUNNING) -> None:
        task_transition(from_status, target, at=self.now, reason=reason)
        attempt.closed = True
        attempt.task.status = target
        self.running[attempt.node] = None

    def _release(self, node: int) -> None:
        """The node may be idle now: its agent pulls, which runs a pass."""
        if (self.accepted[node] and not self.blocked[node] and self.running[node] is None
                and self.reservations[node] is None and node not in self.pool):
            self.pool.add(node)
            self.idle_since[node] = self.now
            self.request_schedule()

    @staticmethod
    def _queued(task: TaskState) -> tuple[float, int]:
        """The task's place in the queue, as the service's (`db/placement.waiting_tasks`):
        least laxity first, from the task's whole expected duration, then by age."""
        return latest_start(task.job.deadline_s, task.needs.expected_duration_s), task.key

    def _requeue(self, task: TaskState) -> None:
        task.queued_at = self.now
        heapq.heappush(self.pending, self._queued(task))
        self.request_schedule()

    def placement_pass(self) -> None:
        """One placement pass, as the service's: pending tasks in the queue's order (least
        laxity first) take slots by the service's rule (`FreeSlots`) over the policy's
        ranking of the idle eligible nodes, while idle nodes remain. Two shortcuts the
        service does not take, for speed: once a task found no taker, tasks of its class
        (VRAM, priority) with at least as much work left are skipped for the rest of the pass
        (the pool has not changed), and the pass stops after `MAX_FAILED_TRIES_PER_PASS`
        such tasks in a row. A task held back for a faster node counts against neither."""
        if not self.pending or not len(self.pool):
            return
        in_view = self.accepted & ~self.blocked
        slots = FreeSlots(PassSlots(self.pool), self._rank, gate=self.policy.gate,
                          provider_of=self._provider)
        deferred: list[tuple[float, int]] = []
        hopeless: dict[tuple[int, Priority], float] = {}  # class -> smallest refused work
        failures = 0
        while self.pending and len(self.pool) and failures < MAX_FAILED_TRIES_PER_PASS:
            entry = heapq.heappop(self.pending)
            deferred.append(entry)
            task = self.tasks[entry[1]]
            task_class = (task.needs.min_vram_gb, task.needs.priority)
            remaining = task.work_s - task.saved_s
            if remaining >= hopeless.get(task_class, math.inf):
                failures += 1
                continue
            able = self.eligible_mask(task.needs)
            idle = self.pool.nodes()
            candidates = idle[able[idle]]
            if candidates.size == 0:  # no ranking of its class can offer a node
                hopeless[task_class] = 0.0
                failures += 1
                continue
            needs = dataclasses.replace(
                task.needs, expected_duration_s=remaining,
                value=round(remaining / 3600.0 * VALUE_PER_REF_GPU_HOUR))
            view = TaskView(task.key, needs, remaining, task.queued_at, task.job.deadline_s,
                            able, in_view)
            self._placing = view, candidates
            taken = slots.take(view, needs, self.now)
            if taken == "held":
                assert self.policy.gate is not None
                self._wake(self.policy.gate.held_until)
            elif taken is None:
                hopeless[task_class] = min(hopeless.get(task_class, math.inf), remaining)
                failures += 1
            else:
                deferred.pop()
                failures = 0
                node, _, admission = taken
                self._reserve(task, node, view, admission)
        self._placing = None
        for entry in deferred:
            heapq.heappush(self.pending, entry)

    def _rank(self, kind: object, now: float) -> Ranking[int]:
        """The policy's ranking of the idle eligible nodes for the task being placed (the
        first of its kind of need in this pass), offered in node id order."""
        assert self._placing is not None
        view, candidates = self._placing
        return self.policy.rank(view, np.sort(candidates), now)

    def _provider(self, node: int) -> str:
        return self.specs[node].provider

    def _wake(self, until: float) -> None:
        """Offer the held tasks again at `until` (or at an earlier pass)."""
        if until < self._wake_at:
            self._wake_at = until
            self.push(until, Ev.WAKE, 0)

    def eligible_mask(self, needs: TaskNeeds) -> np.ndarray:
        key = (needs.min_vram_gb, needs.priority)
        mask = self._eligible.get(key)
        if mask is None:
            mask = np.asarray([eligible(spec, needs) for spec in self.specs], dtype=bool)
            self._eligible[key] = mask
        return mask

    def set_spec(self, node: int, spec: NodeSpec) -> None:
        """A tier change: refresh this node's eligibility verdicts."""
        self.specs[node] = spec
        for (min_vram, priority), mask in self._eligible.items():
            mask[node] = eligible(spec, TaskNeeds(min_vram_gb=min_vram, priority=priority))

    def _reserve(self, task: TaskState, node: int, view: TaskView,
                 admission: Admission | None) -> None:
        """The pass placed the task: a reservation the node's agent picks up on its next
        pull (at once when the node's own pull ran this pass, as it went idle)."""
        task_transition(task.status, TaskStatus.RESERVED, at=self.now, reason="placed")
        task.status = TaskStatus.RESERVED
        self.pool.remove(node)
        self._reservations_made += 1
        ident = self._reservations_made
        reservation = Reservation(task, node, view, admission, self.now, ident)
        self.reservations[node] = reservation
        self._live[ident] = reservation
        for observer in self.observers:
            observer.reserved(self, reservation)
        since = float(self.idle_since[node])
        self.push(since + math.ceil((self.now - since) / POLL_S) * POLL_S, Ev.PICKUP, ident)

    def _pickup(self, ident: int) -> None:
        """The agent pulls its reservation: it starts when the node is reachable; a node cut
        off pulls again once its link is back, if that is before the reservation lapses."""
        reservation = self._live.get(ident)
        if reservation is None:
            return
        timeline = self.timelines[reservation.node]
        if timeline.reachable(self.now):
            self._start(reservation)
            return
        lapse = reservation.at + RESERVATION_TTL_S
        partition = timeline.partition_at(self.now)
        if partition is not None and partition.end < lapse and timeline.reachable(partition.end):
            self.push(partition.end, Ev.PICKUP, ident)
        else:
            self.push(lapse, Ev.START_LAPSE, ident)

    def _start_lapsed(self, ident: int) -> None:
        """Not started in time (the sweep's `start lapsed`): a failed start; the node gets no
        placement until heard from (its link back, or its next session)."""
        reservation = self._live.get(ident)
        if reservation is None:
            return
        node = reservation.node
        self.result.failed_starts += 1
        self.blocked[node] = True
        partition = self.timelines[node].partition_at(self.now)
        if partition is not None:
            self.push(partition.end, Ev.NODE_REACHABLE, node)
        self._unreserve(reservation, "start lapsed")

    def _unreserve(self, reservation: Reservation, reason: str) -> None:
        del self._live[reservation.ident]
        self.reservations[reservation.node] = None
        task = reservation.task
        task_transition(TaskStatus.RESERVED, TaskStatus.RETRY, at=self.now, reason=reason)
        task.status = TaskStatus.RETRY
        for observer in self.observers:
            observer.released(self, reservation)
        self._requeue(task)

    def _start(self, reservation: Reservation) -> None:
        del self._live[reservation.ident]
        node, task, view = reservation.node, reservation.task, reservation.view
        self.reservations[node] = None
        task_transition(TaskStatus.RESERVED, TaskStatus.RUNNING, at=self.now, reason="started")
        task.status = TaskStatus.RUNNING
        task.attempts += 1
        profile = self.profiles[node]
        cost = CHECKPOINT_SNAPSHOT_S
        upload = RESULT_MB * 8.0 / profile.upload_mbps
        interval = self.policy.checkpoint_interval(node, view, cost, self.now)
        resend_chance = min(0.5, 10.0 * profile.loss)
        resends = int(self.rng.geometric(1.0 - resend_chance)) - 1
        admission = reservation.admission
        attempt = Attempt(
            task=task, node=node, start=self.now, speed=profile.effective_speed,
            interval_s=interval, cost_s=cost,
            durable_lag_s=CHECKPOINT_MB * 8.0 / profile.upload_mbps,
            compute_s=view.remaining_work_s / profile.effective_speed, upload_s=upload,
            resends=resends, predicted=None if admission is None else admission.rs,
            attempt_id=len(self.attempts))
        self.running[node] = attempt
        self.attempts[attempt.attempt_id] = attempt
        self.push(self.now + attempt.duration_s, Ev.ATTEMPT_END, attempt.attempt_id)


class FraudSlashing(PlacementObserver):
    """The baselines' staking: a provably wrong result forfeits the task's value from stake.
    They have no abandonment slashing and no collateral (that is what PLS adds)."""

    def verification_failed(self, sim: Simulation, attempt: Attempt) -> None:
        sim.slash(attempt.node, attempt.task.needs.value / TOKEN,
                  false_slash=not sim.profiles[attempt.node].cheater)
