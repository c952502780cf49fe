"""Content-addressed blob store under `data_dir/blobs/ab/abcdef...`.

An upload streams to a temporary file while it is hashed and counted, so an oversized
or corrupted upload is refused without ever landing under its claimed name, and a
blob's name is always the sha256 of its bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

COPY_CHUNK = 1 << 20


class BlobError(Exception):
    code = "blob_error"


class BlobTooLarge(BlobError):
    code = "blob_too_large"


class BlobHashMismatch(BlobError):
    code = "blob_hash_mismatch"


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def path_of(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_of(sha256).is_file()

    async def put_stream(self, expected_sha256: str, chunks: AsyncIterator[bytes], *,
                         max_bytes: int) -> int:
        """Store the stream if it hashes to `expected_sha256`; returns its size."""
        digest = hashlib.sha256()
        size = 0
        fd, temp_name = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as temp:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise BlobTooLarge(f"upload exceeds {max_bytes} bytes")
                    digest.update(chunk)
                    temp.write(chunk)
            self._land(temp_name, expected_sha256, digest.hexdigest())
            return size
        finally:
            if os.path.exists(temp_name):
                os.unlink(temp_name)

    def read(self, sha256: str) -> bytes:
        return self.path_of(sha256).read_bytes()

    def delete(self, sha256: str) -> None:
        """Remove the blob (nothing when it is not stored)."""
        self.path_of(sha256).unlink(missing_ok=True)

    def copy_to(self, target: BlobStore, sha256s: Iterable[str]) -> BlobCopy:
        """Copy the blobs named `sha256s` that `target` lacks (each hashed on the way, so a
        damaged one is not copied): an incremental backup, or a restore of one."""
        copied, present, missing = 0, 0, []
        for sha256 in sorted(set(sha256s)):
            if target.exists(sha256):
                present += 1
                continue
            if not self.exists(sha256) or not target._copy_in(self.path_of(sha256), sha256):
                missing.append(sha256)
                continue
            copied += 1
        return BlobCopy(copied, present, tuple(missing))

    def _copy_in(self, source: Path, sha256: str) -> bool:
        """`source` stored under its name if it hashes to it; False if it does not."""
        digest = hashlib.sha256()
        fd, temp_name = tempfile.mkstemp(dir=self.root, prefix=".copy-")
        try:
            with os.fdopen(fd, "wb") as temp, source.open("rb") as data:
                while block := data.read(COPY_CHUNK):
                    digest.update(block)
                    temp.write(block)
            self._land(temp_name, sha256, digest.hexdigest())
            return True
        except BlobHashMismatch:
            return False
        finally:
            if os.path.exists(temp_name):
                os.unlink(temp_name)

    def _land(self, temp_name: str, expected_sha256: str, actual_sha256: str) -> None:
        if actual_sha256 != expected_sha256:
            raise BlobHashMismatch(f"content hashes to {actual_sha256}, not {expected_sha256}")
        final = self.path_of(expected_sha256)
        final.parent.mkdir(exist_ok=True)
        os.replace(temp_name, final)  # atomic: readers see all of the blob or none


@dataclass(frozen=True, slots=True)
class BlobCopy:
    copied: int
    present: int  # already in the target
    missing: tuple[str, ...]  # in neither store, or damaged in the source

    def summary(self) -> str:
        text = f"blobs: {self.copied} copied, {self.present} already there"
        if self.missing:
            text += (f", {len(self.missing)} missing (listed by the database, found in neither "
                     f"place intact: {', '.join(m[:12] for m in self.missing[:5])}"
                     f"{' ...' if len(self.missing) > 5 else ''})")
        return text
