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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Pending:
    task_id: int
    lease_id: int
    sha256: str
    name: str  # the file under the spool dir
    render: dict[str, Any] | None = None  # build, kernel and chunks, sent with `complete`
    parts: list[str] = field(default_factory=list)  # files under the spool dir to upload first


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

    def keep(self, *, task_id: int, lease_id: int, sha256: str, source: Path,
             render: dict[str, Any] | None = None,
             parts: Sequence[tuple[str, Path]] = ()) -> Pending:
        """Keep the result (and `parts`: (sha256, file) of chunks not uploaded yet) until
        `acknowledged`; every file is named by its sha256."""
        name = self._copy(source, f"{sha256}{source.suffix}")
        names = [self._copy(path, f"{sha}{path.suffix}") for sha, path in parts]
        pending = Pending(task_id=task_id, lease_id=lease_id, sha256=sha256, name=name,
                          render=render, parts=names)
        record = self._record(task_id)
        partial_record = record.with_suffix(".partial")
        partial_record.write_text(json.dumps(asdict(pending)))
        os.replace(partial_record, record)
        return pending

    def _copy(self, source: Path, name: str) -> str:
        partial = self.root / f".{name}.partial"
        shutil.copyfile(source, partial)
        os.replace(partial, self.root / name)
        return name

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
        still = {name for p in self.pending() for name in (p.name, *p.parts)}
        for name in {pending.name, *pending.parts} - still:
            (self.root / name).unlink(missing_ok=True)

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
