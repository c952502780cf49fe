"""`mesh job quote` and the quote `mesh job submit` shows before it escrows (issue 35), against
anvil and a real orchestrator process: the quote is the orchestrator's (`POST /v1/quotes`),
a table for people and JSON for scripts; a job no registered node fits says so; submit asks
on a terminal (no: nothing escrowed; yes: escrowed) and, with no terminal and no --yes,
refuses in one line before anything is uploaded or paid."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from mesh.processes import OrchestratorProcess
from orchestrator.chain.sdk import MeshChain
from tests.mesh.commands.conftest import Mesh, one_line_error
from tests.mesh.commands.test_job_pack import stored_blobs
from tests.mesh.commands.test_jobs import TOKEN, TRUSTED, customer


def test_quote_through_the_orchestrator_as_json_and_as_a_table(scene: Path, served: Mesh
                                                                ) -> None:
    asked = ("job", "quote", str(scene), "--frames", "1-3", "--budget", "6", "--providers",
             TRUSTED, "--task-minutes", "5", "--deadline-h", "2")
    done = served(*asked, "--json")
    assert done.exit_code == 0, done.output
    quote = json.loads(done.stdout)
    assert (quote["tasks"], quote["budget"], quote["nodes"]) == (3, 6 * TOKEN, 0)
    assert quote["p_deadline"] == 0.0 and quote["price_min"] is None
    assert quote["warning"] == (f"no registered node among providers {TRUSTED} can take this "
                                "job: escrowed, it would wait until one registers")
    table = served(*asked)
    assert table.exit_code == 0, table.output
    assert "0.0 % chance" in table.stdout and "6 tokens escrowed" in table.stdout
    assert f"no registered node among providers {TRUSTED}" in table.stdout.replace("\n", " ")
    nothing = served("job", "quote", str(scene), "--frames", "1", "--budget", "0")
    assert "give a positive amount" in one_line_error(nothing, command="job quote")
    unreachable = served("job", "quote", str(scene), "--frames", "1", "--budget", "1",
                         "--orchestrator", "http://127.0.0.1:9")
    assert "no orchestrator answers" in one_line_error(unreachable, command="job quote")


def test_submit_without_a_terminal_or_yes_refuses_in_one_line_before_anything_is_sent(
        scene: Path, served: Mesh, chain: MeshChain, service: OrchestratorProcess) -> None:
    address = customer(served)
    before = stored_blobs(service)
    refused = served.signed("job", "submit", str(scene), "--frames", "1", "--budget", "2",
                            "--wallet", "customer")
    assert one_line_error(refused, command="job submit") == (
        "mesh job submit: it asks before escrowing and there is no terminal to answer on: "
        "pass --yes to escrow without asking (`mesh job quote` shows the quote first); "
        "nothing was uploaded or escrowed")
    assert stored_blobs(service) == before
    assert chain.token_balance(address) == 100 * TOKEN

    agreed = served.signed("job", "submit", "--yes", str(scene), "--frames", "1", "--budget",
                           "2", "--wallet", "customer", "--json")
    assert agreed.exit_code == 0, agreed.output
    job = json.loads(agreed.stdout)
    assert job["quote"]["tasks"] == 1 and job["quote"]["budget"] == 2 * TOKEN
    assert job["quote"]["deadline"] == job["deadline"]  # the quote of the spec escrowed
    assert chain.token_balance(address) == 98 * TOKEN


def on_a_terminal(served: Mesh, scene: Path, answer: bytes) -> subprocess.CompletedProcess[str]:
    """`mesh job submit` with a terminal as its stdin, `answer` typed ahead."""
    terminal, stdin = pty.openpty()
    try:
        os.write(terminal, answer)
        return subprocess.run(
            [sys.executable, "-m", "mesh.cli", "job", "submit", str(scene), "--frames", "1",
             "--budget", "2", "--wallet", "customer", "--password-file",
             str(served.password_file)], stdin=stdin, capture_output=True, text=True,
            env={**os.environ, **served.env}, timeout=180, check=False)
    finally:
        os.close(stdin)
        os.close(terminal)


def test_submit_on_a_terminal_shows_the_quote_and_escrows_only_once_told_yes(
        scene: Path, served: Mesh, chain: MeshChain) -> None:
    address = customer(served)
    declined = on_a_terminal(served, scene, b"n\n")
    assert declined.returncode == 2, declined.stderr
    assert "chance" in declined.stderr and "Escrow them? [y/N]" in declined.stderr
    assert declined.stderr.strip().splitlines()[-1].endswith(
        "nothing escrowed: the job was not submitted (its files stay uploaded; the same "
        "command quotes it again)")
    assert "Traceback" not in declined.stderr
    assert chain.token_balance(address) == 100 * TOKEN

    agreed = on_a_terminal(served, scene, b"y\n")
    assert agreed.returncode == 0, agreed.stderr
    assert "resuming job" in agreed.stderr  # the declined run's record, never escrowed
    assert chain.token_balance(address) == 98 * TOKEN
