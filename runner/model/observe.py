"""The model's situations observed as receipts and written as a bundle, labelled as synthetic."""

from __future__ import annotations

import time
from pathlib import Path

from runner.evidence import bundle, dsse
from runner.judge.observations import Case
from runner.evidence.receipts import ModelIdentity, Receipt, host_environment, host_probe, make
from runner.evidence.records import ModelRecord
from runner.model import incident
from runner.model.incident import SITUATIONS, STEPS, Cluster, Situation, Switches
from runner.sandbox import execute

LABEL = "synthetic state machine (diffprobe runner/model/incident.py), not SGLang code"
LIMITS = [
    "synthetic model: a state machine written for diffprobe, not SGLang code and not run against SGLang",
    "it shows how the described faults and defences interact; it is not evidence that a given release behaves so",
    "pages, tenants and transfers are simulated; no GPU, no RDMA, no tenant data",
]


def observe(sit: Situation, sw: Switches) -> Case:
    cluster = Cluster(sw)
    start = time.perf_counter_ns()
    effects, bug = sit.run(cluster)
    return Case(
        id=sit.id, site=sit.site, role=sit.role, title=f"{sit.title} [{LABEL}]",
        signature=f"{sit.signature} (in the synthetic model)", outcome="observed",
        classification="bug" if bug else "clean", effects={**effects, "trace": cluster.trace},
        duration_ms=(time.perf_counter_ns() - start) // 1_000_000,
    )


def run(name: str, sw: Switches) -> list[Receipt]:
    """Both models under one configuration: one receipt each, versioned by ``incident.py``'s digest."""
    receipts = []
    for probe in ("model-handoff", "model-admission"):
        started = execute.now()
        cases = [observe(s, sw) for s in SITUATIONS if s.probe == probe]
        source = ModelIdentity(source=f"{LABEL}; configuration '{name}'", switches=sw.model_dump())
        receipts.append(make(host_probe(probe, Path(incident.__file__)), source, host_environment(), cases,
                             started_at=started, finished_at=execute.now()))
    return receipts


def dropped_guards(results: dict[str, list[Receipt]]) -> list[str]:
    """``configuration: case`` for every guard case the model mishandled (a broken model, exit 1)."""
    return [f"{n}: {c.id}" for n, rs in results.items() for r in rs for c in r.cases if c.role == "guard" and c.classification == "bug"]


def write(out: Path, configs: dict[str, Switches], results: dict[str, list[Receipt]],
          signers: list[dsse.Signer] = ()) -> Path:
    return bundle.write(
        out, kind="model", created_at=execute.now(), receipts=[r for rs in results.values() for r in rs],
        differentials=[], pins_sha256=None, limits=LIMITS,
        extra=ModelRecord(synthetic=LABEL, configurations={n: s.model_dump() for n, s in configs.items()},
                          steps={str(k): v for k, v in STEPS.items()}).model_dump(mode="json"), signers=signers,
    )
