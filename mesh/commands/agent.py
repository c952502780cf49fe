"""`mesh agent run`: serve a provider's machine with the provider's wallet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mesh.commands.common import (
    OrchestratorId,
    OrchestratorUrl,
    PasswordFile,
    WalletDir,
    WalletOption,
    fail,
    open_wallet,
    service,
    user_errors,
)

app = typer.Typer(help="The provider agent.", no_args_is_help=True)
ChainId = Annotated[int | None, typer.Option(
    help="Chain id signatures are bound to (default: $MESH_CHAIN_ID).")]


@app.command("run")
def agent_run(
    wallet: WalletOption,
    password_file: PasswordFile = None,
    directory: WalletDir = None,
    orchestrator: OrchestratorUrl = None,
    node_id: Annotated[str | None, typer.Option(help="Default: node-<address prefix>.")] = None,
    state_dir: Annotated[Path, typer.Option(help="Spool, blob cache, task dirs.")] = Path(
        ".mesh-agent"),
    region: str = "local",
    price: Annotated[int, typer.Option(help="Asking price per GPU hour (token units).")] = 100,
    threads: Annotated[int, typer.Option(help="Render threads (default: every core).")] = 0,
    memory_mb: Annotated[int, typer.Option(help="Address-space limit of a task.")] = 4096,
    cpu_s: Annotated[int, typer.Option(help="CPU-time limit of a task.")] = 3600,
    wall_s: Annotated[float, typer.Option(help="Wall-clock limit of a task.")] = 3600.0,
    output_mb: Annotated[int, typer.Option(help="Output size limit of a task.")] = 2048,
    heartbeat_s: float = 1.0,
    poll_s: float = 1.0,
    popw_class: Annotated[str | None, typer.Option(help="Answer a PoPW handshake.")] = None,
    exit_when_idle_s: Annotated[float | None, typer.Option(
        help="Leave after this long without work.")] = None,
    cpu_kernel: Annotated[str | None, typer.Option(
        help="sse42: render without Cycles' AVX2 kernel (results say which kernel).")] = None,
    chain_id: ChainId = None,
    orchestrator_id: OrchestratorId = None,
) -> None:
    """Serve a provider's machine: register, heartbeat, render leases in the sandbox."""
    import logging
    import os

    from agent.config import AgentConfig
    from agent.daemon import Agent
    from agent.sandbox import Limits

    with user_errors("agent run"):
        account = open_wallet(wallet, password_file, directory)
        base = service(orchestrator, orchestrator_id, chain_id)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    mb = 1 << 20
    config = AgentConfig(
        orchestrator=base.url, node_id=node_id or f"node-{account.address[2:12].lower()}",
        state_dir=state_dir.resolve(), chain_id=base.chain_id, orchestrator_id=base.orchestrator_id,
        region=region,
        price_per_gpu_hour=price, threads=threads or os.cpu_count() or 1,
        limits=Limits(cpu_s=cpu_s, memory_bytes=memory_mb * mb, wall_s=wall_s,
                      output_bytes=output_mb * mb, file_bytes=output_mb * mb),
        heartbeat_s=heartbeat_s, poll_s=poll_s, popw_class=popw_class,
        exit_when_idle_s=exit_when_idle_s, cpu_kernel=cpu_kernel)
    if cpu_kernel not in (None, "sse42"):
        fail("agent run", f"--cpu-kernel {cpu_kernel}: only sse42 is known")
    with user_errors("agent run"):  # e.g. a registration the service refuses
        Agent(config, account).run()
