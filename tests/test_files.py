import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.files import building_dir, write_atomic
from runner.store import trees


def dirhash1(root: Path) -> str:
    return trees.digest(trees.read_back(root))


def _tree(root: Path) -> Path:
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("x = 1\n")
    (root / "sglang" / "srt" / "a.py").write_text("def f():\n    return 2\n")
    (root / "sglang" / "srt" / "name with space [1].json").write_text("{}")
    return root


def test_same_bytes_same_digest_wherever_they_live(tmp_path):
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert dirhash1(a) == dirhash1(b)
    assert dirhash1(a).startswith("h1:")


def test_one_byte_changes_the_digest(tmp_path):
    a = _tree(tmp_path / "a")
    before = dirhash1(a)
    (a / "sglang" / "srt" / "a.py").write_text("def f():\n    return 3\n")
    assert dirhash1(a) != before


def test_a_renamed_file_changes_the_digest(tmp_path):
    a = _tree(tmp_path / "a")
    before = dirhash1(a)
    os.rename(a / "sglang" / "srt" / "a.py", a / "sglang" / "srt" / "b.py")
    assert dirhash1(a) != before


def test_bytecode_caches_do_not_count(tmp_path):
    a = _tree(tmp_path / "a")
    before = dirhash1(a)
    (a / "sglang" / "__pycache__").mkdir()
    (a / "sglang" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert dirhash1(a) == before


def test_digest_matches_the_documented_shell_recipe(tmp_path):
    a = _tree(tmp_path / "a")
    recipe = (
        "find sglang -type f ! -path '*/__pycache__/*' ! -name '*.py[co]' -print0 | LC_ALL=C sort -z"
        " | xargs -0 sha256sum | sha256sum | cut -d' ' -f1 | xxd -r -p | base64"
    )
    out = subprocess.run(["sh", "-c", recipe], cwd=a, capture_output=True, text=True, check=True).stdout.strip()
    assert "h1:" + out == dirhash1(a)


def test_write_atomic_replaces_whole_file(tmp_path):
    target = tmp_path / "x.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_an_interrupted_build_is_never_an_entry(tmp_path):
    final = tmp_path / "entry"
    with pytest.raises(RuntimeError):
        with building_dir(final) as scratch:
            (scratch / "half").write_text("written")
            raise RuntimeError("crash half-way")
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_killed_build_is_never_an_entry_and_is_swept_later(tmp_path):
    """SIGKILL gives no chance to clean up: the scratch stays, but never under the final name."""
    final = tmp_path / "entry"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from pathlib import Path
        from runner.files import building_dir
        with building_dir(Path({str(final)!r})) as scratch:
            (scratch / "half").write_text("written")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == -signal.SIGKILL
    assert not final.exists()
    leftovers = list(tmp_path.glob(".building-entry-*"))
    assert len(leftovers) == 1
    with building_dir(final) as scratch:
        (scratch / "done").write_text("complete")
    assert (final / "done").read_text() == "complete"
    assert not list(tmp_path.glob(".building-entry-*"))
