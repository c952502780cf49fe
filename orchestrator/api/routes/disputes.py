"""Disputes as the chain rules them, and the evidence bundles a party or an arbiter reads
(signed: docs/DISPUTES.md says who may read what)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import FileResponse

from orchestrator.api.deps import (
    CtxDep,
    DisputeChainDep,
    NonceAfterValidation,
    SessionDep,
    SignedDep,
)
from orchestrator.api.errors import errors
from orchestrator.api.routes.blobs import blob_file
from orchestrator.api.schemas import SAFE_INT, JobIdPath, Sha256Path
from orchestrator.domain.errors import Forbidden, Missing
from orchestrator.services import disputes

router = APIRouter(tags=["disputes"], route_class=NonceAfterValidation)
DisputeId = Annotated[int, Path(ge=1, lt=SAFE_INT)]
SlashId = Annotated[int, Path(ge=1, lt=SAFE_INT)]


@router.get("/disputes", summary="Disputes: every one for an arbiter, a party's own otherwise "
                                 "(signed)")
def list_disputes(signed: SignedDep, session: SessionDep, chain: DisputeChainDep,
                  open_only: Annotated[bool, Query(alias="open")] = False
                  ) -> list[dict[str, Any]]:
    return disputes.list_disputes(session, reader=signed.address, chain=chain,
                                  open_only=open_only)


@router.get("/disputes/{dispute_id}", responses=errors(Missing, Forbidden),
            summary="One dispute (signed: its parties, arbiters)")
def show_dispute(dispute_id: DisputeId, signed: SignedDep, session: SessionDep,
                 chain: DisputeChainDep) -> dict[str, Any]:
    return disputes.show_dispute(session, dispute_id=dispute_id, reader=signed.address,
                                 chain=chain)


@router.get("/jobs/{job_id}/evidence", responses=errors(Missing, Forbidden),
            summary="A job's evidence bundle: commitments, result proofs, checks, scores, "
                    "render recipes (signed: customer, providers, dispute parties, arbiters)")
def job_evidence(job_id: JobIdPath, signed: SignedDep, session: SessionDep, ctx: CtxDep,
                 chain: DisputeChainDep) -> dict[str, Any]:
    return disputes.job_evidence(session, job_id=job_id, reader=signed.address, chain=chain,
                                 pls=ctx.pls)


@router.get("/jobs/{job_id}/evidence/{sha256}", response_class=FileResponse,
            responses=errors(Missing, Forbidden),
            summary="Download a checkpoint, result or scene named in the job's evidence "
                    "(signed: whoever may read the bundle)")
def evidence_blob(job_id: JobIdPath, sha256: Sha256Path, signed: SignedDep, session: SessionDep,
                  ctx: CtxDep, chain: DisputeChainDep) -> FileResponse:
    disputes.check_evidence_blob(session, job_id=job_id, sha256=sha256, reader=signed.address,
                                 chain=chain, pls=ctx.pls)
    return blob_file(ctx, sha256)


@router.get("/slashes/{slash_id}/evidence", responses=errors(Missing, Forbidden),
            summary="A slash's evidence bundle (signed: the provider, the beneficiary, "
                    "arbiters)")
def slash_evidence(slash_id: SlashId, signed: SignedDep, session: SessionDep, ctx: CtxDep,
                   chain: DisputeChainDep) -> dict[str, Any]:
    return disputes.slash_evidence(session, slash_id=slash_id, reader=signed.address,
                                   chain=chain, pls=ctx.pls)
