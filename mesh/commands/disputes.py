"""`mesh dispute` (a customer or a provider, with their own wallet) and `mesh arbiter`.

The chain decides disputes; these commands send the transactions from the user's wallet
and read the orchestrator's evidence bundle, signed by the same wallet (docs/DISPUTES.md).
Every proof a bundle carries is checked against the chain before it is shown as verified.
Heavy imports stay inside the commands so that `mesh --help` stays fast."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

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
    ask,
    checksum,
    connect_chain,
    emit,
    ensure_tokens,
    open_wallet,
    print_table,
    service,
    settings,
    show_tokens,
    tokens,
    user_errors,
    when,
)
from orchestrator.domain.ids import hex0x, unhex

if TYPE_CHECKING:
    from orchestrator.chain.sdk import MeshAccount, MeshChain
    from protocol.client import Wallet

dispute_app = typer.Typer(help="Dispute a settlement or a slash with your own wallet.",
                          no_args_is_help=True)
arbiter_app = typer.Typer(help="Rule disputes: list, read the evidence, re-render, rule.",
                          no_args_is_help=True)

Reason = Annotated[str | None, typer.Option(help="Your case in words; its keccak goes on chain.")]
ReasonFile = Annotated[Path | None, typer.Option(help="A file with your case; its keccak goes "
                                                      "on chain.")]
DisputeId = Annotated[int, typer.Argument(min=1, help="The dispute id (from `open`).")]
WalletOption = Annotated[str | None, typer.Option(
    "--wallet", "--keystore", help="A wallet name in the wallet dir (`mesh wallet list`) or a "
    "keystore file (default: $MESH_WALLET).")]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Access:
    """Whose wallet, and where the chain and the orchestrator are: every command's options."""

    wallet: str | None
    password_file: Path | None
    wallet_dir: Path | None
    orchestrator: str | None
    rpc_url: str | None
    data_dir: Path | None
    orchestrator_id: str | None


@dataclass
class Party:
    """One wallet's ways in: the chain (transactions, reads) and the orchestrator (signed)."""

    chain: MeshChain
    account: MeshAccount
    wallet: Wallet


def _run(command: str, work: Callable[[], T], as_json: bool) -> T:
    with user_errors(command, as_json=as_json):
        return work()
    raise AssertionError("unreachable")  # user_errors exits on every error it catches


def _wallet_name(given: str | None) -> str | None:
    """The wallet a command signs with: `--wallet`, else the `wallet` setting ($MESH_WALLET)."""
    return given if given is not None else settings().wallet


@contextmanager
def _party(access: Access) -> Iterator[Party]:
    name = _wallet_name(access.wallet)
    if name is None:
        raise UserError("name the wallet to sign with: --wallet NAME (or set MESH_WALLET)")
    local = open_wallet(name, access.password_file, access.wallet_dir)
    chain = connect_chain(access.rpc_url, access.data_dir)
    wallet = service(access.orchestrator, access.orchestrator_id,
                     chain.deployment.chain_id).wallet(local)
    try:
        yield Party(chain, chain.account(local), wallet)
    finally:
        wallet.close()


def _evidence_hash(reason: str | None, reason_file: Path | None) -> bytes:
    from eth_utils import keccak

    if reason is not None and reason_file is not None:
        raise UserError("give --reason or --reason-file, not both")
    if reason_file is not None:
        return bytes(keccak(reason_file.read_bytes()))
    return bytes(keccak(text=reason)) if reason else bytes(32)


def _job_bytes(job: str) -> bytes:
    text = job.removeprefix("0x")
    if len(text) != 64:
        raise UserError(f"{job} is not a job id (0x and 64 hex digits)")
    return bytes.fromhex(text)


def _get(party: Party, path: str, query: str = "") -> Any:
    from protocol.client import expect

    headers = party.wallet.signed_headers("GET", path)
    return expect(party.wallet.http.get(path + query, headers=headers))


def _dispute_json(record: Any) -> dict[str, Any]:
    """A dispute as the chain holds it; amounts in token units (strings), times unix."""
    from orchestrator.domain.chain_views import DisputeKind

    slash = record.kind == DisputeKind.SLASH
    return {"dispute_id": record.dispute_id, "kind": record.kind.name.lower(),
            "status": record.status.name.lower(), "opener": record.opener,
            "respondent": record.respondent, "bond": str(record.bond),
            "frozen_amount": str(record.frozen_amount), "subject": hex0x(record.subject),
            "job_id": None if slash else hex0x(record.subject),
            "slash_id": int.from_bytes(record.subject, "big") if slash else None,
            "ruling_deadline": record.ruling_deadline}


# ---------------------------------------------------------------- for people (not --json)


def _about(dispute: dict[str, Any]) -> str:
    if dispute.get("slash_id") is not None:
        return f"slash {dispute['slash_id']}"
    return f"job {dispute.get('job_id') or dispute.get('subject')}"


def _dispute_rows(dispute: dict[str, Any]) -> dict[str, Any]:
    """One dispute (the chain's or the orchestrator's record) as a person reads it: tokens,
    dates, what it is about."""
    rows: dict[str, Any] = {
        "dispute": dispute["dispute_id"], "kind": dispute["kind"], "about": _about(dispute),
        "status": dispute["status"], "opener": dispute["opener"],
        "respondent": dispute["respondent"],
        "bond": f"{show_tokens(int(dispute['bond']))} tokens",
        "frozen": f"{show_tokens(int(dispute['frozen_amount']))} tokens",
        "ruling deadline": when(dispute["ruling_deadline"])}
    for key, label in (("opened_at", "opened"), ("ruled_at", "ruled")):
        if dispute.get(key):
            rows[label] = when(dispute[key])
    for key, label in (("tx", "tx"), ("opened_tx", "opening tx"), ("ruled_tx", "ruling tx"),
                       ("evidence", "evidence hash"), ("outcome", "outcome")):
        if dispute.get(key):
            rows[label] = dispute[key]
    return rows


def _show_dispute(dispute: dict[str, Any]) -> None:
    print_table(_dispute_rows(dispute), title=f"dispute {dispute['dispute_id']}")


def _show_status(result: dict[str, Any]) -> None:
    _show_dispute(result["chain"])
    indexed = result["orchestrator"]
    if "unavailable" in indexed:
        typer.echo(f"the orchestrator's record: {indexed['unavailable']}")
    elif indexed.get("outcome"):
        typer.echo(f"outcome: {indexed['outcome']}")
    else:
        typer.echo(f"the orchestrator has it as {indexed['status']}, no outcome yet")


def _show_list(found: list[dict[str, Any]]) -> None:
    if not found:
        typer.echo("no disputes")
        return
    print_table([{"dispute": d["dispute_id"], "about": _about(d), "status": d["status"],
                  "frozen": show_tokens(int(d["frozen_amount"])),
                  "deadline": when(d["ruling_deadline"])[:10]} for d in found],
                title="disputes (amounts in tokens; `mesh arbiter show ID` for one)")


def _verification_line(report: dict[str, Any]) -> str:
    counts = (f"{report['artifacts_verified']} of {report['artifacts']} results, "
              f"{report['scores_verified']} of {report['scores']} scores")
    if report["verified"]:
        return f"verified on chain ({counts})"
    return f"NOT verified ({counts}): " + "; ".join(report["failures"])


def _job_rows(bundle: dict[str, Any]) -> dict[str, Any]:
    return {"job": bundle["job_id"], "customer": bundle["customer"],
            "status": bundle["status"], "budget": f"{show_tokens(int(bundle['amount']))} tokens",
            "providers": ", ".join(bundle["providers"]) or "none",
            "result root": bundle.get("result_root") or "none",
            "settlement tx": bundle.get("settlement_tx") or "none",
            "proofs": _verification_line(bundle["verification_on_chain"]),
            "disputes": ", ".join(str(d["dispute_id"]) for d in bundle["disputes"]) or "none"}


def _show_tasks(bundle: dict[str, Any]) -> None:
    if bundle["tasks"]:
        print_table([{"task": t["task_id"], "status": t["status"], "node": t["node_id"],
                      "frame": (t["recipe"] or {}).get("frame", ""),
                      "checks": ", ".join(sorted({c["status"] for v in t["verification"]
                                                  for c in v["checks"]})) or "none"}
                     for t in bundle["tasks"]], title="tasks")


def _show_bundle(bundle: dict[str, Any]) -> None:
    """An evidence bundle's summary: what it is about, whether its proofs verify on chain,
    its tasks; the whole bundle is `--json` or `--out FILE`."""
    if bundle["kind"] == "job":
        print_table(_job_rows(bundle), title="evidence of the job")
        _show_tasks(bundle)
    else:
        print_table({"slash": bundle["slash_id"], "provider": bundle["provider"],
                     "reason": bundle["reason"],
                     "amount": f"{show_tokens(int(bundle['amount']))} tokens",
                     "beneficiary": bundle["beneficiary"], "status": bundle["status"],
                     "releasable": when(bundle["releasable_at"]),
                     "evidence hash": bundle["evidence"],
                     "decisions": len(bundle["records"]),
                     "score proofs": len(bundle["scores"])}, title="evidence of the slash")
        if bundle.get("job") is not None:
            print_table(_job_rows(bundle["job"]), title="its job")
            _show_tasks(bundle["job"])
    typer.echo("the whole bundle: --json, or --out FILE")


def _show_reproduced(result: dict[str, Any]) -> None:
    recipe = result["recipe"]
    print_table({"dispute": result["dispute_id"], "task": result["task_id"],
                 "frame": recipe["frame"], "tile": f"{recipe['tile']} of {recipe['tiles']}",
                 "samples": recipe["samples"],
                 "match": "yes" if result["match"] else "NO", "tolerance": result["tolerance"],
                 "largest pixel difference": result["max_abs"],
                 "share over tolerance": result["share_over"], "detail": result["detail"],
                 "render seconds": result["render_s"]}, title="re-rendered here")


# ---------------------------------------------------------------- verifying a bundle


def verify_bundle(chain: MeshChain, bundle: dict[str, Any]) -> dict[str, Any]:
    """Check a job bundle's proofs against the chain: the result root committed by the
    settlement transaction, every artifact's proof under it, every score proof under the
    epoch root on chain. Returns counts and the first failure, if any."""
    from orchestrator.domain import merkle

    def raw(text: str) -> bytes:
        return unhex(text)

    report: dict[str, Any] = {"result_root_on_chain": None, "artifacts_verified": 0,
                              "artifacts": len(bundle["artifacts"]), "scores_verified": 0,
                              "scores": len(bundle["scores"]), "failures": []}
    root = None
    if bundle.get("settlement_tx"):
        root = chain.settled_result_root(bundle["settlement_tx"], raw(bundle["job_id"]))
    if root is None:
        report["failures"].append("no settlement transaction commits this job's result root")
    else:
        report["result_root_on_chain"] = hex0x(root)
        if bundle.get("result_root") != report["result_root_on_chain"]:
            report["failures"].append("the bundle's result root is not the one on chain")
        for artifact in bundle["artifacts"]:
            if merkle.verify([raw(p) for p in artifact["proof"]], root, raw(artifact["sha256"])):
                report["artifacts_verified"] += 1
            else:
                report["failures"].append(f"artifact {artifact['sha256']} does not verify")
    for score in bundle["scores"]:
        committed = chain.epoch_root(int(score["epoch"]))
        leaf = merkle.score_leaf(score["provider"], int(score["score_bps"]),
                                 raw(score["telemetry_digest"]))
        if committed is not None and merkle.verify([raw(p) for p in score["proof"]],
                                                   committed, leaf):
            report["scores_verified"] += 1
        else:
            report["failures"].append(f"score of {score['provider']} in epoch "
                                      f"{score['epoch']} does not verify on chain")
    report["verified"] = not report["failures"]
    return report


def _bundle(party: Party, *, job: str | None, slash: int | None) -> dict[str, Any]:
    if (job is None) == (slash is None):
        raise UserError("name one of --job or --slash")
    if job is not None:
        bundle: dict[str, Any] = _get(party, f"/v1/jobs/0x{_job_bytes(job).hex()}/evidence")
        bundle["verification_on_chain"] = verify_bundle(party.chain, bundle)
        return bundle
    bundle = _get(party, f"/v1/slashes/{slash}/evidence")
    if bundle.get("job") is not None:
        bundle["job"]["verification_on_chain"] = verify_bundle(party.chain, bundle["job"])
    return bundle


# ---------------------------------------------------------------- mesh dispute


def _prove_backers(party: Party, job_id: bytes, addresses: set[str]) -> None:
    """Put on chain what a dispute of the job needs about `addresses` (anyone may send it):
    what the job paid each of them (`provePayout`, from the settlement's own calldata). That
    makes a provider a party to the job's disputes, and a dispute freezes at most that."""
    bundle: dict[str, Any] = _get(party, f"/v1/jobs/0x{job_id.hex()}/evidence")
    settlement_tx = bundle.get("settlement_tx")
    pairs = party.chain.settlement_pairs(settlement_tx) if settlement_tx else []
    paid = {provider.lower() for job, provider, _payout, _root in pairs if job == job_id}
    for address in addresses:
        if address.lower() in paid and not party.chain.payout_proven(job_id, address):
            party.account.prove_payout(job_id, address, pairs)


@dispute_app.command("open")
def dispute_open(
    wallet: WalletOption = None,
    job: Annotated[str | None, typer.Option(help="Dispute this job's settlement (0x id).")] = None,
    against: Annotated[str | None, typer.Option(
        help="The other side: a provider that backed the job (you are the customer) or the "
             "job's customer (you are a provider).")] = None,
    amount: Annotated[str | None, typer.Option(help="Tokens of their payout (or refund) to "
                                                    "freeze (e.g. 0.5).")] = None,
    slash: Annotated[int | None, typer.Option(min=1, help="Dispute this slash of your stake "
                                                           "(its id).")] = None,
    reason: Reason = None, reason_file: ReasonFile = None,
    yes: Annotated[bool, typer.Option("--yes", help="Post the bond without asking (scripts)."
                                      )] = False,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """Open a dispute, posting the bond from your wallet (approved first if needed): the bond
    is announced first and posted once you confirm (or with --yes)."""

    def work() -> dict[str, Any]:
        evidence = _evidence_hash(reason, reason_file)
        if slash is not None and (job is not None or against is not None or amount is not None):
            raise UserError("--slash takes no --job, --against or --amount")
        if slash is None and (job is None or against is None or amount is None):
            raise UserError("name --job, --against and --amount (or --slash)")
        with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                           data_dir, orchestrator_id)) as party:
            what = (_check_slash(party, slash) if slash is not None
                    else f"freezing {amount} tokens of job {job}")
            bond = party.chain.dispute_bond()
            ensure_tokens(party.chain, party.account.address, bond, "the dispute's bond")
            _announce_bond(bond, what, yes=yes)
            if slash is not None:
                dispute_id, receipt = party.account.open_slash_dispute(slash, evidence)
            else:
                assert job is not None and against is not None and amount is not None
                other = checksum(against)
                _prove_backers(party, _job_bytes(job), {party.account.address, other})
                dispute_id, receipt = party.account.open_settlement_dispute(
                    _job_bytes(job), other, tokens(amount), evidence)
            record = party.chain.dispute_of(dispute_id)
            assert record is not None
            return {**_dispute_json(record), "tx": receipt.tx_hash,
                    "evidence": hex0x(evidence)}

    emit(_run("dispute open", work, as_json), as_json, _show_dispute)


def _check_slash(party: Party, slash_id: int) -> str:
    """Refuse, before anything is sent, a slash the chain does not have or that is not this
    wallet's (the contract would answer DisputesNotAParty for both)."""
    record = party.chain.slash_of(slash_id)
    if record is None:
        raise UserError(f"there is no slash {slash_id} on chain: give the chain's slash id "
                        "(the dashboard's Slashes table, its slash column)")
    if record.provider != party.account.address:
        raise UserError(f"slash {slash_id} took the stake of {record.provider}, not of this "
                        f"wallet ({party.account.address}): only the slashed provider may "
                        "dispute a slash")
    return f"disputing slash {slash_id} ({show_tokens(record.amount)} tokens)"


def _announce_bond(bond: int, what: str, *, yes: bool) -> None:
    """Say what the dispute costs before it is paid, and ask unless told --yes."""
    line = (f"{what} posts a bond of {show_tokens(bond)} tokens from your wallet: returned "
            "if the dispute is granted, paid to the other side if it is dismissed")
    ask(line, "Post it?", yes=yes, declined="nothing sent: the dispute was not opened")


@dispute_app.command("status")
def dispute_status(
    dispute_id: DisputeId, wallet: WalletOption = None,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """The dispute as the chain has it, and the orchestrator's record of its outcome (signed:
    a party's or an arbiter's wallet; with none, the chain's record alone)."""
    import httpx

    from protocol.client import ApiCallError

    def work() -> dict[str, Any]:
        record = connect_chain(rpc_url, data_dir).dispute_of(dispute_id)
        if record is None:
            raise UserError(f"there is no dispute {dispute_id} on chain")
        indexed: Any = {"unavailable": "sign with --wallet or MESH_WALLET to read it"}
        if _wallet_name(wallet) is not None:
            with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                               data_dir, orchestrator_id)) as party:
                try:
                    indexed = _get(party, f"/v1/disputes/{dispute_id}")
                except (ApiCallError, httpx.TransportError) as error:  # not indexed yet, down
                    indexed = {"unavailable": str(error)}
        return {"chain": _dispute_json(record), "orchestrator": indexed}

    emit(_run("dispute status", work, as_json), as_json, _show_status)


@dispute_app.command("evidence")
def dispute_evidence(
    wallet: WalletOption = None,
    job: Annotated[str | None, typer.Option(help="A job's bundle (0x id).")] = None,
    slash: Annotated[int | None, typer.Option(min=1, help="A slash's bundle (its id).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the bundle (JSON) here.")] = None,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """Fetch the evidence bundle of a job or a slash and check its proofs on chain."""

    def work() -> dict[str, Any]:
        with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                           data_dir, orchestrator_id)) as party:
            bundle = _bundle(party, job=job, slash=slash)
        if out is not None:
            out.write_text(json.dumps(bundle, indent=2, sort_keys=True))
        return bundle

    emit(_run("dispute evidence", work, as_json), as_json, _show_bundle)


@dispute_app.command("default")
def dispute_default(
    dispute_id: DisputeId, wallet: WalletOption = None,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """Apply the default ruling to a dispute nobody ruled by its deadline (anyone may)."""

    def work() -> dict[str, Any]:
        with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                           data_dir, orchestrator_id)) as party:
            receipt = party.account.apply_default_ruling(dispute_id)
            record = party.chain.dispute_of(dispute_id)
            assert record is not None
            return {**_dispute_json(record), "tx": receipt.tx_hash}

    emit(_run("dispute default", work, as_json), as_json, _show_dispute)


# ---------------------------------------------------------------- mesh arbiter


@arbiter_app.command("list")
def arbiter_list(
    wallet: WalletOption = None,
    every: Annotated[bool, typer.Option("--all", help="Ruled ones too.")] = False,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """Open disputes (with --all: every one), as the orchestrator indexed them."""

    def work() -> list[Any]:
        with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                           data_dir, orchestrator_id)) as party:
            found: list[Any] = _get(party, "/v1/disputes", "" if every else "?open=true")
            return found

    emit(_run("arbiter list", work, as_json), as_json, _show_list)


def _subject_bundle(party: Party, dispute: dict[str, Any]) -> dict[str, Any]:
    """The bundle a dispute is about: its job's, or its slash's."""
    if dispute["kind"] == "slash":
        return _bundle(party, job=None, slash=int(dispute["slash_id"]))
    return _bundle(party, job=dispute["job_id"], slash=None)


@arbiter_app.command("show")
def arbiter_show(
    dispute_id: DisputeId, wallet: WalletOption = None,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """One dispute with its evidence bundle, every proof checked on chain."""

    def work() -> dict[str, Any]:
        with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                           data_dir, orchestrator_id)) as party:
            dispute = _get(party, f"/v1/disputes/{dispute_id}")
            return {"dispute": dispute, "evidence": _subject_bundle(party, dispute)}

    emit(_run("arbiter show", work, as_json), as_json, _show_shown)


def _show_shown(result: dict[str, Any]) -> None:
    _show_dispute(result["dispute"])
    _show_bundle(result["evidence"])


def _download(party: Party, job_id: str, sha256: str, target: Path) -> Path:
    from protocol.client import ApiCallError, expect, sha256_file

    path = f"/v1/jobs/{job_id}/evidence/{sha256}"
    response = party.wallet.http.get(path, headers=party.wallet.signed_headers("GET", path))
    if response.status_code != 200:
        expect(response)
    target.write_bytes(response.content)
    if sha256_file(target) != sha256:
        raise ApiCallError(f"{sha256[:12]}… arrived with another sha256")
    return target


@arbiter_app.command("reproduce")
def arbiter_reproduce(
    dispute_id: DisputeId, wallet: WalletOption = None,
    task: Annotated[int | None, typer.Option(help="The task (tile) to re-render; needed when "
                                                  "the job has several.")] = None,
    workdir: Annotated[Path, typer.Option(help="Scratch folder for the scene, the result and "
                                               "the sandbox.")] = Path(".mesh-reproduce"),
    threads: Annotated[int, typer.Option(min=1, help="Render threads.")] = 2,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """Re-render a disputed tile here (Cycles on CPU, the agent's renderer) from exactly the
    job's inputs (its scene and the pack its signed spec names, each file hash-checked and laid
    out as the agent lays it out) and compare its pixels with the result the provider
    delivered."""
    from agent.workloads.blender import fetch_pack
    from mesh.reproduce import LIMITS, reproduce

    def work() -> dict[str, Any]:
        with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                           data_dir, orchestrator_id)) as party:
            dispute = _get(party, f"/v1/disputes/{dispute_id}")
            bundle = _subject_bundle(party, dispute)
            job = bundle if bundle["kind"] == "job" else bundle.get("job")
            if job is None:
                raise UserError(f"dispute {dispute_id} is about no job this orchestrator ran")
            renders = [t for t in job["tasks"] if t["recipe"] is not None and t["result_sha256"]]
            chosen = [t for t in renders if task is None or t["task_id"] == task]
            if len(chosen) != 1:
                ids = ", ".join(str(t["task_id"]) for t in renders) or "none"
                raise UserError(f"name one rendered task with --task (this job's: {ids})")
            (picked,) = chosen
            recipe = picked["recipe"]
            workdir.mkdir(parents=True, exist_ok=True)
            assets = recipe.get("assets") or {}
            typer.echo(f"downloading scene, {len(assets)} pack files and result of task "
                       f"{picked['task_id']}…", err=True)
            scene = _download(party, job["job_id"], recipe["scene_sha256"],
                              workdir / "scene.blend")
            pack = workdir / "pack"
            pack.mkdir(exist_ok=True)
            fetched = fetch_pack(assets, lambda sha256: _download(
                party, job["job_id"], sha256, pack / sha256), LIMITS.pack_bytes)
            result = _download(party, job["job_id"], picked["result_sha256"],
                               workdir / f"result-{picked['task_id']}")
        typer.echo(f"rendering frame {recipe['frame']} tile {recipe['tile']}/{recipe['tiles']}"
                   f" at {recipe['samples']} samples…", err=True)
        found = reproduce(recipe, scene=scene, result=result, workdir=workdir, threads=threads,
                          assets=fetched)
        return {"dispute_id": dispute_id, "task_id": picked["task_id"], "recipe": recipe,
                **found.as_json()}

    emit(_run("arbiter reproduce", work, as_json), as_json, _show_reproduced)


@arbiter_app.command("rule")
def arbiter_rule(
    dispute_id: DisputeId, wallet: WalletOption = None,
    grant: Annotated[bool, typer.Option(
        "--grant/--dismiss", help="For the opener (refund / reverse the slash) or the "
                                  "respondent (the decision stands).")] = False,
    slash_amount: Annotated[str | None, typer.Option(
        help="Granted customer dispute only: tokens of the provider's stake to slash, at most "
             "the frozen payout.")] = None,
    reason: Reason = None, reason_file: ReasonFile = None,
    password_file: PasswordFile = None, wallet_dir: WalletDir = None,
    orchestrator: OrchestratorUrl = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
    orchestrator_id: OrchestratorId = None, as_json: JsonFlag = False,
) -> None:
    """Rule a dispute before its deadline (ARBITER_ROLE); the hash of your reasoning goes on
    chain with the ruling."""

    def work() -> dict[str, Any]:
        evidence = _evidence_hash(reason, reason_file)
        with _party(Access(wallet, password_file, wallet_dir, orchestrator, rpc_url,
                           data_dir, orchestrator_id)) as party:
            receipt = party.account.resolve_dispute(dispute_id, granted=grant,
                                                    slash_amount=0 if slash_amount is None
                                                    else tokens(slash_amount),
                                                    evidence=evidence)
            record = party.chain.dispute_of(dispute_id)
            assert record is not None
            return {**_dispute_json(record), "tx": receipt.tx_hash,
                    "evidence": hex0x(evidence)}

    emit(_run("arbiter rule", work, as_json), as_json, _show_dispute)
