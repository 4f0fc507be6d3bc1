"""Does a backport carry the fix? Apply a PR's diff onto another tree, probe it, compare with head.

The patch is the PR's ``base..head`` diff of the package directory, taken from the git repository
(or ``--patch FILE``). It is applied to a private copy of the target tree: first as is, then by a
three-way merge of each file (``git merge-file`` with the PR's base as the common ancestor), after a
reverse check that detects a patch already applied. ``--applied`` skips all that and compares an
already backported tree with the head. The verdict is behavioural: on every case of the fix's
probes, the backported tree must end as head does (same outcome and classification).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from runner import errors, ui
from runner.commands import options, pipeline
from runner.evidence import bundle, judging, pins, receipts
from runner.sandbox import execute
from runner.store import sources, specs
from runner.files import digest_name, sha256_bytes
from runner.evidence.receipts import Receipt
from runner.evidence.records import Applied, BackportRecord, BackportRow


def _strip(patch: bytes) -> int:
    """-p level that maps the patch's paths onto ``sglang/...`` (upstream diffs are python/sglang/...)."""
    first = re.search(rb"^diff --git a/(\S+)", patch, re.MULTILINE)
    if not first:
        raise errors.BadInput("the patch holds no 'diff --git' entries")
    parts = first.group(1).decode(errors="replace").split("/")
    if specs.PACKAGE not in parts:
        raise errors.BadInput(f"the patch does not touch the {specs.PACKAGE} package ({first.group(1).decode(errors='replace')})")
    return parts.index(specs.PACKAGE) + 1


def _files(patch: bytes, strip: int) -> list[str]:
    """Every path the patch touches, old and new names alike (a rename touches both)."""
    names = [n for pair in re.findall(rb"^diff --git a/(\S+) b/(\S+)", patch, re.MULTILINE) for n in pair]
    return list(dict.fromkeys("/".join(n.decode(errors="replace").split("/")[strip - 1:]) for n in names))


def _git_apply(work: Path, patch: Path, strip: int, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", f"-p{strip}", "--whitespace=nowarn", *flags, str(patch)],
                          cwd=work, capture_output=True, text=True)


def _three_way(work: Path, files: list[str], base: Path, head: Path) -> list[str]:
    """Merge each file of the patch; return the files that conflict (empty: merged)."""
    conflicts = []
    for rel in files:
        ours, ancestor, theirs = work / rel, base / rel, head / rel
        if not theirs.exists():  # deleted by the PR
            if ours.exists() and ancestor.exists() and ours.read_bytes() == ancestor.read_bytes():
                ours.unlink()
            elif ours.exists():
                conflicts.append(rel)
            continue
        if not ours.exists() or not ancestor.exists():  # added by the PR, or absent from the target
            if ours.exists() and ours.read_bytes() != theirs.read_bytes():
                conflicts.append(rel)
            else:
                ours.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(theirs, ours)
            continue
        merged = subprocess.run(["git", "merge-file", "-p", str(ours), str(ancestor), str(theirs)], capture_output=True)
        if merged.returncode != 0:
            conflicts.append(rel)
        else:
            ours.write_bytes(merged.stdout)
    return conflicts


def apply(onto: sources.Tree, patch: bytes, work: Path, base: sources.Tree | None, head: sources.Tree | None) -> tuple[Applied, list[str]]:
    """Patch a copy of ``onto`` in ``work``; say how, or raise BadInput naming the conflicts."""
    shutil.copytree(onto.root / specs.PACKAGE, work / specs.PACKAGE, symlinks=True)
    strip = _strip(patch)
    files = _files(patch, strip)
    patch_file = work.parent / f"{work.name}.patch"
    patch_file.write_bytes(patch)
    try:
        if _git_apply(work, patch_file, strip, "--reverse", "--check").returncode == 0:
            return "already applied", files
        if _git_apply(work, patch_file, strip).returncode == 0:
            return "applied cleanly", files
        if base is None or head is None:
            detail = _git_apply(work, patch_file, strip, "--check").stderr.strip().splitlines()[:1]
            raise errors.BadInput(f"the patch does not apply ({'; '.join(detail)}); with --patch there is no "
                                  "base/head to merge three-way: pass --pr against a repository instead")
        conflicts = _three_way(work, files, base.root, head.root)
        if conflicts:
            shown = ", ".join(conflicts[:3]) + (f" and {len(conflicts) - 3} more" if len(conflicts) > 3 else "")
            raise errors.BadInput(f"the patch conflicts with {onto.identity.source}: {len(conflicts)} file(s) do not merge: {shown}")
        return "applied by three-way merge", files
    finally:
        patch_file.unlink(missing_ok=True)


def compare(fix_probes: list[str], mine: dict[str, Receipt], head: dict[str, Receipt]) -> list[BackportRow]:
    rows = []
    for probe in fix_probes:
        ids = list(dict.fromkeys([c.id for c in mine[probe].cases] + [c.id for c in head[probe].cases]))
        for case_id in ids:
            a, b = judging.state(mine[probe].case(case_id)), judging.state(head[probe].case(case_id))
            rows.append(BackportRow(probe=probe, case=case_id, backport=a, head=b, same=judging.conclusive(a) and a == b))
    return rows


def cmd_backport(args) -> int:
    signers = options.signers(args)
    p = pins.load(options.path(args.pins))
    fix = p.fix(args.pr)
    repo = specs.check_git_url(args.repo) if args.repo else p.upstream
    opts = pipeline.options(args, p, options.probe(args))
    out = bundle.out_path(args.out, f"backport-{args.pr}")
    started = execute.now()
    if not fix.has_commits and not (args.head and (args.patch or args.applied)):
        raise errors.BadInput(f"#{args.pr} is pinned by release bracket only (no PR commits): give --head and --patch "
                              "(or --applied)")
    head_text = args.head or f"git+{repo}@{fix.head}"
    head_spec = specs.parse(head_text)
    if isinstance(head_spec, specs.GitSpec) and head_spec.ref is None:  # the PR's head may live only under its ref
        head_text = specs.pull_request(head_spec.url, head_spec.rev, args.pr)
    onto = pipeline.resolve(args.onto, opts)
    head = pipeline.resolve(head_text, opts)
    patch_sha = None
    if args.applied:
        how, files, target_text = "taken as applied", [], args.onto
    else:
        base = None
        if args.patch:
            try:
                patch = Path(args.patch).read_bytes()
            except OSError as e:
                raise errors.BadInput(f"--patch {args.patch}: {e.strerror}") from None
        else:
            base = pipeline.resolve(f"git+{repo}@{fix.base}", opts)
            if head.identity.kind != "git":
                raise errors.BadInput("--head must be a git source of the same repository unless --patch is given")
            patch = sources.diff(repo, base.identity.commit, head.identity.commit, p.package_dir, opts.cache)
        patch_sha = sha256_bytes(patch)
        work = opts.cache.backport(f"{args.pr}-{patch_sha[:12]}-{digest_name(onto.identity.tree_digest)[:12]}")
        shutil.rmtree(work, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=work.parent) as scratch:
            how, files = apply(onto, patch, Path(scratch) / "tree", base, head if not args.patch else None)
            shutil.move(str(Path(scratch) / "tree"), work)
        target_text = f"path:{work}"
    plan = {target_text: fix.probes, head_text: fix.probes}
    if not args.applied and how != "already applied":
        plan = {args.onto: fix.probes, **plan}
    _, got = pipeline.probe_sources(plan, opts)
    mine = {pr: got[(target_text, pr)] for pr in fix.probes}
    theirs = {pr: got[(head_text, pr)] for pr in fix.probes}
    rows = compare(fix.probes, mine, theirs)
    record = BackportRecord(pr=args.pr, onto=args.onto, head=head_text, patch_sha256=patch_sha, applied=how,
                            files=files, rows=rows, behaves_like_head=all(r.same for r in rows))
    diffs = []
    if args.onto in plan and target_text != args.onto:
        before = [(bundle.receipt_name(got[(args.onto, pr)]), got[(args.onto, pr)]) for pr in fix.probes]
        after = [(bundle.receipt_name(mine[pr]), mine[pr]) for pr in fix.probes]
        diffs.append(receipts.differential(args.pr, f"{fix.title} (backport onto {args.onto})", fix.probes, before, after,
                                           None, fix.sites))
    out = bundle.write(out, kind="backport", created_at=started, receipts=list({bundle.receipt_name(r): r for r in got.values()}.values()),
                       differentials=diffs, pins_sha256=None, extra=record.model_dump(mode="json"),
                       signers=signers)
    _print(record)
    ui.out.print(f"bundle: {out}")
    return errors.OK if record.behaves_like_head else errors.DIFFERS


def _print(record: BackportRecord) -> None:
    ui.out.print(f"#{record.pr} onto {escape(record.onto)}: {record.applied}"
                 + (f" ({len(record.files)} files, patch sha256 {record.patch_sha256[:16]}…)" if record.patch_sha256 else ""))
    table = Table("probe", "case", "backport", "head", "same", title=f"backport vs head ({escape(record.head)})", title_justify="left")
    for r in record.rows:
        table.add_row(r.probe, escape(r.case), r.backport, r.head, "[green]yes[/]" if r.same else "[red]NO[/]")
    ui.out.print(table)
    verdict = "[green]behaves like head on every case[/]" if record.behaves_like_head else "[red]does not behave like head[/]"
    ui.out.print(f"verdict: {verdict}")


def register(sub) -> None:
    p = sub.add_parser("backport", help="apply a PR onto another tree, probe it, and compare with the PR's head")
    p.add_argument("--pr", type=int, required=True, metavar="N")
    p.add_argument("--onto", required=True, metavar="SOURCE", help="the tree to backport onto (or, with --applied, the backport)")
    p.add_argument("--repo", metavar="URL|PATH", help="repository holding the PR (default: the pinned upstream)")
    p.add_argument("--patch", metavar="FILE", help="apply this patch instead of the PR's base..head diff")
    p.add_argument("--applied", action="store_true", help="--onto already carries the backport: only compare with head")
    p.add_argument("--head", metavar="SOURCE", help="what to compare with (default: the PR's pinned head commit)")
    p.add_argument("--out", metavar="DIR")
    options.probe_options(p)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_backport)
