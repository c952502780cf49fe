"""The staking side of the chain bridge: what the StakeManager's final events say about the
orchestrator's own slash decisions, epoch commitments and tiers (docs/chain-index.md).

The indexer hands each final event to these handlers once, in chain order, in its pass's
transaction. Each is idempotent all the same (the same event twice has one effect): state is
set to what the event says, never counted up. Events that concern nothing of ours (a slash
no decision of ours asked for, an epoch another deployment closed) change nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.orm import Session

from orchestrator.db import chain_events as index
from orchestrator.db import disputes as disputes_store
from orchestrator.db import outbox as outbox_store
from orchestrator.db import pls as store
from orchestrator.db.models import ScoreEpoch, SlashRecord
from orchestrator.domain.chain_actions import SetTier, SlashCollateral
from orchestrator.domain.chain_events import ChainEvent, subject_key
from orchestrator.domain.ids import hex0x
from orchestrator.domain.types import Tier
from orchestrator.services.chain_events import CURSOR
from orchestrator.services.pls_staking import SLASH_KEY, PlsStaking

log = logging.getLogger("orchestrator.pls")

SYNCED_EPOCHS = 16  # newest unfinal epochs `sync_commitments` looks up each pass


def on_slashed(session: Session, event: ChainEvent, now: float) -> bool:
    """A final `Slashed`: the decision it carried out is on chain, under the chain's slash id
    (what a dispute or a release names). True when a decision was matched just now."""
    slash_id = int(event.args["slashId"])
    if store.slash_on_chain(session, chain_slash_id=slash_id) is not None:
        return False
    record = _decision_of(session, event)
    if record is None:
        log.info("slash %d of %s is none of our decisions", slash_id, event.args["provider"])
        return False
    store.set_slash_on_chain(record, chain_slash_id=slash_id, tx_hash=hex0x(event.tx_hash))
    log.info("slash decision %s is on chain as slash %d", record.slash_id, slash_id)
    return True


def _decision_of(session: Session, event: ChainEvent) -> SlashRecord | None:
    """The decision whose outbox row sent this transaction; else (a score slash a finder
    proved, a slash sent by hand) the oldest unmatched one of the same provider and reason
    with that evidence (for a score slash: the telemetry digest of its epoch's leaf)."""
    provider = str(event.args["provider"])
    for key in outbox_store.keys_of_tx(session, tx_hash=hex0x(event.tx_hash),
                                       kind=SlashCollateral.kind):
        record = disputes_store.get_slash_record(session, slash_id=key.removeprefix(SLASH_KEY))
        if record is not None and record.provider == provider and (
                record.chain_slash_id is None or record.chain_tx == hex0x(event.tx_hash)):
            return record  # (a deep reorg re-included our transaction under another id)
    candidates = store.unmatched_slashes(session, provider=provider,
                                         reason=int(event.args["reason"]),
                                         evidence=hex0x(event.args["evidence"]))
    return candidates[0] if candidates else None


def on_slash_released(session: Session, event: ChainEvent, now: float) -> bool:
    """A final `SlashReleased`: the slashed stake went to its beneficiary, for good."""
    record = store.slash_on_chain(session, chain_slash_id=int(event.args["slashId"]))
    if record is None or record.released_tx is not None:
        return False
    store.set_slash_released(record, tx_hash=hex0x(event.tx_hash))
    return True


def on_epoch_committed(session: Session, event: ChainEvent, now: float) -> bool:
    """A final `EpochCommitted` of an epoch we closed: its root is final on chain (scores and
    score slashes are provable from then on). A different root than ours is logged, not
    taken: the chain refuses our commit, and the outbox parks it with that reason."""
    epoch = int(event.args["epoch"])
    row = store.get_epoch(session, epoch=epoch)
    if row is None:
        return False
    if hex0x(event.args["scoreRoot"]) != row.root:
        log.error("epoch %d was committed on chain with root %s, not ours (%s)", epoch,
                  hex0x(event.args["scoreRoot"]), row.root)
        return False
    return _mark_committed(row, event)


def _mark_committed(row: ScoreEpoch, event: ChainEvent) -> bool:
    tx_hash = hex0x(event.tx_hash)
    if (row.committed_tx, row.committed_block) == (tx_hash, event.block_number):
        return False
    store.set_epoch_committed(row, tx_hash=tx_hash, block=event.block_number)
    return True


def uncommit_reorged(session: Session, *, epochs: Sequence[int]) -> None:
    """A reorg removed these epochs' commit transactions (the outbox sends them again): their
    commitment is not final any more, whatever an applied event said."""
    for epoch in epochs:
        row = store.get_epoch(session, epoch=epoch)
        if row is not None and row.committed_tx is not None:
            log.warning("epoch %d: its final commitment was reorged out", epoch)
            store.set_epoch_committed(row, tx_hash=None, block=None)


def sync_commitments(session: Session, *, now: float) -> int:
    """Mark the recent epochs not yet final whose `EpochCommitted` is final in the index (the
    chain-index job, each pass): a commitment a reorg deeper than the margin removed comes
    back as an event already applied, which no handler sees again. Returns how many."""
    marked = 0
    for row in store.uncommitted_epochs(session, limit=SYNCED_EPOCHS):
        for stored in index.events(session, cursor=CURSOR,
                                   subject=subject_key("epoch", row.epoch), final_only=True):
            event = stored.event
            if event.name == "EpochCommitted" and hex0x(event.args["scoreRoot"]) == row.root:
                marked += _mark_committed(row, event)
    return marked


def on_tier_changed(session: Session, event: ChainEvent, now: float, *,
                    staking: PlsStaking) -> bool:
    """A final `TierChanged`. One of our own `tier` transactions carried a decision the DB and
    the engines already hold; while one of ours for the provider is on its way, the chain is
    about to change again. Otherwise the chain moved the tier by itself (a score slash
    demotes, a reversed one restores, an operator's call): the provider's nodes adopt it."""
    provider = str(event.args["provider"])
    if outbox_store.keys_of_tx(session, tx_hash=hex0x(event.tx_hash), kind=SetTier.kind):
        return False
    if any(row.payload.get("provider") == provider
           for row in outbox_store.unmined(session, kind=SetTier.kind)):
        return False
    return bool(staking.adopt_chain_tier(session, provider=provider,
                                         tier=Tier(int(event.args["newTier"])), now=now))
