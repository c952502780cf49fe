"""The provider's key, from an eth-account encrypted keystore (never a raw key on the command
line). The password comes from a file, an environment variable, or a prompt."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from eth_account import Account
from eth_account.signers.local import LocalAccount

PASSWORD_ENV = "MESH_AGENT_PASSWORD"


class KeystoreError(Exception):
    """The keystore cannot be read or opened; the message says what to do."""


def password(*, password_file: Path | None, prompt: Callable[[], str] | None) -> str:
    if password_file is not None:
        try:
            return password_file.read_text().rstrip("\n")
        except OSError as exc:
            raise KeystoreError(f"cannot read the password file {password_file}: "
                                f"{exc.strerror}") from None
    if os.environ.get(PASSWORD_ENV):
        return os.environ[PASSWORD_ENV]
    if prompt is None:
        raise KeystoreError(f"no password: pass --password-file or set {PASSWORD_ENV}")
    return prompt()


def load(path: Path, secret: str) -> LocalAccount:
    try:
        encrypted = json.loads(path.read_text())
    except OSError as exc:
        raise KeystoreError(f"cannot read the keystore {path}: {exc.strerror}") from None
    except ValueError:
        raise KeystoreError(f"{path} is not a JSON keystore") from None
    try:
        key = Account.decrypt(encrypted, secret)
    except ValueError:
        raise KeystoreError(f"wrong password for {path}") from None
    account: LocalAccount = Account.from_key(key)
    return account


def create(path: Path, secret: str, private_key: bytes | None = None, *,
           scrypt_n: int | None = None) -> str:
    """Write a new keystore (mode 0600) and return its address. `scrypt_n` lowers the key
    derivation's work (eth-account's default 2**18 takes about a second and 256 MiB per open):
    only for throwaway keys of a local chain, which many processes open at once."""
    account = Account.from_key(private_key) if private_key else Account.create()
    if path.exists():
        raise KeystoreError(f"{path} exists; refusing to overwrite a key")
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(Account.encrypt(account.key, secret, iterations=scrypt_n), handle)
    return str(account.address)
