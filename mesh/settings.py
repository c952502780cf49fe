"""The `MESH_*` settings a `mesh` command reads as a client of the grid: where the orchestrator
answers and what its signatures are bound to, where wallets live, and the chain a wallet
command talks to. Read exactly as the service reads them (`orchestrator/config.py`: the same
variables, `.env` in the working directory, the same defaults), but without the service's
`Settings`, so that a provider's agent-only install (no server stack) runs `mesh agent run` and
`mesh wallet`, and a bad service setting in the environment does not stop a wallet command.
tests/mesh/test_settings.py holds every field here equal to the service's."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ClientSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MESH_", env_file=".env", extra="ignore")

    data_dir: Path = Field(
        Path(".mesh"), description="Local state: SQLite file, blobs, deployments.")
    rpc_url: str = Field("http://127.0.0.1:8545", description="EVM JSON-RPC endpoint.")
    chain_id: int = Field(31337, description="Chain id signatures are bound to.")
    orchestrator_id: str = Field(
        "depin-mesh-orchestrator", description="Identity signed requests are bound to "
        "(its keccak is the EIP-712 domain salt), so a signature for another orchestrator "
        "is useless here.")
    orchestrator_url: str = Field(
        "http://127.0.0.1:8400", description="Where `mesh` commands reach the orchestrator "
        "(the `mesh orchestrator serve` address).")
    wallet_dir: Path = Field(
        Path("~/.mesh/wallets"), description="Where `mesh wallet` keeps eth-account keystores "
        "(one `<name>.json` each, mode 0600).")
    wallet: str | None = Field(
        None, description="The wallet a `mesh dispute` or `mesh arbiter` command signs with "
        "when it is given no `--wallet` (a name in wallet_dir or a keystore file).")
