"""`mesh orchestrator backup/restore --blobs`: the scenes, checkpoints and frames the database
lists travel with it. Real SQLite and real files; the chain side of a restore is covered in
tests/services/test_backup_restore.py."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from orchestrator.db import blobs as blob_db
from orchestrator.db.session import make_engine, make_session_factory, upgrade_to_head
from orchestrator.storage.blobs import BlobStore
from tests.mesh.commands.conftest import Mesh, one_line_error


def add_blobs(mesh: Mesh, *contents: bytes) -> list[str]:
    """Blobs stored by the service and listed in its database, as uploads leave them."""
    data = Path(mesh.env["MESH_DATA_DIR"])
    store = BlobStore(data / "blobs")
    engine = make_engine(f"sqlite:///{data / 'mesh.db'}")
    upgrade_to_head(engine)
    names = []
    with make_session_factory(engine).begin() as session:
        for content in contents:
            sha256 = hashlib.sha256(content).hexdigest()
            store.path_of(sha256).parent.mkdir(exist_ok=True)
            store.path_of(sha256).write_bytes(content)
            blob_db.add_blob(session, sha256=sha256, size=len(content), now=0.0)
            names.append(sha256)
    engine.dispose()
    return names


def test_backups_copy_only_the_blobs_they_lack_and_a_restore_brings_them_back(
        mesh: Mesh, tmp_path: Path) -> None:
    kept = tmp_path / "blob-backup"
    first = add_blobs(mesh, b"scene", b"frame 1", b"frame 2")
    done = mesh("orchestrator", "backup", str(tmp_path / "monday.db"), "--blobs", str(kept))
    assert done.exit_code == 0, done.output
    assert "blobs: 3 copied, 0 already there" in done.stdout
    later = add_blobs(mesh, b"frame 3")
    done = mesh("orchestrator", "backup", str(tmp_path / "tuesday.db"), "--blobs", str(kept))
    assert "blobs: 1 copied, 3 already there" in done.stdout  # incremental

    shutil.rmtree(Path(mesh.env["MESH_DATA_DIR"]))  # the service's machine is lost
    done = mesh("orchestrator", "restore", str(tmp_path / "monday.db"), "--blobs", str(kept))
    assert done.exit_code == 0, done.output
    assert "blobs: 3 copied, 0 already there" in done.stdout  # what Monday's database lists
    store = BlobStore(Path(mesh.env["MESH_DATA_DIR"]) / "blobs")
    for name, content in zip(first, (b"scene", b"frame 1", b"frame 2"), strict=True):
        assert store.read(name) == content
    assert not store.exists(later[0])


def test_a_damaged_or_absent_blob_is_reported_not_restored(mesh: Mesh, tmp_path: Path) -> None:
    kept = tmp_path / "blob-backup"
    good, damaged, absent = add_blobs(mesh, b"scene", b"frame 1", b"frame 2")
    assert mesh("orchestrator", "backup", str(tmp_path / "b.db"), "--blobs",
                str(kept)).exit_code == 0
    BlobStore(kept).path_of(damaged).write_bytes(b"bit rot")
    BlobStore(kept).path_of(absent).unlink()
    shutil.rmtree(Path(mesh.env["MESH_DATA_DIR"]) / "blobs")

    done = mesh("orchestrator", "restore", str(tmp_path / "b.db"), "--blobs", str(kept))
    assert done.exit_code == 0, done.output
    assert "blobs: 1 copied, 0 already there, 2 missing" in done.stderr
    assert damaged[:12] in done.stderr and absent[:12] in done.stderr
    store = BlobStore(Path(mesh.env["MESH_DATA_DIR"]) / "blobs")
    assert store.exists(good) and not store.exists(damaged) and not store.exists(absent)


def test_restore_from_a_blob_directory_that_is_not_there_is_one_line_and_changes_nothing(
        mesh: Mesh, tmp_path: Path) -> None:
    add_blobs(mesh, b"scene")
    assert mesh("orchestrator", "backup", str(tmp_path / "b.db")).exit_code == 0
    after = add_blobs(mesh, b"a frame rendered after the backup")
    error = one_line_error(mesh("orchestrator", "restore", str(tmp_path / "b.db"), "--blobs",
                                str(tmp_path / "nowhere")), command="orchestrator restore")
    assert "no blob directory" in error
    engine = make_engine(f"sqlite:///{Path(mesh.env['MESH_DATA_DIR']) / 'mesh.db'}")
    with make_session_factory(engine)() as session:
        assert after[0] in blob_db.blob_hashes(session)  # the database was not replaced
    engine.dispose()
