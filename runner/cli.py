"""The diffprobe command: which SGLang fixes a tree carries, judged from behaviour observed on CPU.
Each command composes the same pipeline with other inputs."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import traceback
from typing import NoReturn

from runner import __version__, errors, ui
from runner.store import specs
from runner.commands import (
    accept, attest, audit, backport, compare, drift, env, gate, gc, keygen, merge, model, mutate, report, resolve, review,
    run, sweep, upstream_tests, verify,
)

# One module per command, each with ``register(subparsers)``; the order is the order of ``--help``.
COMMANDS = [resolve, env, run, verify, compare, model, gate, report, audit, review, drift, sweep, merge, upstream_tests,
            backport, accept, mutate, gc, keygen, attest]


class _Parser(argparse.ArgumentParser):
    """A usage mistake is bad input like any other: one line and exit 2, not a usage block.
    Subcommand parsers are made of this class too (argparse uses the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(errors.BAD_INPUT, f"diffprobe: error: {self.prog}: {errors.one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="diffprobe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=f"a SOURCE is {specs.SYNTAX}\nevery command: diffprobe COMMAND --help "
                            "(its arguments, an example, its exit codes and its page in docs/)\n"
                            "reading a verdict: docs/reading-a-verdict.md; every page: docs/index.md")
    parser.add_argument("--version", action="version", version=f"diffprobe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM takes the same way out as Ctrl-C: probe groups killed, partial entries removed."""

    signum = signal.SIGTERM


def _terminate(signum: int, frame) -> NoReturn:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.func(args)
    except errors.DiffprobeError as e:
        ui.err.print(f"diffprobe: error: {e.message}", markup=False)
        if e.detail:  # only infrastructure failures carry detail: the tail of what failed, indented
            ui.err.print("\n".join(f"    {line}" for line in e.detail.splitlines()), markup=False, style="dim")
        return e.exit_code
    except KeyboardInterrupt as e:
        ui.err.print("diffprobe: interrupted; completed entries are kept, partial ones were discarded", markup=False)
        return 128 + getattr(e, "signum", signal.SIGINT)
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            return _internal(e)
        ui.err.print(f"diffprobe: error: a path is too long for this system: {errors.one_line(str(e.filename), 120)}", markup=False)
        return errors.BAD_INPUT
    except Exception as e:  # a bug of ours: still one line, the traceback only on request
        return _internal(e)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _internal(e: Exception) -> int:
    if os.environ.get("DIFFPROBE_DEBUG"):
        traceback.print_exc()
    ui.err.print(f"diffprobe: internal error: {type(e).__name__}: {errors.one_line(str(e))} (set DIFFPROBE_DEBUG=1 for a traceback)",
                 markup=False)
    return errors.INFRASTRUCTURE


if __name__ == "__main__":
    sys.exit(main())
