"""Streamed, size-limited, hash-checked uploads of inputs, checkpoints and results (large ones
are timed, as the node's upload throughput for PLS); downloads for nodes that hold a lease (the
.blend, the checkpoint chunks they resume from)."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from orchestrator.api.deps import CtxDep, NodeDep, SessionDep, UploaderDep
from orchestrator.api.errors import ApiError
from orchestrator.api.schemas import BlobOut
from orchestrator.services import blobs

router = APIRouter(tags=["blobs"])
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@router.put("/blobs/{sha256}", response_model=BlobOut,
            summary="Upload a blob under its sha256 (streamed; checked on arrival)")
async def upload(sha256: str, request: Request, uploader: UploaderDep, ctx: CtxDep) -> BlobOut:
    if not SHA256.fullmatch(sha256):
        raise ApiError(422, "invalid_sha256", "the name must be a lowercase hex sha256")
    declared = request.headers.get("content-length")
    size = await blobs.receive(
        sha256=sha256, chunks=request.stream(),
        declared_bytes=int(declared) if declared is not None and declared.isdigit() else None,
        store=ctx.blobs, max_bytes=ctx.settings.max_blob_bytes, factory=ctx.factory,
        pls=ctx.pls, metrics=ctx.metrics, node_id=uploader.node_id, clock=ctx.now)
    return BlobOut(sha256=sha256, size=size)


def blob_file(ctx: CtxDep, sha256: str) -> FileResponse:
    """The stored blob as a download (404 when it is not stored)."""
    if not SHA256.fullmatch(sha256):
        raise ApiError(422, "invalid_sha256", "the name must be a lowercase hex sha256")
    if not ctx.blobs.exists(sha256):
        raise ApiError(404, "blob_not_found", f"no blob {sha256}")
    return FileResponse(ctx.blobs.path_of(sha256), media_type="application/octet-stream",
                        headers={"x-content-sha256": sha256})


@router.get("/blobs/{sha256}", response_class=FileResponse,
            summary="Download an input or checkpoint of a task this node holds a lease on")
def download(sha256: str, claims: NodeDep, session: SessionDep, ctx: CtxDep) -> FileResponse:
    blobs.check_readable(session, sha256=sha256, node_id=claims.node_id, store=ctx.blobs,
                         verifier=ctx.verifier, now=ctx.now())
    return blob_file(ctx, sha256)
