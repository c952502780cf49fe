// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @title IDisputes
/// @notice Disputes over settlements and slashes, opened with a bond inside the dispute window and
/// ruled by an arbiter.
/// @dev A settlement dispute freezes `amount` of the respondent's pending payout on the JobEscrow
/// (customer vs provider or provider vs customer); a slash dispute freezes the slash on the
/// StakeManager. Granted: the frozen payout goes to the opener (and the arbiter may slash the
/// provider), or the slash is reversed; the bond returns to the opener. Dismissed: the frozen payout
/// returns to the respondent or the slash becomes releasable; the bond goes to the respondent.
/// No ruling by the ruling deadline: anyone applies the default, which is a dismissal (status quo,
/// bond to the respondent): the opener carries the burden of proof, so a dispute never decided costs
/// the opener its bond, and freezing someone's money is never free. A settlement dispute names a
/// party of that job: the customer names a provider the job's settlement listed
/// (`IJobEscrow.isBacker`: its payout proven); only such a provider may dispute the customer's refund.
interface IDisputes {
    /// @notice What is disputed.
    enum DisputeKind {
        Settlement, // a job's settlement: `subject` is the job id
        Slash // a slash: `subject` is the slash id
    }

    /// @notice Life of a dispute.
    enum DisputeStatus {
        None, // no such dispute
        Open, // funds frozen, waiting for the arbiter
        Granted, // arbiter ruled for the opener
        Dismissed, // arbiter ruled for the respondent
        Defaulted // no ruling in time: status quo, bond to the respondent (as dismissed)
    }

    /// @notice One dispute.
    struct Dispute {
        address opener; // who disputes and posted the bond
        uint40 rulingDeadline; // after this, anyone may apply the default ruling
        DisputeKind kind; // settlement or slash
        DisputeStatus status; // see DisputeStatus
        address respondent; // the other side: wins the bond if the dispute is dismissed
        uint96 bond; // token units posted by the opener
        bytes32 subject; // job id, or the slash id as bytes32
        uint256 frozenAmount; // settlement disputes: payout frozen on the escrow
    }

    // ------------------------------------------------------------------ errors

    /// @notice Job `jobId` is not settled, so its settlement cannot be disputed.
    error DisputesJobNotSettled(bytes32 jobId);
    /// @notice `caller` is neither side of what it tries to dispute.
    error DisputesNotAParty(address caller);
    /// @notice A settlement dispute must name the other side; `respondent` is not valid here.
    error DisputesInvalidRespondent(address respondent);
    /// @notice A zero amount was given for a dispute about job `jobId`.
    error DisputesZeroAmount(bytes32 jobId);
    /// @notice The arbiter's slash of `slashAmount` exceeds `max`, the payout dispute `disputeId` is about.
    error DisputesSlashTooLarge(uint256 disputeId, uint256 slashAmount, uint256 max);
    /// @notice A parameter was set to `value`, outside [`min`, `max`].
    error DisputesParameterOutOfRange(uint256 value, uint256 min, uint256 max);
    /// @notice The zero address was given for `parameter`.
    error DisputesZeroAddress(string parameter);
    /// @notice `escrow` or the StakeManager does not use `token` and the same StakeManager.
    error DisputesWiringMismatch(address token, address escrow);
    /// @notice Dispute `disputeId` is not open.
    error DisputesNotOpen(uint256 disputeId);
    /// @notice Dispute `disputeId` can be ruled only until `rulingDeadline`.
    error DisputesRulingDeadlinePassed(uint256 disputeId, uint256 rulingDeadline);
    /// @notice Dispute `disputeId`'s default applies only after `rulingDeadline`.
    error DisputesRulingDeadlineNotReached(uint256 disputeId, uint256 rulingDeadline);
    /// @notice Only a dispute opened by the customer can slash the provider.
    error DisputesSlashNotAllowed(uint256 disputeId);
    /// @notice The token delivered `received` for a transfer of `expected` (fee-on-transfer token).
    error DisputesFeeOnTransferToken(uint256 expected, uint256 received);

    // ------------------------------------------------------------------ events

    /// @notice `opener` disputed `subject` against `respondent`, with `bond` and `evidence`.
    event DisputeOpened(
        uint256 indexed disputeId,
        DisputeKind kind,
        bytes32 indexed subject,
        address indexed opener,
        address respondent,
        uint256 bond,
        uint256 frozenAmount,
        bytes32 evidence,
        uint256 rulingDeadline
    );
    /// @notice The arbiter ruled dispute `disputeId`; `slashId` is the provider's slash if any.
    event DisputeRuled(uint256 indexed disputeId, bool granted, uint256 slashId, bytes32 evidence);
    /// @notice No ruling came in time; the default applied to dispute `disputeId`.
    event DisputeDefaulted(uint256 indexed disputeId);
    /// @notice New disputes need a bond of `bond`.
    event DisputeBondSet(uint256 bond);
    /// @notice Arbiters have `period` seconds to rule new disputes.
    event RulingPeriodSet(uint256 period);

    // ------------------------------------------------------------------ parties

    /// @notice Disputes the settlement of job `jobId`, freezing `amount` of `respondent`'s pending
    /// payout. The customer names a provider the job's settlement listed (`IJobEscrow.isBacker`);
    /// such a provider names the customer.
    /// @dev Pulls the bond from the caller. Reverts after the escrow's dispute window and beyond
    /// the escrow's per-job caps (all disputes of a job freeze at most the job's amount).
    /// @return disputeId Id of the new dispute, from 1.
    function disputeSettlement(bytes32 jobId, address respondent, uint256 amount, bytes32 evidence)
        external
        returns (uint256 disputeId);

    /// @notice The slashed provider disputes slash `slashId` inside its dispute window.
    /// @dev Pulls the bond from the caller; the slash's beneficiary is the respondent.
    /// @return disputeId Id of the new dispute, from 1.
    function disputeSlash(uint256 slashId, bytes32 evidence) external returns (uint256 disputeId);

    /// @notice Applies the default ruling to an open dispute past its ruling deadline: frozen funds
    /// return to the respondent (for the rest of the job's dispute window) / the slash stands, and
    /// the bond goes to the respondent. Anyone may call.
    function applyDefaultRuling(uint256 disputeId) external;

    // ------------------------------------------------------------------ arbiter role

    /// @notice Rules dispute `disputeId` before its deadline.
    /// @dev ARBITER_ROLE only. `slashAmount` > 0 only for a granted settlement dispute opened by the
    /// customer, at most the payout it froze: it slashes the provider's stake (to the treasury,
    /// itself disputable), capped at what is slashable then (no slash when nothing is).
    /// @param granted True: the opener wins (refund / reverse the slash); false: dismissed.
    /// @param slashAmount Provider stake to slash on a granted customer dispute, else 0.
    /// @param evidence Hash of the arbiter's reasoning and evidence.
    function rule(uint256 disputeId, bool granted, uint256 slashAmount, bytes32 evidence) external;

    // ------------------------------------------------------------------ admin

    /// @notice Sets the bond of new disputes, non-zero. DEFAULT_ADMIN_ROLE only.
    function setBond(uint96 bond) external;
    /// @notice Sets the arbiter's ruling period of new disputes, 1 s to MAX_RULING_PERIOD.
    /// DEFAULT_ADMIN_ROLE only.
    function setRulingPeriod(uint64 period) external;

    // ------------------------------------------------------------------ views

    /// @notice Role that may rule disputes.
    function ARBITER_ROLE() external view returns (bytes32);
    /// @notice Longest ruling period, seconds.
    function MAX_RULING_PERIOD() external view returns (uint256);
    /// @notice Dispute `disputeId`.
    function disputeOf(uint256 disputeId) external view returns (Dispute memory);
    /// @notice Number of disputes so far; ids run from 1 to this.
    function disputeCount() external view returns (uint256);
    /// @notice Bond of new disputes.
    function bond() external view returns (uint96);
    /// @notice Ruling period of new disputes, seconds.
    function rulingPeriod() external view returns (uint64);
}
