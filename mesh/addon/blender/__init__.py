"""The DePIN Mesh add-on for Blender 4.2+ (an extension: `blender_manifest.toml`), built into a
zip by `mesh addon build`. A panel in Render Properties quotes, packs (a dry run) and submits
the saved scene, follows the job frame by frame and downloads its frames into the scene's
output folder.

It is a front end of the `mesh` client and nothing more: quoting, packing, uploading, escrow,
signing and download are `mesh.commands.jobs` and `mesh.customer`, the code `mesh job` runs.
Those come from a Python environment with `depin-mesh[tools]` installed whose interpreter the
add-on's preference names (its `sys.path` is added to Blender's; it must be Blender's Python
version); left empty, Blender's own Python must have them (the pinned `bpy` module does).

The wallet is a keystore file named in the preferences (never in the .blend) and opened with a
password typed into the operator's dialog each time (never kept). Slow work (packing, upload,
escrow, following, download) runs in a background thread that writes only to `STATE`; a
`bpy.app.timers` callback (`refresh`) copies it into the scene and redraws the panel, so
Blender's UI never waits on the network. A refusal is one line in Blender's report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bpy

POLL_S = 1.0  # seconds between two looks at a followed job
FINISHED = ("completed", "settling", "settled", "disputed")
STOPPED = ("failed", "cancelled", "expired")

# Per scene (by name): what the background work knows. Written by the worker threads under
# LOCK, read by the panel and by `refresh` on Blender's main thread.
STATE: dict[str, dict[str, Any]] = {}
LOCK = threading.Lock()
_WORKERS: dict[str, threading.Thread] = {}
_PATHS: dict[str, list[str]] = {}  # interpreter -> the sys.path it lent


class Refused(Exception):
    """What an operator reports as its one error line."""


# ------------------------------------------------------------------ the `mesh` environment


def _prefs() -> Any:
    return bpy.context.preferences.addons[__package__].preferences


def _or_none(text: str) -> str | None:
    return text.strip() or None


def environment() -> str:
    """The interpreter that reads scenes (with bpy and `mesh`), its packages importable here:
    the preference's, its `sys.path` lent to Blender's once; else Blender's own."""
    python = bpy.path.abspath(_prefs().python).strip()
    if not python:
        try:
            import mesh.commands.jobs  # noqa: F401
        except ImportError:
            raise Refused("the `mesh` client is not installed in Blender's Python: set the "
                          "add-on's Python preference to an environment with depin-mesh "
                          "installed") from None
        return sys.executable
    if python not in _PATHS:
        try:
            done = subprocess.run(
                [python, "-c", "import json, sys, mesh; print(json.dumps("
                 "[list(sys.version_info[:2]), [p for p in sys.path if p]]))"],
                capture_output=True, text=True, timeout=60, check=False)
        except OSError as error:
            raise Refused(f"the add-on's Python {python} does not run: "
                          f"{error.strerror}") from None
        if done.returncode != 0:
            raise Refused(f"{python} has no `mesh`: install depin-mesh[tools] in that "
                          "environment")
        version, paths = json.loads(done.stdout.strip().splitlines()[-1])
        if tuple(version) != sys.version_info[:2]:
            raise Refused(f"{python} is Python {version[0]}.{version[1]}, Blender's is "
                          f"{sys.version_info[0]}.{sys.version_info[1]}: make the "
                          "environment with that version")
        sys.path.extend(path for path in paths if path not in sys.path)
        _PATHS[python] = paths
    return python


# ------------------------------------------------------------------ settings


def _order(scene: Any) -> Any:
    """The scene's job as `mesh job` options would give it; `Refused` without a budget."""
    from mesh.commands.jobs import JobOrder

    job = scene.mesh_grid
    if job.budget <= 0:
        raise Refused("set a budget above 0 tokens (the most the job may spend)")
    frames = job.frames.strip() or f"{scene.frame_start}-{scene.frame_end}"
    return JobOrder(frames=frames, budget=f"{job.budget:g}", samples=job.samples or None,
                    providers=_or_none(job.providers), region=_or_none(job.region),
                    priority=job.priority.lower(), deadline_h=job.deadline_h,
                    task_minutes=job.task_minutes)


def _blend() -> Path:
    """The .blend the grid renders, saved first when it has changes (the file on disk is what
    is packed, as `mesh job submit` sends it); `Refused` for a scene never saved."""
    if not bpy.data.filepath:
        raise Refused("save the scene first (File > Save): the grid renders the saved .blend")
    if bpy.data.is_dirty:
        bpy.ops.wm.save_mainfile()
    return Path(bpy.data.filepath)


def _grid() -> Any:
    from mesh.commands.jobs import Grid

    prefs = _prefs()
    data_dir = bpy.path.abspath(prefs.data_dir).strip()
    return Grid(orchestrator=_or_none(prefs.orchestrator_url),
                orchestrator_id=_or_none(prefs.orchestrator_id),
                rpc_url=_or_none(prefs.rpc_url), data_dir=Path(data_dir) if data_dir else None)


def _account(password: str) -> Any:
    """The preference's keystore opened with `password`; `Refused` without one."""
    from protocol import keystore

    path = bpy.path.abspath(_prefs().keystore).strip()
    if not path:
        raise Refused("set the wallet: a keystore file in the add-on's preferences "
                      "(`mesh wallet new NAME` makes one)")
    if not password:
        raise Refused("type the keystore's password")
    try:
        return keystore.load(Path(path), password)
    except keystore.KeystoreError as error:
        raise Refused(str(error)) from None


def _client(account: Any) -> Any:
    """A client of the orchestrator signed by `account` (the chain id: $MESH_CHAIN_ID's, as
    `mesh job download` binds it)."""
    from mesh.commands.common import service

    grid = _grid()
    return service(grid.orchestrator, grid.orchestrator_id).wallet(account)


def _output_folder(scene: Any) -> Path:
    """The folder of the scene's output path (File Output's `//render/` or `/tmp/shot_`)."""
    path = bpy.path.abspath(scene.render.filepath)
    return Path(path if path.endswith(("/", os.sep)) else os.path.dirname(path))


def _one_line(error: BaseException) -> str:
    from mesh.commands.common import explain

    return " ".join(explain(error).split())


def _guarded(run: Callable[[], set[str]], operator: Any) -> set[str]:
    """`run`, with whatever stops it (a `Refused`, the client's `UserError`, any other
    error) reported as one error line, never a traceback."""
    try:
        return run()
    except Exception as error:
        operator.report({"ERROR"}, _one_line(error))
        return {"CANCELLED"}


# ------------------------------------------------------------------ background work


def _update(scene: str, **fields: Any) -> None:
    with LOCK:
        STATE.setdefault(scene, {}).update(fields)


def state(scene: str) -> dict[str, Any]:
    with LOCK:
        return dict(STATE.get(scene, {}))


def busy(scene: str) -> bool:
    worker = _WORKERS.get(scene)
    return worker is not None and worker.is_alive()


def _start(scene: str, what: str, work: Callable[[], None]) -> None:
    """Run `work` in a thread for `scene` (one at a time), its outcome in `STATE`."""
    if busy(scene):
        raise Refused(f"still {state(scene).get('doing', 'working')}: wait for it to end")

    def run() -> None:
        try:
            work()
            _update(scene, doing=None, error=None)
        except Exception as error:  # shown in the panel as one line
            _update(scene, doing=None, error=_one_line(error))

    _update(scene, doing=what, error=None)
    worker = threading.Thread(target=run, name=f"mesh-{what}", daemon=True)
    _WORKERS[scene] = worker
    worker.start()
    if not bpy.app.timers.is_registered(refresh):
        bpy.app.timers.register(refresh, first_interval=0.2, persistent=True)


def _follow(scene: str, client: Any, job_id: str, frames: tuple[int, int]) -> None:
    """Poll the job and its results until it stops: per frame, done or waiting."""
    from protocol.client import expect

    while True:
        job = expect(client.http.get(f"/v1/jobs/{job_id}"))
        results = expect(client.send("GET", f"/v1/jobs/{job_id}/results"))["results"]
        done = {int(r["frame"]) for r in results if r.get("frame") is not None}
        _update(scene, status=job["status"], tasks=job["tasks"], frames={
            frame: "done" if frame in done else "waiting"
            for frame in range(frames[0], frames[1] + 1)})
        if job["status"] in FINISHED or job["status"] in STOPPED:
            return
        time.sleep(POLL_S)


def refresh() -> float | None:
    """The timer: the background work's job id into the scene (kept in the .blend, so a
    reopened file downloads it), and the panel redrawn; again while any work runs."""
    for scene in bpy.data.scenes:
        job_id = state(scene.name).get("job_id")
        if job_id and scene.mesh_grid.job_id != job_id:
            scene.mesh_grid.job_id = job_id
    for window in bpy.context.window_manager.windows:
        for area in window.screen.areas:
            if area.type == "PROPERTIES":
                area.tag_redraw()
    return POLL_S / 2 if any(busy(name) for name in list(_WORKERS)) else None


# ------------------------------------------------------------------ operators


def _password_prop() -> Any:
    return bpy.props.StringProperty(name="Password", subtype="PASSWORD",
                                    options={"HIDDEN", "SKIP_SAVE"})


class MESH_GRID_OT_quote(bpy.types.Operator):
    """Ask the orchestrator what the job would cost, when it would be done and how likely
    by its deadline (nothing is paid or signed)"""

    bl_idname = "mesh_grid.quote"
    bl_label = "Quote"

    def execute(self, context: Any) -> set[str]:
        def run() -> set[str]:
            environment()
            from mesh.commands.jobs import quote_scene

            scene = context.scene
            found = quote_scene(_blend(), _order(scene), _grid().orchestrator)
            _update(scene.name, quote=found)
            self.report({"INFO"}, _quote_line(found))
            return {"FINISHED"}

        return _guarded(run, self)


class MESH_GRID_OT_pack(bpy.types.Operator):
    """List what a submit would send: every file the scene reads, its size, what is missing
    (a dry run: nothing is sent)"""

    bl_idname = "mesh_grid.pack"
    bl_label = "Pack (dry run)"

    def execute(self, context: Any) -> set[str]:
        def run() -> set[str]:
            python = environment()
            from mesh.commands.jobs import pack_dry_run

            scene, blend, data_dir = context.scene.name, _blend(), _grid().data_dir
            allow = context.scene.mesh_grid.allow_missing

            def work() -> None:
                _update(scene, pack=pack_dry_run(blend, None, allow_missing=allow, quiet=True,
                                                 data_dir=data_dir, python=python))

            _start(scene, "packing", work)
            return {"FINISHED"}

        return _guarded(run, self)


class MESH_GRID_OT_submit(bpy.types.Operator):
    """Pack the saved scene, upload what the orchestrator lacks, escrow the budget and submit
    the job; then follow it frame by frame"""

    bl_idname = "mesh_grid.submit"
    bl_label = "Submit"

    password: _password_prop()  # type: ignore[valid-type]

    def invoke(self, context: Any, event: Any) -> set[str]:
        """The job's quote first, then the dialog that shows it and asks for the password."""
        def run() -> set[str]:
            environment()
            from mesh.commands.jobs import quote_scene

            scene = context.scene
            _update(scene.name, quote=quote_scene(_blend(), _order(scene), _grid().orchestrator))
            return set(context.window_manager.invoke_props_dialog(self))

        return _guarded(run, self)

    def draw(self, context: Any) -> None:
        quoted = state(context.scene.name).get("quote")
        self.layout.label(text=f"Escrow {context.scene.mesh_grid.budget:g} tokens?")
        if quoted:
            self.layout.label(text=_quote_line(quoted))
        self.layout.prop(self, "password")

    def execute(self, context: Any) -> set[str]:
        def run() -> set[str]:
            python = environment()
            from mesh.commands.jobs import quote_scene, submit_scene

            scene, blend, order = context.scene, _blend(), _order(context.scene)
            account = _account(self.password)
            grid = _grid()
            _update(scene.name, quote=quote_scene(blend, order, grid.orchestrator))
            allow = scene.mesh_grid.allow_missing
            asked = order.workload("0" * 64)["frames"]
            frames = (asked["start"], asked["end"])
            name = scene.name

            def work() -> None:
                result, client = submit_scene(blend, order, lambda: account, grid,
                                              allow_missing=allow, yes=True, quiet=True,
                                              python=python)
                try:
                    _update(name, job_id=result["job_id"], submitted=result,
                            status=result["status"], doing="following")
                    _follow(name, client, result["job_id"], frames)
                finally:
                    client.close()

            _start(name, "submitting", work)
            return {"FINISHED"}

        return _guarded(run, self)


class MESH_GRID_OT_download(bpy.types.Operator):
    """Download the job's frames into the scene's output folder, each checked by its sha256"""

    bl_idname = "mesh_grid.download"
    bl_label = "Download"

    password: _password_prop()  # type: ignore[valid-type]

    def invoke(self, context: Any, event: Any) -> set[str]:
        return set(context.window_manager.invoke_props_dialog(self))

    def execute(self, context: Any) -> set[str]:
        def run() -> set[str]:
            environment()
            from mesh.commands.common import call_service
            from mesh.customer import download
            from protocol.client import expect

            scene = context.scene
            job_id = scene.mesh_grid.job_id or state(scene.name).get("job_id")
            if not job_id:
                raise Refused("no job to download: submit one first")
            client = _client(_account(self.password))
            out, name = _output_folder(scene), scene.name
            try:
                listing = call_service("list the job's results", lambda: expect(
                    client.send("GET", f"/v1/jobs/{job_id}/results")))
            except BaseException:
                client.close()
                raise
            if not listing["results"]:
                client.close()
                raise Refused(f"job {job_id} has no results yet ({listing['status']})")

            def work() -> None:
                try:
                    done = download(client, job_id, out, show_progress=False)
                finally:
                    client.close()
                _update(name, downloaded=[str(path) for path in done.frames])

            _start(name, "downloading", work)
            return {"FINISHED"}

        return _guarded(run, self)


def _quote_line(quote: dict[str, Any]) -> str:
    from orchestrator.domain.types import show_tokens

    if quote["price_min"] is None:
        return (f"{quote['tasks']} tasks; {quote.get('warning') or 'no node can take it'}; "
                f"{100 * quote['p_deadline']:.1f} % chance on time")
    return (f"{quote['tasks']} tasks, {show_tokens(quote['price_min'])}-"
            f"{show_tokens(quote['price_max'])} tokens, about "
            f"{quote['completion_s'] / 60:.0f} min, {100 * quote['p_deadline']:.1f} % chance "
            "on time")


# ------------------------------------------------------------------ panel and settings


class MESH_GRID_PT_render(bpy.types.Panel):
    bl_label = "DePIN Mesh"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "render"

    def draw(self, context: Any) -> None:
        layout, scene, prefs = self.layout, context.scene, _prefs()
        job = scene.mesh_grid
        layout.prop(prefs, "orchestrator_url")
        layout.prop(prefs, "keystore")
        column = layout.column(align=True)
        for name in ("frames", "budget", "deadline_h", "priority", "samples", "providers",
                     "region", "allow_missing"):
            column.prop(job, name)
        row = layout.row(align=True)
        row.operator(MESH_GRID_OT_quote.bl_idname)
        row.operator(MESH_GRID_OT_pack.bl_idname)
        row.operator(MESH_GRID_OT_submit.bl_idname)
        now = state(scene.name)
        if now.get("doing"):
            layout.label(text=f"{now['doing']}...", icon="TIME")
        if now.get("error"):
            layout.label(text=now["error"], icon="ERROR")
        if now.get("quote"):
            layout.label(text=_quote_line(now["quote"]), icon="INFO")
        if now.get("pack"):
            packed = now["pack"]
            layout.label(text=f"pack: {len(packed['files'])} files, "
                              f"{packed['total_bytes']} bytes, {len(packed['missing'])} "
                              "missing", icon="PACKAGE")
        if job.job_id:
            box = layout.box()
            box.label(text=f"job {job.job_id[:18]}...: {now.get('status', 'submitted')}")
            grid = box.grid_flow(columns=6, align=True)
            for frame, status in sorted(now.get("frames", {}).items()):
                grid.label(text=str(frame), icon="CHECKMARK" if status == "done" else "TIME")
            box.operator(MESH_GRID_OT_download.bl_idname)
            if now.get("downloaded"):
                box.label(text=f"{len(now['downloaded'])} frames in "
                               f"{_output_folder(scene)}")


class MeshGridPreferences(bpy.types.AddonPreferences):
    bl_idname = __package__

    def draw(self, context: Any) -> None:
        for name in ("python", "orchestrator_url", "orchestrator_id", "rpc_url", "data_dir",
                     "keystore"):
            self.layout.prop(self, name)


MeshGridPreferences.__annotations__ = {
    "python": bpy.props.StringProperty(
        name="Python", subtype="FILE_PATH", description="The interpreter of an environment "
        "with depin-mesh installed (empty: Blender's own Python)"),
    "orchestrator_url": bpy.props.StringProperty(
        name="Orchestrator", description="The orchestrator's URL (empty: "
        "$MESH_ORCHESTRATOR_URL)"),
    "orchestrator_id": bpy.props.StringProperty(
        name="Orchestrator id", description="The orchestrator's id signatures are bound to "
        "(empty: $MESH_ORCHESTRATOR_ID)"),
    "rpc_url": bpy.props.StringProperty(
        name="Chain RPC", description="The chain's JSON-RPC URL (empty: $MESH_RPC_URL)"),
    "data_dir": bpy.props.StringProperty(
        name="Data dir", subtype="DIR_PATH", description="The folder with the grid's "
        "deployment.json (empty: $MESH_DATA_DIR)"),
    "keystore": bpy.props.StringProperty(
        name="Wallet", subtype="FILE_PATH", description="Your keystore file (`mesh wallet "
        "new`); its password is asked each time"),
}


class MeshGridJob(bpy.types.PropertyGroup):
    """The scene's job settings (kept in the .blend; no key or password is)."""


MeshGridJob.__annotations__ = {
    "frames": bpy.props.StringProperty(
        name="Frames", description="A frame (7) or a range (1-24); empty: the scene's range"),
    "budget": bpy.props.FloatProperty(name="Budget", min=0.0, default=0.0,
                                      description="Tokens escrowed for the job"),
    "deadline_h": bpy.props.FloatProperty(name="Deadline (h)", min=0.01, default=24.0,
                                          description="Hours until the work is due"),
    "priority": bpy.props.EnumProperty(
        name="Priority", default="NORMAL",
        items=[("LOW", "Low", ""), ("NORMAL", "Normal", ""), ("HIGH", "High", "")]),
    "samples": bpy.props.IntProperty(name="Samples", min=0, default=0,
                                     description="Cycles samples (0: the file's)"),
    "task_minutes": bpy.props.FloatProperty(
        name="Minutes a frame", min=0.01, default=1.0,
        description="Minutes a frame takes on the reference GPU (prices the quote)"),
    "providers": bpy.props.StringProperty(
        name="Providers", description="Only these providers: ADDR,ADDR (empty: any)"),
    "region": bpy.props.StringProperty(
        name="Regions", description="Only nodes in these regions: eu,us-east (empty: any)"),
    "allow_missing": bpy.props.BoolProperty(
        name="Allow missing files", description="Render even when files the scene reads "
        "are missing"),
    "job_id": bpy.props.StringProperty(name="Job", description="The job submitted last"),
}

CLASSES = (MeshGridPreferences, MeshGridJob, MESH_GRID_OT_quote, MESH_GRID_OT_pack,
           MESH_GRID_OT_submit, MESH_GRID_OT_download, MESH_GRID_PT_render)


def register() -> None:
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.mesh_grid = bpy.props.PointerProperty(type=MeshGridJob)


def unregister() -> None:
    if bpy.app.timers.is_registered(refresh):
        bpy.app.timers.unregister(refresh)
    del bpy.types.Scene.mesh_grid
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
