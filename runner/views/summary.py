"""Rich terminal tables for what a command found."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from runner import ui
from runner.views import styles
from runner.evidence.receipts import Differential


def differentials(diffs: list[Differential]) -> None:
    for d in diffs:
        base = ", ".join(s.source.source for s in d.base[:1])
        head = ", ".join(s.source.source for s in d.head[:1])
        table = Table(title=escape(f"#{d.fix} {d.title}: {base} -> {head}"), title_justify="left")
        for col in ("case", "site", "role", "base", "head", "transition"):
            table.add_column(col)
        for c in d.cases:
            style = styles.TRANSITION.get(c.transition, "yellow")
            table.add_row(*(escape(v) for v in (c.case, c.site, c.role, c.base, c.head)), f"[{style}]{c.transition}[/]")
        ui.out.print(table)
        expected = "" if d.expected is None else (" (as pinned)" if d.as_expected else f" [red](pinned: {d.expected})[/]")
        ui.out.print(f"verdict: [{styles.VERDICT[d.verdict]}]{d.verdict}[/]{expected}")
        for reason in d.reasons:
            if "bug -> clean" not in reason:
                ui.out.print(f"  - {reason}", markup=False)
