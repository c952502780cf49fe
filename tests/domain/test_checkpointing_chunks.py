"""`plan_chunks`: how a frame's samples are split into resumable chunks (offset, length)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.domain.checkpointing import plan_chunks

# Worked out by hand: (samples, chunk_samples) -> the exact plan.
PLANS = [
    (16, 5, [(0, 5), (5, 5), (10, 5), (15, 1)]),  # the last chunk takes the remainder
    (12, 4, [(0, 4), (4, 4), (8, 4)]),  # an exact multiple: no short chunk
    (8, 8, [(0, 8)]),  # one chunk the size of the frame
    (3, 8, [(0, 3)]),  # a chunk larger than the frame is cut to the frame
    (5, 4, [(0, 4), (4, 1)]),
    (1, 1, [(0, 1)]),  # the smallest frame and the smallest chunk
    (1, 64, [(0, 1)]),
    (3, 1, [(0, 1), (1, 1), (2, 1)]),  # one sample per chunk
    (7, 2, [(0, 2), (2, 2), (4, 2), (6, 1)]),
    (10, 9, [(0, 9), (9, 1)]),
    (2, 1, [(0, 1), (1, 1)]),
]


@pytest.mark.parametrize(("samples", "chunk", "plan"), PLANS,
                         ids=[f"{s}-by-{c}" for s, c, _ in PLANS])
def test_plan_chunks_gives_the_hand_worked_plan(samples: int, chunk: int,
                                                plan: list[tuple[int, int]]) -> None:
    assert plan_chunks(samples, chunk) == plan


@pytest.mark.parametrize(("samples", "chunk"),
                         [(0, 4), (4, 0), (0, 0), (-1, 4), (4, -1), (-3, -3)])
def test_plan_chunks_refuses_an_empty_frame_or_an_empty_chunk(samples: int, chunk: int) -> None:
    with pytest.raises(ValueError) as caught:
        plan_chunks(samples, chunk)
    assert str(caught.value) == "samples and chunk_samples must be at least 1"


@given(st.integers(1, 5000), st.integers(1, 700))
def test_plan_chunks_covers_every_sample_once_and_never_asks_past_the_end(samples: int,
                                                                          chunk: int) -> None:
    plan = plan_chunks(samples, chunk)
    assert len(plan) == -(-samples // chunk)  # ceil(samples / chunk)
    expected_offset = 0
    for index, (offset, length) in enumerate(plan):
        assert offset == expected_offset  # contiguous, starting at sample 0
        assert 1 <= length <= chunk
        if index < len(plan) - 1:
            assert length == chunk  # only the last chunk may be short
        expected_offset += length
    assert expected_offset == samples  # offset + length never goes past the total
