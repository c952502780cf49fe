"""What a provider's node asks of the orchestrator: registration, login, drain, lease pulls,
the proof of progress after a network cut, and PLS's telemetry, probes and handshake.

Each function is one request's use case: it checks that the node belongs to the caller,
composes `work` and PLS, commits, and returns a plain result; refusals are typed
(`Missing`, `Forbidden`, `Invalid`, `WorkError`) and the API gives them their status.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import pls as store
from orchestrator.db import session as db_session
from orchestrator.db.models import Node, PopwVerdictRecord
from orchestrator.domain.errors import Forbidden, Invalid, Missing, Unavailable, Unfunded
from orchestrator.domain.failure_detector import PhiAccrualDetector
from orchestrator.domain.ids import unhex
from orchestrator.domain.jobs import handed_payload
from orchestrator.domain.popw import Challenge, PopwAnswer, PopwVerdict
from orchestrator.domain.reliability import GpuSample, RsComponents
from orchestrator.domain.types import NodeSpec
from orchestrator.services import work
from orchestrator.services.placement import PlacementPass
from orchestrator.services.pls import PlsService
from orchestrator.services.pls_continuity import ProgressOutcome, ShownChunk
from orchestrator.services.pls_state import StakeUnavailable
from orchestrator.telemetry.metrics import MeshMetrics


def owned_node(session: Session, *, node_id: str, address: str) -> Node:
    """The node, if it exists and belongs to `address` (the signer or the session's owner)."""
    node = node_db.get_node(session, node_id=node_id)
    if node is None:
        raise Missing("node_not_found", f"no node {node_id}")
    if node.provider != address:
        raise Forbidden("node_not_owned", "this node belongs to another provider")
    return node


def register(session: Session, *, spec: NodeSpec, pls: PlsService,
             detector: PhiAccrualDetector, stake_per_node: int, now: float) -> Node:
    """Register or update the node; registering counts as its first sign of life. A new node
    counts only if its provider's bonded stake backs `stake_per_node` for each of its nodes
    (0: no stake needed), so fresh wallets cannot fill the grid with nodes."""
    existing = node_db.get_node(session, node_id=spec.node_id)
    if existing is not None and existing.provider != spec.provider:
        raise Forbidden("node_not_owned", "this node id belongs to another provider")
    if existing is None and stake_per_node > 0:
        _require_stake(session, pls=pls, provider=spec.provider, per_node=stake_per_node,
                       now=now)
    node = node_db.register_node(session, spec=spec, now=now)
    pls.ingest.node_registered(session, node=node, now=now)
    db_session.commit_or_conflict(session)
    detector.heartbeat(node.id, now)
    return node


def _require_stake(session: Session, *, pls: PlsService, provider: str, per_node: int,
                   now: float) -> None:
    needed = per_node * (node_db.provider_node_count(session, provider=provider) + 1)
    try:
        bonded = pls.state.stake.stake(provider, now).bonded
    except StakeUnavailable as exc:
        raise Unavailable("chain_unavailable", f"{exc}; try again shortly") from None
    if bonded < needed:
        raise Unfunded("stake_required", f"provider {provider} has {bonded} bonded; another "
                       f"node needs {needed}: stake more (mesh provider stake), then register")


def login(session: Session, *, node_id: str, address: str, session_key: str | None,
          pls: PlsService, reservation_ttl_s: float, metrics: MeshMetrics,
          now: float) -> None:
    """Check the signer owns the node and bind the login's session key (when one is sent):
    only that key can later show progress made through a network cut. A key other than the
    bound one is a new agent process (the key never leaves its process): the old one's
    session ends if no DEAD verdict ended it (`PlsIngest.process_restarted`), and the new one
    takes back the node's started leases (`work.take_back_leases`)."""
    node = owned_node(session, node_id=node_id, address=address)
    if session_key is None:
        return
    before = node.session_key
    pls.ingest.session_bound(session, node=node, session_key=session_key)
    released = 0
    if before is not None and node.session_key != before:
        pls.ingest.process_restarted(session, node=node, now=now)
    if node.session_key != before:
        released = len(work.take_back_leases(session, node=node, now=now,
                                             reservation_ttl_s=reservation_ttl_s).released)
    session.commit()
    metrics.retries.labels("restart").inc(released)


def drain(session: Session, *, node_id: str, address: str, detector: PhiAccrualDetector,
          metrics: MeshMetrics, now: float) -> Node:
    """Graceful drain: no new leases, unstarted reservations go back at once."""
    node = owned_node(session, node_id=node_id, address=address)
    released = work.drain_node(session, node=node, now=now)
    session.commit()
    detector.drain(node_id)
    metrics.retries.labels("drain").inc(released)
    return node


def show_progress(session: Session, *, node_id: str, address: str, pls: PlsService,
                  task_id: int, chunks: Sequence[ShownChunk], resumed_at: float,
                  signature: bytes, now: float) -> ProgressOutcome:
    """Judge the chunks a node rendered through a network cut (the verdict is stored either
    way; the caller refuses a failed one)."""
    node = owned_node(session, node_id=node_id, address=address)
    outcome = pls.continuity.show_progress(session, node=node, task_id=task_id, chunks=chunks,
                                           resumed_at=resumed_at, signature=signature, now=now)
    session.commit()
    return outcome


@dataclass(frozen=True, slots=True)
class PulledLease:
    """A lease handed to a node, with what it needs to run or resume the task."""

    lease_id: int
    task_id: int
    job_id: str
    slot: int
    expires_at: float
    payload: dict[str, Any]
    resume_from_sha256: str | None
    resume_progress: float
    checkpoint_interval_s: float


def pull_lease(session: Session, *, node_id: str, address: str, pls: PlsService,
               placement: PlacementPass, clock: Callable[[], float]) -> PulledLease | None:
    """The node's next lease, or None when there is no work for it right now. A node with no
    reservation waiting is idle: its pull may run the placement pass (`PlacementPass.idle_pull`;
    it may place a task on a better node instead) before it looks again."""
    owned_node(session, node_id=node_id, address=address)
    grant = work.pull_lease(session, node_id=node_id, pls=pls, now=clock())
    if grant is None:
        placement.idle_pull(session, node_id=node_id)
        grant = work.pull_lease(session, node_id=node_id, pls=pls, now=clock())
    if grant is None:
        session.commit()
        return None
    lease, task = grant.lease, grant.task
    job = job_db.get_job(session, job_id=task.job_id)
    pulled = PulledLease(lease_id=lease.id, task_id=task.id, job_id=task.job_id,
                         slot=lease.slot, expires_at=lease.expires_at,
                         payload=handed_payload(task.payload, {} if job is None else job.spec),
                         resume_from_sha256=task.checkpoint_sha256,
                         resume_progress=task.checkpoint_progress,
                         checkpoint_interval_s=grant.checkpoint_interval_s)
    session.commit()
    return pulled


# ---------------------------------------------------------------- PLS: telemetry and probes


def record_gpu(session: Session, *, node_id: str, pls: PlsService,
               samples: Sequence[GpuSample], extras: Sequence[Mapping[str, float]],
               now: float) -> None:
    try:
        pls.ingest.record_gpu(session, node_id=node_id, samples=samples, now=now, extras=extras)
    except ValueError as exc:
        raise Invalid("sample_out_of_range", str(exc)) from None
    session.commit()


def issue_probe(session: Session, *, node_id: str, pls: PlsService,
                clock: Callable[[], float]) -> tuple[bytes, float]:
    """A fresh probe nonce and the time its round trip is timed from
    (`PlsIngest.issue_probe`)."""
    issued = pls.ingest.issue_probe(session, node_id=node_id, clock=clock)
    session.commit()
    return issued


def echo_probe(session: Session, *, node_id: str, pls: PlsService, nonce: str,
               now: float) -> float:
    """The probe's round trip in ms. Probes found overdue meanwhile are recorded as lost,
    whether or not this one is known."""
    try:
        rtt = pls.ingest.echo_probe(session, node_id=node_id, nonce=unhex(nonce), now=now)
    except KeyError:
        session.commit()
        raise Missing("probe_unknown", "no such probe pending (expired or never sent)"
                      ) from None
    session.commit()
    return rtt


# ---------------------------------------------------------------- PLS: the PoPW handshake


def issue_challenge(session: Session, *, node_id: str, address: str, pls: PlsService,
                    gpu_class: str, now: float) -> Challenge:
    owned_node(session, node_id=node_id, address=address)
    try:
        issued = pls.handshake.issue_challenge(session, node_id=node_id, gpu_class=gpu_class,
                                               now=now)
    except ValueError as exc:
        raise Invalid("popw_unknown_gpu_class", str(exc)) from None
    session.commit()
    return issued


def judge_answer(session: Session, *, node_id: str, pls: PlsService, nonce: str,
                 answer_b64: str, signer: str | None, gpu_under_load: Sequence[GpuSample],
                 now: float) -> PopwVerdict:
    """The handshake's verdict (stored, passed or not). `signer`: the address whose signature
    over the answer verified, or None; only the node's provider's counts."""
    node = node_db.get_node(session, node_id=node_id)
    if node is None:
        raise Missing("node_not_found", f"no node {node_id}")
    try:
        proof = PopwAnswer.from_bytes(base64.b64decode(answer_b64, validate=True))
    except (ValueError, binascii.Error) as exc:  # nothing judged: the challenge stays open
        raise Invalid("popw_malformed_answer", f"answer does not parse: {exc}") from None
    verdict = pls.handshake.judge_answer(
        session, node_id=node_id, nonce=unhex(nonce), answer=proof,
        signature_valid=signer is not None and signer == node.provider,
        gpu_under_load=gpu_under_load, now=now)
    session.commit()
    return verdict


def latest_verdict(session: Session, *, node_id: str) -> PopwVerdictRecord:
    record = store.latest_verdict(session, node_id=node_id)
    if record is None:
        raise Missing("popw_none", f"node {node_id} has no handshake verdict")
    return record


@dataclass(frozen=True, slots=True)
class NodeListing:
    """A node as `mesh nodes` shows it: its spec, state, usable tier and RS for an hour."""

    spec: NodeSpec
    health: str
    draining: bool
    last_heartbeat_at: float | None
    tier: int
    rs: float | None  # None: no observation yet


def listing(session: Session, *, pls: PlsService, now: float, provider: str | None = None
            ) -> list[NodeListing]:
    found = []
    for node in node_db.all_nodes(session):
        if provider is not None and node.provider != provider:
            continue
        spec = node_db.node_spec(node)
        parts = pls.placement.components(node.id, now, 3600.0)
        found.append(NodeListing(spec=spec, health=node.health, draining=node.draining,
                                 last_heartbeat_at=node.last_heartbeat_at,
                                 tier=int(pls.placement.effective_spec(spec, now).tier),
                                 rs=None if parts is None else parts.calibrated))
    return sorted(found, key=lambda n: n.spec.node_id)


@dataclass(frozen=True, slots=True)
class NodeScore:
    parts: RsComponents
    tier: int  # the tier the node may take work at now


def node_score(session: Session, *, node_id: str, pls: PlsService, duration_s: float,
               now: float) -> NodeScore:
    node = node_db.get_node(session, node_id=node_id)
    parts = pls.placement.components(node_id, now, duration_s) if node is not None else None
    if node is None or parts is None:
        raise Missing("node_not_found", f"no node {node_id}")
    tier = pls.placement.effective_spec(node_db.node_spec(node), now).tier
    return NodeScore(parts, int(tier))
