"""`mesh job submit|status|cancel` and `mesh nodes` against anvil and a real orchestrator
process: submit uploads the .blend, escrows on chain and submits the signed spec in one step;
a job restricted to named providers and a region carries that constraint to its tasks."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from eth_utils import keccak
from sqlalchemy import select
from sqlalchemy.orm import Session

from mesh.commands import jobs as jobs_command
from mesh.cutproxy import CutProxy
from mesh.processes import OrchestratorProcess
from orchestrator.api.schemas import JobSpec
from orchestrator.chain.anvil import dev_account
from orchestrator.chain.sdk import MeshChain
from orchestrator.db.jobs import needs_from_json
from orchestrator.db.models import Task
from orchestrator.db.session import make_engine
from orchestrator.domain.chain_views import EscrowStatus
from protocol.client import Wallet, expect
from tests.mesh.commands.conftest import ORCHESTRATOR_ID, Mesh, one_line_error

TOKEN = 10**18
TRUSTED = dev_account(6).address


def customer(mesh: Mesh) -> str:
    address = mesh.new_wallet("customer")
    assert mesh("tokens", "mint", "customer", "100").exit_code == 0
    return address


def test_submit_escrowsAndSubmitsInOneStep_withTheProviderAndRegionConstraint(
        scene: Path, served: Mesh, chain: MeshChain, service: OrchestratorProcess) -> None:
    address = customer(served)
    done = served.signed("job", "submit", "--yes", str(scene), "--frames", "1-3", "--budget",
                         "7.5", "--wallet", "customer", "--providers", TRUSTED.lower(),
                         "--region", "eu", "--samples", "16", "--json")
    assert done.exit_code == 0, done.output
    job = json.loads(done.stdout)
    assert (job["status"], job["tasks"]) == ("funded", {"pending": 3})
    # TRUSTED has no node: the answer says the job would wait, and how to get the money back.
    assert job["warning"].startswith(f"no registered node among providers {TRUSTED} can take")
    assert job["scene"] == {"blender": "5.0.1", "frames": [1, 72], "resolution": [160, 120],
                            "engine": "CYCLES"}  # as the pinned Blender read the file
    escrow = chain.escrowed_job(bytes.fromhex(job["job_id"][2:]))
    assert escrow is not None and escrow.status == EscrowStatus.FUNDED
    assert (escrow.customer, escrow.amount) == (address, 7.5 * TOKEN)
    assert chain.token_balance(address) == 100 * TOKEN - 7.5 * TOKEN

    engine = make_engine(f"sqlite:///{service_db(service)}")
    with Session(engine) as session:
        needs = [needs_from_json(n) for n in session.scalars(
            select(Task.needs).where(Task.job_id == job["job_id"]))]
    engine.dispose()
    assert [(n.providers, n.regions) for n in needs] == [({TRUSTED}, {"eu"})] * 3
    spec = JobSpec.model_validate({"workload": {
        "kind": "blender", "blend_sha256": job["blend_sha256"], "frames": {"start": 1, "end": 3},
        "samples": 16}, "needs": {"providers": [TRUSTED], "regions": ["eu"]},
        "deadline": job["deadline"]})
    assert escrow.spec_hash == spec.canonical_hash()  # the escrow names exactly this spec

    status = served("job", "status", job["job_id"], "--json")
    assert status.exit_code == 0, status.output
    shown = json.loads(status.stdout)
    assert (shown["status"], shown["escrow"]["status"]) == ("funded", "funded")
    human = served("job", "status", job["job_id"])
    assert "3 pending" in human.stdout
    assert "`mesh job cancel` refunds its escrow at once" in human.stdout


def service_db(service: OrchestratorProcess) -> Path:
    return Path(service._env["MESH_DATA_DIR"]) / "mesh.db"


def test_cancel_ofAJobNoNodeTook_refundsTheWholeEscrowAtOnce(
        scene: Path, served: Mesh, chain: MeshChain) -> None:
    address = customer(served)
    done = served.signed("job", "submit", "--yes", str(scene), "--frames", "1", "--budget", "4",
                         "--wallet", "customer", "--deadline-h", "1", "--json")
    job = json.loads(done.stdout)
    cancelled = served.signed("job", "cancel", job["job_id"], "--wallet", "customer", "--json")
    assert cancelled.exit_code == 0, cancelled.output
    first = json.loads(cancelled.stdout)
    assert (first["status"], first["paid"], first["refunded"]) == ("cancelled", 0, 4 * TOKEN)
    assert chain.token_balance(address) == 100 * TOKEN  # not after deadline + grace: now
    assert json.loads(served("job", "status", job["job_id"], "--json").stdout)["tasks"] == {
        "failed": 1}
    escrow = chain.escrowed_job(bytes.fromhex(job["job_id"][2:]))
    assert escrow is not None and escrow.status == EscrowStatus.SETTLED

    again = served.signed("job", "cancel", job["job_id"], "--wallet", "customer")
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == (f"job {job['job_id']}: cancelled; its refund was claimed "
                                    "before")


def test_cancel_says_what_was_paid_and_what_comes_back_in_tokens(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A running job cancelled after one verified frame: what the frame was paid, and when
    the rest can be claimed (someone was paid, so after the dispute window)."""
    job = "0x" + "ab" * 32
    jobs_command._show_cancel({"job_id": job, "status": "cancelled", "refunded": 0,
                               "escrow": "settled", "paid": 2 * TOKEN,
                               "refund_owed": 6 * TOKEN, "refund_claimable_at": 0})
    jobs_command._show_cancel({"job_id": job, "status": "failed", "refunded": 8 * TOKEN,
                               "escrow": "settled", "paid": 0, "refund_owed": 8 * TOKEN,
                               "refund_tx": "0x99"})
    assert capsys.readouterr().out.splitlines() == [
        f"job {job}: cancelled; 2 tokens paid for verified work; 6 tokens refundable from "
        f"1970-01-01 00:00:00 UTC (the dispute window): run `mesh job cancel {job}` again then",
        f"job {job}: failed; 8 tokens back in 0x99"]


def test_cancel_byAnotherWallet_isOneLine(scene: Path, served: Mesh) -> None:
    customer(served)
    job = json.loads(served.signed("job", "submit", "--yes", str(scene), "--frames", "1",
                                   "--budget", "1", "--wallet", "customer", "--json").stdout)
    served.new_wallet("stranger")
    error = one_line_error(served.signed("job", "cancel", job["job_id"], "--wallet",
                                         "stranger"), command="job cancel")
    assert "use that wallet" in error


def test_submit_mistakes_areOneLine_andEscrowNothing(scene: Path, served: Mesh, mesh: Mesh,
                                                     chain: MeshChain) -> None:
    address = customer(served)
    blend = scene
    cases = {
        ("--frames", "9-2"): "the range ends before it starts",
        ("--frames", "x"): "give one frame (7) or a range (1-24)",
        ("--providers", "0x12"): "is not an address",
        ("--budget", "1000"): "holds 100 tokens, this budget needs 1000",
        ("--budget", "-1"): "give a positive amount",
        ("--tiles", "65"): "workload.blender.tiles: Input should be less than or equal to 64",
    }
    for (option, value), message in cases.items():
        args = {"--frames": "1", "--budget": "1", option: value}
        result = served.signed("job", "submit", "--yes", str(blend), "--wallet", "customer",
                               *[item for pair in args.items() for item in pair])
        assert message in one_line_error(result, command="job submit"), (option, value)
    assert "is not a file" in one_line_error(served.signed(
        "job", "submit", "--yes", str(served.root / "missing.blend"), "--frames", "1",
        "--budget", "1", "--wallet", "customer"), command="job submit")
    notes, cut = served.root / "notes.txt", served.root / "cut.blend"
    notes.write_text("not a scene\n")
    cut.write_bytes(blend.read_bytes()[:5000])  # a .blend cut short in transfer
    for bad, reason in ((notes, "File format is not supported"), (cut, "Missing DNA block")):
        assert one_line_error(served.signed(
            "job", "submit", "--yes", str(bad), "--frames", "1", "--budget", "1", "--wallet",
            "customer"), command="job submit") == (
            f"mesh job submit: {bad} is not a scene Blender can open ({reason}); nothing was "
            "uploaded or escrowed")
    unreachable = served.signed("job", "submit", "--yes", str(blend), "--frames", "1",
                                "--budget", "1", "--wallet", "customer", "--orchestrator",
                                "http://127.0.0.1:9")
    assert "no orchestrator answers" in one_line_error(unreachable, command="job submit")
    assert chain.token_balance(address) == 100 * TOKEN  # nothing escrowed by any of them
    wrong_id = served.signed("job", "list", "--wallet", "customer", "--orchestrator-id",
                             "someone-else")  # docs that never named the grid's id
    assert f"this orchestrator's id is '{ORCHESTRATOR_ID}'" in one_line_error(
        wrong_id, command="job list")
    assert "no job" in one_line_error(served("job", "status", "0x" + "ab" * 32),
                                      command="job status")


def test_nodes_listsWhatProvidersRegistered(served: Mesh, service: OrchestratorProcess,
                                            chain: MeshChain) -> None:
    provider = dev_account(5)
    wallet = Wallet.connect(service.base_url, bytes(provider.key),
                            chain_id=chain.deployment.chain_id, orchestrator_id=ORCHESTRATOR_ID)
    node_id = "cli-node-" + keccak(text=served.root.name).hex()[:8]
    chain.account(provider).stake(10 * TOKEN)  # a node counts once its provider has staked
    expect(wallet.send("POST", "/v1/nodes", {
        "node_id": node_id, "gpu_model": "RTX4090", "vram_gb": 24, "compute_capability": 8.9,
        "region": "eu", "price_per_gpu_hour": 100, "slots": 2}))
    wallet.close()
    api = expect(httpx.get(f"{service.base_url}/v1/nodes", timeout=10.0,
                           params={"provider": provider.address}))
    assert {n["node_id"]: n["tier"] for n in api}[node_id] == "standard"  # a word, not 1
    listed = served("nodes", "--provider", provider.address, "--json")
    assert listed.exit_code == 0, listed.output
    (node,) = [n for n in json.loads(listed.stdout) if n["node_id"] == node_id]
    assert (node["provider"], node["region"], node["slots"], node["health"], node["tier"]) == (
        provider.address, "eu", 2, "alive", "standard")
    served.env["COLUMNS"] = "80"
    human = served("nodes")
    assert node_id in human.stdout and "RTX4090 24G x2" in human.stdout
    assert max(map(len, human.stdout.splitlines())) <= 80, human.stdout
    assert "standard" in human.stdout  # the tier by name, as on the dashboard
    assert "no orchestrator answers" in one_line_error(
        served("nodes", "--orchestrator", "http://127.0.0.1:9"), command="nodes")


def test_aSubmissionRefusedAfterTheEscrow_saysHowToGetTheEscrowBack(
        served: Mesh, service: OrchestratorProcess, chain: MeshChain) -> None:
    from mesh.commands.common import UserError
    from mesh.commands.common import service as service_of
    from mesh.commands.jobs import _submit_once

    client = service_of(service.base_url, ORCHESTRATOR_ID, chain.deployment.chain_id).wallet(
        dev_account(4))
    scene = b"a scene this customer uploaded"
    scene_sha = hashlib.sha256(scene).hexdigest()
    spec = JobSpec.model_validate({"workload": {
        "kind": "blender", "blend_sha256": scene_sha, "frames": {"start": 1, "end": 1}},
        "deadline": 2_000_000_000}).model_dump(mode="json")
    try:
        client.upload(scene_sha, scene)
        _submit_once(client, {"job_id": "0x" + "77" * 32, "spec": spec}, "key-0077",
                     recovery="RECOVER")
    except UserError as refused:
        message = str(refused)
    finally:
        client.close()
    assert message == ("the orchestrator refused the job: no funded escrow for this job id on "
                       "chain (escrow_missing); RECOVER")


def test_ctrlC_afterTheEscrow_thenTheSameCommandAgain_paysOnce_andSubmitsThatJob(
        scene: Path, served: Mesh, chain: MeshChain, service: OrchestratorProcess) -> None:
    """A real `mesh job submit` process gets SIGINT (what Ctrl-C sends) the moment it hands
    the escrowed job over; the same command run again finishes that job, escrowing nothing
    more, and `mesh job list` shows it with full ids."""
    address = customer(served)
    blend = scene
    command = ["job", "submit", "--yes", str(blend), "--frames", "1-2", "--budget", "3", "--wallet",
               "customer", "--json"]
    proxy = CutProxy(service.port).restore()
    submit: subprocess.Popen[str] | None = None

    def ctrl_c_at_the_handover(request: bytes, response: bytes | None) -> bool:
        if response is None and request.startswith(b"POST /v1/jobs ") and submit is not None:
            submit.send_signal(signal.SIGINT)
            return False
        return True

    proxy.tap = ctrl_c_at_the_handover
    try:
        submit = subprocess.Popen(
            [sys.executable, "-m", "mesh.cli", *command, "--password-file",
             str(served.password_file)], env={**os.environ, **served.env,
                                              "MESH_ORCHESTRATOR_URL": proxy.url},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, interrupted = submit.communicate(timeout=120)
    finally:
        proxy.cut()
        if submit is not None and submit.poll() is None:
            submit.kill()
    assert submit.returncode != 0, interrupted
    assert chain.token_balance(address) == 97 * TOKEN  # escrowed, never handed over

    again = served.signed(*command)

    assert again.exit_code == 0, again.output
    job = json.loads(again.stdout)
    assert f"resuming job {job['job_id']}" in again.stderr
    assert (job["status"], job["tasks"]) == ("funded", {"pending": 2})
    assert chain.token_balance(address) == 97 * TOKEN  # paid once
    escrow = chain.escrowed_job(bytes.fromhex(job["job_id"][2:]))
    assert escrow is not None and (escrow.customer, escrow.amount) == (address, 3 * TOKEN)
    listed = served.signed("job", "list", "--wallet", "customer", "--json")
    assert listed.exit_code == 0, listed.output
    assert [(j["job_id"], j["status"], j["escrow"]) for j in json.loads(listed.stdout)] == [
        (job["job_id"], "funded", "funded")]
    table = served.signed("job", "list", "--wallet", "customer")
    assert job["job_id"] in table.stdout  # the whole id, not a prefix
    third = served.signed(*command)  # taken once: the same command again is a new job
    assert third.exit_code == 0 and json.loads(third.stdout)["job_id"] != job["job_id"]
    assert chain.token_balance(address) == 94 * TOKEN
