// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";

import {IStakeManager} from "./interfaces/IStakeManager.sol";
import {IJobEscrow} from "./interfaces/IJobEscrow.sol";

/// @title StakeManager
/// @notice Provider stake of DePIN Mesh. See {IStakeManager}.
/// @dev Slashing order for stake not tied to a job: free bonded stake first, then the unbonding
/// pool. Unbonding locks are claims on that pool: a lock pays min(its amount, what is left of the
/// pool), so slashing unbonding stake is O(1) whatever the number of locks. Locked collateral is only
/// ever slashed per job, by {slashCollateral}.
/// Gas layout for settlement: a provider's locked collateral, pending payout and the payout's
/// release time share one slot (`_ledgers`), so settling a job releases the collateral and credits
/// the payout with one storage write per provider; claimable payouts sit beside `bonded`.
contract StakeManager is IStakeManager, AccessControl, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    /// @inheritdoc IStakeManager
    bytes32 public constant ORCHESTRATOR_ROLE = keccak256("ORCHESTRATOR_ROLE");
    /// @inheritdoc IStakeManager
    bytes32 public constant SLASHER_ROLE = keccak256("SLASHER_ROLE");
    /// @inheritdoc IStakeManager
    bytes32 public constant ESCROW_ROLE = keccak256("ESCROW_ROLE");
    /// @inheritdoc IStakeManager
    bytes32 public constant DISPUTES_ROLE = keccak256("DISPUTES_ROLE");

    uint256 private constant BPS = 10_000;

    /// @dev One account's stake and claimable payout, two slots; its locked collateral and pending
    /// payout are in `_ledgers`.
    struct Provider {
        uint128 bonded; // stake that backs work, including the locked collateral
        uint128 claimable; // payout the escrow pays on `claim`
        uint128 unbonding; // unbonding pool: what the provider's open locks can still pay out
        uint64 nextLockId; // id of the next unbonding lock
        Tier tier; // current tier
    }

    // Bit layout of a packed ledger word: locked (uint96) | pending (uint104) | releaseAt (uint40).
    uint256 private constant _PENDING_SHIFT = 96;
    uint256 private constant _RELEASE_AT_SHIFT = 200;

    IERC20 private immutable _token;

    mapping(address provider => Provider) private _providers;
    mapping(address account => uint256) private _ledgers; // packed locked | pending | releaseAt
    mapping(address provider => mapping(uint256 lockId => UnbondingLock)) private _unbondingLocks;
    mapping(bytes32 jobId => mapping(address provider => uint256)) private _lockedFor;
    mapping(uint64 epoch => bytes32) private _epochRoots;
    mapping(address provider => mapping(uint64 epoch => bool)) private _scoreSlashed;
    mapping(uint256 slashId => Slash) private _slashes;
    uint256 private _slashCount;

    uint64 private _unbondingPeriod;
    uint64 private _slashDisputeWindow;
    uint16 private _scoreThresholdBps;
    uint16 private _scoreSlashBps;
    uint16 private _finderBps;
    address private _treasury;
    address private _jobEscrow;

    /// @dev The payout books decide what the JobEscrow pays out, so only that contract may
    /// change them; an ESCROW_ROLE granted to anyone else does not reach them.
    modifier onlyJobEscrow() {
        if (msg.sender != _jobEscrow) revert StakeManagerNotJobEscrow(msg.sender);
        _;
    }

    /// @notice Deploy first (after the token). Then deploy JobEscrow and call {setJobEscrow}.
    /// @param token_ The stake and payment ERC-20.
    /// @param admin Receives DEFAULT_ADMIN_ROLE.
    /// @param treasury_ Receives slash proceeds without an injured customer.
    /// @param unbondingPeriod_ Seconds between {requestUnbond} and {withdraw}.
    /// @param slashDisputeWindow_ Seconds a slash stays disputable before its proceeds are released.
    constructor(IERC20 token_, address admin, address treasury_, uint64 unbondingPeriod_, uint64 slashDisputeWindow_) {
        if (address(token_) == address(0) || admin == address(0) || treasury_ == address(0)) {
            revert StakeManagerZeroAddress();
        }
        _token = token_;
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        _treasury = treasury_;
        _unbondingPeriod = unbondingPeriod_;
        _slashDisputeWindow = slashDisputeWindow_;
        _scoreThresholdBps = 5_000;
        _scoreSlashBps = 1_000;
        _finderBps = 1_000;
        emit TreasurySet(treasury_);
        emit UnbondingPeriodSet(unbondingPeriod_);
        emit SlashDisputeWindowSet(slashDisputeWindow_);
        emit ScoreSlashingSet(5_000, 1_000, 1_000);
    }

    // ------------------------------------------------------------------ provider

    /// @inheritdoc IStakeManager
    function stake(uint256 amount) external nonReentrant {
        if (amount == 0) revert StakeManagerZeroAmount();
        Provider storage p = _providers[msg.sender];
        p.bonded += amount.toUint128();
        emit Staked(msg.sender, amount);
        _pullExact(msg.sender, amount);
    }

    /// @inheritdoc IStakeManager
    function requestUnbond(uint256 amount) external returns (uint256 lockId) {
        if (amount == 0) revert StakeManagerZeroAmount();
        Provider storage p = _providers[msg.sender];
        uint256 free = p.bonded - _lockedOf(msg.sender);
        if (amount > free) revert StakeManagerInsufficientFreeStake(msg.sender, amount, free);
        lockId = p.nextLockId;
        uint64 withdrawableAt = uint64(block.timestamp) + _unbondingPeriod;
        p.bonded -= uint128(amount);
        p.unbonding += uint128(amount);
        p.nextLockId = uint64(lockId + 1);
        _unbondingLocks[msg.sender][lockId] = UnbondingLock({amount: uint128(amount), withdrawableAt: withdrawableAt});
        emit UnbondRequested(msg.sender, lockId, amount, withdrawableAt);
    }

    /// @inheritdoc IStakeManager
    function withdraw(uint256 lockId) external nonReentrant {
        UnbondingLock memory lock = _openLock(msg.sender, lockId);
        if (block.timestamp < lock.withdrawableAt) revert StakeManagerUnbondingNotEnded(lockId, lock.withdrawableAt);
        uint256 amount = _closeLock(msg.sender, lockId, lock);
        emit Withdrawn(msg.sender, lockId, amount);
        if (amount != 0) _token.safeTransfer(msg.sender, amount);
    }

    /// @inheritdoc IStakeManager
    function cancelUnbond(uint256 lockId) external {
        UnbondingLock memory lock = _openLock(msg.sender, lockId);
        uint256 amount = _closeLock(msg.sender, lockId, lock);
        _providers[msg.sender].bonded += uint128(amount);
        emit UnbondCancelled(msg.sender, lockId, amount);
    }

    // ------------------------------------------------------------------ escrow role

    /// @inheritdoc IStakeManager
    function lockCollateral(bytes32 jobId, address[] calldata providers, uint256[] calldata amounts)
        external
        onlyRole(ESCROW_ROLE)
    {
        if (providers.length != amounts.length) revert StakeManagerLengthMismatch(providers.length, amounts.length);
        for (uint256 i; i < providers.length; ++i) {
            address provider = providers[i];
            uint256 amount = amounts[i];
            if (amount == 0) revert StakeManagerZeroAmount();
            uint256 ledger = _ledgers[provider];
            uint256 locked = uint96(ledger);
            uint256 free = _providers[provider].bonded - locked;
            if (amount > free) revert StakeManagerInsufficientFreeStake(provider, amount, free);
            _ledgers[provider] = (ledger - locked) | _fitLocked(locked + amount);
            _lockedFor[jobId][provider] += amount;
            emit CollateralLocked(jobId, provider, amount);
        }
    }

    /// @inheritdoc IStakeManager
    function releaseCollateral(bytes32[] calldata jobIds, address[] calldata providers)
        external
        onlyRole(ESCROW_ROLE)
    {
        if (jobIds.length != providers.length) revert StakeManagerLengthMismatch(jobIds.length, providers.length);
        for (uint256 i; i < jobIds.length; ++i) {
            address provider = providers[i];
            mapping(address => uint256) storage jobLocks = _lockedFor[jobIds[i]];
            uint256 amount = jobLocks[provider];
            if (amount == 0) continue;
            jobLocks[provider] = 0;
            // Cannot underflow: the locked field is the sum of this provider's job locks.
            unchecked {
                _ledgers[provider] -= amount;
            }
        }
    }

    /// @inheritdoc IStakeManager
    function settleCollateral(IJobEscrow.SoloSettlement[] calldata pairs, uint256 releaseAt)
        external
        onlyJobEscrow
    {
        uint256 releaseBits = uint256(uint40(releaseAt)) << _RELEASE_AT_SHIFT;
        for (uint256 i; i < pairs.length; ++i) {
            bytes32 jobId;
            address provider;
            uint256 payout;
            uint256 released;
            uint256 ledger;
            uint256 ledgerSlot;
            // Hot path, in assembly: pair `i` is read straight from calldata (4 words: jobId,
            // provider, payout, resultRoot; `i` < length, and a dirty address reverts as the ABI
            // decoder would), and each slot's address is hashed once, by Solidity's mapping
            // layout, and read and written through it: `_lockedFor[jobId][provider]` (released:
            // set to 0) and `_ledgers[provider]`.
            assembly ("memory-safe") {
                let pair := add(pairs.offset, shl(7, i))
                jobId := calldataload(pair)
                provider := calldataload(add(pair, 0x20))
                if shr(160, provider) { revert(0, 0) }
                payout := calldataload(add(pair, 0x40))
                mstore(0x00, jobId)
                mstore(0x20, _lockedFor.slot)
                mstore(0x20, keccak256(0x00, 0x40))
                mstore(0x00, provider)
                let lockSlot := keccak256(0x00, 0x40)
                released := sload(lockSlot)
                if released { sstore(lockSlot, 0) }
                mstore(0x20, _ledgers.slot)
                ledgerSlot := keccak256(0x00, 0x40)
                ledger := sload(ledgerSlot)
            }
            if (payout != 0) {
                // A pending payout past its release time becomes claimable first; the whole
                // pending payout then waits until `releaseAt`.
                uint256 pending = uint104(ledger >> _PENDING_SHIFT);
                if (pending != 0 && (ledger >> _RELEASE_AT_SHIFT) <= block.timestamp) {
                    _providers[provider].claimable += uint128(pending); // pending fits 104 bits
                    pending = 0;
                }
                // Cannot overflow: pending < 2**104 and the escrow caps a payout at a job's uint96 amount.
                unchecked {
                    pending += payout;
                }
                if (pending > type(uint104).max) revert StakeManagerAmountTooLarge(pending, type(uint104).max);
                ledger = uint96(ledger) | (pending << _PENDING_SHIFT) | releaseBits;
            }
            // Cannot underflow: the locked field (low bits) is the sum of this provider's job locks.
            unchecked {
                ledger -= released;
            }
            assembly ("memory-safe") {
                sstore(ledgerSlot, ledger)
            }
        }
    }

    /// @inheritdoc IStakeManager
    function takeClaimable(address account) external onlyJobEscrow returns (uint256 amount) {
        _mature(account);
        Provider storage p = _providers[account];
        amount = p.claimable;
        p.claimable = 0;
    }

    /// @inheritdoc IStakeManager
    function freezePending(address account, uint256 amount) external onlyJobEscrow {
        uint256 ledger = _mature(account);
        uint256 pending = uint104(ledger >> _PENDING_SHIFT);
        if (amount > pending) revert StakeManagerInsufficientPending(account, amount, pending);
        _ledgers[account] = ledger - (amount << _PENDING_SHIFT);
    }

    /// @inheritdoc IStakeManager
    function creditClaimable(address account, uint256 amount) external onlyJobEscrow {
        _providers[account].claimable += amount.toUint128();
    }

    // ------------------------------------------------------------------ orchestrator role

    /// @inheritdoc IStakeManager
    function setTier(address provider, Tier tier) external onlyRole(ORCHESTRATOR_ROLE) {
        _setTier(provider, tier);
    }

    /// @inheritdoc IStakeManager
    function commitEpoch(uint64 epoch, bytes32 scoreRoot) external onlyRole(ORCHESTRATOR_ROLE) {
        if (scoreRoot == bytes32(0)) revert StakeManagerZeroRoot();
        if (_epochRoots[epoch] != bytes32(0)) revert StakeManagerEpochAlreadyCommitted(epoch);
        _epochRoots[epoch] = scoreRoot;
        emit EpochCommitted(epoch, scoreRoot);
    }

    // ------------------------------------------------------------------ slashing

    /// @inheritdoc IStakeManager
    function slash(address provider, uint256 amount, SlashReason reason, bytes32 evidence)
        external
        onlyRole(SLASHER_ROLE)
        returns (uint256 slashId)
    {
        if (amount == 0) revert StakeManagerZeroAmount();
        uint256 taken = _takeUnlockedStake(provider, amount);
        if (taken == 0) revert StakeManagerNothingToSlash(provider);
        slashId = _recordSlash(provider, bytes32(0), reason, evidence, _treasury, taken, address(0), 0);
    }

    /// @inheritdoc IStakeManager
    function slashCollateral(bytes32 jobId, address provider, uint256 amount, SlashReason reason, bytes32 evidence)
        external
        onlyRole(SLASHER_ROLE)
        returns (uint256 slashId)
    {
        if (amount == 0) revert StakeManagerZeroAmount();
        address escrow = _jobEscrow;
        if (escrow == address(0)) revert StakeManagerEscrowNotSet();
        uint256 locked = _lockedFor[jobId][provider];
        if (locked == 0) revert StakeManagerNothingToSlash(provider);
        uint256 taken = Math.min(amount, locked);
        _lockedFor[jobId][provider] = locked - taken;
        _ledgers[provider] -= taken; // the locked field holds at least this job's lock
        _providers[provider].bonded -= uint128(taken);
        // A view on the escrow set by the admin: the customer the collateral protects.
        address customer = IJobEscrow(escrow).jobOf(jobId).customer;
        slashId = _recordSlash(provider, jobId, reason, evidence, customer, taken, address(0), 0);
    }

    /// @inheritdoc IStakeManager
    function slashForScore(
        address provider,
        uint64 epoch,
        uint256 scoreBps,
        bytes32 telemetryDigest,
        bytes32[] calldata proof
    ) external returns (uint256 slashId) {
        bytes32 root = _epochRoots[epoch];
        if (root == bytes32(0)) revert StakeManagerEpochNotCommitted(epoch);
        if (_scoreSlashed[provider][epoch]) revert StakeManagerAlreadySlashedForEpoch(provider, epoch);
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(provider, scoreBps, telemetryDigest))));
        if (!MerkleProof.verify(proof, root, leaf)) revert StakeManagerInvalidScoreProof(provider, epoch);
        if (scoreBps >= _scoreThresholdBps) revert StakeManagerScoreAboveThreshold(scoreBps, _scoreThresholdBps);

        _scoreSlashed[provider][epoch] = true;
        Provider storage p = _providers[provider];
        uint256 share = (uint256(p.bonded) + p.unbonding) * _scoreSlashBps / BPS;
        uint256 taken = share == 0 ? 0 : _takeUnlockedStake(provider, share);
        _setTier(provider, Tier.Background);
        if (taken != 0) {
            uint256 finderAmount = taken * _finderBps / BPS;
            slashId = _recordSlash(
                provider, bytes32(0), SlashReason.LowScore, telemetryDigest, _treasury, taken - finderAmount,
                msg.sender, finderAmount
            );
        }
    }

    /// @inheritdoc IStakeManager
    function releaseSlash(uint256 slashId) external nonReentrant {
        Slash storage s = _slashes[slashId];
        if (s.status != SlashStatus.Pending) revert StakeManagerSlashNotInStatus(slashId, s.status);
        if (block.timestamp < s.releasableAt) revert StakeManagerSlashStillDisputable(slashId, s.releasableAt);
        s.status = SlashStatus.Released;
        (address beneficiary, uint256 amount, address finder, uint256 finderAmount) =
            (s.beneficiary, s.amount, s.finder, s.finderAmount);
        emit SlashReleased(slashId, beneficiary, amount, finder, finderAmount);
        if (amount != 0) _token.safeTransfer(beneficiary, amount);
        if (finderAmount != 0) _token.safeTransfer(finder, finderAmount);
    }

    /// @inheritdoc IStakeManager
    function freezeSlash(uint256 slashId) external onlyRole(DISPUTES_ROLE) {
        Slash storage s = _slashes[slashId];
        if (s.status != SlashStatus.Pending) revert StakeManagerSlashNotInStatus(slashId, s.status);
        if (block.timestamp >= s.releasableAt) revert StakeManagerSlashWindowClosed(slashId, s.releasableAt);
        s.status = SlashStatus.Frozen;
        emit SlashFrozen(slashId);
    }

    /// @inheritdoc IStakeManager
    function resolveSlash(uint256 slashId, bool reverse) external onlyRole(DISPUTES_ROLE) {
        Slash storage s = _slashes[slashId];
        if (s.status != SlashStatus.Frozen) revert StakeManagerSlashNotInStatus(slashId, s.status);
        if (reverse) {
            s.status = SlashStatus.Reversed;
            uint256 amount = uint256(s.amount) + s.finderAmount;
            _providers[s.provider].bonded += uint128(amount);
            emit SlashReversed(slashId, s.provider, amount);
        } else {
            s.status = SlashStatus.Pending;
            emit SlashUpheld(slashId);
        }
    }

    // ------------------------------------------------------------------ admin

    /// @inheritdoc IStakeManager
    function setUnbondingPeriod(uint64 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unbondingPeriod = period;
        emit UnbondingPeriodSet(period);
    }

    /// @inheritdoc IStakeManager
    function setSlashDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _slashDisputeWindow = window;
        emit SlashDisputeWindowSet(window);
    }

    /// @inheritdoc IStakeManager
    function setScoreSlashing(uint16 thresholdBps, uint16 slashBps, uint16 finderBps)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        if (thresholdBps > BPS) revert StakeManagerInvalidBps(thresholdBps);
        if (slashBps > BPS) revert StakeManagerInvalidBps(slashBps);
        if (finderBps > BPS) revert StakeManagerInvalidBps(finderBps);
        (_scoreThresholdBps, _scoreSlashBps, _finderBps) = (thresholdBps, slashBps, finderBps);
        emit ScoreSlashingSet(thresholdBps, slashBps, finderBps);
    }

    /// @inheritdoc IStakeManager
    function setTreasury(address treasury_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (treasury_ == address(0)) revert StakeManagerZeroAddress();
        _treasury = treasury_;
        emit TreasurySet(treasury_);
    }

    /// @inheritdoc IStakeManager
    function setJobEscrow(address escrow) external onlyRole(DEFAULT_ADMIN_ROLE) {
        if (escrow == address(0)) revert StakeManagerZeroAddress();
        if (_jobEscrow != address(0)) revert StakeManagerEscrowAlreadySet(_jobEscrow);
        _jobEscrow = escrow;
        _grantRole(ESCROW_ROLE, escrow);
        emit JobEscrowSet(escrow);
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc IStakeManager
    function token() external view returns (address) {
        return address(_token);
    }

    /// @inheritdoc IStakeManager
    function stakeOf(address provider) external view returns (StakeInfo memory) {
        Provider storage p = _providers[provider];
        return StakeInfo({bonded: p.bonded, locked: _lockedOf(provider), unbonding: p.unbonding, tier: p.tier});
    }

    /// @inheritdoc IStakeManager
    function payoutOf(address account) external view returns (Payout memory) {
        uint256 ledger = _ledgers[account];
        uint256 claimable = _providers[account].claimable;
        uint256 pending = uint104(ledger >> _PENDING_SHIFT);
        uint256 releaseAt = ledger >> _RELEASE_AT_SHIFT;
        if (pending != 0 && releaseAt <= block.timestamp) (claimable, pending) = (claimable + pending, 0);
        return Payout({claimable: claimable, pending: pending, releaseAt: releaseAt});
    }

    /// @inheritdoc IStakeManager
    function unbondingLock(address provider, uint256 lockId) external view returns (UnbondingLock memory) {
        return _unbondingLocks[provider][lockId];
    }

    /// @inheritdoc IStakeManager
    function lockedFor(bytes32 jobId, address provider) external view returns (uint256) {
        return _lockedFor[jobId][provider];
    }

    /// @inheritdoc IStakeManager
    function epochRoot(uint64 epoch) external view returns (bytes32) {
        return _epochRoots[epoch];
    }

    /// @inheritdoc IStakeManager
    function scoreSlashed(address provider, uint64 epoch) external view returns (bool) {
        return _scoreSlashed[provider][epoch];
    }

    /// @inheritdoc IStakeManager
    function slashOf(uint256 slashId) external view returns (Slash memory) {
        return _slashes[slashId];
    }

    /// @inheritdoc IStakeManager
    function slashCount() external view returns (uint256) {
        return _slashCount;
    }

    /// @inheritdoc IStakeManager
    function unbondingPeriod() external view returns (uint64) {
        return _unbondingPeriod;
    }

    /// @inheritdoc IStakeManager
    function slashDisputeWindow() external view returns (uint64) {
        return _slashDisputeWindow;
    }

    /// @inheritdoc IStakeManager
    function scoreSlashing() external view returns (uint16 thresholdBps, uint16 slashBps, uint16 finderBps) {
        return (_scoreThresholdBps, _scoreSlashBps, _finderBps);
    }

    /// @inheritdoc IStakeManager
    function treasury() external view returns (address) {
        return _treasury;
    }

    /// @inheritdoc IStakeManager
    function jobEscrow() external view returns (address) {
        return _jobEscrow;
    }

    // ------------------------------------------------------------------ internal

    /// @dev Pulls exactly `amount` from `from`; a token that delivers less (fee on transfer) is refused.
    function _pullExact(address from, uint256 amount) private {
        uint256 before = _token.balanceOf(address(this));
        _token.safeTransferFrom(from, address(this), amount);
        uint256 received = _token.balanceOf(address(this)) - before;
        if (received != amount) revert StakeManagerFeeOnTransferToken(amount, received);
    }

    function _openLock(address provider, uint256 lockId) private view returns (UnbondingLock memory lock) {
        lock = _unbondingLocks[provider][lockId];
        if (lock.amount == 0) revert StakeManagerUnknownUnbondingLock(provider, lockId);
    }

    /// @dev Deletes the lock and takes its payout out of the unbonding pool; slashing may have left
    /// the pool smaller than the lock, then the lock gets what is left.
    function _closeLock(address provider, uint256 lockId, UnbondingLock memory lock) private returns (uint256 amount) {
        Provider storage p = _providers[provider];
        amount = Math.min(lock.amount, p.unbonding);
        p.unbonding -= uint128(amount);
        delete _unbondingLocks[provider][lockId];
    }

    /// @dev Takes up to `amount` from free bonded stake, then from the unbonding pool; never from
    /// locked collateral. Returns what was taken.
    function _takeUnlockedStake(address provider, uint256 amount) private returns (uint256 taken) {
        Provider storage p = _providers[provider];
        uint256 fromBonded = Math.min(amount, p.bonded - _lockedOf(provider));
        uint256 fromUnbonding = Math.min(amount - fromBonded, p.unbonding);
        p.bonded -= uint128(fromBonded);
        p.unbonding -= uint128(fromUnbonding);
        taken = fromBonded + fromUnbonding;
    }

    function _recordSlash(
        address provider,
        bytes32 jobId,
        SlashReason reason,
        bytes32 evidence,
        address beneficiary,
        uint256 amount,
        address finder,
        uint256 finderAmount
    ) private returns (uint256 slashId) {
        slashId = ++_slashCount;
        uint40 releasableAt = uint40(block.timestamp + _slashDisputeWindow);
        _slashes[slashId] = Slash({
            provider: provider,
            releasableAt: releasableAt,
            status: SlashStatus.Pending,
            reason: reason,
            beneficiary: beneficiary,
            amount: amount.toUint96(),
            finder: finder,
            finderAmount: finderAmount.toUint96(),
            evidence: evidence
        });
        emit Slashed(
            slashId, provider, jobId, reason, evidence, beneficiary, amount, finder, finderAmount, releasableAt
        );
    }

    function _lockedOf(address provider) private view returns (uint256) {
        return uint96(_ledgers[provider]);
    }

    /// @dev `locked` as the ledger's low field; reverts if it does not fit.
    function _fitLocked(uint256 locked) private pure returns (uint256) {
        if (locked > type(uint96).max) revert StakeManagerAmountTooLarge(locked, type(uint96).max);
        return locked;
    }

    /// @dev Moves `account`'s pending payout to claimable if its release time has passed; returns
    /// the ledger word as stored afterwards.
    function _mature(address account) private returns (uint256 ledger) {
        ledger = _ledgers[account];
        uint256 pending = uint104(ledger >> _PENDING_SHIFT);
        if (pending != 0 && (ledger >> _RELEASE_AT_SHIFT) <= block.timestamp) {
            _providers[account].claimable += uint128(pending);
            ledger -= pending << _PENDING_SHIFT;
            _ledgers[account] = ledger;
        }
    }

    function _setTier(address provider, Tier tier) private {
        Provider storage p = _providers[provider];
        Tier oldTier = p.tier;
        if (oldTier == tier) return;
        p.tier = tier;
        emit TierChanged(provider, oldTier, tier);
    }
}
