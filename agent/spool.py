"""Finished results kept on disk until the orchestrator acknowledges them, across restarts.

A result is written (file, then its record, each by atomic rename) before it is uploaded, and
removed only after `complete` answered. A restarted agent finds what is left and sends it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Pending:
    task_id: int
    lease_id: int
    sha256: str
    name: str  # the file under the spool dir


class Spool:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def _record(self, task_id: int) -> Path:
        return self.root / f"task-{task_id}.json"

    def keep(self, *, task_id: int, lease_id: int, sha256: str, source: Path) -> Pending:
        name = f"{sha256}{source.suffix}"
        target = self.root / name
        partial = self.root / f".{name}.partial"
        shutil.copyfile(source, partial)
        os.replace(partial, target)
        pending = Pending(task_id=task_id, lease_id=lease_id, sha256=sha256, name=name)
        record = self._record(task_id)
        partial_record = record.with_suffix(".partial")
        partial_record.write_text(json.dumps(asdict(pending)))
        os.replace(partial_record, record)
        return pending

    def pending(self) -> list[Pending]:
        found = []
        for record in sorted(self.root.glob("task-*.json")):
            pending = Pending(**json.loads(record.read_text()))
            if (self.root / pending.name).is_file():
                found.append(pending)
        return found

    def path(self, pending: Pending) -> Path:
        return self.root / pending.name

    def acknowledged(self, pending: Pending) -> None:
        self._record(pending.task_id).unlink(missing_ok=True)
        if not any(p.name == pending.name for p in self.pending()):
            (self.root / pending.name).unlink(missing_ok=True)
