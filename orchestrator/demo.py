"""`mesh demo`: one job's money path end to end on a throwaway anvil chain.

Stage 1 of the demo: deploy, fund, stake, escrow, lock collateral, settle, wait out the
dispute window and unbonding period, then claim and withdraw, and check that every token
ended where it should. Later stages add the orchestrator, agents and renders around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from eth_utils import keccak
from rich.console import Console
from rich.table import Table

from orchestrator.chain.anvil import Anvil, dev_account, increase_time
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.errors import ChainError
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import Receipt, connect
from orchestrator.chain.views import EscrowStatus

TOKEN = 10**18
FUNDING = 1_000 * TOKEN
STAKE = 500 * TOKEN
PAYMENT = 100 * TOKEN
COLLATERAL = 50 * TOKEN
PAYOUT = 80 * TOKEN  # the provider's share; the rest of the escrow is refunded


@dataclass(frozen=True, slots=True)
class Check:
    what: str
    expected: str
    actual: str

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


def _tokens(units: int) -> str:
    return f"{Decimal(units) / TOKEN:,f} MESH"


class _Steps:
    """Runs named steps, printing each transaction's hash and gas as it lands."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.table = Table(title="DePIN Mesh demo: one job on chain")
        for column in ("step", "actor", "tx", "gas"):
            self.table.add_column(column)
        self.total_gas = 0

    def record(self, step: str, actor: str, receipt: Receipt) -> None:
        self.total_gas += receipt.gas_used
        self.table.add_row(step, actor, receipt.tx_hash, f"{receipt.gas_used:,}")
        self.console.print(f"[green]✓[/] {step:<38} gas {receipt.gas_used:>7,}  {receipt.tx_hash}")


def _play(chain: MeshChain, steps: _Steps) -> list[Check]:
    admin = chain.account(dev_account(0))
    orchestrator = chain.account(dev_account(1))
    customer = chain.account(dev_account(4))
    provider = chain.account(dev_account(5))
    job_id = keccak(text="demo render job #1")

    steps.record("mint test tokens to the customer", "admin",
                 admin.mint(customer.address, FUNDING))
    steps.record("mint test tokens to the provider", "admin",
                 admin.mint(provider.address, FUNDING))
    steps.record("approve the StakeManager", "provider",
                 provider.approve(chain.stake_manager.address, STAKE))
    steps.record("stake", "provider", provider.stake(STAKE))
    steps.record("approve the JobEscrow", "customer",
                 customer.approve(chain.job_escrow.address, PAYMENT))
    deadline = int(chain.w3.eth.get_block("latest")["timestamp"]) + 3600
    steps.record("escrow the job (createJob)", "customer",
                 customer.create_job(job_id, PAYMENT, deadline, keccak(text="spec")))
    steps.record("lock the provider's collateral", "orchestrator",
                 orchestrator.lock_collateral(job_id, [provider.address], [COLLATERAL]))
    steps.record("settle: pay provider, refund the rest", "orchestrator",
                 orchestrator.settle(job_id, [provider.address], [PAYOUT],
                                     keccak(text="result root")))
    lock_id, unbond_receipt = provider.request_unbond(STAKE)
    steps.record("request unbond of the whole stake", "provider", unbond_receipt)

    wait = max(chain.settlement_dispute_window(), chain.unbonding_period()) + 1
    increase_time(chain.w3, wait)
    steps.console.print(f"[cyan]⏩[/] time travel {wait:,} s past the dispute window and unbonding")

    provider_claimed, claim_receipt = provider.claim()
    steps.record("claim the payout", "provider", claim_receipt)
    customer_claimed, refund_receipt = customer.claim_refund(job_id)
    steps.record("claim the refund", "customer", refund_receipt)
    steps.record("withdraw the unbonded stake", "provider", provider.withdraw(lock_id))

    job = chain.escrowed_job(job_id)
    stake = chain.provider_stake(provider.address)

    def tokens(what: str, expected: int, actual: int) -> Check:
        return Check(what, _tokens(expected), _tokens(actual))

    return [
        tokens("provider tokens", FUNDING + PAYOUT, chain.token_balance(provider.address)),
        tokens("customer tokens", FUNDING - PAYOUT, chain.token_balance(customer.address)),
        tokens("provider claimed", PAYOUT, provider_claimed),
        tokens("customer refund claimed", PAYMENT - PAYOUT, customer_claimed),
        tokens("tokens left in JobEscrow", 0, chain.token_balance(chain.job_escrow.address)),
        tokens("tokens left in StakeManager", 0,
               chain.token_balance(chain.stake_manager.address)),
        tokens("provider bonded + locked + unbonding", 0,
               stake.bonded + stake.locked + stake.unbonding),
        Check("job status", EscrowStatus.SETTLED.name, job.status.name if job else "missing"),
    ]


def run() -> None:
    """Play the demo; exit non-zero if any step reverts or any balance is off."""
    console = Console()
    with Anvil() as anvil:
        console.print(f"[bold]anvil[/] on {anvil.rpc_url}")
        w3 = connect(anvil.rpc_url)
        deployment = deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                                  slasher=dev_account(2).address, arbiter=dev_account(3).address)
        console.print(f"deployed: token {deployment.token}, StakeManager "
                      f"{deployment.stake_manager}, JobEscrow {deployment.job_escrow}, "
                      f"Disputes {deployment.disputes}")
        steps = _Steps(console)
        try:
            checks = _play(MeshChain(w3, deployment), steps)
        except ChainError as exc:
            console.print(f"[bold red]✗ a step failed:[/] {exc}")
            raise SystemExit(1) from exc

    console.print(steps.table)
    results = Table(title=f"balances (total gas {steps.total_gas:,})")
    for column in ("check", "expected", "actual", ""):
        results.add_column(column)
    for check in checks:
        results.add_row(check.what, check.expected, check.actual,
                        "[green]ok[/]" if check.ok else "[bold red]WRONG[/]")
    console.print(results)
    if not all(check.ok for check in checks):
        console.print("[bold red]demo failed: balances are off[/]")
        raise SystemExit(1)
    console.print("[bold green]demo passed[/]")
