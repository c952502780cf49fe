"""Receiving an uploaded blob (size-limited, hash-checked, recorded; a node's large upload is
timed as its uplink throughput for PLS) and who may download one."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import blobs as blob_db
from orchestrator.domain.errors import Forbidden, Invalid, TooLarge
from orchestrator.services import work
from orchestrator.services.pls import PlsService
from orchestrator.services.verification import Verifier
from orchestrator.storage.blobs import BlobError, BlobStore, BlobTooLarge
from orchestrator.telemetry.metrics import MeshMetrics

MIN_TIMED_UPLOAD_BYTES = 1 << 20  # smaller bodies measure the round trip, not the uplink


async def receive(*, sha256: str, chunks: AsyncIterator[bytes], declared_bytes: int | None,
                  store: BlobStore, max_bytes: int, factory: sessionmaker[Session],
                  pls: PlsService, metrics: MeshMetrics, node_id: str | None,
                  clock: Callable[[], float]) -> int:
    """Store and record the blob; returns its size. A body declared or found over `max_bytes`
    is `TooLarge`, one that does not hash to `sha256` `Invalid`; nothing is kept of either.
    `node_id`: the uploading node, whose uplink a large upload measures (None for a wallet)."""
    if declared_bytes is not None and declared_bytes > max_bytes:
        metrics.upload_errors.labels("blob_too_large").inc()
        raise TooLarge("blob_too_large", f"at most {max_bytes} bytes")
    started = time.perf_counter()
    try:
        size = await store.put_stream(sha256, chunks, max_bytes=max_bytes)
    except BlobError as exc:
        metrics.upload_errors.labels(exc.code).inc()
        kind = TooLarge if isinstance(exc, BlobTooLarge) else Invalid
        raise kind(exc.code, str(exc)) from None
    elapsed = time.perf_counter() - started
    with factory.begin() as session:
        blob_db.add_blob(session, sha256=sha256, size=size, now=clock())
        if node_id is not None and size >= MIN_TIMED_UPLOAD_BYTES and elapsed > 0:
            pls.ingest.record_upload(session, node_id=node_id, mbps=size * 8 / 1e6 / elapsed,
                                     now=clock())
    return size


def check_readable(session: Session, *, sha256: str, node_id: str, store: BlobStore,
                   verifier: Verifier, now: float) -> None:
    """Refuse (`Forbidden`) unless the node holds a lease that reads the blob: an input or
    checkpoint of a task it runs, or an input of a re-check it leases."""
    readable = work.readable_blobs(session, node_id=node_id, read=store.read,
                                   size_of=lambda sha: store.path_of(sha).stat().st_size)
    readable |= verifier.readable_blobs(session, node_id=node_id, now=now)
    if sha256 not in readable:
        raise Forbidden("blob_not_leased",
                        "a node reads only the inputs and checkpoints of tasks it holds")
