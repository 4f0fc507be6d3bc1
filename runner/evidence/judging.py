"""One tree on its own: is each fix there, door by door? Judged from observed behaviour only.

A site (a door, a result path) is ``fixed`` when every bug case there was observed clean,
``not fixed`` when one showed its bug signature, ``regression`` when a guard case there (a valid or
re-entering request) was dropped, ``inconclusive`` when a case errored or timed out, and
``not applicable`` when the tree lacks every API the site's cases drive. A fix takes the worst
status of its sites, so one open door is enough to say "not fixed".
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from runner.evidence.observations import Case
from runner.evidence.receipts import Receipt

Status = Literal["fixed", "not fixed", "regression", "inconclusive", "not applicable"]
# worst first
ORDER: list[Status] = ["regression", "not fixed", "inconclusive", "fixed", "not applicable"]
SITE_FIX = {"prefill-door": 38935, "decode-door": 38935, "prefill-result": 36988}


class SiteStatus(BaseModel):
    fix: int
    site: str
    status: Status
    cases: dict[str, str]  # case id -> what it showed (bug, clean, error, timeout, not_applicable)


class FixStatus(BaseModel):
    fix: int
    status: Status
    sites: list[SiteStatus]


def _shown(case: Case) -> str:
    return case.classification if case.outcome == "observed" else case.outcome


def site_status(cases: list[Case]) -> Status:
    shown = [(c.role, _shown(c)) for c in cases]
    if ("guard", "bug") in shown:
        return "regression"
    if ("bug", "bug") in shown:
        return "not fixed"
    if any(s in ("error", "timeout") for _, s in shown):
        return "inconclusive"
    if all(s == "not_applicable" for role, s in shown if role == "bug"):
        return "not applicable"
    return "fixed"


def worst(statuses: list[Status]) -> Status:
    return min(statuses, key=ORDER.index) if statuses else "not applicable"


def fixes(receipts: list[Receipt]) -> list[FixStatus]:
    """Per fix and site, from every probe case the receipts hold (one tree's receipts)."""
    by_site: dict[str, list[Case]] = {}
    for receipt in receipts:
        for case in receipt.cases:
            by_site.setdefault(case.site, []).append(case)
    out: dict[int, list[SiteStatus]] = {}
    for site, cases in by_site.items():
        fix = SITE_FIX.get(site)
        if fix is None:
            continue
        out.setdefault(fix, []).append(SiteStatus(fix=fix, site=site, status=site_status(cases),
                                                  cases={c.id: _shown(c) for c in cases}))
    return [FixStatus(fix=f, status=worst([s.status for s in sites]), sites=sites) for f, sites in sorted(out.items())]
