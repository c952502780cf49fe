"""A wallet's key lives only in an encrypted keystore: written once (0600, never over another
key), opened only with its password, and every way it can fail says what to do in one line."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from eth_account import Account

from protocol import keystore
from protocol.keystore import KeystoreError

KEY = bytes.fromhex("11" * 32)


def test_a_keystore_opens_with_its_password_only(tmp_path: Path) -> None:
    path = tmp_path / "w" / "key.json"
    address = keystore.create(path, "pw", KEY, scrypt_n=2)
    assert address == Account.from_key(KEY).address
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert KEY.hex() not in path.read_text()  # encrypted, never the raw key
    assert bytes(keystore.load(path, "pw").key) == KEY
    with pytest.raises(KeystoreError, match="wrong password"):
        keystore.load(path, "other")


def test_a_key_is_never_written_over(tmp_path: Path) -> None:
    path = tmp_path / "key.json"
    keystore.create(path, "pw", KEY, scrypt_n=2)
    before = path.read_bytes()
    with pytest.raises(KeystoreError, match="exists; refusing to overwrite"):
        keystore.create(path, "pw", None, scrypt_n=2)
    assert path.read_bytes() == before


def test_a_fresh_key_is_made_when_none_is_given(tmp_path: Path) -> None:
    first = keystore.create(tmp_path / "a.json", "pw", scrypt_n=2)
    second = keystore.create(tmp_path / "b.json", "pw", scrypt_n=2)
    assert first != second


def test_unreadable_or_foreign_files_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KeystoreError, match="cannot read the keystore"):
        keystore.load(tmp_path / "missing.json", "pw")
    text = tmp_path / "notes.txt"
    text.write_text("not json")
    with pytest.raises(KeystoreError, match="is not a JSON keystore"):
        keystore.load(text, "pw")


def test_the_password_comes_from_a_file_then_the_environment_then_a_prompt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(keystore.PASSWORD_ENV, raising=False)
    file = tmp_path / "pw"
    file.write_text("from-file\n")
    asked: list[bool] = []

    def prompt() -> str:
        asked.append(True)
        return "typed"

    assert keystore.password(password_file=file, prompt=prompt) == "from-file"
    monkeypatch.setenv(keystore.PASSWORD_ENV, "from-env")
    assert keystore.password(password_file=None, prompt=prompt) == "from-env"
    assert not asked
    monkeypatch.delenv(keystore.PASSWORD_ENV)
    assert keystore.password(password_file=None, prompt=prompt) == "typed"
    with pytest.raises(KeystoreError, match="no password: pass --password-file"):
        keystore.password(password_file=None, prompt=None)
    with pytest.raises(KeystoreError, match="cannot read the password file"):
        keystore.password(password_file=tmp_path / "none", prompt=prompt)


def test_the_file_is_an_eth_account_keystore(tmp_path: Path) -> None:
    """Other Ethereum tools open it: it is eth-account's (Web3 Secret Storage) format."""
    path = tmp_path / "key.json"
    keystore.create(path, "pw", KEY, scrypt_n=2)
    assert Account.decrypt(json.loads(path.read_text()), "pw") == KEY
