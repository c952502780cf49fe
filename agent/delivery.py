"""Results on their way to the orchestrator: a finished result goes to the spool first (with
the chunk files not uploaded yet) and leaves it only when the orchestrator has acknowledged
it, or refused it for good; a restarted agent delivers what an earlier one left there."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent.connection import Connection
from agent.spool import Pending, Spool
from protocol.client import ApiCallError, sha256_file

log = logging.getLogger("mesh.agent")


class Delivery:
    """Results of this node, kept in `spool`, sent on `connection`; `tasks_done` counts the
    acknowledged ones."""

    def __init__(self, connection: Connection, spool: Spool) -> None:
        self.connection = connection
        self.spool = spool
        self.tasks_done = 0

    def finish(self, lease: dict[str, Any], result: Path, *, render: dict[str, Any] | None = None,
               parts: list[tuple[str, Path]] | None = None) -> None:
        """Spool the result (with the chunk files not uploaded yet), then deliver it."""
        sha = sha256_file(result)
        pending = self.spool.keep(task_id=int(lease["task_id"]), lease_id=int(lease["lease_id"]),
                                  sha256=sha, source=result, render=render, parts=parts or [])
        log.info("task %s: result %s kept in the spool", pending.task_id, sha[:12])
        self.deliver(pending)

    def deliver(self, pending: Pending) -> None:
        try:
            for part in pending.parts:
                self.connection.upload(self.spool.root / part, part.split(".")[0])
            self.connection.upload(self.spool.path(pending), pending.sha256)
            body: dict[str, Any] = {"result_sha256": pending.sha256}
            if pending.render is not None:
                body["render"] = pending.render
            self.connection.call("complete", "POST", f"/v1/tasks/{pending.task_id}/complete",
                                 json=body)
        except ApiCallError as exc:
            if exc.status not in (404, 409):
                raise
            log.warning("task %s: result %s refused (%s); dropped from the spool",
                        pending.task_id, pending.sha256[:12], exc.code)
        else:
            self.tasks_done += 1
            log.info("task %s: result %s acknowledged", pending.task_id, pending.sha256[:12])
        self.spool.acknowledged(pending)

    def deliver_spooled(self) -> None:
        for pending in self.spool.pending():
            log.info("task %s: delivering spooled result %s", pending.task_id,
                     pending.sha256[:12])
            self.deliver(pending)
