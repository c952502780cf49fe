"""Content-addressed blob store under `data_dir/blobs/ab/abcdef...`.

An upload streams to a temporary file while it is hashed and counted, so an oversized
or corrupted upload is refused without ever landing under its claimed name, and a
blob's name is always the sha256 of its bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path


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
            if digest.hexdigest() != expected_sha256:
                raise BlobHashMismatch(
                    f"content hashes to {digest.hexdigest()}, not {expected_sha256}")
            final = self.path_of(expected_sha256)
            final.parent.mkdir(exist_ok=True)
            os.replace(temp_name, final)  # atomic: readers see all of the blob or none
            return size
        finally:
            if os.path.exists(temp_name):
                os.unlink(temp_name)

    def read(self, sha256: str) -> bytes:
        return self.path_of(sha256).read_bytes()
