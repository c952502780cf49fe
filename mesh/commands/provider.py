"""`mesh provider stake|lend|unbond|withdraw|claim|status`: a provider's bond and payouts on
chain, signed with the provider's wallet. Each command checks what it can before sending (a
balance, free stake), so a mistake costs no gas and reads as one line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mesh.commands.common import (
    DataDir,
    JsonFlag,
    OrchestratorUrl,
    PasswordFile,
    RpcUrl,
    UserError,
    WalletDir,
    WalletOption,
    address_of,
    call_service,
    connect_chain,
    emit,
    ensure_tokens,
    open_wallet,
    print_table,
    progress,
    service,
    show_tokens,
    tier_word,
    tokens,
    user_errors,
    when,
)

app = typer.Typer(help="A provider's stake and payouts (signed with the provider's wallet).",
                  no_args_is_help=True)
Amount = Annotated[str, typer.Argument(help="Tokens (e.g. 1000 or 2.5).")]


def _open(wallet: str, password_file: Path | None, directory: Path | None,
          rpc_url: str | None, data_dir: Path | None) -> Any:
    chain = connect_chain(rpc_url, data_dir)
    return chain, chain.account(open_wallet(wallet, password_file, directory))


@app.command("stake")
def stake(amount: Amount, wallet: WalletOption, password_file: PasswordFile = None,
          directory: WalletDir = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
          as_json: JsonFlag = False) -> None:
    """Bond tokens so the scheduler may give your nodes work (collateral is locked from it)."""
    with user_errors("provider stake", as_json=as_json):
        units = tokens(amount)
        chain, account = _open(wallet, password_file, directory, rpc_url, data_dir)
        ensure_tokens(chain, account.address, units, "this stake")
        with progress(f"staking {amount} tokens (approve + stake)"):
            receipt = account.stake(units)
        now = chain.provider_stake(account.address)
    emit({"provider": account.address, "staked": units, "bonded": now.bonded,
          "free": now.free, "tx": receipt.tx_hash, "gas": receipt.gas_used}, as_json,
         lambda r: typer.echo(f"staked {amount}: {r['provider']} now bonds "
                              f"{show_tokens(r['bonded'])} ({show_tokens(r['free'])} free) "
                              f"in {r['tx']}"))


@app.command("lend")
def lend(ceiling: Annotated[str, typer.Argument(help="The most tokens of your stake the "
                                                     "orchestrator may reserve (0: no more).")],
         wallet: WalletOption,
         days: Annotated[float, typer.Option(min=0, max=365, help="The longest a reservation "
                                                                  "may run from when it is "
                                                                  "made or extended.")] = 7,
         password_file: PasswordFile = None, directory: WalletDir = None,
         rpc_url: RpcUrl = None, data_dir: DataDir = None, as_json: JsonFlag = False) -> None:
    """Bound what the orchestrator may reserve of your stake as collateral, and for how long.
    A lower bound stops new reservations at once; a live one still lapses at its own time."""
    with user_errors("provider lend", as_json=as_json):
        units = tokens(ceiling)
        horizon_s = int(days * 86_400)
        chain, account = _open(wallet, password_file, directory, rpc_url, data_dir)
        with progress(f"lending at most {ceiling} tokens for {days:g} days"):
            receipt = account.set_reservation_terms(units, horizon_s)
        reserved = chain.provider_stake(account.address)
    emit({"provider": account.address, "ceiling": units, "horizon_s": horizon_s,
          "reserved": reserved.reserved, "reserved_until": reserved.reserved_until,
          "tx": receipt.tx_hash}, as_json,
         lambda r: typer.echo(f"the orchestrator may reserve at most {ceiling} tokens of "
                              f"{r['provider']} for {days:g} days at a time "
                              f"(reserved now: {show_tokens(r['reserved'])}) in {r['tx']}"))


@app.command("unbond")
def unbond(amount: Amount, wallet: WalletOption, password_file: PasswordFile = None,
           directory: WalletDir = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
           as_json: JsonFlag = False) -> None:
    """Start taking free stake out; it stays slashable until the unbonding period ends."""
    with user_errors("provider unbond", as_json=as_json):
        units = tokens(amount)
        chain, account = _open(wallet, password_file, directory, rpc_url, data_dir)
        free = chain.provider_stake(account.address).free
        if units > free:
            raise UserError(f"only {show_tokens(free)} of the stake is free (the rest is locked "
                            "as collateral or already unbonding): unbond at most that")
        with progress(f"requesting to unbond {amount} tokens"):
            lock_id, receipt = account.request_unbond(units)
        lock = chain.unbonding_lock(account.address, lock_id)
        assert lock is not None  # just created by this transaction
    emit({"provider": account.address, "lock_id": lock_id, "amount": units,
          "withdrawable_at": lock.withdrawable_at, "tx": receipt.tx_hash}, as_json,
         lambda r: typer.echo(f"unbonding {amount} as lock {lock_id}: withdraw it with "
                              f"`mesh provider withdraw {lock_id}` from "
                              f"{when(r['withdrawable_at'])}"))


@app.command("withdraw")
def withdraw(lock_id: Annotated[int, typer.Argument(help="The lock id `unbond` printed.")],
             wallet: WalletOption, password_file: PasswordFile = None,
             directory: WalletDir = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
             as_json: JsonFlag = False) -> None:
    """Take an unbonded amount home once its unbonding period has passed."""
    with user_errors("provider withdraw", as_json=as_json):
        chain, account = _open(wallet, password_file, directory, rpc_url, data_dir)
        lock = chain.unbonding_lock(account.address, lock_id)
        if lock is None:
            open_ids = [lk.lock_id for lk in chain.open_unbonding_locks(account.address)]
            raise UserError(f"{account.address} has no open unbonding lock {lock_id} "
                            f"(open: {open_ids or 'none'}; `mesh provider status` lists them)")
        head = chain.w3.eth.get_block("latest")["timestamp"]
        if head < lock.withdrawable_at:
            raise UserError(f"lock {lock_id} is withdrawable from {when(lock.withdrawable_at)}"
                            f" ({lock.withdrawable_at - head} s from now): run this again then")
        before = chain.token_balance(account.address)
        with progress(f"withdrawing lock {lock_id}"):
            receipt = account.withdraw(lock_id)
        paid = chain.token_balance(account.address) - before
    emit({"provider": account.address, "lock_id": lock_id, "paid": paid,
          "tx": receipt.tx_hash}, as_json,
         lambda r: typer.echo(f"withdrew {show_tokens(paid)} tokens from lock {lock_id} in "
                              f"{r['tx']}"))


@app.command("claim")
def claim(wallet: WalletOption, password_file: PasswordFile = None, directory: WalletDir = None,
          rpc_url: RpcUrl = None, data_dir: DataDir = None, as_json: JsonFlag = False) -> None:
    """Collect every payout whose dispute window has passed."""
    with user_errors("provider claim", as_json=as_json):
        chain, account = _open(wallet, password_file, directory, rpc_url, data_dir)
        balance = chain.escrow_balance(account.address)
        if balance.claimable == 0:
            later = (f"; {show_tokens(balance.pending)} pending, releasing from "
                     f"{when(balance.release_at)}" if balance.pending else "")
            raise UserError(f"nothing is claimable for {account.address} yet{later}")
        with progress("claiming payouts"):
            amount, receipt = account.claim()
    emit({"provider": account.address, "claimed": amount, "tx": receipt.tx_hash}, as_json,
         lambda r: typer.echo(f"claimed {show_tokens(amount)} tokens in {r['tx']}"))


@app.command("status")
def status(wallet: Annotated[str, typer.Option(
               "--wallet", "--keystore", help="A wallet name, keystore file or address.")],
           password_file: Annotated[Path | None, typer.Option(
               "--password-file", help="Taken as the signing commands take it; status reads "
               "public state and needs no password.")] = None,
           directory: WalletDir = None, rpc_url: RpcUrl = None, data_dir: DataDir = None,
           orchestrator: OrchestratorUrl = None, as_json: JsonFlag = False) -> None:
    """Stake, unbonding locks, payouts and balances on chain, and the nodes the orchestrator
    knows for this provider (when one answers). Amounts in --json are token units (18
    decimals); the table shows tokens."""
    import httpx

    from protocol.client import expect

    with user_errors("provider status", as_json=as_json):
        chain = connect_chain(rpc_url, data_dir)
        address = address_of(wallet, directory)
        held = chain.provider_stake(address)
        payouts = chain.escrow_balance(address)
        result: dict[str, Any] = {
            "provider": address, "tokens": chain.token_balance(address),
            "eth_wei": int(chain.w3.eth.get_balance(address)),  # type: ignore[arg-type]
            "bonded": held.bonded, "locked": held.locked, "free": held.free,
            "unbonding": held.unbonding, "tier": tier_word(held.tier),
            "claimable": payouts.claimable, "pending": payouts.pending,
            "pending_release_at": payouts.release_at or None, "frozen": payouts.frozen,
            "unbonding_locks": [{"lock_id": lk.lock_id, "amount": lk.amount,
                                 "withdrawable_at": lk.withdrawable_at}
                                for lk in chain.open_unbonding_locks(address)]}
        base = service(orchestrator, None)
        try:
            result["nodes"] = call_service("list nodes", lambda: expect(httpx.get(
                f"{base.url}/v1/nodes", params={"provider": address}, timeout=10.0)))
        except UserError as unreachable:
            result["nodes"] = None
            result["nodes_error"] = str(unreachable)
    emit(result, as_json, _show_status)


def _show_status(result: dict[str, Any]) -> None:
    amounts = {"tokens", "bonded", "locked", "free", "unbonding", "claimable", "pending",
               "frozen"}
    shown = {key: f"{show_tokens(value)} tokens" if key in amounts else
             (when(value) if key == "pending_release_at" and value else value)
             for key, value in result.items()
             if key not in ("unbonding_locks", "nodes", "nodes_error", "eth_wei")}
    shown["gas"] = f"{show_tokens(result['eth_wei'])} ETH"
    print_table(shown, title=f"provider {result['provider']}")
    if result["unbonding_locks"]:
        print_table([{"lock": lk["lock_id"], "amount": show_tokens(lk["amount"]),
                      "withdrawable from": when(lk["withdrawable_at"])}
                     for lk in result["unbonding_locks"]], title="unbonding")
    if result["nodes"]:
        print_table([{k: n[k] for k in ("node_id", "health", "rs", "region", "gpu_model",
                                        "slots", "tier")}
                     for n in result["nodes"]], title="nodes")
    elif result["nodes"] is None:
        typer.echo(f"nodes: unknown ({result['nodes_error']})")
    else:
        typer.echo("nodes: none registered (start one with `mesh agent run`)")
