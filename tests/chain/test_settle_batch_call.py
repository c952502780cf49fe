"""The SDK sends a batch of single-provider jobs in the packed `settleBatchSolo` form."""

from __future__ import annotations

from orchestrator.chain.sdk import Settlement, settle_batch_call

ALICE = "0x" + "aa" * 20
BOB = "0x" + "bb" * 20
ROOT = b"\x01" * 32


def test_settle_batch_call_packsABatchOfSingleProviderJobs() -> None:
    settlements = [Settlement(b"\x11" * 32, (ALICE,), (5,), ROOT),
                   Settlement(b"\x22" * 32, (BOB,), (0,), ROOT)]

    assert settle_batch_call(settlements) == (
        "settleBatchSolo", [(b"\x11" * 32, ALICE, 5, ROOT), (b"\x22" * 32, BOB, 0, ROOT)])


def test_settle_batch_call_usesTheGeneralFormWhenAnyJobHasSeveralProviders() -> None:
    settlements = [Settlement(b"\x11" * 32, (ALICE,), (5,), ROOT),
                   Settlement(b"\x22" * 32, (ALICE, BOB), (1, 2), ROOT)]

    assert settle_batch_call(settlements) == (
        "settleBatch", [(b"\x11" * 32, [ALICE], [5], ROOT),
                        (b"\x22" * 32, [ALICE, BOB], [1, 2], ROOT)])
