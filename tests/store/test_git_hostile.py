"""A local repository is its author's bytes: git must not act on them before diffprobe checked them
(runner/store/gitdir.py), and no configuration but the repository's own (checked) reaches git.

The payloads of issue 37 (each hung diffprobe or sent a host credential away): a configuration
including ``/dev/stdin``; ``objects/info/alternates`` or ``packed-refs`` as a FIFO; a configuration
including another repository's, whose remote URL holds a token, set as the promisor. Each ends with
exit 2 and one line within 10 s, reads nothing outside, contacts no URL the user did not name,
prints no secret. Then generated ones: any of git's metadata files replaced by a FIFO, a link or an
oversized file, and configurations that would run a command.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runner.commands import options
from runner.errors import BAD_INPUT, DiffprobeError, printable, redact
from runner.store import sources, specs
from runner.store.cache import Store
from tests import gitrepo
from tests.commands.test_bad_input import ROOT, assert_one_error
from tests.gitrepo import Step, git

PKG = "python/sglang"
FILES = {f"{PKG}/__init__.py": b"V = 1\n", f"{PKG}/srt/a.py": b"A = 1\n", "docs/big.bin": b"x" * 4096}
SECRET = "ghp_SECRETTOKEN0123456789"
BOUND = 10  # seconds: the bound on any hostile repository


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "fork"
    gitrepo.build(path, [Step("one", files=FILES, tag="v1")])
    return path


@pytest.fixture
def listener():
    """A TCP port on this machine that records whether anything connected to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)

    def contacted() -> bool:
        try:
            server.accept()[0].close()
            return True
        except BlockingIOError:
            return False

    yield server.getsockname()[1], contacted
    server.close()


def _cli(repo: Path, tmp_path: Path, rev: str = "v1", **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """``diffprobe resolve`` with a terminal that never answers (stdin an open pipe nobody writes)."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "resolve", f"git+{repo}@{rev}", "--cache-dir", str(tmp_path / "cache")],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "80", **env})
    try:
        out, err = proc.communicate(timeout=BOUND * 3)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - start


def _refused(repo: Path, tmp_path: Path, culprit: str, **env: str) -> str:
    proc, took = _cli(repo, tmp_path, **env)
    assert_one_error(proc, BAD_INPUT, culprit)
    assert took < BOUND, f"{took:.1f} s"
    assert SECRET not in proc.stdout + proc.stderr
    return proc.stderr


def test_a_configuration_including_dev_stdin_is_refused_before_git_reads_it(repo, tmp_path):
    git(repo, "config", "include.path", "/dev/stdin")
    _refused(repo, tmp_path, r"\.git/config'.*includes other configuration files")


def test_alternates_that_is_a_fifo_is_refused_before_git_opens_it(repo, tmp_path):
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(alternates)
    _refused(repo, tmp_path, r"objects/info/alternates'.*it is a FIFO")


def test_packed_refs_that_is_a_fifo_is_refused_before_git_opens_it(repo, tmp_path):
    git(repo, "pack-refs", "--all")
    (repo / ".git" / "packed-refs").unlink()
    os.mkfifo(repo / ".git" / "packed-refs")
    _refused(repo, tmp_path, r"packed-refs'.*it is a FIFO")


def test_another_repositorys_token_is_never_read_printed_or_sent(repo, tmp_path, listener):
    """The fork's configuration includes the configuration of a repository of the auditor's, whose
    remote URL holds a token, and makes that remote its promisor: refused for the include, before
    git reads either file."""
    port, contacted = listener
    private = tmp_path / "private"
    gitrepo.build(private, [Step("p", files={"x": b"x"})])
    git(private, "config", "remote.origin.url", f"https://auditor:{SECRET}@127.0.0.1:{port}/private.git")
    snapshot = tmp_path / "snapshot.git"  # the fork without the package's blobs: they would be fetched
    gitrepo.snapshot(repo, snapshot, set())
    for key, value in [("include.path", str(private / ".git" / "config")), ("extensions.partialClone", "origin"),
                       ("remote.origin.promisor", "true"), ("core.repositoryformatversion", "1")]:
        git(snapshot, "config", key, value)
    _refused(snapshot, tmp_path, "includes other configuration files")
    assert not contacted()


def test_a_promisor_the_user_did_not_name_is_never_contacted_and_its_token_never_printed(repo, tmp_path, listener):
    port, contacted = listener
    snapshot = tmp_path / "snapshot.git"
    gitrepo.snapshot(repo, snapshot, set())
    for key, value in [("remote.origin.url", f"https://auditor:{SECRET}@127.0.0.1:{port}/private.git"),
                       ("extensions.partialClone", "origin"), ("remote.origin.promisor", "true"),
                       ("core.repositoryformatversion", "1")]:
        git(snapshot, "config", key, value)
    err = _refused(snapshot, tmp_path, r"its promisor remote https://\*\*\*@127\.0\.0\.1:\d+/private\.git is not one you named")
    assert "DIFFPROBE_GIT_PROMISORS" in err
    assert not contacted()


def test_user_info_is_redacted_wherever_a_url_is_shown():
    line = f"git source https://me:{SECRET}@host/r.git: fetch from ssh://git@host/x failed"
    assert redact(line) == "git source https://***@host/r.git: fetch from ssh://***@host/x failed"
    assert SECRET not in printable(line) and SECRET not in DiffprobeError(line).message
    assert SECRET not in sources.TreeIdentity(kind="git", source=f"git+https://me:{SECRET}@h/r@v1", repo=f"https://me:{SECRET}@h/r",
                                              tree_digest="h1:x", files=1).model_dump_json()


# --- generated: git's metadata files replaced, configurations that would run a command --------

METADATA = ["config", "HEAD", "packed-refs", "refs/heads/main", "refs/tags/v1", "objects/info/alternates", "shallow",
            "info/grafts", "FETCH_HEAD", "logs/HEAD", "description", "hooks/post-checkout", "config.worktree", "commondir"]


def _replace(git_dir: Path, name: str, how: str, host: Path) -> None:
    path = git_dir / name
    if path.is_dir() and not path.is_symlink():
        return
    data = path.read_bytes() if path.is_file() else b""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "link-to-host":
        os.symlink(host, path)
    elif how == "link-to-stdin":
        os.symlink("/dev/stdin", path)
    elif how == "huge":
        with open(path, "wb") as f:
            f.write(data)
            f.truncate(1 << 31)  # sparse: 2 GiB that git would read whole
    else:  # an include, as the last line of whatever the file was
        path.write_bytes(data + f"\n[{how}]\n\tpath = {host}\n".encode())


@contextmanager
def _bounded(seconds: int):
    def hang(*_):
        raise TimeoutError(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(METADATA),
                          st.sampled_from(["fifo", "link-to-host", "link-to-stdin", "huge", "include", "includeIf \"gitdir:/\"",
                                           " Include "])), min_size=1, max_size=2, unique_by=lambda t: t[0]))
def test_any_metadata_file_replaced_ends_in_one_line_within_the_bound(tmp_path_factory, changes):
    tmp = tmp_path_factory.mktemp("meta")
    fork = tmp / "fork"
    gitrepo.build(fork, [Step("one", files=FILES, tag="v1")])
    host = tmp / "host-secret"
    host.write_text(f"[remote \"origin\"]\n\turl = https://x:{SECRET}@127.0.0.1:9/\n")
    for name, how in changes:
        _replace(fork / ".git", name, how, host)
    try:
        with _bounded(BOUND):
            tree = sources.resolve(specs.parse(f"git+{fork}@v1"), Store.at(tmp / "cache"))
    except DiffprobeError as e:
        assert e.exit_code == BAD_INPUT and "\n" not in e.message and SECRET not in e.message, e.message
        event("refused")
        return
    event("taken in")
    assert (tree.root / "sglang" / "srt" / "a.py").read_bytes() == b"A = 1\n"


HOOKS = ["core.fsmonitor", "core.sshCommand", "diff.external", "filter.x.smudge", "filter.x.clean", "core.pager",
         "credential.helper", "core.askPass", "uploadpack.packObjectsHook", "core.hooksPath", "alias.cat-file", "gpg.program",
         "core.editor", "sequence.editor", "protocol.allow", "url.file:///dev/.insteadOf", "core.alternateRefsCommand"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(HOOKS), min_size=1, max_size=4, unique=True))
def test_a_configuration_that_would_run_a_command_runs_nothing(tmp_path_factory, keys):
    """The contained hook-style payloads, kept as regression: whatever the repository's own
    configuration says to run, reading a commit runs nothing of it."""
    tmp = tmp_path_factory.mktemp("hooks")
    fork = tmp / "fork"
    gitrepo.build(fork, [Step("one", files=FILES, tag="v1")])
    marker = tmp / "ran"
    command = f"touch {marker}; false"
    for key in keys:
        value = "always" if key == "protocol.allow" else f"!{command}" if key.startswith("alias.") else \
            str(tmp / "hooks-dir") if key == "core.hooksPath" else command
        git(fork, "config", key, value)
    (tmp / "hooks-dir").mkdir()
    for hook in ("post-checkout", "reference-transaction", "pre-auto-gc", "post-index-change"):
        (tmp / "hooks-dir" / hook).write_text(f"#!/bin/sh\n{command}\n")
        (tmp / "hooks-dir" / hook).chmod(0o755)
    try:
        with _bounded(BOUND):
            sources.resolve(specs.parse(f"git+{fork}@v1"), Store.at(tmp / "cache"))
    except DiffprobeError as e:
        assert e.exit_code == BAD_INPUT and "\n" not in e.message
    assert not marker.exists()


def test_a_remote_that_never_answers_is_cut_at_the_deadline_in_one_line(tmp_path, listener, monkeypatch):
    """Every git process has a deadline: a clone from a server that accepts and then says nothing. The deadline is
    DIFFPROBE_GIT_TIMEOUT, read where the command makes its store (options.store)."""
    port, contacted = listener
    monkeypatch.setenv("DIFFPROBE_GIT_TIMEOUT", "2")
    store = options.store(argparse.Namespace(cache_dir=str(tmp_path / "cache")))
    start = time.monotonic()
    with pytest.raises(DiffprobeError, match=r"cannot clone: killed after 2 s \(DIFFPROBE_GIT_TIMEOUT raises it\)") as e:
        sources.resolve(specs.parse(f"git+http://me:{SECRET}@127.0.0.1:{port}/silent.git@main"), store)
    assert time.monotonic() - start < BOUND and contacted()  # the URL the user typed, and only it
    assert SECRET not in e.value.message


def test_a_git_file_naming_another_repository_is_not_followed(repo, tmp_path):
    """A work tree whose .git file names a repository of the auditor's (no linked work tree of it)."""
    private = tmp_path / "private"
    gitrepo.build(private, [Step("p", files=FILES, tag="v1")])
    fork = tmp_path / "checkout"
    fork.mkdir()
    (fork / ".git").write_text(f"gitdir: {private / '.git'}\n")
    _refused(fork, tmp_path, r"does not name this work tree back")
