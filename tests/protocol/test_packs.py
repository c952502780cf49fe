"""A pack's manifest paths (issue 35): only relative paths that stay under the folder a pack is
laid out in; the job spec refuses any other, naming it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.api.schemas import JobSpec
from protocol.packs import MAX_ASSET_PATH, MAX_ASSETS, asset_path_problem

HOSTILE = ["../etc/passwd", "tex/../../x", "/etc/passwd", "a//b", "./a", "a/.", "",
           "C:\\x.png", "a\\..\\b", "tex/\x00.png", "x" * (MAX_ASSET_PATH + 1)]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_path_leaving_the_pack_folder_has_a_problem(name: str) -> None:
    assert asset_path_problem(name) is not None


@pytest.mark.parametrize("name", ["tex/rel.png", "_outside/srv/tex/a b.png", "lib/lib.blend",
                                  "tex/udim.1001.png", "..hidden/a", "a.."])
def test_a_relative_path_inside_is_fine(name: str) -> None:
    assert asset_path_problem(name) is None


def spec(assets: object) -> dict[str, object]:
    return {"workload": {"kind": "blender", "blend_sha256": "0" * 64,
                         "frames": {"start": 1, "end": 1}, "assets": assets}, "deadline": 1}


@pytest.mark.parametrize("name", [n for n in HOSTILE if len(n) <= MAX_ASSET_PATH])
def test_the_job_spec_refuses_a_hostile_manifest_path(name: str) -> None:
    with pytest.raises(ValidationError, match="asset"):
        JobSpec.model_validate(spec({name: "1" * 64}))


def test_the_job_spec_bounds_the_manifest() -> None:
    JobSpec.model_validate(spec({f"tex/{i}.png": "1" * 64 for i in range(MAX_ASSETS)}))
    with pytest.raises(ValidationError):
        JobSpec.model_validate(spec({f"tex/{i}.png": "1" * 64 for i in range(MAX_ASSETS + 1)}))
    with pytest.raises(ValidationError):
        JobSpec.model_validate(spec({"tex/a.png": "not a hash"}))
    assert JobSpec.model_validate(spec(None)).workload.assets is None  # type: ignore[union-attr]
