// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/AccessControlDefaultAdminRules.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";

import {IDisputes} from "./interfaces/IDisputes.sol";
import {IJobEscrow} from "./interfaces/IJobEscrow.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";

/// @title Disputes
/// @notice Bonded disputes over settlements and slashes, ruled by an arbiter. See {IDisputes}.
/// @dev Needs DISPUTES_ROLE on the JobEscrow (freeze/unfreeze payouts) and DISPUTES_ROLE plus
/// SLASHER_ROLE on the StakeManager (freeze/resolve slashes; slash on a granted customer dispute).
/// The escrow does not store what a settlement paid each provider (that would cost storage on
/// every settlement), only a digest of each settlement's payout list: a customer's dispute names a
/// provider that backed the job, whose payout from the job was proven first
/// (`IJobEscrow.provePayout`), and the escrow caps what all disputes of the job may freeze from
/// that provider at what the job paid it (from the customer: at the job's refund).
contract Disputes is IDisputes, AccessControlDefaultAdminRules, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    /// @inheritdoc IDisputes
    bytes32 public constant ARBITER_ROLE = keccak256("ARBITER_ROLE");
    /// @inheritdoc IDisputes
    uint256 public constant MAX_RULING_PERIOD = 30 days;

    /// @dev Delay of a two-step transfer of DEFAULT_ADMIN_ROLE (AccessControlDefaultAdminRules).
    uint48 private constant ADMIN_TRANSFER_DELAY = 2 days;

    IERC20 private immutable _token;
    IStakeManager private immutable _stakeManager;
    IJobEscrow private immutable _escrow;

    mapping(uint256 disputeId => Dispute) private _disputes;
    uint256 private _disputeCount;
    uint96 private _bond;
    uint64 private _rulingPeriod;

    /// @notice Deploy last; then grant this contract DISPUTES_ROLE on the escrow and DISPUTES_ROLE
    /// and SLASHER_ROLE on the StakeManager, and ARBITER_ROLE here to the arbiters.
    /// @param token_ The bond token (the stake and payment token).
    /// @param stakeManager_ The StakeManager whose slashes can be disputed.
    /// @param escrow_ The JobEscrow whose settlements can be disputed.
    /// @param admin Receives DEFAULT_ADMIN_ROLE.
    /// @param bond_ Token units an opener posts.
    /// @param rulingPeriod_ Seconds the arbiter has to rule before the default applies.
    constructor(
        IERC20 token_,
        IStakeManager stakeManager_,
        IJobEscrow escrow_,
        address admin,
        uint96 bond_,
        uint64 rulingPeriod_
    ) AccessControlDefaultAdminRules(ADMIN_TRANSFER_DELAY, admin) {
        if (address(token_) == address(0)) revert DisputesZeroAddress("token");
        if (address(stakeManager_) == address(0)) revert DisputesZeroAddress("stakeManager");
        if (address(escrow_) == address(0)) revert DisputesZeroAddress("escrow");
        if (
            stakeManager_.token() != address(token_) || escrow_.token() != address(token_)
                || escrow_.stakeManager() != address(stakeManager_)
        ) revert DisputesWiringMismatch(address(token_), address(escrow_));
        if (bond_ == 0) revert DisputesParameterOutOfRange(0, 1, type(uint96).max);
        if (rulingPeriod_ == 0 || rulingPeriod_ > MAX_RULING_PERIOD) {
            revert DisputesParameterOutOfRange(rulingPeriod_, 1, MAX_RULING_PERIOD);
        }
        _token = token_;
        _stakeManager = stakeManager_;
        _escrow = escrow_;
        _bond = bond_;
        _rulingPeriod = rulingPeriod_;
        emit DisputeBondSet(bond_);
        emit RulingPeriodSet(rulingPeriod_);
    }

    // ------------------------------------------------------------------ parties

    /// @inheritdoc IDisputes
    function disputeSettlement(bytes32 jobId, address respondent, uint256 amount, bytes32 evidence)
        external
        nonReentrant
        returns (uint256 disputeId)
    {
        IJobEscrow.Job memory job = _escrow.jobOf(jobId);
        if (job.status != IJobEscrow.JobStatus.Settled) revert DisputesJobNotSettled(jobId);
        if (amount == 0) revert DisputesZeroAmount(jobId);
        if (msg.sender == job.customer) {
            // The customer disputes the payout of a provider that backed this job.
            if (respondent == job.customer || !_escrow.isBacker(jobId, respondent)) {
                revert DisputesInvalidRespondent(respondent);
            }
        } else {
            // A provider that backed this job can only dispute against the customer's refund.
            if (!_escrow.isBacker(jobId, msg.sender)) revert DisputesNotAParty(msg.sender);
            if (respondent != job.customer) revert DisputesInvalidRespondent(respondent);
        }
        disputeId = _open(DisputeKind.Settlement, jobId, respondent, amount, evidence);
        _escrow.freezePayout(jobId, respondent, amount);
        _pullBond();
    }

    /// @inheritdoc IDisputes
    function disputeSlash(uint256 slashId, bytes32 evidence) external nonReentrant returns (uint256 disputeId) {
        IStakeManager.Slash memory s = _stakeManager.slashOf(slashId);
        if (msg.sender != s.provider) revert DisputesNotAParty(msg.sender);
        disputeId = _open(DisputeKind.Slash, bytes32(slashId), s.beneficiary, 0, evidence);
        _stakeManager.freezeSlash(slashId);
        _pullBond();
    }

    /// @inheritdoc IDisputes
    function applyDefaultRuling(uint256 disputeId) external nonReentrant {
        Dispute storage d = _disputes[disputeId];
        if (d.status != DisputeStatus.Open) revert DisputesNotOpen(disputeId);
        if (block.timestamp <= d.rulingDeadline) revert DisputesRulingDeadlineNotReached(disputeId, d.rulingDeadline);
        d.status = DisputeStatus.Defaulted;
        emit DisputeDefaulted(disputeId);
        _restoreStatusQuo(d);
        // The opener did not prove its case: the bond compensates the respondent for the freeze.
        if (d.bond != 0) _token.safeTransfer(d.respondent, d.bond);
    }

    // ------------------------------------------------------------------ arbiter role

    /// @inheritdoc IDisputes
    function rule(uint256 disputeId, bool granted, uint256 slashAmount, bytes32 evidence)
        external
        nonReentrant
        onlyRole(ARBITER_ROLE)
    {
        Dispute storage d = _disputes[disputeId];
        if (d.status != DisputeStatus.Open) revert DisputesNotOpen(disputeId);
        if (block.timestamp > d.rulingDeadline) revert DisputesRulingDeadlinePassed(disputeId, d.rulingDeadline);
        bool customerOpened =
            d.kind == DisputeKind.Settlement && _escrow.jobOf(d.subject).customer == d.opener;
        if (slashAmount != 0 && !(granted && customerOpened)) revert DisputesSlashNotAllowed(disputeId);
        if (slashAmount > d.frozenAmount) revert DisputesSlashTooLarge(disputeId, slashAmount, d.frozenAmount);

        d.status = granted ? DisputeStatus.Granted : DisputeStatus.Dismissed;
        // slither-disable-next-line uninitialized-local
        uint256 slashId;
        if (!granted) {
            _restoreStatusQuo(d);
        } else if (d.kind == DisputeKind.Settlement) {
            _escrow.unfreezePayout(d.subject, d.respondent, d.opener, d.frozenAmount);
            // Capped at what is slashable now (free bonded and unbonding stake), so a ruling
            // never reverts for asking more than is left.
            IStakeManager.StakeInfo memory info = _stakeManager.stakeOf(d.respondent);
            slashAmount = Math.min(slashAmount, info.bonded - info.locked + info.unbonding);
            if (slashAmount != 0) {
                slashId = _stakeManager.slash(d.respondent, slashAmount, IStakeManager.SlashReason.Other, evidence);
            }
        } else {
            _stakeManager.resolveSlash(uint256(d.subject), true);
        }
        emit DisputeRuled(disputeId, granted, slashId, evidence);
        if (d.bond != 0) _token.safeTransfer(granted ? d.opener : d.respondent, d.bond);
    }

    // ------------------------------------------------------------------ admin

    /// @inheritdoc IDisputes
    function setBond(uint96 bond_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (bond_ == 0) revert DisputesParameterOutOfRange(0, 1, type(uint96).max);
        _bond = bond_;
        emit DisputeBondSet(bond_);
    }

    /// @inheritdoc IDisputes
    function setRulingPeriod(uint64 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (period == 0 || period > MAX_RULING_PERIOD) revert DisputesParameterOutOfRange(period, 1, MAX_RULING_PERIOD);
        _rulingPeriod = period;
        emit RulingPeriodSet(period);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc IDisputes
    function disputeOf(uint256 disputeId) external view returns (Dispute memory) {
        return _disputes[disputeId];
    }

    /// @inheritdoc IDisputes
    function disputeCount() external view returns (uint256) {
        return _disputeCount;
    }

    /// @inheritdoc IDisputes
    function bond() external view returns (uint96) {
        return _bond;
    }

    /// @inheritdoc IDisputes
    function rulingPeriod() external view returns (uint64) {
        return _rulingPeriod;
    }

    // ------------------------------------------------------------------ internal

    function _open(DisputeKind kind, bytes32 subject, address respondent, uint256 frozenAmount, bytes32 evidence)
        private
        returns (uint256 disputeId)
    {
        disputeId = ++_disputeCount;
        uint40 rulingDeadline = (block.timestamp + _rulingPeriod).toUint40();
        uint96 bondAmount = _bond;
        _disputes[disputeId] = Dispute({
            opener: msg.sender,
            rulingDeadline: rulingDeadline,
            kind: kind,
            status: DisputeStatus.Open,
            respondent: respondent,
            bond: bondAmount,
            subject: subject,
            frozenAmount: frozenAmount
        });
        emit DisputeOpened(
            disputeId, kind, subject, msg.sender, respondent, bondAmount, frozenAmount, evidence, rulingDeadline
        );
    }

    /// @dev Lets the disputed decision stand: the frozen payout returns to the respondent, or the
    /// slash becomes releasable.
    function _restoreStatusQuo(Dispute storage d) private {
        if (d.kind == DisputeKind.Settlement) {
            _escrow.unfreezePayout(d.subject, d.respondent, d.respondent, d.frozenAmount);
        } else {
            _stakeManager.resolveSlash(uint256(d.subject), false);
        }
    }

    /// @dev Pulls the current bond from the opener, refusing fee-on-transfer tokens.
    function _pullBond() private {
        uint256 amount = _bond;
        if (amount == 0) return;
        uint256 before = _token.balanceOf(address(this));
        _token.safeTransferFrom(msg.sender, address(this), amount);
        uint256 received = _token.balanceOf(address(this)) - before;
        if (received != amount) revert DisputesFeeOnTransferToken(amount, received);
    }
}
