"""Local upstream-test files and --with helpers are read as regular files only, bounded (fast)."""

from __future__ import annotations

import os

import pytest

from runner.app import upstream_layout
from runner.errors import BadInput


@pytest.mark.parametrize("make, why", [
    (lambda p, host: os.symlink(host, p), "symbolic link"),
    (lambda p, host: os.mkfifo(p), "not a regular file"),
    (lambda p, host: os.symlink("/dev/zero", p), "symbolic link"),
])
def test_a_helper_directory_holding_a_link_or_fifo_is_refused(tmp_path, make, why):
    host = tmp_path / "host.py"
    host.write_text("SECRET = 1\n")
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "ok.py").write_text("x = 1\n")
    make(helpers / "bad.py", host)
    test = tmp_path / "test_x.py"
    test.write_text("def test_x():\n    pass\n")
    with pytest.raises(BadInput, match=why):
        upstream_layout.local_helpers(test, [str(helpers)])


def test_a_directory_link_inside_a_helper_directory_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("SECRET = 1\n")
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "ok.py").write_text("x = 1\n")
    os.symlink(outside, helpers / "linked")
    got = upstream_layout.local_helpers(tmp_path / "test_x.py", [str(helpers)])
    assert got == {"helpers/ok.py": b"x = 1\n"}


def test_a_helper_whose_name_is_not_plain_is_refused(tmp_path):
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "a\nb.py").write_text("x = 1\n")
    with pytest.raises(BadInput, match="newline"):
        upstream_layout.local_helpers(tmp_path / "test_x.py", [str(helpers)])
