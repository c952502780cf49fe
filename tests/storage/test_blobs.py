"""The content-addressed blob store: a blob lands under the sha256 of its bytes or not at all
(too large, or not the bytes it was named for), leaving no temporary file behind; backups and
restores copy only what the target lacks and never a damaged blob."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest

from orchestrator.storage.blobs import (
    COPY_CHUNK,
    BlobCopy,
    BlobError,
    BlobHashMismatch,
    BlobStore,
    BlobTooLarge,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def stream(chunks: Sequence[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def put(store: BlobStore, name: str, chunks: Sequence[bytes], max_bytes: int = 1000) -> int:
    return asyncio.run(store.put_stream(name, stream(chunks), max_bytes=max_bytes))


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_an_upload_lands_under_its_hash_in_a_folder_of_its_first_two_digits(
        tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = b"frame 1 tile 0"

    assert put(store, sha(data), [data[:5], data[5:]]) == len(data)

    assert store.exists(sha(data)) and store.read(sha(data)) == data
    assert store.path_of(sha(data)) == tmp_path / "blobs" / sha(data)[:2] / sha(data)
    assert files_under(tmp_path / "blobs") == [f"{sha(data)[:2]}/{sha(data)}"]


def test_a_store_in_a_folder_not_made_yet_makes_it(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "fresh" / "data" / "blobs")
    data = b"first blob of a new grid"

    put(store, sha(data), [data])

    assert store.read(sha(data)) == data


def test_blobs_sharing_their_first_two_digits_share_a_folder(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    first = b"blob 0"
    second = next(data for i in range(1, 10_000) if sha(data := b"blob %d" % i)[:2]
                  == sha(first)[:2])

    put(store, sha(first), [first])
    put(store, sha(second), [second])

    assert store.read(sha(first)) == first and store.read(sha(second)) == second


@pytest.fixture
def other_filesystem_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The system's temporary folder put on another filesystem than the store's (tmpfs)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on a filesystem of its own")
    temp = Path(tempfile.mkdtemp(dir=shm))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    yield temp
    shutil.rmtree(temp, ignore_errors=True)


def test_an_upload_in_progress_is_a_hidden_file_in_the_stores_own_folder(
        tmp_path: Path, other_filesystem_temp: Path) -> None:
    """Written beside the blobs, so landing it is an atomic rename on one filesystem, and
    never under a blob's name: a half-written upload is never read as a blob."""
    store = BlobStore(tmp_path)
    data = b"a scene, streamed"
    seen: list[list[str]] = []

    async def watched() -> AsyncIterator[bytes]:
        yield data[:4]
        seen.append(files_under(tmp_path))
        yield data[4:]

    assert asyncio.run(store.put_stream(sha(data), watched(), max_bytes=100)) == len(data)
    (during,) = seen
    assert len(during) == 1 and during[0].startswith(".") and "/" not in during[0]
    assert files_under(tmp_path) == [f"{sha(data)[:2]}/{sha(data)}"]
    assert list(other_filesystem_temp.iterdir()) == []


def test_a_backup_on_another_filesystem_than_the_temporary_folder_is_written(
        tmp_path: Path, other_filesystem_temp: Path) -> None:
    source, target = BlobStore(tmp_path / "live"), BlobStore(tmp_path / "backup")
    data = b"to back up"
    put(source, sha(data), [data])

    assert source.copy_to(target, [sha(data)]) == BlobCopy(1, 0, ())
    assert files_under(tmp_path / "backup") == [f"{sha(data)[:2]}/{sha(data)}"]


def test_bytes_that_are_not_the_named_blob_are_refused_and_leave_nothing(
        tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    claimed = sha(b"the scene")

    with pytest.raises(BlobHashMismatch) as refused:
        put(store, claimed, [b"something else"])

    assert refused.value.code == "blob_hash_mismatch"
    assert str(refused.value) == f"content hashes to {sha(b'something else')}, not {claimed}"
    assert not store.exists(claimed) and files_under(tmp_path) == []


def test_an_upload_one_byte_over_its_limit_is_refused_and_one_at_it_lands(
        tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    at_limit, over = b"x" * 10, b"x" * 11

    with pytest.raises(BlobTooLarge) as refused:
        put(store, sha(over), [over[:6], over[6:]], max_bytes=10)
    assert refused.value.code == "blob_too_large" and str(refused.value) == (
        "upload exceeds 10 bytes")
    assert files_under(tmp_path) == []

    assert put(store, sha(at_limit), [at_limit], max_bytes=10) == 10
    assert store.exists(sha(at_limit))


def test_errors_share_one_base_with_their_own_codes() -> None:
    assert BlobError.code == "blob_error"
    assert issubclass(BlobTooLarge, BlobError) and issubclass(BlobHashMismatch, BlobError)


def test_delete_removes_a_blob_and_is_quiet_about_one_never_stored(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    data = b"a result"
    put(store, sha(data), [data])

    store.delete(sha(data))
    store.delete(sha(b"never stored"))

    assert not store.exists(sha(data))


def test_a_copy_takes_what_the_target_lacks_counts_what_it_has_and_names_the_rest(
        tmp_path: Path) -> None:
    source, target = BlobStore(tmp_path / "live"), BlobStore(tmp_path / "backup")
    kept, also_kept = b"already backed up", b"backed up too"
    new, also_new, damaged = b"new since", b"also new", b"damaged on disk"
    for data in (kept, also_kept, new, also_new, damaged):
        put(source, sha(data), [data])
    put(target, sha(kept), [kept])
    put(target, sha(also_kept), [also_kept])
    source.path_of(sha(damaged)).write_bytes(b"bit rot")
    lost = sha(b"listed by the database, stored nowhere")

    result = source.copy_to(target, [sha(new), sha(kept), sha(damaged), lost, sha(new),
                                     sha(also_new), sha(also_kept)])

    assert result == BlobCopy(copied=2, present=2, missing=tuple(sorted([sha(damaged), lost])))
    assert target.read(sha(new)) == new and not target.exists(sha(damaged))
    assert files_under(tmp_path / "backup") == sorted(
        f"{h[:2]}/{h}" for h in (sha(kept), sha(also_kept), sha(new), sha(also_new)))


def test_a_blob_larger_than_one_copy_block_is_copied_whole(tmp_path: Path) -> None:
    source, target = BlobStore(tmp_path / "a"), BlobStore(tmp_path / "b")
    data = bytes(range(256)) * (COPY_CHUNK // 256 * 2 + 3)
    put(source, sha(data), [data], max_bytes=len(data))

    assert source.copy_to(target, [sha(data)]) == BlobCopy(1, 0, ())
    assert target.read(sha(data)) == data


def test_the_copy_summary_says_what_was_copied_and_lists_a_few_missing() -> None:
    assert BlobCopy(3, 2, ()).summary() == "blobs: 3 copied, 2 already there"
    few = BlobCopy(0, 0, ("a" * 64, "b" * 64))
    assert few.summary() == ("blobs: 0 copied, 0 already there, 2 missing (listed by the "
                             "database, found in neither place intact: aaaaaaaaaaaa, "
                             "bbbbbbbbbbbb)")
    many = BlobCopy(0, 0, tuple(c * 64 for c in "abcdef"))
    assert many.summary().endswith("6 missing (listed by the database, found in neither place "
                                   "intact: aaaaaaaaaaaa, bbbbbbbbbbbb, cccccccccccc, "
                                   "dddddddddddd, eeeeeeeeeeee ...)")
