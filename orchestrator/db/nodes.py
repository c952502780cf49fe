"""Providers and their nodes: registration, health, drains, heartbeats."""

from __future__ import annotations

from collections.abc import Sequence

from eth_utils import to_checksum_address
from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from orchestrator.db.models import (
    Lease,
    Node,
    Provider,
)
from orchestrator.db.statuses import record_change
from orchestrator.domain.lifecycle import (
    LeaseState,
    NodeDrain,
    node_drain_transition,
    node_health_transition,
)
from orchestrator.domain.types import NodeHealth, NodeSpec, Tier


def register_node(session: Session, *, spec: NodeSpec, now: float) -> Node:
    """Create the node (and its provider on first sight); re-registering updates the spec."""
    if session.get(Provider, spec.provider) is None:
        session.add(Provider(address=spec.provider, created_at=now))
        session.flush()
    node = session.get(Node, spec.node_id)
    if node is None:
        # The tier is set once: re-registering must not undo a demotion.
        node = Node(id=spec.node_id, registered_at=now, draining=False,
                    health=NodeHealth.ALIVE.value, tier=int(spec.tier))
        session.add(node)
    node.provider = spec.provider
    node.gpu_model = spec.gpu_model
    node.vram_gb = spec.vram_gb
    node.compute_capability = spec.compute_capability
    node.region = spec.region
    node.price_per_gpu_hour = spec.price_per_gpu_hour
    node.slots = spec.slots
    node.last_heartbeat_at = now
    session.flush()
    return node


def node_spec(node: Node) -> NodeSpec:
    return NodeSpec(node_id=node.id, provider=node.provider, gpu_model=node.gpu_model,
                    vram_gb=node.vram_gb, compute_capability=node.compute_capability,
                    region=node.region, price_per_gpu_hour=node.price_per_gpu_hour,
                    slots=node.slots, tier=Tier(node.tier))


def get_node(session: Session, *, node_id: str) -> Node | None:
    return session.get(Node, node_id)


def all_nodes(session: Session) -> list[Node]:
    return list(session.scalars(select(Node)))


def bind_session_key(session: Session, *, node: Node, session_key: str) -> None:
    """Record the session key a node's login named (checksummed, as signers recover)."""
    node.session_key = to_checksum_address(session_key)
    session.flush()


def set_node_health(session: Session, *, node: Node, health: NodeHealth, now: float,
                    reason: str) -> None:
    """Move the node's health along `NODE_HEALTH_TRANSITIONS` (the same verdict is no move)."""
    if node.health == health.value:
        return
    change = node_health_transition(NodeHealth(node.health), health, at=now, reason=reason)
    record_change(session, entity_id=node.id, change=change)
    node.health = health.value


def start_drain(session: Session, *, node: Node, now: float, reason: str) -> bool:
    """accepting -> draining (`NODE_DRAIN_TRANSITIONS`); False when it already drains."""
    if node.draining:
        return False
    record_change(session, entity_id=node.id, change=node_drain_transition(
        NodeDrain.ACCEPTING, NodeDrain.DRAINING, at=now, reason=reason))
    node.draining = True
    return True


def touch_heartbeats(session: Session, *, beats: dict[str, float], lease_ttl_s: float) -> None:
    """Apply a batch of heartbeats: last-seen times and lease renewals in one transaction."""
    if not beats:
        return
    session.execute(update(Node), [{"id": node_id, "last_heartbeat_at": at}
                                   for node_id, at in beats.items()])
    latest = max(beats.values())
    # Only started leases are renewed: a reservation the node never starts must lapse even
    # while the node keeps beating, or a failed start would hold the slot forever.
    session.execute(update(Lease).where(Lease.node_id.in_(list(beats)),
                                        Lease.released_at.is_(None),
                                        Lease.state == LeaseState.ACTIVE.value)
                    .values(expires_at=latest + lease_ttl_s))


def bulk_register_nodes(session: Session, *, specs: Sequence[NodeSpec], now: float) -> None:
    """Insert many new nodes at once (fleet import, benchmarks, simulation)."""
    providers = sorted({s.provider for s in specs})
    known = set(session.scalars(select(Provider.address).where(Provider.address.in_(providers))))
    new = [{"address": p, "created_at": now} for p in providers if p not in known]
    if new:
        session.execute(insert(Provider), new)
    session.execute(insert(Node), [
        {"id": s.node_id, "provider": s.provider, "gpu_model": s.gpu_model, "vram_gb": s.vram_gb,
         "compute_capability": s.compute_capability, "region": s.region,
         "price_per_gpu_hour": s.price_per_gpu_hour, "slots": s.slots, "tier": int(s.tier),
         "health": NodeHealth.ALIVE.value, "draining": False, "registered_at": now,
         "last_heartbeat_at": now} for s in specs])


def provider_node_count(session: Session, *, provider: str) -> int:
    return int(session.scalar(select(func.count()).select_from(Node)
                              .where(Node.provider == provider)) or 0)


def nodes_seen_since(session: Session, *, since: float) -> int:
    return int(session.scalar(select(func.count()).select_from(Node)
                              .where(Node.last_heartbeat_at >= since)) or 0)
