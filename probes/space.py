"""A probe's case space: the inputs the fix's code tells apart, as dimensions; its cases are the
combinations the tree's own code can reach (interface I2).

A hand-written list of cases misses the input a sloppy backport breaks, so a probe declares what the
fix's code distinguishes instead, and the cases are generated:

- a :class:`Dimension` is one thing the fix's code reads to decide (the door, the request's state,
  whether it carries a grammar, the chunk phase of its result...). Each :class:`Value` says how the
  tree's own code produces that state (``how``), so a case's starting state is never one SGLang
  cannot be in. The first value is the default: what a case that does not vary the dimension has.
- the **core** dimensions are crossed in full: every combination is a case.
- every other dimension is varied one value at a time on each core combination it is read on:
  ``over`` is a :data:`Pattern` of core values, the branches of the fix's code that read it (a
  grammar is read on a final result only, so it is varied there). This is the pruning: a dimension
  is crossed with the core where a branch of the fix's code can tell its values apart, never
  blindly with every other dimension.
- a dimension whose ``over`` also names a non-core dimension *refines* it: it is varied on the
  points that have the named value (the metadata slot index is read only where a metadata buffer
  is held, so it is varied on those), again one value at a time.
- an :class:`Unreachable` rule removes a combination no code of the tree can produce, with why. A
  value can ``imply`` values of other dimensions (a late result of a retired request holds
  nothing); a combination that contradicts an implication is unreachable too.
- an era that cannot produce a state at all is not a rule here: the probe's scene builder asks the
  tree for the API it needs and the case is *not applicable*, naming it (``probes/tree.py``).

Declaring a space (a new probe does the same)::

    from probes.space import Dimension, Rule, Space, Unreachable, Value

    SPACE = Space(
        probe="handoff",
        dimensions=(
            Dimension("side", (Value("prefill", "the prefill worker's sender"),
                               Value("decode", "the decode worker's receiver")), core=True),
            Dimension("transfer", (Value("full", "every reserved page written"),
                                   Value("short", "fewer pages written than decode reserved")), core=True),
            Dimension("checksum", (Value("off", "the stock server", label=""),
                                   Value("checksum", "--disaggregation-enable-kv-checksum on")),
                      over={"side": {"decode"}}, reads=("enable_kv_checksum",)),
        ),
        unreachable=(Unreachable("a prefill sender never reserves pages", {"side": {"prefill"}, "transfer": {"short"}}),),
        duties=(Rule({"transfer": {"short"}}, ("handoff-short-caught",)),
                Rule({"transfer": {"full"}}, ("handoff-full-accepted",))),
        bug={"transfer": {"short"}},
    )

    SPACE.points()          # the reachable combinations, in a fixed order
    SPACE.case_id(point)    # "decode-short-checksum": the non-empty labels joined; ``aliases`` keep old ids
    SPACE.duties(point)     # the duties of every matching Rule, in order: duties are data, never a hand table
    SPACE.duty_table()      # {case id: duties}: what the host judges with (``probes/duties.py`` CASES)
    SPACE.undeclared(fixcode.decisions(fn, names))  # names the fix's code decides on that no dimension varies

Name in each dimension's ``reads`` what the fix's code reads to tell its values apart, and in the space's
``incidental`` every other name its conditions read, with why no case varies it: a release whose fix code
decides on something new then shows up as an undeclared name (``tests/probes/test_space_follows_code.py``).

Everything here is pure standard library: the host imports it (through ``probes/duties.py``) to
re-derive every case's duties from its id.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field

Point = Mapping[str, str]  # dimension name -> value name
Pattern = Mapping[str, Collection[str]]  # dimension name -> the values that match


def matches(pattern: Pattern | None, point: Point) -> bool:
    """Whether ``point`` has, for every dimension the pattern names, one of its values (an empty or
    absent pattern matches every point)."""
    return all(point.get(dim) in values for dim, values in (pattern or {}).items())


@dataclass(frozen=True)
class Value:
    """One value of a dimension. ``name`` identifies it in points and patterns; ``label`` is its part of
    a case id (default: the name; ``""`` adds nothing, for a default no id needs to spell); ``says`` is
    its part of a case title; ``how`` says how the tree's own code produces this state; ``implies``
    sets other dimensions whenever this value is chosen."""

    name: str
    how: str
    label: str | None = None
    says: str | None = None
    implies: Mapping[str, str] = field(default_factory=dict)

    @property
    def id_part(self) -> str:
        return self.name if self.label is None else self.label


@dataclass(frozen=True)
class Dimension:
    """One input the fix's code tells apart. ``reads``: the names (attributes, functions, parameters)
    the fix's code reads to tell its values apart. ``core``: crossed in full with the other core
    dimensions. Otherwise ``over`` is the pattern of core values it is varied on (None: every core
    combination)."""

    name: str
    values: tuple[Value, ...]
    core: bool = False
    over: Pattern | None = None
    reads: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [v.name for v in self.values]
        assert names and len(names) == len(set(names)), f"dimension {self.name}: values must be unique"

    @property
    def default(self) -> str:
        return self.values[0].name

    def value(self, name: str) -> Value:
        for value in self.values:
            if value.name == name:
                return value
        raise KeyError(f"dimension {self.name} has no value {name}")


@dataclass(frozen=True)
class Unreachable:
    """A combination the tree's code cannot produce: every point matching ``when`` is left out."""

    why: str
    when: Pattern


@dataclass(frozen=True)
class Rule:
    """Duties of every case whose point matches ``when``: a case checks the duties of each matching
    rule, in the order the rules are declared."""

    when: Pattern
    duties: tuple[str, ...]


@dataclass(frozen=True)
class Space:
    """The case space of one probe. ``bug``: the points whose cases the fix is meant to change (a
    pattern, or several); every other case is a guard. ``aliases`` maps a generated id to the id a case
    had before the space was generated, where it means the same thing; ``site`` names the case's site
    from its point."""

    probe: str
    dimensions: tuple[Dimension, ...]
    duties_by: tuple[Rule, ...] = field(default=(), kw_only=True)
    bug: tuple[Pattern, ...] = field(default=(), kw_only=True)
    unreachable: tuple[Unreachable, ...] = field(default=(), kw_only=True)
    aliases: Mapping[str, str] = field(default_factory=dict, kw_only=True)
    site: Callable[[Point], str] | str = field(default="", kw_only=True)
    incidental: Mapping[str, str] = field(default_factory=dict, kw_only=True)

    def __post_init__(self) -> None:
        names = [d.name for d in self.dimensions]
        assert len(names) == len(set(names)), f"{self.probe}: dimension names must be unique"
        for rule in (*self.duties_by, *self.unreachable):
            pattern = rule.when
            for dim, values in pattern.items():
                known = {v.name for v in self.dimension(dim).values}
                assert set(values) <= known, f"{self.probe}: {dim} has no value {sorted(set(values) - known)}"
        ids = [self.case_id(p) for p in self.points()]
        shared = sorted({i for i in ids if ids.count(i) > 1})
        assert not shared, f"{self.probe}: cases share an id: {', '.join(shared)}"

    # --- the space ---------------------------------------------------------------------------------

    def dimension(self, name: str) -> Dimension:
        for dim in self.dimensions:
            if dim.name == name:
                return dim
        raise KeyError(f"{self.probe} has no dimension {name}")

    def candidates(self) -> Iterator[dict[str, str]]:
        """Every combination asked for, before reachability: each core combination, then each value of
        every other dimension varied on the core combinations it is read on."""
        core = [d for d in self.dimensions if d.core]
        core_names = {d.name for d in core}
        refining = [d for d in self.dimensions if not d.core and set(d.over or ()) - core_names]
        for combo in itertools.product(*(d.values for d in core)):
            base = {d.name: v.name for d, v in zip(core, combo)}
            yield dict(base)
            for dim in self.dimensions:
                if not dim.core and dim not in refining and matches(dim.over, base):
                    for value in dim.values[1:]:
                        varied = {**base, dim.name: value.name}
                        yield varied
                        yield from self._refined(varied, dim.name, refining)
            yield from self._refined(base, None, refining)

    def _refined(self, explicit: dict[str, str], varied: str | None,
                 refining: list[Dimension]) -> Iterator[dict[str, str]]:
        """A dimension whose ``over`` names a non-core dimension refines a value of it: it is varied, one
        value at a time, on the core combination itself and on the variation of that dimension (defaults
        and implications filled in) that match ``over``; never on the variations of other dimensions."""
        point, _ = self.complete(explicit)
        if point is None:
            return
        for dim in refining:
            if (varied is None or varied in (dim.over or {})) and matches(dim.over, point):
                for value in dim.values[1:]:
                    yield {**explicit, dim.name: value.name}

    def complete(self, explicit: Point) -> tuple[dict[str, str] | None, str]:
        """The whole point of a combination asked for (defaults, then what its values imply), or None
        and why it cannot exist."""
        point = {d.name: explicit.get(d.name, d.default) for d in self.dimensions}
        fixed = dict(explicit)
        for _ in range(len(self.dimensions) + 1):  # implications settle in at most one pass per dimension
            changed = False
            for dim in self.dimensions:
                for other, wanted in dim.value(point[dim.name]).implies.items():
                    if other in fixed and fixed[other] != wanted:
                        return None, f"{dim.name}={point[dim.name]} implies {other}={wanted}"
                    if point[other] != wanted:
                        point[other], fixed[other], changed = wanted, wanted, True
            if not changed:
                break
        for rule in self.unreachable:
            if matches(rule.when, point):
                return None, rule.why
        return point, ""

    @functools.cached_property
    def _points(self) -> tuple[dict[str, str], ...]:
        seen: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        for explicit in self.candidates():
            point, _ = self.complete(explicit)
            if point is not None:
                seen.setdefault(tuple(sorted(point.items())), point)
        return tuple(seen.values())

    def points(self) -> list[dict[str, str]]:
        """The reachable combinations, each once, in a fixed order (core order, then variations)."""
        return [dict(p) for p in self._points]

    def left_out(self) -> list[tuple[dict[str, str], str]]:
        """The combinations asked for that cannot exist, each with why (for the docs and the tests)."""
        found = []
        for explicit in self.candidates():
            point, why = self.complete(explicit)
            if point is None:
                found.append((explicit, why))
        return found

    # --- one case ---------------------------------------------------------------------------------

    def generated_id(self, point: Point) -> str:
        return "-".join(part for d in self.dimensions if (part := d.value(point[d.name]).id_part))

    def case_id(self, point: Point) -> str:
        generated = self.generated_id(point)
        return self.aliases.get(generated, generated)

    def point(self, case_id: str) -> dict[str, str]:
        """The point of a case id of this space; KeyError for an id it does not generate."""
        for point in self.points():
            if self.case_id(point) == case_id:
                return point
        raise KeyError(f"{case_id} is not a case of probe {self.probe}")

    def role(self, point: Point) -> str:
        return "bug" if any(matches(p, point) for p in self.bug) else "guard"

    def duties(self, point: Point) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for rule in self.duties_by if matches(rule.when, point) for d in rule.duties))

    def title(self, point: Point) -> str:
        """The case's title: what each value it has says, defaults that say something included."""
        return ", ".join(s for d in self.dimensions if (s := d.value(point[d.name]).says))

    def how(self, point: Point) -> list[str]:
        """How the tree's own code produces the case's starting state, value by value."""
        return [f"{d.name}={point[d.name]}: {d.value(point[d.name]).how}" for d in self.dimensions]

    def site_of(self, point: Point) -> str:
        return self.site(point) if callable(self.site) else self.site

    def undeclared(self, decisions: Collection[str]) -> list[str]:
        """The names the fix's code decides on (``fixcode.decisions``) that no dimension reads and that are not
        declared ``incidental`` (name -> why no case needs to vary it): inputs the space does not vary yet."""
        read = {name for dim in self.dimensions for name in dim.reads}
        return sorted(set(decisions) - read - set(self.incidental))

    def duty_table(self) -> dict[str, tuple[str, ...]]:
        """Case id -> the duties it checks, for every case of the space."""
        return {self.case_id(p): self.duties(p) for p in self.points()}
