"""Finished results kept on disk until the orchestrator acknowledges them, across restarts;
and the chunks rendered while the orchestrator could not be reached, until they are shown.

A result is written (file, then its record, each by atomic rename) before it is uploaded, and
removed only after `complete` answered. A restarted agent finds what is left and sends it.
A chunk whose checkpoint could not be sent (a network cut) is kept under `offline/` with
when it was rendered: on reconnect the agent shows them, signed with its session key, as
the proof that its process rendered on through the silence (`POST /v1/nodes/{id}/progress`).
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


@dataclass(frozen=True, slots=True)
class OfflineChunk:
    task_id: int
    sha256: str
    offset: int
    length: int
    rendered_at: float  # unix seconds


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

    # ----- chunks rendered offline ----------------------------------------------------------
    @property
    def _offline(self) -> Path:
        return self.root / "offline"

    def keep_offline(self, chunk: OfflineChunk, source: Path) -> None:
        self._offline.mkdir(exist_ok=True)
        target = self._offline / f"{chunk.sha256}.exr"
        partial = self._offline / f".{chunk.sha256}.partial"
        shutil.copyfile(source, partial)
        os.replace(partial, target)
        record = self._offline / f"{chunk.sha256}.json"
        partial.write_text(json.dumps(asdict(chunk)))
        os.replace(partial, record)

    def offline(self) -> list[tuple[OfflineChunk, Path]]:
        """Chunks rendered offline, oldest first, with their files."""
        if not self._offline.is_dir():
            return []
        found = []
        for record in self._offline.glob("*.json"):
            chunk = OfflineChunk(**json.loads(record.read_text()))
            path = self._offline / f"{chunk.sha256}.exr"
            if path.is_file():
                found.append((chunk, path))
        return sorted(found, key=lambda item: item[0].rendered_at)

    def shown(self, chunks: list[OfflineChunk]) -> None:
        for chunk in chunks:
            (self._offline / f"{chunk.sha256}.json").unlink(missing_ok=True)
            (self._offline / f"{chunk.sha256}.exr").unlink(missing_ok=True)
