"""`mesh tokens` and `mesh provider` against anvil: a fresh wallet gets test tokens, stakes,
unbonds, withdraws and claims; every mistake is one line that says what to do, before any
gas is spent where the command can tell."""

from __future__ import annotations

import json

import pytest
from eth_utils import keccak

from orchestrator.chain.anvil import Anvil, dev_account, increase_time
from orchestrator.chain.deploy import deploy_local
from orchestrator.chain.errors import ContractError
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.chain.tx import connect
from tests.mesh.commands.conftest import Mesh, one_line_error

TOKEN = 10**18


def test_mint_givesAFreshWalletTokensAndGas_onTheLocalChain(on_chain: Mesh,
                                                            chain: MeshChain) -> None:
    address = on_chain.new_wallet("fresh")
    done = on_chain("tokens", "mint", "fresh", "2500", "--json")
    assert done.exit_code == 0, done.output
    assert chain.token_balance(address) == 2500 * TOKEN == json.loads(done.stdout)["balance"]
    assert chain.w3.eth.get_balance(address) > 0  # type: ignore[arg-type]
    shown = on_chain("tokens", "balance", address)
    assert "2500 tokens" in shown.stdout


def test_stake_status_unbond_withdraw_roundTrip(on_chain: Mesh, chain: MeshChain) -> None:
    address = on_chain.new_wallet("provider")
    assert on_chain("tokens", "mint", "provider", "1000").exit_code == 0
    staked = on_chain.signed("provider", "stake", "600", "--wallet", "provider", "--json")
    assert staked.exit_code == 0, staked.output
    assert chain.provider_stake(address).bonded == 600 * TOKEN
    status = on_chain("provider", "status", "--wallet", "provider", "--json")
    shown = json.loads(status.stdout)
    assert (shown["bonded"], shown["free"], shown["tokens"]) == (
        600 * TOKEN, 600 * TOKEN, 400 * TOKEN)
    assert shown["nodes"] is None and "no orchestrator answers" in shown["nodes_error"]

    unbonded = on_chain.signed("provider", "unbond", "100", "--wallet", "provider", "--json")
    assert unbonded.exit_code == 0, unbonded.output
    lock = json.loads(unbonded.stdout)
    too_early = on_chain.signed("provider", "withdraw", str(lock["lock_id"]),
                                "--wallet", "provider")
    assert "run this again then" in one_line_error(too_early, command="provider withdraw")
    increase_time(chain.w3, chain.unbonding_period() + 1)
    withdrawn = on_chain.signed("provider", "withdraw", str(lock["lock_id"]),
                                "--wallet", "provider", "--json")
    assert withdrawn.exit_code == 0, withdrawn.output
    assert json.loads(withdrawn.stdout)["paid"] == 100 * TOKEN
    assert chain.token_balance(address) == 500 * TOKEN
    human = on_chain("provider", "status", "--wallet", address)
    assert "500" in human.stdout and "bonded" in human.stdout


def test_lend_boundsWhatTheOrchestratorMayReserve(on_chain: Mesh, chain: MeshChain) -> None:
    address = on_chain.new_wallet("lender")
    assert on_chain("tokens", "mint", "lender", "500").exit_code == 0
    assert on_chain.signed("provider", "stake", "500", "--wallet", "lender").exit_code == 0
    lent = on_chain.signed("provider", "lend", "100", "--days", "2", "--wallet", "lender",
                           "--json")
    assert lent.exit_code == 0, lent.output
    assert json.loads(lent.stdout)["horizon_s"] == 2 * 86_400
    orchestrator = chain.account(dev_account(1))
    now = int(chain.w3.eth.get_block("latest")["timestamp"])
    for amount, until in ((101 * TOKEN, now + 86_400), (100 * TOKEN, now + 3 * 86_400)):
        with pytest.raises(ContractError, match="StakeManagerParameterOutOfRange"):
            orchestrator.reserve_collateral([address], [amount], until)
    orchestrator.reserve_collateral([address], [100 * TOKEN], now + 86_400)
    assert chain.provider_stake(address).reserved == 100 * TOKEN


def test_stake_withoutTokens_isOneLine_andSendsNothing(on_chain: Mesh, chain: MeshChain) -> None:
    address = on_chain.new_wallet("broke")
    error = one_line_error(on_chain.signed("provider", "stake", "10", "--wallet", "broke"),
                           command="provider stake")
    assert "holds 0 tokens" in error and "mesh tokens mint" in error
    assert chain.w3.eth.get_transaction_count(address) == 0  # type: ignore[arg-type]


def test_unbond_moreThanIsFree_andAnUnknownLock_areOneLine(on_chain: Mesh) -> None:
    on_chain.new_wallet("small")
    on_chain("tokens", "mint", "small", "50")
    assert on_chain.signed("provider", "stake", "50", "--wallet", "small").exit_code == 0
    assert "only 50 of the stake is free" in one_line_error(
        on_chain.signed("provider", "unbond", "80", "--wallet", "small"),
        command="provider unbond")
    assert "no open unbonding lock 7" in one_line_error(
        on_chain.signed("provider", "withdraw", "7", "--wallet", "small"),
        command="provider withdraw")


def test_claim_paysASettledJobsPayout_afterItsWindow(on_chain: Mesh, chain: MeshChain,
                                                   customer: MeshAccount,
                                                   orchestrator: MeshAccount) -> None:
    address = on_chain.new_wallet("earner")
    on_chain("tokens", "mint", "earner", "1")
    nothing = one_line_error(on_chain.signed("provider", "claim", "--wallet", "earner"),
                             command="provider claim")
    assert "nothing is claimable" in nothing
    job_id = keccak(text="cli claim test")
    deadline = chain.w3.eth.get_block("latest")["timestamp"] + 3600
    customer.create_job(job_id, 5 * TOKEN, deadline, keccak(text="spec"))
    orchestrator.settle(job_id, [address], [3 * TOKEN], keccak(text="results"))
    pending = one_line_error(on_chain.signed("provider", "claim", "--wallet", "earner"),
                             command="provider claim")
    assert "3 pending, releasing from" in pending
    increase_time(chain.w3, chain.settlement_dispute_window() + 2 * chain.payout_period())
    claimed = on_chain.signed("provider", "claim", "--wallet", "earner", "--json")
    assert claimed.exit_code == 0, claimed.output
    assert json.loads(claimed.stdout)["claimed"] == 3 * TOKEN
    assert chain.token_balance(address) == 4 * TOKEN


def test_wrongNetwork_noDeployment_andMissingWallet_areOneLine(mesh: Mesh, on_chain: Mesh
                                                               ) -> None:
    assert "deploy first" in one_line_error(
        mesh("provider", "status", "--wallet", "0x" + "1" * 40,
             "--data-dir", str(mesh.root / "nowhere")),
        command="provider status")
    unreachable = one_line_error(on_chain("provider", "status", "--wallet", "0x" + "1" * 40,
                                          "--rpc-url", "http://127.0.0.1:9"),
                                 command="provider status")
    assert "no JSON-RPC node answers" in unreachable and "--rpc-url" in unreachable
    assert "mesh wallet new" in one_line_error(
        on_chain.signed("provider", "stake", "1", "--wallet", "nobody"), command="provider stake")


def test_aDeploymentOfAnotherChain_isOneLine(on_chain: Mesh) -> None:
    deployment = json.loads((on_chain.root / "data" / "deployment.json").read_text())
    foreign = on_chain.root / "foreign"
    foreign.mkdir()
    (foreign / "deployment.json").write_text(json.dumps({**deployment, "chain_id": 1}))
    error = one_line_error(on_chain("tokens", "mint", "0x" + "2" * 40, "5", "--data-dir",
                                    str(foreign)), command="tokens mint")
    assert "is chain 31337, the deployment is for chain 1" in error


def test_mint_onAChainThatIsNotLocal_isRefused(mesh: Mesh) -> None:
    with Anvil(chain_id=11155111) as sepolia_like:
        w3 = connect(sepolia_like.rpc_url)
        deploy_local(w3, dev_account(0).key, orchestrator=dev_account(1).address,
                     slasher=dev_account(2).address, arbiter=dev_account(3).address
                     ).save(mesh.root / "data")
        error = one_line_error(mesh("tokens", "mint", "0x" + "2" * 40, "5", "--rpc-url",
                                    sepolia_like.rpc_url), command="tokens mint")
    assert error == ("mesh tokens mint: minting exists only on a local chain (id 31337); this "
                     "is chain 11155111: get tokens from whoever runs it")


def test_aRevertTheCommandCannotForesee_isDecodedWithItsHint(chain: MeshChain) -> None:
    """The SDK's decoded ERC20InsufficientBalance (0xe450d38c) becomes a line saying what to do."""
    from mesh.commands.common import explain
    from orchestrator.chain.anvil import set_balance
    from orchestrator.chain.errors import ContractError

    poor = dev_account(9)
    set_balance(chain.w3, poor.address, 10**18)
    try:
        chain.account(poor).stake(TOKEN)
    except ContractError as error:
        line = explain(error)
    else:
        raise AssertionError("staking without tokens went through")
    assert line.startswith("the contract refused: ERC20InsufficientBalance(sender=")
    assert "mesh tokens mint" in line


def test_status_showsTokensAndTheTierByName_andTakesThePasswordFile(on_chain: Mesh) -> None:
    """The table shows tokens and ETH, never token units or wei; the tier is the dashboard's
    word; `--password-file`, which every signing command takes, is taken here too."""
    on_chain.new_wallet("provider")
    assert on_chain("tokens", "mint", "provider", "1000").exit_code == 0
    assert on_chain.signed("provider", "stake", "600", "--wallet", "provider").exit_code == 0
    on_chain.env["COLUMNS"] = "80"
    shown = on_chain.signed("provider", "status", "--wallet", "provider")
    assert shown.exit_code == 0, shown.output
    assert "600 tokens" in shown.stdout and "400 tokens" in shown.stdout
    assert str(600 * TOKEN) not in shown.stdout and " ETH" in shown.stdout
    lines = [line for line in shown.stdout.splitlines() if not line.startswith("nodes: ")]
    assert max(map(len, lines)) <= 80  # the table; the line about nodes is prose
    (tier,) = [line.split()[-1] for line in lines if line.startswith("tier")]
    assert tier in ("background", "standard", "high")
    as_json = json.loads(on_chain.signed("provider", "status", "--wallet", "provider",
                                         "--json").stdout)
    assert as_json["tier"] == tier and as_json["bonded"] == 600 * TOKEN
