"""The two ways `mesh up` runs a local grid: `serve` (N steady agents and the live board until
Ctrl-C) and `run` (the demo's steps, `mesh.demo.steps`, then its outputs and checks; with
`stay`, the grid keeps serving after a passed demo). Either way every process it started is
gone when it returns."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live

from mesh.demo.board import Board, Node
from mesh.demo.checks import Check, report
from mesh.demo.outputs import contact_sheet, rs_plot, write_summary
from mesh.demo.steps import Demo, DemoError
from mesh.localgrid import GridError, grid_folder, local_grid
from mesh.processes import ServiceError, adopt_orphans, reap_descendants, reap_orphans
from orchestrator.chain.anvil import dev_account
from orchestrator.chain.errors import ChainError
from protocol.client import ApiCallError

# The service's settings for a demo-sized grid: leases lapse 4 s after the last renewal, the
# staking decisions run every second, and each result is cut into 2 verification windows (a
# check is a Blender process of its own: on two cores, fewer and larger windows are faster).
# No RS floor: every node shares one host, so the probes' jitter measures that host's CPU
# load, not a network; on a busy 2-core machine it pushed every node's RS under the default
# floor (0.5) and the last frames waited forever. RS still ranks the nodes and prices the
# collateral, and the board shows it.
SERVICE_ENV = {"MESH_PLS_DECIDE_INTERVAL_S": "1", "MESH_VERIFICATION_WINDOWS": "2",
               "MESH_PLS_MIN_RS": "0"}
OUT = Path(".mesh/demo")


def serve(*, providers: int, out: Path) -> None:
    """`mesh up`: the grid with `providers` steady agents, the live board until Ctrl-C."""
    adopt_orphans()
    interrupt_on_sigterm()
    console = Console(soft_wrap=True)
    try:
        with grid_folder(out), local_grid(out) as grid:
            board = Board(grid, grid.chain, console)
            try:
                for i in range(1, providers + 1):
                    board.nodes.append(Node(grid.agent(f"node-{i}").start(), "steady",
                                            "steady"))
                deployment = grid.chain.deployment
                env_file = grid.client_env()
                console.print(
                    f"[bold]local grid up[/] (Ctrl-C stops everything)\n"
                    f"  mesh commands: `set -a; . {env_file}; set +a` (wallets customer and "
                    f"arbiter, password in {env_file.parent / 'wallets' / 'password'})\n"
                    f"  chain        {grid.rpc_url} (chain id {deployment.chain_id}); token "
                    f"{deployment.token}, StakeManager {deployment.stake_manager}, JobEscrow "
                    f"{deployment.job_escrow}\n"
                    f"  orchestrator {grid.url} (--orchestrator-id "
                    f"{grid.env['MESH_ORCHESTRATOR_ID']}, admin key "
                    f"{grid.env['MESH_ADMIN_KEY']}); data in {grid.data_dir}\n"
                    f"  customer     anvil dev account 4, {dev_account(4).address}\n"
                    f"  agents       {providers}, keystores and logs under {grid.root}/node-*")
                stay_until_interrupted(board)
            finally:
                board.close()
    except KeyboardInterrupt:
        console.print("[yellow]stopped: every process `mesh up` started is gone[/]")
    finally:
        reap_descendants()


def run(*, providers: int = 4, out: Path = OUT, stay: bool = False) -> None:
    """Play the demo into `out`; exit non-zero if a step fails or a check does not hold. With
    `stay`, a passed demo's grid keeps serving (the dashboard, the CLI) until Ctrl-C."""
    if providers < 4:
        raise DemoError("the demo needs at least 4 providers: two honest ones check each "
                        "other, one churns, one cheats")
    began = time.monotonic()
    adopt_orphans()
    interrupt_on_sigterm()
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    demo: Demo | None = None
    try:
        with grid_folder(out), local_grid(out / "grid", **SERVICE_ENV) as grid:
            chain = grid.chain
            console.print(f"[bold]anvil[/] {grid.rpc_url}; token {chain.deployment.token}, "
                          f"StakeManager {chain.deployment.stake_manager}, JobEscrow "
                          f"{chain.deployment.job_escrow}")
            console.print(f"[bold]orchestrator[/] `mesh orchestrator serve` at {grid.url} "
                          f"(SQLite in {grid.data_dir}); dashboard at {grid.url}/dashboard "
                          f"(admin key {grid.env['MESH_ADMIN_KEY']}); every log under "
                          f"{grid.root}")
            demo = Demo(grid, chain, console, providers, out)
            try:
                checks, summary = demo.play()
                contact_sheet(sorted((out / "frames").glob("*.png")), out / "contact_sheet.png")
                rs_plot(demo.board.nodes, demo.events, out / "rs_over_time.png")
                summary["wall_s"] = round(time.monotonic() - began, 1)
                summary["checks_passed"] = all(c.ok for c in checks)
                write_summary(summary, out / "summary.json")
                if stay:
                    results(console, out, summary, checks, demo.total_gas)
                    env_file = grid.client_env()
                    console.print(f"[bold]the grid stays up[/]: dashboard at {grid.url}/dashboard "
                                  f"(admin key {grid.env['MESH_ADMIN_KEY']}); `mesh` commands "
                                  f"after `set -a; . {env_file}; set +a` (wallets customer and "
                                  f"arbiter, password in {env_file.parent / 'wallets'}"
                                  "/password); Ctrl-C stops everything")
                    stay_until_interrupted(demo.board)
            except (ChainError, DemoError, GridError, ApiCallError, httpx.HTTPError) as exc:
                console.print(demo.board.table())
                rs_plot(demo.board.nodes, demo.events, out / "rs_over_time.png")
                console.print(f"[bold red]✗ a step failed:[/] {exc}")
                if grid.service is not None:
                    console.print(f"[dim]orchestrator log (last lines):\n"
                                  f"{grid.service.log_tail()}[/]")
                console.print(f"every log is under {grid.root}")
                raise SystemExit(1) from exc
            finally:
                demo.board.close()
    except ServiceError as exc:
        console.print(f"[bold red]✗ the orchestrator did not start:[/] {exc}")
        raise SystemExit(1) from exc
    except KeyboardInterrupt:
        if stay and (out / "summary.json").is_file():
            console.print("[yellow]stopped: every process the demo started is gone[/]")
            return
        console.print("[yellow]interrupted: every process the demo started is stopped[/]")
        raise SystemExit(130) from None
    finally:
        reap_descendants()
    results(console, out, summary, checks, demo.total_gas)


def results(console: Console, out: Path, summary: dict[str, Any], checks: list[Check],
            total_gas: int) -> None:
    """Where the demo's outputs are, its headline figures, and its checks (exit 1 if one is
    off)."""
    console.rule("[bold]results")
    console.print(f"frames        {out / 'frames'}\ncontact sheet {out / 'contact_sheet.png'}\n"
                  f"RS plot       {out / 'rs_over_time.png'}\nsummary       "
                  f"{out / 'summary.json'}\nlogs          {out / 'grid'}")
    console.print(f"wall time {summary['wall_s']} s, gas per job {summary['gas_per_job']:,}, "
                  f"{summary['resumes']} resume(s), {summary['slashes']} slash(es), "
                  f"{summary['verification_failures_caught']} verification failure(s) caught")
    report(console, checks, total_gas=total_gas)


def stay_until_interrupted(board: Board) -> None:
    """The live board of a grid left serving, until Ctrl-C or SIGTERM (KeyboardInterrupt,
    `interrupt_on_sigterm`); the orphans its agents leave are reaped as they end."""
    board.wait("Ctrl-C")
    with Live(board, console=board.console, refresh_per_second=1):
        while True:
            board.poll()
            reap_orphans(board.grid.own_pids())
            time.sleep(2.0)


def interrupt_on_sigterm() -> None:
    """SIGTERM (what `timeout`, systemd and container runtimes send) stops the grid as Ctrl-C
    does: every process it started is stopped and reaped."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
