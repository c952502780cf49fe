"""`mesh job pack|quote|submit|status|download|cancel`: a customer's render jobs. `quote` says
what a job would cost, when it would be done and how likely by its deadline. `submit` packs the
scene (`mesh.pack`: the .blend and every file it reads), uploads what the orchestrator lacks,
shows the quote and asks, escrows the budget on chain and submits the signed spec; the escrow is
sent once, and the submission is retried with one idempotency key, so a lost answer can
neither pay twice nor create two jobs."""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mesh.commands.common import (
    DataDir,
    JsonFlag,
    OrchestratorId,
    OrchestratorUrl,
    PasswordFile,
    RpcUrl,
    UserError,
    WalletDir,
    WalletOption,
    ask,
    call_service,
    checksums,
    connect_chain,
    emit,
    ensure_tokens,
    open_wallet,
    print_table,
    progress,
    service,
    settings,
    show_tokens,
    tokens,
    user_errors,
    wallet_dir,
    when,
)
from mesh.scene_check import SceneInfo, SceneUnreadable, read_scene
from mesh.submissions import Step, Submission, Submissions, request_key
from orchestrator.domain.ids import JobId

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from mesh.pack import Pack
    from orchestrator.chain.sdk import MeshChain
    from orchestrator.domain.chain_views import EscrowedJob
    from protocol.client import Wallet

app = typer.Typer(help="A customer's render jobs (signed with the customer's wallet).",
                  no_args_is_help=True)
JobIdArg = Annotated[str, typer.Argument(help="The job id (0x + 64 hex) `submit` printed.")]
AllowMissing = Annotated[bool, typer.Option(
    "--allow-missing", help="Go on when files the scene reads are missing (they render as "
    "Blender renders a missing file: pink textures, absent objects).")]
Blend = Annotated[Path, typer.Argument(help="The .blend file to render.")]
Frames = Annotated[str, typer.Option(help="A frame (7) or a range (1-24).")]
Budget = Annotated[str, typer.Option(help="Tokens escrowed for the job (e.g. 10).")]
Samples = Annotated[int | None, typer.Option(help="Cycles samples (default: the file's).")]
ChunkSamples = Annotated[int | None, typer.Option(
    help="Checkpoint every this many samples (needs --samples).")]
Tiles = Annotated[int, typer.Option(help="Tiles per frame, one task each.")]
Resolution = Annotated[str | None, typer.Option(help="WIDTHxHEIGHT (default: the file's).")]
ImageFormat = Annotated[str, typer.Option("--format", help="png or exr.")]
Providers = Annotated[str | None, typer.Option(
    help="Only these providers' nodes may render it: ADDR,ADDR (sensitive scenes).")]
Regions = Annotated[str | None, typer.Option(help="Only nodes in these regions: eu,us-east.")]
MinVram = Annotated[int, typer.Option(help="Smallest GPU memory a node may have.")]
MaxPrice = Annotated[str | None, typer.Option(
    help="Highest price per GPU hour a node may ask (tokens).")]
PriorityOption = Annotated[str, typer.Option(help="low, normal or high.")]
DeadlineHours = Annotated[float, typer.Option(help="Hours until the work is due.")]
TaskMinutes = Annotated[float, typer.Option(
    help="Minutes one task (a frame, or a tile) takes on the reference GPU (an RTX 3090): "
         "prices the quote and sizes placement.")]
FINISHED = {"completed", "settling", "settled", "disputed"}
STOPPED = {"failed", "cancelled", "expired"}


def _frames(text: str) -> tuple[int, int]:
    start, _, end = text.partition("-")
    try:
        first, last = int(start), int(end or start)
    except ValueError:
        raise UserError(f"--frames {text!r}: give one frame (7) or a range (1-24)") from None
    if last < first:
        raise UserError(f"--frames {text!r}: the range ends before it starts")
    return first, last


def _resolution(text: str | None) -> list[int] | None:
    if text is None:
        return None
    width, _, height = text.lower().partition("x")
    try:
        return [int(width), int(height)]
    except ValueError:
        raise UserError(f"--resolution {text!r}: give WIDTHxHEIGHT, e.g. 1920x1080") from None


def _job_id(value: str) -> bytes:
    raw = value.removeprefix("0x")
    if len(raw) != 64:
        raise UserError(f"{value!r} is not a job id (0x + 64 hex digits)")
    try:
        return bytes.fromhex(raw)
    except ValueError:
        raise UserError(f"{value!r} is not a job id (0x + 64 hex digits)") from None


def _read_scene(blend: Path, quiet: bool, data_dir: Path | None = None,
                python: str | None = None) -> SceneInfo:
    """The scene as the pinned Blender opens it, with its copy remapped into its pack when it
    names files outside its folder (kept under the data dir's `scenes/`); one line, before
    anything is sent or paid, when it cannot."""
    with progress(f"opening {blend.name} in Blender", quiet=quiet):
        try:
            return read_scene(blend, remap_dir=settings(data_dir=data_dir).data_dir / "scenes",
                              python=python)
        except SceneUnreadable as unreadable:
            raise UserError(f"{blend} is not a scene Blender can open ({unreadable}); nothing "
                            "was uploaded or escrowed") from None


def _pack(blend: Path, scene: SceneInfo, *, allow_missing: bool, command: str) -> Pack:
    """The scene's pack; before anything is sent or paid, a refusal with one line per file it
    reads that is not on this machine (unless `allow_missing`: then one warning each)."""
    from mesh.pack import PackError, pack_scene

    try:
        pack = pack_scene(blend, scene)
    except PackError as error:
        raise UserError(f"{error}; nothing was uploaded or escrowed") from None
    for path in scene.unmapped:
        if path.is_file():
            typer.secho(f"warning: {path} lies outside {blend.resolve().parent} and a linked "
                        "library names it there: it is sent, but Blender on a provider will "
                        "not find it; move it under the scene's folder and make the library's "
                        "paths relative (File > External Data > Make Paths Relative)",
                        err=True, fg=typer.colors.YELLOW)
    for path in pack.missing:
        typer.secho(f"{'warning: ' if allow_missing else ''}missing: {path}", err=True,
                    fg=typer.colors.YELLOW if allow_missing else typer.colors.RED)
    if pack.missing and not allow_missing:
        count = len(pack.missing)
        raise UserError(f"{blend.name} reads {count} file{'s' if count > 1 else ''} not on "
                        f"this machine (listed above); nothing was uploaded or escrowed: put "
                        f"{'them' if count > 1 else 'it'} back, or `mesh {command} "
                        "--allow-missing` to render without")
    return pack


def _needs(providers: str | None, region: str | None, min_vram_gb: int,
           max_price: str | None, priority: str, task_minutes: float) -> dict[str, Any]:
    """The spec's needs from the options (a warning when one provider alone is named)."""
    needs: dict[str, Any] = {"min_vram_gb": min_vram_gb, "priority": priority,
                             "expected_duration_s": task_minutes * 60.0}
    if providers:
        needs["providers"] = checksums(providers.split(","))
        if len(set(needs["providers"])) < 2:
            typer.secho("warning: results are re-checked by another provider; with one "
                        "named, verification (and so settlement) waits for a second: "
                        "name two or more", err=True, fg=typer.colors.YELLOW)
    if region:
        needs["regions"] = [r.strip() for r in region.split(",") if r.strip()]
    if max_price is not None:
        needs["max_price_per_gpu_hour"] = tokens(max_price)
    return needs


def _workload(frames: str, tiles: int, samples: int | None, chunk_samples: int | None,
              image_format: str, resolution: str | None, blend_sha256: str) -> dict[str, Any]:
    first, last = _frames(frames)
    return {"kind": "blender", "blend_sha256": blend_sha256,
            "frames": {"start": first, "end": last}, "tiles": tiles, "samples": samples,
            "chunk_samples": chunk_samples, "format": image_format,
            "resolution": _resolution(resolution)}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _show_quote(quote: dict[str, Any], *, err: bool = False) -> None:
    """The quote as a table (on stderr with `err`: `submit` keeps stdout for its result)."""
    rows: dict[str, Any] = {
        "tasks": quote["tasks"],
        "nodes": f"{quote['nodes']} would take it, of {quote['eligible_nodes']} alive that fit",
        "budget": f"{show_tokens(quote['budget'])} tokens escrowed",
        "due": when(quote["deadline"])}
    if quote["price_min"] is not None:
        rows["price"] = (f"{show_tokens(quote['price_min'])}-{show_tokens(quote['price_max'])} "
                         f"tokens at the nodes' asking prices (expected "
                         f"{show_tokens(quote['price_expected'])})")
        rows["done in"] = f"about {_duration(quote['completion_s'])}"
        rows["collateral"] = (f"{show_tokens(quote['collateral_min'])}-"
                              f"{show_tokens(quote['collateral_max'])} tokens a task, "
                              f"{show_tokens(quote['collateral_total'])} in all, locked by "
                              "the providers")
    rows["on time"] = f"{100 * quote['p_deadline']:.1f} % chance"
    if quote.get("warning"):
        rows["warning"] = quote["warning"]
    print_table(rows, err=err)


def _quote(http: Any, spec: dict[str, Any], amount: int) -> dict[str, Any]:
    """The orchestrator's quote of `spec` escrowing `amount`, with both."""
    from protocol.client import quote

    found = call_service("quote the job", lambda: quote(http, spec, amount))
    return {**found, "budget": amount, "deadline": spec["deadline"]}


@dataclass(frozen=True, slots=True)
class JobOrder:
    """What a customer asks of a render job besides its scene, as `mesh job` options or the
    Blender add-on's panel give it (text as a user types it: `frames` "7" or "1-24", `budget`
    and `max_price` in tokens, `resolution` "WIDTHxHEIGHT", `providers` and `region`
    comma-separated)."""

    frames: str
    budget: str
    samples: int | None = None
    chunk_samples: int | None = None
    tiles: int = 1
    resolution: str | None = None
    image_format: str = "png"
    providers: str | None = None
    region: str | None = None
    min_vram_gb: int = 0
    max_price: str | None = None
    priority: str = "normal"
    deadline_h: float = 24.0
    task_minutes: float = 1.0

    @property
    def amount(self) -> int:
        """The budget in token units; `UserError` unless a positive amount."""
        return tokens(self.budget)

    def workload(self, blend_sha256: str) -> dict[str, Any]:
        return _workload(self.frames, self.tiles, self.samples, self.chunk_samples,
                         self.image_format, self.resolution, blend_sha256)

    def needs(self) -> dict[str, Any]:
        return _needs(self.providers, self.region, self.min_vram_gb, self.max_price,
                      self.priority, self.task_minutes)


def quote_scene(blend: Path, order: JobOrder, orchestrator: str | None) -> dict[str, Any]:
    """The orchestrator's quote (at `orchestrator`, default: the settings') of `order` for
    the scene at `blend`, with its budget and deadline; nothing is uploaded or signed.
    `UserError` for a missing file, a bad order or an orchestrator that does not answer."""
    import httpx

    from orchestrator.api.schemas import JobSpec
    from protocol.client import sha256_file

    if not blend.is_file():
        raise UserError(f"{blend} is not a file: give the .blend to render")
    amount = order.amount
    spec = JobSpec.model_validate({
        "workload": order.workload(sha256_file(blend)), "needs": order.needs(),
        "deadline": int(time.time() + order.deadline_h * 3600)}).model_dump(mode="json")
    with httpx.Client(base_url=service(orchestrator, None).url, timeout=30.0) as http:
        return _quote(http, spec, amount)


@app.command("quote")
def quote(
    blend: Blend, frames: Frames, budget: Budget, samples: Samples = None,
    chunk_samples: ChunkSamples = None, tiles: Tiles = 1, resolution: Resolution = None,
    image_format: ImageFormat = "png", providers: Providers = None, region: Regions = None,
    min_vram_gb: MinVram = 0, max_price: MaxPrice = None, priority: PriorityOption = "normal",
    deadline_h: DeadlineHours = 24.0, task_minutes: TaskMinutes = 1.0,
    orchestrator: OrchestratorUrl = None, as_json: JsonFlag = False,
) -> None:
    """What the job would cost on the grid as it is, before anything is paid: the price range
    at the asking prices of the nodes that would take it, when it would be done, the chance
    it is done by its deadline (the orchestrator's reliability predictions) and the
    collateral providers would lock. Nothing is uploaded or signed."""
    order = JobOrder(frames, budget, samples, chunk_samples, tiles, resolution, image_format,
                     providers, region, min_vram_gb, max_price, priority, deadline_h,
                     task_minutes)
    with user_errors("job quote", as_json=as_json):
        found = quote_scene(blend, order, orchestrator)
    emit(found, as_json, _show_quote)


@dataclass(frozen=True, slots=True)
class Grid:
    """Where a submit goes: the orchestrator (URL and id), the chain (RPC URL) and the data
    dir holding its deployment.json and the scenes' remapped copies; None: the settings'."""

    orchestrator: str | None = None
    orchestrator_id: str | None = None
    rpc_url: str | None = None
    data_dir: Path | None = None


def submit_scene(blend: Path, order: JobOrder, open_account: Callable[[], LocalAccount],
                 grid: Grid, *,
                 directory: Path | None = None, allow_missing: bool = False,
                 yes: bool = False, quiet: bool = False, python: str | None = None
                 ) -> tuple[dict[str, Any], Wallet]:
    """Pack the scene, upload what the orchestrator lacks, show the quote and ask (`yes`: go
    on without asking), escrow the budget on chain and submit the signed spec, recorded in
    the wallet dir's journal so a rerun finishes an interrupted submit. `open_account` gives
    the customer's key once the scene is packed and the chain answers. The answer, and the
    client signed by it (the caller closes it). `python`: the interpreter with bpy
    that reads the scene (default: this one). `UserError` before anything is sent or paid
    for a bad order, no terminal to ask on (without `yes`), an unreadable scene or missing
    files."""
    from mesh.pack import upload
    from orchestrator.api.schemas import JobSpec

    if not blend.is_file():
        raise UserError(f"{blend} is not a file: give the .blend to render")
    workload = order.workload("0" * 64)
    first, last = workload["frames"]["start"], workload["frames"]["end"]
    amount = order.amount
    if not yes and not sys.stdin.isatty():
        raise UserError("it asks before escrowing and there is no terminal to answer on: "
                        "pass --yes to escrow without asking (`mesh job quote` shows the "
                        "quote first); nothing was uploaded or escrowed")
    scene = _read_scene(blend, quiet=quiet, data_dir=grid.data_dir, python=python)
    pack = _pack(blend, scene, allow_missing=allow_missing, command="job submit")
    if first < scene.frame_start or last > scene.frame_end:
        typer.secho(f"warning: frames {first}-{last} reach outside the scene's range "
                    f"{scene.frame_start}-{scene.frame_end}", err=True,
                    fg=typer.colors.YELLOW)
    needs = order.needs()
    chain = connect_chain(grid.rpc_url, grid.data_dir)
    account = open_account()
    if pack.manifest is not None:
        workload["assets"] = pack.manifest
    JobSpec.model_validate({"workload": workload, "needs": needs,  # before any upload
                            "deadline": int(time.time() + order.deadline_h * 3600)})
    base = service(grid.orchestrator, grid.orchestrator_id, chain.deployment.chain_id)
    client = base.wallet(account)
    try:
        sent = call_service("store the scene's files", lambda: upload(
            client, pack, show_progress=not quiet))
        workload["blend_sha256"] = pack.blend.sha256
        journal = Submissions(wallet_dir(directory) / "jobs", account.address)
        request = request_key(workload=workload, needs=needs, amount=amount,
                              deadline_h=order.deadline_h, orchestrator=base.orchestrator_id,
                              chain_id=chain.deployment.chain_id)
        record = journal.unfinished(request)
        if record is None:
            record = _new_submission(journal, chain, account.address, request, workload,
                                     needs, amount, order.deadline_h)
        else:  # on stderr, under --json too
            typer.echo(f"resuming job {record.job_id}: an earlier submit of this command "
                       "stopped before the orchestrator took it", err=True)
        spec = JobSpec.model_validate(record.spec)
        job_hex, deadline = record.job_id, spec.deadline
        quoted: dict[str, Any] | None = None
        if chain.escrowed_job(bytes.fromhex(job_hex[2:])) is None:
            ensure_tokens(chain, account.address, amount, "this budget")
            quoted = _quote(client.http, record.spec, amount)
            if not quiet:
                _show_quote(quoted, err=True)
            ask(f"job {job_hex} escrows {show_tokens(amount)} tokens from your wallet",
                "Escrow them?", yes=yes, declined="nothing escrowed: the job was not "
                "submitted (its files stay uploaded; the same command quotes it again)")
            with progress(f"escrowing {order.budget} tokens for job {job_hex}", quiet=quiet):
                receipt = chain.account(account).create_job(
                    bytes.fromhex(job_hex[2:]), amount, deadline, spec.canonical_hash())
            record = record.after(Step.ESCROWED, escrow_tx=receipt.tx_hash)
        else:  # an earlier run's escrow: never a second one
            record = record.after(Step.ESCROWED)
        journal.save(record)
        job = _submit_once(client, {"job_id": job_hex, "spec": record.spec},
                           record.idempotency_key, recovery=(
            f"job {job_hex} stays escrowed: run the same command again to submit it, or get "
            f"the escrow back with `mesh job cancel {job_hex}` after "
            f"{when(deadline + chain.grace_period())}"))
    except BaseException:
        client.close()
        raise
    journal.save(record.after(Step.SUBMITTED))
    if job.get("warning"):  # on stderr, under --json too
        typer.secho(f"warning: {job['warning']}", err=True, fg=typer.colors.YELLOW)
    return {"job_id": job_hex, "status": job["status"], "tasks": job["tasks"],
            "budget": amount, "deadline": deadline, "escrow_tx": record.escrow_tx,
            "blend_sha256": workload["blend_sha256"], "scene": scene.as_json(),
            "warning": job.get("warning"), "quote": quoted,
            "pack": {"files": len(pack.files), "bytes": pack.total_bytes,
                     "sent_files": len(sent.sent), "sent_bytes": sent.sent_bytes}}, client


@app.command("submit")
def submit(
    blend: Blend,
    frames: Frames,
    budget: Budget,
    wallet: WalletOption,
    password_file: PasswordFile = None,
    directory: WalletDir = None,
    samples: Samples = None,
    chunk_samples: ChunkSamples = None,
    tiles: Tiles = 1,
    resolution: Resolution = None,
    image_format: ImageFormat = "png",
    providers: Providers = None,
    region: Regions = None,
    min_vram_gb: MinVram = 0,
    max_price: MaxPrice = None,
    priority: PriorityOption = "normal",
    deadline_h: DeadlineHours = 24.0,
    task_minutes: TaskMinutes = 1.0,
    yes: Annotated[bool, typer.Option(
        "--yes", help="Escrow without asking (scripts); the quote is still shown.")] = False,
    wait: Annotated[bool, typer.Option(
        "--wait", help="Follow the job's progress until it finishes.")] = False,
    out: Annotated[Path | None, typer.Option(
        help="With --wait: download the frames here when it finishes.")] = None,
    orchestrator: OrchestratorUrl = None,
    orchestrator_id: OrchestratorId = None,
    rpc_url: RpcUrl = None,
    data_dir: DataDir = None,
    allow_missing: AllowMissing = False,
    as_json: JsonFlag = False,
) -> None:
    """Pack the scene, upload what the orchestrator lacks, show the job's quote and ask
    (--yes: go on without asking), escrow the budget on chain and submit the signed job
    spec."""
    order = JobOrder(frames, budget, samples, chunk_samples, tiles, resolution, image_format,
                     providers, region, min_vram_gb, max_price, priority, deadline_h,
                     task_minutes)
    with user_errors("job submit", as_json=as_json):
        result, client = submit_scene(
            blend, order, lambda: open_wallet(wallet, password_file, directory),
            Grid(orchestrator, orchestrator_id, rpc_url, data_dir),
            directory=directory, allow_missing=allow_missing, yes=yes, quiet=as_json)
        try:
            job_hex = result["job_id"]
            if wait:
                result["status"] = _follow(lambda: _job(client, job_hex), job_hex,
                                           quiet=as_json)["status"]
                if out is not None and result["status"] in FINISHED:
                    result["downloaded"] = len(_download(client, job_hex, out, as_json).files)
        finally:
            client.close()
    emit(result, as_json, lambda r: typer.echo(
        f"job {r['job_id']}: {r['status']}, {sum(r['tasks'].values())} tasks, "
        f"{show_tokens(r['budget'])} tokens escrowed "
        f"{'in ' + r['escrow_tx'] if r['escrow_tx'] else 'by the earlier run'}; follow it with "
        f"`mesh job status {r['job_id']} --watch`"))


def pack_dry_run(blend: Path, client: Wallet | None, *, allow_missing: bool = False,
                 quiet: bool = False, data_dir: Path | None = None, python: str | None = None
                 ) -> dict[str, Any]:
    """What a submit of `blend` would send: every file with its path in the pack, size and
    sha256, the total, the files missing, the seconds packing took, and with `client` which
    files the orchestrator already has from its wallet (and the bytes left to send).
    `data_dir` (where a remapped copy is kept) and `python` as for `submit_scene`."""
    from mesh.pack import lacking

    if not blend.is_file():
        raise UserError(f"{blend} is not a file: give the .blend to pack")
    started = time.perf_counter()
    packed = _pack(blend, _read_scene(blend, quiet=quiet, data_dir=data_dir, python=python),
                   allow_missing=allow_missing, command="job pack")
    elapsed = time.perf_counter() - started
    held: set[str] | None = None
    if client is not None:
        hashes = [file.sha256 for file in packed.files]
        held = set(hashes) - call_service("say which files it has",
                                          lambda: lacking(client, hashes))
    files: list[dict[str, Any]] = [
        {"path": file.name, "source": str(file.source), "size": file.size,
         "sha256": file.sha256, "on_orchestrator": None if held is None else file.sha256 in held}
        for file in packed.files]
    to_send = {file.sha256: file.size for file in packed.files
               if held is not None and file.sha256 not in held}
    return {"blend": str(blend), "files": files, "total_bytes": packed.total_bytes,
            "to_send_bytes": None if held is None else sum(to_send.values()),
            "missing": [str(path) for path in packed.missing], "pack_s": round(elapsed, 3)}


@app.command("pack")
def pack(
    blend: Annotated[Path, typer.Argument(help="The .blend file to pack.")],
    wallet: Annotated[str | None, typer.Option(
        "--wallet", "--keystore", help="Ask the orchestrator which files this wallet has "
        "already sent (a wallet name or keystore file).")] = None,
    password_file: PasswordFile = None,
    directory: WalletDir = None,
    orchestrator: OrchestratorUrl = None,
    orchestrator_id: OrchestratorId = None,
    chain_id: Annotated[int | None, typer.Option(
        help="Chain id signatures are bound to (default: $MESH_CHAIN_ID).")] = None,
    allow_missing: AllowMissing = False,
    as_json: JsonFlag = False,
) -> None:
    """What `submit` would send (a dry run): every file the scene reads, with its path in the
    pack, size and sha256, the total, and with --wallet which of them the orchestrator has."""
    with user_errors("job pack"):
        if not blend.is_file():
            raise UserError(f"{blend} is not a file: give the .blend to pack")
        client = None if wallet is None else service(orchestrator, orchestrator_id,
                                                      chain_id).wallet(
            open_wallet(wallet, password_file, directory))
        try:
            result = pack_dry_run(blend, client, allow_missing=allow_missing, quiet=as_json)
        finally:
            if client is not None:
                client.close()
    emit(result, as_json, _show_pack)


def _show_pack(result: dict[str, Any]) -> None:
    asked = result["to_send_bytes"] is not None
    print_table([{"path": f["path"], "size": f["size"], "sha256": f["sha256"][:16],
                  **({"orchestrator": "has it" if f["on_orchestrator"] else "to send"}
                     if asked else {})} for f in result["files"]])
    line = f"{len(result['files'])} files, {result['total_bytes']} bytes"
    if asked:
        line += f"; {result['to_send_bytes']} bytes to send"
    typer.echo(line + (f"; {len(result['missing'])} missing" if result["missing"] else ""))


def _new_submission(journal: Submissions, chain: MeshChain, customer: str, request: str,
                    workload: dict[str, Any], needs: dict[str, Any], amount: int,
                    deadline_h: float) -> Submission:
    """A new job id and its spec (the deadline from the chain's clock), recorded before
    anything is paid."""
    from eth_utils import keccak

    from orchestrator.api.schemas import JobSpec

    deadline = int(chain.w3.eth.get_block("latest")["timestamp"] + deadline_h * 3600)
    spec = JobSpec.model_validate({"workload": workload, "needs": needs, "deadline": deadline})
    record = Submission(
        job_id=JobId.of(keccak(bytes.fromhex(customer[2:]) + secrets.token_bytes(16))),
        request=request,
        spec=spec.model_dump(mode="json"), amount=amount,
        idempotency_key=secrets.token_hex(16), created_at=time.time())
    journal.save(record)
    return record


def _submit_once(client: Wallet, body: dict[str, Any], key: str, recovery: str
                 ) -> dict[str, Any]:
    """POST the escrowed job under the submission's idempotency key (retried:
    `mesh.customer.submit_job`); what still fails is one line that says how to submit again
    or get the escrow back."""
    import httpx

    from mesh.customer import submit_job
    from protocol.client import ApiCallError

    try:
        return submit_job(client, body, key=key)
    except httpx.TransportError as error:
        raise UserError(f"no orchestrator answers ({error}); {recovery}") from None
    except ApiCallError as error:
        raise UserError(f"the orchestrator refused the job: {error}; "
                        f"{recovery}") from None


def _job(client: Wallet, job_id: str) -> dict[str, Any]:
    from protocol.client import expect

    return dict(call_service("show the job", lambda: expect(client.http.get(
        f"/v1/jobs/{job_id}"))))


def _follow(read: Callable[[], dict[str, Any]], job_id: str, *, quiet: bool,
            poll_s: float = 1.0) -> dict[str, Any]:
    """Poll the job with a progress bar of its finished tasks until it stops."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    job = read()
    with Progress(TextColumn("job {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                  console=Console(stderr=True), disable=quiet, transient=True) as bar:
        task = bar.add_task(job_id, total=sum(job["tasks"].values()),
                            status=job["status"])
        while True:
            done = sum(n for s, n in job["tasks"].items() if s in ("done", "verified"))
            bar.update(task, completed=done, status=job["status"])
            if job["status"] in FINISHED | STOPPED:
                return job
            time.sleep(poll_s)
            job = read()


@app.command("status")
def status(job: JobIdArg, watch: Annotated[bool, typer.Option(
               "--watch", help="Follow it with a progress bar until it finishes.")] = False,
           orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None,
           data_dir: DataDir = None, as_json: JsonFlag = False) -> None:
    """The job as the orchestrator sees it (tasks by state) and its escrow on chain."""
    import httpx

    from protocol.client import expect

    with user_errors("job status", as_json=as_json):
        job_id = _job_id(job)
        base = service(orchestrator, None)
        with httpx.Client(base_url=base.url, timeout=10.0) as http:
            def read() -> dict[str, Any]:
                return dict(call_service("show the job", lambda: expect(http.get(
                    f"/v1/jobs/{job}"))))
            found = _follow(read, job, quiet=as_json) if watch else read()
        chain = connect_chain(rpc_url, data_dir)
        escrow = chain.escrowed_job(job_id)
        found["escrow"] = None if escrow is None else {
            "status": escrow.status.name.lower(), "amount": escrow.amount,
            "deadline": escrow.deadline, "customer": escrow.customer}
    emit(found, as_json, _show_job)


def _show_job(job: dict[str, Any]) -> None:
    escrow = job.get("escrow")
    rows = {"job": job["job_id"], "status": job["status"], "customer": job["customer"],
            "amount": show_tokens(job["amount"]),
            "tasks": ", ".join(f"{n} {s}" for s, n in sorted(job["tasks"].items())),
            "result root": job.get("merkle_root")}
    if job.get("reason"):
        rows["reason"] = job["reason"]
    if job.get("warning"):
        rows["warning"] = job["warning"]
    if escrow is not None:
        rows["escrow"] = (f"{escrow['status']}, {show_tokens(escrow['amount'])} tokens, due "
                          f"{when(escrow['deadline'])}")
    print_table(rows)


def _download(client: Wallet, job_id: str, out: Path, quiet: bool) -> Any:
    from mesh.customer import download

    return call_service("hand over the results", lambda: download(
        client, job_id, out, show_progress=not quiet))


@app.command("download")
def download(job: JobIdArg,
             out: Annotated[Path, typer.Option("--out", help="Folder for the frames.")],
             wallet: WalletOption, password_file: PasswordFile = None,
             directory: WalletDir = None, orchestrator: OrchestratorUrl = None,
             orchestrator_id: OrchestratorId = None,
             chain_id: Annotated[int | None, typer.Option(
                 help="Chain id signatures are bound to (default: $MESH_CHAIN_ID).")] = None,
             as_json: JsonFlag = False) -> None:
    """Download a job's results, checking every sha256 (signed: the job's customer only)."""
    with user_errors("job download", as_json=as_json):
        _job_id(job)
        client = service(orchestrator, orchestrator_id, chain_id).wallet(
            open_wallet(wallet, password_file, directory))
        try:
            done = _download(client, job, out, as_json)
        finally:
            client.close()
    emit({"job_id": job, "files": [str(p) for p in done.files],
          "frames": [str(p) for p in done.frames], "complete": done.complete}, as_json,
         lambda r: typer.echo(
             f"{len(done.files)} files checked and written to {out}"
             + f", {len(done.frames)} frames"
             + ("" if done.complete else "; the job is not finished yet")))


@app.command("list")
def list_jobs(wallet: WalletOption, password_file: PasswordFile = None,
              directory: WalletDir = None, orchestrator: OrchestratorUrl = None,
              orchestrator_id: OrchestratorId = None, rpc_url: RpcUrl = None,
              data_dir: DataDir = None, as_json: JsonFlag = False) -> None:
    """Your jobs, newest first: those the orchestrator holds (signed) and those a submit on
    this machine escrowed but never handed over, each with its escrow on chain."""
    from protocol.client import expect

    with user_errors("job list", as_json=as_json):
        chain = connect_chain(rpc_url, data_dir)
        account = open_wallet(wallet, password_file, directory)
        client = service(orchestrator, orchestrator_id, chain.deployment.chain_id).wallet(
            account)
        try:
            held = call_service("list your jobs", lambda: expect(client.send("GET",
                                                                               "/v1/jobs")))
        finally:
            client.close()
        rows: list[dict[str, Any]] = [
                {"job_id": record.job_id, "status": f"not submitted ({record.step})",
                 "tasks": {}, "budget": record.amount}
                for record in Submissions(wallet_dir(directory) / "jobs", account.address).all()
                if record.job_id not in {job["job_id"] for job in held}]
        rows += [{"job_id": job["job_id"], "status": job["status"], "tasks": job["tasks"],
                  "budget": job["amount"]} for job in held]
        for row in rows:
            escrow = chain.escrowed_job(bytes.fromhex(str(row["job_id"])[2:]))
            row["escrow"] = "none" if escrow is None else escrow.status.name.lower()
    emit(rows, as_json, _show_jobs)


def _show_jobs(rows: list[dict[str, Any]]) -> None:
    if not rows:
        typer.echo("no jobs yet (`mesh job submit` sends one)")
        return
    print_table([{"job": r["job_id"], "status": r["status"],
                  "tasks": ", ".join(f"{n} {s}" for s, n in sorted(r["tasks"].items())) or "-",
                  "budget": show_tokens(r["budget"]), "escrow": r["escrow"]} for r in rows])
    if any(r["status"].startswith("not submitted") for r in rows):
        typer.echo("a job not submitted: run the `mesh job submit` that made it again to "
                   "finish it, or `mesh job cancel JOB` to take its escrow back")


@app.command("cancel")
def cancel(job: JobIdArg, wallet: WalletOption, password_file: PasswordFile = None,
           directory: WalletDir = None, orchestrator: OrchestratorUrl = None,
           orchestrator_id: OrchestratorId = None, rpc_url: RpcUrl = None,
           data_dir: DataDir = None,
           wait_s: Annotated[float, typer.Option(
               "--wait-s", help="Seconds to wait for the orchestrator's settlement on chain "
               "(run the command again if it takes longer).")] = 120.0,
           as_json: JsonFlag = False) -> None:
    """Stop a job, started or not, and take back what it did not spend. The orchestrator
    stops its tasks and settles it on chain (verified frames paid, the rest refunded); the
    refund then comes to this wallet: at once when nothing was paid, else after the dispute
    window (run it again then). A failed or expired job is refunded the same way."""
    from protocol.client import ApiCallError, expect

    with user_errors("job cancel", as_json=as_json):
        job_id = _job_id(job)
        chain = connect_chain(rpc_url, data_dir)
        account = open_wallet(wallet, password_file, directory)
        escrow = chain.escrowed_job(job_id)
        if escrow is not None and escrow.customer != account.address:
            raise UserError(f"job {job} was escrowed by {escrow.customer}: use that wallet")
        client = service(orchestrator, orchestrator_id, chain.deployment.chain_id).wallet(
            account)
        try:
            try:
                status = expect(client.send("POST", f"/v1/jobs/{job}/cancel"))["status"]
            except ApiCallError as error:
                if error.code != "job_not_found":
                    raise UserError(f"the orchestrator refused to cancel: "
                                    f"{error}") from None
                status = "unknown to the orchestrator"
        finally:
            client.close()
        result: dict[str, Any] = {"job_id": job, "status": status, "refunded": 0}
        if escrow is not None and status in STOPPED:
            with progress("waiting for the orchestrator's settlement on chain", quiet=as_json):
                escrow = _wait_settled(chain, job_id, wait_s)
        if escrow is not None:
            result.update(_take_back(chain, account, escrow, as_json=as_json))
    emit(result, as_json, _show_cancel)


def _wait_settled(chain: MeshChain, job_id: bytes, wait_s: float) -> EscrowedJob | None:
    """The job's escrow once it is no longer funded, or as it is after `wait_s`."""
    from orchestrator.domain.chain_views import EscrowStatus

    deadline = time.monotonic() + wait_s
    while True:
        escrow = chain.escrowed_job(job_id)
        if escrow is None or escrow.status != EscrowStatus.FUNDED or time.monotonic() > deadline:
            return escrow
        time.sleep(1.0)


def _take_back(chain: MeshChain, account: LocalAccount, escrow: EscrowedJob, *,
               as_json: bool) -> dict[str, Any]:
    """What the chain lets the customer take back of `escrow` now: a settled job's refund
    (and what the settlement paid providers), or a funded one's whole escrow once it is
    reclaimable; otherwise when it will be."""
    from orchestrator.chain.errors import ContractError
    from orchestrator.domain.chain_views import EscrowStatus

    job_id = escrow.job_id
    if escrow.status == EscrowStatus.RECLAIMED:
        return {"escrow": "reclaimed before"}
    if escrow.status == EscrowStatus.FUNDED:
        reclaimable_at = escrow.deadline + chain.grace_period()
        if chain.w3.eth.get_block("latest")["timestamp"] <= reclaimable_at:
            return {"escrow": "funded", "reclaimable_at": reclaimable_at}
        with progress("reclaiming the escrow", quiet=as_json):
            tx_hash = chain.account(account).reclaim(job_id).tx_hash
        return {"escrow": "reclaimed", "refunded": escrow.amount, "refund_tx": tx_hash}
    owed = chain.refund_owed(job_id)
    if owed == 0:
        return {"escrow": "settled", "refund_owed": 0}
    taken: dict[str, Any] = {"escrow": "settled", "paid": escrow.amount - owed,
                             "refund_owed": owed}
    try:
        with progress("claiming the refund", quiet=as_json):
            refunded, receipt = chain.account(account).claim_refund(job_id)
    except ContractError as error:
        if error.name != "JobEscrowRefundNotClaimableYet":
            raise
        return taken | {"refund_claimable_at": int(error.arguments["claimable_at"])}
    return taken | {"refunded": refunded, "refund_tx": receipt.tx_hash}


def _show_cancel(result: dict[str, Any]) -> None:
    line = f"job {result['job_id']}: {result['status']}"
    if result.get("paid"):
        line += f"; {show_tokens(result['paid'])} tokens paid for verified work"
    if result["refunded"]:
        line += f"; {show_tokens(result['refunded'])} tokens back in {result['refund_tx']}"
    elif "refund_claimable_at" in result:
        line += (f"; {show_tokens(result['refund_owed'])} tokens refundable from "
                 f"{when(result['refund_claimable_at'])} (the dispute window): run "
                 f"`mesh job cancel {result['job_id']}` again then")
    elif result.get("refund_owed") == 0:
        line += "; its refund was claimed before"
    elif result.get("escrow") == "reclaimed before":
        line += "; its escrow was reclaimed before"
    elif "reclaimable_at" in result:
        line += (f"; not settled on chain yet: run `mesh job cancel {result['job_id']}` again "
                 f"in a minute (or from {when(result['reclaimable_at'])} it reclaims the "
                 "escrow itself)")
    typer.echo(line)
