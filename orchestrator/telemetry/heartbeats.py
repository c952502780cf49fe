"""Write-behind heartbeat buffer: thousands of heartbeats a second become one DB write
every ~100 ms (last-seen times and lease renewals), instead of one commit each."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import nodes as node_db

log = logging.getLogger("orchestrator.heartbeats")


OnFlush = Callable[[Session, Mapping[str, float]], None]


class HeartbeatBuffer:
    def __init__(self, factory: sessionmaker[Session], *, lease_ttl_s: float,
                 flush_every_s: float, on_flush: OnFlush | None = None) -> None:
        """`on_flush(session, beats)` runs in each flush's transaction (PLS heartbeat gaps)."""
        self.factory = factory
        self.on_flush = on_flush
        self.lease_ttl_s = lease_ttl_s
        self.flush_every_s = flush_every_s
        self._pending: dict[str, float] = {}
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None

    def record(self, node_id: str, at: float) -> None:
        with self._lock:
            self._pending[node_id] = at

    def flush(self) -> int:
        """Write what is buffered; on a DB error the beats go back for the next flush."""
        with self._lock:
            beats, self._pending = self._pending, {}
        if not beats:
            return 0
        try:
            with self.factory.begin() as session:
                node_db.touch_heartbeats(session, beats=beats, lease_ttl_s=self.lease_ttl_s)
                if self.on_flush is not None:
                    self.on_flush(session, beats)
        except Exception:
            log.exception("heartbeat flush failed; retrying next tick")
            with self._lock:
                for node_id, at in beats.items():
                    self._pending[node_id] = max(at, self._pending.get(node_id, at))
            return 0
        return len(beats)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_every_s)
            await asyncio.to_thread(self.flush)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self.flush)
