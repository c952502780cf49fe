"""Disputes: the evidence bundle a party or an arbiter reads, and the off-chain state that
follows the chain's disputes (docs/DISPUTES.md states the rules).

The chain decides; this module only reflects. `apply_event` takes the Disputes contract's
events (`DisputeOpened`, `DisputeRuled`, `DisputeDefaulted`) from the indexer or from a
sender's own receipt and makes the job, the payout record and the provider follow, once: a
dispute row moves only along `DISPUTE_TRANSITIONS`, so the same event twice has one effect.
The handlers write in the caller's transaction and do not commit (the indexer commits them
with its cursor).

Who reads a bundle: the job's customer, a provider that worked on it, a party of one of its
disputes, and the arbiters (ARBITER_ROLE on chain). A slash's bundle: the slashed provider,
the slash's beneficiary, and the arbiters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from sqlalchemy.orm import Session

from orchestrator.db import disputes as store
from orchestrator.db import jobs as job_db
from orchestrator.db import outbox as outbox_store
from orchestrator.db import statuses as status_db
from orchestrator.db import verification as verification_store
from orchestrator.db.models import DisputeRow, Job
from orchestrator.db.models import SlashRecord as SlashRow
from orchestrator.domain.chain_actions import assignment_tree
from orchestrator.domain.chain_events import ChainEvent
from orchestrator.domain.chain_views import DisputeKind, EscrowStatus, SlashRecord
from orchestrator.domain.errors import Forbidden, Missing, Refused
from orchestrator.domain.ids import JobId, hex0x
from orchestrator.domain.jobs import handed_payload
from orchestrator.domain.lifecycle import DisputeState, JobStatus
from orchestrator.domain.merkle import MerkleTree, assignment_leaf
from orchestrator.domain.types import SlashReason, Tier, show_tokens
from orchestrator.services import settlement
from orchestrator.services.pls import PlsService

log = logging.getLogger("orchestrator.disputes")

CONTRACT = "Disputes"


@runtime_checkable
class DisputeChain(Protocol):
    """What the dispute use cases read on chain (the chain SDK's `MeshChain`)."""

    def slash_of(self, slash_id: int) -> SlashRecord | None: ...

    def is_arbiter(self, address: str) -> bool: ...


# ---------------------------------------------------------------- events from the chain


def apply_event(session: Session, event: ChainEvent, *, chain: DisputeChain, pls: PlsService,
                now: float) -> bool:
    """Reflect one Disputes event; True when it changed something (False: not a dispute
    event, or already applied)."""
    if event.contract != CONTRACT:
        return False
    if event.name == "DisputeOpened":
        return _opened(session, event, chain=chain, now=now)
    if event.name == "DisputeRuled":
        target = DisputeState.GRANTED if event.args["granted"] else DisputeState.DISMISSED
        return _ruled(session, event, target=target, pls=pls, now=now)
    if event.name == "DisputeDefaulted":
        return _ruled(session, event, target=DisputeState.DEFAULTED, pls=pls, now=now)
    return False


def _opened(session: Session, event: ChainEvent, *, chain: DisputeChain, now: float) -> bool:
    args = event.args
    dispute_id = int(args["disputeId"])
    if store.get_dispute(session, dispute_id=dispute_id) is not None:
        return False
    kind = DisputeKind(int(args["kind"]))
    subject = bytes(args["subject"])
    fields: dict[str, Any] = {}
    job_id: str | None = None
    if kind is DisputeKind.SETTLEMENT:
        job_id = hex0x(subject)
        outcome = (f"open: {show_tokens(int(args['frozenAmount']))} tokens of the settlement "
                   f"to {args['respondent']} frozen on the escrow")
    else:
        slash_id = int.from_bytes(subject, "big")
        slash = chain.slash_of(slash_id)
        if slash is None:
            raise Missing("slash_not_found", f"dispute {dispute_id} names slash {slash_id}, "
                                             "which the chain does not know")
        records = store.slash_records(session, slash_id=slash_id, provider=slash.provider,
                                      reason=int(slash.reason), evidence=hex0x(slash.evidence))
        task = next((job_db.get_task(session, task_id=r.task_id) for r in records
                     if r.task_id is not None), None)
        job_id = None if task is None else task.job_id
        fields = {"slash_id": slash_id, "slashed_provider": slash.provider,
                  "slash_evidence": hex0x(slash.evidence), "slash_reason": int(slash.reason),
                  "prior_tier": int(slash.prior_tier)}
        outcome = f"open: slash {slash_id} of {slash.provider} frozen on the StakeManager"
    store.add_dispute(
        session, dispute_id=dispute_id, kind=kind.name.lower(), subject=hex0x(subject),
        job_id=job_id, opener=str(args["opener"]), respondent=str(args["respondent"]),
        bond=int(args["bond"]), frozen_amount=int(args["frozenAmount"]),
        evidence=hex0x(args["evidence"]), ruling_deadline=float(args["rulingDeadline"]),
        opened_tx=hex0x(event.tx_hash), opened_at=now, outcome=outcome, **fields)
    if kind is DisputeKind.SETTLEMENT and job_id is not None:
        _job_disputed(session, job_id=job_id, dispute_id=dispute_id, now=now)
    log.info("dispute %d opened by %s on %s %s", dispute_id, args["opener"], kind.name.lower(),
             hex0x(subject))
    return True


def _job_disputed(session: Session, *, job_id: str, dispute_id: int, now: float) -> None:
    """settled -> disputed. A dispute is proof the escrow is settled, so a job our escrow sync
    has not yet seen settled is marked settled first; a job already disputed stays so."""
    settlement.mark_settled(session, job_id=job_id, escrow=EscrowStatus.SETTLED, now=now,
                            reason=f"settled on chain (dispute {dispute_id} opened on it)")
    job = job_db.lock_job(session, job_id=job_id)
    if job is not None and job.status == JobStatus.SETTLED.value:
        status_db.set_job_status(session, job=job, target=JobStatus.DISPUTED, now=now,
                            reason=f"dispute {dispute_id} opened on chain")


def _ruled(session: Session, event: ChainEvent, *, target: DisputeState, pls: PlsService,
           now: float) -> bool:
    dispute_id = int(event.args["disputeId"])
    row = store.get_dispute(session, dispute_id=dispute_id)
    if row is None:
        raise Missing("dispute_unknown", f"dispute {dispute_id} was ruled but its opening was "
                                         "never applied")
    if row.status == target.value:
        return False
    if row.status != DisputeState.OPEN.value:
        raise Refused("dispute_conflict", f"dispute {dispute_id} is already {row.status}; the "
                                          f"chain now says {target.value}")
    ruling_slash = int(event.args.get("slashId", 0))
    granted = target is DisputeState.GRANTED
    store.set_dispute_status(
        session, row=row, target=target, ruled_tx=hex0x(event.tx_hash), ruled_at=now,
        ruling_slash_id=ruling_slash or None,
        ruling_evidence=hex0x(event.args["evidence"]) if "evidence" in event.args else None,
        outcome=_outcome(row, granted=granted, ruling_slash=ruling_slash, target=target))
    if row.kind == DisputeKind.SLASH.name.lower() and granted:
        _reverse_slash(session, row=row, pls=pls, now=now)
    if row.kind == DisputeKind.SETTLEMENT.name.lower() and row.job_id is not None:
        _job_ruled(session, row=row, now=now)
    log.info("dispute %d %s: %s", dispute_id, target.value, row.outcome)
    return True


def _outcome(row: DisputeRow, *, granted: bool, ruling_slash: int, target: DisputeState
             ) -> str:
    """Where the frozen money and the bond went, as the contract moves them."""
    bond_to = row.opener if granted else row.respondent
    why = "by default (no ruling in time)" if target is DisputeState.DEFAULTED else "by ruling"
    if row.kind == DisputeKind.SETTLEMENT.name.lower():
        money_to = row.opener if granted else row.respondent
        text = (f"{target.value} {why}: {show_tokens(row.frozen_amount)} tokens frozen go to "
                f"{money_to}")
        if ruling_slash:
            text += f"; {row.respondent} slashed (slash {ruling_slash})"
    else:
        text = (f"{target.value} {why}: slash {row.slash_id} "
                + ("reversed, the stake returns to the provider" if granted
                   else "stands and becomes releasable"))
    return f"{text}; the bond of {show_tokens(row.bond)} tokens to {bond_to}"


def _job_ruled(session: Session, *, row: DisputeRow, now: float) -> None:
    """disputed -> settled once no dispute of the job is open any more."""
    assert row.job_id is not None
    open_ones = [d for d in store.disputes_of_job(session, job_id=row.job_id)
                 if d.status == DisputeState.OPEN.value and d.dispute_id != row.dispute_id]
    job = job_db.lock_job(session, job_id=row.job_id)
    if open_ones or job is None or job.status != JobStatus.DISPUTED.value:
        return
    status_db.set_job_status(session, job=job, target=JobStatus.SETTLED, now=now,
                        reason=f"dispute {row.dispute_id} {row.outcome}")


def _reverse_slash(session: Session, *, row: DisputeRow, pls: PlsService, now: float) -> None:
    """A reversed slash undoes what our slash decision did: the record is marked reversed,
    the node gets back the tier the slash took (`PlsStaking.slash_overturned`), and a failed
    verification no longer counts against the provider's record."""
    assert row.slash_id is not None and row.slashed_provider is not None
    assert row.slash_reason is not None and row.slash_evidence is not None
    for record in store.slash_records(session, slash_id=row.slash_id,
                                      provider=row.slashed_provider, reason=row.slash_reason,
                                      evidence=row.slash_evidence):
        if record.reversed_by is not None:
            continue
        record.reversed_by = row.dispute_id
        pls.staking.slash_overturned(session, record=record, key=f"dispute:{row.dispute_id}",
                                     chain_prior=Tier(row.prior_tier or 0), now=now)
        if record.reason == int(SlashReason.FAILED_VERIFICATION):
            _forgive_failure(session, provider=record.provider, now=now)


def _forgive_failure(session: Session, *, provider: str, now: float) -> None:
    verification_store.update_record(
        session, provider=provider, now=now,
        change=lambda held: replace(held, failures=max(held.failures - 1, 0)))


# ---------------------------------------------------------------- reads


def dispute_json(row: DisputeRow) -> dict[str, Any]:
    return {"dispute_id": row.dispute_id, "kind": row.kind, "subject": row.subject,
            "job_id": row.job_id, "slash_id": row.slash_id, "opener": row.opener,
            "respondent": row.respondent, "bond": str(row.bond),
            "frozen_amount": str(row.frozen_amount), "evidence": row.evidence,
            "ruling_deadline": row.ruling_deadline, "status": row.status,
            "opened_tx": row.opened_tx, "opened_at": row.opened_at, "ruled_tx": row.ruled_tx,
            "ruled_at": row.ruled_at, "ruling_slash_id": row.ruling_slash_id,
            "outcome": row.outcome}


def list_disputes(session: Session, *, reader: str, chain: Callable[[], DisputeChain],
                  open_only: bool) -> list[dict[str, Any]]:
    """Every dispute for an arbiter; a party sees those it opened or answers."""
    statuses = [DisputeState.OPEN] if open_only else None
    party = None if chain().is_arbiter(reader) else reader
    return [dispute_json(row) for row in store.list_disputes(session, statuses=statuses,
                                                             party=party)]


def show_dispute(session: Session, *, dispute_id: int, reader: str,
                 chain: Callable[[], DisputeChain]) -> dict[str, Any]:
    row = session_dispute(session, dispute_id=dispute_id)
    if reader not in (row.opener, row.respondent) and not chain().is_arbiter(reader):
        raise Forbidden("dispute_not_yours", "only its parties and the arbiters read a dispute")
    return dispute_json(row)


def session_dispute(session: Session, *, dispute_id: int) -> DisputeRow:
    row = store.get_dispute(session, dispute_id=dispute_id)
    if row is None:
        raise Missing("dispute_not_found", f"no dispute {dispute_id} (or not indexed yet)")
    return row


def job_evidence(session: Session, *, job_id: str, reader: str,
                 chain: Callable[[], DisputeChain], pls: PlsService) -> dict[str, Any]:
    """A job's evidence bundle, for its customer, its providers, its disputes' parties and
    the arbiters."""
    job = job_db.get_job(session, job_id=JobId(job_id))
    if job is None:
        raise Missing("job_not_found", f"no job {job_id}")
    bundle = _job_bundle(session, job, pls)
    readers = {job.customer, *bundle["providers"],
               *(p for d in bundle["disputes"] for p in (d["opener"], d["respondent"]))}
    if reader not in readers and not chain().is_arbiter(reader):
        raise Forbidden("evidence_not_yours", "a job's evidence is for its customer, its "
                                              "providers, its disputes' parties and arbiters")
    return bundle


def check_evidence_blob(session: Session, *, job_id: str, sha256: str, reader: str,
                        chain: Callable[[], DisputeChain], pls: PlsService) -> None:
    """Refuse unless `reader` may read the job's bundle and `sha256` is in it: a checkpoint or
    result, or a task's scene or a file of its pack (what `mesh arbiter reproduce` re-renders
    and compares)."""
    bundle = job_evidence(session, job_id=job_id, reader=reader, chain=chain, pls=pls)
    recipes = [t["recipe"] for t in bundle["tasks"] if t["recipe"] is not None]
    named = {a["sha256"] for a in bundle["artifacts"]} | {
        sha for r in recipes for sha in (r["scene_sha256"], *r["assets"].values())}
    if sha256 not in named:
        raise Missing("blob_not_in_evidence", "no checkpoint, result or scene of this job has "
                                              "that sha256")


def _job_bundle(session: Session, job: Job, pls: PlsService) -> dict[str, Any]:
    checkpoints = store.job_checkpoints(session, job_id=job.id)
    node_ids = sorted({c.node_id for c, _ in checkpoints})
    provider_of = store.providers_of_nodes(session, node_ids=node_ids)
    hashes = sorted({c.sha256 for c, _ in checkpoints})
    tree = MerkleTree.build([bytes.fromhex(h) for h in hashes]) if hashes else None
    artifacts = [{
        "task_id": task.id, "index": task.index, "node_id": c.node_id,
        "provider": provider_of.get(c.node_id), "sha256": c.sha256, "progress": c.progress,
        "is_result": c.is_result, "at": c.created_at,
        "proof": [] if tree is None else [hex0x(p) for p in tree.proof(bytes.fromhex(c.sha256))]}
        for c, task in checkpoints]
    commitments = verification_store.latest_commitments(session, job_id=job.id)
    tasks = []
    for task in job_db.job_tasks(session, job_id=job.id):
        commitment = commitments.get(task.id)
        record = _verification_record(session, task_id=task.id)
        tasks.append({"task_id": task.id, "index": task.index, "status": task.status,
                      "node_id": task.node_id, "result_sha256": task.result_sha256,
                      "recipe": recipe(handed_payload(task.payload, job.spec),
                                       None if commitment is None
                                       else commitment.env),
                      "verification": record})
    providers = sorted({p for p in provider_of.values()})
    epoch_s = pls.state.config.epoch_s
    scores = []
    for provider in providers:
        for epoch, _leaf in store.score_leaves(session, provider=provider,
                                               closed_from=job.created_at,
                                               closed_to=job.updated_at + 2 * epoch_s):
            proof = pls.staking.score_proof(session, provider=provider, epoch=epoch.epoch)
            if proof is not None:
                scores.append({"provider": provider, "epoch": proof.epoch,
                               "root": hex0x(proof.root), "score_bps": proof.score_bps,
                               "telemetry_digest": hex0x(proof.telemetry_digest),
                               "proof": [hex0x(p) for p in proof.proof]})
    return {"kind": "job", "job_id": job.id, "customer": job.customer, "status": job.status,
            "amount": str(job.amount), "spec_hash": job.spec_hash,
            "result_root": job.merkle_root,
            "settlement_tx": store.sent_tx(session, idempotency_key=f"settle:{job.id}"),
            "providers": providers, "artifacts": artifacts, "tasks": tasks, "scores": scores,
            "assignments": _assignments(session, job_id=JobId(job.id).raw,
                                        providers=providers),
            "disputes": [dispute_json(d) for d in store.disputes_of_job(session,
                                                                        job_id=job.id)]}


def _assignments(session: Session, *, job_id: bytes, providers: list[str]
                 ) -> list[dict[str, Any]]:
    """Each provider's newest committed placement on the job with its Merkle proof under the
    root on chain: what `JobEscrow.proveAssignment` takes (anyone may send it) before a dispute
    names the provider as the job's backer. Proving one placement never shields another: each
    is slashable on its own."""
    found = []
    for provider in providers:
        batch = outbox_store.assignment_batch(session, job_id=job_id, provider=provider)
        if batch is None:
            continue
        assign = next(a for a in reversed(batch) if (a.job_id, a.provider) == (job_id, provider))
        proof = assignment_tree(batch).proof(assignment_leaf(
            assign.job_id, assign.provider, assign.placement, assign.collateral))
        found.append({"provider": provider, "placement": str(assign.placement),
                      "collateral": str(assign.collateral),
                      "proof": [hex0x(p) for p in proof]})
    return found


def _verification_record(session: Session, *, task_id: int) -> list[dict[str, Any]]:
    """The task's commitments, checks and failed-verification evidence."""
    return [{"commitment_id": row.id, "node_id": row.node_id, "provider": row.provider,
             "attempt": row.attempt, "status": row.status, "detail": row.detail,
             "root": row.root, "result_sha256": row.result_sha256, "windows": row.windows,
             "env": row.env, "chunks": row.chunks,
             "checks": [{"check_id": c.id, "window": c.window, "role": c.role,
                         "status": c.status, "checker_node": c.checker_node,
                         "comparison": c.comparison} for c in
                        verification_store.checks_of(session, commitment_id=row.id)],
             "evidence": [e.digest for e in
                          verification_store.evidence_of(session, commitment_id=row.id)]}
            for row in verification_store.commitments_of_task(session, task_id=task_id)]


def recipe(payload: dict[str, Any], env: dict[str, Any] | None) -> dict[str, Any] | None:
    """How to reproduce a render task's result from the payload its node was handed
    (`jobs.handed_payload`): the scene (by hash; its Cycles seed is a scene setting, so the
    hash fixes it) and its pack (`assets`, the signed spec's manifest: pack path -> sha256,
    empty for a one-file scene), the Blender build and CPU kernel it was rendered with, the
    frame, the tile and the sample plan. None for other workloads."""
    if payload.get("kind") != "blender":
        return None
    return {"scene_sha256": payload["blend_sha256"],
            "assets": {str(k): str(v) for k, v in (payload.get("assets") or {}).items()},
            "frame": int(payload["frame"]),
            "tile": int(payload.get("tile", 0)), "tiles": int(payload.get("tiles", 1)),
            "samples": payload.get("samples"), "chunk_samples": payload.get("chunk_samples"),
            "resolution": payload.get("resolution"), "format": payload.get("format", "png"),
            "seed": "scene", "blender": None if env is None else env.get("blender"),
            "kernel": None if env is None else env.get("kernel")}


def slash_evidence(session: Session, *, slash_id: int, reader: str,
                   chain: Callable[[], DisputeChain], pls: PlsService) -> dict[str, Any]:
    """A slash's evidence bundle (on-chain slash id), for the slashed provider, the slash's
    beneficiary and the arbiters: the chain's slash, our decisions it carried out, the score
    proof of a low-score slash, the failed verification's stored evidence, and the bundle of
    the job whose task it was about."""
    reading = chain()
    slash = reading.slash_of(slash_id)
    if slash is None:
        raise Missing("slash_not_found", f"no slash {slash_id} on chain")
    if reader not in (slash.provider, slash.beneficiary) and not reading.is_arbiter(reader):
        raise Forbidden("evidence_not_yours", "a slash's evidence is for the slashed provider, "
                                              "its beneficiary and the arbiters")
    evidence = hex0x(slash.evidence)
    records = store.slash_records(session, slash_id=slash_id, provider=slash.provider,
                                  reason=int(slash.reason), evidence=evidence)
    stored = _stored_evidence(session, evidence)
    job = None
    task_ids = [r.task_id for r in records if r.task_id is not None]
    if task_ids:
        task = job_db.get_task(session, task_id=task_ids[0])
        found = None if task is None else job_db.get_job(session, job_id=task.job_id)
        job = None if found is None else _job_bundle(session, found, pls)
    scores = [{"epoch": p.epoch, "root": hex0x(p.root), "score_bps": p.score_bps,
               "telemetry_digest": hex0x(p.telemetry_digest), "proof": [hex0x(x) for x in p.proof]}
              for p in (pls.staking.score_proof(session, provider=slash.provider, epoch=r.epoch)
                        for r in records if r.epoch is not None) if p is not None]
    return {"kind": "slash", "slash_id": slash_id, "provider": slash.provider,
            "reason": slash.reason.name.lower(), "amount": str(slash.amount),
            "finder_amount": str(slash.finder_amount), "beneficiary": slash.beneficiary,
            "status": slash.status.name.lower(), "releasable_at": slash.releasable_at,
            "prior_tier": slash.prior_tier, "evidence": evidence,
            "records": [_slash_json(r) for r in records], "scores": scores,
            "verification_evidence": stored, "job": job,
            "disputes": [dispute_json(d) for d in store.disputes_of_slash(session,
                                                                          slash_id=slash_id)]}


def _stored_evidence(session: Session, digest: str) -> dict[str, Any] | None:
    found = store.verification_evidence(session, digest=digest)
    return None if found is None else dict(found.evidence)


def _slash_json(record: SlashRow) -> dict[str, Any]:
    return {"decision_id": record.slash_id, "node_id": record.node_id,
            "reason": SlashReason(record.reason).name.lower(), "amount": str(record.amount),
            "task_id": record.task_id, "decided_at": record.decided_at, "epoch": record.epoch,
            "detail": record.detail, "reversed_by": record.reversed_by,
            "chain_slash_id": record.chain_slash_id, "slashed_tx": record.chain_tx,
            "released_tx": record.released_tx}
