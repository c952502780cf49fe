"""What every `mesh` command group shares: its options, the wallet a command signs with, the
chain and orchestrator it talks to, human or `--json` output, and the one-line error a user
mistake becomes (a decoded contract error says what to do; never a traceback)."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from orchestrator.domain.types import TOKEN_DECIMALS, show_tokens

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from mesh.settings import ClientSettings
    from orchestrator.chain.sdk import MeshChain
    from orchestrator.config import Settings
    from protocol.client import Wallet

LOCAL_CHAIN_IDS = frozenset({31337})  # anvil and hardhat: test tokens and gas may be minted

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document, no prose.")]
WalletOption = Annotated[str, typer.Option(
    "--wallet", "--keystore", help="A wallet name in the wallet dir (`mesh wallet list`) or a "
    "keystore file.")]
PasswordFile = Annotated[Path | None, typer.Option(
    "--password-file", help="File holding the keystore password (else $MESH_AGENT_PASSWORD, "
    "else a prompt).")]
WalletDir = Annotated[Path | None, typer.Option(
    "--wallet-dir", help="Where keystores live (default: $MESH_WALLET_DIR).")]
RpcUrl = Annotated[str | None, typer.Option(
    "--rpc-url", help="EVM JSON-RPC endpoint (default: $MESH_RPC_URL).")]
DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", help="Folder holding deployment.json (default: $MESH_DATA_DIR).")]
OrchestratorUrl = Annotated[str | None, typer.Option(
    "--orchestrator", help="The orchestrator's base URL (default: $MESH_ORCHESTRATOR_URL).")]
OrchestratorId = Annotated[str | None, typer.Option(
    help="The orchestrator's id, the EIP-712 salt (default: $MESH_ORCHESTRATOR_ID).")]


class UserError(Exception):
    """A mistake the user can fix; the message says what went wrong and what to do. `code`
    names it for scripts (`--json`): the service's error code where the service refused."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def fail(command: str, message: str, code: int = 2, *, kind: str = "user_error",
         as_json: bool = False) -> NoReturn:
    """End the command on one line: on stderr for a person, or, for a command given `--json`,
    as one JSON object `{"error": {"code": kind, "command": ..., "message": ...}}` on stdout,
    where a script reads the command's answer. Exits `code` either way."""
    if as_json:
        typer.echo(json.dumps({"error": {"code": kind, "command": f"mesh {command}",
                                         "message": message}}))
    else:
        typer.echo(f"mesh {command}: {message}", err=True)
    raise typer.Exit(code)


def error_code(error: BaseException) -> str:
    """A stable name for an error a script can branch on: the service's error code, the
    contract's custom error name, else the exception kind in snake case."""
    if code := getattr(error, "code", ""):
        return str(code)
    if _loaded("orchestrator.chain.errors"):
        from orchestrator.chain.errors import ContractError

        if isinstance(error, ContractError):
            return error.name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()


# What to do about the contract errors a user can cause, by error name.
HINTS: dict[str, str] = {
    "ERC20InsufficientBalance": "get tokens first (`mesh tokens mint` on a local chain)",
    "ERC20InsufficientAllowance": "approve the contract for the amount, then retry",
    "StakeManagerInsufficientFreeStake": "unbond or withdraw less; locked collateral is not "
    "free (`mesh provider status`)",
    "StakeManagerUnbondingNotEnded": "wait until withdrawable_at, then withdraw again",
    "StakeManagerUnknownUnbondingLock": "use the lock id `mesh provider unbond` printed",
    "StakeManagerTooManyUnbondingLocks": "withdraw a finished unbonding first",
    "StakeManagerZeroAmount": "give an amount above zero",
    "JobEscrowNothingToClaim": "no payout is claimable yet (`mesh provider status` shows "
    "pending payouts and when they release)",
    "JobEscrowNotReclaimableYet": "the escrow comes back after reclaimable_at; run the "
    "command again then",
    "JobEscrowNotCustomer": "use the wallet that escrowed the job",
    "JobEscrowJobNotFunded": "the escrow was already settled or reclaimed",
    "JobEscrowJobExists": "a job with this id is escrowed already",
    "JobEscrowDeadlineInPast": "give a deadline in the future",
    "JobEscrowZeroAmount": "give a budget above zero",
    # disputes
    "JobEscrowDisputeWindowClosed": "the job's dispute window has closed: its settlement is final",
    "StakeManagerSlashWindowClosed": "the slash's dispute window has closed: the slash is final",
    "DisputesJobNotSettled": "only a settled job can be disputed; wait for its settlement",
    "DisputesInvalidRespondent": "name a provider that backed the job (customer) or the "
                                 "job's customer (provider)",
    "DisputesNotAParty": "only the job's customer, a provider that backed it, or the slashed "
                         "provider can open this dispute",
    "DisputesRulingDeadlinePassed": "the ruling deadline passed; anyone may now apply the "
                                    "default ruling (`mesh dispute default ID`)",
    "DisputesRulingDeadlineNotReached": "the arbiter may still rule; the default applies only "
                                        "after the ruling deadline",
    "DisputesNotOpen": "the dispute was already ruled",
    "AccessControlUnauthorizedAccount": "this wallet is not an arbiter",
    "JobEscrowDisputeCapExceeded": "the amount is more than this job's disputes may still "
                                   "freeze",
    "StakeManagerInsufficientPending": "the amount is more than the respondent's payout from "
                                       "this job still pending",
    "JobEscrowPayoutNotProven": "what this job paid the respondent is not proven on chain yet",
}


def explain(error: BaseException) -> str:
    """One line for an error a command can meet; unknown kinds keep their own message."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                         for e in error.errors())
    if _loaded("orchestrator.chain.errors"):  # else no contract error can have been raised
        from orchestrator.chain.errors import ContractError, RevertError

        if isinstance(error, ContractError):
            hint = HINTS.get(error.name)
            return f"the contract refused: {error}" + (f"; {hint}" if hint else "")
        if isinstance(error, RevertError):
            return f"the transaction would revert ({error})"
    text = " ".join(str(error).split())
    lowered = text.lower()
    if "insufficient funds" in lowered:
        return ("the wallet has no ETH for gas; fund it (`mesh tokens mint` tops it up on a "
                "local chain)")
    return text or type(error).__name__


def user_error_types() -> tuple[type[BaseException], ...]:
    """The exception kinds that mean a user mistake or an unreachable peer, not a bug.

    The tools' kinds (the chain's, the local anvil's, a deployment's, ...) are taken only from
    modules this process has imported: an error of a module never loaded cannot have been
    raised, and importing one here would need the tools install, which a provider's
    agent-only install leaves out (importing it there would turn a wrong password into a
    traceback)."""
    import httpx
    from pydantic import ValidationError

    from protocol.client import ApiCallError
    from protocol.keystore import KeystoreError

    kinds: list[type[BaseException]] = [UserError, KeystoreError, ApiCallError, httpx.HTTPError,
                                        ValidationError, ValueError, OSError]
    if _loaded("orchestrator.chain.errors"):
        from orchestrator.chain.errors import ChainError

        kinds.append(ChainError)
    if _loaded("orchestrator.chain.artifacts"):
        from orchestrator.chain.artifacts import ArtifactError

        kinds.append(ArtifactError)
    if _loaded("web3.exceptions"):  # NodeError is web3's own Web3Exception
        from orchestrator.chain.tx import NodeError

        kinds.append(NodeError)
    if _loaded("orchestrator.chain.anvil"):
        from orchestrator.chain.anvil import AnvilError

        kinds.append(AnvilError)
    if _loaded("orchestrator.chain.deployment"):
        from orchestrator.chain.deployment import DeploymentError

        kinds.append(DeploymentError)
    if _loaded("mesh.reproduce"):
        from mesh.reproduce import ReproduceError

        kinds.append(ReproduceError)
    if _loaded("mesh.bench.pgcluster"):
        from mesh.bench.pgcluster import ClusterError

        kinds.append(ClusterError)
    return tuple(kinds)


def _loaded(module: str) -> bool:
    return module in sys.modules


# The modules of an install target that a smaller install leaves out (pyproject.toml's extras):
# a provider's node has the `agent` install, which has none of the server stack.
INSTALL_OF: dict[str, str] = {
    **dict.fromkeys(("bpy", "pynvml"), "agent"),
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg",
                     "apscheduler", "prometheus_client", "web3", "aiohttp", "ape", "solcx",
                     "eth_tester", "matplotlib"), "tools"),
}


def missing_install(error: ModuleNotFoundError) -> str | None:
    """What to install when a command needs a part this install left out; None when the
    missing module is not one an install target brings (a bug, not a smaller install)."""
    top = (error.name or "").split(".")[0]
    install = "tools" if top.startswith("ape_") else INSTALL_OF.get(top)
    if install is None:
        return None
    return (f"this command needs the {install} install, and this one has no {top}: in a clone "
            f"of the repository, pip install -c requirements.lock '.[{install}]'"
            + (" (or `make setup`)" if install == "tools" else "") + "; see docs/providers.md")


@contextlib.contextmanager
def user_errors(command: str, *, as_json: bool = False) -> Iterator[None]:
    """Turn a user mistake raised inside into one line (`fail`) and exit status 2."""
    try:
        yield
    except typer.Exit:
        raise
    except user_error_types() as error:
        fail(command, explain(error), kind=error_code(error), as_json=as_json)


def settings(**overrides: Any) -> ClientSettings:
    """A client's settings (`mesh/settings.py`) from the environment, with the options the user
    gave on top."""
    from mesh.settings import ClientSettings

    return ClientSettings(**{key: value for key, value in overrides.items() if value is not None})


def service_settings(**overrides: Any) -> Settings:
    """The service's `Settings` from the environment, with the options the user gave on top
    (the `mesh orchestrator` commands: they run or touch the service itself)."""
    from orchestrator.config import Settings

    return Settings(**{key: value for key, value in overrides.items() if value is not None})


# ---------------------------------------------------------------- output


def emit(result: Any, as_json: bool, human: Callable[[Any], None] | None = None) -> None:
    """`result` as JSON with `--json`, else `human(result)` (default: a key/value table)."""
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True, default=str))
    elif human is not None:
        human(result)
    else:
        print_table(result)


def print_table(result: Any, title: str | None = None,
                header: tuple[str, str] = ("", "value"), *, err: bool = False) -> None:
    """A rich table of a flat mapping (`header` names its two columns), or of a list of flat
    mappings (one row each), on stdout (`err`: stderr). It fits the terminal (80 columns too):
    a column whose cells are all short never wraps, the long ones (ids, addresses, prose) fold
    within their cells."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, padding=0, show_edge=False,
                  title_justify="left")
    if isinstance(result, dict):
        table.add_column(header[0], no_wrap=True)
        table.add_column(header[1], overflow="fold")
        for key, value in result.items():
            table.add_row(str(key), _cell(value))
    else:
        rows = [{column: _cell(value) for column, value in row.items()} for row in result]
        columns = list(rows[0]) if rows else []
        for column in columns:
            widest = max(len(column), *(len(row.get(column, "")) for row in rows))
            table.add_column(column, no_wrap=widest <= SHORT_CELL, overflow="fold")
        for row in rows:
            table.add_row(*(row.get(column, "") for column in columns))
    Console(stderr=err).print(table)


SHORT_CELL = 12  # characters: a column no wider than this keeps each cell on one line


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return "" if value is None else str(value)


def progress(description: str, *, quiet: bool = False) -> contextlib.AbstractContextManager[Any]:
    """A spinner on stderr while one slow step runs (a transaction, an upload)."""
    from rich.console import Console

    if quiet:
        return contextlib.nullcontext()
    return Console(stderr=True).status(description)


def ask(line: str, question: str, *, yes: bool, declined: str) -> None:
    """Say what is about to be paid (`line`, on stderr) and go on only once the user agrees
    (`question`, answered on stdin), or at once with `yes` (--yes, for scripts); `declined`
    is the one-line refusal when they do not."""
    if yes:
        typer.echo(line, err=True)
    elif not typer.confirm(f"{line}. {question}", err=True):
        raise UserError(declined)


def tokens(amount: str) -> int:
    """`1.5` tokens -> token units (18 decimals); refuses what is not a positive amount."""
    try:
        value = Decimal(amount) * 10**TOKEN_DECIMALS
    except InvalidOperation:
        raise UserError(f"{amount!r} is not an amount of tokens (e.g. 1000 or 2.5)") from None
    if value <= 0 or value != value.to_integral_value():
        raise UserError(f"{amount!r}: give a positive amount with at most {TOKEN_DECIMALS} "
                        "decimals")
    return int(value)


def tier_word(tier: int) -> str:
    """A tier as the dashboard names it (`background`, `standard`, `high`), for a number the
    chain or the service gives."""
    from orchestrator.domain.types import Tier

    return Tier(tier).name.lower()


def short_address(address: str) -> str:
    """`0x1234…cdef`, for a table column too narrow for the whole address."""
    return f"{address[:6]}…{address[-4:]}"


def when(timestamp: int | float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# ---------------------------------------------------------------- wallets


def wallet_dir(override: Path | None) -> Path:
    return override if override is not None else settings().wallet_dir.expanduser()


def keystore_path(wallet: str, directory: Path | None) -> Path:
    """A wallet name in the wallet dir, else a path to a keystore file."""
    named = wallet_dir(directory) / f"{wallet}.json"
    if named.is_file():
        return named
    path = Path(wallet).expanduser()
    if path.is_file():
        return path
    raise UserError(f"no wallet {wallet!r} in {wallet_dir(directory)} and no such keystore "
                    "file; create one with `mesh wallet new` (`mesh wallet list` shows them)")


def address_of(wallet: str, directory: Path | None) -> str:
    """An address as given, or a wallet's (read from its keystore: no password needed)."""
    from eth_utils import to_checksum_address

    if wallet.startswith("0x") and not Path(wallet).is_file():
        return checksum(wallet)
    path = keystore_path(wallet, directory)
    try:
        return str(to_checksum_address(json.loads(path.read_text())["address"]))
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path} is not a keystore") from None


def open_wallet(wallet: str, password_file: Path | None, directory: Path | None = None
                ) -> LocalAccount:
    from protocol import keystore

    path = keystore_path(wallet, directory)
    secret = keystore.password(password_file=password_file, prompt=lambda: typer.prompt(
        f"password of {path.name}", hide_input=True, err=True))
    return keystore.load(path, secret)


# ---------------------------------------------------------------- chain and orchestrator


def connect_chain(rpc_url: str | None, data_dir: Path | None) -> MeshChain:
    """The deployment under the data dir on the chain at the RPC URL, or a one-line reason."""
    from orchestrator.chain.deployment import Deployment, DeploymentError
    from orchestrator.chain.errors import ChainError
    from orchestrator.chain.sdk import MeshChain

    config = settings(rpc_url=rpc_url, data_dir=data_dir)
    try:
        deployment = Deployment.load(config.data_dir)
    except DeploymentError as error:
        raise UserError(f"{error}; or pass --data-dir / set MESH_DATA_DIR to the folder "
                        "holding deployment.json") from None
    try:
        return MeshChain.connect(config.rpc_url, deployment)
    except ChainError as error:
        raise UserError(f"{error}: start the chain, or point --rpc-url / MESH_RPC_URL and "
                        "--data-dir at the same network") from None


def require_local(chain: MeshChain, what: str) -> None:
    chain_id = chain.deployment.chain_id
    if chain_id not in LOCAL_CHAIN_IDS:
        raise UserError(f"{what} exists only on a local chain (id 31337); this is chain "
                        f"{chain_id}: get tokens from whoever runs it")


def ensure_tokens(chain: MeshChain, owner: str, needed: int, purpose: str) -> None:
    """Refuse before sending anything when the wallet cannot pay `needed` tokens."""
    balance = chain.token_balance(owner)
    if balance < needed:
        raise UserError(f"{owner} holds {show_tokens(balance)} tokens, {purpose} needs "
                        f"{show_tokens(needed)}; get tokens first (`mesh tokens mint` on a "
                        "local chain)")
    if chain.w3.eth.get_balance(owner) == 0:  # type: ignore[arg-type]
        raise UserError(f"{owner} has no ETH for gas; fund it (`mesh tokens mint` tops it up "
                        "on a local chain)")


@dataclass(frozen=True, slots=True)
class Service:
    """Where the orchestrator answers and what its signatures are bound to."""

    url: str
    chain_id: int
    orchestrator_id: str

    def wallet(self, account: LocalAccount) -> Wallet:
        from protocol.client import Wallet

        return Wallet.connect(self.url, bytes(account.key),
                              chain_id=self.chain_id, orchestrator_id=self.orchestrator_id)


def service(url: str | None, orchestrator_id: str | None, chain_id: int | None = None
            ) -> Service:
    config = settings(orchestrator_url=url, orchestrator_id=orchestrator_id, chain_id=chain_id)
    return Service(url=config.orchestrator_url, chain_id=config.chain_id,
                   orchestrator_id=config.orchestrator_id)


def call_service(what: str, request: Callable[[], Any]) -> Any:
    """One request to the orchestrator; an unreachable one or a refusal is a `UserError`."""
    import httpx

    from protocol.client import ApiCallError

    try:
        return request()
    except httpx.TransportError as error:
        raise UserError(f"no orchestrator answers ({error}); start one (`mesh orchestrator "
                        "serve`) or pass --orchestrator / MESH_ORCHESTRATOR_URL") from None
    except ApiCallError as error:
        raise UserError(f"the orchestrator refused to {what}: {error}",
                        code=error.code) from None


def checksum(address: str) -> str:
    from eth_utils import is_address, to_checksum_address

    if not is_address(address):
        raise UserError(f"{address!r} is not an address (0x + 40 hex digits)")
    return str(to_checksum_address(address))


def checksums(addresses: Sequence[str]) -> list[str]:
    return [checksum(a.strip()) for a in addresses if a.strip()]
