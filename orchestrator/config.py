"""Typed settings, read from `MESH_*` environment variables (and `.env`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MESH_", env_file=".env", extra="ignore")

    data_dir: Path = Field(Path(".mesh"), description="Local state: SQLite file, blobs, deployments.")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default SQLite (WAL) under data_dir. "
        "PostgreSQL: postgresql+psycopg://user@host:5432/db")
    rpc_url: str = Field("http://127.0.0.1:8545", description="EVM JSON-RPC endpoint.")
    chain_id: int = Field(31337, description="Chain id signatures are bound to.")
    orchestrator_key: SecretStr | None = Field(
        None, description="Hex private key the orchestrator signs chain transactions with.")
    admin_key: SecretStr | None = Field(None, description="Bearer key for admin endpoints.")

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'mesh.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
