"""A real release's cases run four at once observe exactly what they observe one at a time: every
field of every case but its duration (the lines each case ran included), in the same order, and
the same files imported and stand-ins used (one run of each, every probe, 0.5.20: bug and clean
cases both); and the host is told how far the run is as cases end."""

from __future__ import annotations

import pytest

from runner.evidence import catalog
from runner.sandbox import bwrap, execute
from runner.store import envs


@pytest.mark.slow
def test_cases_at_once_observe_what_one_at_a_time_observes(cache, interp, release_tree):
    environment = envs.env(release_tree("0.5.20"), cache, interp)
    probes = list(catalog.PROBES)
    told: list[tuple[int, int]] = []
    confined = bwrap.version() is not None  # a pinned release runs unconfined where bubblewrap cannot, as the CLI allows
    one = execute.run_probes(environment, probes, jobs=1, sandboxed=confined)
    four = execute.run_probes(environment, probes, jobs=4, sandboxed=confined,
                              progress=lambda done, total: told.append((done, total)))
    for probe in probes:
        a, b = one[probe].observations, four[probe].observations
        assert [c.model_dump(exclude={"duration_ms"}) for c in a.cases] == [c.model_dump(exclude={"duration_ms"}) for c in b.cases]
        assert (a.imported, a.standins, a.import_.outcome) == (b.imported, b.standins, b.import_.outcome)
        assert {c.outcome for c in a.cases} >= {"observed"}
    total = sum(len(run.observations.cases) for run in four.values())  # the host was told as cases ended
    assert told[-1] == (total, total) and told == sorted(told) and len(told) > total // 2
