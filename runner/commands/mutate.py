"""``diffprobe mutate``: how strong is the evidence that a tree is fixed? Mutants of each fix's code
(probes/mutation.py) run against the fix's cases inside the tree's sandbox; every mutant is judged
here, on the host, from the effects its cases recorded (evidence/judging.py)."""

from __future__ import annotations

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError
from rich.markup import escape
from rich.table import Table

from runner import errors, fixids, ui
from probes.duties import FIX_CODE
from runner.app import pipeline
from runner.commands import options
from runner.evidence import bundle, catalog, materials, mutation, pins
from runner.judge import conditions, judging
from runner.judge.observations import Case, ImportResult
from runner.evidence.records import MutationRecord
from runner.sandbox import execute
from runner.store import envs

# A mutant run costs the import once, then about a case's time per case until one kills it.
MUTATE_ALLOWANCE = 3600
CASE_TIMEOUT = 20  # seconds a case may run on one mutant (a hang counts as detected)
MUTATION_LIMITS = [
    "A mutation score measures the probes, not SGLang: the share of single-statement changes to the code a "
    "fix changed (on the lines its cases execute) that some case detects.",
    "A mutant detected proves that one change would not pass for fixed; a high score does not prove the "
    "tree correct, nor that no other change (two statements, other functions, other inputs) would pass.",
    "Equivalent mutants are those with identical byte-code or a stated reason; survivors are listed with "
    "what no case covers.",
]


class _Run(BaseModel):
    """What the harness writes with ``--mutate`` (raw case results; nothing of it is trusted as judged)."""

    model_config = ConfigDict(extra="forbid")
    schema_: str
    probe: str
    fix: int
    targets: list[dict]
    missing: list[str]
    operators: list[str]
    baseline: list[Case]
    mutants: list[dict]
    import_: ImportResult


def judge(source: str, tree_digest: str, raw: _Run, sites: list[str] | None = None,
          changed: dict[str, list[conditions.Condition]] | None = None, read=None) -> mutation.Mutation:
    """The report, judged here from the recorded effects: the cases unmutated first, then each mutant
    by the cases that held on them. ``sites``: the configurations the fix is pinned in, whose cases
    say whether the tree unmutated is fixed (a defence off by default is measured with its option on).
    ``changed``: each hunk's conditions (``changed_conditions``): a hunk every case held on reads "fixed" only
    when the cases that ran it saw each condition of its changed function both ways, as an audit would. ``read``: the
    stored tree's files, where a mutant no case told from the tree may be equivalent by a reason whose premise they
    show (``conditions.premised_equivalent``: a condition no server of the tree makes true)."""
    baseline = [judging.rejudge(raw.probe, c) for c in raw.baseline]
    held = {c.id for c in baseline if judging.state(c) == "clean"}
    mutants = []
    for m in raw.mutants:
        status, why = judging.mutant_status(raw.probe, m, held)
        if status in ("survived", "not covered") and m["operator"] != "hunk" and read is not None \
                and (premised := conditions.premised_equivalent(m, read)):
            status, why = "equivalent", premised
        unvaried = judging.unvaried(raw.probe, m, baseline) if status == "survived" and not why else ""
        reads = None
        by_site: dict[str, judging.Status] = {}
        if m["operator"] == "hunk" and status not in ("error", "equivalent"):
            ran = [Case.model_validate(c) for c in m.get("cases", [])]
            one_way = [said for c in conditions.judged((changed or {}).get(m["id"], []), ran) if (said := c.one_way())]
            # each configuration as an audit reads its site, the conditions the change wrote being the fix's (at_site)
            for site in dict.fromkeys(c.site for c in baseline):
                read_there, _ = judging.status_with(raw.probe, [c for c in baseline if c.site == site],
                                                    [c for c in m.get("cases", []) if c.get("site") == site])
                by_site[site] = judging.on_conditions(read_there, one_way)
            # the reading: over the configurations the fix is pinned in (the baseline status is theirs), else all
            pinned = [c for c in baseline if not sites or c.site in sites]
            reads, failed = judging.status_with(raw.probe, pinned, [c for c in m.get("cases", [])
                                                                     if not sites or c.get("site") in sites])
            why = "; ".join(failed) or why
            if reads == "fixed" and one_way:
                reads, why = judging.on_conditions(reads, one_way), "; ".join(one_way)
        mutants.append(mutation.Mutant(id=m["id"], function=m["function"], file=m["file"], line=m["line"],
                                       operator=m["operator"], before=m["before"], after=m["after"], status=status, why=why,
                                       reached_by=len(m.get("reached_by", [])), reads=reads, reads_by_site=by_site,
                                       unvaried=unvaried))
    cases = [mutation.BaselineCase(id=c.id, role=c.role, state=judging.state(c), site=c.site) for c in baseline]
    report = mutation.Mutation(source=source, tree_digest=tree_digest, probe=raw.probe,
                               probe_sha256=catalog.probe_digest(raw.probe), score=judging.score_of(raw.probe, raw.fix, [], []),
                               baseline=cases, targets=raw.targets, missing=raw.missing, mutants=mutants, sites=sites or [])
    return report.model_copy(update={"score": mutation.counted(report)})


def run_mutants(environment: envs.Env, probe: str, case_timeout: int, sandboxed: bool,
                hunks: list[dict] | None = None) -> _Run:
    """The harness with ``--mutate`` in the tree's sandbox (where the fail-closed rule allows none,
    outside it: ``pipeline.Options.sandboxed``), as ``execute.run_probes`` runs it; with ``hunks``, those
    changes are the mutants (each with the conditions of its changed function to record: ``changed_conditions``)."""
    args = ["--case-timeout", str(case_timeout), "--probe", probe, "--mutate", *execute.condition_args(environment),
            *(("--hunks", orjson.dumps(hunks).decode()) if hunks is not None else ())]
    with execute.harness(environment, args, timeout=MUTATE_ALLOWANCE, sandboxed=sandboxed) as (run, out):
        if run.code != 0:
            raise errors.Infrastructure(f"mutation run of {probe} failed in {environment.root.name}", detail=run.log_tail)
        raw = orjson.loads(execute.read_result(out / f"mutation-{probe}.json"))
    raw = {("schema_" if k == "schema" else "import_" if k == "import" else k): v for k, v in raw.items()}
    return _Run.model_validate(raw)


def measure(plan: list[tuple[str, int]], p: pins.Pins, opts: pipeline.Options, interp: envs.Interpreter,
            torch: list, case_timeout: int, hunks: mutation.Hunks | None = None) -> list[tuple[str, mutation.Mutation]]:
    """(bundle label of the tree, its mutation report) for each (source, fix) of ``plan``."""
    found = []
    for text, n in plan:
        tree = pipeline.resolve(text, opts)
        sandboxed = opts.sandboxed(tree)  # before anything of the tree is built or run
        if not sandboxed:
            ui.err.print(f"[bold red]unsandboxed:[/] {escape(text)} runs without bubblewrap, with your rights")
        environment = envs.env(tree, opts.cache, interp, torch)
        listed, sent = changed_conditions(n, hunks, materials.reader(tree.root)) if hunks is not None else ({}, None)
        for probe in p.fix(n).probes:
            ui.err.print(f"mutating {fixids.label(n)}'s code in {escape(text)} ({probe})...")
            raw = run_mutants(environment, probe, case_timeout, sandboxed, sent)
            if raw.import_.outcome != "ok":
                raise errors.Infrastructure(f"{text}: SGLang did not import ({raw.import_.error.message if raw.import_.error else ''})")
            found.append((bundle.label(tree.identity), judge(text, tree.identity.tree_digest, raw, p.fix(n).sites, listed,
                                                                    materials.reader(tree.root))))
    return found


def changed_conditions(fix: int, hunks: mutation.Hunks, read) -> tuple[dict[str, list[conditions.Condition]], list[dict]]:
    """Each change's conditions, read on the host from the stored tree with the change made (hunk id -> the host's
    list), and the hunks as the harness takes them, each with what to record of its changed function."""
    listed, sent = {}, []
    for hunk in hunks.root:
        names = FIX_CODE.get(fix, {}).get(hunk.function, ())
        listed[hunk.id], wanted = conditions.of_change(hunk.function, names, read, hunk.old, hunk.new, f"hunk {hunk.id}")
        sent.append({**hunk.model_dump(mode="json"), "conditions": wanted})
    return listed, sent


def read_hunks(path: str) -> mutation.Hunks:
    """The changes to try (``--hunks FILE``), checked against their model: bad input is one line, exit 2."""
    try:
        return mutation.Hunks.model_validate_json(options.path(path).read_bytes())
    except OSError as exc:
        raise errors.BadInput(f"--hunks {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise errors.BadInput(f"--hunks {path}: not a list of hunks (id, function, old, new): "
                              f"{exc.errors()[0]['msg']}") from None


def recorded(found: list[tuple[str, mutation.Mutation]]) -> tuple[dict[str, bytes], list[dict]]:
    """The bundle files (one report per tree and fix) and the scores for ``bundle.json``'s extra."""
    files = {mutation.file_name(label, m): orjson.dumps(m.model_dump(mode="json"), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
             for label, m in found}
    return files, [m.score.model_dump(mode="json") | {"source": m.source} for _, m in found]


def cmd_mutate(args) -> int:
    signers = options.signers(args)
    p = pins.load(options.path(args.pins))
    fixes = args.fix or sorted(p.fixes, key=fixids.order)
    plan = [(args.source or f"pypi:sglang=={p.fix(n).releases.with_}", n) for n in fixes]
    opts = options.resolved(args, p)
    target = bundle.out_path(args.out, "mutate")
    started = execute.now()
    hunks = read_hunks(args.hunks) if args.hunks else None
    found = measure(plan, p, opts, envs.interpreter(args.python), options.torch(args), args.case_timeout, hunks)
    files, scores = recorded(found)
    out = bundle.write(target, kind="mutation", created_at=started, receipts=[], differentials=[], pins_sha256=None,
                       files=files, limits=MUTATION_LIMITS, extra=MutationRecord(scores=scores).model_dump(mode="json"), signers=signers)
    reports = [m for _, m in found]
    show(reports)
    ui.out.print(f"bundle: {out}")
    return errors.OK if all(m.holds() for m in reports) else errors.DIFFERS


# The order mutants are listed in: what no case reaches first, then what no case noticed.
LISTED = ("not covered", "survived", "error", "equivalent")


def show(found: list[mutation.Mutation]) -> None:
    for m in found:
        ui.out.print(f"{fixids.label(m.score.fix)} in {escape(m.source)} (probe {m.probe}, baseline {m.score.baseline}): "
                     f"evidence strength: {m.score.strength()}; {m.score.not_covered} not covered, "
                     f"{m.score.survived} survived, {m.score.equivalent} equivalent, {m.score.error} error", markup=False)
        table = Table(title_justify="left")
        for col in ("status", "where", "mutant", "why"):
            table.add_column(col)
        for x in sorted((x for x in m.mutants if x.status != "killed" or x.reads),
                        key=lambda x: (LISTED.index(x.status) if x.status in LISTED else len(LISTED), x.file, x.line)):
            why = x.why or ("(no case runs this line)" if x.status == "not covered" else
                            f"(not explained: {x.unvaried})" if x.unvaried else "(not explained)")
            status = f"{x.id}: reads {x.reads}" if x.reads else x.status
            table.add_row(escape(status), escape(f"{x.file}:{x.line}"), escape(f"{x.operator}: {x.before} -> {x.after}"), escape(why))
        if table.row_count:
            ui.out.print(table)


def register(sub) -> None:
    p = options.command(
        sub, "mutate", "how strong a fix's evidence is: mutants its cases detect",
        about="Mutates each fix's code and counts how many mutants its cases detect: how strong the evidence that a tree is fixed is.",
        example="diffprobe mutate pypi:sglang==0.5.21 --fix 38935",
        ok="the evidence holds: the unmutated tree reads fixed and every surviving mutant is explained", differs="a score does not hold (named)")
    options.source(p, what="tree to mutate (default: each fix's pinned release with the fix)", nargs="?")
    options.fixes(p, "only this fix (repeatable)")
    p.add_argument("--hunks", metavar="FILE", help="try these changes of the fix's code instead of the operators' "
                   "mutants (JSON list of id, function, old, new): what the tree with each reads, from every case it reaches")
    options.out(p, "mutate")
    p.add_argument("--case-timeout", type=options.positive_int, default=CASE_TIMEOUT, metavar="S",
                   help=f"seconds a case may run on one mutant (default {CASE_TIMEOUT}; a hang counts as detected)")
    options.env_options(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_mutate)
