"""The checks the demo ends with (each balance and state, expected against actual) and their
report."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True, slots=True)
class Check:
    what: str
    expected: str
    actual: str

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


def report(console: Console, checks: list[Check], *, total_gas: int) -> None:
    """Print every check; exit 1 unless all of them hold."""
    results = Table(title=f"balances and states (total gas {total_gas:,})")
    for column in ("check", "expected", "actual", ""):
        results.add_column(column)
    for check in checks:
        results.add_row(check.what, check.expected, check.actual,
                        "[green]ok[/]" if check.ok else "[bold red]WRONG[/]")
    console.print(results)
    if not all(check.ok for check in checks):
        console.print("[bold red]demo failed: balances or states are off[/]")
        raise SystemExit(1)
    console.print("[bold green]demo passed[/]")
