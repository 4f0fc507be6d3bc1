"""Every fix's duty table, composed once from the per-fix modules (``probes/duties_*.py``), and judging by them.

Each fix's module holds its promise as rows (``Duty``: id, what must hold, the check over recorded effects), its
case space (which cases check which duties), the code it changed (``FIX_CODE``) and the mutants argued
equivalent or explained. Nothing here imports SGLang or the rest of ``probes``: the host imports this module to
re-derive every classification from the recorded effects, so a verdict that does not follow from its effects
cannot pass for evidence.
"""

from __future__ import annotations

from types import ModuleType

from . import duties_1, duties_2, duties_3, duties_4, duties_5, duties_6, duties_36988, duties_38935, duties_39500, duties_40645, duties_41023, duties_41402, duties_41404, registry, space
from .duties_lifetime import CONFIGURATIONS, OTHER_BACKENDS
from .effects import Duty, Effects, classify, judged, signature
from .fixcode import mutant_key

__all__ = ["CONFIGURATIONS", "OTHER_BACKENDS", "Duty", "Effects", "classify", "mutant_key", "signature"]

_MODULES: dict[int, ModuleType] = {38935: duties_38935, 36988: duties_36988, 41023: duties_41023, 40645: duties_40645,
                                   41402: duties_41402, 41404: duties_41404, 39500: duties_39500,
                                   1: duties_1, 2: duties_2, 3: duties_3, 4: duties_4, 5: duties_5, 6: duties_6}


def _tables() -> dict[int, ModuleType]:
    """Fix -> its table, in the registry's order; each probe's space must be its fix's (a mismatch is a bug here)."""
    tables = {entry.fix: _MODULES[entry.fix] for entry in registry.PROBES}
    for entry in registry.PROBES:
        assert tables[entry.fix].SPACE.probe == entry.id, f"duties_{entry.fix}.SPACE is not probe {entry.id}'s"
    assert set(tables) == set(_MODULES), "a duty table no probe checks"
    return tables


TABLES = _tables()
FIX_OF: dict[str, int] = {duty.id: fix for fix, table in TABLES.items() for duty in table.DUTIES}
DUTIES: dict[str, Duty] = {duty.id: duty for table in TABLES.values() for duty in table.DUTIES}
SPACES: dict[str, space.Space] = {table.SPACE.probe: table.SPACE for table in TABLES.values()}
# Which duties each case checks, by probe and case id: its signature is their conjunction (from the spaces).
CASES: dict[str, dict[str, tuple[str, ...]]] = {probe: s.duty_table() for probe, s in SPACES.items()}
# Where each case is judged, by probe and case id: (site, role), from the spaces (never as a tree's process reports it).
PLACES: dict[str, dict[str, tuple[str, str]]] = {
    probe: {s.case_id(p): (s.site_of(p), s.role(p)) for p in s.points()} for probe, s in SPACES.items()}
# The ids of the hand-written cases the spaces replaced: each is still a case, meaning what it meant.
KEPT_IDS: dict[str, tuple[str, ...]] = {t.SPACE.probe: t.KEPT_IDS for t in TABLES.values() if hasattr(t, "KEPT_IDS")}
# The code each fix changed, by qualified name: what ``diffprobe mutate`` mutates, on the lines the fix's cases
# execute (a function whole, or in a long one only the statements naming a listed name and the blocks they open).
FIX_CODE: dict[int, dict[str, tuple[str, ...]]] = {fix: table.FIX_CODE for fix, table in TABLES.items()}
# Mutants no case can tell from the tree, each with why, keyed by (function, operator, statement before).
EQUIVALENT: dict[tuple[str, str, str], str] = {k: v for t in TABLES.values() for k, v in t.EQUIVALENT.items()}
EXPLAINED: dict[tuple[str, str, str], str] = {k: v for t in TABLES.values() for k, v in t.EXPLAINED.items()}
assert len(DUTIES) == sum(len(t.DUTIES) for t in TABLES.values()), "two tables declare one duty id"
assert len(EQUIVALENT) == sum(len(t.EQUIVALENT) for t in TABLES.values()), "two tables argue one mutant"
assert len(EXPLAINED) == sum(len(t.EXPLAINED) for t in TABLES.values()), "two tables explain one mutant"


def declared(probe: str, case: str) -> tuple[str, ...]:
    """The duties ``case`` of ``probe`` checks; KeyError for a case nobody declared."""
    return CASES[probe][case]


def judge(probe: str, case: str, effects: Effects) -> dict[str, bool]:
    """Each declared duty of the case, in order, and whether it held in ``effects``."""
    return judge_duties(declared(probe, case), effects)


def judge_duties(duties: tuple[str, ...], effects: Effects) -> dict[str, bool]:
    """``effects.judged`` by every fix's rows (a duty id names its fix)."""
    return judged(duties, DUTIES, effects)
