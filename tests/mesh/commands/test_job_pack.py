"""`mesh job pack` and the packing half of `mesh job submit` (issue 35) against anvil and a real
orchestrator process: a scene with a missing texture is refused before anything is uploaded or
escrowed, naming the file; a production-style scene is sent with its pack, whose manifest the
escrowed spec names; a second submit after one texture changed sends that texture alone."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from mesh.processes import OrchestratorProcess
from orchestrator.api.schemas import JobSpec
from orchestrator.chain.sdk import MeshChain
from orchestrator.db.models import Blob, Job
from orchestrator.db.session import make_engine
from tests.mesh.commands.conftest import Mesh
from tests.mesh.commands.test_jobs import TOKEN, customer, service_db
from tests.mesh.packed_scene import FILES
from tests.mesh.test_pack import build_scene


def stored_blobs(service: OrchestratorProcess) -> set[str]:
    engine = make_engine(f"sqlite:///{service_db(service)}")
    with Session(engine) as session:
        found = set(session.scalars(select(Blob.sha256)))
    engine.dispose()
    return found


def test_a_missing_texture_is_refused_before_any_upload_or_escrow_naming_the_file(
        served: Mesh, chain: MeshChain, service: OrchestratorProcess, tmp_path: Path) -> None:
    address = customer(served)
    blend = build_scene(tmp_path / "artist", tmp_path / "elsewhere")
    gone = blend.parent / "tex/rel.png"
    gone.unlink()
    before = stored_blobs(service)
    done = served.signed("job", "submit", "--yes", str(blend), "--frames", "1", "--budget", "2",
                         "--wallet", "customer")
    assert done.exit_code != 0
    assert f"missing: {gone}" in done.stderr.splitlines()
    assert done.stderr.strip().splitlines()[-1] == (
        "mesh job submit: scene.blend reads 1 file not on this machine (listed above); nothing "
        "was uploaded or escrowed: put it back, or `mesh job submit --allow-missing` to render "
        "without")
    assert "Traceback" not in done.output
    assert stored_blobs(service) == before  # nothing uploaded
    assert chain.token_balance(address) == 100 * TOKEN  # nothing paid

    dry = served("job", "pack", str(blend), "--allow-missing", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["missing"] == [str(gone)]
    knowingly = served.signed("job", "submit", "--yes", str(blend), "--frames", "1",
                              "--budget", "2", "--wallet", "customer", "--allow-missing",
                              "--json")
    assert knowingly.exit_code == 0, knowingly.output
    assert f"warning: missing: {gone}" in knowingly.stderr.splitlines()


def test_a_second_submit_with_one_texture_changed_uploads_that_texture_alone(
        served: Mesh, service: OrchestratorProcess, tmp_path: Path) -> None:
    customer(served)
    blend = build_scene(tmp_path / "artist", tmp_path / "elsewhere")
    dry = served.signed("job", "pack", str(blend), "--wallet", "customer", "--json")
    assert dry.exit_code == 0, dry.output
    listed = json.loads(dry.stdout)
    assert [f["path"] for f in listed["files"]] == ["scene.blend", *sorted(
        [*FILES, f"_outside{tmp_path}/elsewhere/abs.png"])]
    assert not any(f["on_orchestrator"] for f in listed["files"])
    assert "will not find it" not in dry.stderr  # the .blend packed points into the pack
    distinct = {f["sha256"]: f["size"] for f in listed["files"]}  # the UDIM tiles are alike
    assert listed["to_send_bytes"] == sum(distinct.values()) < listed["total_bytes"]
    print(f"pack of the test scene: {len(listed['files'])} files, {listed['total_bytes']} "
          f"bytes, traced and hashed in {listed['pack_s']} s")

    def submit() -> dict[str, object]:
        done = served.signed("job", "submit", "--yes", str(blend), "--frames", "1", "--budget", "2",
                             "--wallet", "customer", "--json")
        assert done.exit_code == 0, done.output
        return dict(json.loads(done.stdout))

    first = submit()
    assert first["pack"] == {"files": 10, "bytes": listed["total_bytes"],
                             "sent_files": len(distinct), "sent_bytes": sum(distinct.values())}
    engine = make_engine(f"sqlite:///{service_db(service)}")
    with Session(engine) as session:
        job = session.get(Job, first["job_id"])
        assert job is not None
        spec = JobSpec.model_validate(job.spec)
    engine.dispose()
    assert spec.workload.assets == {  # type: ignore[union-attr]
        f["path"]: f["sha256"] for f in listed["files"][1:]}  # signed with the job, escrowed

    again = served.signed("job", "pack", str(blend), "--wallet", "customer", "--json")
    assert all(f["on_orchestrator"] for f in json.loads(again.stdout)["files"])
    texture = blend.parent / "tex/seq_0002.png"
    texture.write_bytes(texture.read_bytes() + b"\0")  # the artist touched one frame's texture
    second = submit()
    assert second["pack"] == {"files": 10, "bytes": listed["total_bytes"] + 1,
                              "sent_files": 1, "sent_bytes": texture.stat().st_size}
    print(f"second submit: {second['pack']}")
    assert second["blend_sha256"] == first["blend_sha256"]
