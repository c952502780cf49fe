"""Two transactions at the racing step at once, for tests of what concurrent requests (or
replicas) may write: the first stays open while the second runs on another connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker


def race(factory: sessionmaker[Session], first: Callable[[Session], None],
         second: Callable[[Session], None]) -> None:
    """`first` runs and stays uncommitted while `second` runs (and commits) on another
    connection; `first` commits half a second later, whether `second` is blocked or done."""
    failures: list[BaseException] = []

    def other() -> None:
        try:
            with factory.begin() as session:
                second(session)
        except BaseException as exc:
            failures.append(exc)

    with factory.begin() as session:
        first(session)
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.5)
    thread.join(timeout=30)
    assert not failures, failures
