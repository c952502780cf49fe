"""Streamed, size-limited, hash-checked uploads of inputs, checkpoints and results (large ones
are timed, as the node's upload throughput for PLS); which of a pack's blobs a customer has
still to upload; downloads for nodes that hold a lease (the .blend and its pack, the checkpoint
chunks they resume from)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from orchestrator.api.deps import (
    CtxDep,
    NodeDep,
    NonceAfterValidation,
    SessionDep,
    SignedDep,
    UploaderDep,
)
from orchestrator.api.errors import ApiError, errors
from orchestrator.api.schemas import BlobOut, LackingIn, LackingOut, Sha256Path
from orchestrator.domain.errors import Forbidden, Invalid, Missing, OverQuota, TooLarge
from orchestrator.services import blobs

router = APIRouter(tags=["blobs"], route_class=NonceAfterValidation)


@router.put("/blobs/{sha256}", response_model=BlobOut,
            responses=errors(TooLarge, Invalid, Forbidden, OverQuota),
            summary="Upload a blob under its sha256 (streamed; checked on arrival)",
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/octet-stream": {"schema": {"type": "string",
                                                        "format": "binary"}}}}})
async def upload(sha256: Sha256Path, request: Request, uploader: UploaderDep,
                 ctx: CtxDep) -> BlobOut:
    declared = request.headers.get("content-length")
    size = await blobs.receive(
        sha256=sha256, chunks=request.stream(),
        declared_bytes=int(declared) if declared is not None and declared.isdigit() else None,
        sender=blobs.Sender(uploader.address, uploader.node_id), store=ctx.blobs,
        limits=ctx.uploads, factory=ctx.factory, pls=ctx.pls, metrics=ctx.metrics,
        clock=ctx.now)
    return BlobOut(sha256=sha256, size=size)


@router.post("/blobs/lacking", response_model=LackingOut,
             summary="Which of these blobs the signing wallet has still to upload before a job "
                     "may name them (signed; a pack asks in batches)")
def lacking(body: LackingIn, signed: SignedDep, session: SessionDep, ctx: CtxDep) -> LackingOut:
    return LackingOut(lacking=blobs.lacking(session, address=signed.address,
                                            hashes=body.sha256s, store=ctx.blobs, now=ctx.now()))


def blob_file(ctx: CtxDep, sha256: str) -> FileResponse:
    """The stored blob as a download (404 when it is not stored)."""
    if not ctx.blobs.exists(sha256):
        raise ApiError(404, "blob_not_found", f"no blob {sha256}")
    return FileResponse(ctx.blobs.path_of(sha256), media_type="application/octet-stream",
                        headers={"x-content-sha256": sha256})


@router.get("/blobs/{sha256}", response_class=FileResponse,
            responses=errors(Missing, Forbidden),
            summary="Download an input or checkpoint of a task this node holds a lease on")
def download(sha256: Sha256Path, claims: NodeDep, session: SessionDep, ctx: CtxDep) -> FileResponse:
    blobs.check_readable(session, sha256=sha256, node_id=claims.node_id,
                         verifier=ctx.verifier, now=ctx.now())
    return blob_file(ctx, sha256)
