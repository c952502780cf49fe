// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";

import {IJobEscrow} from "./interfaces/IJobEscrow.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";

/// @title JobEscrow
/// @notice Customer escrow and exactly-once settlement of DePIN Mesh jobs. See {IJobEscrow}.
/// @dev Storage is laid out for cheap settlement: a job's amount, refund, settlement time and
/// status share one slot (the only job slot settlement reads or writes). This contract holds the
/// payout tokens, but the payout books live in the StakeManager, in the same slot as the
/// provider's locked collateral: settling a job releases the collateral and credits the payout
/// with one storage write per provider, and the customer's refund costs none.
contract JobEscrow is IJobEscrow, AccessControl, Pausable, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    /// @inheritdoc IJobEscrow
    bytes32 public constant ORCHESTRATOR_ROLE = keccak256("ORCHESTRATOR_ROLE");
    /// @inheritdoc IJobEscrow
    bytes32 public constant DISPUTES_ROLE = keccak256("DISPUTES_ROLE");

    /// @dev One job, three slots; settlement reads and writes only `head`, in one SLOAD and one
    /// SSTORE (see {_packHead} / {_unpackHead}).
    struct JobRecord {
        uint256 head; // packed JobHead
        address customer; // who paid and receives the refund
        uint40 deadline; // unix time the work is due
        bytes32 specHash; // keccak of the canonical job spec
    }

    /// @dev The part of a job settlement changes, packed into `JobRecord.head`.
    struct JobHead {
        uint96 amount; // token units escrowed
        uint96 refund; // settled: owed back to the customer until claimed (less any frozen part)
        uint40 settledAt; // unix time of settlement, 0 before
        JobStatus status; // see JobStatus
    }

    /// @dev (job, provider, payout) pairs a settlement hands to the StakeManager in one call.
    struct PayoutList {
        SoloSettlement[] pairs; // one per listed provider of each job
        uint256 count; // pairs filled so far
    }

    // Bit offsets of the packed JobHead word: amount | refund | settledAt | status.
    uint256 private constant _REFUND_SHIFT = 96;
    uint256 private constant _SETTLED_AT_SHIFT = 192;
    uint256 private constant _STATUS_SHIFT = 232;

    IERC20 private immutable _token;
    IStakeManager private immutable _stakeManager;

    mapping(bytes32 jobId => JobRecord) private _jobs;
    mapping(address account => uint256) private _frozen;

    uint64 private _gracePeriod;
    uint64 private _disputeWindow;

    /// @notice Deploy after the StakeManager; then the StakeManager admin calls
    /// `stakeManager.setJobEscrow(address(this))` so this contract may lock collateral.
    /// @param token_ The payment ERC-20 (the same token the StakeManager stakes).
    /// @param stakeManager_ The StakeManager collateral is locked on.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (pause, parameters, role grants).
    /// @param gracePeriod_ Seconds after a job's deadline before its customer may reclaim.
    /// @param disputeWindow_ Seconds after settlement that payouts stay pending and disputable.
    constructor(IERC20 token_, IStakeManager stakeManager_, address admin, uint64 gracePeriod_, uint64 disputeWindow_) {
        _token = token_;
        _stakeManager = stakeManager_;
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        _gracePeriod = gracePeriod_;
        _disputeWindow = disputeWindow_;
        emit GracePeriodSet(gracePeriod_);
        emit DisputeWindowSet(disputeWindow_);
    }

    // ------------------------------------------------------------------ customer

    /// @inheritdoc IJobEscrow
    function createJob(bytes32 jobId, uint256 amount, uint64 deadline, bytes32 specHash)
        external
        nonReentrant
        whenNotPaused
    {
        if (_jobs[jobId].head != 0) revert JobEscrowJobExists(jobId);
        if (amount == 0) revert JobEscrowZeroAmount();
        if (amount > type(uint96).max) revert JobEscrowAmountTooLarge(amount, type(uint96).max);
        if (deadline <= block.timestamp) revert JobEscrowDeadlineInPast(deadline, block.timestamp);
        _jobs[jobId] = JobRecord({
            head: _packHead(JobHead({amount: uint96(amount), refund: 0, settledAt: 0, status: JobStatus.Funded})),
            customer: msg.sender,
            deadline: uint256(deadline).toUint40(),
            specHash: specHash
        });
        emit JobCreated(jobId, msg.sender, amount, deadline, specHash);
        uint256 before = _token.balanceOf(address(this));
        _token.safeTransferFrom(msg.sender, address(this), amount);
        uint256 received = _token.balanceOf(address(this)) - before;
        if (received != amount) revert JobEscrowFeeOnTransferToken(amount, received);
    }

    /// @inheritdoc IJobEscrow
    function reclaim(bytes32 jobId) external nonReentrant {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        if (head.status != JobStatus.Funded) revert JobEscrowJobNotFunded(jobId, head.status);
        address customer = job.customer;
        if (msg.sender != customer) revert JobEscrowNotCustomer(jobId, customer);
        uint256 reclaimableAt = uint256(job.deadline) + _gracePeriod;
        if (block.timestamp <= reclaimableAt) revert JobEscrowNotReclaimableYet(jobId, reclaimableAt);
        head.status = JobStatus.Reclaimed;
        job.head = _packHead(head);
        uint256 amount = head.amount;
        emit JobReclaimed(jobId, customer, amount);
        _token.safeTransfer(customer, amount);
    }

    /// @inheritdoc IJobEscrow
    function claim() external nonReentrant returns (uint256 amount) {
        amount = _stakeManager.takeClaimable(msg.sender);
        if (amount == 0) revert JobEscrowNothingToClaim(msg.sender);
        emit Claimed(msg.sender, amount);
        _token.safeTransfer(msg.sender, amount);
    }

    /// @inheritdoc IJobEscrow
    function claimRefund(bytes32 jobId) external nonReentrant returns (uint256 amount) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        if (head.status != JobStatus.Settled) revert JobEscrowJobNotFunded(jobId, head.status);
        amount = head.refund;
        if (amount == 0) revert JobEscrowNoRefund(jobId);
        uint256 claimableAt = uint256(head.settledAt) + _disputeWindow;
        if (block.timestamp < claimableAt) revert JobEscrowRefundNotClaimableYet(jobId, claimableAt);
        head.refund = 0;
        job.head = _packHead(head);
        address customer = job.customer;
        emit RefundClaimed(jobId, customer, amount);
        _token.safeTransfer(customer, amount);
    }

    /// @inheritdoc IJobEscrow
    function releaseCollateral(bytes32 jobId, address[] calldata providers) external {
        JobStatus status = _unpackHead(_jobs[jobId].head).status;
        if (status == JobStatus.Funded) revert JobEscrowJobStillOpen(jobId);
        if (status == JobStatus.None) revert JobEscrowJobNotFunded(jobId, status);
        bytes32[] memory jobIds = new bytes32[](providers.length);
        for (uint256 i; i < providers.length; ++i) {
            jobIds[i] = jobId;
        }
        _stakeManager.releaseCollateral(jobIds, providers);
    }

    // ------------------------------------------------------------------ orchestrator role

    /// @inheritdoc IJobEscrow
    function lockCollateral(bytes32 jobId, address[] calldata providers, uint256[] calldata amounts)
        external
        onlyRole(ORCHESTRATOR_ROLE)
        whenNotPaused
    {
        JobStatus status = _unpackHead(_jobs[jobId].head).status;
        if (status != JobStatus.Funded) revert JobEscrowJobNotFunded(jobId, status);
        _stakeManager.lockCollateral(jobId, providers, amounts);
    }

    /// @inheritdoc IJobEscrow
    function settle(bytes32 jobId, address[] calldata providers, uint256[] calldata payouts, bytes32 resultRoot)
        external
        onlyRole(ORCHESTRATOR_ROLE)
    {
        PayoutList memory list = _newPayoutList(providers.length);
        uint256 refund = _settle(jobId, providers, payouts, resultRoot, list);
        emit JobSettled(jobId, refund, resultRoot);
        _stakeManager.settleCollateral(list.pairs, _releaseAt());
    }

    /// @inheritdoc IJobEscrow
    function settleBatch(Settlement[] calldata settlements) external onlyRole(ORCHESTRATOR_ROLE) {
        uint256 pairs;
        for (uint256 j; j < settlements.length; ++j) {
            pairs += settlements[j].providers.length;
        }
        PayoutList memory list = _newPayoutList(pairs);
        bytes32[] memory jobIds = new bytes32[](settlements.length);
        for (uint256 j; j < settlements.length; ++j) {
            Settlement calldata s = settlements[j];
            bytes32 jobId = s.jobId;
            _settle(jobId, s.providers, s.payouts, s.resultRoot, list);
            jobIds[j] = jobId;
        }
        emit JobsSettled(jobIds);
        _stakeManager.settleCollateral(list.pairs, _releaseAt());
    }

    /// @inheritdoc IJobEscrow
    function settleBatchSolo(SoloSettlement[] calldata settlements) external onlyRole(ORCHESTRATOR_ROLE) {
        uint256 count = settlements.length;
        bytes32[] memory jobIds = new bytes32[](count);
        for (uint256 j; j < count; ++j) {
            SoloSettlement calldata s = settlements[j];
            bytes32 jobId = s.jobId;
            _closeJob(jobId, s.payout);
            assembly ("memory-safe") {
                mstore(add(jobIds, shl(5, add(j, 1))), jobId) // jobIds[j], j < count
            }
        }
        emit JobsSettled(jobIds);
        _stakeManager.settleCollateral(settlements, _releaseAt());
    }

    // ------------------------------------------------------------------ disputes role

    /// @inheritdoc IJobEscrow
    function freezePayout(bytes32 jobId, address account, uint256 amount) external onlyRole(DISPUTES_ROLE) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        if (head.status != JobStatus.Settled) revert JobEscrowJobNotFunded(jobId, head.status);
        uint256 closedAt = uint256(head.settledAt) + _disputeWindow;
        if (block.timestamp >= closedAt) revert JobEscrowDisputeWindowClosed(jobId, closedAt);
        if (amount > head.amount) revert JobEscrowPayoutExceedsEscrow(jobId, amount, head.amount);
        if (account == job.customer) {
            if (amount > head.refund) revert JobEscrowInsufficientPending(account, amount, head.refund);
            head.refund -= uint96(amount);
            job.head = _packHead(head);
        } else {
            uint256 pending = _stakeManager.payoutOf(account).pending;
            if (amount > pending) revert JobEscrowInsufficientPending(account, amount, pending);
            _stakeManager.freezePending(account, amount);
        }
        _frozen[account] += amount;
        emit PayoutFrozen(jobId, account, amount);
    }

    /// @inheritdoc IJobEscrow
    function unfreezePayout(address from, address to, uint256 amount) external onlyRole(DISPUTES_ROLE) {
        uint256 frozen = _frozen[from];
        if (amount > frozen) revert JobEscrowInsufficientFrozen(from, amount, frozen);
        _frozen[from] = frozen - amount;
        emit PayoutUnfrozen(from, to, amount);
        _stakeManager.creditClaimable(to, amount);
    }

    // ------------------------------------------------------------------ admin

    /// @inheritdoc IJobEscrow
    function pause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _pause();
    }

    /// @inheritdoc IJobEscrow
    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    /// @inheritdoc IJobEscrow
    function setGracePeriod(uint64 grace) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _gracePeriod = grace;
        emit GracePeriodSet(grace);
    }

    /// @inheritdoc IJobEscrow
    function setDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _disputeWindow = window;
        emit DisputeWindowSet(window);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc IJobEscrow
    function token() external view returns (address) {
        return address(_token);
    }

    /// @inheritdoc IJobEscrow
    function stakeManager() external view returns (address) {
        return address(_stakeManager);
    }

    /// @inheritdoc IJobEscrow
    function jobOf(bytes32 jobId) external view returns (Job memory) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        return Job({
            customer: job.customer,
            deadline: job.deadline,
            settledAt: head.settledAt,
            status: head.status,
            amount: head.amount,
            refund: head.refund,
            specHash: job.specHash
        });
    }

    /// @inheritdoc IJobEscrow
    function balanceOf(address account) external view returns (Balance memory) {
        IStakeManager.Payout memory p = _stakeManager.payoutOf(account);
        return Balance({claimable: p.claimable, pending: p.pending, releaseAt: p.releaseAt, frozen: _frozen[account]});
    }

    /// @inheritdoc IJobEscrow
    function gracePeriod() external view returns (uint64) {
        return _gracePeriod;
    }

    /// @inheritdoc IJobEscrow
    function disputeWindow() external view returns (uint64) {
        return _disputeWindow;
    }

    // ------------------------------------------------------------------ internal

    function _releaseAt() private view returns (uint256) {
        return block.timestamp + _disputeWindow;
    }

    function _newPayoutList(uint256 pairs) private pure returns (PayoutList memory) {
        return PayoutList({pairs: new SoloSettlement[](pairs), count: 0});
    }

    /// @dev Settles one job exactly once and appends its (job, provider, payout) pairs to `list`;
    /// the caller hands them to the StakeManager in one call, which releases the collateral and
    /// credits the payouts. The sum of the payouts is checked against the escrow here, before that
    /// call, so nothing is credited for a settlement that overpays. The caller emits the event.
    /// @return refund What the customer gets back.
    function _settle(
        bytes32 jobId,
        address[] calldata providers,
        uint256[] calldata payouts,
        bytes32 resultRoot,
        PayoutList memory list
    ) private returns (uint256 refund) {
        if (providers.length != payouts.length) revert JobEscrowLengthMismatch(providers.length, payouts.length);
        uint256 paid;
        uint256 k = list.count;
        for (uint256 i; i < providers.length; ++i) {
            uint256 payout = payouts[i];
            paid += payout;
            list.pairs[k] = SoloSettlement({jobId: jobId, provider: providers[i], payout: payout, resultRoot: resultRoot});
            ++k;
        }
        list.count = k;
        refund = _closeJob(jobId, paid);
    }

    /// @dev Marks funded job `jobId` settled exactly once, paying `paid` out of its escrow (the
    /// caller credits the providers), and keeps the rest as the customer's refund. Hot path: the
    /// packed head is read and written as one word, without a memory JobHead.
    /// @return refund What the customer gets back.
    function _closeJob(bytes32 jobId, uint256 paid) private returns (uint256 refund) {
        JobRecord storage job = _jobs[jobId];
        uint256 head = job.head;
        if (head >> _STATUS_SHIFT != uint256(JobStatus.Funded)) {
            JobStatus status = JobStatus(uint8(head >> _STATUS_SHIFT));
            if (status == JobStatus.Settled) revert JobEscrowAlreadySettled(jobId);
            revert JobEscrowJobNotFunded(jobId, status);
        }
        uint256 amount = uint96(head);
        if (paid > amount) revert JobEscrowPayoutExceedsEscrow(jobId, paid, amount);
        unchecked {
            refund = amount - paid; // paid <= amount, checked above
        }
        job.head = amount | (refund << _REFUND_SHIFT) | (block.timestamp << _SETTLED_AT_SHIFT)
            | (uint256(JobStatus.Settled) << _STATUS_SHIFT);
    }

    function _packHead(JobHead memory h) private pure returns (uint256) {
        return uint256(h.amount) | (uint256(h.refund) << _REFUND_SHIFT) | (uint256(h.settledAt) << _SETTLED_AT_SHIFT)
            | (uint256(h.status) << _STATUS_SHIFT);
    }

    function _unpackHead(uint256 packed) private pure returns (JobHead memory) {
        return JobHead({
            amount: uint96(packed),
            refund: uint96(packed >> _REFUND_SHIFT),
            settledAt: uint40(packed >> _SETTLED_AT_SHIFT),
            status: JobStatus(uint8(packed >> _STATUS_SHIFT))
        });
    }
}
