"""Command-line options shared by several commands, each declared once and read back typed."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from runner import errors, fixids
from runner.evidence import dsse
from runner.sandbox.execute import DEFAULT_CASE_TIMEOUT
from runner.store import gc, intake, specs, torch_source
from runner.app.notices import PRINTED
from runner.app.pipeline import Options, ProbeOptions, probes_of
from runner.evidence import pins
from runner.store.cache import GIT_DEADLINE, Store
from runner.store.torch_source import TorchSource


# What exit codes 2 and up mean is the same for every command (runner/errors.py).
EXIT_CODES = {
    errors.BAD_INPUT: "bad input: an argument, a source, the pins or a bundle path is wrong (one line says which)",
    errors.INFRASTRUCTURE: "the machine failed: network, pip, git, or a probe process that died",
    130: "interrupted (Ctrl-C; 143: SIGTERM): completed entries are kept, partial ones discarded",
}


# Each command's page in the documentation site (docs/), named at the end of its --help (gate's checks:
# accept's page, which explains them after accept); a command not listed points at its entry in the
# generated command reference.
DOCS = {"run": "reproduce.md", "audit": "audit.md", "review": "review.md", "drift": "drift.md", "backport": "backport.md",
        "accept": "accept.md", "gate": "accept.md", "pool": "accept.md", "canary": "accept.md",
        "latency": "accept.md", "sweep": "sweeps.md", "merge": "deployment.md", "report": "report.md",
        "compare": "report.md", "verify": "attestations.md", "attest": "attestations.md",
        "keygen": "attestations.md", "upstream-tests": "upstream-tests.md", "mutate": "fixed.md",
        "model": "model.md", "resolve": "sources.md", "env": "environments.md", "gc": "environments.md"}


def docs_page(name: str) -> str:
    return f"docs/{DOCS.get(name, f'commands.md#{name}')}"


def command(sub, name: str, proves: str, *, example: str, ok: str, differs: str | None = None,
            about: str | None = None, more: dict[int, str] | None = None) -> argparse.ArgumentParser:
    """A subcommand's parser. ``proves`` is its one line in ``diffprobe --help``; its own --help adds
    ``about`` (plain text, no markup), then one example, what each exit code means (``more``: its own)
    and the page of the documentation that explains it."""
    codes = {errors.OK: ok, **({errors.DIFFERS: differs} if differs else {}), **EXIT_CODES, **(more or {})}
    epilog = (f"example:\n  {example}\n\nexit codes:\n"
              + "\n".join(f"  {code:<4}{meaning}" for code, meaning in sorted(codes.items()))
              + f"\n\nmore: {docs_page(name)}")
    return sub.add_parser(name, help=proves, description=proves + (f"\n\n{about}" if about else ""), epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def out(p: argparse.ArgumentParser, kind: str) -> None:
    """--out: where the bundle goes (runner/evidence/bundle.out_path names the default)."""
    p.add_argument("--out", metavar="DIR",
                   help=f"bundle directory to create (must not exist or be empty; default ./diffprobe-{kind}-<UTC time>)")


def source(p: argparse.ArgumentParser, name: str = "source", *, what: str, **kw) -> None:
    """A source argument (``name``: positional, or an option like ``--head``): what it is for, then the one syntax."""
    p.add_argument(name, help=f"{what}; {specs.SYNTAX}", **{"metavar": "SOURCE", **kw})


def common(p: argparse.ArgumentParser) -> None:
    cache_dir(p)
    p.add_argument("--pins", metavar="FILE", help="pins.toml to use (default: the project's own)")
    intake_bounds(p)


def intake_bounds(p: argparse.ArgumentParser) -> None:
    """How much one tree may hold (runner/store/intake.py; README, "Threat model")."""
    d = intake.Bounds()
    g = p.add_argument_group("intake bounds", "a tree over any of these is refused before anything of it is copied")
    g.add_argument("--max-files", type=positive_int, default=d.files, metavar="N",
                   help=f"files and directories in one tree's package (default {d.files})")
    g.add_argument("--max-file-size", type=_size("--max-file-size"), default=d.file_size, metavar="SIZE",
                   help=f"apparent size of one file, e.g. 200M (default {d.file_size >> 20}M)")
    g.add_argument("--max-tree-size", type=_size("--max-tree-size"), default=d.total_size, metavar="SIZE",
                   help=f"apparent size of all files of one tree, e.g. 2G (default {d.total_size >> 20}M)")


def _size(option: str):
    def parse(text: str) -> int:
        try:
            return gc.parse_size(text, option)
        except errors.BadInput as e:
            raise argparse.ArgumentTypeError(e.message) from None
    return parse


def positive_int(text: str) -> int:
    """argparse type for counts and seconds: 0 or less would silently do nothing useful."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def resolved(args: argparse.Namespace, p: pins.Pins, probe: ProbeOptions = ProbeOptions()) -> Options:
    """The one options object of a command that probes trees, resolved at its entry: --cache-dir, its pins (and
    --fix), the intake bounds and its probe options. Nothing below a command reads the parsed arguments."""
    return Options(cache=store(args), probe=probe, package_dir=p.package_dir, pinned_sha256=p.pinned_sha256,
                   pinned_commits=p.pinned_commits, bounds=bounds(args), probes=probes_of(p, getattr(args, "fix", None)))


GIT_TIMEOUT = "DIFFPROBE_GIT_TIMEOUT"


def store(args: argparse.Namespace) -> Store:
    """The store a command works in: --cache-dir, its notices printed (runner/app/notices.py), and the seconds a
    git fetch may take from DIFFPROBE_GIT_TIMEOUT (read here, once)."""
    timeout = os.environ.get(GIT_TIMEOUT, "")
    if not timeout.isdigit() and timeout:
        raise errors.BadInput(f"{GIT_TIMEOUT}={timeout!r}: expected a number of seconds")
    return Store.at(args.cache_dir, notices=PRINTED, git_deadline=int(timeout or 0) or GIT_DEADLINE)


def bounds(args: argparse.Namespace) -> intake.Bounds:
    """The values of ``intake_bounds`` (the defaults where a command has none)."""
    d = intake.Bounds()
    return intake.Bounds(files=getattr(args, "max_files", d.files), file_size=getattr(args, "max_file_size", d.file_size),
                         total_size=getattr(args, "max_tree_size", d.total_size))


def cache_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", metavar="DIR", help="cache root (default: $DIFFPROBE_CACHE or ~/.cache/diffprobe)")


def env_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", metavar="EXE", help="interpreter for the probe environments (default: the running one)")
    p.add_argument("--torch-index", metavar="URL",
                   help=f"package index of CPU torch wheels for a new dependency layer (default: ${torch_source.ENV_INDEX}, "
                        f"else this machine's pip find-links, else {torch_source.DEFAULT_INDEX})")
    p.add_argument("--unsandboxed", action="store_true",
                   help="run the trees' code without bubblewrap (shown in red in receipts and reports); without it, a tree "
                        "that is not pinned is refused where bubblewrap cannot run")
    p.add_argument("--torch-wheel", metavar="PATH",
                   help=f"CPU torch wheel file for a new dependency layer, used offline (default: ${torch_source.ENV_WHEEL})")


def torch(args: argparse.Namespace) -> list[TorchSource]:
    """Where a new dependency layer gets CPU torch: ``env_options``, else DIFFPROBE_TORCH_WHEEL/INDEX
    (a bad one fails here, before any download)."""
    return torch_source.candidates(args.torch_wheel, args.torch_index, environ=os.environ)


def probe_of_env(args: argparse.Namespace) -> ProbeOptions:
    """The probe options a command with ``env_options`` only has: the interpreter, the sandbox, torch."""
    return ProbeOptions(python=args.python, torch=tuple(torch(args)), unsandboxed=args.unsandboxed)


def probe_options(p: argparse.ArgumentParser, *, parallel: str | None = "probe runs in parallel") -> None:
    """--python, -j (unless ``parallel`` is None: one tree), --case-timeout and --repeat."""
    env_options(p)
    if parallel:
        p.add_argument("-j", "--jobs", type=positive_int, default=None, metavar="N",
                       help=f"{parallel} (default: as many as the cores and memory allow; each tree's cases run "
                            "on the cores left to it)")
    else:
        p.set_defaults(jobs=1)
    p.add_argument("--case-timeout", type=positive_int, default=DEFAULT_CASE_TIMEOUT, metavar="S",
                   help=f"seconds before a probe case is killed (default {DEFAULT_CASE_TIMEOUT})")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                   help="run each tree's probes N times; exit 1 if any observation differs")
    p.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="probe every tree even when the receipts store holds its receipts (a new observation)")


def fix_id(text: str) -> int:
    """argparse type of every option naming a pinned fix: 38935 (or #38935) for an upstream pull request, L3
    (or 3) for a local id (runner/fixids.py: the one parser)."""
    try:
        return fixids.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def fixes(p: argparse.ArgumentParser, help: str = "only this fix's probes (repeatable; default: every pinned fix)",
          *also: str) -> None:
    """--fix N (and the names in ``also``): narrow a command to some of the pinned fixes (an unknown
    one is refused, exit 2). N is a PR number (38935) or a local id (L3)."""
    p.add_argument("--fix", *also, dest="fix", type=fix_id, action="append", metavar="N", help=help)


def probe(args: argparse.Namespace) -> ProbeOptions:
    """The values of ``probe_options``."""
    return ProbeOptions(python=args.python, jobs=args.jobs, case_timeout=args.case_timeout, repeat=args.repeat, reuse=args.reuse,
                        torch=tuple(torch(args)), unsandboxed=args.unsandboxed)


def baseline(p: argparse.ArgumentParser, *, reviewed: bool = False, ledger: bool = False) -> None:
    """--against and --strict: what each tree is compared with (runner/app/baseline.py), and
    whether a verdict resting on code that differs from it fails; ``ledger`` (sweep, backport):
    --reviews names the review ledger, "fixed on unreviewed code" exits 4 and --accept-unreviewed
    relaxes it (docs/review.md); ``reviewed`` (audit): that, and --strict is its old name."""
    source(p, "--against", what="compare each tree with this upstream source and show where it departs from it "
                                "(default: chosen from the tree's bytes: docs/review.md#which-baseline)")
    if not reviewed:
        p.add_argument("--strict", action="store_true",
                       help="exit 1 when a 'fixed' rests on code that differs from the baseline where the fix's cases ran")
    else:
        p.add_argument("--strict", action="store_true",
                       help="the default: a 'fixed' resting on changed code the probes can reach that no review accepted exits "
                            f"{errors.UNREVIEWED} (kept so that scripts passing it still work)")
    if reviewed or ledger:
        p.add_argument("--reviews", metavar="FILE",
                       help="the review ledger (diffprobe review writes it): changed places it accepts count as reviewed")
        accept_unreviewed(p)


def accept_unreviewed(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accept-unreviewed", action="store_true",
                   help="exit 0 for 'fixed on unreviewed code' too (it is still named on the screen and in the bundle)")


REQUEST_TIMEOUT = 600
COMMAND_DEADLINE = 3600


def http_deadlines(p: argparse.ArgumentParser, *, whole_command: bool) -> None:
    """--timeout for each whole HTTP request to a live server (connect, headers and body: a server
    that drips its answer cannot stretch it), and with ``whole_command`` --deadline for all of them."""
    p.add_argument("--timeout", type=positive_int, default=REQUEST_TIMEOUT, metavar="S",
                   help=f"seconds for each whole HTTP request, headers and body (default {REQUEST_TIMEOUT})")
    if whole_command:
        p.add_argument("--deadline", type=positive_int, default=COMMAND_DEADLINE, metavar="S",
                       help=f"seconds for the whole command; a worker still answering then fails it closed (default {COMMAND_DEADLINE})")


def signing(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sign", metavar="KEY",
                   help=f"sign the bundle's attestations with this Ed25519 private key (default: ${dsse.ENV_KEY})")


def signers(args: argparse.Namespace) -> list[dsse.Signer]:
    """The key of ``signing``, else of $DIFFPROBE_SIGNING_KEY; commands load it before any work, so a
    bad key fails in a second, not after the probes."""
    key = getattr(args, "sign", None) or os.environ.get(dsse.ENV_KEY)
    return [dsse.load_signer(Path(key))] if key else []


MAX_NONCE = 256


def nonce(p: argparse.ArgumentParser, help: str) -> None:
    """``--nonce``: a verifier's challenge, bound into the signed Statements (attest) or required of them (verify)."""
    p.add_argument("--nonce", metavar="NONCE", type=_nonce, help=help)


def _nonce(value: str) -> str:
    if not value or len(value) > MAX_NONCE or not value.isprintable():
        raise argparse.ArgumentTypeError(f"a nonce is 1 to {MAX_NONCE} printable characters")
    return value


def path(value: str | None) -> Path | None:
    return Path(value) if value else None
