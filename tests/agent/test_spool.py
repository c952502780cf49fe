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


def test_acknowledging_a_result_keeps_every_file_another_pending_result_names(
        tmp_path: Path) -> None:
    """Two frames whose chunks came out byte-identical share one part file: acknowledging the
    first removes its own result but not the shared part, and a restarted agent still finds
    the second with its result and all its parts."""
    root = tmp_path / "spool"
    files = {}
    for name, data in {"shared": b"black chunk", "first": b"frame 1", "second": b"frame 2",
                       "own": b"chunk of 1"}.items():
        files[name] = tmp_path / f"{name}.exr"
        files[name].write_bytes(data)
    shared = ("c" * 64, files["shared"])
    first = Spool(root).keep(task_id=1, lease_id=10, sha256="1" * 64, source=files["first"],
                             parts=[shared, ("d" * 64, files["own"])])
    second = Spool(root).keep(task_id=2, lease_id=20, sha256="2" * 64, source=files["second"],
                              parts=[shared])
    for path in files.values():
        path.unlink()  # the sandboxes that rendered them are wiped

    Spool(root).acknowledged(first)

    after_restart = Spool(root)
    assert after_restart.pending() == [second]
    assert after_restart.path(second).read_bytes() == b"frame 2"
    assert [(root / name).read_bytes() for name in second.parts] == [b"black chunk"]
    assert not (root / first.name).exists()
    assert not (root / f"{'d' * 64}.exr").exists()  # first's own part is gone with it
    after_restart.acknowledged(second)
    assert sorted(p.name for p in root.iterdir()) == []


def test_a_kept_result_comes_back_after_a_restart_with_everything_sent_with_it(
        tmp_path: Path) -> None:
    root = tmp_path / "new" / "spool"  # a folder not made yet
    frame = tmp_path / "frame.png"
    frame.write_bytes(b"frame 5")
    render = {"build": "5.0.1", "kernel": "cpu", "chunks": [[0, 80]]}

    kept = Spool(root).keep(task_id=5, lease_id=51, sha256="5" * 64, source=frame,
                            render=render)
    frame.unlink()

    (found,) = Spool(root).pending()
    assert found == kept
    assert (found.task_id, found.lease_id, found.sha256, found.render) == (
        5, 51, "5" * 64, render)
    assert Spool(root).path(found).read_bytes() == b"frame 5"
    assert sorted(p.name for p in root.iterdir()) == [f"{'5' * 64}.png", "task-5.json"]


def test_a_record_whose_result_file_is_gone_is_not_pending(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    frame = tmp_path / "frame.png"
    frame.write_bytes(b"frame 6")
    kept = Spool(root).keep(task_id=6, lease_id=61, sha256="6" * 64, source=frame)
    (root / kept.name).unlink()  # a damaged disk

    assert Spool(root).pending() == []


def test_acknowledging_or_showing_twice_is_harmless(tmp_path: Path) -> None:
    """An agent killed between the orchestrator's answer and the spool's clean-up does it
    again after its restart, over files already gone."""
    root = tmp_path / "spool"
    frame = tmp_path / "frame.png"
    frame.write_bytes(b"frame 8")
    kept = Spool(root).keep(task_id=8, lease_id=81, sha256="8" * 64, source=frame)
    chunk = OfflineChunk(8, "e" * 64, 0, 80, 1000.0)
    Spool(root).keep_offline(chunk, frame)

    for _ in range(2):
        Spool(root).acknowledged(kept)
        Spool(root).shown([chunk])

    assert Spool(root).pending() == [] and Spool(root).offline() == []
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == []
