"""`mesh orchestrator serve`: the API under uvicorn, after saying which `MESH_*` settings are
missing and what each one's absence switches off (it starts anyway: a chain-less development
service is legitimate, a silent one is not). `backup` / `restore` copy its database
(`db.backup`) and, with `--blobs`, the blobs it lists (`storage.blobs`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mesh.commands.common import UserError

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.storage.blobs import BlobCopy

app = typer.Typer(help="The orchestrator service.", no_args_is_help=True)


def missing_capabilities(settings: Settings) -> list[str]:
    """One warning per missing setting that disables something, naming the setting."""
    from orchestrator.chain.deployment import Deployment, DeploymentError
    from orchestrator.chain.errors import ChainError
    from orchestrator.chain.sdk import MeshChain

    warnings = []
    try:
        deployment = Deployment.load(settings.data_dir)
    except DeploymentError as error:
        deployment = None
        warnings.append(f"no deployment ({error}): jobs cannot be submitted (no escrow to "
                        "read) and PLS placement finds no stake; set MESH_DATA_DIR to the "
                        "folder holding deployment.json")
    if deployment is not None:
        try:
            MeshChain.connect(settings.rpc_url, deployment)
        except ChainError as error:
            warnings.append(f"chain unreachable ({error}): escrows, stake and settlements "
                            "wait for it; set MESH_RPC_URL (and MESH_CHAIN_ID) to the "
                            "deployment's network")
    if settings.orchestrator_key is None:
        warnings.append("MESH_ORCHESTRATOR_KEY unset: this process sends no transactions "
                        "(no collateral locks, settlements, epoch commits); set it to the key "
                        "holding the ORCHESTRATOR_ROLE")
    if settings.slasher_key is None and settings.orchestrator_key is not None:
        warnings.append("MESH_SLASHER_KEY unset: slashes are signed with "
                        "MESH_ORCHESTRATOR_KEY and fail unless it holds SLASHER_ROLE")
    if settings.admin_key is None:
        warnings.append("MESH_ADMIN_KEY unset: the /v1/admin endpoints refuse every call")
    if settings.session_secret is None:
        warnings.append("MESH_SESSION_SECRET unset: session tokens die with this process and "
                        "replicas cannot share them")
    if not settings.pls_placement:
        warnings.append("MESH_PLS_PLACEMENT=false: leases ignore RS, PoPW tier and stake "
                        "(chain-less development only)")
    return warnings


@app.command("serve")
def serve(
    host: str = "127.0.0.1",
    port: int = 8400,
    access_log: Annotated[bool, typer.Option(help="One log line per request.")] = True,
    log_level: str = "info",
) -> None:
    """Run the orchestrator API (uvicorn). Reads MESH_DATA_DIR (deployment.json, SQLite,
    blobs), MESH_RPC_URL and MESH_CHAIN_ID (the chain), MESH_ORCHESTRATOR_KEY and
    MESH_SLASHER_KEY (transactions), MESH_ADMIN_KEY, MESH_SESSION_SECRET, MESH_DATABASE_URL
    and the rest in docs/configuration.md."""
    import uvicorn
    from pydantic import ValidationError

    from mesh.commands.common import fail, service_settings

    try:
        config = service_settings()
    except ValidationError as error:
        problems = "; ".join(f"MESH_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}"
                             for e in error.errors())
        fail("orchestrator serve", f"bad settings: {problems} (docs/configuration.md)")
    for warning in missing_capabilities(config):
        typer.secho(f"warning: {warning}", err=True, fg=typer.colors.YELLOW)
    from orchestrator.db.session import unreachable

    if (why := unreachable(config.sqlalchemy_url)) is not None:
        fail("orchestrator serve", f"cannot open the database ({why}): create it (PostgreSQL: "
             "createdb NAME), start its server, or fix MESH_DATABASE_URL")
    uvicorn.run("orchestrator.main:app", host=host, port=port, access_log=access_log,
                log_level=log_level)


BlobsOption = Annotated[Path | None, typer.Option(
    "--blobs", help="A directory for the blobs (scenes, checkpoints, frames) the database "
                    "lists: backup copies in those it lacks (one directory serves every "
                    "backup), restore copies back those the blob store lacks.")]


@app.command("backup")
def backup(path: Annotated[Path, typer.Argument(help="The backup file to write.")],
           blobs: BlobsOption = None) -> None:
    """Copy the database (MESH_DATABASE_URL, else MESH_DATA_DIR's SQLite) to PATH; safe
    while the service runs (SQLite's online backup API, `pg_dump -Fc` for PostgreSQL)."""
    from mesh.commands.common import service_settings, user_errors
    from orchestrator.db.backup import BackupError
    from orchestrator.db.backup import backup as copy

    with user_errors("orchestrator backup"):
        config = service_settings()
        try:
            copy(config.sqlalchemy_url, path)
        except BackupError as error:
            raise UserError(str(error)) from None
        typer.echo(f"backed up to {path}")
        if blobs is not None:
            report_blobs(copy_blobs(config, to_backup=blobs))


@app.command("restore")
def restore(path: Annotated[Path, typer.Argument(help="A file `backup` wrote.")],
            blobs: BlobsOption = None) -> None:
    """Replace the database with the backup at PATH (stop the service first). The service
    then sends no transaction until its indexer has re-read the chain since the backup."""
    from mesh.commands.common import service_settings, user_errors
    from orchestrator.db.backup import BackupError, mark_restored
    from orchestrator.db.backup import restore as replace
    from orchestrator.db.session import make_engine, make_session_factory, transaction

    with user_errors("orchestrator restore"):
        config = service_settings()
        url = config.sqlalchemy_url
        if blobs is not None and not blobs.is_dir():  # before anything is replaced
            raise UserError(f"no blob directory {blobs}")
        try:
            replace(url, path)
        except BackupError as error:
            raise UserError(str(error)) from None
        engine = make_engine(url)
        try:
            with transaction(make_session_factory(engine)) as session:
                mark_restored(session)
        finally:
            engine.dispose()
        typer.echo(f"restored from {path}; transactions wait until the chain is re-indexed")
        if blobs is not None:
            report_blobs(copy_blobs(config, from_backup=blobs))


def copy_blobs(config: Settings, *, to_backup: Path | None = None,
               from_backup: Path | None = None) -> BlobCopy:
    """The blobs the database lists, copied between the service's store and a backup's."""
    from orchestrator.db import blobs as blob_db
    from orchestrator.db.session import make_engine, make_session_factory
    from orchestrator.storage.blobs import BlobStore

    engine = make_engine(config.sqlalchemy_url)
    try:
        with make_session_factory(engine)() as session:
            listed = blob_db.blob_hashes(session)
    finally:
        engine.dispose()
    store = BlobStore(config.data_dir / "blobs")
    if to_backup is not None:
        return store.copy_to(BlobStore(to_backup), listed)
    assert from_backup is not None
    return BlobStore(from_backup).copy_to(store, listed)


def report_blobs(result: BlobCopy) -> None:
    typer.echo(result.summary(), err=bool(result.missing))
