"""`mesh dispute` against the session's anvil deployment, in-process: mistakes the command
can see before it sends anything are one line that says what to do (not the contract's
DisputesNotAParty after the bond's approval), and a dispute is read without naming a wallet.
The whole dispute flow against a real grid is test_cli_disputes.py."""

from __future__ import annotations

import json

from orchestrator.chain.sdk import MeshChain
from tests.mesh.commands.conftest import Mesh, one_line_error


def test_disputingASlashTheChainDoesNotHave_isOneLine_andSendsNothing(
        on_chain: Mesh, chain: MeshChain) -> None:
    address = on_chain.new_wallet("provider")
    assert on_chain("tokens", "mint", "provider", "100").exit_code == 0
    nonce = chain.w3.eth.get_transaction_count(address)  # type: ignore[arg-type]
    refused = on_chain.signed("dispute", "open", "--slash", "99", "--wallet", "provider",
                              "--yes")
    line = one_line_error(refused, command="dispute open")
    assert "there is no slash 99 on chain" in line and "NotAParty" not in line
    assert chain.w3.eth.get_transaction_count(address) == nonce  # type: ignore[arg-type]


def test_disputeStatus_needsNoWallet_andTheWalletComesFromTheSettings(on_chain: Mesh) -> None:
    """docs/arbiters.md's `mesh dispute status 7`: no --wallet on the line. Without any wallet
    the chain's record is read alone; MESH_WALLET names the one that signs otherwise."""
    missing = on_chain("dispute", "status", "7")
    assert "there is no dispute 7 on chain" in one_line_error(missing, command="dispute status")
    on_chain.env["MESH_WALLET"] = "arbiter"
    unknown = on_chain("dispute", "evidence", "--slash", "3", "--json")
    assert unknown.exit_code == 2
    assert "no wallet 'arbiter'" in json.loads(unknown.stdout)["error"]["message"]
