"""Streamed, size-limited, hash-checked uploads of inputs, checkpoints and results (large ones
are timed, as the node's upload throughput for PLS); downloads for nodes that hold a lease (the
.blend, the checkpoint chunks they resume from)."""

from __future__ import annotations

import re
import time

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from orchestrator.api.deps import CtxDep, NodeDep, SessionDep, UploaderDep
from orchestrator.api.errors import ApiError
from orchestrator.api.schemas import BlobOut
from orchestrator.db import crud
from orchestrator.services import work
from orchestrator.storage.blobs import BlobError, BlobTooLarge

router = APIRouter(tags=["blobs"])
SHA256 = re.compile(r"^[0-9a-f]{64}$")
MIN_TIMED_UPLOAD_BYTES = 1 << 20  # smaller bodies measure the round trip, not the uplink


@router.put("/blobs/{sha256}", response_model=BlobOut,
            summary="Upload a blob under its sha256 (streamed; checked on arrival)")
async def upload(sha256: str, request: Request, uploader: UploaderDep, ctx: CtxDep) -> BlobOut:
    if not SHA256.fullmatch(sha256):
        raise ApiError(422, "invalid_sha256", "the name must be a lowercase hex sha256")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > ctx.settings.max_blob_bytes:
        ctx.metrics.upload_errors.labels("blob_too_large").inc()
        raise ApiError(413, "blob_too_large", f"at most {ctx.settings.max_blob_bytes} bytes")
    started = time.perf_counter()
    try:
        size = await ctx.blobs.put_stream(sha256, request.stream(),
                                          max_bytes=ctx.settings.max_blob_bytes)
    except BlobError as exc:
        ctx.metrics.upload_errors.labels(exc.code).inc()
        raise ApiError(413 if isinstance(exc, BlobTooLarge) else 422, exc.code, str(exc)) from None
    elapsed = time.perf_counter() - started
    with ctx.factory.begin() as session:
        crud.add_blob(session, sha256=sha256, size=size, now=ctx.now())
        if uploader.node_id is not None and size >= MIN_TIMED_UPLOAD_BYTES and elapsed > 0:
            ctx.pls.record_upload(session, node_id=uploader.node_id,
                                  mbps=size * 8 / 1e6 / elapsed, now=ctx.now())
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
    readable = work.readable_blobs(session, node_id=claims.node_id, read=ctx.blobs.read,
                                   size_of=lambda sha: ctx.blobs.path_of(sha).stat().st_size)
    readable |= ctx.verifier.readable_blobs(session, node_id=claims.node_id, now=ctx.now())
    if sha256 not in readable:
        raise ApiError(403, "blob_not_leased",
                       "a node reads only the inputs and checkpoints of tasks it holds")
    return blob_file(ctx, sha256)
