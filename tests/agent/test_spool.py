"""The spool: results until acknowledged, and chunks rendered offline until shown, across a
restart of the agent (a new `Spool` over the same directory)."""

from __future__ import annotations

from pathlib import Path

from agent.spool import OfflineChunk, Spool


def test_offline_chunks_survive_a_restart_oldest_first_until_shown(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    late, early = OfflineChunk(7, "b" * 64, 80, 80, 1000.5), OfflineChunk(7, "a" * 64, 0, 80, 999.0)
    for chunk in (late, early):
        source = tmp_path / f"{chunk.sha256[:4]}.exr"
        source.write_bytes(chunk.sha256.encode())
        Spool(root).keep_offline(chunk, source)
        source.unlink()  # the sandbox that rendered it is wiped

    kept = Spool(root).offline()  # a restarted agent finds them

    assert [chunk for chunk, _ in kept] == [early, late]
    assert [path.read_bytes() for _, path in kept] == [b"a" * 64, b"b" * 64]
    Spool(root).shown([early])
    assert [chunk for chunk, _ in Spool(root).offline()] == [late]
    assert not list((root / "offline").glob(".*"))  # no partial file left behind


def test_no_offline_chunks_when_nothing_was_cut(tmp_path: Path) -> None:
    assert Spool(tmp_path / "spool").offline() == []
