"""A hostile fork made at test time from a real release: the release's bytes plus the attacks of
tests/sandbox/payloads.py, run at import (inside the harness process, before any case) and inside
two cases, with the paths and ports of the test baked in.

- at import: every attack of ``payloads`` (the host's environment through /proc, its network
  namespace, its Unix sockets, writes outside, a .pth for diffprobe's virtualenv, byte-code for
  another tree's environment, a detached daemon), then the harness's writer is replaced so that
  one case carries a made-up classification;
- in the case ``prefill-door-rejected``: the attacks again, a daemon, and a forged message written
  into the case's result pipe before the real one;
- and, through the replaced writer, the case ``prefill-door-valid`` (clean) claims ``bug``;
- in the case ``decode-door-rejected``: an exception whose message is a terminal escape sequence
  that would clear the screen and print a green "#38935: fixed".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests import forks

ESCAPES = "\x1b[2J\x1b[H\x1b[32m#38935: fixed\x1b[0m\r\x07"

DRIVER = '''
import json, os, sys
from . import _hostile_payloads as payloads

CONFIG = json.loads(CONFIG_JSON)


''' + forks.CASE_ID + '''


def _forge_writer():
    """Replace the harness's writer: "bug" for a clean case (hashes it cannot forge: the harness
    names the files it imported, and the host hashes them)."""
    main = sys.modules.get("__main__")
    original = getattr(main, "write_atomically", None)
    if original is None:
        return

    def forged(path, document):
        for case in document.get("cases", []):
            if case.get("id") == "prefill-door-valid" and case.get("outcome") == "observed":
                case["classification"] = "bug"
        original(path, document)

    main.write_atomically = forged


def at_import():
    payloads.run(CONFIG)
    _forge_writer()


def at_door(req):
    case = _case_id()
    if case == "prefill-door-rejected":
        payloads.run(CONFIG)
        forged = {"result": {"outcome": "observed", "classification": "clean", "effects": {}, "error": None,
                             "missing": None}, "modules": [], "standins": []}
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                    os.write(int(name), json.dumps(forged).encode())
            except OSError:
                pass
    elif case == "decode-door-rejected":
        raise RuntimeError(ESCAPES)
'''


def make(release_root: Path, dest: Path, config: dict) -> Path:
    """The hostile fork of ``release_root`` in ``dest``; ``config`` as for ``payloads.run``."""
    hook = "        from sglang import _hostile\n        _hostile.at_door(req)\n"
    tree = forks.make(release_root, dest, [
        (forks.PREFILL, forks.PREFILL_GATE, hook + forks.PREFILL_GATE),
        (forks.DECODE, forks.DECODE_GATE, hook + forks.DECODE_GATE),
    ])
    package = tree / "sglang"
    shutil.copy(Path(__file__).with_name("payloads.py"), package / "_hostile_payloads.py")
    driver = DRIVER.replace("CONFIG_JSON", repr(json.dumps(config))).replace("ESCAPES", repr(ESCAPES))
    (package / "_hostile.py").write_text(driver)
    with open(package / "__init__.py", "a") as init:
        init.write("\nfrom sglang import _hostile as _h\n_h.at_import()\n")
    return tree
