"""`mesh wallet new|import|list`: eth-account keystores, one `<name>.json` per wallet in the
wallet dir. Keys never pass through the command line: a new key is generated, an imported one
is read from a keystore or a key file (or typed at a hidden prompt)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer

from mesh.commands.common import (
    JsonFlag,
    PasswordFile,
    UserError,
    WalletDir,
    emit,
    print_table,
    user_errors,
    wallet_dir,
)

app = typer.Typer(help="Keystores the other commands sign with.", no_args_is_help=True)
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
WalletName = Annotated[str, typer.Argument(help="A name for the wallet (letters, digits, . _ -).")]


def _target(name: str, directory: Path | None) -> Path:
    if not NAME.match(name):
        raise UserError(f"{name!r} is not a wallet name: use letters, digits, '.', '_' or '-'")
    return wallet_dir(directory) / f"{name}.json"


def _new_password(password_file: Path | None) -> str:
    from protocol import keystore

    return keystore.password(password_file=password_file, prompt=lambda: typer.prompt(
        "new keystore password", hide_input=True, confirmation_prompt=True, err=True))


@app.command("new")
def new(name: WalletName, password_file: PasswordFile = None, directory: WalletDir = None,
        as_json: JsonFlag = False) -> None:
    """Generate a key and save it encrypted; prints the address."""
    from protocol import keystore

    with user_errors("wallet new", as_json=as_json):
        target = _target(name, directory)
        address = keystore.create(target, _new_password(password_file))
    emit({"name": name, "address": address, "keystore": str(target)}, as_json,
         lambda r: typer.echo(f"{r['address']}  saved as {r['keystore']}"))


@app.command("import")
def import_(
    name: WalletName,
    keystore_file: Annotated[Path | None, typer.Option(
        "--keystore-file", help="An existing eth-account keystore (JSON) to copy in.")] = None,
    key_file: Annotated[Path | None, typer.Option(
        "--key-file", help="A file holding a hex private key (else a hidden prompt).")] = None,
    password_file: PasswordFile = None,
    directory: WalletDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Bring in a key from a keystore file or a key file; never from the command line."""
    from eth_account import Account

    from protocol import keystore

    with user_errors("wallet import", as_json=as_json):
        target = _target(name, directory)
        if keystore_file is not None and key_file is not None:
            raise UserError("give --keystore-file or --key-file, not both")
        if keystore_file is not None:
            # Opened with its password first: a keystore that cannot be opened is not copied.
            account = keystore.load(keystore_file, keystore.password(
                password_file=password_file, prompt=lambda: typer.prompt(
                    f"password of {keystore_file.name}", hide_input=True, err=True)))
            if target.exists():
                raise UserError(f"{target} exists; refusing to overwrite a key")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(keystore_file.read_text())
            target.chmod(0o600)
            address = str(account.address)
        else:
            raw = (key_file.read_text() if key_file is not None else typer.prompt(
                "private key (hex)", hide_input=True, err=True)).strip()
            try:
                key = bytes(Account.from_key(raw).key)
            except (ValueError, TypeError):
                raise UserError("that is not a private key (64 hex digits)") from None
            address = keystore.create(target, _new_password(password_file), private_key=key)
    emit({"name": name, "address": address, "keystore": str(target)}, as_json,
         lambda r: typer.echo(f"{r['address']}  saved as {r['keystore']}"))


@app.command("list")
def list_(directory: WalletDir = None, as_json: JsonFlag = False) -> None:
    """The wallets in the wallet dir and their addresses (no password needed)."""
    from eth_utils import to_checksum_address

    with user_errors("wallet list", as_json=as_json):
        folder = wallet_dir(directory)
        found = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                address = to_checksum_address(json.loads(path.read_text())["address"])
            except (ValueError, KeyError, TypeError):
                continue  # not a keystore
            found.append({"name": path.stem, "address": address, "keystore": str(path)})
    if as_json:
        emit(found, True)
    elif not found:
        typer.echo(f"no wallets in {folder}; create one with `mesh wallet new NAME`")
    else:
        print_table([{"name": w["name"], "address": w["address"]} for w in found],
                    title=str(folder))
