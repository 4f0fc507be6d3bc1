"""Does a backport carry the fix? Apply a PR's diff onto another tree, probe it, compare with head.

The patch is the PR's ``base..head`` diff of the package directory, taken from the git repository
(or ``--patch FILE``). It is applied to a private copy of the target tree: first as is, then by a
three-way merge of each file (``git merge-file`` with the PR's base as the common ancestor), after a
reverse check that detects a patch already applied. ``--applied`` skips all that and compares an
already backported tree with the head. The verdict is behavioural: on every case of the fix's
probes, the backported tree must end as head does (the same bug or clean; a case both trees lack
the API for is not applicable on both, which is alike), and at least one case must be observed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from rich.markup import escape

from runner import errors, fixids, ui
from runner.app import baseline, pipeline
from runner.commands import options
from runner.views import status, verdict
from runner.evidence import bundle, departures, pins, receipts, reviews
from runner.judge import judging
from runner.sandbox import execute
from runner.store import intake, mirrors, sources, specs
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
    """Every path the patch touches, old and new names alike (a rename touches both); each must be a
    plain path inside the package (runner/store/intake.check_name), or the patch is refused."""
    names = [n for pair in re.findall(rb"^diff --git a/(\S+) b/(\S+)", patch, re.MULTILINE) for n in pair]
    paths = list(dict.fromkeys(b"/".join(n.split(b"/")[strip - 1:]) for n in names))
    return [intake.check_name(p, "the patch") for p in paths]


def _git(args: list[str], work: Path, **kw) -> subprocess.CompletedProcess:
    """git outside any repository above ``work`` (a cache inside a checkout would make ``git apply``
    take paths from that checkout's top and skip those outside ``work``)."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(work.parent), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    try:  # no terminal, a deadline, no configuration but git's defaults (as every git process: runner/store/mirrors.py)
        return subprocess.run(["git", *args], cwd=work, capture_output=True, env=env, stdin=subprocess.DEVNULL,
                              timeout=mirrors.LOCAL_DEADLINE, **kw)
    except subprocess.TimeoutExpired:
        raise errors.Infrastructure(f"git {args[0]} did not finish within {mirrors.LOCAL_DEADLINE} s") from None


def _git_apply(work: Path, patch: Path, strip: int, *flags: str) -> subprocess.CompletedProcess:
    return _git(["apply", f"-p{strip}", "--whitespace=nowarn", *flags, str(patch)], work, text=True)


def _dir_fd(root: Path, parts: list[str], create: bool) -> int:
    """A descriptor of ``root/parts...``, each part opened ``O_NOFOLLOW`` (created if asked): a
    link on the way is an error, never a way out of ``root``."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            parent, fd = fd, -1
            try:
                fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            finally:
                os.close(parent)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd


def _write_inside(root: Path, rel: str, data: bytes) -> None:
    """Write ``root/rel`` as a new file renamed into place: nothing is written through a link or
    into a file that has other names."""
    *parts, name = rel.split("/")
    fd = _dir_fd(root, parts, create=True)
    try:
        tmp = f".{name}.{os.getpid()}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
        with open(out, "wb") as f:
            f.write(data)
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def _unlink_inside(root: Path, rel: str) -> None:
    *parts, name = rel.split("/")
    fd = _dir_fd(root, parts, create=False)
    try:
        os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _three_way(work: Path, files: list[str], onto: sources.Tree, base: sources.Tree, head: sources.Tree) -> list[str]:
    """Merge each file of the patch into ``work`` (a copy of ``onto`` the patch left untouched);
    return the files that conflict (empty: merged). Every file read is a verified file of a stored
    tree; every write stays inside ``work``."""
    have = {t: set(t.files) for t in (onto, base, head)}
    conflicts = []
    for rel in files:
        ours, ancestor, theirs = (onto.root / rel if rel in have[onto] else None, base.root / rel if rel in have[base] else None,
                                  head.root / rel if rel in have[head] else None)
        if theirs is None:  # deleted by the PR
            if ours and ancestor and ours.read_bytes() == ancestor.read_bytes():
                _unlink_inside(work, rel)
            elif ours:
                conflicts.append(rel)
            continue
        if ours is None or ancestor is None:  # added by the PR, or absent from the target
            if ours and ours.read_bytes() != theirs.read_bytes():
                conflicts.append(rel)
            else:
                _write_inside(work, rel, theirs.read_bytes())
            continue
        merged = _git(["merge-file", "-p", str(ours), str(ancestor), str(theirs)], work)
        if merged.returncode != 0:
            conflicts.append(rel)
        else:
            _write_inside(work, rel, merged.stdout)
    return conflicts


def apply(onto: sources.Tree, patch: bytes, work: Path, base: sources.Tree | None, head: sources.Tree | None) -> tuple[Applied, list[str]]:
    """Patch a copy of ``onto`` in ``work``; say how, or raise BadInput naming the conflicts.

    The copy holds exactly the stored tree's verified files; whatever the patch makes of it (a link
    git created, say) is taken in again through intake when it is probed, and refused there."""
    work.mkdir(parents=True)
    for rel in onto.files:
        _write_inside(work, rel, (onto.root / rel).read_bytes())
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
        conflicts = _three_way(work, files, onto, base, head)
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
            rows.append(BackportRow(probe=probe, case=case_id, backport=a, head=b, same=judging.alike(a, b)))
    return rows


def behaves_like_head(rows: list[BackportRow]) -> bool:
    """Alike on every case, and at least one case observed: cases neither tree could run prove nothing."""
    return all(r.same for r in rows) and any(judging.conclusive(r.head) for r in rows)


PATCH_FORMAT = f"""\
The patch (--patch FILE): the output of git diff or git format-patch (unified diff with "diff --git"
headers). Its paths may start at the repository (python/{specs.PACKAGE}/srt/...) or at the package
({specs.PACKAGE}/srt/...): everything before the first "{specs.PACKAGE}/" is stripped. It is applied as is;
with --pr against a repository (no --patch), a patch that does not apply is merged three-way with the
PR's base. Offline: --patch FILE and --head SOURCE (a release in the cache or a path:DIR)."""


def _reach(text: str, opts: pipeline.Options, offline: str | None) -> sources.Tree:
    """Resolve a tree the user did not name (the PR's commits in its repository): when it is out of
    reach, the one line says what to give instead."""
    try:
        return pipeline.resolve(text, opts)
    except errors.DiffprobeError as e:
        if offline is None or e.exit_code != errors.INFRASTRUCTURE:
            raise
        raise errors.Infrastructure(f"{e.message}; {offline}") from None


def cmd_backport(args) -> int:
    signers = options.signers(args)
    baseline.check_against(args.against)
    p = pins.load(options.path(args.pins))
    ledger = reviews.load(options.path(args.reviews))
    fix = p.fix(args.pr)
    repo = specs.check_git_url(args.repo) if args.repo else p.upstream
    opts = options.resolved(args, p, options.probe(args))
    out = bundle.out_path(args.out, f"backport-{args.pr}")
    started = execute.now()
    if not fix.has_commits and not (args.head and (args.patch or args.applied)):
        raise errors.BadInput(f"{fixids.label(args.pr)} is pinned by release bracket only (no PR commits): give --head and --patch "
                              "(or --applied)")
    head_text = args.head or f"git+{repo}@{fix.head}"
    head_spec = specs.parse(head_text)
    if isinstance(head_spec, specs.GitSpec) and head_spec.ref is None:  # the PR's head may live only under its ref
        head_text = specs.pull_request(head_spec.url, head_spec.rev, args.pr)
    head = _reach(head_text, opts, None if args.head else
                  "offline, give --head SOURCE (a release or path:DIR carrying the fix)" + ("" if args.patch else
                                                                                            " and --patch FILE"))
    onto = pipeline.resolve(args.onto, opts)
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
            base = _reach(f"git+{repo}@{fix.base}", opts, "offline, give --patch FILE (the PR's diff) and --head SOURCE")
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
    trees, got = pipeline.probe_sources(plan, opts)
    mine = {pr: got[(target_text, pr)] for pr in fix.probes}
    theirs = {pr: got[(head_text, pr)] for pr in fix.probes}
    rows = compare(fix.probes, mine, theirs)
    departed = baseline.departures_of(target_text, trees[target_text], baseline.of(trees[target_text], args.against, opts, target_text),
                                      list(mine.values()))
    baseline.say(departed)
    same = behaves_like_head(rows)
    judged = [judging.FixStatus(fix=args.pr, status="fixed" if same else "not fixed", sites=[])]
    [rests] = departures.judged(judged, departed, list(mine.values()))
    unreviewed, rejected, accepted = reviews.standing(departed, ledger)
    record = BackportRecord(pr=args.pr, onto=args.onto, head=head_text, patch_sha256=patch_sha, applied=how,
                            files=files, rows=rows, behaves_like_head=same, departures=departed.line(), rests_on=rests.departed,
                            unreviewed=[reviews.named(h) for h in unreviewed], rejected=[reviews.named(h) for h in rejected],
                            reviewed=len(accepted), on_unreviewed=bool(reviews.resting(judged, departed, unreviewed, rejected)))
    diffs = []
    if args.onto in plan and target_text != args.onto:
        before = [(bundle.receipt_name(got[(args.onto, pr)]), got[(args.onto, pr)]) for pr in fix.probes]
        after = [(bundle.receipt_name(mine[pr]), mine[pr]) for pr in fix.probes]
        diffs.append(receipts.differential(args.pr, f"{fix.title} (backport onto {args.onto})", fix.probes, before, after,
                                           None, fix.sites))
    out = bundle.write(out, kind="backport", created_at=started, receipts=list({bundle.receipt_name(r): r for r in got.values()}.values()),
                       differentials=diffs, pins_sha256=None, extra=record.model_dump(mode="json"),
                       files={departures.file_name(bundle.label(trees[target_text].identity)): bundle.dump(departed)},
                       signers=signers)
    _print(record, mine, diffs, {bundle.receipt_name(r): r for r in got.values()}, out)
    if record.on_unreviewed:
        status.print_unreviewed(f"{fixids.label(record.pr)} backport {record.onto}", record, out, args.reviews)
    ui.out.print(f"bundle: {out}")
    if not record.behaves_like_head or (args.strict and record.rests_on):
        return errors.DIFFERS
    return errors.UNREVIEWED if record.on_unreviewed and not args.accept_unreviewed else errors.OK


def _print(record: BackportRecord, mine: dict[str, Receipt], diffs: list, receipts: dict[str, Receipt], out) -> None:
    """The verdict screen: backport against head, then the tree before the patch against it (what the patch changed)."""
    ui.out.print(f"{fixids.label(record.pr)} onto {escape(record.onto)}: {record.applied}"
                 + (f" ({len(record.files)} files, patch sha256 {record.patch_sha256[:16]}…)" if record.patch_sha256 else "")
                 + f"; compared with {escape(record.head)}")
    cases = {c.id: c for r in mine.values() for c in r.cases}
    lines = [verdict.of_backport(record, cases)]
    lines += [verdict.of_differential(d, receipts, what="before vs after the patch:") for d in diffs]
    verdict.show(lines, receipts.values())
    if record.rests_on:
        fs = judging.FixStatus(fix=record.pr, status="fixed", sites=[], departed=record.rests_on)
        ui.out.print(f"  [yellow]{escape(judging.shown(fs).removeprefix('fixed, '))}[/]")
        for place in record.rests_on.places:
            ui.out.print(f"  ran: {escape(place)}")
        for place in record.rests_on.aware:
            ui.out.print(f"  [bold red]can tell it is being probed:[/] {escape(place)}")
    ui.out.print(verdict.read_more(out), style="dim", markup=False)


def register(sub) -> None:
    p = options.command(
        sub, "backport", "a backport behaves like the PR's head on every case",
        about=PATCH_FORMAT,
        example="diffprobe backport --pr 38935 --onto pypi:sglang==0.5.20 --patch 38935.diff --head pypi:sglang==0.5.21",
        ok="the backport behaves like head on every case (and at least one case was observed)",
        differs="it does not (each differing case and the duty it failed are named), or --strict refused it",
        more={errors.UNREVIEWED: "it behaves like head on unreviewed code: reachable changed places (the patch's among them) "
                                 "no review accepted, each named (--accept-unreviewed: exit 0)"})
    p.add_argument("--pr", type=options.fix_id, required=True, metavar="N", help="the pinned fix (pull request number) to backport")
    options.source(p, "--onto", what="the tree to backport onto (or, with --applied, the backport itself)", required=True)
    p.add_argument("--repo", metavar="URL|PATH", help="repository holding the PR (default: the pinned upstream; "
                   "not needed with --patch and --head)")
    p.add_argument("--patch", metavar="FILE", help="apply this patch instead of the PR's base..head diff (format below)")
    p.add_argument("--applied", action="store_true", help="--onto already carries the backport: only compare with head")
    options.source(p, "--head", what="what to compare with (default: the PR's pinned head commit, which needs the "
                                     "repository; offline, give a release or a directory)")
    options.out(p, "backport-N")
    options.probe_options(p)
    options.baseline(p, ledger=True)
    options.common(p)
    options.signing(p)
    p.set_defaults(func=cmd_backport)
