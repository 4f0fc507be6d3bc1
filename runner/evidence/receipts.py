"""Receipts: what was probed, with what, where, and what was observed, sealed by a sha256.

Canonical form (recomputable without diffprobe): drop the top-level ``digest`` key, then
``json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")``;
its sha256 is ``digest``. Receipts never contain floats, so this text is unambiguous.
``observation_digest`` is the same over only what a repeat run must reproduce exactly (the probe
version, the tree and each case without its duration), so runs can be compared across machines.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_serializer

from runner import __version__
from runner.errors import Redacted
from runner.store.envs import Env
from runner.files import sha256_bytes, sha256_file
from runner.evidence.catalog import judge
from runner.judge import fixcode, judging
from runner.judge.fixcode import FixCoverage
from runner.judge.observations import NOT_OBSERVED, Case, Classification, ImportResult, Outcome, reject_floats
from runner.judge.judging import Transition, Verdict, state, transition, verdict
from runner.store.sources import TreeIdentity

RECEIPT_SCHEMA = "diffprobe.receipt/1"
DIFFERENTIAL_SCHEMA = "diffprobe.differential/1"


def canonical(value: Any) -> bytes:
    reject_floats(value, "receipt")
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def seal(body: dict[str, Any]) -> str:
    return sha256_bytes(canonical({k: v for k, v in body.items() if k != "digest"}))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProbeRef(_Model):
    id: str
    fix: int | None
    sha256: str = Field(description="probe version: sha256 over the '<sha256>  <path>' lines of files (runner.evidence.catalog)")
    files: dict[str, str] = Field(description="each file of the probe's import closure -> its sha256")


class Standins(_Model):
    declared: dict[str, str]
    used: list[str]
    tree_lacks: list[str]
    sha256: str


class Limits(_Model):
    """Resource limits in force for a run's processes (runner/sandbox/limits.py); None: not in force."""

    memory: int | None = None  # bytes, every process together (a cgroup)
    processes: int | None = None  # processes and threads together (a cgroup)
    address_space: int | None = None  # bytes, each process (RLIMIT_AS)
    file_size: int | None = None  # bytes, each file written (RLIMIT_FSIZE)
    open_files: int | None = None  # each process (RLIMIT_NOFILE)


class Isolation(_Model):
    """The isolation actually in force for one run, as recorded in its receipt."""

    sandbox: Literal["bubblewrap", "none"]
    version: str | None = None
    namespaces: list[str] = []  # the new namespaces the process was found in
    read_only: list[str] = []  # host paths, bound read-only at the same path
    writable: list[str] = []  # the run's result directory, nothing else
    private: list[str] = []  # empty tmpfs of its own
    limits: Limits = Limits()

    @property
    def sandboxed(self) -> bool:
        return self.sandbox == "bubblewrap"


TREE_KINDS = ("git", "pypi", "path", "wheel", "oci", "docker-archive", "registry")  # sources whose code a probe ran


class Environment(_Model):
    """Where the observation was made. Tree probes fill every field; gates and the model, which run
    on the host, leave the probe-environment fields empty."""

    python: str
    implementation: str
    platform: str
    diffprobe: str
    diffprobe_sha256: str = Field(description="the judge: sha256 over the '<sha256>  <path>' lines of judge_files "
                                              "(runner.evidence.catalog)")
    judge_files: dict[str, str] = Field({}, description="the files diffprobe_sha256 covers: the import closure of "
                                                        "runner/judge, each with its sha256 (empty in receipts made "
                                                        "before 2026-12-04, whose judge digest covered runner/evidence)")
    interpreter_tag: str | None = None
    lock_sha256: str | None = None
    layer: str | None = None
    standins: Standins | None = None
    notes: list[str] = []
    network_isolated: bool | None = None
    isolation: Isolation | None = Field(None, description="the sandbox in force: bubblewrap, or none (red in reports)")

    def confinement(self) -> dict[str, str]:
        """How the tree's code ran, in the words every screen and attestation uses: the sandbox, the
        interpreter and the dependency layer (compare: a difference in any of them is a line of its own)."""
        i = self.isolation
        return {"sandbox": "not recorded" if i is None else i.sandbox + (f" {i.version}" if i.version else ""),
                "interpreter": f"{self.implementation} {self.python}" + (f" ({self.interpreter_tag})" if self.interpreter_tag else ""),
                "dependency layer": self.layer or "none"}


class ServerIdentity(_Model):
    """A live server probed by a gate: its URL and what it said about itself."""

    kind: Literal["server"] = "server"
    source: Redacted
    url: Redacted
    reported: dict[str, Any]


class ModelIdentity(_Model):
    """The executable incident model: which switches were set."""

    kind: Literal["model"] = "model"
    source: Redacted
    switches: dict[str, bool]


Source = Annotated[Union[TreeIdentity, ServerIdentity, ModelIdentity], Field(discriminator="kind")]


class Summary(_Model):
    outcomes: dict[Outcome, int]
    classifications: dict[Classification, int]


class Rejudged(_Model):
    """Set on a receipt whose verdicts this judge derived anew from another receipt's recorded observation (same
    tree, source, probe version and environment; only the judge differed), instead of probing again."""

    receipt: str = Field(description="digest of the receipt whose observation this is (its times, materials, import "
                                     "result and each case's effects, lines and conditions, unchanged)")
    judge: str = Field(description="the judge (diffprobe_sha256) that judged that receipt")


class Receipt(_Model):
    schema_version: Literal["diffprobe.receipt/1"] = RECEIPT_SCHEMA
    probe: ProbeRef
    source: Source
    environment: Environment
    materials: dict[str, str] = Field(description="every sglang file the probe imported -> sha256 (in-toto materials)")
    import_result: ImportResult
    cases: list[Case]
    fix_code: FixCoverage | None = Field(None, description="which statements of the fix's code (duties.FIX_CODE, read "
                                         "from the stored tree) the cases ran, and which none did")
    summary: Summary
    started_at: str
    finished_at: str
    observation_digest: str
    rejudged: Rejudged | None = Field(None, description="absent: judged when observed; else the receipt whose "
                                                        "observation this judge judged anew")
    digest: str

    def case(self, case_id: str) -> Case | None:
        return next((c for c in self.cases if c.id == case_id), None)

    @model_serializer(mode="wrap")
    def _without_absent_fix_code(self, handler):
        """A receipt with no fix's code to cover (a gate, the model, a receipt sealed before it was recorded)
        has no ``fix_code`` key at all, and one judged when observed no ``rejudged``: the digest was sealed over
        the body as it was made."""
        body = handler(self)
        for key in ("fix_code", "rejudged"):
            if body.get(key) is None:
                body.pop(key, None)
        return body


def observation_digest(probe_sha256: str, tree_digest: str, cases: list[Case]) -> str:
    stable = [c.model_dump(mode="json", exclude=set(NOT_OBSERVED)) for c in cases]
    return sha256_bytes(canonical({"probe": probe_sha256, "tree": tree_digest, "cases": stable}))


def _summary(cases: list[Case]) -> Summary:
    outcomes = {o: 0 for o in ("observed", "error", "not_applicable", "timeout")}
    classes = {c: 0 for c in ("bug", "clean", "inconclusive")}
    for case in cases:
        outcomes[case.outcome] += 1
        classes[case.classification] += 1
    return Summary(outcomes=outcomes, classifications=classes)


def make(
    probe: ProbeRef, source: TreeIdentity | ServerIdentity | ModelIdentity, environment: Environment,
    cases: list[Case], *, started_at: str, finished_at: str, materials: dict[str, str] | None = None,
    import_result: ImportResult | None = None, fix_code: FixCoverage | None = None, rejudged: Rejudged | None = None,
) -> Receipt:
    """Seal a receipt; the one constructor for tree probes, gates and the incident model alike."""
    identity = source_key(source)
    body: dict[str, Any] = {
        "schema_version": RECEIPT_SCHEMA,
        "probe": probe.model_dump(mode="json"),
        "source": source.model_dump(mode="json"),
        "environment": environment.model_dump(mode="json"),
        "materials": dict(sorted((materials or {}).items())),
        "import_result": (import_result or ImportResult(outcome="ok", duration_ms=0)).model_dump(mode="json"),
        "cases": [c.model_dump(mode="json") for c in cases],
        **({"fix_code": fix_code.model_dump(mode="json")} if fix_code is not None else {}),
        "summary": _summary(cases).model_dump(mode="json"),
        "started_at": started_at,
        "finished_at": finished_at,
        "observation_digest": observation_digest(probe.sha256, identity, cases),
        **({"rejudged": rejudged.model_dump(mode="json")} if rejudged is not None else {}),
    }
    body["digest"] = seal(body)
    return Receipt.model_validate(body)


def source_key(source: TreeIdentity | ServerIdentity | ModelIdentity) -> str:
    """What identifies the observed thing: a tree's digest, else the digest of its identity."""
    return getattr(source, "tree_digest", None) or sha256_bytes(canonical(source.model_dump(mode="json")))


def host_environment() -> Environment:
    """For observations made in diffprobe's own interpreter (gates, the model)."""
    return Environment(python=platform.python_version(), implementation=platform.python_implementation(),
                       platform=platform.platform(), diffprobe=__version__,
                       diffprobe_sha256=judge()[0], judge_files=judge()[1])


def host_probe(probe_id: str, source: Path, fix: int | None = None) -> ProbeRef:
    """ProbeRef for code that runs in diffprobe's own interpreter (a gate, the model): versioned by
    its source file, named by its path in the project."""
    digest = sha256_file(source)
    return ProbeRef(id=probe_id, fix=fix, sha256=digest, files={source.resolve().relative_to(PROJECT).as_posix(): digest})


PROJECT = Path(__file__).resolve().parents[2]  # the directory that holds runner/


def tree_environment(
    environment: Env, *, python: str, implementation: str, platform: str, standins_used: list[str],
    isolation: Isolation,
) -> Environment:
    """Where a run inside a tree's environment happened: its stamp plus what the run reported."""
    stamp = environment.stamp
    return Environment(
        python=python, implementation=implementation, interpreter_tag=stamp.interpreter.tag,
        platform=platform, lock_sha256=stamp.lock_sha256, layer=stamp.layer_key,
        standins=Standins(declared=stamp.standins.declared, used=standins_used,
                          tree_lacks=stamp.standins.tree_lacks, sha256=stamp.standins.sha256),
        notes=stamp.notes, network_isolated="net" in isolation.namespaces, isolation=isolation, diffprobe=__version__,
        diffprobe_sha256=judge()[0], judge_files=judge()[1],
    )


# --- differentials --------------------------------------------------------------------------


class Side(_Model):
    receipt: str = Field(description="file name of the receipt inside the bundle")
    receipt_digest: str
    source: Source


class CaseTransition(_Model):
    probe: str
    case: str
    site: str
    role: Literal["bug", "guard"]
    base: str = Field(description="outcome/classification at base")
    head: str
    transition: Transition


class Differential(_Model):
    schema_version: Literal["diffprobe.differential/1"] = DIFFERENTIAL_SCHEMA
    fix: int
    title: str
    probes: list[str]
    base: list[Side]
    head: list[Side]
    cases: list[CaseTransition]
    verdict: Verdict
    reasons: list[str]
    expected: Verdict | None
    as_expected: bool | None
    sites: list[str] = Field(default_factory=list, description="the only sites (configurations) compared; empty: all")
    digest: str


def differential(
    fix: int, title: str, probes: list[str], base: list[tuple[str, Receipt]], head: list[tuple[str, Receipt]],
    expected: Verdict | None, sites: list[str] | None = None,
) -> Differential:
    """Compare base and head receipts of the same probes, case by case; with ``sites``, only the cases
    of those sites (a defence off by default is compared with its option on)."""
    by_probe_base = {r.probe.id: r for _, r in base}
    by_probe_head = {r.probe.id: r for _, r in head}
    not_comparable = None
    if not all(p in by_probe_base and p in by_probe_head and by_probe_base[p].probe.sha256 == by_probe_head[p].probe.sha256
               for p in probes):
        not_comparable = "were probed with different probe versions"
    elif len({r.environment.diffprobe_sha256 for _, r in base + head}) > 1:
        not_comparable = "were judged by different diffprobe code (diffprobe_sha256 differs)"
    rows: list[CaseTransition] = []
    for probe in probes:
        b, h = by_probe_base.get(probe), by_probe_head.get(probe)
        ids = list(dict.fromkeys([c.id for c in (b.cases if b else [])] + [c.id for c in (h.cases if h else [])]))
        for case_id in ids:
            bc, hc = (b.case(case_id) if b else None), (h.case(case_id) if h else None)
            ref = bc or hc
            if sites and ref.site not in sites:
                continue
            rows.append(CaseTransition(probe=probe, case=case_id, site=ref.site, role=ref.role,
                                       base=state(bc), head=state(hc), transition=transition(bc, hc)))
    judged, reasons = verdict(rows, not_comparable)
    body = {
        "schema_version": DIFFERENTIAL_SCHEMA,
        "fix": fix,
        "title": title,
        "probes": probes,
        "base": [Side(receipt=name, receipt_digest=r.digest, source=r.source).model_dump(mode="json") for name, r in base],
        "head": [Side(receipt=name, receipt_digest=r.digest, source=r.source).model_dump(mode="json") for name, r in head],
        "cases": [r.model_dump(mode="json") for r in rows],
        "verdict": judged,
        "reasons": reasons,
        "expected": expected,
        "as_expected": None if expected is None else judged == expected,
        "sites": list(sites or []),
    }
    body["digest"] = seal(body)
    return Differential.model_validate(body)


def rederive(receipt: Receipt, probe_sha256: str | None) -> list[str]:
    """What in a receipt does not follow from its own effects: a classification or a duty the duty
    table does not give, or a coverage of the fix's code its cases' lines do not (for receipts of this
    diffprobe's probe version, ``probe_sha256``, and judge: another probe version names other duties, and another
    judge may derive otherwise, so only their consistency can be checked), a summary, an observation digest."""
    problems = []
    same_judge = receipt.environment.diffprobe_sha256 == judge()[0]
    if judging.case_ids(receipt.probe.id) and receipt.probe.sha256 == probe_sha256 and same_judge:
        for case in receipt.cases:
            if case.outcome == "observed":
                again = judging.rejudge(receipt.probe.id, case.model_copy(update={"duties": None}))
                if again.outcome != "observed" or again.duties != case.duties:
                    why = again.error.message if again.error else "its duties do not follow from its effects"
                    problems.append(f"case {case.id}: {why}")
    if receipt.fix_code is not None and same_judge and fixcode.judged(receipt.fix_code, receipt.cases) != receipt.fix_code:
        problems.append("the coverage of the fix's code does not follow from its cases' lines")
    if receipt.summary != _summary(receipt.cases):
        problems.append("summary does not count its cases")
    if receipt.observation_digest != observation_digest(receipt.probe.sha256, source_key(receipt.source), receipt.cases):
        problems.append("observation digest does not match its cases")
    return problems
