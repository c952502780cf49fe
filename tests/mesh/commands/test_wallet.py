"""`mesh wallet new|import|list`: keystores in the wallet dir, keys never on the command line."""

from __future__ import annotations

import json
import stat

from eth_account import Account

from mesh.cli import app
from orchestrator.chain.anvil import dev_account
from protocol import keystore
from tests.mesh.commands.conftest import PASSWORD, Mesh, one_line_error


def test_new_writesAnEncryptedKeystore_thatListShowsWithoutAPassword(mesh: Mesh) -> None:
    address = mesh.new_wallet("alice")
    path = mesh.root / "wallets" / "alice.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keystore.load(path, PASSWORD).address == address
    listed = mesh("wallet", "list", "--json")
    assert listed.exit_code == 0
    assert json.loads(listed.stdout) == [{"name": "alice", "address": address,
                                          "keystore": str(path)}]
    human = mesh("wallet", "list")
    assert "alice" in human.stdout and address in human.stdout


def test_new_refusesToOverwriteAKey_inOneLine(mesh: Mesh) -> None:
    first = mesh.new_wallet("bob")
    error = one_line_error(mesh("wallet", "new", "bob", "--password-file",
                                str(mesh.password_file)), command="wallet new")
    assert "exists; refusing to overwrite" in error
    assert keystore.load(mesh.root / "wallets" / "bob.json", PASSWORD).address == first


def test_import_takesAKeyFromAFile_orAHiddenPrompt_neverAnArgument(mesh: Mesh) -> None:
    key_file = mesh.root / "key.hex"
    key_file.write_text("0x" + bytes(dev_account(5).key).hex() + "\n")
    done = mesh.signed("wallet", "import", "provider", "--key-file", str(key_file), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["address"] == dev_account(5).address
    typed = mesh.runner.invoke(
        app, ["wallet", "import", "typed", "--password-file", str(mesh.password_file)],
        input=bytes(dev_account(6).key).hex() + "\n", env=mesh.env)
    assert typed.exit_code == 0, typed.output
    assert dev_account(6).address in typed.stdout
    assert bytes(dev_account(6).key).hex() not in typed.stdout  # the prompt hides it


def test_import_copiesAKeystoreOnlyIfItsPasswordOpensIt(mesh: Mesh) -> None:
    source = mesh.root / "elsewhere.json"
    source.write_text(json.dumps(Account.encrypt(dev_account(7).key, PASSWORD)))
    done = mesh.signed("wallet", "import", "copied", "--keystore-file", str(source))
    assert done.exit_code == 0, done.output
    assert keystore.load(mesh.root / "wallets" / "copied.json", PASSWORD).address == (
        dev_account(7).address)
    wrong = mesh.root / "wrong"
    wrong.write_text("not it")
    error = one_line_error(mesh("wallet", "import", "other", "--keystore-file", str(source),
                                "--password-file", str(wrong)), command="wallet import")
    assert "wrong password" in error
    assert not (mesh.root / "wallets" / "other.json").exists()


def test_badKeysAndNamesAreOneLine(mesh: Mesh) -> None:
    bad = mesh.root / "bad.hex"
    bad.write_text("0x1234")
    assert "not a private key" in one_line_error(
        mesh.signed("wallet", "import", "x", "--key-file", str(bad)), command="wallet import")
    assert "not a wallet name" in one_line_error(
        mesh.signed("wallet", "new", "../escape"), command="wallet new")
