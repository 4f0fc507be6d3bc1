"""The sandbox's resource limits against a greedy process (tests/sandbox/greedy.py as a script, no
SGLang): a fork bomb, a memory balloon and a 10 GiB write each stop at the limit they hit, the host
is left as it was, and the run records the limits in force. The limits are small here, so that
each attack ends fast and costs the machine little."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from runner.errors import BadInput
from runner.evidence.receipts import Limits
from runner.sandbox import bwrap, execute, limits
from runner.views.report import sources
from tests.sandbox import greedy
from tests.sandbox.host import processes_with

pytestmark = pytest.mark.needs("bubblewrap")
SMALL = "memory=512M,processes=48,address-space=2G,file-size=16M,open-files=256"


def _run(tmp_path: Path, attack: str, monkeypatch) -> tuple[dict | None, execute.Isolated]:
    monkeypatch.setenv(limits.VARIABLE, SMALL)
    work = tmp_path / attack
    code = work / "code"
    code.mkdir(parents=True)
    shutil.copy(greedy.__file__, code / "greedy.py")
    python = Path(os.path.realpath(sys.executable))
    run = execute.run_isolated([str(python), "-I", "-S", str(code / "greedy.py"), attack, str(work / "out")],
                               work_dir=work, timeout=120, read_only=[python.parents[1], code])
    try:
        return json.loads((work / "out" / "report.json").read_text()), run
    except (OSError, ValueError):  # no room left for it, or killed first
        return None, run


def test_the_limits_asked_for_are_read_and_bad_text_is_refused():
    assert limits.configured({}) == limits.DEFAULTS
    assert limits.configured({limits.VARIABLE: "memory=2G, open-files=100"}) == limits.DEFAULTS.model_copy(
        update={"memory": 2 << 30, "open_files": 100})
    for bad in ("memory=lots", "swap=1G", "processes=0", "memory"):
        with pytest.raises(BadInput):
            limits.configured({limits.VARIABLE: bad})


def test_a_fork_bomb_stops_at_the_process_limit(tmp_path, monkeypatch):
    report, run = _run(tmp_path, "fork", monkeypatch)
    assert run.isolation.limits.file_size == 16 << 20 and run.isolation.limits.open_files == 256
    if run.isolation.limits.processes is None:
        pytest.skip("no cgroup of our own can be made here: nothing bounds the number of processes")
    assert run.code == 0 and report["fork"] < 48, run.log_tail
    assert processes_with(str(tmp_path / "fork" / "code")) == []  # its children ended with the run


def test_a_memory_balloon_is_killed_at_the_memory_limit_or_refused_its_address_space(tmp_path, monkeypatch):
    report, run = _run(tmp_path, "balloon", monkeypatch)
    assert run.isolation.limits.address_space == 2 << 30
    if run.isolation.limits.memory:  # the kernel kills it at 512 MiB, all its processes together
        assert report is None and run.code == 128 + 9, run.log_tail
    else:  # refused (MemoryError) at the address-space limit
        assert report["balloon"] < 2 << 30


def test_a_ten_gib_write_stops_at_the_file_size_and_result_limits(tmp_path, monkeypatch):
    """Files of 16 MiB at most, all of them within the result tmpfs: what reaches the host's disk."""
    _, run = _run(tmp_path, "write", monkeypatch)
    files = list((tmp_path / "write" / "out").iterdir())
    assert files and all(p.stat().st_size <= 16 << 20 for p in files)
    assert sum(p.stat().st_size for p in files) <= bwrap.RESULTS_BYTES


def test_limits_are_recorded_and_reported_only_where_in_force():
    assert limits.merged(Limits(memory=1), Limits(open_files=2)) == Limits(memory=1, open_files=2)
    assert sources.resources(Limits(memory=8 << 30, processes=512, file_size=1 << 29)) == (
        "limits: memory 8 GiB, 512 processes, files up to 0.5 GiB")
    assert sources.resources(Limits()) == "limits: none recorded"  # a receipt from before limits


def test_only_regular_files_at_plain_paths_come_back_from_the_result_tmpfs(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"{}", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, link
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        add("./admission.json")
        add("./nested/outcomes.json")
        add("../escaped.json")
        add("/abs.json")
        add("./link.json", tarfile.SYMTYPE, link="/etc/passwd")
        add("./hard.json", tarfile.LNKTYPE, link="admission.json")
        add("./fifo", tarfile.FIFOTYPE)
    out = tmp_path / "run" / "out"
    out.mkdir(parents=True)
    execute.unpack(buffer.getvalue(), out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == ["admission.json", "nested/outcomes.json"]
    assert not (tmp_path / "run" / "escaped.json").exists() and not any(p.is_symlink() for p in out.rglob("*"))
    execute.unpack(b"not a tar" * 100, out)  # a damaged archive: nothing more, no exception


def test_a_group_we_may_make_but_not_join_is_neither_used_nor_claimed(monkeypatch, tmp_path):
    def refused(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(limits, "_try_join", refused)
    with limits.group(limits.DEFAULTS) as group:
        assert group.dirs == () and group.join() == [] and group.limits == Limits()
    monkeypatch.setenv(limits.VARIABLE, SMALL)
    work = tmp_path / "work"
    work.mkdir()
    run = execute.run_isolated(["/bin/true"], work_dir=work, timeout=60, read_only=[])
    assert run.code == 0 and run.isolation.limits.processes is None and run.isolation.limits.file_size == 16 << 20


def test_a_run_stopped_at_its_deadline_still_hands_back_what_it_wrote(tmp_path):
    """The deadline is kept inside the sandbox, so the result tmpfs is handed back after it (an
    upstream test file that hangs keeps the outcomes of the tests before it)."""
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out"
    run = execute.run_isolated(["/bin/sh", "-c", f"echo partial > {out}/outcomes.json; exec sleep 600"], work_dir=work,
                               timeout=2, read_only=[])
    assert run.code is None and (out / "outcomes.json").read_text() == "partial\n"


def test_progress_lines_reach_the_host_from_inside_the_sandbox_and_anything_else_there_is_skipped(tmp_path):
    """The harness's --progress-fd: counts only, done at most total; junk a tree writes there is not shown."""
    work = tmp_path / "work"
    work.mkdir()
    told: list[tuple[int, int]] = []
    reader = execute._Told(lambda done, total: told.append((done, total)))
    fd = reader.write_fd
    script = f"printf '2 5\\njunk\\n9 5\\n-1 5\\n3 5 7\\n' >&{fd}; printf '%s' '4 ' >&{fd}; sleep 0.1; printf '5\\n' >&{fd}"
    run = execute.run_isolated(["/bin/bash", "-c", script], work_dir=work, timeout=60, read_only=[], pass_fds=(fd,),
                               on_start=reader.close_write)
    reader.join(timeout=10)
    assert run.code == 0 and told == [(2, 5), (4, 5)]
