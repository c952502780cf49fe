"""`mesh tokens mint|balance`: test tokens (and gas) on a local chain; balances anywhere."""

from __future__ import annotations

from typing import Annotated

import typer

from mesh.commands.common import (
    DataDir,
    JsonFlag,
    RpcUrl,
    WalletDir,
    address_of,
    connect_chain,
    emit,
    progress,
    require_local,
    show_tokens,
    tokens,
    user_errors,
)

app = typer.Typer(help="The mesh token (TestToken on local chains).", no_args_is_help=True)
GAS_TOP_UP_WEI = 100 * 10**18  # what a fresh local wallet gets to pay gas with
Recipient = Annotated[str, typer.Argument(help="A wallet name or an address.")]


@app.command("mint")
def mint(recipient: Recipient,
         amount: Annotated[str, typer.Argument(help="Tokens to mint (e.g. 1000).")] = "10000",
         rpc_url: RpcUrl = None, data_dir: DataDir = None, directory: WalletDir = None,
         as_json: JsonFlag = False) -> None:
    """Mint test tokens to a wallet and top up its gas (local chains only)."""
    from orchestrator.chain.anvil import dev_account, set_balance

    with user_errors("tokens mint", as_json=as_json):
        units = tokens(amount)
        chain = connect_chain(rpc_url, data_dir)
        require_local(chain, "minting")
        to = address_of(recipient, directory)
        with progress(f"minting {amount} tokens to {to}"):
            receipt = chain.account(dev_account(0)).mint(to, units)
            if chain.w3.eth.get_balance(to) < GAS_TOP_UP_WEI // 10:  # type: ignore[arg-type]
                set_balance(chain.w3, to, GAS_TOP_UP_WEI)
        result = {"address": to, "minted": units, "balance": chain.token_balance(to),
                  "eth_wei": int(chain.w3.eth.get_balance(to)),  # type: ignore[arg-type]
                  "tx": receipt.tx_hash}
    emit(result, as_json, lambda r: typer.echo(
        f"minted {amount} tokens to {r['address']}: balance {show_tokens(r['balance'])} tokens, "
        f"{r['eth_wei'] / 1e18:g} ETH for gas ({r['tx']})"))


@app.command("balance")
def balance(recipient: Recipient, rpc_url: RpcUrl = None, data_dir: DataDir = None,
            directory: WalletDir = None, as_json: JsonFlag = False) -> None:
    """Tokens and gas money of a wallet or an address."""
    with user_errors("tokens balance", as_json=as_json):
        chain = connect_chain(rpc_url, data_dir)
        owner = address_of(recipient, directory)
        result = {"address": owner, "tokens": chain.token_balance(owner),
                  "eth_wei": int(chain.w3.eth.get_balance(owner))}  # type: ignore[arg-type]
    emit(result, as_json, lambda r: typer.echo(
        f"{r['address']}: {show_tokens(r['tokens'])} tokens, {r['eth_wei'] / 1e18:g} ETH"))
