"""An environment a tree cannot alter: byte-code compiled by the host, read-only to runs, and a file
added or changed in it since it was sealed (a planted .pth or .pyc) makes it rebuilt."""

from __future__ import annotations

import os
import time

import pytest

from runner.store import envs, sources, specs
from tests.store.test_bytecode import FILES, imported

pytestmark = pytest.mark.slow  # the shared layer


@pytest.fixture
def tiny(cache, interp, tmp_path):
    src = tmp_path / "vendor"
    (src / "sglang" / "srt").mkdir(parents=True)
    (src / "sglang" / "__init__.py").write_text("")
    (src / "sglang" / "srt" / "mod.py").write_text(f"VALUE = {os.getpid()}\n")
    tree = sources.resolve(specs.parse(f"path:{src}"), cache)
    return tree, envs.env(tree, cache, interp)


def test_the_host_compiles_every_module_of_the_tree(tiny):
    _, environment = tiny
    compiled = {p.name for p in (environment.root / "tree").rglob("*.pyc")}
    assert {n.split(".")[0] for n in compiled} >= {"__init__", "mod"}


def test_a_tree_differing_in_one_file_compiles_only_that_file_and_imports_under_its_own_paths(cache, interp, tmp_path):
    token = f"{os.getpid()}-{time.time_ns()}"  # sources no earlier run of the session's store compiled
    built = []
    for name, b in (("release", "B = 1"), ("fork", "B = 2")):
        for rel, text in {**FILES, "sglang/b.py": f"{b}  # {token}\n", "sglang/c.py": f"C = {token!r}\n"}.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text(text)
        built.append(envs.env(sources.resolve(specs.parse(f"path:{tmp_path / name}"), cache), cache, interp))
    release, fork = (e.stamp.bytecode for e in built)
    assert release.modules == fork.modules == 5 and release.compiled >= 2  # 4 of the tree's, 1 stand-in
    assert (fork.compiled, fork.copied) == (1, 4)
    seen, log = imported(built[1].root / "tree", built[1].python)
    a = built[1].root / "tree" / "sglang" / "a.py"
    assert seen == {"co_filename": str(a), "traceback": str(a), "B": 2}
    assert f"code object from '{a.parent / '__pycache__' / ('a.' + interp.cache_tag + '.pyc')}'" in log


@pytest.mark.parametrize("plant", ["pyc", "pth", "rewrite"])
def test_a_planted_file_breaks_the_seal_and_the_environment_is_rebuilt(tiny, cache, interp, plant, capsys):
    tree, environment = tiny
    site = next(environment.root.glob("lib/python3*/site-packages"))
    if plant == "pyc":
        target = next((environment.root / "tree").rglob("mod.*.pyc"))
        data = target.read_bytes()
        target.write_bytes(data)  # same bytes, rewritten: its ctime moves
    elif plant == "pth":
        (site / "zz-planted.pth").write_text("import os\n")
    else:
        pth = site / "diffprobe.pth"
        stat = pth.stat()
        pth.write_text(pth.read_text())
        os.utime(pth, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with its old mtime put back
    again = envs.env(tree, cache, interp)
    assert "altered since it was sealed" in capsys.readouterr().err
    assert not (site / "zz-planted.pth").exists()
    assert again.root == environment.root and again.stamp.seal != environment.stamp.seal
    assert envs.env(tree, cache, interp).stamp.seal == again.stamp.seal  # and then it holds
