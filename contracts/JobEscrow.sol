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
/// status share one slot (the only job slot settlement reads or writes), and each provider's
/// claimable, pending and pending release time share one slot, so a provider paid by many jobs
/// costs one warm slot and the customer's refund costs none.
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

    /// @dev (job, provider) pairs whose collateral a settlement releases, gathered for one call.
    struct ReleaseList {
        bytes32[] jobIds; // job of each pair
        address[] providers; // provider of each pair
        uint256 count; // pairs filled so far
    }

    /// @dev One account's balances, packed into one slot (see {_packBalance} / {_unpackBalance}).
    struct PackedBalance {
        uint112 claimable; // claimable now
        uint104 pending; // claimable from `releaseAt`
        uint40 releaseAt; // when `pending` becomes claimable
    }

    // Bit offsets of the packed words: JobHead = amount | refund | settledAt | status,
    // PackedBalance = claimable | pending | releaseAt.
    uint256 private constant _REFUND_SHIFT = 96;
    uint256 private constant _SETTLED_AT_SHIFT = 192;
    uint256 private constant _STATUS_SHIFT = 232;
    uint256 private constant _PENDING_SHIFT = 112;
    uint256 private constant _RELEASE_AT_SHIFT = 216;

    IERC20 private immutable _token;
    IStakeManager private immutable _stakeManager;

    mapping(bytes32 jobId => JobRecord) private _jobs;
    mapping(address account => uint256) private _balances; // packed PackedBalance
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
        PackedBalance memory b = _matured(_unpackBalance(_balances[msg.sender]));
        amount = b.claimable;
        if (amount == 0) revert JobEscrowNothingToClaim(msg.sender);
        b.claimable = 0;
        _balances[msg.sender] = _packBalance(b);
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
        ReleaseList memory release = _newReleaseList(providers.length);
        uint256 refund = _settle(jobId, providers, payouts, _releaseAt(), release);
        emit JobSettled(jobId, refund, resultRoot);
        _stakeManager.releaseCollateral(release.jobIds, release.providers);
    }

    /// @inheritdoc IJobEscrow
    function settleBatch(Settlement[] calldata settlements) external onlyRole(ORCHESTRATOR_ROLE) {
        uint40 releaseAt = _releaseAt();
        uint256 pairs;
        for (uint256 j; j < settlements.length; ++j) {
            pairs += settlements[j].providers.length;
        }
        ReleaseList memory release = _newReleaseList(pairs);
        bytes32[] memory jobIds = new bytes32[](settlements.length);
        for (uint256 j; j < settlements.length; ++j) {
            Settlement calldata s = settlements[j];
            bytes32 jobId = s.jobId;
            _settle(jobId, s.providers, s.payouts, releaseAt, release);
            jobIds[j] = jobId;
        }
        emit JobsSettled(jobIds);
        _stakeManager.releaseCollateral(release.jobIds, release.providers);
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
            PackedBalance memory b = _matured(_unpackBalance(_balances[account]));
            if (amount > b.pending) revert JobEscrowInsufficientPending(account, amount, b.pending);
            b.pending -= uint104(amount);
            _balances[account] = _packBalance(b);
        }
        _frozen[account] += amount;
        emit PayoutFrozen(jobId, account, amount);
    }

    /// @inheritdoc IJobEscrow
    function unfreezePayout(address from, address to, uint256 amount) external onlyRole(DISPUTES_ROLE) {
        uint256 frozen = _frozen[from];
        if (amount > frozen) revert JobEscrowInsufficientFrozen(from, amount, frozen);
        _frozen[from] = frozen - amount;
        PackedBalance memory b = _unpackBalance(_balances[to]);
        b.claimable += amount.toUint112();
        _balances[to] = _packBalance(b);
        emit PayoutUnfrozen(from, to, amount);
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
        PackedBalance memory b = _matured(_unpackBalance(_balances[account]));
        return Balance({claimable: b.claimable, pending: b.pending, releaseAt: b.releaseAt, frozen: _frozen[account]});
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

    function _releaseAt() private view returns (uint40) {
        return uint40(block.timestamp + _disputeWindow);
    }

    function _newReleaseList(uint256 pairs) private pure returns (ReleaseList memory) {
        return ReleaseList({jobIds: new bytes32[](pairs), providers: new address[](pairs), count: 0});
    }

    /// @dev Settles one job exactly once and appends its (job, provider) pairs to `release`; the
    /// caller releases all the collateral in one StakeManager call. Payouts are credited while
    /// they are summed and the sum is checked against the escrow afterwards: a settlement that
    /// overpays reverts as a whole, so nothing credited survives. Hot path: the packed head is read
    /// and written as one word, without a memory JobHead. The caller emits the event.
    /// @return refund What the customer gets back.
    function _settle(
        bytes32 jobId,
        address[] calldata providers,
        uint256[] calldata payouts,
        uint40 releaseAt,
        ReleaseList memory release
    ) private returns (uint256 refund) {
        if (providers.length != payouts.length) revert JobEscrowLengthMismatch(providers.length, payouts.length);
        JobRecord storage job = _jobs[jobId];
        uint256 head = job.head;
        JobStatus status = JobStatus(uint8(head >> _STATUS_SHIFT));
        if (status != JobStatus.Funded) {
            if (status == JobStatus.Settled) revert JobEscrowAlreadySettled(jobId);
            revert JobEscrowJobNotFunded(jobId, status);
        }
        uint256 paid;
        uint256 k = release.count;
        for (uint256 i; i < providers.length; ++i) {
            address provider = providers[i];
            uint256 payout = payouts[i];
            if (payout != 0) {
                paid += payout;
                _creditPending(provider, payout, releaseAt);
            }
            release.jobIds[k] = jobId;
            release.providers[k] = provider;
            ++k;
        }
        release.count = k;
        uint256 amount = uint96(head);
        if (paid > amount) revert JobEscrowPayoutExceedsEscrow(jobId, paid, amount);
        refund = amount - paid;
        job.head = amount | (refund << _REFUND_SHIFT) | (block.timestamp << _SETTLED_AT_SHIFT)
            | (uint256(JobStatus.Settled) << _STATUS_SHIFT);
    }

    /// @dev Adds `amount` to `account`'s pending balance, first moving a matured pending balance to
    /// claimable; the whole pending balance then waits until `releaseAt`.
    function _creditPending(address account, uint256 amount, uint40 releaseAt) private {
        // Hot path: scalar unpacking of the packed balance (see {_unpackBalance}).
        uint256 packed = _balances[account];
        uint256 claimable = uint112(packed);
        uint256 pending = uint104(packed >> _PENDING_SHIFT);
        if (pending != 0 && (packed >> _RELEASE_AT_SHIFT) <= block.timestamp) {
            claimable += pending;
            pending = 0;
        }
        pending += amount;
        if (claimable > type(uint112).max) revert JobEscrowAmountTooLarge(claimable, type(uint112).max);
        if (pending > type(uint104).max) revert JobEscrowAmountTooLarge(pending, type(uint104).max);
        _balances[account] = claimable | (pending << _PENDING_SHIFT) | (uint256(releaseAt) << _RELEASE_AT_SHIFT);
    }

    /// @dev The balance as of now: pending whose release time has passed counts as claimable.
    function _matured(PackedBalance memory b) private view returns (PackedBalance memory) {
        if (b.pending != 0 && b.releaseAt <= block.timestamp) {
            b.claimable += b.pending;
            b.pending = 0;
        }
        return b;
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

    function _packBalance(PackedBalance memory b) private pure returns (uint256) {
        return uint256(b.claimable) | (uint256(b.pending) << _PENDING_SHIFT) | (uint256(b.releaseAt) << _RELEASE_AT_SHIFT);
    }

    function _unpackBalance(uint256 packed) private pure returns (PackedBalance memory) {
        return PackedBalance({
            claimable: uint112(packed),
            pending: uint104(packed >> _PENDING_SHIFT),
            releaseAt: uint40(packed >> _RELEASE_AT_SHIFT)
        });
    }
}
