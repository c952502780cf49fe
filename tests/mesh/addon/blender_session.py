"""A Blender session driven as an artist would drive the add-on, in a child process with the
pinned headless bpy: `python -m tests.mesh.addon.blender_session PLAN.json` installs the zip
`mesh addon build` made as an extension (Blender's own install API, into the user repository
under $HOME), opens the scene, fills in the preferences and the panel, presses the plan's
buttons and prints one JSON line (`MARK` + the answers): each operator's report line (an
operator refused in background mode raises RuntimeError with its report), the add-on's state
after its background work, the scene's job id after the timer ran, and the output folder."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

MARK = "ADDON-SESSION "
MODULE = "bl_ext.user_default.depin_mesh"


def install(zip_path: str) -> Any:
    import bpy

    done = bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                    enable_on_install=True)
    assert done == {"FINISHED"}, done
    return sys.modules[MODULE]


def press(operator: str, **properties: Any) -> str | None:
    """Run an operator; its error report line, or None when it finished."""
    import bpy

    category, name = operator.split(".")
    try:
        getattr(getattr(bpy.ops, category), name)(**properties)
    except RuntimeError as refused:
        return str(refused)
    return None


def wait(addon: Any, scene: str, timeout_s: float) -> None:
    ends = time.monotonic() + timeout_s
    while addon.busy(scene):
        if time.monotonic() > ends:
            raise TimeoutError(f"the add-on is still {addon.state(scene).get('doing')}")
        time.sleep(0.2)


def main(plan: dict[str, Any]) -> dict[str, Any]:
    import bpy

    addon = install(plan["zip"])
    if plan.get("blend"):
        bpy.ops.wm.open_mainfile(filepath=plan["blend"], load_ui=False)
    scene = bpy.context.scene
    for name, value in plan.get("render", {}).items():
        setattr(scene.render, name, value)
    if plan.get("save_as"):
        bpy.ops.wm.save_as_mainfile(filepath=plan["save_as"])
    prefs = bpy.context.preferences.addons[MODULE].preferences
    for name, value in plan.get("prefs", {}).items():
        setattr(prefs, name, value)
    answers: dict[str, Any] = {"presses": []}
    for step in plan["presses"]:
        for name, value in step.get("prefs", {}).items():
            setattr(prefs, name, value)
        for name, value in step.get("job", {}).items():
            setattr(scene.mesh_grid, name, value)
        started = time.monotonic()
        report = press(step["operator"], **step.get("properties", {}))
        if report is None:
            wait(addon, scene.name, plan.get("timeout_s", 300))
        addon.refresh()
        answers["presses"].append({"operator": step["operator"], "report": report,
                                   "state": addon.state(scene.name),
                                   "job_id": scene.mesh_grid.job_id,
                                   "seconds": round(time.monotonic() - started, 2)})
    out = Path(bpy.path.abspath(scene.render.filepath))
    answers["output"] = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    answers["output_folder"] = str(out)
    return answers


if __name__ == "__main__":
    found = main(json.loads(Path(sys.argv[1]).read_text()))
    print(MARK + json.dumps(found, default=str))
