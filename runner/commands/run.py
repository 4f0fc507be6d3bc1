"""``diffprobe run``: reproduce the evidence bundle, base and head of each pinned fix, every witnessing probe."""

from __future__ import annotations

from runner import errors, fixids, ui
from runner.app import pipeline
from runner.commands import mutate, options
from runner.evidence import bundle, pins, receipts
from runner.evidence.records import DutyCheck, RunRecord
from runner.judge import duty_windows
from runner.files import sha256_file
from runner.sandbox import execute
from runner.store import envs, specs
from runner.views import verdict


def cmd_run(args) -> int:
    signers = options.signers(args)
    pins_path = options.path(args.pins) or pins.default_path()
    p = pins.load(pins_path)
    out = bundle.out_path(args.out, "run")
    numbers = args.fix or sorted((n for n, f in p.fixes.items() if args.via == "releases" or f.has_commits), key=fixids.order)
    fixes = {n: p.fix(n) for n in numbers}
    if args.via == "commits":
        bare = [fixids.label(n) for n, f in fixes.items() if not f.has_commits]
        if bare:
            raise errors.BadInput(f"{', '.join(bare)}: pinned by release bracket only, no PR commits; use --via releases")
    repo = specs.check_git_url(args.repo) if args.repo else p.upstream
    sides: dict[int, tuple[str, str]] = {}
    for n, fix in fixes.items():
        if args.via == "releases":
            sides[n] = (f"pypi:sglang=={fix.releases.without}", f"pypi:sglang=={fix.releases.with_}")
        else:  # PR heads of squash merges live only under refs/pull/N/head, which reaches the base too
            sides[n] = (specs.pull_request(repo, fix.base, n), specs.pull_request(repo, fix.head, n))
    opts = options.resolved(args, p, options.probe(args))
    started = execute.now()
    parts = [(n, d, f"pypi:sglang=={d.releases.without}", f"pypi:sglang=={d.releases.with_}")
             for n, fix in fixes.items() for d in fix.duties] if args.via == "releases" else []
    plan: dict[str, list[str]] = {}
    for n, fix in fixes.items():
        for text in (*sides[n], *(t for m, _, *texts in parts if m == n for t in texts)):
            plan.setdefault(text, []).extend(pr for pr in fix.probes if pr not in plan.get(text, []))
    _, got = pipeline.probe_sources(plan, opts)
    diffs = []
    for n, fix in fixes.items():
        base, head = sides[n]
        diffs.append(receipts.differential(
            n, fix.title, fix.probes,
            [(bundle.receipt_name(got[(base, pr)]), got[(base, pr)]) for pr in fix.probes],
            [(bundle.receipt_name(got[(head, pr)]), got[(head, pr)]) for pr in fix.probes],
            fix.expect, fix.sites,
        ))
    checks = [_check(n, d, without, with_, [[c for pr in fixes[n].probes for c in got[(text, pr)].cases]
                                            for text in (without, with_)]) for n, d, without, with_ in parts]
    files, scores = {}, []
    if args.mutate:  # the strength of each verdict's evidence, measured at the fix's head
        interp, torch = envs.interpreter(args.python), options.torch(args)
        files, scores = mutate.recorded(mutate.measure([(sides[n][1], n) for n in fixes], p, opts, interp, torch,
                                                       min(args.case_timeout, mutate.CASE_TIMEOUT)))
    out = bundle.write(
        out, kind="run", created_at=started, files=files,
        receipts=list({bundle.receipt_name(r): r for r in got.values()}.values()), differentials=diffs, pins_sha256=sha256_file(pins_path),
        extra=RunRecord(via=args.via, fixes=numbers, repo=repo if args.via == "commits" else None,
                        scores=scores if args.mutate else None, duties=checks or None).model_dump(mode="json", by_alias=True),
        signers=signers,
    )
    by_name = {bundle.receipt_name(r): r for r in got.values()}
    verdict.show([verdict.of_differential(d, by_name) for d in diffs], by_name.values(), verdict.read_more(out))
    for c in checks:
        verdict.show_duty_check(c)
    ui.out.print(f"bundle: {out}  (check with: diffprobe verify {out}  or  cd {out} && sha256sum -c {bundle.MANIFEST})")
    return errors.OK if all(d.as_expected for d in diffs) and all(c.as_pinned for c in checks) else errors.DIFFERS


def _check(fix: int, part: pins.DutyBracket, without: str, with_: str, cases: list[list]) -> DutyCheck:
    """A duty-level bracket against the cases its two releases showed (the judge decides)."""
    why = duty_windows.bracket(part.duties, part.cases, *cases)
    return DutyCheck(fix=fix, title=part.title, without=without, with_=with_, as_pinned=not why, why=why)


def register(sub) -> None:
    p = options.command(
        sub, "run", "each pinned fix changes behaviour from its base to its head",
        about="Probes base and head of every pinned fix (from the release brackets on PyPI, or the pinned commits) and writes one differential each.",
        example="diffprobe run --via releases --fix 38935",
        ok="every differential's verdict is the one pins.toml expects, and every duty-level bracket holds",
        differs="a verdict differs from the pin (each fix's line says which case decided it), or --repeat observed differently")
    p.add_argument("--via", choices=["releases", "commits"], default="releases",
                   help="trees from the release brackets on PyPI, or the pinned commits of a git repository")
    p.add_argument("--repo", metavar="URL|PATH", help="git repository for --via commits (default: the pinned upstream)")
    options.fixes(p, "only this fix (repeatable)", "--pr")
    options.out(p, "run")
    p.add_argument("--mutate", action="store_true",
                   help="also measure each fix's evidence at its head: mutation score (diffprobe mutate), in the bundle")
    options.probe_options(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_run)
