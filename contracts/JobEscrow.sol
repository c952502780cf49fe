// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/AccessControlDefaultAdminRules.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
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
contract JobEscrow is IJobEscrow, AccessControlDefaultAdminRules, Pausable, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    /// @inheritdoc IJobEscrow
    bytes32 public constant ORCHESTRATOR_ROLE = keccak256("ORCHESTRATOR_ROLE");
    /// @inheritdoc IJobEscrow
    bytes32 public constant DISPUTES_ROLE = keccak256("DISPUTES_ROLE");
    /// @inheritdoc IJobEscrow
    uint256 public constant PAYOUT_PERIOD = 1 days;
    /// @inheritdoc IJobEscrow
    uint256 public constant MAX_PERIOD = 30 days;

    /// @dev Delay of a two-step transfer of DEFAULT_ADMIN_ROLE (AccessControlDefaultAdminRules).
    uint48 private constant ADMIN_TRANSFER_DELAY = 2 days;

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
        uint40 time; // Settled: unix time of settlement; otherwise the deadline (read by settlement)
        JobStatus status; // see JobStatus
    }

    /// @dev What disputes froze so far about one settled job, booked at its first dispute.
    struct DisputeBook {
        uint96 payeeCap; // what the job paid its providers: the most payee-side freezes may take
        uint96 fromPayees; // frozen from payees so far (all-time, so a freed amount is not re-frozen)
        bool booked;
    }

    /// @dev (job, provider, payout) pairs a settlement hands to the StakeManager in one call.
    struct PayoutList {
        SoloSettlement[] pairs; // one per listed provider of each job
        uint256 count; // pairs filled so far
    }

    // Bit offsets of the packed JobHead word: amount | refund | time | status.
    uint256 private constant _REFUND_SHIFT = 96;
    uint256 private constant _SETTLED_AT_SHIFT = 192; // the `time` field
    uint256 private constant _STATUS_SHIFT = 232;
    // A proven assignment word: this flag | collateral (uint96), non-zero even for no collateral.
    uint256 private constant _PROVEN = 1 << 255;

    IERC20 private immutable _token;
    IStakeManager private immutable _stakeManager;

    mapping(bytes32 jobId => JobRecord) private _jobs;
    mapping(address account => uint256) private _frozen;
    mapping(bytes32 jobId => mapping(address provider => bool)) private _backers;
    mapping(bytes32 jobId => DisputeBook) private _disputeBooks;
    mapping(bytes32 root => uint256 committedAt) private _assignmentRoots;
    mapping(bytes32 jobId => mapping(address provider => uint256)) private _assignments; // _PROVEN | collateral

    uint64 private _gracePeriod;
    uint64 private _disputeWindow;
    uint64 private _collateralSlashWindow;

    /// @notice Deploy after the StakeManager; then the StakeManager admin calls
    /// `stakeManager.setJobEscrow(address(this))` so this contract may lock collateral.
    /// @param token_ The payment ERC-20 (the same token the StakeManager stakes).
    /// @param stakeManager_ The StakeManager collateral is locked on.
    /// @param admin Receives DEFAULT_ADMIN_ROLE (pause, parameters, role grants).
    /// @param gracePeriod_ Seconds after a job's deadline before its customer may reclaim.
    /// @param disputeWindow_ Seconds after settlement that payouts stay pending and disputable.
    /// The collateral slash window starts at one day ({setCollateralSlashWindow}).
    constructor(IERC20 token_, IStakeManager stakeManager_, address admin, uint64 gracePeriod_, uint64 disputeWindow_)
        AccessControlDefaultAdminRules(ADMIN_TRANSFER_DELAY, admin)
    {
        if (address(token_) == address(0)) revert JobEscrowZeroAddress("token");
        if (address(stakeManager_) == address(0)) revert JobEscrowZeroAddress("stakeManager");
        address stakeToken = stakeManager_.token();
        if (stakeToken != address(token_)) revert JobEscrowTokenMismatch(address(token_), stakeToken);
        _checkRange(gracePeriod_, 0, MAX_PERIOD);
        _checkRange(disputeWindow_, 0, PAYOUT_PERIOD);
        _token = token_;
        _stakeManager = stakeManager_;
        _gracePeriod = gracePeriod_;
        _disputeWindow = disputeWindow_;
        _collateralSlashWindow = 1 days;
        emit GracePeriodSet(gracePeriod_);
        emit DisputeWindowSet(disputeWindow_);
        emit CollateralSlashWindowSet(1 days);
    }

    // ------------------------------------------------------------------ customer

    /// @inheritdoc IJobEscrow
    function createJob(bytes32 jobId, uint256 amount, uint64 deadline, bytes32 specHash)
        external
        nonReentrant
        whenNotPaused
    {
        if (_jobs[jobId].head != 0) revert JobEscrowJobExists(jobId);
        if (amount == 0) revert JobEscrowZeroAmount(jobId);
        if (amount > type(uint96).max) revert JobEscrowAmountTooLarge(amount, type(uint96).max);
        if (deadline <= block.timestamp) revert JobEscrowDeadlineInPast(deadline, block.timestamp);
        uint40 due = uint256(deadline).toUint40();
        _jobs[jobId] = JobRecord({
            head: _packHead(JobHead({amount: uint96(amount), refund: 0, time: due, status: JobStatus.Funded})),
            customer: msg.sender,
            deadline: due,
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
        if (head.status != JobStatus.Settled) revert JobEscrowJobNotSettled(jobId, head.status);
        amount = head.refund;
        // slither-disable-next-line incorrect-equality
        if (amount == 0) revert JobEscrowNoRefund(jobId);
        uint256 claimableAt = uint256(head.time) + _disputeWindow;
        if (block.timestamp < claimableAt) revert JobEscrowRefundNotClaimableYet(jobId, claimableAt);
        head.refund = 0;
        job.head = _packHead(head);
        address customer = job.customer;
        emit RefundClaimed(jobId, customer, amount);
        _token.safeTransfer(customer, amount);
    }

    /// @inheritdoc IJobEscrow
    function releaseCollateral(bytes32 jobId, address[] calldata providers) external {
        uint256 releasableAt = collateralReleasableAt(jobId);
        // slither-disable-next-line incorrect-equality
        if (releasableAt == 0) revert JobEscrowUnknownJob(jobId);
        if (block.timestamp < releasableAt) revert JobEscrowCollateralStillSlashable(jobId, releasableAt);
        bytes32[] memory jobIds = new bytes32[](providers.length);
        for (uint256 i; i < providers.length; ++i) {
            jobIds[i] = jobId;
        }
        _stakeManager.releaseCollateral(jobIds, providers);
    }

    /// @inheritdoc IJobEscrow
    function proveAssignment(bytes32 jobId, address provider, uint256 collateral, bytes32[] calldata proof)
        external
    {
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(jobId, provider, collateral))));
        // slither-disable-next-line incorrect-equality
        if (_assignmentRoots[MerkleProof.processProofCalldata(proof, leaf)] == 0) {
            revert JobEscrowInvalidAssignmentProof(jobId, provider, collateral);
        }
        if (_assignments[jobId][provider] != 0) return; // the first proven collateral stands
        _assignments[jobId][provider] = _PROVEN | collateral.toUint96();
        emit AssignmentProven(jobId, provider, collateral);
    }

    // ------------------------------------------------------------------ orchestrator role

    /// @inheritdoc IJobEscrow
    function commitAssignments(bytes32 root) external onlyRole(ORCHESTRATOR_ROLE) whenNotPaused {
        if (root == bytes32(0)) revert JobEscrowZeroAssignmentRoot();
        if (_assignmentRoots[root] != 0) revert JobEscrowAssignmentsAlreadyCommitted(root);
        _assignmentRoots[root] = block.timestamp;
        emit AssignmentsCommitted(root);
    }

    /// @inheritdoc IJobEscrow
    function lockCollateral(bytes32 jobId, address[] calldata providers, uint256[] calldata amounts)
        external
        onlyRole(ORCHESTRATOR_ROLE)
        whenNotPaused
    {
        JobHead memory head = _unpackHead(_jobs[jobId].head);
        if (head.status != JobStatus.Funded) revert JobEscrowJobNotFunded(jobId, head.status);
        uint256 closedAt = uint256(head.time) + _gracePeriod;
        if (block.timestamp > closedAt) revert JobEscrowSettlementClosed(jobId, closedAt);
        mapping(address => bool) storage backers = _backers[jobId];
        for (uint256 i; i < providers.length; ++i) {
            if (!backers[providers[i]]) backers[providers[i]] = true;
        }
        _stakeManager.lockCollateral(jobId, providers, amounts);
    }

    /// @inheritdoc IJobEscrow
    function settle(bytes32 jobId, address[] calldata providers, uint256[] calldata payouts, bytes32 resultRoot)
        external
        onlyRole(ORCHESTRATOR_ROLE)
    {
        PayoutList memory list = _newPayoutList(providers.length);
        uint256 refund = _settle(jobId, providers, payouts, resultRoot, list, _gracePeriod);
        emit JobSettled(jobId, refund, resultRoot);
        for (uint256 i; i < providers.length; ++i) {
            emit ProviderPaid(jobId, providers[i], payouts[i]);
        }
        _stakeManager.settleCollateral(list.pairs, payoutReleaseAt(block.timestamp));
    }

    /// @inheritdoc IJobEscrow
    function settleBatch(Settlement[] calldata settlements) external onlyRole(ORCHESTRATOR_ROLE) {
        // slither-disable-next-line uninitialized-local
        uint256 pairs;
        for (uint256 j; j < settlements.length; ++j) {
            pairs += settlements[j].providers.length;
        }
        PayoutList memory list = _newPayoutList(pairs);
        bytes32[] memory jobIds = new bytes32[](settlements.length);
        uint256 grace = _gracePeriod;
        for (uint256 j; j < settlements.length; ++j) {
            Settlement calldata s = settlements[j];
            bytes32 jobId = s.jobId;
            _settle(jobId, s.providers, s.payouts, s.resultRoot, list, grace);
            jobIds[j] = jobId;
        }
        emit JobsSettled(jobIds);
        _stakeManager.settleCollateral(list.pairs, payoutReleaseAt(block.timestamp));
    }

    /// @inheritdoc IJobEscrow
    function settleBatchSolo(SoloSettlement[] calldata settlements) external onlyRole(ORCHESTRATOR_ROLE) {
        uint256 count = settlements.length;
        bytes32[] memory jobIds = new bytes32[](count);
        uint256 grace = _gracePeriod;
        for (uint256 j; j < count; ++j) {
            SoloSettlement calldata s = settlements[j];
            bytes32 jobId = s.jobId;
            _closeJob(jobId, s.payout, grace);
            assembly ("memory-safe") {
                mstore(add(jobIds, shl(5, add(j, 1))), jobId) // jobIds[j], j < count
            }
        }
        emit JobsSettled(jobIds);
        _stakeManager.settleCollateral(settlements, payoutReleaseAt(block.timestamp));
    }

    // ------------------------------------------------------------------ disputes role

    /// @inheritdoc IJobEscrow
    function freezePayout(bytes32 jobId, address account, uint256 amount) external onlyRole(DISPUTES_ROLE) {
        JobRecord storage job = _jobs[jobId];
        JobHead memory head = _unpackHead(job.head);
        if (head.status != JobStatus.Settled) revert JobEscrowJobNotSettled(jobId, head.status);
        uint256 closedAt = uint256(head.time) + _disputeWindow;
        if (block.timestamp >= closedAt) revert JobEscrowDisputeWindowClosed(jobId, closedAt);
        DisputeBook storage book = _disputeBooks[jobId];
        if (!book.booked) {
            // The first dispute books what the job paid its providers (the refund is untouched
            // until then: only disputes change it inside the window).
            (book.payeeCap, book.booked) = (head.amount - head.refund, true);
        }
        bool fromRefund = account == job.customer;
        if (fromRefund) {
            if (amount > head.refund) revert JobEscrowDisputeCapExceeded(jobId, amount, head.refund);
            head.refund -= uint96(amount);
            job.head = _packHead(head);
        } else {
            uint256 available = book.payeeCap - book.fromPayees;
            if (amount > available) revert JobEscrowDisputeCapExceeded(jobId, amount, available);
            uint256 pending = _stakeManager.payoutOf(account).pending;
            if (amount > pending) revert JobEscrowInsufficientPending(account, amount, pending);
            book.fromPayees += uint96(amount);
        }
        _frozen[account] += amount;
        emit PayoutFrozen(jobId, account, amount);
        if (!fromRefund) _stakeManager.freezePending(account, amount, payoutReleaseAt(head.time));
    }

    /// @inheritdoc IJobEscrow
    function unfreezePayout(bytes32 jobId, address from, address to, uint256 amount) external onlyRole(DISPUTES_ROLE) {
        uint256 frozen = _frozen[from];
        if (amount > frozen) revert JobEscrowInsufficientFrozen(from, amount, frozen);
        _frozen[from] = frozen - amount;
        emit PayoutUnfrozen(jobId, from, to, amount);
        JobRecord storage job = _jobs[jobId];
        if (to != from) {
            _stakeManager.creditPayout(to, amount, 0); // a ruling: the winner may claim at once
        } else if (from == job.customer) {
            JobHead memory head = _unpackHead(job.head);
            head.refund += amount.toUint96(); // claimRefund waits for the job's window
            job.head = _packHead(head);
        } else {
            // The release time fixed at settlement is not stored; the latest it can have been (the
            // window is at most one period) never returns the payout earlier than settlement set.
            uint256 settledAt = _unpackHead(job.head).time;
            // slither-disable-next-line divide-before-multiply
            _stakeManager.creditPayout(from, amount, (settledAt + 2 * PAYOUT_PERIOD - 1) / PAYOUT_PERIOD * PAYOUT_PERIOD);
        }
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
        _checkRange(grace, 0, MAX_PERIOD);
        _gracePeriod = grace;
        emit GracePeriodSet(grace);
    }

    /// @inheritdoc IJobEscrow
    function setDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(window, 0, PAYOUT_PERIOD);
        _disputeWindow = window;
        emit DisputeWindowSet(window);
    }

    /// @inheritdoc IJobEscrow
    function setCollateralSlashWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _checkRange(window, 0, MAX_PERIOD);
        _collateralSlashWindow = window;
        emit CollateralSlashWindowSet(window);
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
        // slither-disable-next-line incorrect-equality
        return Job({
            customer: job.customer,
            deadline: job.deadline,
            settledAt: head.status == JobStatus.Settled ? head.time : 0,
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

    /// @inheritdoc IJobEscrow
    function collateralSlashWindow() external view returns (uint64) {
        return _collateralSlashWindow;
    }

    /// @inheritdoc IJobEscrow
    function payoutReleaseAt(uint256 settledAt) public view returns (uint256) {
        // Rounded up to whole periods, so one provider's pending payouts have at most two release
        // times in the future (the StakeManager keeps two buckets) and none moves another's.
        uint256 due = settledAt + _disputeWindow;
        // slither-disable-next-line divide-before-multiply
        return (due + PAYOUT_PERIOD - 1) / PAYOUT_PERIOD * PAYOUT_PERIOD;
    }

    /// @inheritdoc IJobEscrow
    function collateralReleasableAt(bytes32 jobId) public view returns (uint256) {
        JobHead memory head = _unpackHead(_jobs[jobId].head);
        // slither-disable-next-line incorrect-equality
        if (head.status == JobStatus.None) return 0;
        // A settled job closed at settlement; any other closed when settlement did: deadline + grace.
        // slither-disable-next-line incorrect-equality
        uint256 closedAt = head.status == JobStatus.Settled ? head.time : uint256(head.time) + _gracePeriod;
        return closedAt + _collateralSlashWindow;
    }

    /// @inheritdoc IJobEscrow
    function isBacker(bytes32 jobId, address provider) external view returns (bool) {
        return _backers[jobId][provider] || _assignments[jobId][provider] != 0;
    }

    /// @inheritdoc IJobEscrow
    function assignmentOf(bytes32 jobId, address provider) external view returns (bool proven, uint256 collateral) {
        uint256 word = _assignments[jobId][provider];
        return (word != 0, uint96(word));
    }

    /// @inheritdoc IJobEscrow
    function assignmentsCommittedAt(bytes32 root) external view returns (uint256) {
        return _assignmentRoots[root];
    }

    /// @inheritdoc IJobEscrow
    function disputedOf(bytes32 jobId) external view returns (uint256 fromPayees, uint256 payeeCap) {
        DisputeBook storage book = _disputeBooks[jobId];
        if (book.booked) return (book.fromPayees, book.payeeCap);
        JobHead memory head = _unpackHead(_jobs[jobId].head);
        // slither-disable-next-line incorrect-equality
        return (0, head.status == JobStatus.Settled ? head.amount - head.refund : 0);
    }

    // ------------------------------------------------------------------ internal

    function _checkRange(uint256 value, uint256 min, uint256 max) private pure {
        if (value < min || value > max) revert JobEscrowParameterOutOfRange(value, min, max);
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
        PayoutList memory list,
        uint256 grace
    ) private returns (uint256 refund) {
        if (providers.length != payouts.length) revert JobEscrowLengthMismatch(providers.length, payouts.length);
        // slither-disable-next-line uninitialized-local
        uint256 paid;
        uint256 k = list.count;
        for (uint256 i; i < providers.length; ++i) {
            uint256 payout = payouts[i];
            paid += payout;
            list.pairs[k] = SoloSettlement({jobId: jobId, provider: providers[i], payout: payout, resultRoot: resultRoot});
            ++k;
        }
        list.count = k;
        refund = _closeJob(jobId, paid, grace);
    }

    /// @dev Marks funded job `jobId` settled exactly once, until its deadline + `grace`, paying
    /// `paid` out of its escrow (the caller credits the providers), and keeps the rest as the
    /// customer's refund. Hot path: the packed head is read and written as one word, without a
    /// memory JobHead; a funded job's head holds its deadline, so the deadline costs no read.
    /// @return refund What the customer gets back.
    function _closeJob(bytes32 jobId, uint256 paid, uint256 grace) private returns (uint256 refund) {
        JobRecord storage job = _jobs[jobId];
        uint256 head = job.head;
        if (head >> _STATUS_SHIFT != uint256(JobStatus.Funded)) {
            JobStatus status = JobStatus(uint8(head >> _STATUS_SHIFT));
            if (status == JobStatus.Settled) revert JobEscrowAlreadySettled(jobId);
            revert JobEscrowJobNotFunded(jobId, status);
        }
        uint256 closedAt = uint40(head >> _SETTLED_AT_SHIFT) + grace;
        if (block.timestamp > closedAt) revert JobEscrowSettlementClosed(jobId, closedAt);
        uint256 amount = uint96(head);
        if (paid > amount) revert JobEscrowPayoutExceedsEscrow(jobId, paid, amount);
        unchecked {
            refund = amount - paid; // paid <= amount, checked above
        }
        job.head = amount | (refund << _REFUND_SHIFT) | (block.timestamp << _SETTLED_AT_SHIFT)
            | (uint256(JobStatus.Settled) << _STATUS_SHIFT);
    }

    function _packHead(JobHead memory h) private pure returns (uint256) {
        return uint256(h.amount) | (uint256(h.refund) << _REFUND_SHIFT) | (uint256(h.time) << _SETTLED_AT_SHIFT)
            | (uint256(h.status) << _STATUS_SHIFT);
    }

    function _unpackHead(uint256 packed) private pure returns (JobHead memory) {
        return JobHead({
            amount: uint96(packed),
            refund: uint96(packed >> _REFUND_SHIFT),
            time: uint40(packed >> _SETTLED_AT_SHIFT),
            status: JobStatus(uint8(packed >> _STATUS_SHIFT))
        });
    }
}
