"""A greedy fork made at test time from a real release: the release's bytes plus one attack of
tests/sandbox/greedy.py, at import (inside the harness process, before any case) or inside the
case ``prefill-door-rejected``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests import forks

DRIVER = """
import sys
from . import _greedy as greedy

ATTACK, WHERE = ATTACK_AND_WHERE


""" + forks.CASE_ID + """


def attack():
    if ATTACK == "fork":
        greedy.fork_bomb()
    elif ATTACK == "balloon":
        greedy.balloon()
    else:
        greedy.one_file("/tmp/fill")


def at_door(req):
    if WHERE == "case" and _case_id() == "prefill-door-rejected":
        attack()
"""


def make(release_root: Path, dest: Path, attack: str, where: str) -> Path:
    """The fork of ``release_root`` in ``dest`` running ``attack`` ("fork", "balloon" or "write")
    ``where`` ("import" or "case")."""
    hook = "        from sglang import _greedy_driver\n        _greedy_driver.at_door(req)\n"
    tree = forks.make(release_root, dest, [(forks.PREFILL, forks.PREFILL_GATE, hook + forks.PREFILL_GATE)])
    package = tree / "sglang"
    shutil.copy(Path(__file__).with_name("greedy.py"), package / "_greedy.py")
    (package / "_greedy_driver.py").write_text(DRIVER.replace("ATTACK_AND_WHERE", repr((attack, where))))
    if where == "import":
        with open(package / "__init__.py", "a") as init:
            init.write("\nfrom sglang import _greedy_driver as _g\n_g.attack()\n")
    return tree
