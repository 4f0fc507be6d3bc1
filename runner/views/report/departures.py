"""Where each tree of a bundle departs from its baseline, as the report shows it: a line per tree,
then the changed places a reader must look at first (those that can tell they are being probed,
then those the cases ran), each with its cases; the rest counted. Both renderings keep it
collapsed by default (the terminal prints diffs only with ``--departures``; the page folds them)."""

from __future__ import annotations

from dataclasses import dataclass

from runner.evidence.departures import Departures, Hunk

SHOWN_NOT_RUN = 50  # changed places neither run nor able to tell, listed before the rest is counted


@dataclass(frozen=True)
class Place:
    hunk: Hunk
    unrecorded: int = 0  # cases of the tree whose lines were not recorded: "not run" cannot be said on their account

    @property
    def ran(self) -> str:
        return self.ran_in()

    def ran_in(self, most: int | None = None) -> str:
        """``ran in cases X, Y`` (at most ``most`` named per probe, the rest counted), or why not."""
        renamed = sum(len(c) for c in self.hunk.renamed_in.values())
        if not self.hunk.ran and renamed:
            return f"may have run: its module ran code under another file's name in {renamed} case(s)"
        if not self.hunk.ran:
            if not self.hunk.code:
                return "not code (comments or blank lines)"
            return f"not run by a recorded case ({self.unrecorded} case(s) without lines)" if self.unrecorded else "not run"
        if not any(self.hunk.ran_in.values()):
            return "ran at import (module-level code, before every case)"
        parts = ["at import (module-level code)"] if self.hunk.at_import else []
        for probe, cases in sorted(self.hunk.ran_in.items()):
            named = cases if most is None or len(cases) <= most else cases[:most] + [f"{len(cases) - most} more"]
            parts.append(f"{probe}: {', '.join(named)}")
        return f"ran in {sum(len(c) for c in self.hunk.ran_in.values())} case(s) ({'; '.join(parts)})"

    @property
    def aware(self) -> str:
        if not self.hunk.aware:
            return ""
        return "can tell it is being probed: " + "; ".join(sorted({f"{a.what} (line {a.line})" for a in self.hunk.aware}))

    @property
    def changed(self) -> str:
        h = self.hunk
        return f"+{h.added} -{h.removed}" + (f" (baseline lines {h.baseline_lines[0]}-{h.baseline_lines[1]})" if h.baseline_lines else "")


@dataclass(frozen=True)
class Tree:
    name: str  # the record's file in the bundle
    record: Departures
    first: list[Place]  # can tell it is being probed, or ran: read these
    others: list[Place]  # at most SHOWN_NOT_RUN of the rest
    more: int  # changed places not listed
    unimported: int  # files changed, added or removed that no probe run imported

    @property
    def line(self) -> str:
        return self.record.line()


def of(records: dict[str, Departures]) -> list[Tree]:
    out = []
    for name, record in sorted(records.items()):
        hunks = record.hunks()
        blind = sum(len(ids) for ids in record.unrecorded.values())
        read = [h for h in hunks if h.aware or h.ran or any(h.renamed_in.values())]
        first = [Place(h, blind) for h in sorted(read, key=lambda h: (not h.aware, not h.ran, h.file, h.at))]
        rest = [Place(h, blind) for h in hunks if h not in read]
        out.append(Tree(name, record, first, rest[:SHOWN_NOT_RUN], max(0, len(rest) - SHOWN_NOT_RUN),
                        sum(not f.imported for f in record.files)))
    return out
