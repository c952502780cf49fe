"""The demo's pictures: events close together share one label on the RS plot."""

from __future__ import annotations

from mesh.demo.outputs import _merged


def test_events_within_two_percent_of_the_run_share_one_line_and_keep_every_label() -> None:
    events = [(33.0, "settled"), (4.6, "agents joined"), (4.9, "job submitted"),
              (7.2, "churn-3 killed"), (17.8, "slashed"), (17.9, "demoted")]

    assert _merged(events) == [(4.6, "agents joined · job submitted"), (7.2, "churn-3 killed"),
                               (17.8, "slashed · demoted"), (33.0, "settled")]


def test_events_far_apart_stay_apart_and_none_is_nothing() -> None:
    assert _merged([(0.0, "a"), (10.0, "b")]) == [(0.0, "a"), (10.0, "b")]
    assert _merged([]) == []
