"""`mesh nodes`: the nodes an orchestrator knows, with their state, tier and RS."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from mesh.commands.common import (
    JsonFlag,
    OrchestratorUrl,
    call_service,
    checksum,
    emit,
    print_table,
    service,
    short_address,
    user_errors,
)

app = typer.Typer(help="The grid's nodes (public: no wallet needed).")


@app.callback(invoke_without_command=True)
def nodes(provider: Annotated[str | None, typer.Option(
              help="Only this provider's nodes (an address).")] = None,
          orchestrator: OrchestratorUrl = None, as_json: JsonFlag = False) -> None:
    """Every registered node: provider, region, GPU, slots, tier, RS, health, last beat."""
    import httpx

    from protocol.client import expect

    with user_errors("nodes", as_json=as_json):
        base = service(orchestrator, None)
        params = {"provider": checksum(provider)} if provider else {}
        found = call_service("list nodes", lambda: expect(httpx.get(
            f"{base.url}/v1/nodes", params=params, timeout=10.0)))
    emit(found, as_json, _show)


def _show(found: list[dict[str, Any]]) -> None:
    if not found:
        typer.echo("no nodes registered yet (a provider starts one with `mesh agent run`)")
        return
    now = time.time()
    print_table([{"node": n["node_id"], "provider": short_address(n["provider"]),
                  "region": n["region"],
                  "gpu": f"{n['gpu_model']} {n['vram_gb']}G x{n['slots']}", "tier": n["tier"],
                  "RS": "-" if n["rs"] is None else f"{n['rs']:.3f}",
                  "health": ("draining" if n["draining"] else n["health"]) + (
                      "" if n["last_heartbeat_at"] is None
                      else f" {now - n['last_heartbeat_at']:.0f}s")} for n in found],
                title="nodes (gpu: model, memory x slots; health: state, last heartbeat's age)")
