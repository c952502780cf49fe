// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

import {IStakeManager} from "../../contracts/interfaces/IStakeManager.sol";
import {TestReentrantToken} from "../../contracts/test/TestReentrantToken.sol";
import {TestToken} from "../../contracts/test/TestToken.sol";
import {Base} from "./Base.sol";

/// @notice Every function that moves tokens, on a token that calls back into the same contract
/// during the transfer (as a malicious token or an ERC-777 hook would): the re-entry is refused
/// and the outer call reverts with it, so nothing moves twice.
contract ReentrancyTest is Base {
    bytes32 internal constant JOB = keccak256("reentrant job");
    bytes4 internal immutable REENTERED = ReentrancyGuardTransient.ReentrancyGuardReentrantCall.selector;

    TestReentrantToken internal reentrant;

    function setUp() public {
        reentrant = new TestReentrantToken();
        _deploy(TestToken(address(reentrant)));
    }

    function _arm(address target, bytes memory data) internal {
        reentrant.arm(target, data);
    }

    function _settledJob() internal {
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 100 * TOKEN);
        _lock(JOB, provider, TOKEN);
        _settle(JOB, provider, 60 * TOKEN);
    }

    function test_stake_refusesReentry() public {
        _fund(provider, 100 * TOKEN);
        _arm(address(sm), abi.encodeCall(sm.stake, (1)));
        vm.expectRevert(REENTERED);
        vm.prank(provider);
        sm.stake(100 * TOKEN);
    }

    function test_withdraw_refusesReentry() public {
        _stake(provider, 100 * TOKEN);
        vm.startPrank(provider);
        sm.requestUnbond(40 * TOKEN);
        sm.requestUnbond(40 * TOKEN);
        vm.stopPrank();
        _skip(UNBONDING_PERIOD);
        _arm(address(sm), abi.encodeCall(sm.withdraw, (1)));
        vm.expectRevert(REENTERED);
        vm.prank(provider);
        sm.withdraw(0);
        assertEq(sm.stakeOf(provider).unbonding, 80 * TOKEN, "unbonding changed");
    }

    function test_releaseSlash_refusesReentry() public {
        _stake(provider, 100 * TOKEN);
        vm.prank(orchestrator);
        sm.slash(provider, 10 * TOKEN, IStakeManager.SlashReason.Other, ROOT);
        _skip(SLASH_DISPUTE_WINDOW);
        _arm(address(sm), abi.encodeCall(sm.releaseSlash, (1)));
        vm.expectRevert(REENTERED);
        sm.releaseSlash(1);
    }

    function test_createJob_refusesReentry() public {
        _fund(customer, 100 * TOKEN);
        _arm(address(escrow), abi.encodeCall(escrow.createJob, (keccak256("other"), 1, uint64(block.timestamp + 1 hours), ROOT)));
        vm.expectRevert(REENTERED);
        vm.prank(customer);
        escrow.createJob(JOB, 100 * TOKEN, uint64(block.timestamp + 1 hours), ROOT);
    }

    function test_reclaim_refusesReentry() public {
        _job(JOB, 100 * TOKEN);
        _skip(1 hours + GRACE + 1);
        _arm(address(escrow), abi.encodeCall(escrow.reclaim, (JOB)));
        vm.expectRevert(REENTERED);
        vm.prank(customer);
        escrow.reclaim(JOB);
    }

    function test_claim_refusesReentry() public {
        _settledJob();
        _skip(2 days);
        _arm(address(escrow), abi.encodeCall(escrow.claim, ()));
        vm.expectRevert(REENTERED);
        vm.prank(provider);
        escrow.claim();
        assertEq(_claimable(provider), 60 * TOKEN, "claimable changed");
    }

    function test_claimRefund_refusesReentry() public {
        _settledJob();
        _skip(WINDOW);
        _arm(address(escrow), abi.encodeCall(escrow.claimRefund, (JOB)));
        vm.expectRevert(REENTERED);
        escrow.claimRefund(JOB);
        assertEq(escrow.jobOf(JOB).refund, 40 * TOKEN, "refund changed");
    }

    function test_disputeSettlement_refusesReentry() public {
        _settledJob();
        _fund(customer, 2 * uint256(BOND));
        _arm(address(disputes), abi.encodeCall(disputes.disputeSettlement, (JOB, provider, 1, ROOT)));
        vm.expectRevert(REENTERED);
        vm.prank(customer);
        disputes.disputeSettlement(JOB, provider, 10 * TOKEN, ROOT);
    }

    function test_disputeSlash_refusesReentry() public {
        _stake(provider, 100 * TOKEN);
        vm.prank(orchestrator);
        sm.slash(provider, 10 * TOKEN, IStakeManager.SlashReason.Other, ROOT);
        _fund(provider, 2 * uint256(BOND));
        _arm(address(disputes), abi.encodeCall(disputes.disputeSlash, (1, ROOT)));
        vm.expectRevert(REENTERED);
        vm.prank(provider);
        disputes.disputeSlash(1, ROOT);
    }

    function test_applyDefaultRuling_refusesReentry() public {
        _settledJob();
        _fund(customer, BOND);
        vm.prank(customer);
        uint256 id = disputes.disputeSettlement(JOB, provider, 10 * TOKEN, ROOT);
        _skip(RULING + 1);
        _arm(address(disputes), abi.encodeCall(disputes.applyDefaultRuling, (id)));
        vm.expectRevert(REENTERED);
        disputes.applyDefaultRuling(id);
    }

    function test_rule_refusesReentry() public {
        _settledJob();
        _fund(customer, BOND);
        vm.prank(customer);
        uint256 id = disputes.disputeSettlement(JOB, provider, 10 * TOKEN, ROOT);
        _arm(address(disputes), abi.encodeCall(disputes.rule, (id, true, 0, ROOT)));
        vm.expectRevert(REENTERED);
        vm.prank(arbiter);
        disputes.rule(id, true, 0, ROOT);
    }
}
